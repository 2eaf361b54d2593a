//! `_native.LiveDecoder`: a capture helper's stream (dumpcap's pcapng, tcpdump's pcap) decoded
//! from a pipe by the core with the GIL released, events handed over as soon as they are
//! decodable, the helper's own statistics blocks kept, and an optional byte-exact copy (`-w`).

use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use amqpscope_core::engine::Run;
use amqpscope_core::event::Event;
use amqpscope_core::jsonl::write_event;
use amqpscope_core::limits::Limits;
use amqpscope_core::tls::KeyLogFollower;
use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::decoder::{
    batch_result, body_mode, capture_error, detached, event_list, make_engine, stats_dict, stats_of,
};

/// Most events per live batch: a busy capture is handed over in batches this large, a quiet one
/// as soon as a packet completes something.
const LIVE_BATCH_EVENTS: usize = 4096;
/// A batch without events is returned after this long (checked when a read returns), so that
/// the caller's live summary keeps moving.
const LIVE_MAX_WAIT: Duration = Duration::from_millis(200);

#[pyclass(frozen, module = "amqpscope._native")]
pub struct LiveDecoder {
    run: Mutex<Run>,
}

impl LiveDecoder {
    /// The next live batch; None when the stream ended (the helper stopped) or a limit was hit.
    fn batch(&self, py: Python<'_>) -> PyResult<Option<Vec<Event>>> {
        let got = detached(py, &self.run, |run| {
            let mut out = Vec::new();
            run.next_batch_live(LIVE_BATCH_EVENTS, LIVE_MAX_WAIT, &mut out)
                .map(|more| (more, out))
        })?;
        batch_result(py, got)
    }
}

#[pymethods]
impl LiveDecoder {
    /// Decode the capture stream at `path` (a pipe: "/proc/self/fd/N", or a FIFO), as it arrives.
    /// Flows without packets for `idle_timeout_ns` are evicted; the run ends after the packet
    /// that completes `max_frames` AMQP frames; `copy_to` receives every record read.
    #[new]
    ///
    /// `tls_follow`: NSS key log files read as they grow (a client writing `SSLKEYLOGFILE` while
    /// the capture runs); a file that does not exist yet is looked for again.
    #[pyo3(signature = (path, tables, ports = vec![5672], show_credentials = false, keep_bodies = true, idle_timeout_ns = None, max_frames = None, copy_to = None, validation = None, ledger = false, tls_follow = vec![]))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: String,
        tables: &str,
        ports: Vec<u16>,
        show_credentials: bool,
        keep_bodies: bool,
        idle_timeout_ns: Option<i64>,
        max_frames: Option<u64>,
        copy_to: Option<String>,
        validation: Option<&str>,
        ledger: bool,
        tls_follow: Vec<PathBuf>,
    ) -> PyResult<LiveDecoder> {
        let limits = Limits {
            idle_timeout_ns,
            ..Limits::default()
        };
        let mut engine = make_engine(
            tables,
            validation,
            ports,
            show_credentials,
            keep_bodies,
            ledger,
            &limits,
        )?;
        if !tls_follow.is_empty() {
            engine.follow_tls_keylogs(KeyLogFollower::new(tls_follow));
        }
        let copy = match copy_to {
            Some(p) => Some(File::create(&p).map_err(|e| {
                PyOSError::new_err((e.raw_os_error().unwrap_or(0), e.to_string(), p.clone()))
            })?),
            None => None,
        };
        // Opening the pipe does not block (it is open already); the first read may.
        let mut reader = py
            .detach(|| amqpscope_core::capture::PacketReader::open(&path, &limits))
            .map_err(|e| capture_error(py, &e))?;
        reader.set_live(true);
        if let Some(f) = copy {
            reader.set_copy(Box::new(BufWriter::with_capacity(1 << 20, f)));
        }
        let mut run = Run::new(reader, engine, None);
        run.set_max_frames(max_frames);
        Ok(LiveDecoder {
            run: Mutex::new(run),
        })
    }

    /// The next events as amqpscope.events objects (possibly none yet), or None at the end.
    fn events<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        match self.batch(py)? {
            Some(events) => event_list(py, &events).map(Some),
            None => Ok(None),
        }
    }

    /// The next events as JSON lines (possibly empty), or None at the end.
    #[pyo3(signature = (body = "none"))]
    fn jsonl<'py>(&self, py: Python<'py>, body: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mode = body_mode(body)?;
        let Some(events) = self.batch(py)? else {
            return Ok(None);
        };
        let buf = py.detach(|| {
            let mut buf = Vec::with_capacity(events.len() * 256);
            for ev in &events {
                write_event(ev, mode, &mut buf);
            }
            buf
        });
        Ok(Some(PyBytes::new(py, &buf)))
    }

    /// The engine's counters, as `Decoder.stats()`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let got = detached(py, &self.run, |run| stats_of(&run.engine))?;
        stats_dict(py, got)
    }

    /// What the capture stream said about itself: packets read, AMQP frames, messages and connections
    /// opened, whether the run
    /// ended, the copy's write error, and the helper's Interface Statistics Blocks as a list of
    /// dicts (section, interface, ifrecv, ifdrop, filteraccept, osdrop, usrdeliv; None: absent).
    fn capture_stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (packets, (frames, messages, connections), done, copy_error, isbs) =
            detached(py, &self.run, |run| {
                let r = run.reader();
                (
                    r.packets_read(),
                    run.live_counts(),
                    run.done(),
                    r.copy_error().map(str::to_string),
                    r.interface_stats().clone(),
                )
            })?;
        let d = PyDict::new(py);
        d.set_item("packets", packets)?;
        d.set_item("frames", frames)?;
        d.set_item("messages", messages)?;
        d.set_item("connections", connections)?;
        d.set_item("done", done)?;
        d.set_item("copy_error", copy_error)?;
        let list = PyList::empty(py);
        for ((section, iface), st) in isbs {
            let s = PyDict::new(py);
            s.set_item("section", section)?;
            s.set_item("interface", iface)?;
            s.set_item("ifrecv", st.ifrecv)?;
            s.set_item("ifdrop", st.ifdrop)?;
            s.set_item("filteraccept", st.filteraccept)?;
            s.set_item("osdrop", st.osdrop)?;
            s.set_item("usrdeliv", st.usrdeliv)?;
            list.append(s)?;
        }
        d.set_item("interfaces", list)?;
        Ok(d)
    }
}

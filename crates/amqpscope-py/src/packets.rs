//! `_native.Engine`: the core fed with packets that Python already holds (live capture back ends,
//! tests that build packets), a batch at a time.

use std::path::PathBuf;
use std::sync::Mutex;

use amqpscope_core::engine::Engine as CoreEngine;
use amqpscope_core::limits::Limits;
use amqpscope_core::tls::KeyLogFollower;
use amqpscope_core::types::Packet;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::decoder::{detached, event_list, make_engine, stats_dict, stats_of};

#[pyclass(frozen, module = "amqpscope._native")]
pub struct Engine {
    engine: Mutex<CoreEngine>,
}

fn packet_of(obj: &Bound<'_, PyAny>) -> PyResult<Packet> {
    Ok(Packet {
        index: obj.getattr("index")?.extract()?,
        ts_ns: obj.getattr("ts_ns")?.extract()?,
        linktype: obj.getattr("linktype")?.extract()?,
        data: obj.getattr("data")?.extract()?,
        wirelen: obj.getattr("wirelen")?.extract()?,
    })
}

#[pymethods]
impl Engine {
    #[new]
    /// `tls_follow`: NSS key log files read as they grow (live capture in process).
    #[pyo3(signature = (tables, ports = vec![5672], show_credentials = false, keep_bodies = true, idle_timeout_ns = None, tls_keylog = None, validation = None, ledger = false, tls_follow = vec![]))]
    #[allow(clippy::too_many_arguments)] // Python keyword arguments
    fn new(
        tables: &str,
        ports: Vec<u16>,
        show_credentials: bool,
        keep_bodies: bool,
        idle_timeout_ns: Option<i64>,
        tls_keylog: Option<String>,
        validation: Option<&str>,
        ledger: bool,
        tls_follow: Vec<PathBuf>,
    ) -> PyResult<Engine> {
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
        if let Some(text) = tls_keylog {
            engine.add_tls_keys(&text);
        }
        if !tls_follow.is_empty() {
            engine.follow_tls_keylogs(KeyLogFollower::new(tls_follow));
        }
        Ok(Engine {
            engine: Mutex::new(engine),
        })
    }

    /// The events these packets (objects with index, ts_ns, linktype, data, wirelen) complete.
    fn feed<'py>(
        &self,
        py: Python<'py>,
        packets: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyList>> {
        let mut batch = Vec::new();
        for p in packets.try_iter()? {
            batch.push(packet_of(&p?)?);
        }
        let events = detached(py, &self.engine, move |e| {
            let mut out = Vec::new();
            for p in &batch {
                e.packet(p, &mut out);
            }
            out
        })?;
        event_list(py, &events)
    }

    /// More key log text (`sniff --tls-keylog` re-reads the file as it grows).
    fn add_tls_keylog(&self, py: Python<'_>, text: String) -> PyResult<usize> {
        detached(py, &self.engine, move |e| e.add_tls_keys(&text))
    }

    /// The end of the input: every flow is finished and closed.
    fn finish<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let events = detached(py, &self.engine, |e| {
            let mut out = Vec::new();
            e.finish(&mut out);
            out
        })?;
        event_list(py, &events)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let got = detached(py, &self.engine, |e| stats_of(e))?;
        stats_dict(py, got)
    }
}

//! `_native.Decoder`: a capture decoded by the core, handed to Python in batches, as event
//! objects (made only when asked for) or as JSON lines written in Rust.

use std::collections::{BTreeMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use amqpscope_core::capture::CaptureError;
use amqpscope_core::codec::Codec;
use amqpscope_core::engine::{Engine, Run, Select};
use amqpscope_core::event::{Accounting, Event};
use amqpscope_core::jsonl::{write_event, BodyMode};
use amqpscope_core::limits::Limits;
use amqpscope_core::session::Options;
use amqpscope_core::tables::SpecTables;
use amqpscope_core::types::TcpEvent;
use amqpscope_core::validate::{ValidationTables, Validator};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

/// Events decoded per trip into the core: large enough that the GIL hand-over is noise, small
/// enough that Ctrl-C is seen quickly and memory stays flat.
const BATCH_EVENTS: usize = 4096;

#[pyclass(frozen, module = "amqpscope._native")]
pub struct Decoder {
    run: Mutex<Run>,
    /// Events handed out by `arrow` so far: the `seq` of the next one.
    seq: AtomicU64,
}

pub fn body_mode(body: &str) -> PyResult<BodyMode> {
    match body {
        "none" => Ok(BodyMode::None),
        "preview" => Ok(BodyMode::Preview),
        "full" => Ok(BodyMode::Full),
        other => Err(PyValueError::new_err(format!(
            "body must be none, preview or full, not {other:?}"
        ))),
    }
}

/// The Python exception of a capture error (amqpscope.capture's classes, with the same exit codes).
pub fn capture_error(py: Python<'_>, err: &CaptureError) -> PyErr {
    let module = match py.import("amqpscope.capture") {
        Ok(m) => m,
        Err(e) => return e,
    };
    let made = match err {
        CaptureError::Unreadable(m) => module
            .getattr("CaptureUnreadable")
            .and_then(|c| c.call1((m,))),
        CaptureError::NotACapture(m) => module.getattr("NotACapture").and_then(|c| c.call1((m,))),
        CaptureError::Corrupt(m) => module.getattr("CorruptCapture").and_then(|c| c.call1((m,))),
        CaptureError::Truncated {
            message,
            packets_read,
        } => module
            .getattr("TruncatedCapture")
            .and_then(|c| c.call1((message, *packets_read))),
    };
    match made {
        Ok(exc) => PyErr::from_value(exc),
        Err(e) => e,
    }
}

/// A panic's message as the one line Python shows.
pub fn panic_error(panic: Box<dyn std::any::Any + Send>) -> PyErr {
    let what = panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    PyRuntimeError::new_err(format!("internal error in the native core: {what}"))
}

/// Run `f` on `cell`'s value with the GIL released; a panic becomes a one-line RuntimeError.
pub fn detached<S: Send, T: Send>(
    py: Python<'_>,
    cell: &Mutex<S>,
    f: impl FnOnce(&mut S) -> T + Send,
) -> PyResult<T> {
    py.detach(|| {
        let mut guard = match cell.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        catch_unwind(AssertUnwindSafe(|| f(&mut guard)))
    })
    .map_err(panic_error)
}

/// Core events as a list of amqpscope.events objects.
pub fn event_list<'py>(py: Python<'py>, events: &[Event]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for ev in events {
        list.append(crate::topy::event(py, ev)?)?;
    }
    Ok(list)
}

impl Decoder {
    /// The next batch of events (at least `min_events` unless the input ends); None when the
    /// input is done.
    pub(crate) fn batch(&self, py: Python<'_>, min_events: usize) -> PyResult<Option<Vec<Event>>> {
        let got = detached(py, &self.run, |run| {
            let mut out = Vec::with_capacity(min_events.min(1 << 20));
            run.next_batch(min_events, &mut out).map(|more| (more, out))
        })?;
        py.check_signals()?;
        batch_result(py, got)
    }
}

/// A trip into the core as Python sees it: None at the end, the events, or the capture error
/// (raised on the trip after the one that handed over what was decoded before it).
pub fn batch_result(
    py: Python<'_>,
    got: Result<(bool, Vec<Event>), CaptureError>,
) -> PyResult<Option<Vec<Event>>> {
    match got {
        Ok((false, out)) if out.is_empty() => Ok(None),
        Ok((_, out)) => Ok(Some(out)),
        Err(err) => Err(capture_error(py, &err)),
    }
}

#[pymethods]
impl Decoder {
    /// Decode `source` (a path, "-" for stdin, or a binary file object) with the spec `tables`
    /// (JSON from amqpscope.dissect.tables).
    ///
    /// `select(client, server)`, endpoints as `(address, port)`, is asked once per TCP flow: only
    /// the flows it accepts reach the AMQP session (Spark slices), all are reassembled.
    ///
    /// `tls_keylog`: NSS key log text (the contents of `--tls-keylog` files) for TLS connections.
    #[new]
    ///
    /// `validation`: the validation tables (JSON from amqpscope.validate.tables); with them every
    /// event is followed by the findings it proves.
    /// `ledger`: also emit the ledger's events (acks, confirms, pairs, heartbeats).
    #[pyo3(signature = (source, tables, ports = vec![5672], show_credentials = false, keep_bodies = true, max_packets = None, select = None, tls_keylog = None, validation = None, ledger = false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        source: &Bound<'_, PyAny>,
        tables: &str,
        ports: Vec<u16>,
        show_credentials: bool,
        keep_bodies: bool,
        max_packets: Option<u64>,
        select: Option<Py<PyAny>>,
        tls_keylog: Option<String>,
        validation: Option<&str>,
        ledger: bool,
    ) -> PyResult<Decoder> {
        let limits = Limits::default();
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
        if let Some(select) = select {
            engine = engine.with_select(flow_select(select));
        }
        let reader = crate::source::open(py, source, &limits)?;
        Ok(Decoder {
            run: Mutex::new(Run::new(reader, engine, max_packets)),
            seq: AtomicU64::new(0),
        })
    }

    /// More key log text (a key log file that grew): connections waiting for keys use it from
    /// their next record on. Returns the number of secrets added.
    fn add_tls_keylog(&self, py: Python<'_>, text: String) -> PyResult<usize> {
        detached(py, &self.run, move |run| run.engine.add_tls_keys(&text))
    }

    /// The next events as JSON lines (one bytes object), or None at the end.
    #[pyo3(signature = (body = "none"))]
    fn jsonl<'py>(&self, py: Python<'py>, body: &str) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mode = body_mode(body)?;
        let Some(events) = self.batch(py, BATCH_EVENTS)? else {
            return Ok(None);
        };
        let buf = py.detach(|| {
            let mut buf = Vec::with_capacity(events.len() * 512);
            for ev in &events {
                write_event(ev, mode, &mut buf);
            }
            buf
        });
        Ok(Some(PyBytes::new(py, &buf)))
    }

    /// The next events as amqpscope.events objects, or None at the end; with `kinds`, only the
    /// events of those kinds become objects (`validate` asks for findings alone).
    #[pyo3(signature = (kinds = None))]
    fn events<'py>(
        &self,
        py: Python<'py>,
        kinds: Option<HashSet<String>>,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        match (self.batch(py, BATCH_EVENTS)?, kinds) {
            (Some(events), None) => event_list(py, &events).map(Some),
            (Some(mut events), Some(kinds)) => {
                events.retain(|ev| kinds.contains(ev.kind()));
                event_list(py, &events).map(Some)
            }
            (None, _) => Ok(None),
        }
    }

    /// The next events as Arrow record batches of the Parquet tables, built by the core:
    /// `{table: ArrowBatch}` for every table that got rows (each implements the Arrow PyCapsule
    /// interface, so `pyarrow.record_batch(obj)` takes it without a copy), or None at the end.
    ///
    /// `tables`: table name → schema (anything with `__arrow_c_schema__`: the pyarrow schemas
    /// of amqpscope.spark.schema.TABLES); `constants`: column → value, the same on every row
    /// (capture, capture_id, capture_date); `kinds`: event kind → table name (schema's
    /// TABLE_OF_KIND; kinds of tables not asked for are dropped). A column the core cannot
    /// fill, or a table of a kind it does not make, is a ValueError before anything is decoded.
    /// At least `batch_events` events (of all kinds) are decoded per call unless the input ends.
    #[pyo3(signature = (tables, constants, kinds, batch_events = BATCH_EVENTS))]
    fn arrow<'py>(
        &self,
        py: Python<'py>,
        tables: &Bound<'py, PyDict>,
        constants: &Bound<'py, PyDict>,
        kinds: &Bound<'py, PyDict>,
        batch_events: usize,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let mut builders = crate::arrow::make_tables(tables, constants, kinds)?;
        let Some(events) = self.batch(py, batch_events.max(1))? else {
            return Ok(None);
        };
        let first_seq = self.seq.fetch_add(events.len() as u64, Ordering::Relaxed);
        let built = py
            .detach(move || {
                catch_unwind(AssertUnwindSafe(|| {
                    builders.append(&events, first_seq)?;
                    builders.finish()
                }))
            })
            .map_err(panic_error)?
            .map_err(crate::arrow::arrow_error)?;
        crate::arrow::batch_dict(py, built).map(Some)
    }

    /// Decode a trip of at least `batch_events` events (unless the input ends) into `sink`,
    /// which builds their batches here (the GIL released) and encodes them, on its writer thread
    /// while the next trip is decoded if it has one: the number of events, or None at the end.
    /// `event_kinds`: events of these kinds are also returned, as amqpscope.events objects,
    /// `(count, events)` (for the diagnoser of the diagnoses table).
    #[pyo3(signature = (sink, batch_events = BATCH_EVENTS, event_kinds = None))]
    fn to_sink<'py>(
        &self,
        py: Python<'py>,
        sink: &Bound<'py, crate::sink::ParquetSink>,
        batch_events: usize,
        event_kinds: Option<HashSet<String>>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(events) = self.batch(py, batch_events.max(1))? else {
            return Ok(None);
        };
        let n = events.len();
        let first_seq = self.seq.fetch_add(n as u64, Ordering::Relaxed);
        let objects = match &event_kinds {
            Some(kinds) => {
                let list = PyList::empty(py);
                for ev in events.iter().filter(|ev| kinds.contains(ev.kind())) {
                    list.append(crate::topy::event(py, ev)?)?;
                }
                Some(list)
            }
            None => None,
        };
        sink.get().events(py, events, first_seq)?;
        match objects {
            Some(list) => Ok(Some((n, list).into_pyobject(py)?.into_any())),
            None => Ok(Some(n.into_pyobject(py)?.into_any())),
        }
    }

    /// What the run saw so far: packets, tcp_packets, skipped (reason → count), and the byte
    /// accounting of every AMQP stream.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let got = detached(py, &self.run, |run| stats_of(&run.engine))?;
        stats_dict(py, got)
    }
}

/// The engine's `Select` for a Python predicate on a flow's endpoints, asked once per flow (with
/// the GIL taken for that call only). A predicate that raises rejects the flow.
fn flow_select(predicate: Py<PyAny>) -> Select {
    let mut own: HashSet<u64> = HashSet::new();
    Box::new(move |tev: &TcpEvent| match tev {
        TcpEvent::Open {
            flow,
            client,
            server,
            ..
        } => {
            let ep = |e: &amqpscope_core::types::Endpoint| (e.addr_text(), e.port);
            let keep = Python::attach(|py| {
                predicate
                    .bind(py)
                    .call1((ep(client), ep(server)))
                    .and_then(|r| r.is_truthy())
                    .unwrap_or(false)
            });
            if keep {
                own.insert(*flow);
            } else {
                own.remove(flow);
            }
            keep
        }
        TcpEvent::Data { flow, .. } | TcpEvent::Gap { flow, .. } | TcpEvent::Close { flow, .. } => {
            own.contains(flow)
        }
    })
}

/// An engine for the spec `tables` (JSON from amqpscope.dissect.tables) and these options, with
/// inline validation when `validation` tables are given.
pub fn make_engine(
    tables: &str,
    validation: Option<&str>,
    ports: Vec<u16>,
    show_credentials: bool,
    keep_bodies: bool,
    ledger: bool,
    limits: &Limits,
) -> PyResult<Engine> {
    let tables = SpecTables::from_json(tables).map_err(PyValueError::new_err)?;
    let options = Options {
        ports,
        show_credentials,
        keep_bodies,
        ..Options::default()
    };
    let engine = Engine::new(Codec::new(tables, limits), options, limits);
    // the ledger comes before the validator (ARCHITECTURE.md: session → ledger → validate)
    let engine = if ledger {
        engine.with_ledger(limits)
    } else {
        engine
    };
    Ok(match validation {
        Some(text) => {
            let checks = ValidationTables::from_json(text).map_err(PyValueError::new_err)?;
            engine.with_validator(Validator::new(Arc::new(checks), limits), limits)
        }
        None => engine,
    })
}

pub type Stats = (u64, u64, BTreeMap<String, u64>, Accounting);

pub fn stats_of(e: &Engine) -> Stats {
    (
        e.packets(),
        e.tcp_packets(),
        e.skipped().clone(),
        e.accounting(0),
    )
}

/// The engine's counters as the Python face's RunStats reads them.
pub fn stats_dict(
    py: Python<'_>,
    (packets, tcp, skipped, acc): Stats,
) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("packets", packets)?;
    d.set_item("tcp_packets", tcp)?;
    d.set_item("skipped", skipped)?;
    let a = PyDict::new(py);
    a.set_item("stream_bytes", acc.stream_bytes)?;
    a.set_item("frame_bytes", acc.frame_bytes)?;
    a.set_item("header_bytes", acc.header_bytes)?;
    a.set_item("gap_bytes", acc.gap_bytes)?;
    a.set_item("skipped_bytes", acc.skipped_bytes)?;
    a.set_item("pending_bytes", acc.pending_bytes)?;
    a.set_item("frames", acc.frames)?;
    a.set_item("tls_bytes", acc.tls_bytes)?;
    a.set_item("tls_opaque_bytes", acc.tls_opaque_bytes)?;
    d.set_item("accounting", a)?;
    Ok(d)
}

//! `_native.Ledger`: the core's ledger fed with Python events, for event streams that did not come
//! out of a decoder with the ledger on (hand-made events in tests, `analyse(amqpscope.read(…))`).

use std::sync::Mutex;

use amqpscope_core::event::Event;
use amqpscope_core::ledger::Ledger as CoreLedger;
use amqpscope_core::limits::Limits;
use amqpscope_core::tables::SpecTables;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::decoder::event_list;
use crate::frompy;

#[pyclass(frozen, module = "amqpscope._native")]
pub struct Ledger {
    ledger: Mutex<CoreLedger>,
}

/// Only the kinds the ledger reads are converted: the rest would be dropped by it anyway.
fn read_by_ledger(kind: &str) -> bool {
    matches!(kind, "frame" | "gap" | "connection")
}

#[pymethods]
impl Ledger {
    /// A ledger with the request/response pairs of the spec `tables` (JSON from
    /// amqpscope.dissect.tables).
    #[new]
    fn new(tables: &str) -> PyResult<Ledger> {
        let tables = SpecTables::from_json(tables).map_err(PyValueError::new_err)?;
        Ok(Ledger {
            ledger: Mutex::new(CoreLedger::new(&tables, &Limits::default())),
        })
    }

    /// The ledger events (`amqpscope.events.Ledger`) that `ev` causes; those of a connection
    /// close belong before it.
    fn feed<'py>(&self, ev: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let py = ev.py();
        let kind: String = ev.getattr("kind")?.extract()?;
        if !read_by_ledger(&kind) {
            return Ok(PyList::empty(py));
        }
        let core = frompy::event_rounded(ev)?;
        let mut out = Vec::new();
        {
            let mut ledger = match self.ledger.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            ledger.feed(&core, &mut out);
        }
        let events: Vec<Event> = out
            .into_iter()
            .map(|o| Event::Ledger(Box::new(o)))
            .collect();
        event_list(py, &events)
    }

    /// The end of the events: what every connection not closed yet still holds, as at the end
    /// of a capture (`packet` and `ts`, seconds, of the last event).
    fn finish<'py>(&self, py: Python<'py>, packet: u64, ts: f64) -> PyResult<Bound<'py, PyList>> {
        let mut out = Vec::new();
        {
            let mut ledger = match self.ledger.lock() {
                Ok(g) => g,
                Err(poisoned) => poisoned.into_inner(),
            };
            ledger.finish(packet, (ts * 1e9).round() as i64, &mut out);
        }
        let events: Vec<Event> = out
            .into_iter()
            .map(|o| Event::Ledger(Box::new(o)))
            .collect();
        event_list(py, &events)
    }
}

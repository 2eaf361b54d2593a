//! Hooks for the tests: Python events through the core's conversions and writer, so that any
//! Python-made event can be checked against the Rust output.

use amqpscope_core::event::Event;
use amqpscope_core::jsonl::{write_event, BodyMode};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList};

use crate::decoder::body_mode;
use crate::{frompy, topy};

// Panics inside these functions do not cross into Python: pyo3's trampoline catches them and
// raises `pyo3_runtime.PanicException` (a BaseException) instead.

/// Python event → core event → Python event (tests: the conversions lose nothing).
#[pyfunction]
pub fn _event_roundtrip<'py>(ev: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let core = frompy::event(ev)?;
    topy::event(ev.py(), &core)
}

/// The JSONL bytes the core writes for these Python events (tests: byte-equal to orjson's).
#[pyfunction]
pub fn _jsonl<'py>(events: &Bound<'py, PyList>, body: &str) -> PyResult<Bound<'py, PyBytes>> {
    let py = events.py();
    let (core, mode) = (core_events(events)?, body_mode(body)?);
    let out = py.detach(|| write_all(&core, mode));
    Ok(PyBytes::new(py, &out))
}

/// (bytes per pass, seconds for `passes` passes) of the core writing these events: the writer's
/// own speed, conversions from Python excluded.
#[pyfunction]
pub fn _jsonl_bench(events: &Bound<'_, PyList>, body: &str, passes: u32) -> PyResult<(usize, f64)> {
    let (core, mode) = (core_events(events)?, body_mode(body)?);
    Ok(events.py().detach(|| {
        let mut out = Vec::new();
        let start = std::time::Instant::now();
        for _ in 0..passes {
            out.clear();
            for ev in &core {
                write_event(ev, mode, &mut out);
            }
        }
        (out.len(), start.elapsed().as_secs_f64())
    }))
}

fn core_events(events: &Bound<'_, PyList>) -> PyResult<Vec<Event>> {
    events.iter().map(|ev| frompy::event(&ev)).collect()
}

fn write_all(events: &[Event], mode: BodyMode) -> Vec<u8> {
    let mut out = Vec::new();
    for ev in events {
        write_event(ev, mode, &mut out);
    }
    out
}

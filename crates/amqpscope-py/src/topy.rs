//! Core events to amqpscope.events objects. (Placeholder until the conversion lands.)

use amqpscope_core::event::Event;
use pyo3::prelude::*;

pub fn event<'py>(py: Python<'py>, ev: &Event) -> PyResult<Bound<'py, PyAny>> {
    Ok(pyo3::types::PyString::new(py, ev.kind()).into_any())
}

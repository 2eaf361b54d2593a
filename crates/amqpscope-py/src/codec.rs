//! `_native.Codec`: single payloads through the core's decoders (notebooks, tests). Captures never
//! come this way: the engine decodes them without a trip through Python per frame.

use amqpscope_core::codec::Codec as CoreCodec;
use amqpscope_core::limits::Limits;
use amqpscope_core::tables::SpecTables;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::topy;

#[pyclass(frozen, module = "amqpscope._native")]
pub struct Codec {
    codec: CoreCodec,
}

#[pymethods]
impl Codec {
    #[new]
    fn new(tables: &str) -> PyResult<Codec> {
        let tables = SpecTables::from_json(tables).map_err(PyValueError::new_err)?;
        Ok(Codec {
            codec: CoreCodec::new(tables, &Limits::default()),
        })
    }

    /// (class_id, method_id, name, known, args, problem) of a method frame's payload.
    fn decode_method<'py>(&self, py: Python<'py>, payload: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
        let m = self.codec.decode_method(payload);
        let args = topy::table(py, &m.args)?;
        (m.class_id, m.method_id, &*m.name, m.known, args, m.problem).into_pyobject(py)
    }

    /// (class_id, weight, body_size, properties, problem) of a content header's payload.
    fn decode_header<'py>(&self, py: Python<'py>, payload: &[u8]) -> PyResult<Bound<'py, PyTuple>> {
        let h = self.codec.decode_header(payload);
        let props = topy::table(py, &h.properties)?;
        (h.class_id, h.weight, h.body_size, props, h.problem).into_pyobject(py)
    }

    /// The entries of a field table body (no length prefix).
    fn decode_table_body<'py>(&self, py: Python<'py>, body: &[u8]) -> PyResult<Bound<'py, PyDict>> {
        topy::table(py, &self.codec.decode_table_body(body))
    }
}

//! Arrow hand-off: the core's record batches (`amqpscope_core::arrow`) to pyarrow through the
//! Arrow PyCapsule interface, and the tables' schemas in from pyarrow the same way. No pyarrow
//! import here: anything with `__arrow_c_schema__` is a schema, and what we return works with
//! `pyarrow.record_batch(obj)` (and any other consumer of `__arrow_c_array__`).

use std::sync::Arc;

use amqpscope_core::arrow::{
    schema_from_ffi, to_ffi, ArrowError, FFI_ArrowSchema, RecordBatch, Tables,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyCapsuleMethods, PyDict, PyTuple};

const ARROW_SCHEMA: &std::ffi::CStr = c"arrow_schema";
const ARROW_ARRAY: &std::ffi::CStr = c"arrow_array";

pub fn arrow_error(e: ArrowError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// One record batch of one table, made by the core. `__arrow_c_array__` exports it afresh on
/// every call (the buffers are shared, not copied), so it can be read more than once.
#[pyclass(frozen, module = "amqpscope._native")]
pub struct ArrowBatch {
    batch: RecordBatch,
}

#[pymethods]
impl ArrowBatch {
    /// The Arrow PyCapsule interface: ("arrow_schema", "arrow_array") capsules of a struct
    /// array of the columns. `requested_schema` is not applied: the batch has the schema it
    /// was built with (the consumer casts if it wants another).
    #[pyo3(signature = (requested_schema = None))]
    fn __arrow_c_array__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let _ = requested_schema;
        let (array, schema) = to_ffi(&self.batch).map_err(arrow_error)?;
        // Each capsule owns its struct; its Drop calls `release` unless the consumer moved the
        // struct out (then `release` is null), as the interface asks of a capsule destructor.
        let schema = PyCapsule::new_with_value(py, schema, ARROW_SCHEMA)?;
        let array = PyCapsule::new_with_value(py, array, ARROW_ARRAY)?;
        PyTuple::new(py, [schema.into_any(), array.into_any()])
    }

    #[getter]
    fn num_rows(&self) -> usize {
        self.batch.num_rows()
    }

    fn __len__(&self) -> usize {
        self.batch.num_rows()
    }

    fn __repr__(&self) -> String {
        format!(
            "<ArrowBatch {} rows × {} columns>",
            self.batch.num_rows(),
            self.batch.num_columns()
        )
    }
}

/// An Arrow schema from any object with `__arrow_c_schema__` (a `pyarrow.Schema`).
pub fn import_schema(obj: &Bound<'_, PyAny>) -> PyResult<amqpscope_core::arrow::Schema> {
    let capsule = obj.call_method0("__arrow_c_schema__")?;
    let capsule = capsule.cast::<PyCapsule>()?;
    let ptr = capsule.pointer_checked(Some(ARROW_SCHEMA))?;
    // SAFETY: a capsule named "arrow_schema" holds an `ArrowSchema` of the C data interface
    // (the interface's contract), which `FFI_ArrowSchema` lays out (#[repr(C)]). It is only
    // borrowed: the capsule, alive for this whole function, keeps ownership and releases it.
    let ffi = unsafe { ptr.cast::<FFI_ArrowSchema>().as_ref() };
    schema_from_ffi(ffi).map_err(arrow_error)
}

/// The builders for `tables` (table name → schema) with `constants` (column → value) and
/// `kinds` (event kind → table name; kinds of tables not asked for are passed over).
pub fn make_tables(
    tables: &Bound<'_, PyDict>,
    constants: &Bound<'_, PyDict>,
    kinds: &Bound<'_, PyDict>,
) -> PyResult<Tables> {
    let mut specs = Vec::with_capacity(tables.len());
    for (name, schema) in tables.iter() {
        let name: String = name.extract()?;
        let schema = Arc::new(import_schema(&schema)?);
        let mut of_table = Vec::new();
        for (kind, table) in kinds.iter() {
            let table: String = table.extract()?;
            if table == name {
                of_table.push(kind.extract::<String>()?);
            }
        }
        specs.push((name, schema, of_table));
    }
    let mut pairs: Vec<(String, String)> = Vec::with_capacity(constants.len());
    for (k, v) in constants.iter() {
        pairs.push((k.extract()?, v.extract()?));
    }
    let pairs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    Tables::new(specs, &pairs).map_err(arrow_error)
}

/// Batches as `{table: ArrowBatch}`.
pub fn batch_dict<'py>(
    py: Python<'py>,
    batches: Vec<(String, RecordBatch)>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (name, batch) in batches {
        d.set_item(name, Bound::new(py, ArrowBatch { batch })?)?;
    }
    Ok(d)
}

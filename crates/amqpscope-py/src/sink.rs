//! `_native.ParquetSink`: the Parquet tables of a decode, built by the core and encoded on a
//! thread of its own (`amqpscope_core::parquet_sink`); Python writes the bytes where the files go.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use amqpscope_core::event::Event;
use amqpscope_core::json_rows::batch_from_json;
use amqpscope_core::parquet_file::FileOptions;
use amqpscope_core::parquet_sink::Sink;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::decoder::{detached, panic_error};

#[pyclass(frozen, module = "amqpscope._native")]
pub struct ParquetSink {
    /// None once closed.
    sink: Mutex<Option<Sink>>,
}

fn closed() -> PyErr {
    PyValueError::new_err("the Parquet sink is closed")
}

impl ParquetSink {
    /// Run `f` on the open sink with the GIL released; its error or a panic as a ValueError or
    /// RuntimeError of one line.
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Sink) -> Result<T, String> + Send,
    ) -> PyResult<T> {
        match detached(py, &self.sink, |sink| sink.as_mut().map(f))? {
            None => Err(closed()),
            Some(r) => r.map_err(PyValueError::new_err),
        }
    }

    /// A decoder's trip of events (`Decoder.to_sink`): built into batches on this thread.
    pub fn events(&self, py: Python<'_>, events: Vec<Event>, first_seq: u64) -> PyResult<()> {
        self.with(py, move |s| s.events(events, first_seq))
    }
}

/// Each table's bytes as a Python `bytes` (a `Vec<u8>` would convert to a list of ints).
fn bytes_dict<'py>(
    py: Python<'py>,
    parts: BTreeMap<String, Vec<u8>>,
) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (table, bytes) in parts {
        d.set_item(table, PyBytes::new(py, &bytes))?;
    }
    Ok(d)
}

#[pymethods]
impl ParquetSink {
    /// `tables`, `constants`, `kinds` as for `Decoder.arrow`; `options`: `compression` (snappy,
    /// zstd, lz4, none), `dictionary`, `statistics` and `uncompressed` (column names), `row_group_rows`, and
    /// `thread`: encode on a writer thread (see `Sink::new`).
    #[new]
    fn new(
        tables: &Bound<'_, PyDict>,
        constants: &Bound<'_, PyDict>,
        kinds: &Bound<'_, PyDict>,
        options: &Bound<'_, PyDict>,
    ) -> PyResult<ParquetSink> {
        let builders = crate::arrow::make_tables(tables, constants, kinds)?;
        let item = |key: &str| {
            options
                .get_item(key)?
                .ok_or_else(|| PyValueError::new_err(format!("Parquet options without {key:?}")))
        };
        let options = FileOptions {
            compression: item("compression")?.extract()?,
            dictionary: item("dictionary")?.extract()?,
            statistics: item("statistics")?.extract()?,
            uncompressed: item("uncompressed")?.extract()?,
            row_group_rows: item("row_group_rows")?.extract()?,
        };
        let thread: bool = item("thread")?.extract()?;
        let sink = Sink::new(builders, options, thread).map_err(PyValueError::new_err)?;
        Ok(ParquetSink {
            sink: Mutex::new(Some(sink)),
        })
    }

    /// Rows of `table` made in Python (the few of the errors, captures and diagnoses tables):
    /// `schema` (a `pyarrow.Schema`) and the rows as a JSON array of objects
    /// (`amqpscope_core::json_rows`).
    fn write(
        &self,
        py: Python<'_>,
        table: &str,
        schema: &Bound<'_, PyAny>,
        rows: &[u8],
    ) -> PyResult<()> {
        let schema = Arc::new(crate::arrow::import_schema(schema)?);
        let batch = std::panic::catch_unwind(|| batch_from_json(schema, rows))
            .map_err(panic_error)?
            .map_err(|e| PyValueError::new_err(format!("{table}: {e}")))?;
        self.with(py, move |s| s.batch(table, batch))
    }

    /// No more events (`Decoder.to_sink`): `{table: rows}` the builder made of them, once it
    /// has. Batches (`write`) may still follow.
    fn end_events(&self, py: Python<'_>) -> PyResult<BTreeMap<String, u64>> {
        self.with(py, Sink::end_events)
    }

    /// `{table: bytes}` encoded since the last call: the next part of each table's file.
    fn take<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let parts = self.with(py, |s| s.take())?;
        bytes_dict(py, parts)
    }

    /// Wait for everything given to be encoded and end the files: `({table: bytes}, {table:
    /// rows})`, the last part of each file and the rows of every table that has one.
    fn close<'py>(&self, py: Python<'py>) -> PyResult<(Bound<'py, PyDict>, BTreeMap<String, u64>)> {
        let done = detached(py, &self.sink, |sink| sink.take().map(Sink::close))?
            .ok_or_else(closed)?
            .map_err(PyValueError::new_err)?;
        Ok((bytes_dict(py, done.bytes)?, done.rows))
    }
}

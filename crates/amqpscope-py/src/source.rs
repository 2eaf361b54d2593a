//! Where a capture comes from: a path ("-" for stdin) read by the core itself, or any Python
//! binary file object (BytesIO, a Hadoop stream in a Spark executor) read through its `read`.

use std::io::{self, Read};

use amqpscope_core::capture::PacketReader;
use amqpscope_core::limits::Limits;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A Python object with `read(n) -> bytes`, read with the GIL taken per call (the core calls it
/// once per large chunk, so the cost is noise).
struct PyReader {
    file: Py<PyAny>,
}

impl Read for PyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        Python::attach(|py| {
            let got = self
                .file
                .bind(py)
                .call_method1("read", (buf.len(),))
                .map_err(io::Error::other)?;
            let bytes = got
                .cast::<PyBytes>()
                .map_err(|e| io::Error::other(e.to_string()))?
                .as_bytes();
            let n = bytes.len().min(buf.len());
            buf[..n].copy_from_slice(&bytes[..n]);
            Ok(n)
        })
    }
}

/// Open `source`: a str path (or "-"), or a binary file object.
pub fn open(py: Python<'_>, source: &Bound<'_, PyAny>, limits: &Limits) -> PyResult<PacketReader> {
    if let Ok(path) = source.extract::<String>() {
        return py
            .detach(|| PacketReader::open(&path, limits))
            .map_err(|e| crate::decoder::capture_error(py, &e));
    }
    if let Ok(path) = source.call_method0("__fspath__") {
        let path: String = path.extract()?;
        return py
            .detach(|| PacketReader::open(&path, limits))
            .map_err(|e| crate::decoder::capture_error(py, &e));
    }
    let name: String = source
        .getattr("name")
        .and_then(|n| n.extract())
        .unwrap_or_else(|_| "<stream>".to_string());
    let reader = PyReader {
        file: source.clone().unbind(),
    };
    py.detach(|| PacketReader::from_reader(Box::new(reader), &name, limits))
        .map_err(|e| crate::decoder::capture_error(py, &e))
}

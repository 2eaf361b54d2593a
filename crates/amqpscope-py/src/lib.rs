//! `amqpscope._native`: the PyO3 binding of amqpscope-core. Thin by design: conversions between
//! Python and the core's plain data, the GIL released while the core works, panics caught at the
//! edge. All parsing lives in the core crate.

use pyo3::prelude::*;

// The core allocates per frame (values, strings, event buffers); glibc's malloc spent about 16% of
// decode in malloc/free/consolidate on the large capture. mimalloc, as pydantic-core and polars use.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod arrow;
mod codec;
mod decoder;
mod flows;
mod frompy;
mod ledger;
mod live;
mod packets;
mod reader;
mod sink;
mod source;
mod testing;
mod topy;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<arrow::ArrowBatch>()?;
    m.add_class::<codec::Codec>()?;
    m.add_class::<decoder::Decoder>()?;
    m.add_class::<packets::Engine>()?;
    m.add_class::<ledger::Ledger>()?;
    m.add_class::<live::LiveDecoder>()?;
    m.add_class::<reader::PacketReader>()?;
    m.add_class::<sink::ParquetSink>()?;
    m.add_function(wrap_pyfunction!(flows::flow_weights, m)?)?;
    m.add_function(wrap_pyfunction!(testing::_event_roundtrip, m)?)?;
    m.add_function(wrap_pyfunction!(testing::_jsonl, m)?)?;
    m.add_function(wrap_pyfunction!(testing::_jsonl_bench, m)?)?;
    m.add_function(wrap_pyfunction!(testing::_build_floor, m)?)?;
    Ok(())
}

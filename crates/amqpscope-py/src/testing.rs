//! Hooks for the tests: Python events through the core's conversions and writer, so that any
//! Python-made event can be checked against the Rust output.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use amqpscope_core::arrow::ArrowError;
use amqpscope_core::event::Event;
use amqpscope_core::jsonl::{write_event, BodyMode};
use arrow_array::builder::{
    BooleanBuilder, Int64Builder, ListBuilder, MapBuilder, PrimitiveBuilder, StringBuilder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, ArrayRef, ArrowPrimitiveType};
use arrow_schema::{DataType, TimeUnit};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::decoder::{body_mode, Decoder};
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

/// What building the tables costs against its floor, on the trips of `decoder` (bench/arrow.py):
/// `(rows, build, floor)`, the rows of every table, the seconds the core spends building them
/// (`Tables::append` and `finish`), and the seconds spent appending the same cells, read from
/// the built batches, into fresh builders of their types: each value on its own, each run of
/// nulls at once. The floor is what any build pays that appends each value once (one made
/// straight from the session's state included), whatever it reads the values from. Wall
/// seconds of this thread: run it pinned to a core.
#[pyfunction]
#[pyo3(signature = (decoder, tables, constants, kinds, batch_events))]
pub fn _build_floor(
    decoder: &Bound<'_, Decoder>,
    tables: &Bound<'_, PyDict>,
    constants: &Bound<'_, PyDict>,
    kinds: &Bound<'_, PyDict>,
    batch_events: usize,
) -> PyResult<(u64, f64, f64)> {
    let py = decoder.py();
    let dec = decoder.get();
    let mut builders = crate::arrow::make_tables(tables, constants, kinds)?;
    let (mut rows, mut build, mut floor, mut seq) = (0u64, 0.0, 0.0, 0u64);
    while let Some(events) = dec.batch(py, batch_events.max(1))? {
        let n = events.len() as u64;
        let trip = py
            .detach(|| -> Result<(u64, f64, f64), ArrowError> {
                let t = Instant::now();
                builders.append(&events, seq)?;
                let batches = builders.finish()?;
                let built = t.elapsed().as_secs_f64();
                let t = Instant::now();
                let mut made = 0;
                for (_, batch) in &batches {
                    made += batch.num_rows() as u64;
                    for column in batch.columns() {
                        std::hint::black_box(rebuilt(column.as_ref())?);
                    }
                }
                Ok((made, built, t.elapsed().as_secs_f64()))
            })
            .map_err(crate::arrow::arrow_error)?;
        seq += n;
        rows += trip.0;
        build += trip.1;
        floor += trip.2;
    }
    Ok((rows, build, floor))
}

/// `each(Ok(range))` for each run of valid cells of `array`, `each(Err(n))` for each run of `n`
/// nulls (appended at once, as the core appends a kind's missing fields).
fn runs(array: &dyn Array, mut each: impl FnMut(Result<Range<usize>, usize>)) {
    let Some(nulls) = array.nulls() else {
        return each(Ok(0..array.len()));
    };
    let mut at = 0;
    for (start, end) in nulls.valid_slices() {
        if start > at {
            each(Err(start - at));
        }
        each(Ok(start..end));
        at = end;
    }
    if array.len() > at {
        each(Err(array.len() - at));
    }
}

/// `rebuilt` for the primitive types (integers, floats, timestamps with their unit and zone).
fn rebuilt_primitive<T: ArrowPrimitiveType>(array: &dyn Array) -> ArrayRef {
    let a = array.as_primitive::<T>();
    let mut b = PrimitiveBuilder::<T>::with_capacity(a.len()).with_data_type(a.data_type().clone());
    runs(array, |run| match run {
        Ok(r) => r.for_each(|i| b.append_value(a.value(i))),
        Err(k) => b.append_nulls(k),
    });
    Arc::new(b.finish())
}

/// `array` appended into a fresh builder of its type: each value on its own (as a build from
/// the session would get them, one at a time), each run of nulls at once.
fn rebuilt(array: &dyn Array) -> Result<ArrayRef, ArrowError> {
    let n = array.len();
    Ok(match array.data_type() {
        DataType::Int64 => rebuilt_primitive::<Int64Type>(array),
        DataType::Float64 => rebuilt_primitive::<Float64Type>(array),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            rebuilt_primitive::<TimestampMicrosecondType>(array)
        }
        DataType::Boolean => {
            let (a, mut b) = (array.as_boolean(), BooleanBuilder::with_capacity(n));
            runs(array, |run| match run {
                Ok(r) => r.for_each(|i| b.append_value(a.value(i))),
                Err(k) => b.append_nulls(k),
            });
            Arc::new(b.finish())
        }
        DataType::Utf8 => {
            let a = array.as_string::<i32>();
            let mut b = StringBuilder::with_capacity(n, a.value_data().len());
            runs(array, |run| match run {
                Ok(r) => r.for_each(|i| b.append_value(a.value(i))),
                Err(k) => b.append_nulls(k),
            });
            Arc::new(b.finish())
        }
        DataType::Map(_, _) => {
            let map = array.as_map();
            let (keys, values) = (
                map.keys().as_string::<i32>(),
                map.values().as_string::<i32>(),
            );
            let mut b = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
            for row in 0..map.len() {
                if map.is_null(row) {
                    b.append(false)?;
                    continue;
                }
                let offsets = map.value_offsets();
                for i in offsets[row] as usize..offsets[row + 1] as usize {
                    b.keys().append_value(keys.value(i));
                    b.values()
                        .append_option(values.is_valid(i).then(|| values.value(i)));
                }
                b.append(true)?;
            }
            Arc::new(b.finish())
        }
        DataType::List(item) if item.data_type() == &DataType::Int64 => {
            let list = array.as_list::<i32>();
            let mut b = ListBuilder::new(Int64Builder::new());
            for row in list.iter() {
                match row {
                    Some(items) => {
                        items
                            .as_primitive::<Int64Type>()
                            .iter()
                            .for_each(|v| b.values().append_option(v));
                        b.append(true);
                    }
                    None => b.append(false),
                }
            }
            Arc::new(b.finish())
        }
        other => {
            return Err(ArrowError::NotYetImplemented(format!(
                "no cell-by-cell rebuild of {other}"
            )))
        }
    })
}

//! `_native.flow_weights`: how much work each TCP flow of a capture's first bytes is, for planning
//! Spark slices (amqpscope.spark.split). Per packet, so it runs in the core like everything else.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};

use amqpscope_core::limits::Limits;
use amqpscope_core::net::SegmentParser;
use amqpscope_core::types::Endpoint;
use pyo3::prelude::*;

use crate::decoder::{capture_error, panic_error};

type PyEndpoint = (String, u16);

/// ((address, port), (address, port), weight) per flow seen in the first `plan_bytes` of
/// `source` (16 bytes of record header counted per packet): payload bytes plus `packet_weight`
/// per packet. The endpoints come in the order Python's `min`/`max` of `(address, port)` tuples
/// gives, so that the key is the same from both directions.
#[pyfunction]
pub fn flow_weights(
    py: Python<'_>,
    source: &Bound<'_, PyAny>,
    plan_bytes: u64,
    packet_weight: u64,
) -> PyResult<Vec<(PyEndpoint, PyEndpoint, u64)>> {
    let mut reader = crate::source::open(py, source, &Limits::default())?;
    let got = py
        .detach(move || {
            catch_unwind(AssertUnwindSafe(move || {
                let mut parser = SegmentParser::new();
                let mut weight: HashMap<(Endpoint, Endpoint), u64> = HashMap::new();
                let mut seen = 0u64;
                while let Some(pkt) = reader.next_packet()? {
                    seen += pkt.data.len() as u64 + 16;
                    if let Some(seg) = parser.parse(&pkt) {
                        let key = if text(&seg.src) <= text(&seg.dst) {
                            (seg.src, seg.dst)
                        } else {
                            (seg.dst, seg.src)
                        };
                        *weight.entry(key).or_default() += seg.payload.len() as u64 + packet_weight;
                    }
                    if seen >= plan_bytes {
                        break;
                    }
                }
                Ok(weight
                    .into_iter()
                    .map(|((a, b), w)| (text(&a), text(&b), w))
                    .collect())
            }))
        })
        .map_err(panic_error)?;
    got.map_err(|e| capture_error(py, &e))
}

fn text(e: &Endpoint) -> PyEndpoint {
    (e.addr_text(), e.port)
}

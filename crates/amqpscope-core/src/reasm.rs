//! TCP reassembly: segments to in-order bytes, gaps and flow events. (Port in progress.)

use crate::limits::Limits;
use crate::types::{Segment, TcpEvent};

/// Stateful reassembler: feed segments in capture order, then `finish`.
pub struct Reassembler {
    _limits: Limits,
}

impl Reassembler {
    pub fn new(limits: &Limits) -> Reassembler {
        Reassembler {
            _limits: limits.clone(),
        }
    }

    pub fn feed(&mut self, _seg: &Segment<'_>, _out: &mut Vec<TcpEvent>) {}

    /// Flush every flow at the end of the capture (holes become gaps, flows close as "eof").
    pub fn finish(&mut self, _out: &mut Vec<TcpEvent>) {}

    /// Out-of-order bytes currently held across all flows.
    pub fn buffered_bytes(&self) -> u64 {
        0
    }

    /// Flows currently tracked (including recently closed ones).
    pub fn flow_count(&self) -> usize {
        0
    }
}

//! Link, IP and TCP parsing: packets to TCP segments. (Port in progress.)

use std::collections::BTreeMap;

use crate::types::{Packet, Segment};

/// Parses packets to TCP segments and counts why others were skipped.
#[derive(Debug, Default)]
pub struct SegmentParser {
    /// Reason → packets skipped for it.
    pub skipped: BTreeMap<String, u64>,
    /// Parsed but worth reporting (snaplen, IP fragmentation).
    pub notes: BTreeMap<String, u64>,
    pub unsupported_linktypes: BTreeMap<u32, u64>,
}

impl SegmentParser {
    pub fn new() -> SegmentParser {
        SegmentParser::default()
    }

    /// The TCP segment in `pkt`, or None (and the reason counted).
    pub fn parse<'a>(&mut self, _pkt: &'a Packet) -> Option<Segment<'a>> {
        None
    }
}

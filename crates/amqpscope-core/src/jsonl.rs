//! JSON lines, written into a reused buffer, byte-identical to the Python face's records.
//! (In progress.)

use crate::event::Event;

/// What `--body` adds to message records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    None,
    Preview,
    Full,
}

/// Append the JSON line of `ev` (with its newline) to `out`.
pub fn write_event(_ev: &Event, _body: BodyMode, _out: &mut Vec<u8>) {}

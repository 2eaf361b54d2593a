//! The field-table decoder, and method and header payloads (which hold tables), on any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let limits = common::limits();
    let codec = common::codec(&limits);
    let _ = codec.decode_table_body(data);
    let _ = codec.decode_method(data);
    let _ = codec.decode_header(data);
});

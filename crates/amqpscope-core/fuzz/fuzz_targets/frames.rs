//! The frame walker over one direction: pieces of bytes, gaps between some of them, then the end.
//! Every byte must be accounted for, whatever the input.
#![no_main]

use amqpscope_core::frames::FrameStream;
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let limits = common::limits();
    let codec = common::codec(&limits);
    let mut stream = FrameStream::new(mode & 1 == 1, &limits);
    let mut out = Vec::new();
    for (i, piece) in common::pieces(rest).into_iter().enumerate() {
        if mode & 2 == 2 && i % 3 == 2 {
            stream.gap(piece.len() as u64, i as u64, 0, &mut out);
        } else {
            stream.feed(piece, i as u64, 0, &codec, &mut out);
        }
    }
    stream.finish(&codec, &mut out);
    let a = stream.accounting;
    assert_eq!(
        a.frame_bytes + a.header_bytes + a.skipped_bytes + a.pending_bytes,
        a.stream_bytes
    );
});

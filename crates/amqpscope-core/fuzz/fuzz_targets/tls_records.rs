//! The TLS record layer of one connection: pieces of bytes from either side, gaps between some of
//! them. A key log holds secrets for the client random 0x00…00 (every label, TLS 1.2 and 1.3), so
//! inputs that start with such a ClientHello reach key derivation and the AEADs. Nothing may panic,
//! buffers stay within the limits, and the counters stay consistent.
#![no_main]

use amqpscope_core::limits::Limits;
use amqpscope_core::tls::{KeyLog, TlsConn, TlsOuts};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let limits = Limits {
        tls_held_bytes: 1 << 16,
        tls_handshake_bytes: 1 << 16,
        tls_seq_search: 8,
        ..Limits::default()
    };
    let mut keylog = KeyLog::new(16);
    let random = "00".repeat(32);
    let mut text = format!("CLIENT_RANDOM {random} {}\n", "11".repeat(48));
    for label in [
        "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "CLIENT_TRAFFIC_SECRET_0",
        "SERVER_TRAFFIC_SECRET_0",
    ] {
        text += &format!("{label} {random} {}\n", "22".repeat(if mode & 4 == 4 { 48 } else { 32 }));
    }
    if mode & 8 == 0 {
        keylog.add_text(&text);
    }
    let mut conn = TlsConn::new();
    let mut out = TlsOuts::default();
    for (i, piece) in common::pieces(rest).into_iter().enumerate() {
        let from_client = (piece.first().copied().unwrap_or(0) ^ mode) & 1 == 0;
        if mode & 2 == 2 && i % 4 == 3 {
            conn.gap(from_client, piece.len() as u64, i as u64, 0, &mut out);
        } else {
            conn.feed(from_client, piece, i as u64, 0, &keylog, &limits, &mut out);
        }
        if i == 5 && mode & 8 == 8 {
            keylog.add_text(&text); // keys that arrive late: what waited for them is opened now
            conn.keys_added(&keylog, &limits, &mut out);
        }
        assert!(conn.buffered() <= 2 * (limits.tls_held_bytes + limits.tls_handshake_bytes) + 4 * 17_000);
    }
    let s = conn.summary();
    assert!(s.records_decrypted + s.records_failed <= s.records);
    assert!(s.opaque_bytes <= s.bytes_c2s + s.bytes_s2c);
});

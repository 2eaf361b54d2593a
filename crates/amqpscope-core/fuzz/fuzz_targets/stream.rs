//! A whole connection: pieces alternate between the two directions (a piece's first byte picks the
//! direction, a gap or a close), through the session with its negotiation, channels and content,
//! and the session's events through the ledger.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};

use amqpscope_core::ledger::Ledger;
use amqpscope_core::session::{Options, Session};
use amqpscope_core::types::{CloseHow, Endpoint, TcpEvent};
use libfuzzer_sys::fuzz_target;

#[path = "common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let limits = common::limits();
    let codec = common::codec(&limits);
    let mut ledger = Ledger::new(codec.tables(), &limits);
    let mut session = Session::new(codec, Options::default(), &limits);
    let ep = |port| Endpoint {
        addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
        port,
    };
    // the server's port is AMQP's, or not: then the heuristics decide
    let (client, server) = (ep(40000), ep(if mode & 1 == 1 { 5672 } else { 7000 }));
    let mut out = Vec::new();
    let open = TcpEvent::Open {
        flow: 0,
        client,
        server,
        syn_seen: mode & 2 == 2,
        packet: 1,
        ts_ns: 0,
    };
    session.handle(open, &mut out);
    for (i, piece) in common::pieces(rest).into_iter().enumerate() {
        let packet = i as u64 + 2;
        let Some((&how, bytes)) = piece.split_first() else {
            continue;
        };
        let (src, dst) = if how & 1 == 0 {
            (client, server)
        } else {
            (server, client)
        };
        let tev = match how >> 5 {
            0 => TcpEvent::Gap {
                flow: 0,
                src,
                dst,
                size: u64::from(how),
                packet,
                ts_ns: 0,
            },
            _ => TcpEvent::Data {
                flow: 0,
                src,
                dst,
                data: bytes.to_vec(),
                packet,
                ts_ns: 0,
                // what a packet acknowledges of the other stream: any value, a close may be proven
                acked: Some(u32::from(how) * 64),
            },
        };
        session.handle(tev, &mut out);
    }
    session.handle(
        TcpEvent::Close {
            flow: 0,
            how: CloseHow::Eof,
            packet: u64::MAX,
            ts_ns: 0,
            fin: None,
            rst: None,
        },
        &mut out,
    );
    let mut records = Vec::new();
    for ev in &out {
        ledger.feed(ev, &mut records);
    }
    let a = session.accounting();
    assert_eq!(
        a.frame_bytes + a.header_bytes + a.skipped_bytes + a.pending_bytes,
        a.stream_bytes
    );
});

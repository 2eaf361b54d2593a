//! Capture → segments → TCP events, one line each: the native side of tools/native_diff_tcp.py.
//!
//! `cargo run --release --example tcp_events -- CAPTURE [--count] [LIMIT N]…`, LIMIT one of
//! --max-flows, --idle-timeout-ns, --ooo-bytes, --ooo-segments, --ooo-total, --linger-ns.
//!
//! Lines (fields separated by one space; endpoints as `addr:port` / `[addr]:port`):
//!   open FLOW CLIENT SERVER SYN(0|1) PACKET TS
//!   data FLOW SRC DST LEN CRC32 PACKET TS
//!   gap FLOW SRC DST SIZE PACKET TS
//!   close FLOW HOW PACKET TS
//! then `packets N`, `tcp N`, every skipped / notes / unsupported / stats counter (sorted), and
//! `error CLASS EXIT MESSAGE` when the capture could not be read to its end (the events of what
//! was read, and of `finish`, come first). `--count` prints only the totals; the time and speed
//! go to stderr.

use std::io::{BufWriter, Write};
use std::time::Instant;

use amqpscope_core::capture::PacketReader;
use amqpscope_core::limits::Limits;
use amqpscope_core::net::SegmentParser;
use amqpscope_core::reasm::Reassembler;
use amqpscope_core::types::TcpEvent;

fn write_event(w: &mut impl Write, e: &TcpEvent) -> std::io::Result<()> {
    match e {
        TcpEvent::Open {
            flow,
            client,
            server,
            syn_seen,
            packet,
            ts_ns,
        } => writeln!(
            w,
            "open {flow} {client} {server} {} {packet} {ts_ns}",
            *syn_seen as u8
        ),
        TcpEvent::Data {
            flow,
            src,
            dst,
            data,
            packet,
            ts_ns,
        } => {
            let mut crc = flate2::Crc::new();
            crc.update(data);
            writeln!(
                w,
                "data {flow} {src} {dst} {} {:08x} {packet} {ts_ns}",
                data.len(),
                crc.sum()
            )
        }
        TcpEvent::Gap {
            flow,
            src,
            dst,
            size,
            packet,
            ts_ns,
        } => writeln!(w, "gap {flow} {src} {dst} {size} {packet} {ts_ns}"),
        TcpEvent::Close {
            flow,
            how,
            packet,
            ts_ns,
        } => writeln!(w, "close {flow} {} {packet} {ts_ns}", how.as_str()),
    }
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = None;
    let mut count_only = false;
    let mut limits = Limits::default();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--count" => count_only = true,
            flag @ ("--idle-timeout-ns" | "--max-flows" | "--ooo-bytes" | "--ooo-segments"
            | "--ooo-total" | "--linger-ns") => {
                let Some(v) = it.next().and_then(|v| v.parse::<i64>().ok()) else {
                    eprintln!("{flag} needs a number");
                    std::process::exit(2);
                };
                match flag {
                    "--idle-timeout-ns" => limits.idle_timeout_ns = Some(v),
                    "--max-flows" => limits.max_flows = v as u64,
                    "--ooo-bytes" => limits.ooo_bytes_per_dir = v as u64,
                    "--ooo-segments" => limits.ooo_segments_per_dir = v as u64,
                    "--ooo-total" => limits.ooo_bytes_total = v as u64,
                    _ => limits.closed_linger_ns = v,
                }
            }
            _ => path = Some(a.clone()),
        }
    }
    let Some(path) = path else {
        eprintln!("usage: tcp_events CAPTURE [--count] [--max-flows|--idle-timeout-ns|--ooo-bytes|--ooo-segments|--ooo-total|--linger-ns N]…");
        std::process::exit(2);
    };
    let out = std::io::stdout();
    let mut w = BufWriter::with_capacity(1 << 16, out.lock());
    let started = Instant::now();
    let mut parser = SegmentParser::new();
    let mut reasm = Reassembler::new(&limits);
    let mut events: Vec<TcpEvent> = Vec::new();
    let (mut packets, mut tcp, mut n_events, mut bytes) = (0u64, 0u64, 0u64, 0u64);
    let mut error = None;
    match PacketReader::open(&path, &limits) {
        Err(e) => error = Some(e),
        Ok(mut reader) => loop {
            match reader.next_packet() {
                Ok(Some(p)) => {
                    packets += 1;
                    bytes += p.data.len() as u64 + 16;
                    if let Some(seg) = parser.parse(&p) {
                        tcp += 1;
                        reasm.feed(&seg, &mut events);
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
            if !events.is_empty() {
                n_events += events.len() as u64;
                if !count_only {
                    for e in &events {
                        write_event(&mut w, e)?;
                    }
                }
                events.clear();
            }
        },
    }
    reasm.finish(&mut events);
    n_events += events.len() as u64;
    if !count_only {
        for e in &events {
            write_event(&mut w, e)?;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    writeln!(w, "packets {packets}")?;
    writeln!(w, "tcp {tcp}")?;
    if count_only {
        writeln!(w, "events {n_events}")?;
    }
    for (k, v) in &parser.skipped {
        writeln!(w, "skipped {k}\t{v}")?;
    }
    for (k, v) in &parser.notes {
        writeln!(w, "notes {k}\t{v}")?;
    }
    for (k, v) in &parser.unsupported_linktypes {
        writeln!(w, "unsupported {k}\t{v}")?;
    }
    let mut stats = reasm.stats();
    stats.sort();
    for (k, v) in stats {
        writeln!(w, "stats {k}\t{v}")?;
    }
    writeln!(w, "buffered {}", reasm.buffered_bytes())?;
    if let Some(e) = &error {
        let read = match e {
            amqpscope_core::capture::CaptureError::Truncated { packets_read, .. } => *packets_read,
            _ => 0,
        };
        writeln!(
            w,
            "error {} {} {} | packets_read {read}",
            e.class_name(),
            e.exit_code(),
            e.message()
        )?;
    }
    w.flush()?;
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "{packets} packets, {n_events} events, {:.3} s: {:.0} MB/s of file ({:.0} MB/s of records)",
        secs,
        size as f64 / secs / 1e6,
        bytes as f64 / secs / 1e6
    );
    Ok(())
}

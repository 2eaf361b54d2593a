//! The Rust half of tools/native_diff_codec.py: reads the chunks/gaps/payloads input the Python
//! side wrote, runs FrameStream and the codecs (0-9-1 and 0-9), and prints the same JSON dump.
//!
//!     codec_diff TABLES-0-9-1.json TABLES-0-9.json INPUT.txt [--bench]
//!
//! With `--bench` it prints decode timings (ns per method/header frame) instead of the dump.

use amqpscope_core::codec::Codec;
use amqpscope_core::frames::{FrameStream, StreamItem};
use amqpscope_core::limits::Limits;
use amqpscope_core::tables::SpecTables;
use amqpscope_core::value::{Table, Value};
use std::fmt::Write as _;
use std::io::{BufRead, BufWriter, Write};
use std::time::Instant;

fn main() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        return Err(
            "usage: codec_diff TABLES-0-9-1.json TABLES-0-9.json INPUT.txt [--bench]".into(),
        );
    }
    let limits = Limits::default();
    let load = |p: &str| -> Result<Codec, String> {
        let text = std::fs::read_to_string(p).map_err(|e| format!("{p}: {e}"))?;
        Ok(Codec::new(SpecTables::from_json(&text)?, &limits))
    };
    let codecs = [load(&args[1])?, load(&args[2])?];
    let input = std::fs::File::open(&args[3]).map_err(|e| e.to_string())?;
    let bench = args.iter().any(|a| a == "--bench");
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let mut run = Run {
        codecs: &codecs,
        limits: &limits,
        streams: Vec::new(),
        items: Vec::new(),
        frames: Vec::new(),
        bench,
        line: String::new(),
    };
    for line in std::io::BufReader::new(input).lines() {
        let line = line.map_err(|e| e.to_string())?;
        run.line(&line, &mut out)?;
    }
    if bench {
        run.bench(&mut out);
    }
    out.flush().map_err(|e| e.to_string())
}

struct Run<'a> {
    codecs: &'a [Codec; 2],
    limits: &'a Limits,
    streams: Vec<FrameStream>,
    items: Vec<StreamItem>,
    /// (type, payload) of every method and header frame seen, for --bench.
    frames: Vec<(u8, Vec<u8>)>,
    bench: bool,
    line: String,
}

impl Run<'_> {
    fn line(&mut self, line: &str, out: &mut impl Write) -> Result<(), String> {
        let mut f = line.split(' ');
        let tag = f.next().unwrap_or_default();
        let num = |f: &mut std::str::Split<'_, char>| -> Result<i64, String> {
            f.next()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("bad line: {line}"))
        };
        let known0 = |c: u16, m: u16| self.codecs[0].method_known(c, m);
        self.items.clear();
        let mut dir = None;
        match tag {
            "C" => {
                self.streams.clear(); // direction ids are per capture
                self.emit(out, &format!("{{\"capture\":{}}}", jstr(&line[2..])));
            }
            "X" => self.emit(out, &format!("{{\"capture_error\":{}}}", jstr(&line[2..]))),
            "S" => {
                let _ = num(&mut f)?;
                let at_start = num(&mut f)? != 0;
                self.streams.push(FrameStream::new(at_start, self.limits));
            }
            "D" => {
                let d = num(&mut f)? as usize;
                let (packet, ts) = (num(&mut f)? as u64, num(&mut f)?);
                let data = unhex(f.next().unwrap_or_default());
                let s = self.streams.get_mut(d).ok_or("no stream")?;
                s.feed(&data, packet, ts, &known0, &mut self.items);
                dir = Some(d);
            }
            "G" => {
                let d = num(&mut f)? as usize;
                let (size, packet, ts) = (num(&mut f)? as u64, num(&mut f)? as u64, num(&mut f)?);
                let s = self.streams.get_mut(d).ok_or("no stream")?;
                s.gap(size, packet, ts, &mut self.items);
                dir = Some(d);
            }
            "E" => {
                let d = num(&mut f)? as usize;
                let s = self.streams.get_mut(d).ok_or("no stream")?;
                s.finish(&known0, &mut self.items);
                dir = Some(d);
            }
            "M" | "H" | "T" => {
                let p = unhex(f.next().unwrap_or_default());
                self.decode(tag, &p, out);
            }
            _ => return Err(format!("bad line: {line}")),
        }
        if let Some(d) = dir {
            let items = std::mem::take(&mut self.items);
            for it in &items {
                self.item(d, it, out);
            }
            if tag == "E" {
                let s = &self.streams[d];
                let a = s.accounting;
                let version = s.version.as_deref().map_or("null".to_owned(), jstr);
                self.emit(
                    out,
                    &format!(
                        "{{\"d\":{d},\"end\":[{},{},{},{},{},{},{}],\"version\":{version},\"synced_once\":{}}}",
                        a.stream_bytes, a.frame_bytes, a.header_bytes, a.gap_bytes,
                        a.skipped_bytes, a.pending_bytes, a.frames, s.synced_once
                    ),
                );
            }
        }
        Ok(())
    }

    fn emit(&mut self, out: &mut impl Write, s: &str) {
        if !self.bench {
            let _ = writeln!(out, "{s}");
        }
    }

    fn item(&mut self, d: usize, it: &StreamItem, out: &mut impl Write) {
        let body = match it {
            StreamItem::Header {
                version,
                raw,
                packet,
                ts_ns,
            } => {
                format!(
                    "[\"header\",{},\"{}\",{packet},{ts_ns}]",
                    jstr(version),
                    hex(raw)
                )
            }
            StreamItem::Frame {
                ftype,
                channel,
                payload,
                packet,
                ts_ns,
                resync,
            } => format!(
                "[\"frame\",{ftype},{channel},{},\"{:016x}\",{packet},{ts_ns},{resync}]",
                payload.len(),
                fnv(payload)
            ),
            StreamItem::Gap {
                size,
                lost_frame,
                packet,
                ts_ns,
            } => format!(
                "[\"gap\",{size},{},{packet},{ts_ns}]",
                lost_frame.as_deref().map_or("null".to_owned(), jstr)
            ),
            StreamItem::Resync {
                skipped,
                reason,
                packet,
                ts_ns,
            } => {
                format!("[\"resync\",{skipped},{},{packet},{ts_ns}]", jstr(reason))
            }
            StreamItem::Malformed {
                reason,
                offset,
                packet,
                ts_ns,
            } => {
                format!("[\"malformed\",{},{offset},{packet},{ts_ns}]", jstr(reason))
            }
        };
        self.emit(out, &format!("{{\"d\":{d},\"item\":{body}}}"));
        if let StreamItem::Frame {
            ftype: t @ (1 | 2),
            payload,
            ..
        } = it
        {
            let tag = if *t == 1 { "M" } else { "H" };
            if self.bench {
                self.frames.push((*t, payload.clone()));
            }
            self.decode(tag, payload, out);
        }
    }

    fn decode(&mut self, tag: &str, p: &[u8], out: &mut impl Write) {
        if self.bench {
            return;
        }
        self.line.clear();
        match tag {
            "M" => {
                self.line.push_str("{\"m\":[");
                for (i, c) in self.codecs.iter().enumerate() {
                    let m = c.decode_method(p);
                    let _ = write!(
                        self.line,
                        "{}[{},{},{},{},{},{},{}]",
                        if i > 0 { "," } else { "" },
                        m.class_id,
                        m.method_id,
                        jstr(&m.name),
                        m.known,
                        m.content,
                        table(&m.args),
                        opt(&m.problem)
                    );
                }
                self.line.push_str("]}");
            }
            "H" => {
                self.line.push_str("{\"h\":[");
                for (i, c) in self.codecs.iter().enumerate() {
                    let h = c.decode_header(p);
                    let _ = write!(
                        self.line,
                        "{}[{},{},{},{},{}]",
                        if i > 0 { "," } else { "" },
                        h.class_id,
                        h.weight,
                        h.body_size,
                        table(&h.properties),
                        opt(&h.problem)
                    );
                }
                self.line.push_str("]}");
            }
            _ => {
                let t = self.codecs[0].decode_table_body(p);
                let _ = write!(self.line, "{{\"tb\":{}}}", table(&t));
            }
        }
        let line = std::mem::take(&mut self.line);
        self.emit(out, &line);
        self.line = line;
    }

    /// ns per decoded method/header frame, over every frame of the input, best of 5 rounds.
    fn bench(&self, out: &mut impl Write) {
        let methods: Vec<&[u8]> = self
            .frames
            .iter()
            .filter(|f| f.0 == 1)
            .map(|f| f.1.as_slice())
            .collect();
        let headers: Vec<&[u8]> = self
            .frames
            .iter()
            .filter(|f| f.0 == 2)
            .map(|f| f.1.as_slice())
            .collect();
        let codec = &self.codecs[0];
        let time = |what: &str, n: usize, f: &dyn Fn() -> usize| {
            let mut best = f64::MAX;
            let mut sink = 0;
            for _ in 0..5 {
                let t = Instant::now();
                sink += f();
                best = best.min(t.elapsed().as_nanos() as f64);
            }
            format!(
                "{what}: {n} frames, {:.0} ns/frame (checksum {sink})",
                best / n.max(1) as f64
            )
        };
        let m = time("method frames", methods.len(), &|| {
            methods
                .iter()
                .map(|p| codec.decode_method(p).args.len())
                .sum()
        });
        let h = time("header frames", headers.len(), &|| {
            headers
                .iter()
                .map(|p| codec.decode_header(p).properties.len())
                .sum()
        });
        let _ = writeln!(out, "{m}\n{h}");
    }
}

fn opt(s: &Option<String>) -> String {
    s.as_deref().map_or("null".to_owned(), jstr)
}

fn table(t: &Table) -> String {
    let mut s = String::from("{\"t\":[");
    for (i, (k, v)) in t.iter().enumerate() {
        let _ = write!(
            s,
            "{}[{},{}]",
            if i > 0 { "," } else { "" },
            jstr(k),
            value(v)
        );
    }
    s.push_str("]}");
    s
}

fn value(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => u.to_string(),
        Value::Float(f) if f.is_nan() => "{\"f\":\"nan\"}".into(),
        Value::Float(f) => format!("{{\"f\":\"{:016x}\"}}", f.to_bits()),
        Value::Decimal { scale, digits } => {
            format!("{{\"dec\":\"{}\"}}", py_decimal(*scale, *digits))
        }
        Value::Str(s) => jstr(s),
        Value::Bytes(b) => format!("{{\"hex\":\"{}\"}}", hex(b)),
        Value::Timestamp(t) => format!("{{\"ts\":{t}}}"),
        Value::Table(t) => table(t),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(value).collect();
            format!("{{\"a\":[{}]}}", items.join(","))
        }
        Value::Problem(p) => format!("{{\"problem\":{}}}", jstr(p)),
    }
}

/// `str(Decimal(digits).scaleb(-scale))` as Python prints it.
fn py_decimal(scale: u8, digits: i32) -> String {
    let sign = if digits < 0 { "-" } else { "" };
    let coeff = digits.unsigned_abs().to_string();
    let exp = -i64::from(scale);
    let left = exp + coeff.len() as i64;
    let dot = if exp <= 0 && left > -6 { left } else { 1 };
    let (int, frac) = if dot <= 0 {
        (
            "0".to_owned(),
            format!(".{}{coeff}", "0".repeat((-dot) as usize)),
        )
    } else if dot as usize >= coeff.len() {
        (
            format!("{coeff}{}", "0".repeat(dot as usize - coeff.len())),
            String::new(),
        )
    } else {
        (
            coeff[..dot as usize].to_owned(),
            format!(".{}", &coeff[dot as usize..]),
        )
    };
    let e = if left == dot {
        String::new()
    } else {
        format!("E{:+}", left - dot)
    };
    format!("{sign}{int}{frac}{e}")
}

fn jstr(s: &str) -> String {
    let mut o = String::with_capacity(s.len() + 2);
    o.push('"');
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(o, "\\u{:04x}", c as u32);
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .fold(String::with_capacity(b.len() * 2), |mut s, x| {
            let _ = write!(s, "{x:02x}");
            s
        })
}

fn unhex(s: &str) -> Vec<u8> {
    s.as_bytes()
        .chunks(2)
        .filter_map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        })
        .collect()
}

fn fnv(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

//! JSON lines, written into a reused buffer, byte-identical to the Python face's records
//! (`orjson.dumps(record(ev, body), default=_default, option=OPT_APPEND_NEWLINE)`).
//!
//! A record is `kind` first, then the event's fields in the order of `amqpscope/events.py`; the
//! in-memory-only fields (frame payload, message body) are left out, and `--body` appends a
//! `body` view to messages. Values JSON has no type for follow `records._default`: bytes become
//! `{"hex": "…"}`, decimals their `str(Decimal)` text. Numbers and strings are formatted the way
//! orjson 3.x formats them, so the Rust and Python outputs can be compared byte for byte.

use crate::event::{
    seconds, Accounting, Base, Connection, Event, Finding, Frame, Gap, Ledger, Malformed, Message,
    ProtocolHeader, Resync, Tls,
};
use crate::value::{get, Table, Value};

/// What `--body` adds to message records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyMode {
    None,
    Preview,
    Full,
}

/// Bytes of the body a preview shows (`records.PREVIEW_BYTES`).
pub const PREVIEW_BYTES: usize = 64;

/// Content types shown as text whatever the bytes look like (`records.TEXT_TYPES`).
const TEXT_TYPES: [&str; 6] = [
    "text/",
    "application/json",
    "application/xml",
    "application/x-www-form-urlencoded",
    "application/javascript",
    "application/yaml",
];

/// Append the JSON line of `ev` (with its newline) to `out`.
pub fn write_event(ev: &Event, body: BodyMode, out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"kind\":");
    write_plain_str(out, ev.kind());
    write_base(out, ev.base());
    match ev {
        Event::ProtocolHeader(e) => write_protocol_header(out, e),
        Event::Frame(e) => write_frame(out, e),
        Event::Message(e) => write_message(out, e, body),
        Event::Gap(e) => write_gap(out, e),
        Event::Resync(e) => write_resync(out, e),
        Event::Malformed(e) => write_malformed(out, e),
        Event::Connection(e) => write_connection(out, e),
        Event::Accounting(e) => write_accounting(out, e),
        Event::Tls(e) => write_tls(out, e),
        Event::Finding(e) => write_finding(out, e),
        Event::Ledger(e) => write_ledger(out, e),
    }
    out.extend_from_slice(b"}\n");
}

// Every key after `kind` is a fixed ASCII name: written with its leading comma, no escaping, as
// one constant byte string (a fixed-size copy the compiler inlines, not a memmove call).
macro_rules! key {
    ($out:expr, $name:literal) => {
        $out.extend_from_slice(concat!(",\"", $name, "\":").as_bytes())
    };
}

// The same for a name only known at run time (the field lists of the rarer events).
fn key(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b",\"");
    push_small(out, name.as_bytes());
    out.extend_from_slice(b"\":");
}

/// `out.extend_from_slice(src)` without a memmove call for the short slices JSON lines are made
/// of (numbers, names, most strings): a fixed-size zeroed stretch is appended, `src` copied in
/// as two overlapping fixed-size chunks, and the stretch cut back to `src`'s length.
#[inline(always)]
fn push_small(out: &mut Vec<u8>, src: &[u8]) {
    let n = src.len();
    if n > 32 {
        out.extend_from_slice(src);
        return;
    }
    let start = out.len();
    out.extend_from_slice(&[0u8; 32]);
    if let Some(dst) = out.get_mut(start..start + n) {
        if n >= 16 {
            copy_ends::<16>(dst, src);
        } else if n >= 8 {
            copy_ends::<8>(dst, src);
        } else if n >= 4 {
            copy_ends::<4>(dst, src);
        } else {
            for (d, s) in dst.iter_mut().zip(src) {
                *d = *s;
            }
        }
    }
    out.truncate(start + n);
}

/// `dst.copy_from_slice(src)` for `K <= len <= 2K` as two overlapping copies of `K` bytes.
#[inline(always)]
fn copy_ends<const K: usize>(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if let (Some(d), Some(s)) = (dst.get_mut(..K), src.get(..K)) {
        d.copy_from_slice(s);
    }
    if let (Some(d), Some(s)) = (dst.get_mut(n - K..), src.get(n - K..)) {
        d.copy_from_slice(s);
    }
}

fn write_base(out: &mut Vec<u8>, b: &Base) {
    key!(out, "packet");
    write_u64(out, b.packet);
    key!(out, "ts");
    write_ts(out, b.ts_ns);
    key!(out, "conn");
    write_i64(out, b.conn);
    key!(out, "dir");
    match b.dir {
        Some(d) => write_plain_str(out, d.as_str()),
        None => out.extend_from_slice(b"null"),
    }
    key!(out, "channel");
    write_opt_u64(out, b.channel.map(u64::from));
}

thread_local! {
    /// The last timestamp written (its nanoseconds and text): the frames of one packet, often
    /// many, share it, and formatting a float is the costly part of the record's base.
    static LAST_TS: std::cell::Cell<(i64, u8, [u8; 32])> = const { std::cell::Cell::new((i64::MIN, 0, [0; 32])) };
}

fn write_ts(out: &mut Vec<u8>, ns: i64) {
    let (last, len, text) = LAST_TS.get();
    let start = out.len();
    if last == ns && last != i64::MIN {
        out.extend_from_slice(&text);
        out.truncate(start + usize::from(len));
        return;
    }
    write_f64(out, ns as f64 / 1e9);
    let written = out.get(start..).unwrap_or_default();
    let mut text = [0u8; 32];
    if let (Some(dst), Ok(len)) = (text.get_mut(..written.len()), u8::try_from(written.len())) {
        dst.copy_from_slice(written);
        LAST_TS.set((ns, len, text));
    }
}

fn write_protocol_header(out: &mut Vec<u8>, e: &ProtocolHeader) {
    key!(out, "version");
    write_str(out, &e.version);
    key!(out, "raw");
    out.push(b'"');
    write_hex(out, &e.raw);
    out.push(b'"');
}

fn write_frame(out: &mut Vec<u8>, e: &Frame) {
    key!(out, "type");
    write_str(out, &e.ftype);
    key!(out, "size");
    write_u64(out, u64::from(e.size));
    key!(out, "class_id");
    write_opt_i64(out, e.class_id.map(i64::from));
    key!(out, "method_id");
    write_opt_i64(out, e.method_id.map(i64::from));
    key!(out, "method");
    write_opt_str(out, e.method.as_deref());
    key!(out, "args");
    write_opt_table(out, e.args.as_ref());
    key!(out, "body_size");
    write_opt_u64(out, e.body_size);
    key!(out, "properties");
    write_opt_table(out, e.properties.as_ref());
    key!(out, "resync");
    write_bool(out, e.resync);
    key!(out, "problem");
    write_opt_str(out, e.problem.as_deref());
}

fn write_message(out: &mut Vec<u8>, e: &Message, body: BodyMode) {
    key!(out, "method");
    write_str(out, &e.method);
    key!(out, "args");
    write_table(out, &e.args);
    key!(out, "properties");
    write_table(out, &e.properties);
    key!(out, "body_size");
    write_u64(out, e.body_size);
    key!(out, "body_received");
    write_u64(out, e.body_received);
    key!(out, "complete");
    write_bool(out, e.complete);
    key!(out, "first_packet");
    write_u64(out, e.first_packet);
    key!(out, "frames");
    write_u64(out, e.frames);
    key!(out, "body_sha256");
    write_opt_str(out, e.body_sha256.as_deref());
    let limit = match body {
        BodyMode::None => return,
        BodyMode::Preview => Some(PREVIEW_BYTES),
        BodyMode::Full => None,
    };
    key!(out, "body");
    match &e.body {
        Some(raw) => write_body_view(out, raw, get(&e.properties, "content_type"), limit),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_gap(out: &mut Vec<u8>, e: &Gap) {
    key!(out, "size");
    write_u64(out, e.size);
    key!(out, "lost_frame");
    write_opt_str(out, e.lost_frame.as_deref());
}

fn write_resync(out: &mut Vec<u8>, e: &Resync) {
    key!(out, "skipped");
    write_u64(out, e.skipped);
    key!(out, "reason");
    write_str(out, &e.reason);
}

fn write_malformed(out: &mut Vec<u8>, e: &Malformed) {
    key!(out, "reason");
    write_str(out, &e.reason);
    key!(out, "offset");
    write_u64(out, e.offset);
}

fn write_connection(out: &mut Vec<u8>, e: &Connection) {
    key!(out, "state");
    write_str(out, &e.state);
    key!(out, "client");
    write_str(out, &e.client);
    key!(out, "server");
    write_str(out, &e.server);
    key!(out, "syn_seen");
    write_bool(out, e.syn_seen);
    let texts = [("version", &e.version), ("ended", &e.ended)];
    write_opt_strs(out, &texts);
    let limits = [
        ("frame_max", e.frame_max),
        ("channel_max", e.channel_max),
        ("heartbeat", e.heartbeat),
    ];
    write_opt_i64s(out, &limits);
    let texts = [
        ("mechanism", &e.mechanism),
        ("user", &e.user),
        ("password", &e.password),
        ("vhost", &e.vhost),
        ("client_product", &e.client_product),
        ("client_version", &e.client_version),
        ("client_platform", &e.client_platform),
        ("server_product", &e.server_product),
        ("server_version", &e.server_version),
    ];
    write_opt_strs(out, &texts);
    key!(out, "close_code");
    write_opt_i64(out, e.close_code);
    let texts = [("close_text", &e.close_text), ("close_by", &e.close_by)];
    write_opt_strs(out, &texts);
    let counts = [
        ("frames_c2s", e.frames_c2s),
        ("frames_s2c", e.frames_s2c),
        ("bytes_c2s", e.bytes_c2s),
        ("bytes_s2c", e.bytes_s2c),
    ];
    write_u64s(out, &counts);
    key!(out, "client_properties");
    write_opt_table(out, e.client_properties.as_ref());
    key!(out, "server_properties");
    write_opt_table(out, e.server_properties.as_ref());
    let texts = [("tls_version", &e.tls_version), ("tls_suite", &e.tls_suite)];
    write_opt_strs(out, &texts);
    key!(out, "tls_resumed");
    match e.tls_resumed {
        Some(b) => write_bool(out, b),
        None => out.extend_from_slice(b"null"),
    }
    key!(out, "fin_by");
    write_opt_str(out, e.fin_by.as_deref());
    key!(out, "fin_packet");
    write_opt_u64(out, e.fin_packet);
    key!(out, "rst_by");
    write_opt_str(out, e.rst_by.as_deref());
    key!(out, "rst_packet");
    write_opt_u64(out, e.rst_packet);
    key!(out, "opening");
    write_opt_str(out, e.opening);
}

fn write_tls(out: &mut Vec<u8>, e: &Tls) {
    key!(out, "client");
    write_str(out, &e.client);
    key!(out, "server");
    write_str(out, &e.server);
    let texts = [
        ("version", &e.version),
        ("suite", &e.suite),
        ("sni", &e.sni),
        ("alpn", &e.alpn),
    ];
    write_opt_strs(out, &texts);
    key!(out, "resumed");
    write_bool(out, e.resumed);
    key!(out, "decrypted");
    write_bool(out, e.decrypted);
    key!(out, "reason");
    write_opt_str(out, e.reason.as_deref());
    let counts = [
        ("records", e.records),
        ("records_decrypted", e.records_decrypted),
        ("records_failed", e.records_failed),
        ("records_lost", e.records_lost),
        ("bytes_c2s", e.bytes_c2s),
        ("bytes_s2c", e.bytes_s2c),
    ];
    write_u64s(out, &counts);
}

fn write_finding(out: &mut Vec<u8>, e: &Finding) {
    key!(out, "rule");
    write_str(out, &e.rule);
    key!(out, "severity");
    write_str(out, e.severity);
    write_opt_i64s(out, &[("code", e.code), ("rabbitmq_code", e.rabbitmq_code)]);
    key!(out, "message");
    write_str(out, &e.message);
    key!(out, "packets");
    out.push(b'[');
    for (i, p) in e.packets.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_u64(out, *p);
    }
    out.push(b']');
    key!(out, "peer_reaction");
    write_opt_str(out, e.peer_reaction.as_deref());
}
fn write_ledger(out: &mut Vec<u8>, e: &Ledger) {
    key!(out, "entry");
    write_str(out, e.entry.as_str());
    key!(out, "method");
    write_opt_str(out, e.method.as_deref());
    key!(out, "request");
    write_opt_str(out, e.request.as_deref());
    key!(out, "tag");
    write_opt_u64(out, e.tag);
    key!(out, "count");
    write_u64(out, e.count);
    key!(out, "multiple");
    write_bool(out, e.multiple);
    key!(out, "requeue");
    write_bool(out, e.requeue);
    key!(out, "redelivered");
    write_bool(out, e.redelivered);
    key!(out, "returned");
    write_bool(out, e.returned);
    key!(out, "outcome");
    write_opt_str(out, e.outcome);
    key!(out, "latency");
    write_opt_seconds(out, e.latency_ns);
    key!(out, "duration");
    write_opt_seconds(out, e.duration_ns);
    key!(out, "idle");
    write_opt_seconds(out, e.idle_ns);
    key!(out, "in_flight");
    write_opt_u64(out, e.in_flight);
    key!(out, "limit");
    write_opt_u64(out, e.limit);
    key!(out, "consumer_tag");
    write_opt_str(out, e.consumer_tag.as_deref());
    key!(out, "exchange");
    write_opt_str(out, e.exchange.as_deref());
    key!(out, "routing_key");
    write_opt_str(out, e.routing_key.as_deref());
    key!(out, "ref_packet");
    write_opt_u64(out, e.ref_packet);
    key!(out, "ref_channel");
    write_opt_u64(out, e.ref_channel.map(u64::from));
}

fn write_opt_seconds(out: &mut Vec<u8>, ns: Option<i64>) {
    match seconds(ns) {
        Some(s) => write_f64(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_accounting(out: &mut Vec<u8>, e: &Accounting) {
    let counts = [
        ("stream_bytes", e.stream_bytes),
        ("frame_bytes", e.frame_bytes),
        ("header_bytes", e.header_bytes),
        ("gap_bytes", e.gap_bytes),
        ("skipped_bytes", e.skipped_bytes),
        ("pending_bytes", e.pending_bytes),
        ("frames", e.frames),
        ("packets", e.packets),
        ("tcp_packets", e.tcp_packets),
        ("tls_bytes", e.tls_bytes),
        ("tls_opaque_bytes", e.tls_opaque_bytes),
    ];
    write_u64s(out, &counts);
}

fn write_opt_strs(out: &mut Vec<u8>, fields: &[(&str, &Option<String>)]) {
    for (name, v) in fields {
        key(out, name);
        write_opt_str(out, v.as_deref());
    }
}

fn write_opt_i64s(out: &mut Vec<u8>, fields: &[(&str, Option<i64>)]) {
    for (name, v) in fields {
        key(out, name);
        write_opt_i64(out, *v);
    }
}

fn write_u64s(out: &mut Vec<u8>, fields: &[(&str, u64)]) {
    for (name, v) in fields {
        key(out, name);
        write_u64(out, *v);
    }
}

// --- body views (`records.body_view`) ----------------------------------------------------------

fn write_body_view(
    out: &mut Vec<u8>,
    body: &[u8],
    content_type: Option<&Value>,
    limit: Option<usize>,
) {
    let cut = match limit {
        Some(n) => body.get(..n).unwrap_or(body),
        None => body,
    };
    let truncated = cut.len() < body.len();
    let as_text = if is_text(content_type) || looks_text(cut) {
        std::str::from_utf8(cut).ok()
    } else {
        None
    };
    match as_text {
        Some(text) => {
            out.extend_from_slice(b"{\"text\":");
            write_str(out, text);
        }
        None => {
            out.extend_from_slice(b"{\"hex\":\"");
            write_hex(out, cut);
            out.push(b'"');
        }
    }
    key!(out, "truncated");
    write_bool(out, truncated);
    out.push(b'}');
}

/// `records.is_text`: a str content type that, lowercased, starts with one of `TEXT_TYPES`
/// (a Problem is a str in Python, so it counts too).
fn is_text(content_type: Option<&Value>) -> bool {
    let (Some(Value::Str(ct)) | Some(Value::Problem(ct))) = content_type else {
        return false;
    };
    TEXT_TYPES
        .iter()
        .any(|prefix| lower_starts_with(ct, prefix))
}

/// `s.lower().startswith(prefix)` for an ASCII `prefix`, without building the lowered string.
/// Unicode lowering (not ASCII) so that e.g. 'İ' lowers to two chars, as in Python.
fn lower_starts_with(s: &str, prefix: &str) -> bool {
    let mut want = prefix.chars();
    for c in s.chars().flat_map(char::to_lowercase) {
        match want.next() {
            None => return true,
            Some(w) if w != c => return false,
            Some(_) => {}
        }
    }
    want.next().is_none()
}

/// `records._looks_text`: valid UTF-8 whose first 256 characters are printable or \r \n \t.
fn looks_text(raw: &[u8]) -> bool {
    let Ok(s) = std::str::from_utf8(raw) else {
        return false;
    };
    s.chars()
        .take(256)
        .all(|c| is_printable(c) || matches!(c, '\r' | '\n' | '\t'))
}

/// Python's `str.isprintable` for one character: not in the Unicode categories Other (Cc, Cf,
/// Cs, Co, Cn) or Separator (Zs, Zl, Zp), except the ASCII space. The table is Python 3.11's
/// (Unicode 14.0); characters assigned by later Unicode versions count as unassigned here, as
/// they do in that Python.
pub fn is_printable(c: char) -> bool {
    let cp = u32::from(c);
    if cp < 0x80 {
        return (0x20..0x7f).contains(&cp);
    }
    NOT_PRINTABLE
        .binary_search_by(|&(lo, hi)| {
            if hi < cp {
                std::cmp::Ordering::Less
            } else if lo > cp {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_err()
}

// --- scalars -------------------------------------------------------------------------------------

fn write_bool(out: &mut Vec<u8>, v: bool) {
    out.extend_from_slice(if v { b"true" } else { b"false" });
}

fn write_u64(out: &mut Vec<u8>, v: u64) {
    if v < 10 {
        out.push(b'0' + v as u8);
        return;
    }
    // the digits are written left-aligned into a fixed-size buffer, two at a time, which is
    // appended whole (a fixed-size copy) and cut back: no variable-length memmove per integer
    let n = v.ilog10() as usize + 1;
    let mut buf = [0u8; 20];
    let mut i = n;
    let mut rest = v;
    while rest >= 100 {
        let pair = (rest % 100) as usize * 2;
        rest /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    }
    if rest >= 10 {
        let pair = rest as usize * 2;
        buf[..2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
    } else {
        buf[0] = b'0' + rest as u8;
    }
    let start = out.len();
    out.extend_from_slice(&buf);
    out.truncate(start + n);
}

/// "00" to "99": two decimal digits per division.
static DIGIT_PAIRS: &[u8; 200] = b"\
    0001020304050607080910111213141516171819\
    2021222324252627282930313233343536373839\
    4041424344454647484950515253545556575859\
    6061626364656667686970717273747576777879\
    8081828384858687888990919293949596979899";

/// The decimal digits of `v`, written from the right into `buf`: no formatter machinery per integer.
fn decimal_digits(mut v: u64, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    for slot in buf.iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        i -= 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.get(i..).unwrap_or_default()
}

fn write_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    write_u64(out, v.unsigned_abs());
}

fn write_opt_u64(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => write_u64(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_opt_i64(out: &mut Vec<u8>, v: Option<i64>) {
    match v {
        Some(v) => write_i64(out, v),
        None => out.extend_from_slice(b"null"),
    }
}

fn write_opt_str(out: &mut Vec<u8>, v: Option<&str>) {
    match v {
        Some(s) => write_str(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

pub fn write_hex(out: &mut Vec<u8>, raw: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    out.reserve(raw.len() * 2);
    for &b in raw {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0xf)]);
    }
}

/// A string known to need no escaping (the core's own names: event kinds, directions).
fn write_plain_str(out: &mut Vec<u8>, s: &'static str) {
    out.push(b'"');
    push_small(out, s.as_bytes());
    out.push(b'"');
}

/// A JSON string as orjson writes it: only `"`, `\` and control characters are escaped
/// (\b \t \n \f \r short, the others as lowercase \u00xx); '/', DEL and non-ASCII stay as is.
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    out.reserve(bytes.len() + 2);
    out.push(b'"');
    let mut start = 0;
    while let Some(i) = next_escape(bytes, start) {
        push_small(out, bytes.get(start..i).unwrap_or_default());
        write_escape(out, bytes.get(i).copied().unwrap_or_default());
        start = i + 1;
    }
    push_small(out, bytes.get(start..).unwrap_or_default());
    out.push(b'"');
}

/// Bytes a JSON string escapes: `"`, `\` and the controls below 0x20.
static ESCAPED: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// The index of the first byte at or after `from` that `write_str` escapes. Eight bytes at a
/// time: a word with none of them is skipped with a few arithmetic steps instead of eight tests.
#[inline]
fn next_escape(bytes: &[u8], from: usize) -> Option<usize> {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
    // a byte of `x` is zero (exact for the question "is any byte zero")
    let has_zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGH != 0;
    let rest = bytes.get(from..)?;
    let mut chunks = rest.chunks_exact(8);
    let mut at = from;
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let w = u64::from_ne_bytes(word);
        let control = w.wrapping_sub(ONES * 0x20) & !w & HIGH != 0;
        if control
            || has_zero(w ^ (ONES * u64::from(b'"')))
            || has_zero(w ^ (ONES * u64::from(b'\\')))
        {
            break;
        }
        at += 8;
    }
    bytes
        .get(at..)?
        .iter()
        .position(|&b| ESCAPED[usize::from(b)])
        .map(|i| at + i)
}

fn write_escape(out: &mut Vec<u8>, b: u8) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let short = match b {
        b'"' => b'"',
        b'\\' => b'\\',
        0x08 => b'b',
        0x09 => b't',
        0x0a => b'n',
        0x0c => b'f',
        0x0d => b'r',
        _ => 0,
    };
    if short != 0 {
        out.extend_from_slice(&[b'\\', short]);
    } else {
        let hex = [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 0xf)]];
        out.extend_from_slice(b"\\u00");
        out.extend_from_slice(&hex);
    }
}

/// A float as orjson writes it: the shortest digits that read back to the same value (ties to
/// even, as ryu and Python's repr), in plain notation when the decimal exponent is within
/// -5..=15 (with ".0" for whole numbers), else as `d.ddde±x`; NaN and infinities become null.
pub fn write_f64(out: &mut Vec<u8>, v: f64) {
    if !v.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    // ryu finds the digits (std's `{:e}` rounds exact ties up, orjson to even); its own layout
    // ("1e16", "0.001") is then reshaped into orjson's.
    let mut buf = ryu::Buffer::new();
    let text = buf.format_finite(v).as_bytes();
    let (neg, text) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let epos = text.iter().position(|&b| b == b'e').unwrap_or(text.len());
    let (mantissa, exp_part) = text.split_at(epos);
    let mut exp = parse_exp(exp_part.get(1..).unwrap_or_default());
    // value = 0.D × 10^(int_len + exp), D the mantissa's digits: normalise to d.ddd × 10^x
    let int_len = mantissa
        .iter()
        .position(|&b| b == b'.')
        .unwrap_or(mantissa.len());
    exp = exp.saturating_add(i32::try_from(int_len).unwrap_or(0) - 1);
    let mut digits = [0u8; 32];
    let mut n = 0;
    for &b in mantissa.iter().filter(|b| b.is_ascii_digit()) {
        if n == 0 && b == b'0' {
            exp -= 1; // a leading zero
            continue;
        }
        if let Some(slot) = digits.get_mut(n) {
            *slot = b;
            n += 1;
        }
    }
    while n > 0 && digits.get(n - 1) == Some(&b'0') {
        n -= 1;
    }
    if n == 0 {
        exp = 0; // zero
    }
    if neg {
        out.push(b'-');
    }
    write_digits(out, digits.get(..n).unwrap_or_default(), exp);
}

fn parse_exp(raw: &[u8]) -> i32 {
    let (neg, raw) = match raw.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, raw),
    };
    let mag = raw.iter().fold(0i32, |acc, &b| {
        acc.saturating_mul(10)
            .saturating_add(i32::from(b.wrapping_sub(b'0')))
    });
    if neg {
        -mag
    } else {
        mag
    }
}

/// `digits` (d₀d₁… meaning d₀.d₁… × 10^exp) in orjson's layout.
fn write_digits(out: &mut Vec<u8>, digits: &[u8], exp: i32) {
    let (first, rest) = match digits.split_first() {
        Some(split) => split,
        None => (&b'0', &[][..]),
    };
    if !(-5..=15).contains(&exp) {
        out.push(*first);
        if !rest.is_empty() {
            out.push(b'.');
            out.extend_from_slice(rest);
        }
        out.push(b'e');
        if exp >= 0 {
            out.push(b'+');
        }
        write_i64(out, i64::from(exp));
    } else if exp < 0 {
        out.extend_from_slice(b"0.");
        for _ in 0..(-exp - 1) {
            out.push(b'0');
        }
        out.extend_from_slice(digits);
    } else {
        let int_len = usize::try_from(exp).unwrap_or(0) + 1;
        if digits.len() <= int_len {
            out.extend_from_slice(digits);
            for _ in digits.len()..int_len {
                out.push(b'0');
            }
            out.extend_from_slice(b".0");
        } else {
            let (int, frac) = digits.split_at(int_len);
            out.extend_from_slice(int);
            out.push(b'.');
            out.extend_from_slice(frac);
        }
    }
}

/// `str(Decimal(digits).scaleb(-scale))`: coefficient `digits`, exponent `-scale`, in Python's
/// to-sci-string form ("1.50", "0.000", "1E-7", "-1.23E-8", "0E-7").
pub fn write_decimal(out: &mut Vec<u8>, scale: u8, digits: i32) {
    if digits < 0 {
        out.push(b'-');
    }
    let mut buf = [0u8; 20];
    let coeff = decimal_digits(u64::from(digits.unsigned_abs()), &mut buf);
    let exp = -i32::from(scale);
    // at most 10 digits: the casts cannot truncate
    let len = coeff.len() as i32;
    let adjusted = exp + len - 1;
    if exp == 0 {
        out.extend_from_slice(coeff);
    } else if adjusted >= -6 {
        // plain notation; `point` digits stand before the decimal point
        let point = len + exp;
        if point > 0 {
            let (int, frac) = coeff.split_at(point as usize);
            out.extend_from_slice(int);
            out.push(b'.');
            out.extend_from_slice(frac);
        } else {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-point) as usize));
            out.extend_from_slice(coeff);
        }
    } else {
        let (first, rest) = coeff.split_first().unwrap_or((&b'0', &[]));
        out.push(*first);
        if !rest.is_empty() {
            out.push(b'.');
            out.extend_from_slice(rest);
        }
        // adjusted < -6 here: the sign is always '-'
        out.push(b'E');
        write_i64(out, i64::from(adjusted));
    }
}

// --- values --------------------------------------------------------------------------------------

fn write_opt_table(out: &mut Vec<u8>, t: Option<&Table>) {
    match t {
        Some(t) => write_table(out, t),
        None => out.extend_from_slice(b"null"),
    }
}

/// A table as a JSON object in wire order (the core already keeps one entry per name, as a dict).
pub fn write_table(out: &mut Vec<u8>, t: &Table) {
    out.push(b'{');
    for (i, (name, value)) in t.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_str(out, name);
        out.push(b':');
        write_value(out, value);
    }
    out.push(b'}');
}

/// One value, by `records._default`'s rules for the types JSON lacks.
pub fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => write_bool(out, *b),
        Value::Int(i) => write_i64(out, *i),
        Value::UInt(u) | Value::Timestamp(u) => write_u64(out, *u),
        Value::Float(f) => write_f64(out, *f),
        Value::Decimal { scale, digits } => {
            out.push(b'"');
            write_decimal(out, *scale, *digits);
            out.push(b'"');
        }
        Value::Str(s) | Value::Problem(s) => write_str(out, s),
        Value::Bytes(b) => {
            out.extend_from_slice(b"{\"hex\":\"");
            write_hex(out, b);
            out.extend_from_slice(b"\"}");
        }
        Value::Table(t) => write_table(out, t),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
    }
}

/// Code points `str.isprintable` rejects above ASCII: sorted, disjoint, inclusive ranges, made by
/// `[c for c in range(0x80, 0x110000) if not chr(c).isprintable()]` on Python 3.11.
#[rustfmt::skip]
static NOT_PRINTABLE: [(u32, u32); 700] = [
    (0x80, 0xa0), (0xad, 0xad), (0x378, 0x379), (0x380, 0x383), (0x38b, 0x38b), (0x38d, 0x38d),
    (0x3a2, 0x3a2), (0x530, 0x530), (0x557, 0x558), (0x58b, 0x58c), (0x590, 0x590), (0x5c8, 0x5cf),
    (0x5eb, 0x5ee), (0x5f5, 0x605), (0x61c, 0x61c), (0x6dd, 0x6dd), (0x70e, 0x70f), (0x74b, 0x74c),
    (0x7b2, 0x7bf), (0x7fb, 0x7fc), (0x82e, 0x82f), (0x83f, 0x83f), (0x85c, 0x85d), (0x85f, 0x85f),
    (0x86b, 0x86f), (0x88f, 0x897), (0x8e2, 0x8e2), (0x984, 0x984), (0x98d, 0x98e), (0x991, 0x992),
    (0x9a9, 0x9a9), (0x9b1, 0x9b1), (0x9b3, 0x9b5), (0x9ba, 0x9bb), (0x9c5, 0x9c6), (0x9c9, 0x9ca),
    (0x9cf, 0x9d6), (0x9d8, 0x9db), (0x9de, 0x9de), (0x9e4, 0x9e5), (0x9ff, 0xa00), (0xa04, 0xa04),
    (0xa0b, 0xa0e), (0xa11, 0xa12), (0xa29, 0xa29), (0xa31, 0xa31), (0xa34, 0xa34), (0xa37, 0xa37),
    (0xa3a, 0xa3b), (0xa3d, 0xa3d), (0xa43, 0xa46), (0xa49, 0xa4a), (0xa4e, 0xa50), (0xa52, 0xa58),
    (0xa5d, 0xa5d), (0xa5f, 0xa65), (0xa77, 0xa80), (0xa84, 0xa84), (0xa8e, 0xa8e), (0xa92, 0xa92),
    (0xaa9, 0xaa9), (0xab1, 0xab1), (0xab4, 0xab4), (0xaba, 0xabb), (0xac6, 0xac6), (0xaca, 0xaca),
    (0xace, 0xacf), (0xad1, 0xadf), (0xae4, 0xae5), (0xaf2, 0xaf8), (0xb00, 0xb00), (0xb04, 0xb04),
    (0xb0d, 0xb0e), (0xb11, 0xb12), (0xb29, 0xb29), (0xb31, 0xb31), (0xb34, 0xb34), (0xb3a, 0xb3b),
    (0xb45, 0xb46), (0xb49, 0xb4a), (0xb4e, 0xb54), (0xb58, 0xb5b), (0xb5e, 0xb5e), (0xb64, 0xb65),
    (0xb78, 0xb81), (0xb84, 0xb84), (0xb8b, 0xb8d), (0xb91, 0xb91), (0xb96, 0xb98), (0xb9b, 0xb9b),
    (0xb9d, 0xb9d), (0xba0, 0xba2), (0xba5, 0xba7), (0xbab, 0xbad), (0xbba, 0xbbd), (0xbc3, 0xbc5),
    (0xbc9, 0xbc9), (0xbce, 0xbcf), (0xbd1, 0xbd6), (0xbd8, 0xbe5), (0xbfb, 0xbff), (0xc0d, 0xc0d),
    (0xc11, 0xc11), (0xc29, 0xc29), (0xc3a, 0xc3b), (0xc45, 0xc45), (0xc49, 0xc49), (0xc4e, 0xc54),
    (0xc57, 0xc57), (0xc5b, 0xc5c), (0xc5e, 0xc5f), (0xc64, 0xc65), (0xc70, 0xc76), (0xc8d, 0xc8d),
    (0xc91, 0xc91), (0xca9, 0xca9), (0xcb4, 0xcb4), (0xcba, 0xcbb), (0xcc5, 0xcc5), (0xcc9, 0xcc9),
    (0xcce, 0xcd4), (0xcd7, 0xcdc), (0xcdf, 0xcdf), (0xce4, 0xce5), (0xcf0, 0xcf0), (0xcf3, 0xcff),
    (0xd0d, 0xd0d), (0xd11, 0xd11), (0xd45, 0xd45), (0xd49, 0xd49), (0xd50, 0xd53), (0xd64, 0xd65),
    (0xd80, 0xd80), (0xd84, 0xd84), (0xd97, 0xd99), (0xdb2, 0xdb2), (0xdbc, 0xdbc), (0xdbe, 0xdbf),
    (0xdc7, 0xdc9), (0xdcb, 0xdce), (0xdd5, 0xdd5), (0xdd7, 0xdd7), (0xde0, 0xde5), (0xdf0, 0xdf1),
    (0xdf5, 0xe00), (0xe3b, 0xe3e), (0xe5c, 0xe80), (0xe83, 0xe83), (0xe85, 0xe85), (0xe8b, 0xe8b),
    (0xea4, 0xea4), (0xea6, 0xea6), (0xebe, 0xebf), (0xec5, 0xec5), (0xec7, 0xec7), (0xece, 0xecf),
    (0xeda, 0xedb), (0xee0, 0xeff), (0xf48, 0xf48), (0xf6d, 0xf70), (0xf98, 0xf98), (0xfbd, 0xfbd),
    (0xfcd, 0xfcd), (0xfdb, 0xfff), (0x10c6, 0x10c6), (0x10c8, 0x10cc), (0x10ce, 0x10cf),
    (0x1249, 0x1249), (0x124e, 0x124f), (0x1257, 0x1257), (0x1259, 0x1259), (0x125e, 0x125f),
    (0x1289, 0x1289), (0x128e, 0x128f), (0x12b1, 0x12b1), (0x12b6, 0x12b7), (0x12bf, 0x12bf),
    (0x12c1, 0x12c1), (0x12c6, 0x12c7), (0x12d7, 0x12d7), (0x1311, 0x1311), (0x1316, 0x1317),
    (0x135b, 0x135c), (0x137d, 0x137f), (0x139a, 0x139f), (0x13f6, 0x13f7), (0x13fe, 0x13ff),
    (0x1680, 0x1680), (0x169d, 0x169f), (0x16f9, 0x16ff), (0x1716, 0x171e), (0x1737, 0x173f),
    (0x1754, 0x175f), (0x176d, 0x176d), (0x1771, 0x1771), (0x1774, 0x177f), (0x17de, 0x17df),
    (0x17ea, 0x17ef), (0x17fa, 0x17ff), (0x180e, 0x180e), (0x181a, 0x181f), (0x1879, 0x187f),
    (0x18ab, 0x18af), (0x18f6, 0x18ff), (0x191f, 0x191f), (0x192c, 0x192f), (0x193c, 0x193f),
    (0x1941, 0x1943), (0x196e, 0x196f), (0x1975, 0x197f), (0x19ac, 0x19af), (0x19ca, 0x19cf),
    (0x19db, 0x19dd), (0x1a1c, 0x1a1d), (0x1a5f, 0x1a5f), (0x1a7d, 0x1a7e), (0x1a8a, 0x1a8f),
    (0x1a9a, 0x1a9f), (0x1aae, 0x1aaf), (0x1acf, 0x1aff), (0x1b4d, 0x1b4f), (0x1b7f, 0x1b7f),
    (0x1bf4, 0x1bfb), (0x1c38, 0x1c3a), (0x1c4a, 0x1c4c), (0x1c89, 0x1c8f), (0x1cbb, 0x1cbc),
    (0x1cc8, 0x1ccf), (0x1cfb, 0x1cff), (0x1f16, 0x1f17), (0x1f1e, 0x1f1f), (0x1f46, 0x1f47),
    (0x1f4e, 0x1f4f), (0x1f58, 0x1f58), (0x1f5a, 0x1f5a), (0x1f5c, 0x1f5c), (0x1f5e, 0x1f5e),
    (0x1f7e, 0x1f7f), (0x1fb5, 0x1fb5), (0x1fc5, 0x1fc5), (0x1fd4, 0x1fd5), (0x1fdc, 0x1fdc),
    (0x1ff0, 0x1ff1), (0x1ff5, 0x1ff5), (0x1fff, 0x200f), (0x2028, 0x202f), (0x205f, 0x206f),
    (0x2072, 0x2073), (0x208f, 0x208f), (0x209d, 0x209f), (0x20c1, 0x20cf), (0x20f1, 0x20ff),
    (0x218c, 0x218f), (0x2427, 0x243f), (0x244b, 0x245f), (0x2b74, 0x2b75), (0x2b96, 0x2b96),
    (0x2cf4, 0x2cf8), (0x2d26, 0x2d26), (0x2d28, 0x2d2c), (0x2d2e, 0x2d2f), (0x2d68, 0x2d6e),
    (0x2d71, 0x2d7e), (0x2d97, 0x2d9f), (0x2da7, 0x2da7), (0x2daf, 0x2daf), (0x2db7, 0x2db7),
    (0x2dbf, 0x2dbf), (0x2dc7, 0x2dc7), (0x2dcf, 0x2dcf), (0x2dd7, 0x2dd7), (0x2ddf, 0x2ddf),
    (0x2e5e, 0x2e7f), (0x2e9a, 0x2e9a), (0x2ef4, 0x2eff), (0x2fd6, 0x2fef), (0x2ffc, 0x3000),
    (0x3040, 0x3040), (0x3097, 0x3098), (0x3100, 0x3104), (0x3130, 0x3130), (0x318f, 0x318f),
    (0x31e4, 0x31ef), (0x321f, 0x321f), (0xa48d, 0xa48f), (0xa4c7, 0xa4cf), (0xa62c, 0xa63f),
    (0xa6f8, 0xa6ff), (0xa7cb, 0xa7cf), (0xa7d2, 0xa7d2), (0xa7d4, 0xa7d4), (0xa7da, 0xa7f1),
    (0xa82d, 0xa82f), (0xa83a, 0xa83f), (0xa878, 0xa87f), (0xa8c6, 0xa8cd), (0xa8da, 0xa8df),
    (0xa954, 0xa95e), (0xa97d, 0xa97f), (0xa9ce, 0xa9ce), (0xa9da, 0xa9dd), (0xa9ff, 0xa9ff),
    (0xaa37, 0xaa3f), (0xaa4e, 0xaa4f), (0xaa5a, 0xaa5b), (0xaac3, 0xaada), (0xaaf7, 0xab00),
    (0xab07, 0xab08), (0xab0f, 0xab10), (0xab17, 0xab1f), (0xab27, 0xab27), (0xab2f, 0xab2f),
    (0xab6c, 0xab6f), (0xabee, 0xabef), (0xabfa, 0xabff), (0xd7a4, 0xd7af), (0xd7c7, 0xd7ca),
    (0xd7fc, 0xf8ff), (0xfa6e, 0xfa6f), (0xfada, 0xfaff), (0xfb07, 0xfb12), (0xfb18, 0xfb1c),
    (0xfb37, 0xfb37), (0xfb3d, 0xfb3d), (0xfb3f, 0xfb3f), (0xfb42, 0xfb42), (0xfb45, 0xfb45),
    (0xfbc3, 0xfbd2), (0xfd90, 0xfd91), (0xfdc8, 0xfdce), (0xfdd0, 0xfdef), (0xfe1a, 0xfe1f),
    (0xfe53, 0xfe53), (0xfe67, 0xfe67), (0xfe6c, 0xfe6f), (0xfe75, 0xfe75), (0xfefd, 0xff00),
    (0xffbf, 0xffc1), (0xffc8, 0xffc9), (0xffd0, 0xffd1), (0xffd8, 0xffd9), (0xffdd, 0xffdf),
    (0xffe7, 0xffe7), (0xffef, 0xfffb), (0xfffe, 0xffff), (0x1000c, 0x1000c), (0x10027, 0x10027),
    (0x1003b, 0x1003b), (0x1003e, 0x1003e), (0x1004e, 0x1004f), (0x1005e, 0x1007f),
    (0x100fb, 0x100ff), (0x10103, 0x10106), (0x10134, 0x10136), (0x1018f, 0x1018f),
    (0x1019d, 0x1019f), (0x101a1, 0x101cf), (0x101fe, 0x1027f), (0x1029d, 0x1029f),
    (0x102d1, 0x102df), (0x102fc, 0x102ff), (0x10324, 0x1032c), (0x1034b, 0x1034f),
    (0x1037b, 0x1037f), (0x1039e, 0x1039e), (0x103c4, 0x103c7), (0x103d6, 0x103ff),
    (0x1049e, 0x1049f), (0x104aa, 0x104af), (0x104d4, 0x104d7), (0x104fc, 0x104ff),
    (0x10528, 0x1052f), (0x10564, 0x1056e), (0x1057b, 0x1057b), (0x1058b, 0x1058b),
    (0x10593, 0x10593), (0x10596, 0x10596), (0x105a2, 0x105a2), (0x105b2, 0x105b2),
    (0x105ba, 0x105ba), (0x105bd, 0x105ff), (0x10737, 0x1073f), (0x10756, 0x1075f),
    (0x10768, 0x1077f), (0x10786, 0x10786), (0x107b1, 0x107b1), (0x107bb, 0x107ff),
    (0x10806, 0x10807), (0x10809, 0x10809), (0x10836, 0x10836), (0x10839, 0x1083b),
    (0x1083d, 0x1083e), (0x10856, 0x10856), (0x1089f, 0x108a6), (0x108b0, 0x108df),
    (0x108f3, 0x108f3), (0x108f6, 0x108fa), (0x1091c, 0x1091e), (0x1093a, 0x1093e),
    (0x10940, 0x1097f), (0x109b8, 0x109bb), (0x109d0, 0x109d1), (0x10a04, 0x10a04),
    (0x10a07, 0x10a0b), (0x10a14, 0x10a14), (0x10a18, 0x10a18), (0x10a36, 0x10a37),
    (0x10a3b, 0x10a3e), (0x10a49, 0x10a4f), (0x10a59, 0x10a5f), (0x10aa0, 0x10abf),
    (0x10ae7, 0x10aea), (0x10af7, 0x10aff), (0x10b36, 0x10b38), (0x10b56, 0x10b57),
    (0x10b73, 0x10b77), (0x10b92, 0x10b98), (0x10b9d, 0x10ba8), (0x10bb0, 0x10bff),
    (0x10c49, 0x10c7f), (0x10cb3, 0x10cbf), (0x10cf3, 0x10cf9), (0x10d28, 0x10d2f),
    (0x10d3a, 0x10e5f), (0x10e7f, 0x10e7f), (0x10eaa, 0x10eaa), (0x10eae, 0x10eaf),
    (0x10eb2, 0x10eff), (0x10f28, 0x10f2f), (0x10f5a, 0x10f6f), (0x10f8a, 0x10faf),
    (0x10fcc, 0x10fdf), (0x10ff7, 0x10fff), (0x1104e, 0x11051), (0x11076, 0x1107e),
    (0x110bd, 0x110bd), (0x110c3, 0x110cf), (0x110e9, 0x110ef), (0x110fa, 0x110ff),
    (0x11135, 0x11135), (0x11148, 0x1114f), (0x11177, 0x1117f), (0x111e0, 0x111e0),
    (0x111f5, 0x111ff), (0x11212, 0x11212), (0x1123f, 0x1127f), (0x11287, 0x11287),
    (0x11289, 0x11289), (0x1128e, 0x1128e), (0x1129e, 0x1129e), (0x112aa, 0x112af),
    (0x112eb, 0x112ef), (0x112fa, 0x112ff), (0x11304, 0x11304), (0x1130d, 0x1130e),
    (0x11311, 0x11312), (0x11329, 0x11329), (0x11331, 0x11331), (0x11334, 0x11334),
    (0x1133a, 0x1133a), (0x11345, 0x11346), (0x11349, 0x1134a), (0x1134e, 0x1134f),
    (0x11351, 0x11356), (0x11358, 0x1135c), (0x11364, 0x11365), (0x1136d, 0x1136f),
    (0x11375, 0x113ff), (0x1145c, 0x1145c), (0x11462, 0x1147f), (0x114c8, 0x114cf),
    (0x114da, 0x1157f), (0x115b6, 0x115b7), (0x115de, 0x115ff), (0x11645, 0x1164f),
    (0x1165a, 0x1165f), (0x1166d, 0x1167f), (0x116ba, 0x116bf), (0x116ca, 0x116ff),
    (0x1171b, 0x1171c), (0x1172c, 0x1172f), (0x11747, 0x117ff), (0x1183c, 0x1189f),
    (0x118f3, 0x118fe), (0x11907, 0x11908), (0x1190a, 0x1190b), (0x11914, 0x11914),
    (0x11917, 0x11917), (0x11936, 0x11936), (0x11939, 0x1193a), (0x11947, 0x1194f),
    (0x1195a, 0x1199f), (0x119a8, 0x119a9), (0x119d8, 0x119d9), (0x119e5, 0x119ff),
    (0x11a48, 0x11a4f), (0x11aa3, 0x11aaf), (0x11af9, 0x11bff), (0x11c09, 0x11c09),
    (0x11c37, 0x11c37), (0x11c46, 0x11c4f), (0x11c6d, 0x11c6f), (0x11c90, 0x11c91),
    (0x11ca8, 0x11ca8), (0x11cb7, 0x11cff), (0x11d07, 0x11d07), (0x11d0a, 0x11d0a),
    (0x11d37, 0x11d39), (0x11d3b, 0x11d3b), (0x11d3e, 0x11d3e), (0x11d48, 0x11d4f),
    (0x11d5a, 0x11d5f), (0x11d66, 0x11d66), (0x11d69, 0x11d69), (0x11d8f, 0x11d8f),
    (0x11d92, 0x11d92), (0x11d99, 0x11d9f), (0x11daa, 0x11edf), (0x11ef9, 0x11faf),
    (0x11fb1, 0x11fbf), (0x11ff2, 0x11ffe), (0x1239a, 0x123ff), (0x1246f, 0x1246f),
    (0x12475, 0x1247f), (0x12544, 0x12f8f), (0x12ff3, 0x12fff), (0x1342f, 0x143ff),
    (0x14647, 0x167ff), (0x16a39, 0x16a3f), (0x16a5f, 0x16a5f), (0x16a6a, 0x16a6d),
    (0x16abf, 0x16abf), (0x16aca, 0x16acf), (0x16aee, 0x16aef), (0x16af6, 0x16aff),
    (0x16b46, 0x16b4f), (0x16b5a, 0x16b5a), (0x16b62, 0x16b62), (0x16b78, 0x16b7c),
    (0x16b90, 0x16e3f), (0x16e9b, 0x16eff), (0x16f4b, 0x16f4e), (0x16f88, 0x16f8e),
    (0x16fa0, 0x16fdf), (0x16fe5, 0x16fef), (0x16ff2, 0x16fff), (0x187f8, 0x187ff),
    (0x18cd6, 0x18cff), (0x18d09, 0x1afef), (0x1aff4, 0x1aff4), (0x1affc, 0x1affc),
    (0x1afff, 0x1afff), (0x1b123, 0x1b14f), (0x1b153, 0x1b163), (0x1b168, 0x1b16f),
    (0x1b2fc, 0x1bbff), (0x1bc6b, 0x1bc6f), (0x1bc7d, 0x1bc7f), (0x1bc89, 0x1bc8f),
    (0x1bc9a, 0x1bc9b), (0x1bca0, 0x1ceff), (0x1cf2e, 0x1cf2f), (0x1cf47, 0x1cf4f),
    (0x1cfc4, 0x1cfff), (0x1d0f6, 0x1d0ff), (0x1d127, 0x1d128), (0x1d173, 0x1d17a),
    (0x1d1eb, 0x1d1ff), (0x1d246, 0x1d2df), (0x1d2f4, 0x1d2ff), (0x1d357, 0x1d35f),
    (0x1d379, 0x1d3ff), (0x1d455, 0x1d455), (0x1d49d, 0x1d49d), (0x1d4a0, 0x1d4a1),
    (0x1d4a3, 0x1d4a4), (0x1d4a7, 0x1d4a8), (0x1d4ad, 0x1d4ad), (0x1d4ba, 0x1d4ba),
    (0x1d4bc, 0x1d4bc), (0x1d4c4, 0x1d4c4), (0x1d506, 0x1d506), (0x1d50b, 0x1d50c),
    (0x1d515, 0x1d515), (0x1d51d, 0x1d51d), (0x1d53a, 0x1d53a), (0x1d53f, 0x1d53f),
    (0x1d545, 0x1d545), (0x1d547, 0x1d549), (0x1d551, 0x1d551), (0x1d6a6, 0x1d6a7),
    (0x1d7cc, 0x1d7cd), (0x1da8c, 0x1da9a), (0x1daa0, 0x1daa0), (0x1dab0, 0x1deff),
    (0x1df1f, 0x1dfff), (0x1e007, 0x1e007), (0x1e019, 0x1e01a), (0x1e022, 0x1e022),
    (0x1e025, 0x1e025), (0x1e02b, 0x1e0ff), (0x1e12d, 0x1e12f), (0x1e13e, 0x1e13f),
    (0x1e14a, 0x1e14d), (0x1e150, 0x1e28f), (0x1e2af, 0x1e2bf), (0x1e2fa, 0x1e2fe),
    (0x1e300, 0x1e7df), (0x1e7e7, 0x1e7e7), (0x1e7ec, 0x1e7ec), (0x1e7ef, 0x1e7ef),
    (0x1e7ff, 0x1e7ff), (0x1e8c5, 0x1e8c6), (0x1e8d7, 0x1e8ff), (0x1e94c, 0x1e94f),
    (0x1e95a, 0x1e95d), (0x1e960, 0x1ec70), (0x1ecb5, 0x1ed00), (0x1ed3e, 0x1edff),
    (0x1ee04, 0x1ee04), (0x1ee20, 0x1ee20), (0x1ee23, 0x1ee23), (0x1ee25, 0x1ee26),
    (0x1ee28, 0x1ee28), (0x1ee33, 0x1ee33), (0x1ee38, 0x1ee38), (0x1ee3a, 0x1ee3a),
    (0x1ee3c, 0x1ee41), (0x1ee43, 0x1ee46), (0x1ee48, 0x1ee48), (0x1ee4a, 0x1ee4a),
    (0x1ee4c, 0x1ee4c), (0x1ee50, 0x1ee50), (0x1ee53, 0x1ee53), (0x1ee55, 0x1ee56),
    (0x1ee58, 0x1ee58), (0x1ee5a, 0x1ee5a), (0x1ee5c, 0x1ee5c), (0x1ee5e, 0x1ee5e),
    (0x1ee60, 0x1ee60), (0x1ee63, 0x1ee63), (0x1ee65, 0x1ee66), (0x1ee6b, 0x1ee6b),
    (0x1ee73, 0x1ee73), (0x1ee78, 0x1ee78), (0x1ee7d, 0x1ee7d), (0x1ee7f, 0x1ee7f),
    (0x1ee8a, 0x1ee8a), (0x1ee9c, 0x1eea0), (0x1eea4, 0x1eea4), (0x1eeaa, 0x1eeaa),
    (0x1eebc, 0x1eeef), (0x1eef2, 0x1efff), (0x1f02c, 0x1f02f), (0x1f094, 0x1f09f),
    (0x1f0af, 0x1f0b0), (0x1f0c0, 0x1f0c0), (0x1f0d0, 0x1f0d0), (0x1f0f6, 0x1f0ff),
    (0x1f1ae, 0x1f1e5), (0x1f203, 0x1f20f), (0x1f23c, 0x1f23f), (0x1f249, 0x1f24f),
    (0x1f252, 0x1f25f), (0x1f266, 0x1f2ff), (0x1f6d8, 0x1f6dc), (0x1f6ed, 0x1f6ef),
    (0x1f6fd, 0x1f6ff), (0x1f774, 0x1f77f), (0x1f7d9, 0x1f7df), (0x1f7ec, 0x1f7ef),
    (0x1f7f1, 0x1f7ff), (0x1f80c, 0x1f80f), (0x1f848, 0x1f84f), (0x1f85a, 0x1f85f),
    (0x1f888, 0x1f88f), (0x1f8ae, 0x1f8af), (0x1f8b2, 0x1f8ff), (0x1fa54, 0x1fa5f),
    (0x1fa6e, 0x1fa6f), (0x1fa75, 0x1fa77), (0x1fa7d, 0x1fa7f), (0x1fa87, 0x1fa8f),
    (0x1faad, 0x1faaf), (0x1fabb, 0x1fabf), (0x1fac6, 0x1facf), (0x1fada, 0x1fadf),
    (0x1fae8, 0x1faef), (0x1faf7, 0x1faff), (0x1fb93, 0x1fb93), (0x1fbcb, 0x1fbef),
    (0x1fbfa, 0x1ffff), (0x2a6e0, 0x2a6ff), (0x2b739, 0x2b73f), (0x2b81e, 0x2b81f),
    (0x2cea2, 0x2ceaf), (0x2ebe1, 0x2f7ff), (0x2fa1e, 0x2ffff), (0x3134b, 0xe00ff),
    (0xe01f0, 0x10ffff),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Dir, Gap};

    fn float(v: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, v);
        String::from_utf8(out).unwrap_or_default()
    }

    fn decimal(scale: u8, digits: i32) -> String {
        let mut out = Vec::new();
        write_decimal(&mut out, scale, digits);
        String::from_utf8(out).unwrap_or_default()
    }

    #[test]
    #[allow(clippy::excessive_precision)] // the literal as written in the Python check
    fn floats_as_orjson() {
        // expected values are orjson 3.13's output
        let cases = [
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1e-7, "1e-7"),
            (1e-5, "0.00001"),
            (1.5e-5, "0.000015"),
            (9.9e-6, "9.9e-6"),
            (0.1, "0.1"),
            (123456789.123456789, "123456789.12345679"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (100.0, "100.0"),
            (1732527600.123456, "1732527600.123456"),
            (5e-324, "5e-324"),
            (255.74441528320312, "255.74441528320312"), // an exact tie: to even
            (0.001, "0.001"),
            (1e-6, "1e-6"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-1.5e-7, "-1.5e-7"),
            (1.23e22, "1.23e+22"),
            (f64::NAN, "null"),
            (f64::NEG_INFINITY, "null"),
        ];
        for (v, want) in cases {
            assert_eq!(float(v), want, "{v:e}");
        }
    }

    #[test]
    fn decimals_as_python() {
        let cases = [
            (0, 0, "0"),
            (2, 150, "1.50"),
            (3, 0, "0.000"),
            (7, 0, "0E-7"),
            (7, 1, "1E-7"),
            (6, 1, "0.000001"),
            (10, -123, "-1.23E-8"),
            (2, -5, "-0.05"),
            (0, i32::MIN, "-2147483648"),
            (255, i32::MAX, "2.147483647E-246"),
        ];
        for (scale, digits, want) in cases {
            assert_eq!(decimal(scale, digits), want);
        }
    }

    #[test]
    fn strings_as_orjson() {
        let mut out = Vec::new();
        write_str(
            &mut out,
            "a\"\\/\u{0}\u{8}\t\n\u{b}\u{c}\r\u{1f}\u{7f}é\u{2028}",
        );
        let want = "\"a\\\"\\\\/\\u0000\\b\\t\\n\\u000b\\f\\r\\u001f\u{7f}é\u{2028}\"";
        assert_eq!(String::from_utf8(out).unwrap_or_default(), want);
    }

    #[test]
    fn integers_as_std() {
        let mut cases: Vec<u64> = vec![0, 9, 10, 99, 100, 101, 999, 1000, 12345, u64::MAX];
        cases.extend((0..20).map(|e| 10u64.pow(e)));
        cases.extend((1..20).map(|e| 10u64.pow(e) - 1));
        for v in cases {
            let mut out = b"x".to_vec();
            write_u64(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap_or_default(), format!("x{v}"));
        }
        for v in [i64::MIN, -1, 0, i64::MAX] {
            let mut out = Vec::new();
            write_i64(&mut out, v);
            assert_eq!(String::from_utf8(out).unwrap_or_default(), v.to_string());
        }
    }

    #[test]
    fn short_copies_and_escapes() {
        // every length around the chunk sizes, with and without an escape at each end
        for n in 0..80 {
            let plain: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let mut out = Vec::new();
            write_str(&mut out, &plain);
            assert_eq!(out, format!("\"{plain}\"").into_bytes());
            let quoted = format!("\"{plain}\n");
            let mut out = Vec::new();
            write_str(&mut out, &quoted);
            assert_eq!(out, format!("\"\\\"{plain}\\n\"").into_bytes());
        }
    }

    #[test]
    fn table_keys_of_every_length() {
        for n in 0..40 {
            let plain: String = (0..n).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
            let escaped = format!("{plain}\t");
            let t: Table = vec![
                (plain.as_str().into(), Value::Int(1)),
                (escaped.as_str().into(), Value::Str(plain.clone())),
            ];
            let mut out = Vec::new();
            write_table(&mut out, &t);
            let want = format!("{{\"{plain}\":1,\"{plain}\\t\":\"{plain}\"}}");
            assert_eq!(String::from_utf8(out).unwrap_or_default(), want);
        }
    }

    #[test]
    fn repeated_timestamps() {
        let mut out = Vec::new();
        for ns in [1_500_000_000, 1_500_000_000, 2_000_000_001, 1_500_000_000] {
            write_ts(&mut out, ns);
            out.push(b' ');
        }
        assert_eq!(
            String::from_utf8(out).unwrap_or_default(),
            "1.5 1.5 2.000000001 1.5 "
        );
    }

    #[test]
    fn printable_as_python() {
        for c in [' ', 'a', 'é', '中', '😀'] {
            assert!(is_printable(c), "{c:?}");
        }
        for c in [
            '\n',
            '\u{7f}',
            '\u{a0}',
            '\u{ad}',
            '\u{200b}',
            '\u{2028}',
            '\u{e000}',
            '\u{10ffff}',
        ] {
            assert!(!is_printable(c), "{c:?}");
        }
    }

    #[test]
    fn one_line_per_event() {
        let ev = Event::Gap(Box::new(Gap {
            base: Base {
                packet: 7,
                ts_ns: 1_500_000_000,
                conn: 0,
                dir: Some(Dir::S2C),
                channel: None,
            },
            size: 12,
            lost_frame: None,
        }));
        let mut out = Vec::new();
        write_event(&ev, BodyMode::Full, &mut out);
        let want = "{\"kind\":\"gap\",\"packet\":7,\"ts\":1.5,\"conn\":0,\"dir\":\"s2c\",\"channel\":null,\"size\":12,\"lost_frame\":null}\n";
        assert_eq!(String::from_utf8(out).unwrap_or_default(), want);
    }
}

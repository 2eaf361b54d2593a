//! The event model: the one contract between the core and every output (JSONL, Arrow, Python
//! objects). Field for field the same as `amqpscope/events.py`; timestamps stay integer
//! nanoseconds here and become float seconds only at the output edge.

use crate::value::{Name, Table};

/// Direction of the bytes: client to server or server to client.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    C2S,
    S2C,
}

impl Dir {
    pub fn as_str(self) -> &'static str {
        match self {
            Dir::C2S => "c2s",
            Dir::S2C => "s2c",
        }
    }

    pub fn other(self) -> Dir {
        match self {
            Dir::C2S => Dir::S2C,
            Dir::S2C => Dir::C2S,
        }
    }
}

/// The keys every event carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Base {
    /// The packet where the event completed.
    pub packet: u64,
    pub ts_ns: i64,
    /// A stable connection id: the TCP flow number in order of first appearance; -1 for none.
    pub conn: i64,
    pub dir: Option<Dir>,
    pub channel: Option<u16>,
}

impl Base {
    /// `ts` as the outputs show it: float seconds since the epoch.
    pub fn ts(&self) -> f64 {
        self.ts_ns as f64 / 1e9
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProtocolHeader {
    pub base: Base,
    /// "0-9-1", "0-9", "0-8", "0-10", "1.0", … or "unknown (a.b.c.d)".
    pub version: String,
    pub raw: [u8; 8],
}

/// One AMQP frame. Method frames carry the decoded method; headers the content properties.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub base: Base,
    /// method | header | body | heartbeat | oob-method | oob-header | oob-body | trace | unknown-N
    /// (a `Name`: the known types are static text, not a String per frame)
    pub ftype: Name,
    /// Payload size as declared in the frame header.
    pub size: u32,
    pub class_id: Option<i32>,
    pub method_id: Option<i32>,
    /// "basic.publish"; "40.51" style ids when the spec does not know them (the spec's name,
    /// shared, not copied per frame).
    pub method: Option<Name>,
    pub args: Option<Table>,
    pub body_size: Option<u64>,
    pub properties: Option<Table>,
    /// Decoded after the stream was resynchronised (mid-stream start, gap, garbage).
    pub resync: bool,
    /// A decode problem; the frame is still reported.
    pub problem: Option<String>,
    /// Body frames only; kept for renderers, not written to JSONL.
    pub payload: Option<Vec<u8>>,
    /// The TLS record the frame completed in (AMQPS); kept for renderers (`decode -V`), not
    /// written to JSONL or Arrow.
    pub tls: Option<TlsLayer>,
}

/// The TLS record a piece of plaintext came in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TlsLayer {
    pub version: &'static str,
    pub suite: &'static str,
    /// The record's position among the records of its direction, from 0 (the hello), as
    /// Wireshark lists them.
    pub record: u64,
}

/// A whole message: the content method, its header and all body frames, assembled per channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub base: Base,
    /// basic.publish | basic.deliver | basic.get-ok | basic.return
    pub method: Name,
    pub args: Table,
    pub properties: Table,
    pub body_size: u64,
    /// Bytes seen; less than body_size when the content was cut short.
    pub body_received: u64,
    pub complete: bool,
    pub first_packet: u64,
    pub frames: u64,
    pub body_sha256: Option<String>,
    /// Kept for `--body`, not written as is.
    pub body: Option<Vec<u8>>,
}

/// Bytes of one direction missing from the capture; nothing in them is guessed.
#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    pub base: Base,
    pub size: u64,
    /// The frame the gap cut into, when its header was seen.
    pub lost_frame: Option<String>,
}

/// The frame stream was (re)found after unknown position: stream start mid-way, gap or garbage.
#[derive(Debug, Clone, PartialEq)]
pub struct Resync {
    pub base: Base,
    /// Bytes passed over before the first confirmed frame.
    pub skipped: u64,
    pub reason: String,
}

/// Bytes that could not be framed: the stream loses sync and is searched again.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    pub base: Base,
    pub reason: String,
    /// Stream offset (bytes of this direction) where the problem was seen.
    pub offset: u64,
}

/// A connection opening (first packet seen) or closing (with everything negotiated on it).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Connection {
    pub base: Base,
    /// "open" | "close"
    pub state: String,
    /// "address:port"
    pub client: String,
    pub server: String,
    pub syn_seen: bool,
    pub version: Option<String>,
    /// close: "connection.close", "fin", "rst", "eof", "evicted"
    pub ended: Option<String>,
    pub frame_max: Option<i64>,
    pub channel_max: Option<i64>,
    pub heartbeat: Option<i64>,
    pub mechanism: Option<String>,
    pub user: Option<String>,
    /// Only with show_credentials; otherwise None.
    pub password: Option<String>,
    pub vhost: Option<String>,
    pub client_product: Option<String>,
    pub client_version: Option<String>,
    pub client_platform: Option<String>,
    pub server_product: Option<String>,
    pub server_version: Option<String>,
    pub close_code: Option<i64>,
    pub close_text: Option<String>,
    /// "client" | "server"
    pub close_by: Option<String>,
    pub frames_c2s: u64,
    pub frames_s2c: u64,
    pub bytes_c2s: u64,
    pub bytes_s2c: u64,
    pub client_properties: Option<Table>,
    pub server_properties: Option<Table>,
    /// TLS connections: "TLSv1.3", the suite's IANA name, and whether the session was resumed.
    pub tls_version: Option<String>,
    pub tls_suite: Option<String>,
    pub tls_resumed: Option<bool>,
    /// close: who sent the flow's first TCP FIN ("client" | "server") and its packet.
    pub fin_by: Option<String>,
    pub fin_packet: Option<u64>,
    /// close: who sent the flow's first TCP RST and its packet.
    pub rst_by: Option<String>,
    pub rst_packet: Option<u64>,
    /// close: None when the connection spoke AMQP 0-9-1 (or 0-9); otherwise what the client's
    /// first bytes were: "amqp-1.0", "amqp-0-10", "amqp-other", "tls" (not decrypted), "http",
    /// "other", or "nothing" (no payload either way).
    pub opening: Option<&'static str>,
}

/// A TLS connection (AMQPS), reported once when it closes: what its handshake showed, what was
/// decrypted and, when records were not, why ("no key for this connection", …).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tls {
    pub base: Base,
    pub client: String,
    pub server: String,
    pub version: Option<String>,
    pub suite: Option<String>,
    pub sni: Option<String>,
    /// The protocols offered by the client, or the one the server chose when it was seen.
    pub alpn: Option<String>,
    pub resumed: bool,
    pub decrypted: bool,
    pub reason: Option<String>,
    pub records: u64,
    pub records_decrypted: u64,
    pub records_failed: u64,
    /// Records a TCP gap took with it (known from the sequence numbers skipped).
    pub records_lost: u64,
    /// TLS bytes each way (records and all).
    pub bytes_c2s: u64,
    pub bytes_s2c: u64,
}

impl Default for Base {
    fn default() -> Self {
        Base {
            packet: 0,
            ts_ns: 0,
            conn: -1,
            dir: None,
            channel: None,
        }
    }
}

/// Where every byte of every AMQP stream went (`decode --stats`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Accounting {
    pub base: Base,
    pub stream_bytes: u64,
    pub frame_bytes: u64,
    /// Protocol headers.
    pub header_bytes: u64,
    pub gap_bytes: u64,
    /// Garbage, partial frames around gaps, bytes before a resync.
    pub skipped_bytes: u64,
    /// An incomplete frame left at the end of the capture.
    pub pending_bytes: u64,
    pub frames: u64,
    pub packets: u64,
    pub tcp_packets: u64,
    /// TLS record bytes of every TLS connection, and those never decrypted (no key, unsupported
    /// suite, failed authentication, lost sync).
    pub tls_bytes: u64,
    pub tls_opaque_bytes: u64,
}

/// A check that failed: a broken rule of the spec, a frame rule, a deviation or a warning.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Finding {
    pub base: Base,
    /// Stable id, e.g. "basic.ack.multiple.exists" or "frame.end".
    pub rule: String,
    /// violation | deviation | warning | info
    pub severity: &'static str,
    /// The reply code a conforming peer would answer with.
    pub code: Option<i64>,
    /// RabbitMQ's actual answer where it differs from the spec's rule (a named broker behaviour).
    pub rabbitmq_code: Option<i64>,
    pub message: String,
    /// Every packet that proves it.
    pub packets: Vec<u64>,
    /// What the capture shows the peer did, and whether it matched.
    pub peer_reaction: Option<String>,
}

/// What a ledger record is about (`entry` in every output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Entry {
    /// A basic.deliver or basic.get-ok: now unacked, or settled on delivery (no-ack).
    Deliver,
    /// One delivery settled by a client ack/nack/reject (at tx.commit inside a transaction).
    Settle,
    /// A client ack/nack/reject that settles nothing the broker accepts (RabbitMQ: 406).
    BadAck,
    /// One unacked delivery released: basic.recover, channel or connection closed, capture end.
    Release,
    /// A tx.rollback that put acknowledged deliveries back (count).
    Rollback,
    /// A basic.qos: the prefetch limit and whom it applies to.
    Qos,
    /// A consumer's summary when its channel ends: deliveries, peak in flight, prefetch.
    Consumer,
    /// A channel's spell with a prefetch limit exhausted (duration), reported when it ends.
    AtLimit,
    /// One publish confirmed by a server basic.ack/basic.nack.
    Confirm,
    /// A server basic.ack/basic.nack that names no unconfirmed publish.
    BadConfirm,
    /// One publish in confirm mode never confirmed: dropped at a close or open at the end.
    Unconfirmed,
    /// A basic.return on a channel in confirm mode, matched to its publish or not.
    Return,
    /// A synchronous request and how it ended: answered (latency), no-wait, closed, unanswered.
    Pair,
    /// A direction silent for more than twice the negotiated heartbeat, then heard from again.
    HeartbeatMiss,
    /// A direction's heartbeat summary when its connection ends.
    Heartbeat,
}

impl Entry {
    pub const ALL: [Entry; 15] = [
        Entry::Deliver,
        Entry::Settle,
        Entry::BadAck,
        Entry::Release,
        Entry::Rollback,
        Entry::Qos,
        Entry::Consumer,
        Entry::AtLimit,
        Entry::Confirm,
        Entry::BadConfirm,
        Entry::Unconfirmed,
        Entry::Return,
        Entry::Pair,
        Entry::HeartbeatMiss,
        Entry::Heartbeat,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Entry::Deliver => "deliver",
            Entry::Settle => "settle",
            Entry::BadAck => "bad-ack",
            Entry::Release => "release",
            Entry::Rollback => "rollback",
            Entry::Qos => "qos",
            Entry::Consumer => "consumer",
            Entry::AtLimit => "at-limit",
            Entry::Confirm => "confirm",
            Entry::BadConfirm => "bad-confirm",
            Entry::Unconfirmed => "unconfirmed",
            Entry::Return => "return",
            Entry::Pair => "pair",
            Entry::HeartbeatMiss => "heartbeat-miss",
            Entry::Heartbeat => "heartbeat",
        }
    }

    pub fn parse(s: &str) -> Option<Entry> {
        Entry::ALL.into_iter().find(|e| e.as_str() == s)
    }
}

/// One record of the ledger: what the protocol bookkeeping concluded at `base.packet`. The
/// validator reads these in-process and the analytics read them as events; `docs/analytics.md`
/// lists which fields each entry sets.
#[derive(Debug, Clone, PartialEq)]
pub struct Ledger {
    pub base: Base,
    pub entry: Entry,
    /// The method at `base.packet` (basic.ack, basic.deliver, the reply of a pair, …).
    pub method: Option<Name>,
    /// Pair: the request.
    pub request: Option<Name>,
    /// The delivery tag or publish sequence number the entry is about.
    pub tag: Option<u64>,
    /// How many deliveries, publishes or requests the entry covers.
    pub count: u64,
    pub multiple: bool,
    pub requeue: bool,
    pub redelivered: bool,
    pub returned: bool,
    /// One of [`crate::ledger::OUTCOMES`].
    pub outcome: Option<&'static str>,
    /// Nanoseconds from request, delivery or publish to its answer.
    pub latency_ns: Option<i64>,
    /// Nanoseconds at a prefetch limit, of heartbeat silence, or a release/unconfirmed was held.
    pub duration_ns: Option<i64>,
    /// Heartbeat: silence from the direction's last frame to the end of the connection.
    pub idle_ns: Option<i64>,
    /// Unacked consumer deliveries on the channel after the entry.
    pub in_flight: Option<u64>,
    /// The bound in force: prefetch count, or the negotiated heartbeat interval (seconds).
    pub limit: Option<u64>,
    pub consumer_tag: Option<Name>,
    pub exchange: Option<Name>,
    pub routing_key: Option<Name>,
    /// The other proving packet: the delivery, publish or request, the last frame before silence.
    pub ref_packet: Option<u64>,
    /// Bad acks on the wrong channel: where the tag is outstanding.
    pub ref_channel: Option<u16>,
}

impl Ledger {
    pub fn new(base: Base, entry: Entry) -> Ledger {
        Ledger {
            base,
            entry,
            method: None,
            request: None,
            tag: None,
            count: 1,
            multiple: false,
            requeue: false,
            redelivered: false,
            returned: false,
            outcome: None,
            latency_ns: None,
            duration_ns: None,
            idle_ns: None,
            in_flight: None,
            limit: None,
            consumer_tag: None,
            exchange: None,
            routing_key: None,
            ref_packet: None,
            ref_channel: None,
        }
    }
}

/// Nanoseconds as the outputs show durations: float seconds.
pub fn seconds(ns: Option<i64>) -> Option<f64> {
    ns.map(|v| v as f64 / 1e9)
}

/// One event.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    ProtocolHeader(Box<ProtocolHeader>),
    Frame(Box<Frame>),
    Message(Box<Message>),
    Gap(Box<Gap>),
    Resync(Box<Resync>),
    Malformed(Box<Malformed>),
    Connection(Box<Connection>),
    Accounting(Box<Accounting>),
    Tls(Box<Tls>),
    Finding(Box<Finding>),
    Ledger(Box<Ledger>),
}

impl Event {
    /// The `kind` every output names the event by.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::ProtocolHeader(_) => "protocol-header",
            Event::Frame(_) => "frame",
            Event::Message(_) => "message",
            Event::Gap(_) => "gap",
            Event::Resync(_) => "resync",
            Event::Malformed(_) => "malformed",
            Event::Connection(_) => "connection",
            Event::Accounting(_) => "accounting",
            Event::Tls(_) => "tls",
            Event::Finding(_) => "finding",
            Event::Ledger(_) => "ledger",
        }
    }

    pub fn base_mut(&mut self) -> &mut Base {
        match self {
            Event::ProtocolHeader(e) => &mut e.base,
            Event::Frame(e) => &mut e.base,
            Event::Message(e) => &mut e.base,
            Event::Gap(e) => &mut e.base,
            Event::Resync(e) => &mut e.base,
            Event::Malformed(e) => &mut e.base,
            Event::Connection(e) => &mut e.base,
            Event::Accounting(e) => &mut e.base,
            Event::Tls(e) => &mut e.base,
            Event::Finding(e) => &mut e.base,
            Event::Ledger(e) => &mut e.base,
        }
    }

    pub fn base(&self) -> &Base {
        match self {
            Event::ProtocolHeader(e) => &e.base,
            Event::Frame(e) => &e.base,
            Event::Message(e) => &e.base,
            Event::Gap(e) => &e.base,
            Event::Resync(e) => &e.base,
            Event::Malformed(e) => &e.base,
            Event::Connection(e) => &e.base,
            Event::Accounting(e) => &e.base,
            Event::Tls(e) => &e.base,
            Event::Finding(e) => &e.base,
            Event::Ledger(e) => &e.base,
        }
    }
}

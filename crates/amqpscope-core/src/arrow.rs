//! Arrow record batches of the Parquet tables, built from core events.
//!
//! The tables' one schema is derived in Python (`amqpscope/spark/schema.py`) and handed in as an
//! Arrow `Schema`; a [`TableBuilder`] fills its columns BY NAME (tests/table_reference.py derives
//! the same rows independently, from each event's record):
//!
//! - `kind`; the event base fields (`packet`, `ts`, `conn`, `dir`, `channel`) and each kind's own
//!   fields under their `amqpscope/events.py` names (a field a kind does not have is null);
//! - `time`: `ts` as a timestamp in microseconds ([`micros`], also for the rows made in Python:
//!   `json_rows`), so no two tables differ by a rounding;
//! - the promoted argument and property columns (`PROMOTED_ARGS` / `PROMOTED_PROPERTIES` of
//!   schema.py): the value of that key when its type is exactly the column's (a string for
//!   string columns, an integer that fits an int64 for int64 columns, a bool for bool columns),
//!   else null (an exact type check: a bool is not an integer);
//! - map<string,string> columns (`args`, `properties`, connection properties): strings as they
//!   are, every other value as the JSON text `jsonl` writes for it. In a table with promoted columns, `args` and `properties` hold the rest:
//!   an entry a promoted column holds is not repeated in the map (they were most of the
//!   tables' bytes, written twice);
//! - constant columns (capture, capture_id, capture_date) from the values given;
//! - `seq`: the event's number in its decode (every event the decoder emitted counts, of all
//!   kinds and tables), so that readers can restore the order of events across the tables.
//!
//! A column name the core does not know, or a column whose Arrow type is not the one its field
//! has, is an error when the builder is made: schema and core cannot drift apart silently.
//! Rows go straight into Arrow builders; nothing is allocated per row beyond their growth.

use std::sync::Arc;

use arrow_array::builder::{
    ArrayBuilder, BooleanBuilder, Float64Builder, Int64Builder, ListBuilder, StringBuilder,
    TimestampMicrosecondBuilder,
};
use arrow_array::{Array, ArrayRef, Int64Array, MapArray, StringArray, StructArray};
use arrow_buffer::{Buffer, NullBufferBuilder, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field as ArrowField, FieldRef, TimeUnit};

pub use arrow_array::ffi::FFI_ArrowArray;
pub use arrow_array::RecordBatch;
pub use arrow_schema::ffi::FFI_ArrowSchema;
pub use arrow_schema::{ArrowError, Schema, SchemaRef};

use crate::event::{seconds, Dir, Event};
use crate::jsonl::{write_hex, write_value};
use crate::value::{Table, Value};

/// `PROMOTED_ARGS` of schema.py: the method arguments with a typed column of the same name.
pub const PROMOTED_ARGS: [&str; 15] = [
    "exchange",
    "routing_key",
    "queue",
    "consumer_tag",
    "delivery_tag",
    "multiple",
    "requeue",
    "redelivered",
    "mandatory",
    "no_ack",
    "reply_code",
    "reply_text",
    "message_count",
    "consumer_count",
    "prefetch_count",
];

/// `PROMOTED_PROPERTIES` of schema.py: (property, column).
pub const PROMOTED_PROPERTIES: [(&str, &str); 11] = [
    ("content_type", "content_type"),
    ("content_encoding", "content_encoding"),
    ("delivery_mode", "delivery_mode"),
    ("priority", "priority"),
    ("correlation_id", "correlation_id"),
    ("reply_to", "reply_to"),
    ("expiration", "expiration"),
    ("message_id", "message_id"),
    ("type", "message_type"),
    ("user_id", "user_id"),
    ("app_id", "app_id"),
];

/// The kinds of events the core makes, in `Event` order.
pub const KINDS: [&str; 11] = [
    "protocol-header",
    "frame",
    "message",
    "gap",
    "resync",
    "malformed",
    "connection",
    "accounting",
    "tls",
    "finding",
    "ledger",
];

/// An event's kind, in `Event` (and `KINDS`) order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    ProtocolHeader,
    Frame,
    Message,
    Gap,
    Resync,
    Malformed,
    Connection,
    Accounting,
    Tls,
    Finding,
    Ledger,
}

impl Kind {
    const ALL: [Kind; KINDS.len()] = [
        Kind::ProtocolHeader,
        Kind::Frame,
        Kind::Message,
        Kind::Gap,
        Kind::Resync,
        Kind::Malformed,
        Kind::Connection,
        Kind::Accounting,
        Kind::Tls,
        Kind::Finding,
        Kind::Ledger,
    ];

    fn of(ev: &Event) -> Kind {
        match ev {
            Event::ProtocolHeader(_) => Kind::ProtocolHeader,
            Event::Frame(_) => Kind::Frame,
            Event::Message(_) => Kind::Message,
            Event::Gap(_) => Kind::Gap,
            Event::Resync(_) => Kind::Resync,
            Event::Malformed(_) => Kind::Malformed,
            Event::Connection(_) => Kind::Connection,
            Event::Accounting(_) => Kind::Accounting,
            Event::Tls(_) => Kind::Tls,
            Event::Finding(_) => Kind::Finding,
            Event::Ledger(_) => Kind::Ledger,
        }
    }
}

/// The Arrow type a field's values take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ty {
    Int,
    Float,
    Bool,
    Str,
    Map,
    /// list<int64>: the packets that prove a finding.
    IntList,
}

/// An event field stored in a column of the same name (`amqpscope/events.py` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Packet,
    Ts,
    Conn,
    Dir,
    Channel,
    // frame
    Type,
    Size,
    ClassId,
    MethodId,
    Method,
    Args,
    BodySize,
    Properties,
    Resync,
    Problem,
    // protocol header, gap, resync, malformed
    Version,
    Raw,
    LostFrame,
    Skipped,
    Reason,
    Offset,
    // message
    BodyReceived,
    Complete,
    FirstPacket,
    Frames,
    BodySha256,
    // connection
    State,
    Client,
    Server,
    SynSeen,
    Ended,
    FrameMax,
    ChannelMax,
    Heartbeat,
    Mechanism,
    User,
    Password,
    Vhost,
    ClientProduct,
    ClientVersion,
    ClientPlatform,
    ServerProduct,
    ServerVersion,
    CloseCode,
    CloseText,
    CloseBy,
    FramesC2s,
    FramesS2c,
    BytesC2s,
    BytesS2c,
    ClientProperties,
    ServerProperties,
    FinBy,
    FinPacket,
    RstBy,
    RstPacket,
    Opening,
    // accounting
    StreamBytes,
    FrameBytes,
    HeaderBytes,
    GapBytes,
    SkippedBytes,
    PendingBytes,
    Packets,
    TcpPackets,
    TlsBytes,
    TlsOpaqueBytes,
    // tls (and the connection's summary of it)
    TlsVersion,
    TlsSuite,
    TlsResumed,
    Suite,
    Sni,
    Alpn,
    Resumed,
    Decrypted,
    Records,
    RecordsDecrypted,
    RecordsFailed,
    RecordsLost,
    // finding
    Rule,
    Severity,
    Code,
    RabbitmqCode,
    Message,
    ProvingPackets,
    PeerReaction,
    // ledger (`method` is the frame's field; `exchange`, `routing_key`, `consumer_tag`,
    // `multiple`, `requeue` and `redelivered` share their names with promoted arguments)
    Entry,
    Request,
    Tag,
    Count,
    Multiple,
    Requeue,
    Redelivered,
    Returned,
    Outcome,
    Latency,
    Duration,
    Idle,
    InFlight,
    Limit,
    ConsumerTag,
    Exchange,
    RoutingKey,
    RefPacket,
    RefChannel,
}

/// Every event field by column name, with its Arrow type.
const FIELDS: [(&str, Field, Ty); 105] = [
    ("packet", Field::Packet, Ty::Int),
    ("ts", Field::Ts, Ty::Float),
    ("conn", Field::Conn, Ty::Int),
    ("dir", Field::Dir, Ty::Str),
    ("channel", Field::Channel, Ty::Int),
    ("type", Field::Type, Ty::Str),
    ("size", Field::Size, Ty::Int),
    ("class_id", Field::ClassId, Ty::Int),
    ("method_id", Field::MethodId, Ty::Int),
    ("method", Field::Method, Ty::Str),
    ("args", Field::Args, Ty::Map),
    ("body_size", Field::BodySize, Ty::Int),
    ("properties", Field::Properties, Ty::Map),
    ("resync", Field::Resync, Ty::Bool),
    ("problem", Field::Problem, Ty::Str),
    ("version", Field::Version, Ty::Str),
    ("raw", Field::Raw, Ty::Str),
    ("lost_frame", Field::LostFrame, Ty::Str),
    ("skipped", Field::Skipped, Ty::Int),
    ("reason", Field::Reason, Ty::Str),
    ("offset", Field::Offset, Ty::Int),
    ("body_received", Field::BodyReceived, Ty::Int),
    ("complete", Field::Complete, Ty::Bool),
    ("first_packet", Field::FirstPacket, Ty::Int),
    ("frames", Field::Frames, Ty::Int),
    ("body_sha256", Field::BodySha256, Ty::Str),
    ("state", Field::State, Ty::Str),
    ("client", Field::Client, Ty::Str),
    ("server", Field::Server, Ty::Str),
    ("syn_seen", Field::SynSeen, Ty::Bool),
    ("ended", Field::Ended, Ty::Str),
    ("frame_max", Field::FrameMax, Ty::Int),
    ("channel_max", Field::ChannelMax, Ty::Int),
    ("heartbeat", Field::Heartbeat, Ty::Int),
    ("mechanism", Field::Mechanism, Ty::Str),
    ("user", Field::User, Ty::Str),
    ("password", Field::Password, Ty::Str),
    ("vhost", Field::Vhost, Ty::Str),
    ("client_product", Field::ClientProduct, Ty::Str),
    ("client_version", Field::ClientVersion, Ty::Str),
    ("client_platform", Field::ClientPlatform, Ty::Str),
    ("server_product", Field::ServerProduct, Ty::Str),
    ("server_version", Field::ServerVersion, Ty::Str),
    ("close_code", Field::CloseCode, Ty::Int),
    ("close_text", Field::CloseText, Ty::Str),
    ("close_by", Field::CloseBy, Ty::Str),
    ("frames_c2s", Field::FramesC2s, Ty::Int),
    ("frames_s2c", Field::FramesS2c, Ty::Int),
    ("bytes_c2s", Field::BytesC2s, Ty::Int),
    ("bytes_s2c", Field::BytesS2c, Ty::Int),
    ("client_properties", Field::ClientProperties, Ty::Map),
    ("server_properties", Field::ServerProperties, Ty::Map),
    ("fin_by", Field::FinBy, Ty::Str),
    ("fin_packet", Field::FinPacket, Ty::Int),
    ("rst_by", Field::RstBy, Ty::Str),
    ("rst_packet", Field::RstPacket, Ty::Int),
    ("opening", Field::Opening, Ty::Str),
    ("stream_bytes", Field::StreamBytes, Ty::Int),
    ("frame_bytes", Field::FrameBytes, Ty::Int),
    ("header_bytes", Field::HeaderBytes, Ty::Int),
    ("gap_bytes", Field::GapBytes, Ty::Int),
    ("skipped_bytes", Field::SkippedBytes, Ty::Int),
    ("pending_bytes", Field::PendingBytes, Ty::Int),
    ("packets", Field::Packets, Ty::Int),
    ("tcp_packets", Field::TcpPackets, Ty::Int),
    ("tls_bytes", Field::TlsBytes, Ty::Int),
    ("tls_opaque_bytes", Field::TlsOpaqueBytes, Ty::Int),
    ("tls_version", Field::TlsVersion, Ty::Str),
    ("tls_suite", Field::TlsSuite, Ty::Str),
    ("tls_resumed", Field::TlsResumed, Ty::Bool),
    ("suite", Field::Suite, Ty::Str),
    ("sni", Field::Sni, Ty::Str),
    ("alpn", Field::Alpn, Ty::Str),
    ("resumed", Field::Resumed, Ty::Bool),
    ("decrypted", Field::Decrypted, Ty::Bool),
    ("records", Field::Records, Ty::Int),
    ("records_decrypted", Field::RecordsDecrypted, Ty::Int),
    ("records_failed", Field::RecordsFailed, Ty::Int),
    ("records_lost", Field::RecordsLost, Ty::Int),
    ("rule", Field::Rule, Ty::Str),
    ("severity", Field::Severity, Ty::Str),
    ("code", Field::Code, Ty::Int),
    ("rabbitmq_code", Field::RabbitmqCode, Ty::Int),
    ("message", Field::Message, Ty::Str),
    // the same name as the accounting's packet count: told apart by the column's type
    ("packets", Field::ProvingPackets, Ty::IntList),
    ("peer_reaction", Field::PeerReaction, Ty::Str),
    ("entry", Field::Entry, Ty::Str),
    ("request", Field::Request, Ty::Str),
    ("tag", Field::Tag, Ty::Int),
    ("count", Field::Count, Ty::Int),
    ("multiple", Field::Multiple, Ty::Bool),
    ("requeue", Field::Requeue, Ty::Bool),
    ("redelivered", Field::Redelivered, Ty::Bool),
    ("returned", Field::Returned, Ty::Bool),
    ("outcome", Field::Outcome, Ty::Str),
    ("latency", Field::Latency, Ty::Float),
    ("duration", Field::Duration, Ty::Float),
    ("idle", Field::Idle, Ty::Float),
    ("in_flight", Field::InFlight, Ty::Int),
    ("limit", Field::Limit, Ty::Int),
    ("consumer_tag", Field::ConsumerTag, Ty::Str),
    ("exchange", Field::Exchange, Ty::Str),
    ("routing_key", Field::RoutingKey, Ty::Str),
    ("ref_packet", Field::RefPacket, Ty::Int),
    ("ref_channel", Field::RefChannel, Ty::Int),
];

/// How a column reads its field off the events of one kind, typed: chosen once per column and
/// kind when the builder is made, so that appending a run of events of one kind is a plain
/// loop of calls, not a `match` over (field, kind) and an untyped cell per value.
#[derive(Clone, Copy)]
enum Get {
    Int(fn(&Event) -> Option<i64>),
    /// Checked against the int64 range as it is appended.
    UInt(fn(&Event) -> Option<u64>),
    Float(fn(&Event) -> Option<f64>),
    Bool(fn(&Event) -> Option<bool>),
    Str(fn(&Event) -> Option<&str>),
    /// Written as lowercase hex text (the protocol header's raw bytes).
    Hex(fn(&Event) -> Option<&[u8]>),
    Map(fn(&Event) -> Option<&Table>),
    Ints(fn(&Event) -> Option<&[u64]>),
}

impl Get {
    /// Whether its values go into a column of this type.
    fn fits(self, ty: Ty) -> bool {
        matches!(
            (self, ty),
            (Get::Int(_) | Get::UInt(_), Ty::Int)
                | (Get::Float(_), Ty::Float)
                | (Get::Bool(_), Ty::Bool)
                | (Get::Str(_) | Get::Hex(_), Ty::Str)
                | (Get::Map(_), Ty::Map)
                | (Get::Ints(_), Ty::IntList)
        )
    }
}

/// `$get` reading `$body` off an `Event::$kind` (`$e` its payload); other kinds give null, which
/// never happens: a getter is only called on the events of the kind it was chosen for.
macro_rules! get {
    ($get:ident, $kind:ident, |$e:ident| $body:expr) => {
        Get::$get(|ev| match ev {
            Event::$kind($e) => $body,
            _ => None,
        })
    };
}

impl Field {
    /// How to read this field off events of `kind`; None when that kind has no such field (its
    /// rows are null).
    fn getter(self, kind: Kind) -> Option<Get> {
        use Field as F;
        use Kind as K;
        let g = match (self, kind) {
            (F::Packet, _) => Get::UInt(|ev| Some(ev.base().packet)),
            (F::Ts, _) => Get::Float(|ev| Some(ev.base().ts())),
            (F::Conn, _) => Get::Int(|ev| Some(ev.base().conn)),
            (F::Dir, _) => Get::Str(|ev| ev.base().dir.map(Dir::as_str)),
            (F::Channel, _) => Get::Int(|ev| ev.base().channel.map(i64::from)),

            (F::Type, K::Frame) => get!(Str, Frame, |e| Some(e.ftype.as_str())),
            (F::Size, K::Frame) => get!(Int, Frame, |e| Some(e.size.into())),
            (F::Size, K::Gap) => get!(UInt, Gap, |e| Some(e.size)),
            (F::ClassId, K::Frame) => get!(Int, Frame, |e| e.class_id.map(i64::from)),
            (F::MethodId, K::Frame) => get!(Int, Frame, |e| e.method_id.map(i64::from)),
            (F::Method, K::Frame) => get!(Str, Frame, |e| e.method.as_deref()),
            (F::Method, K::Message) => get!(Str, Message, |e| Some(e.method.as_str())),
            (F::Args, K::Frame) => get!(Map, Frame, |e| e.args.as_ref()),
            (F::Args, K::Message) => get!(Map, Message, |e| Some(&e.args)),
            (F::BodySize, K::Frame) => get!(UInt, Frame, |e| e.body_size),
            (F::BodySize, K::Message) => get!(UInt, Message, |e| Some(e.body_size)),
            (F::Properties, K::Frame) => get!(Map, Frame, |e| e.properties.as_ref()),
            (F::Properties, K::Message) => get!(Map, Message, |e| Some(&e.properties)),
            (F::Resync, K::Frame) => get!(Bool, Frame, |e| Some(e.resync)),
            (F::Problem, K::Frame) => get!(Str, Frame, |e| e.problem.as_deref()),

            (F::Version, K::ProtocolHeader) => {
                get!(Str, ProtocolHeader, |e| Some(e.version.as_str()))
            }
            (F::Version, K::Connection) => get!(Str, Connection, |e| e.version.as_deref()),
            (F::Raw, K::ProtocolHeader) => get!(Hex, ProtocolHeader, |e| Some(&e.raw[..])),
            (F::LostFrame, K::Gap) => get!(Str, Gap, |e| e.lost_frame.as_deref()),
            (F::Skipped, K::Resync) => get!(UInt, Resync, |e| Some(e.skipped)),
            (F::Reason, K::Resync) => get!(Str, Resync, |e| Some(e.reason.as_str())),
            (F::Reason, K::Malformed) => get!(Str, Malformed, |e| Some(e.reason.as_str())),
            (F::Offset, K::Malformed) => get!(UInt, Malformed, |e| Some(e.offset)),

            (F::BodyReceived, K::Message) => get!(UInt, Message, |e| Some(e.body_received)),
            (F::Complete, K::Message) => get!(Bool, Message, |e| Some(e.complete)),
            (F::FirstPacket, K::Message) => get!(UInt, Message, |e| Some(e.first_packet)),
            (F::Frames, K::Message) => get!(UInt, Message, |e| Some(e.frames)),
            (F::Frames, K::Accounting) => get!(UInt, Accounting, |e| Some(e.frames)),
            (F::BodySha256, K::Message) => get!(Str, Message, |e| e.body_sha256.as_deref()),

            (F::State, K::Connection) => get!(Str, Connection, |e| Some(e.state.as_str())),
            (F::Client, K::Connection) => get!(Str, Connection, |e| Some(e.client.as_str())),
            (F::Server, K::Connection) => get!(Str, Connection, |e| Some(e.server.as_str())),
            (F::SynSeen, K::Connection) => get!(Bool, Connection, |e| Some(e.syn_seen)),
            (F::Ended, K::Connection) => get!(Str, Connection, |e| e.ended.as_deref()),
            (F::FrameMax, K::Connection) => get!(Int, Connection, |e| e.frame_max),
            (F::ChannelMax, K::Connection) => get!(Int, Connection, |e| e.channel_max),
            (F::Heartbeat, K::Connection) => get!(Int, Connection, |e| e.heartbeat),
            (F::Mechanism, K::Connection) => get!(Str, Connection, |e| e.mechanism.as_deref()),
            (F::User, K::Connection) => get!(Str, Connection, |e| e.user.as_deref()),
            (F::Password, K::Connection) => get!(Str, Connection, |e| e.password.as_deref()),
            (F::Vhost, K::Connection) => get!(Str, Connection, |e| e.vhost.as_deref()),
            (F::ClientProduct, K::Connection) => {
                get!(Str, Connection, |e| e.client_product.as_deref())
            }
            (F::ClientVersion, K::Connection) => {
                get!(Str, Connection, |e| e.client_version.as_deref())
            }
            (F::ClientPlatform, K::Connection) => {
                get!(Str, Connection, |e| e.client_platform.as_deref())
            }
            (F::ServerProduct, K::Connection) => {
                get!(Str, Connection, |e| e.server_product.as_deref())
            }
            (F::ServerVersion, K::Connection) => {
                get!(Str, Connection, |e| e.server_version.as_deref())
            }
            (F::CloseCode, K::Connection) => get!(Int, Connection, |e| e.close_code),
            (F::CloseText, K::Connection) => get!(Str, Connection, |e| e.close_text.as_deref()),
            (F::CloseBy, K::Connection) => get!(Str, Connection, |e| e.close_by.as_deref()),
            (F::FramesC2s, K::Connection) => get!(UInt, Connection, |e| Some(e.frames_c2s)),
            (F::FramesS2c, K::Connection) => get!(UInt, Connection, |e| Some(e.frames_s2c)),
            (F::BytesC2s, K::Connection) => get!(UInt, Connection, |e| Some(e.bytes_c2s)),
            (F::BytesS2c, K::Connection) => get!(UInt, Connection, |e| Some(e.bytes_s2c)),
            (F::ClientProperties, K::Connection) => {
                get!(Map, Connection, |e| e.client_properties.as_ref())
            }
            (F::ServerProperties, K::Connection) => {
                get!(Map, Connection, |e| e.server_properties.as_ref())
            }

            (F::StreamBytes, K::Accounting) => get!(UInt, Accounting, |e| Some(e.stream_bytes)),
            (F::FrameBytes, K::Accounting) => get!(UInt, Accounting, |e| Some(e.frame_bytes)),
            (F::HeaderBytes, K::Accounting) => get!(UInt, Accounting, |e| Some(e.header_bytes)),
            (F::GapBytes, K::Accounting) => get!(UInt, Accounting, |e| Some(e.gap_bytes)),
            (F::SkippedBytes, K::Accounting) => {
                get!(UInt, Accounting, |e| Some(e.skipped_bytes))
            }
            (F::PendingBytes, K::Accounting) => {
                get!(UInt, Accounting, |e| Some(e.pending_bytes))
            }
            (F::Packets, K::Accounting) => get!(UInt, Accounting, |e| Some(e.packets)),
            (F::TcpPackets, K::Accounting) => get!(UInt, Accounting, |e| Some(e.tcp_packets)),
            (F::TlsBytes, K::Accounting) => get!(UInt, Accounting, |e| Some(e.tls_bytes)),
            (F::TlsOpaqueBytes, K::Accounting) => {
                get!(UInt, Accounting, |e| Some(e.tls_opaque_bytes))
            }

            (F::TlsVersion, K::Connection) => get!(Str, Connection, |e| e.tls_version.as_deref()),
            (F::TlsSuite, K::Connection) => get!(Str, Connection, |e| e.tls_suite.as_deref()),
            (F::TlsResumed, K::Connection) => get!(Bool, Connection, |e| e.tls_resumed),
            (F::FinBy, K::Connection) => get!(Str, Connection, |e| e.fin_by.as_deref()),
            (F::FinPacket, K::Connection) => get!(UInt, Connection, |e| e.fin_packet),
            (F::RstBy, K::Connection) => get!(Str, Connection, |e| e.rst_by.as_deref()),
            (F::RstPacket, K::Connection) => get!(UInt, Connection, |e| e.rst_packet),
            (F::Opening, K::Connection) => get!(Str, Connection, |e| e.opening),
            (F::Client, K::Tls) => get!(Str, Tls, |e| Some(e.client.as_str())),
            (F::Server, K::Tls) => get!(Str, Tls, |e| Some(e.server.as_str())),
            (F::Version, K::Tls) => get!(Str, Tls, |e| e.version.as_deref()),
            (F::Suite, K::Tls) => get!(Str, Tls, |e| e.suite.as_deref()),
            (F::Sni, K::Tls) => get!(Str, Tls, |e| e.sni.as_deref()),
            (F::Alpn, K::Tls) => get!(Str, Tls, |e| e.alpn.as_deref()),
            (F::Resumed, K::Tls) => get!(Bool, Tls, |e| Some(e.resumed)),
            (F::Decrypted, K::Tls) => get!(Bool, Tls, |e| Some(e.decrypted)),
            (F::Reason, K::Tls) => get!(Str, Tls, |e| e.reason.as_deref()),
            (F::Records, K::Tls) => get!(UInt, Tls, |e| Some(e.records)),
            (F::RecordsDecrypted, K::Tls) => get!(UInt, Tls, |e| Some(e.records_decrypted)),
            (F::RecordsFailed, K::Tls) => get!(UInt, Tls, |e| Some(e.records_failed)),
            (F::RecordsLost, K::Tls) => get!(UInt, Tls, |e| Some(e.records_lost)),
            (F::BytesC2s, K::Tls) => get!(UInt, Tls, |e| Some(e.bytes_c2s)),
            (F::BytesS2c, K::Tls) => get!(UInt, Tls, |e| Some(e.bytes_s2c)),

            (F::Rule, K::Finding) => get!(Str, Finding, |e| Some(e.rule.as_str())),
            (F::Severity, K::Finding) => get!(Str, Finding, |e| Some(e.severity)),
            (F::Code, K::Finding) => get!(Int, Finding, |e| e.code),
            (F::RabbitmqCode, K::Finding) => get!(Int, Finding, |e| e.rabbitmq_code),
            (F::Message, K::Finding) => get!(Str, Finding, |e| Some(e.message.as_str())),
            (F::ProvingPackets, K::Finding) => get!(Ints, Finding, |e| Some(&e.packets[..])),
            (F::PeerReaction, K::Finding) => get!(Str, Finding, |e| e.peer_reaction.as_deref()),
            (F::Entry, K::Ledger) => get!(Str, Ledger, |e| Some(e.entry.as_str())),
            (F::Method, K::Ledger) => get!(Str, Ledger, |e| e.method.as_deref()),
            (F::Request, K::Ledger) => get!(Str, Ledger, |e| e.request.as_deref()),
            (F::Tag, K::Ledger) => get!(UInt, Ledger, |e| e.tag),
            (F::Count, K::Ledger) => get!(UInt, Ledger, |e| Some(e.count)),
            (F::Multiple, K::Ledger) => get!(Bool, Ledger, |e| Some(e.multiple)),
            (F::Requeue, K::Ledger) => get!(Bool, Ledger, |e| Some(e.requeue)),
            (F::Redelivered, K::Ledger) => get!(Bool, Ledger, |e| Some(e.redelivered)),
            (F::Returned, K::Ledger) => get!(Bool, Ledger, |e| Some(e.returned)),
            (F::Outcome, K::Ledger) => get!(Str, Ledger, |e| e.outcome),
            (F::Latency, K::Ledger) => get!(Float, Ledger, |e| seconds(e.latency_ns)),
            (F::Duration, K::Ledger) => get!(Float, Ledger, |e| seconds(e.duration_ns)),
            (F::Idle, K::Ledger) => get!(Float, Ledger, |e| seconds(e.idle_ns)),
            (F::InFlight, K::Ledger) => get!(UInt, Ledger, |e| e.in_flight),
            (F::Limit, K::Ledger) => get!(UInt, Ledger, |e| e.limit),
            (F::ConsumerTag, K::Ledger) => get!(Str, Ledger, |e| e.consumer_tag.as_deref()),
            (F::Exchange, K::Ledger) => get!(Str, Ledger, |e| e.exchange.as_deref()),
            (F::RoutingKey, K::Ledger) => get!(Str, Ledger, |e| e.routing_key.as_deref()),
            (F::RefPacket, K::Ledger) => get!(UInt, Ledger, |e| e.ref_packet),
            (F::RefChannel, K::Ledger) => get!(Int, Ledger, |e| e.ref_channel.map(i64::from)),
            _ => return None,
        };
        Some(g)
    }
}

/// Where a column's values come from.
enum Source {
    Kind,
    /// The event's number in its decode (0, 1, … over every event the decoder emitted, of all
    /// kinds): what restores the interleaving of events across the tables.
    Seq,
    Const(String),
    Time,
    /// An event field: how to read it off each kind (`Kind` order), None where it has none.
    Field([Option<Get>; KINDS.len()]),
    /// A promoted argument or property: its slot (`promoted_slot`).
    Promoted(usize),
}

/// A map<string,string> column under construction (also the maps of `json_rows`).
pub(crate) struct MapColumn {
    entries: FieldRef,
    sorted: bool,
    /// `args` or `properties` of a table with promoted columns: the entries a promoted column
    /// holds are left out of the map (each value in one place). The bool: properties.
    rest: Option<bool>,
    offsets: Vec<i32>,
    keys: StringBuilder,
    values: StringBuilder,
    nulls: NullBufferBuilder,
}

impl MapColumn {
    pub(crate) fn new(entries: FieldRef, sorted: bool) -> MapColumn {
        MapColumn {
            entries,
            sorted,
            rest: None,
            offsets: vec![0],
            keys: StringBuilder::new(),
            values: StringBuilder::new(),
            nulls: NullBufferBuilder::new(0),
        }
    }

    fn append(
        &mut self,
        table: Option<&Table>,
        slots: Option<&Slots<'_>>,
        scratch: &mut Vec<u8>,
    ) -> Result<(), ArrowError> {
        match table {
            None => self.nulls.append_null(),
            Some(t) => {
                for (entry, (name, value)) in t.iter().enumerate() {
                    if let (Some(props), Some(slots)) = (self.rest, slots) {
                        if slots.held[usize::from(props)] & held_bit(entry) != 0 {
                            continue;
                        }
                    }
                    self.keys.append_value(name);
                    if let Value::Str(text) = value {
                        self.values.append_value(text); // as it is: no copy through `scratch`
                    } else {
                        map_text(value, scratch);
                        self.values.append_value(utf8(scratch)?);
                    }
                }
                self.nulls.append_non_null();
            }
        }
        self.end_row()
    }

    /// A row of `(key, value)` texts as they are; None: a null map.
    pub(crate) fn append_pairs<'a>(
        &mut self,
        pairs: Option<impl IntoIterator<Item = (&'a str, &'a str)>>,
    ) -> Result<(), ArrowError> {
        match pairs {
            None => self.nulls.append_null(),
            Some(pairs) => {
                for (k, v) in pairs {
                    self.keys.append_value(k);
                    self.values.append_value(v);
                }
                self.nulls.append_non_null();
            }
        }
        self.end_row()
    }

    fn end_row(&mut self) -> Result<(), ArrowError> {
        let end = i32::try_from(self.keys.len())
            .map_err(|_| ArrowError::ComputeError("too many map entries in one batch".into()))?;
        self.offsets.push(end);
        Ok(())
    }

    fn append_nulls(&mut self, n: usize) {
        self.nulls.append_n_nulls(n);
        let end = self.offsets.last().copied().unwrap_or(0);
        self.offsets.extend(std::iter::repeat_n(end, n));
    }

    pub(crate) fn finish(&mut self) -> Result<ArrayRef, ArrowError> {
        let DataType::Struct(fields) = self.entries.data_type() else {
            return Err(ArrowError::SchemaError(
                "map entries are not a struct".into(),
            ));
        };
        let keys: ArrayRef = Arc::new(self.keys.finish());
        let values: ArrayRef = Arc::new(self.values.finish());
        let entries = StructArray::try_new(fields.clone(), vec![keys, values], None)?;
        let offsets = std::mem::replace(&mut self.offsets, vec![0]);
        let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
        let map = MapArray::try_new(
            self.entries.clone(),
            offsets,
            entries,
            self.nulls.finish(),
            self.sorted,
        )?;
        Ok(Arc::new(map))
    }
}

/// A value as the text of a map<string,string> entry: a string as it is, anything else as the
/// JSON `jsonl` writes for it (rows.py's `map_items`: `str`, `int.__repr__`, true/false, else
/// orjson through `records._default`). `scratch` holds the text.
pub fn map_text(v: &Value, scratch: &mut Vec<u8>) {
    scratch.clear();
    match v {
        Value::Str(s) => scratch.extend_from_slice(s.as_bytes()),
        other => write_value(scratch, other),
    }
}

fn utf8(raw: &[u8]) -> Result<&str, ArrowError> {
    std::str::from_utf8(raw).map_err(|e| ArrowError::ComputeError(format!("map text: {e}")))
}

enum Builder {
    Int(Int64Builder),
    Float(Float64Builder),
    Bool(BooleanBuilder),
    Str(StringBuilder),
    Time(TimestampMicrosecondBuilder),
    Map(MapColumn),
    /// With the schema's item field, so that the batch's type is exactly the schema's.
    IntList(ListBuilder<Int64Builder>, FieldRef),
}

impl Builder {
    /// `n` nulls at once.
    fn append_nulls(&mut self, n: usize) {
        match self {
            Builder::Int(b) => b.append_nulls(n),
            Builder::Float(b) => b.append_nulls(n),
            Builder::Bool(b) => b.append_nulls(n),
            Builder::Str(b) => b.append_nulls(n),
            Builder::Time(b) => b.append_nulls(n),
            Builder::Map(m) => m.append_nulls(n),
            Builder::IntList(b, _) => b.append_nulls(n),
        }
    }

    /// An empty builder of the same type with room for `rows` rows.
    fn fresh(&self, rows: usize) -> Builder {
        match self {
            Builder::Int(_) => Builder::Int(Int64Builder::with_capacity(rows)),
            Builder::Float(_) => Builder::Float(Float64Builder::with_capacity(rows)),
            Builder::Bool(_) => Builder::Bool(BooleanBuilder::with_capacity(rows)),
            Builder::Str(_) => Builder::Str(StringBuilder::with_capacity(rows, rows * 8)),
            Builder::Time(_) => Builder::Time(TimestampMicrosecondBuilder::with_capacity(rows)),
            Builder::Map(m) => {
                let mut fresh = MapColumn::new(m.entries.clone(), m.sorted);
                fresh.rest = m.rest;
                // the rest of arguments and properties is a few entries in most rows
                let entries = if m.rest.is_some() { rows } else { rows * 4 };
                fresh.offsets.reserve(rows);
                fresh.keys = StringBuilder::with_capacity(entries, entries * 12);
                fresh.values = StringBuilder::with_capacity(entries, entries * 12);
                fresh.nulls = NullBufferBuilder::new(rows);
                Builder::Map(fresh)
            }
            Builder::IntList(_, item) => Builder::IntList(
                ListBuilder::with_capacity(Int64Builder::with_capacity(rows * 2), rows)
                    .with_field(item.clone()),
                item.clone(),
            ),
        }
    }
}

struct Column {
    name: String,
    data_type: DataType,
    source: Source,
    builder: Builder,
}

impl Column {
    /// This column's values of a chunk of rows: `runs` cuts it into runs of one kind, `slots`
    /// holds its promoted values (`filled`: the slots any row has). The source and builder type
    /// are matched once per column and run, not once per row.
    fn append_rows(
        &mut self,
        runs: &[Run<'_, '_>],
        slots: &[Slots<'_>],
        filled: u32,
        scratch: &mut Vec<u8>,
    ) -> Result<(), ArrowError> {
        match &self.source {
            Source::Kind | Source::Const(_) | Source::Seq => {}
            Source::Time => {
                if let Builder::Time(b) = &mut self.builder {
                    for (_, rows) in runs {
                        for ev in *rows {
                            b.append_value(micros(ev.base().ts()));
                        }
                    }
                }
            }
            Source::Field(getters) => {
                let getters = *getters;
                let mut start = 0;
                for (kind, rows) in runs {
                    match getters[*kind as usize] {
                        // a kind without the field: its rows are nulls, appended at once
                        None => self.builder.append_nulls(rows.len()),
                        Some(get) => {
                            // the run's promoted values (none when the table has no promoted columns)
                            let run_slots = slots.get(start..start + rows.len());
                            self.append_run(get, rows, run_slots, scratch)?
                        }
                    }
                    start += rows.len();
                }
            }
            // no row of the chunk has the key (most promoted columns of most rows): nulls at once
            Source::Promoted(slot) if filled & (1 << slot) == 0 => {
                self.builder.append_nulls(slots.len())
            }
            Source::Promoted(slot) => {
                let slot = *slot;
                self.append_promoted(slot, slots)
            }
        }
        Ok(())
    }

    /// The values of `rows`, all of the kind `get` was chosen for.
    fn append_run(
        &mut self,
        get: Get,
        rows: &[&Event],
        slots: Option<&[Slots<'_>]>,
        scratch: &mut Vec<u8>,
    ) -> Result<(), ArrowError> {
        let too_big = |v: u64| {
            ArrowError::ComputeError(format!("{}: {v} does not fit an int64 column", self.name))
        };
        match (&mut self.builder, get) {
            (Builder::Int(b), Get::Int(g)) => {
                for ev in rows {
                    b.append_option(g(ev));
                }
            }
            (Builder::Int(b), Get::UInt(g)) => {
                for ev in rows {
                    match g(ev) {
                        Some(v) => b.append_value(i64::try_from(v).map_err(|_| too_big(v))?),
                        None => b.append_null(),
                    }
                }
            }
            (Builder::Float(b), Get::Float(g)) => {
                for ev in rows {
                    b.append_option(g(ev));
                }
            }
            (Builder::Bool(b), Get::Bool(g)) => {
                for ev in rows {
                    b.append_option(g(ev));
                }
            }
            (Builder::Str(b), Get::Str(g)) => {
                for ev in rows {
                    b.append_option(g(ev));
                }
            }
            (Builder::Str(b), Get::Hex(g)) => {
                for ev in rows {
                    match g(ev) {
                        Some(raw) => {
                            scratch.clear();
                            write_hex(scratch, raw);
                            b.append_value(utf8(scratch)?);
                        }
                        None => b.append_null(),
                    }
                }
            }
            (Builder::Map(m), Get::Map(g)) => match slots {
                Some(slots) => {
                    for (ev, row) in rows.iter().zip(slots) {
                        m.append(g(ev), Some(row), scratch)?;
                    }
                }
                None => {
                    for ev in rows {
                        m.append(g(ev), None, scratch)?;
                    }
                }
            },
            (Builder::IntList(b, _), Get::Ints(g)) => {
                for ev in rows {
                    match g(ev) {
                        Some(values) => {
                            for v in values {
                                b.values()
                                    .append_value(i64::try_from(*v).map_err(|_| too_big(*v))?);
                            }
                            b.append(true);
                        }
                        None => b.append_null(),
                    }
                }
            }
            // `Get::fits` was checked when the builder was made
            _ => {
                return Err(ArrowError::ComputeError(format!(
                    "{}: the field's values do not fit the column's builder",
                    self.name
                )))
            }
        }
        Ok(())
    }

    /// A promoted column: the value in its slot when its type is exactly the column's, else null.
    fn append_promoted(&mut self, slot: usize, slots: &[Slots<'_>]) {
        match &mut self.builder {
            Builder::Int(b) => {
                for row in slots {
                    match row.values[slot] {
                        Some(Value::Int(i)) => b.append_value(*i),
                        _ => b.append_null(),
                    }
                }
            }
            Builder::Bool(b) => {
                for row in slots {
                    match row.values[slot] {
                        Some(Value::Bool(x)) => b.append_value(*x),
                        _ => b.append_null(),
                    }
                }
            }
            Builder::Str(b) => {
                for row in slots {
                    match row.values[slot] {
                        Some(Value::Str(s)) => b.append_value(s),
                        _ => b.append_null(),
                    }
                }
            }
            // refused when the builder is made
            Builder::Float(_) | Builder::Time(_) | Builder::Map(_) | Builder::IntList(..) => {}
        }
    }

    fn finish(
        &mut self,
        rows: usize,
        kinds: &[&'static str],
        seqs: &mut Vec<i64>,
    ) -> Result<ArrayRef, ArrowError> {
        let array: ArrayRef = match (&self.source, &mut self.builder) {
            (Source::Const(v), _) => Arc::new(repeated(v, rows)?),
            (Source::Kind, _) => Arc::new(StringArray::from_iter_values(kinds.iter())),
            (Source::Seq, _) => Arc::new(Int64Array::from(std::mem::take(seqs))),
            (_, Builder::Int(b)) => Arc::new(b.finish()),
            (_, Builder::Float(b)) => Arc::new(b.finish()),
            (_, Builder::Bool(b)) => Arc::new(b.finish()),
            (_, Builder::Str(b)) => Arc::new(b.finish()),
            (_, Builder::Time(b)) => Arc::new(b.finish().with_data_type(self.data_type.clone())),
            (_, Builder::Map(m)) => m.finish()?,
            (_, Builder::IntList(b, _)) => Arc::new(b.finish()),
        };
        Ok(array)
    }
}

/// `rows` copies of `v`: its bytes repeated (a few doubling copies, not one copy per row, for
/// the three constant columns of every row) and the offsets counted out.
fn repeated(v: &str, rows: usize) -> Result<StringArray, ArrowError> {
    let too_long = || ArrowError::ComputeError("a constant column over 2 GiB".into());
    let step = i32::try_from(v.len()).map_err(|_| too_long())?;
    let n = i32::try_from(rows).map_err(|_| too_long())?;
    step.checked_mul(n).ok_or_else(too_long)?;
    let offsets: ScalarBuffer<i32> = (0..=n).map(|i| i * step).collect();
    let values = Buffer::from_vec(v.as_bytes().repeat(rows));
    StringArray::try_new(OffsetBuffer::new(offsets), values, None)
}

/// `time` of `ts`: float seconds × 1e6, truncated.
pub(crate) fn micros(ts: f64) -> i64 {
    (ts * 1e6) as i64
}

/// Consecutive rows of one kind.
type Run<'r, 'e> = (Kind, &'r [&'e Event]);

/// Rows appended column by column a chunk at a time: the source and builder type are matched
/// once per column and run of one kind in the chunk, and the chunk's events stay in cache across
/// its columns.
const CHUNK_ROWS: usize = 128;

/// The rows of one table: events in, `RecordBatch`es out.
pub struct TableBuilder {
    schema: SchemaRef,
    /// Bit i set: events of `KINDS[i]` belong here.
    kinds: u16,
    columns: Vec<Column>,
    /// The kind of each row (the `kind` column is built from it at `finish`).
    row_kinds: Vec<&'static str>,
    /// The event number of each row, when the schema has a `seq` column.
    row_seqs: Vec<i64>,
    has_seq: bool,
    has_promoted: bool,
    promoted: Promoted,
    scratch: Vec<u8>,
}

fn bad_type(name: &str, want: &str, got: &DataType) -> ArrowError {
    ArrowError::SchemaError(format!(
        "column {name:?} must be {want} for the core, the schema says {got}"
    ))
}

/// map<string, string>: its entries field and `keys_sorted`.
pub(crate) fn string_map(name: &str, dt: &DataType) -> Result<(FieldRef, bool), ArrowError> {
    if let DataType::Map(entries, sorted) = dt {
        if let DataType::Struct(kv) = entries.data_type() {
            let strings = |f: &Arc<ArrowField>| f.data_type() == &DataType::Utf8;
            if kv.len() == 2 && kv.iter().all(strings) {
                return Ok((entries.clone(), *sorted));
            }
        }
    }
    Err(bad_type(name, "map<string, string>", dt))
}

/// The event field stored in column `name`: where two kinds use one name for different types
/// (the accounting's `packets` count, a finding's `packets` list), the column's type decides.
fn field_named(name: &str, dt: &DataType) -> Option<&'static (&'static str, Field, Ty)> {
    let mut named = FIELDS.iter().filter(|(n, _, _)| *n == name);
    let first = named.next()?;
    let list = matches!(dt, DataType::List(_));
    std::iter::once(first)
        .chain(named)
        .find(|(_, _, ty)| (*ty == Ty::IntList) == list)
        .or(Some(first))
}

fn builder_of(name: &str, ty: Ty, dt: &DataType) -> Result<Builder, ArrowError> {
    let b = match (ty, dt) {
        (Ty::Int, DataType::Int64) => Builder::Int(Int64Builder::new()),
        (Ty::Float, DataType::Float64) => Builder::Float(Float64Builder::new()),
        (Ty::Bool, DataType::Boolean) => Builder::Bool(BooleanBuilder::new()),
        (Ty::Str, DataType::Utf8) => Builder::Str(StringBuilder::new()),
        (Ty::Map, _) => {
            let (entries, sorted) = string_map(name, dt)?;
            Builder::Map(MapColumn::new(entries, sorted))
        }
        (Ty::IntList, DataType::List(item)) if item.data_type() == &DataType::Int64 => {
            Builder::IntList(
                ListBuilder::new(Int64Builder::new()).with_field(item.clone()),
                item.clone(),
            )
        }
        (Ty::IntList, _) => return Err(bad_type(name, "list<int64>", dt)),
        (Ty::Int, _) => return Err(bad_type(name, "int64", dt)),
        (Ty::Float, _) => return Err(bad_type(name, "double", dt)),
        (Ty::Bool, _) => return Err(bad_type(name, "bool", dt)),
        (Ty::Str, _) => return Err(bad_type(name, "string", dt)),
    };
    Ok(b)
}

impl TableBuilder {
    /// A builder for `schema`, storing events of `kinds` (names as `Event::kind`), with the
    /// columns named in `constants` filled with their value on every row.
    pub fn new(
        schema: SchemaRef,
        kinds: &[&str],
        constants: &[(&str, &str)],
    ) -> Result<TableBuilder, ArrowError> {
        let mut mask = 0u16;
        for kind in kinds {
            let Some(i) = KINDS.iter().position(|k| k == kind) else {
                return Err(ArrowError::SchemaError(format!(
                    "the core makes no {kind:?} events"
                )));
            };
            mask |= 1 << i;
        }
        let ledger_table = kinds.contains(&"ledger");
        let mut columns = Vec::with_capacity(schema.fields().len());
        for f in schema.fields().iter() {
            let name = f.name().as_str();
            let dt = f.data_type();
            let (source, builder) = if let Some((_, v)) = constants.iter().find(|(c, _)| *c == name)
            {
                if dt != &DataType::Utf8 {
                    return Err(bad_type(name, "string (a constant)", dt));
                }
                (
                    Source::Const((*v).to_owned()),
                    Builder::Str(StringBuilder::new()),
                )
            } else if name == "kind" {
                if dt != &DataType::Utf8 {
                    return Err(bad_type(name, "string", dt));
                }
                (Source::Kind, Builder::Str(StringBuilder::new()))
            } else if name == "seq" {
                if dt != &DataType::Int64 {
                    return Err(bad_type(name, "int64", dt));
                }
                (Source::Seq, Builder::Int(Int64Builder::new()))
            } else if name == "time" {
                if !matches!(dt, DataType::Timestamp(TimeUnit::Microsecond, _)) {
                    return Err(bad_type(name, "timestamp[us]", dt));
                }
                (
                    Source::Time,
                    Builder::Time(TimestampMicrosecondBuilder::new()),
                )
            } else if let Some(key) = PROMOTED_ARGS.iter().find(|k| **k == name && !ledger_table) {
                // frames' and messages' tables: these names are promoted arguments there
                (
                    Source::Promoted(slot_of(false, key)?),
                    promoted_builder(name, dt)?,
                )
            } else if let Some((_, field, ty)) = field_named(name, dt) {
                let mut getters = [None; KINDS.len()];
                for kind in Kind::ALL {
                    if mask & (1 << kind as usize) == 0 {
                        continue;
                    }
                    getters[kind as usize] = field.getter(kind);
                    if getters[kind as usize].is_some_and(|g| !g.fits(*ty)) {
                        return Err(ArrowError::SchemaError(format!(
                            "column {name:?}: the core's {kind:?} field is not of its type"
                        )));
                    }
                }
                (Source::Field(getters), builder_of(name, *ty, dt)?)
            } else if let Some((key, _)) = PROMOTED_PROPERTIES.iter().find(|(_, c)| *c == name) {
                (
                    Source::Promoted(slot_of(true, key)?),
                    promoted_builder(name, dt)?,
                )
            } else {
                return Err(ArrowError::SchemaError(format!(
                    "column {name:?} is not known to the core (no event field, promoted argument or property, or constant of that name)"
                )));
            };
            columns.push(Column {
                name: name.to_owned(),
                data_type: dt.clone(),
                source,
                builder,
            });
        }
        let has_seq = columns.iter().any(|c| matches!(c.source, Source::Seq));
        let mut promoted = Promoted::default();
        for c in &columns {
            if let Source::Promoted(slot) = c.source {
                promoted.0[slot] = match c.builder {
                    Builder::Str(_) => Some(PromotedTy::Str),
                    Builder::Int(_) => Some(PromotedTy::Int),
                    Builder::Bool(_) => Some(PromotedTy::Bool),
                    _ => None,
                };
            }
        }
        let has_promoted = promoted.0.iter().any(Option::is_some);
        if has_promoted {
            // the maps of the arguments and properties keep what no promoted column holds
            for c in &mut columns {
                if let Builder::Map(m) = &mut c.builder {
                    m.rest = match c.name.as_str() {
                        "args" => Some(false),
                        "properties" => Some(true),
                        _ => None,
                    };
                }
            }
        }
        Ok(TableBuilder {
            schema,
            kinds: mask,
            columns,
            row_kinds: Vec::new(),
            row_seqs: Vec::new(),
            has_seq,
            has_promoted,
            promoted,
            scratch: Vec::with_capacity(256),
        })
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Rows appended since the last `finish`.
    pub fn len(&self) -> usize {
        self.row_kinds.len()
    }

    pub fn is_empty(&self) -> bool {
        self.row_kinds.is_empty()
    }

    /// Whether events of this kind are rows of this table.
    pub fn takes(&self, ev: &Event) -> bool {
        self.kinds & (1 << Kind::of(ev) as usize) != 0
    }

    /// Append the events of this table's kinds (others are passed over); `first_seq` is the
    /// number of `events[0]` in its decode (the `seq` column). After an error the builder is in
    /// an unknown state: drop it.
    pub fn append(&mut self, events: &[Event], first_seq: u64) -> Result<(), ArrowError> {
        let mut seq = if self.has_seq {
            i64::try_from(first_seq)
                .map_err(|_| ArrowError::ComputeError("seq does not fit an int64".into()))?
        } else {
            0
        };
        let was_empty = self.is_empty();
        // one pass over the events: this table's rows, with their kind and number
        let mut rows: Vec<&Event> = Vec::new();
        for ev in events {
            let kind = Kind::of(ev);
            if self.kinds & (1 << kind as usize) != 0 {
                rows.push(ev);
                self.row_kinds.push(KINDS[kind as usize]);
                if self.has_seq {
                    self.row_seqs.push(seq);
                }
            }
            seq = seq.saturating_add(1);
        }
        if rows.is_empty() {
            return Ok(());
        }
        if was_empty {
            // sized once for the rows to come, not grown by doubling (and copying) row by row
            for col in &mut self.columns {
                if !matches!(col.source, Source::Kind | Source::Const(_) | Source::Seq) {
                    col.builder = col.builder.fresh(rows.len());
                }
            }
        }
        // column by column over chunks of rows small enough to stay in cache
        let mut slots: Vec<Slots<'_>> = Vec::with_capacity(CHUNK_ROWS);
        let mut runs: Vec<Run<'_, '_>> = Vec::new();
        for chunk in rows.chunks(CHUNK_ROWS) {
            let filled = if self.has_promoted {
                fill_slots(chunk, &mut slots, &self.promoted)
            } else {
                0
            };
            runs.clear();
            let mut rest = chunk;
            while let Some(first) = rest.first() {
                let kind = Kind::of(first);
                let n = rest.iter().take_while(|ev| Kind::of(ev) == kind).count();
                let (run, tail) = rest.split_at(n);
                runs.push((kind, run));
                rest = tail;
            }
            for col in &mut self.columns {
                col.append_rows(&runs, &slots, filled, &mut self.scratch)?;
            }
        }
        Ok(())
    }

    /// The rows appended so far as one batch in schema order; the builder starts afresh.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let rows = self.row_kinds.len();
        let mut arrays = Vec::with_capacity(self.columns.len());
        for col in &mut self.columns {
            arrays.push(col.finish(rows, &self.row_kinds, &mut self.row_seqs)?);
        }
        self.row_kinds.clear();
        self.row_seqs.clear();
        RecordBatch::try_new(self.schema.clone(), arrays)
    }
}

fn promoted_builder(name: &str, dt: &DataType) -> Result<Builder, ArrowError> {
    match dt {
        DataType::Int64 => Ok(Builder::Int(Int64Builder::new())),
        DataType::Boolean => Ok(Builder::Bool(BooleanBuilder::new())),
        DataType::Utf8 => Ok(Builder::Str(StringBuilder::new())),
        _ => Err(bad_type(name, "string, int64 or bool (promoted)", dt)),
    }
}

/// Slots of the promoted arguments (0..15, `PROMOTED_ARGS` order) and properties (15..26,
/// `PROMOTED_PROPERTIES` order) of one row.
const SLOTS: usize = PROMOTED_ARGS.len() + PROMOTED_PROPERTIES.len();
#[derive(Clone, Copy)]
struct Slots<'e> {
    values: [Option<&'e Value>; SLOTS],
    /// Bit j of `held[0]` (arguments) / `held[1]` (properties): the row's entry j is the value
    /// its promoted column holds, so the map leaves it out (`held_bit`).
    held: [u64; 2],
}

/// The bit of entry `j` in `Slots::held`; entries past the 64th are never held (no method has
/// that many arguments, no class that many properties).
fn held_bit(j: usize) -> u64 {
    if j < 64 {
        1 << j
    } else {
        0
    }
}
// `fill_slots` reports the slots filled as bits of a u32
const _: () = assert!(SLOTS <= 32);

/// The promoted columns of a table: the type of each slot's column (None: no such column).
#[derive(Clone, Copy, Default)]
struct Promoted([Option<PromotedTy>; SLOTS]);

#[derive(Clone, Copy, PartialEq, Eq)]
enum PromotedTy {
    Str,
    Int,
    Bool,
}

impl PromotedTy {
    /// Whether the column takes `v` (`append_promoted`: exactly its type, else null).
    fn takes(self, v: &Value) -> bool {
        matches!(
            (self, v),
            (PromotedTy::Str, Value::Str(_))
                | (PromotedTy::Int, Value::Int(_))
                | (PromotedTy::Bool, Value::Bool(_))
        )
    }
}

/// The slot of a promoted argument (`props` false) or property (true) by its key: one `match`
/// per map entry instead of a search of the map per promoted column.
fn promoted_slot(props: bool, key: &str) -> Option<usize> {
    let n = PROMOTED_ARGS.len();
    if props {
        return match key {
            "content_type" => Some(n),
            "content_encoding" => Some(n + 1),
            "delivery_mode" => Some(n + 2),
            "priority" => Some(n + 3),
            "correlation_id" => Some(n + 4),
            "reply_to" => Some(n + 5),
            "expiration" => Some(n + 6),
            "message_id" => Some(n + 7),
            "type" => Some(n + 8),
            "user_id" => Some(n + 9),
            "app_id" => Some(n + 10),
            _ => None,
        };
    }
    match key {
        "exchange" => Some(0),
        "routing_key" => Some(1),
        "queue" => Some(2),
        "consumer_tag" => Some(3),
        "delivery_tag" => Some(4),
        "multiple" => Some(5),
        "requeue" => Some(6),
        "redelivered" => Some(7),
        "mandatory" => Some(8),
        "no_ack" => Some(9),
        "reply_code" => Some(10),
        "reply_text" => Some(11),
        "message_count" => Some(12),
        "consumer_count" => Some(13),
        "prefetch_count" => Some(14),
        _ => None,
    }
}

fn slot_of(props: bool, key: &str) -> Result<usize, ArrowError> {
    promoted_slot(props, key)
        .ok_or_else(|| ArrowError::SchemaError(format!("promoted {key:?} has no slot")))
}

/// The promoted values of `rows` into `out`, one `Slots` per row: the first entry of each key, as
/// `value::get` finds it, and which entries `promoted`'s columns hold (that first entry, of the
/// column's type). Returns the slots filled in any row (bit i: slot i).
fn fill_slots<'e>(rows: &[&'e Event], out: &mut Vec<Slots<'e>>, promoted: &Promoted) -> u32 {
    out.clear();
    let mut filled = 0u32;
    for ev in rows {
        let mut slots = Slots {
            values: [None; SLOTS],
            held: [0; 2],
        };
        let (args, props) = match ev {
            Event::Frame(e) => (e.args.as_ref(), e.properties.as_ref()),
            Event::Message(e) => (Some(&e.args), Some(&e.properties)),
            _ => (None, None),
        };
        for (table, is_props) in [(args, false), (props, true)] {
            for (j, (name, value)) in table.into_iter().flatten().enumerate() {
                if let Some(i) = promoted_slot(is_props, name) {
                    if slots.values[i].is_none() {
                        slots.values[i] = Some(value);
                        filled |= 1 << i;
                        if promoted.0[i].is_some_and(|ty| ty.takes(value)) {
                            slots.held[usize::from(is_props)] |= held_bit(j);
                        }
                    }
                }
            }
        }
        out.push(slots);
    }
    filled
}

/// A batch as the Arrow C data interface's array and schema (a struct array of the columns):
/// what `__arrow_c_array__` hands out. The buffers are shared, not copied.
pub fn to_ffi(batch: &RecordBatch) -> Result<(FFI_ArrowArray, FFI_ArrowSchema), ArrowError> {
    let data = StructArray::from(batch.clone()).into_data();
    let schema = FFI_ArrowSchema::try_from(batch.schema().as_ref())?;
    Ok((FFI_ArrowArray::new(&data), schema))
}

/// The schema behind an imported C data interface schema (borrowed: the caller keeps it).
pub fn schema_from_ffi(ffi: &FFI_ArrowSchema) -> Result<Schema, ArrowError> {
    Schema::try_from(ffi)
}

/// Events to the batches of several tables at once, each event to the table of its kind.
pub struct Tables {
    tables: Vec<(String, TableBuilder)>,
}

impl Tables {
    /// `tables`: (name, schema, kinds); `constants` as for `TableBuilder::new`.
    pub fn new(
        tables: Vec<(String, SchemaRef, Vec<String>)>,
        constants: &[(&str, &str)],
    ) -> Result<Tables, ArrowError> {
        let mut out = Vec::with_capacity(tables.len());
        for (name, schema, kinds) in tables {
            let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
            let builder = TableBuilder::new(schema, &kinds, constants)
                .map_err(|e| ArrowError::SchemaError(format!("table {name:?}: {e}")))?;
            out.push((name, builder));
        }
        Ok(Tables { tables: out })
    }

    /// `first_seq`: the number of `events[0]` in its decode (see `TableBuilder::append`).
    pub fn append(&mut self, events: &[Event], first_seq: u64) -> Result<(), ArrowError> {
        for (_, t) in &mut self.tables {
            t.append(events, first_seq)?;
        }
        Ok(())
    }

    /// The batch of every table that has rows, in the order the tables were given.
    pub fn finish(&mut self) -> Result<Vec<(String, RecordBatch)>, ArrowError> {
        let mut out = Vec::new();
        for (name, t) in &mut self.tables {
            if !t.is_empty() {
                out.push((name.clone(), t.finish()?));
            }
        }
        Ok(out)
    }
}

/// The tables' map<string,string> type (key not null, value nullable, unsorted), for tests.
#[cfg(test)]
pub(crate) fn string_map_type() -> DataType {
    let entries = arrow_schema::Field::new(
        "entries",
        DataType::Struct(
            vec![
                arrow_schema::Field::new("key", DataType::Utf8, false),
                arrow_schema::Field::new("value", DataType::Utf8, true),
            ]
            .into(),
        ),
        false,
    );
    DataType::Map(Arc::new(entries), false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Base, Dir, Frame, Gap, Message};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int64Type, TimestampMicrosecondType};

    fn name(s: &str) -> crate::value::Name {
        crate::value::Name::from(s)
    }

    /// The texts are what rows.py's `map_items` gives for the Python values the binding makes
    /// of each variant (str, bool, int, float, Decimal, bytes, Timestamp, dict, list, Problem).
    #[test]
    fn map_text_of_every_value() {
        let cases = [
            (Value::Null, "null"),
            (Value::Bool(true), "true"),
            (Value::Bool(false), "false"),
            (Value::Int(-42), "-42"),
            (Value::UInt(u64::MAX), "18446744073709551615"),
            (Value::Float(1.5), "1.5"),
            (Value::Float(f64::NAN), "null"),
            (Value::Float(1e16), "1e+16"),
            (
                Value::Decimal {
                    scale: 2,
                    digits: 150,
                },
                "\"1.50\"",
            ),
            (
                Value::Decimal {
                    scale: 7,
                    digits: 1,
                },
                "\"1E-7\"",
            ),
            (Value::Str("a\"b\n/é".into()), "a\"b\n/é"),
            (Value::Bytes(vec![0, 0xff]), "{\"hex\":\"00ff\"}"),
            (Value::Timestamp(1_700_000_000), "1700000000"),
            (
                Value::Table(vec![
                    (name("k"), Value::Str("v".into())),
                    (name("n"), Value::Int(1)),
                    (name("x"), Value::Bytes(vec![1])),
                ]),
                "{\"k\":\"v\",\"n\":1,\"x\":{\"hex\":\"01\"}}",
            ),
            (
                Value::Array(vec![
                    Value::Int(1),
                    Value::Str("two".into()),
                    Value::Null,
                    Value::Float(2.0),
                ]),
                "[1,\"two\",null,2.0]",
            ),
            (
                Value::Problem("bad \"table\"".into()),
                "\"bad \\\"table\\\"\"",
            ),
            (Value::Table(vec![]), "{}"),
            (Value::Array(vec![]), "[]"),
        ];
        let mut scratch = Vec::new();
        for (v, want) in cases {
            map_text(&v, &mut scratch);
            assert_eq!(String::from_utf8_lossy(&scratch), want, "{v:?}");
        }
    }

    fn schema(extra: &[(&str, DataType)]) -> SchemaRef {
        let mut fields = vec![
            ArrowField::new("capture", DataType::Utf8, false),
            ArrowField::new("kind", DataType::Utf8, false),
            ArrowField::new("packet", DataType::Int64, false),
            ArrowField::new("ts", DataType::Float64, false),
            ArrowField::new(
                "time",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                false,
            ),
            ArrowField::new("dir", DataType::Utf8, true),
            ArrowField::new("channel", DataType::Int64, true),
            ArrowField::new("size", DataType::Int64, true),
            ArrowField::new("method", DataType::Utf8, true),
            ArrowField::new("args", string_map_type(), true),
            ArrowField::new("lost_frame", DataType::Utf8, true),
            ArrowField::new("exchange", DataType::Utf8, true),
            ArrowField::new("delivery_tag", DataType::Int64, true),
            ArrowField::new("mandatory", DataType::Boolean, true),
            ArrowField::new("message_type", DataType::Utf8, true),
        ];
        for (n, dt) in extra {
            fields.push(ArrowField::new(*n, dt.clone(), true));
        }
        Arc::new(Schema::new(fields))
    }

    const CONSTANTS: [(&str, &str); 1] = [("capture", "file:x.pcap")];

    #[test]
    fn unknown_column_is_an_error() {
        let s = schema(&[("no_such_field", DataType::Utf8)]);
        let err = TableBuilder::new(s, &["frame"], &CONSTANTS)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("\"no_such_field\" is not known"), "{err}");
    }

    #[test]
    fn wrong_type_is_an_error() {
        let s = schema(&[("offset", DataType::Utf8)]);
        let err = TableBuilder::new(s, &["frame"], &CONSTANTS)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("\"offset\" must be int64"), "{err}");
        // a constant must be a string column, a promoted column a string, int64 or bool
        let s = schema(&[("routing_key", DataType::Float64)]);
        assert!(TableBuilder::new(s, &["frame"], &CONSTANTS).is_err());
        let s = schema(&[]);
        assert!(TableBuilder::new(s, &["frame"], &[("packet", "1")]).is_err());
    }

    /// Every field's getter, of every kind that has it, gives values of the field's column type
    /// (what `TableBuilder::new` checks per table), and `Kind::ALL` follows `KINDS`.
    #[test]
    fn getters_fit_their_columns() {
        for (name, field, ty) in FIELDS {
            for kind in Kind::ALL {
                if let Some(g) = field.getter(kind) {
                    assert!(g.fits(ty), "{name} of {kind:?}");
                }
            }
        }
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i);
            // "ProtocolHeader" -> "protocol-header": the `kind` column is `KINDS[kind]`
            let mut kebab = String::new();
            for c in format!("{kind:?}").chars() {
                if c.is_uppercase() && !kebab.is_empty() {
                    kebab.push('-');
                }
                kebab.push(c.to_ascii_lowercase());
            }
            assert_eq!(kebab, KINDS[i]);
        }
    }

    #[test]
    fn promoted_slots_follow_the_lists() {
        for (i, key) in PROMOTED_ARGS.iter().enumerate() {
            assert_eq!(promoted_slot(false, key), Some(i));
            assert_eq!(promoted_slot(true, key), None);
        }
        for (i, (key, _)) in PROMOTED_PROPERTIES.iter().enumerate() {
            assert_eq!(promoted_slot(true, key), Some(PROMOTED_ARGS.len() + i));
        }
        assert_eq!(promoted_slot(false, "ticket"), None);
    }

    #[test]
    fn unknown_kind_is_an_error() {
        assert!(TableBuilder::new(schema(&[]), &["no-such-kind"], &CONSTANTS).is_err());
    }

    fn base(packet: u64, ts_ns: i64) -> Base {
        Base {
            packet,
            ts_ns,
            conn: 0,
            dir: Some(Dir::C2S),
            channel: Some(1),
        }
    }

    #[test]
    fn rows_by_name() -> Result<(), ArrowError> {
        let args = vec![
            (name("ticket"), Value::Int(0)),
            (name("exchange"), Value::Str("ex".into())),
            (name("routing_key"), Value::Str("rk".into())),
            (name("mandatory"), Value::Bool(true)),
            (name("delivery_tag"), Value::UInt(u64::MAX)), // not an int64: null
        ];
        let frame = Frame {
            base: base(3, 1_700_000_000_123_456_789),
            ftype: "method".into(),
            size: 20,
            class_id: Some(60),
            method_id: Some(40),
            method: Some("basic.publish".into()),
            args: Some(args.clone()),
            body_size: None,
            properties: None,
            resync: false,
            problem: None,
            payload: None,
            tls: None,
        };
        let gap = Gap {
            base: base(4, 1_700_000_001_000_000_000),
            size: 100,
            lost_frame: Some("body".into()),
        };
        let message = Message {
            base: base(5, 0),
            method: "basic.publish".into(),
            args,
            properties: vec![(name("type"), Value::Str("t".into()))],
            body_size: 0,
            body_received: 0,
            complete: true,
            first_packet: 3,
            frames: 2,
            body_sha256: None,
            body: None,
        };
        let events = [
            Event::Frame(Box::new(frame)),
            Event::Message(Box::new(message)),
            Event::Gap(Box::new(gap)),
        ];
        let mut b = TableBuilder::new(
            schema(&[("seq", DataType::Int64)]),
            &["frame", "gap"],
            &CONSTANTS,
        )?;
        b.append(&events, 10)?;
        assert_eq!(b.len(), 2); // the message is not of this table's kinds
        let batch = b.finish()?;
        assert!(b.is_empty());
        let col = |n: &str| batch.column_by_name(n).cloned();
        let strings = |n: &str| -> Vec<Option<String>> {
            col(n)
                .map(|c| {
                    c.as_string::<i32>()
                        .iter()
                        .map(|s| s.map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let ints = |n: &str| -> Vec<Option<i64>> {
            col(n)
                .map(|c| c.as_primitive::<Int64Type>().iter().collect())
                .unwrap_or_default()
        };
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            strings("capture"),
            [some("file:x.pcap"), some("file:x.pcap")]
        );
        assert_eq!(strings("kind"), [some("frame"), some("gap")]);
        assert_eq!(ints("packet"), [Some(3), Some(4)]);
        // numbered among all the events given, the message (another table's) included
        assert_eq!(ints("seq"), [Some(10), Some(12)]);
        assert_eq!(ints("size"), [Some(20), Some(100)]);
        assert_eq!(strings("method"), [some("basic.publish"), None]);
        assert_eq!(strings("lost_frame"), [None, some("body")]);
        assert_eq!(strings("exchange"), [some("ex"), None]);
        assert_eq!(ints("delivery_tag"), [None, None]);
        assert_eq!(strings("message_type"), [None, None]);
        let times: Vec<Option<i64>> = col("time")
            .map(|c| {
                c.as_primitive::<TimestampMicrosecondType>()
                    .iter()
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            times,
            [Some(1_700_000_000_123_456), Some(1_700_000_001_000_000)]
        );
        let args = col("args").map(|c| c.as_map().clone());
        let args = args.ok_or_else(|| ArrowError::ComputeError("no args".into()))?;
        assert!(args.is_valid(0) && args.is_null(1));
        let values: Vec<Option<&str>> = args.values().as_string::<i32>().iter().collect();
        // the rest: `exchange` and `mandatory` are in their columns, not repeated; this schema
        // has no `routing_key` column; a delivery tag beyond int64 is not its column's type
        assert_eq!(
            values,
            [Some("0"), Some("rk"), Some("18446744073709551615")]
        );
        Ok(())
    }

    #[test]
    fn out_of_range_is_an_error() -> Result<(), ArrowError> {
        let gap = Gap {
            base: base(1, 0),
            size: u64::MAX,
            lost_frame: None,
        };
        let mut b = TableBuilder::new(schema(&[]), &["gap"], &CONSTANTS)?;
        assert!(b.append(&[Event::Gap(Box::new(gap))], 0).is_err());
        Ok(())
    }
}

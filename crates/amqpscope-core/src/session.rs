//! Connections: TCP flow events in, AMQP events out.
//!
//! Per flow this decides whether it is AMQP (protocol header, a configured port, or frames
//! confirmed by the stream heuristic), which side is the client, and keeps what was negotiated
//! (frame-max, channel-max, heartbeat, properties, user, vhost). Per channel it assembles content
//! (method, header, body frames) into whole messages. Credentials are parsed here and redacted
//! before any event leaves, unless the caller asks to show them.

use sha2::{Digest, Sha256};

use crate::codec::Codec;
use crate::event::{
    Base, Connection, Dir, Event, Frame, Gap, Malformed, Message, ProtocolHeader, Resync, Tls,
};
use crate::frames::{FrameStream, StreamAccounting, StreamItem};
// keyed by the core's own flow ids and (direction, channel): nothing a capture chooses freely
use crate::fxhash::FxHashMap as HashMap;
use crate::limits::Limits;
use crate::tls::{starts_tls, KeyLog, TlsConn, TlsLayer, TlsOut, TlsOuts};
use crate::types::{CloseHow, Endpoint, TcpEvent, TcpMark};
use crate::value::{get, Name, Table, Value};

pub const REDACTED: &str = "[redacted]";
const FRAME_METHOD: u8 = 1;
const FRAME_HEADER: u8 = 2;
const FRAME_BODY: u8 = 3;
const CONNECTION_CLASS: i32 = 10;

/// What the caller decides about a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Ports that mark a flow as AMQP and its side as the server's.
    pub ports: Vec<u16>,
    pub show_credentials: bool,
    /// Keep message bodies in memory (up to `Limits::max_body_kept`) for `--body`.
    pub keep_bodies: bool,
    /// NSS key log text (`--tls-keylog` files, concatenated) for TLS connections.
    pub tls_keylog: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ports: vec![5672],
            show_credentials: false,
            keep_bodies: true,
            tls_keylog: String::new(),
        }
    }
}

/// The name of a frame type as events show it.
pub fn frame_type_name(ftype: u8) -> Name {
    match crate::frames::frame_type_name(ftype) {
        Some(known) => Name::Spec(known),
        None => Name::from(format!("unknown-{ftype}")),
    }
}

/// A message being assembled on one channel.
struct Content {
    /// Insertion order: open messages are closed in the order they started, as a dict iterates.
    seq: u64,
    method: Name,
    args: Table,
    first_packet: u64,
    properties: Option<Table>,
    body_size: u64,
    received: u64,
    frames: u64,
    body: Vec<u8>,
    sha: Option<Sha256>,
}

/// What a connection negotiated, as far as the capture shows it.
#[derive(Default)]
struct Info {
    server_properties: Option<Value>,
    client_properties: Option<Value>,
    mechanism: Option<String>,
    user: Option<String>,
    password: Option<String>,
    channel_max: Option<Value>,
    frame_max: Option<Value>,
    heartbeat: Option<Value>,
    vhost: Option<Value>,
    close: Option<(Option<Value>, Option<Value>, Dir)>,
}

/// One TCP flow carrying (or maybe carrying) AMQP.
struct Conn {
    id: u64,
    first_packet: u64,
    first_ts: i64,
    client: Endpoint,
    server: Endpoint,
    syn_seen: bool,
    /// None until decided.
    amqp: Option<bool>,
    /// The two directions, keyed by their sender as first seen (a swap does not move them).
    senders: [Endpoint; 2],
    streams: [FrameStream; 2],
    /// Events held until the flow is known to be AMQP.
    pending: Vec<Event>,
    opened: bool,
    closed: bool,
    version: Option<String>,
    info: Info,
    contents: HashMap<(Dir, u16), Content>,
    close_seen: bool,
    next_seq: u64,
    /// The first bytes of the flow were a ClientHello: records are decrypted before framing.
    tls: Option<Box<TlsConn>>,
    tls_checked: bool,
    /// The TLS record whose plaintext is being framed, for the frames it completes.
    layer: Option<TlsLayer>,
    /// Per stream (`senders` order): its first bytes (plaintext for TLS), what `opening` names.
    heads: [Vec<u8>; 2],
    /// Per stream: TCP bytes so far (data and gaps), the offsets TCP acknowledgements count in.
    tcp_off: [u64; 2],
    /// The stream being fed and its TCP offset at the end of the data (not for TLS: its frames'
    /// bytes are not the TCP bytes).
    feeding: Option<(usize, u64)>,
    /// Per stream: the TCP offset by which its connection.close had been sent, and whether the
    /// other side has acknowledged it.
    close_end: [Option<u64>; 2],
    close_acked: [bool; 2],
    /// The first FIN and RST of the flow, from reassembly's close.
    fin: Option<TcpMark>,
    rst: Option<TcpMark>,
}

/// Bytes of a stream's start kept to name what a connection that never spoke AMQP 0-9-1 began
/// with (an HTTP request line's method, an AMQP protocol header).
const HEAD_BYTES: usize = 16;

/// A connection.close whose arrival the other side's TCP acknowledgement proved: that side's
/// frames from `packet` on were sent after it had the close.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CloseArrived {
    pub conn: i64,
    /// The direction of the connection.close.
    pub closer: Dir,
    /// The packet whose acknowledgement covers the close's last byte.
    pub packet: u64,
}

/// All connections of one capture (or live interface).
pub struct Session {
    codec: Codec,
    options: Options,
    limits: Limits,
    conns: HashMap<u64, Conn>,
    /// Accounting of the AMQP streams already closed.
    closed: StreamAccounting,
    keylog: KeyLog,
    /// TLS bytes of closed connections: (captured, never decrypted, lost in gaps).
    tls_closed: (u64, u64, u64),
    /// Closes proven arrived since the last `take_close_arrivals`.
    arrived: Vec<CloseArrived>,
}

impl Session {
    pub fn new(codec: Codec, mut options: Options, limits: &Limits) -> Session {
        // the key log lives in the session's KeyLog only
        let keylog_text = std::mem::take(&mut options.tls_keylog);
        Session {
            codec,
            options,
            limits: limits.clone(),
            conns: HashMap::default(),
            closed: StreamAccounting::default(),
            keylog: {
                let mut k = KeyLog::new(limits.tls_keylog_entries);
                k.add_text(&keylog_text);
                k
            },
            tls_closed: (0, 0, 0),
            arrived: Vec::new(),
        }
    }

    /// The connection.closes TCP acknowledgements proved arrived since the last call (in the
    /// order found; each before the events of the packet that proved it).
    pub fn take_close_arrivals(&mut self) -> std::vec::Drain<'_, CloseArrived> {
        self.arrived.drain(..)
    }

    /// More key log text (a pcapng Decryption Secrets Block, a growing key log file). Records
    /// held for these keys are opened at once, in both directions (their events in `out`), not
    /// only when their connection's next packet comes. Returns the secrets added.
    pub fn add_tls_keys(&mut self, text: &str, out: &mut Vec<Event>) -> usize {
        let added = self.keylog.add_text(text);
        if added == 0 {
            return 0;
        }
        let Session {
            codec,
            options,
            limits,
            conns,
            keylog,
            ..
        } = self;
        let ctx = Ctx {
            codec,
            options,
            limits,
            keylog,
        };
        let mut ids: Vec<u64> = conns
            .iter()
            .filter(|(_, c)| c.tls.as_ref().is_some_and(|t| t.waiting()))
            .map(|(id, _)| *id)
            .collect();
        ids.sort_unstable();
        for id in ids {
            if let Some(conn) = conns.get_mut(&id) {
                conn.tls_keys_added(&ctx, out);
            }
        }
        added
    }

    /// Whether this flow is a TLS connection holding records for keys it has not got.
    pub fn tls_waiting(&self, flow: u64) -> bool {
        self.conns
            .get(&flow)
            .and_then(|c| c.tls.as_ref())
            .is_some_and(|t| t.waiting())
    }

    /// TLS bytes over every connection: (record bytes captured, never decrypted, lost in gaps).
    pub fn tls_accounting(&self) -> (u64, u64, u64) {
        let (mut all, mut opaque, mut gaps) = self.tls_closed;
        for conn in self.conns.values() {
            if let Some(t) = &conn.tls {
                let s = t.summary();
                all += s.bytes_c2s + s.bytes_s2c;
                opaque += s.opaque_bytes;
                gaps += s.gap_bytes;
            }
        }
        (all, opaque, gaps)
    }

    pub fn codec(&self) -> &Codec {
        &self.codec
    }

    /// Byte accounting summed over every AMQP stream, closed or still open.
    pub fn accounting(&self) -> StreamAccounting {
        let mut total = self.closed;
        for conn in self.conns.values() {
            if conn.amqp == Some(true) {
                conn.add_accounting(&mut total);
            }
        }
        total
    }

    /// Connections still open, in flow order (to close them at the end of the input).
    pub fn open_flows(&self) -> Vec<u64> {
        let mut ids: Vec<u64> = self.conns.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    pub fn handle(&mut self, ev: TcpEvent, out: &mut Vec<Event>) {
        let Session {
            codec,
            options,
            limits,
            conns,
            closed,
            keylog,
            tls_closed,
            arrived,
        } = self;
        let ctx = Ctx {
            codec,
            options,
            limits,
            keylog,
        };
        match ev {
            TcpEvent::Data {
                flow,
                src,
                data,
                packet,
                ts_ns,
                acked,
                ..
            } => {
                if let Some(conn) = conns.get_mut(&flow) {
                    if let Some(a) = acked {
                        arrived.extend(conn.acked(src, a, packet));
                    }
                    conn.data(&ctx, src, &data, packet, ts_ns, out);
                }
            }
            TcpEvent::Open {
                flow,
                client,
                server,
                syn_seen,
                packet,
                ts_ns,
            } => {
                conns.insert(
                    flow,
                    Conn::new(&ctx, flow, client, server, syn_seen, packet, ts_ns),
                );
            }
            TcpEvent::Gap {
                flow,
                src,
                size,
                packet,
                ts_ns,
                ..
            } => {
                if let Some(conn) = conns.get_mut(&flow) {
                    conn.gap(&ctx, src, size, packet, ts_ns, out);
                }
            }
            TcpEvent::Close {
                flow,
                how,
                packet,
                ts_ns,
                fin,
                rst,
            } => {
                if let Some(mut conn) = conns.remove(&flow) {
                    conn.fin = fin;
                    conn.rst = rst;
                    conn.close(&ctx, how.as_str(), packet, ts_ns, out);
                    if conn.amqp == Some(true) {
                        conn.add_accounting(closed);
                    }
                    if let Some(t) = &conn.tls {
                        let s = t.summary();
                        tls_closed.0 += s.bytes_c2s + s.bytes_s2c;
                        tls_closed.1 += s.opaque_bytes;
                        tls_closed.2 += s.gap_bytes;
                    }
                }
            }
        }
    }

    /// Close a flow that reassembly never closed (the end of the input).
    pub fn close_flow(
        &mut self,
        flow: u64,
        how: CloseHow,
        packet: u64,
        ts_ns: i64,
        out: &mut Vec<Event>,
    ) {
        self.handle(
            TcpEvent::Close {
                flow,
                how,
                packet,
                ts_ns,
                fin: None,
                rst: None,
            },
            out,
        );
    }
}

/// What every connection reads from its session.
struct Ctx<'s> {
    codec: &'s Codec,
    options: &'s Options,
    limits: &'s Limits,
    keylog: &'s KeyLog,
}

fn base(conn: u64, packet: u64, ts_ns: i64, dir: Dir, channel: Option<u16>) -> Base {
    Base {
        packet,
        ts_ns,
        conn: conn as i64,
        dir: Some(dir),
        channel,
    }
}

impl Conn {
    fn new(
        ctx: &Ctx<'_>,
        id: u64,
        client: Endpoint,
        server: Endpoint,
        syn_seen: bool,
        packet: u64,
        ts_ns: i64,
    ) -> Conn {
        let ports = &ctx.options.ports;
        let (mut client, mut server) = (client, server);
        if !syn_seen && ports.contains(&client.port) && !ports.contains(&server.port) {
            // mid-stream: the well-known port is the server's
            std::mem::swap(&mut client, &mut server);
        }
        let amqp = (ports.contains(&server.port) || ports.contains(&client.port)).then_some(true);
        Conn {
            id,
            first_packet: packet,
            first_ts: ts_ns,
            client,
            server,
            syn_seen,
            amqp,
            senders: [client, server],
            streams: [
                FrameStream::new(syn_seen, ctx.limits),
                FrameStream::new(syn_seen, ctx.limits),
            ],
            pending: Vec::new(),
            opened: false,
            closed: false,
            version: None,
            info: Info::default(),
            contents: HashMap::default(),
            close_seen: false,
            next_seq: 0,
            tls: None,
            tls_checked: false,
            layer: None,
            heads: [Vec::new(), Vec::new()],
            tcp_off: [0; 2],
            feeding: None,
            close_end: [None; 2],
            close_acked: [false; 2],
            fin: None,
            rst: None,
        }
    }

    fn dir_of(&self, src: Endpoint) -> Dir {
        if src == self.client {
            Dir::C2S
        } else {
            Dir::S2C
        }
    }

    fn stream_of(&self, src: Endpoint) -> Option<usize> {
        self.senders.iter().position(|s| *s == src)
    }

    /// The one place the direction changes: everything labelled with the old one so far (events
    /// held until the flow was known to be AMQP, messages being assembled, a close already seen)
    /// is relabelled with it.
    fn swap(&mut self) {
        std::mem::swap(&mut self.client, &mut self.server);
        for ev in &mut self.pending {
            let base = ev.base_mut();
            base.dir = base.dir.map(Dir::other);
        }
        self.contents = self
            .contents
            .drain()
            .map(|((d, ch), c)| ((d.other(), ch), c))
            .collect();
        if let Some((_, _, d)) = self.info.close.as_mut() {
            *d = d.other();
        }
    }

    fn add_accounting(&self, total: &mut StreamAccounting) {
        for s in &self.streams {
            total.add(&s.accounting);
        }
    }

    /// A packet from `src` acknowledged `acked` bytes (modulo 2^32) of the other stream: the
    /// other side's connection.close, if it covers its end, is proven arrived.
    fn acked(&mut self, src: Endpoint, acked: u32, packet: u64) -> Option<CloseArrived> {
        let j = 1 - self.stream_of(src)?;
        let end = self.close_end[j]?;
        // modulo 2^32 as sequence numbers compare: the close's end at or before the ack
        if self.close_acked[j] || (acked.wrapping_sub(end as u32) as i32) < 0 {
            return None;
        }
        self.close_acked[j] = true;
        Some(CloseArrived {
            conn: self.id as i64,
            closer: self.dir_of(self.senders[j]),
            packet,
        })
    }

    fn data(
        &mut self,
        ctx: &Ctx<'_>,
        src: Endpoint,
        data: &[u8],
        packet: u64,
        ts_ns: i64,
        out: &mut Vec<Event>,
    ) {
        if let Some(i) = self.stream_of(src) {
            self.tcp_off[i] += data.len() as u64;
        }
        if !self.tls_checked && !data.is_empty() {
            self.tls_checked = true;
            if starts_tls(data) {
                self.tls = Some(Box::new(TlsConn::new()));
                if src != self.client {
                    self.swap(); // the ClientHello is the client's
                }
            }
        }
        if let Some(tls) = self.tls.as_mut() {
            let mut items = TlsOuts::default();
            let from_client = src == self.client;
            tls.feed(
                from_client,
                data,
                packet,
                ts_ns,
                ctx.keylog,
                ctx.limits,
                &mut items,
            );
            self.tls_outs(ctx, items, out);
            return;
        }
        self.feeding = self.stream_of(src).map(|i| (i, self.tcp_off[i]));
        self.plain(ctx, src, data, packet, ts_ns, out);
        self.feeding = None;
    }

    /// What the TLS layer made of the records of both directions.
    fn tls_outs(&mut self, ctx: &Ctx<'_>, items: TlsOuts, out: &mut Vec<Event>) {
        let (client, server) = (self.client, self.server);
        if items.client.is_empty() || items.server.is_empty() {
            self.tls_items(ctx, client, items.client, out);
            self.tls_items(ctx, server, items.server, out);
            return;
        }
        // records of both directions opened at once (their keys came late): in capture order,
        // so that the conversation is followed as it happened (start before start-ok)
        let mut c = items.client.into_iter().peekable();
        let mut s = items.server.into_iter().peekable();
        loop {
            let from_client = match (c.peek(), s.peek()) {
                (Some(a), Some(b)) => a.packet() <= b.packet(),
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let (src, item) = if from_client {
                (client, c.next())
            } else {
                (server, s.next())
            };
            self.tls_items(ctx, src, item.into_iter().collect(), out);
        }
    }

    /// The key log grew: records this connection held for their keys are opened now.
    fn tls_keys_added(&mut self, ctx: &Ctx<'_>, out: &mut Vec<Event>) {
        let Some(tls) = self.tls.as_mut() else { return };
        let mut items = TlsOuts::default();
        tls.keys_added(ctx.keylog, ctx.limits, &mut items);
        if !items.is_empty() {
            self.tls_outs(ctx, items, out);
        }
    }

    /// What the TLS layer made of a direction's records: plaintext, gaps, unusable records.
    fn tls_items(
        &mut self,
        ctx: &Ctx<'_>,
        src: Endpoint,
        items: Vec<TlsOut>,
        out: &mut Vec<Event>,
    ) {
        let Some(i) = self.stream_of(src) else { return };
        for item in items {
            match item {
                TlsOut::Plain {
                    data,
                    packet,
                    ts_ns,
                    layer,
                } => {
                    self.layer = Some(layer);
                    self.plain(ctx, src, &data, packet, ts_ns, out);
                    self.layer = None;
                }
                TlsOut::Gap {
                    size,
                    packet,
                    ts_ns,
                } => {
                    if self.amqp == Some(false) {
                        continue;
                    }
                    // the plaintext size is unknown (the walker resynchronises); the event shows
                    // the TCP bytes the capture lost, counted by the TLS layer's accounting
                    let mut items = Vec::new();
                    self.streams[i].gap(0, packet, ts_ns, &mut items);
                    for item in &mut items {
                        if let StreamItem::Gap { size: s, .. } = item {
                            *s = size;
                        }
                    }
                    self.emit(ctx, src, items, out);
                }
                TlsOut::Problem {
                    reason,
                    offset,
                    packet,
                    ts_ns,
                } => {
                    let item = StreamItem::Malformed {
                        reason,
                        offset,
                        packet,
                        ts_ns,
                    };
                    self.emit(ctx, src, vec![item], out);
                }
            }
        }
    }

    /// In-order AMQP-stream bytes (the TCP payload, or TLS plaintext).
    fn plain(
        &mut self,
        ctx: &Ctx<'_>,
        src: Endpoint,
        data: &[u8],
        packet: u64,
        ts_ns: i64,
        out: &mut Vec<Event>,
    ) {
        let Some(i) = self.stream_of(src) else { return };
        let head = &mut self.heads[i];
        if head.len() < HEAD_BYTES {
            let take = (HEAD_BYTES - head.len()).min(data.len());
            head.extend_from_slice(&data[..take]);
        }
        if self.amqp == Some(false) {
            let acc = &mut self.streams[i].accounting;
            acc.stream_bytes += data.len() as u64;
            acc.skipped_bytes += data.len() as u64;
            return;
        }
        let mut items = Vec::new();
        let codec = ctx.codec;
        self.streams[i].feed(data, packet, ts_ns, codec, &mut items);
        if self.amqp.is_none() {
            self.detect(ctx, src, i, &items);
        }
        self.emit(ctx, src, items, out);
    }

    fn gap(
        &mut self,
        ctx: &Ctx<'_>,
        src: Endpoint,
        size: u64,
        packet: u64,
        ts_ns: i64,
        out: &mut Vec<Event>,
    ) {
        if let Some(i) = self.stream_of(src) {
            self.tcp_off[i] += size;
        }
        if let Some(tls) = self.tls.as_mut() {
            let mut items = TlsOuts::default();
            tls.gap(src == self.client, size, packet, ts_ns, &mut items);
            self.tls_outs(ctx, items, out);
            return;
        }
        let Some(i) = self.stream_of(src) else { return };
        if self.amqp == Some(false) {
            return;
        }
        let mut items = Vec::new();
        self.streams[i].gap(size, packet, ts_ns, &mut items);
        self.emit(ctx, src, items, out);
    }

    fn close(&mut self, ctx: &Ctx<'_>, how: &str, packet: u64, ts_ns: i64, out: &mut Vec<Event>) {
        if self.closed {
            return;
        }
        let mut tail = Vec::new();
        let codec = ctx.codec;
        for i in 0..2 {
            let mut items = Vec::new();
            self.streams[i].finish(codec, &mut items);
            let src = self.senders[i];
            self.emit(ctx, src, items, &mut tail);
        }
        if self.amqp.is_none() {
            self.amqp = Some(false); // never confirmed: not reported
        }
        if self.amqp != Some(true) {
            out.extend(self.tls_event(packet, ts_ns));
            self.closed = true;
            return;
        }
        if !self.opened {
            // a flow on an AMQP port that ended before any byte of AMQP (SYN then RST: a refused
            // connection): still a connection, and every close follows its open
            self.opened = true;
            out.push(self.open_event());
            out.append(&mut self.pending);
        }
        out.append(&mut tail);
        let mut open: Vec<((Dir, u16), Content)> = self.contents.drain().collect();
        open.sort_by_key(|(_, c)| c.seq);
        for ((d, ch), content) in open {
            out.push(self.message(d, ch, content, packet, ts_ns, false));
        }
        out.push(self.close_event(ctx, how, packet, ts_ns));
        out.extend(self.tls_event(packet, ts_ns));
        self.closed = true;
    }

    /// The `tls` event of a TLS connection: once, when it closes, whatever was decrypted.
    fn tls_event(&self, packet: u64, ts_ns: i64) -> Option<Event> {
        let s = self.tls.as_ref()?.summary();
        Some(Event::Tls(Box::new(Tls {
            base: Base {
                packet,
                ts_ns,
                conn: self.id as i64,
                dir: None,
                channel: None,
            },
            client: self.client.to_string(),
            server: self.server.to_string(),
            version: s.version,
            suite: s.suite,
            sni: s.sni,
            alpn: s.alpn,
            resumed: s.resumed,
            decrypted: s.decrypted,
            reason: s.reason,
            records: s.records,
            records_decrypted: s.records_decrypted,
            records_failed: s.records_failed,
            records_lost: s.records_lost,
            bytes_c2s: s.bytes_c2s,
            bytes_s2c: s.bytes_s2c,
        })))
    }

    fn tls_fields(&self) -> (Option<String>, Option<String>, Option<bool>) {
        match &self.tls {
            Some(t) => {
                let s = t.summary();
                (s.version, s.suite, Some(s.resumed))
            }
            None => (None, None, None),
        }
    }

    // --- detection -------------------------------------------------------------------------------

    fn detect(&mut self, ctx: &Ctx<'_>, src: Endpoint, i: usize, items: &[StreamItem]) {
        for item in items {
            if let StreamItem::Header { version, .. } = item {
                self.amqp = Some(!version.is_empty());
                if src != self.client {
                    self.swap(); // the protocol header is the client's
                }
                return;
            }
        }
        let stream = &self.streams[i];
        if items
            .iter()
            .any(|it| matches!(it, StreamItem::Frame { .. }))
            && stream.synced_once
        {
            self.amqp = Some(true);
            self.infer_direction(ctx, src, items);
            return;
        }
        let seen = stream.accounting.stream_bytes;
        if (self.syn_seen && src == self.client && seen >= 8) || seen > ctx.limits.detect_bytes {
            // a client whose stream starts with anything but "AMQP" is not AMQP
            self.amqp = Some(false);
        }
    }

    /// Mid-stream without a known port: the chassis of the first methods tells who sent them.
    fn infer_direction(&mut self, ctx: &Ctx<'_>, src: Endpoint, items: &[StreamItem]) {
        for item in items {
            let StreamItem::Frame {
                ftype: FRAME_METHOD,
                payload,
                ..
            } = item
            else {
                continue;
            };
            if payload.len() < 4 {
                continue;
            }
            let class_id = u16::from_be_bytes([payload[0], payload[1]]);
            let method_id = u16::from_be_bytes([payload[2], payload[3]]);
            let senders = match ctx.codec.sent_by(class_id, method_id) {
                None => continue,
                Some(s) => s,
            };
            if senders.client != senders.server {
                if senders.client != (src == self.client) {
                    self.swap();
                }
                return;
            }
        }
    }

    // --- events ----------------------------------------------------------------------------------

    fn emit(&mut self, ctx: &Ctx<'_>, src: Endpoint, items: Vec<StreamItem>, out: &mut Vec<Event>) {
        if self.amqp == Some(false) || items.is_empty() {
            return;
        }
        let held = self.amqp.is_none();
        let mut fresh = Vec::new();
        let sink = if held {
            &mut fresh
        } else {
            if !self.opened {
                self.opened = true;
                out.push(self.open_event());
                out.append(&mut self.pending);
            }
            &mut *out
        };
        let d = self.dir_of(src);
        let id = self.id;
        for item in items {
            match item {
                StreamItem::Frame {
                    ftype: FRAME_BODY,
                    channel,
                    payload,
                    packet,
                    ts_ns,
                    resync,
                } => {
                    let done = self.body(ctx, d, channel, &payload, packet, ts_ns);
                    let b = base(id, packet, ts_ns, d, Some(channel));
                    let mut frame = plain_frame(b, FRAME_BODY, payload.len() as u32, resync);
                    frame.payload = Some(payload);
                    frame.tls = self.layer;
                    sink.push(Event::Frame(Box::new(frame)));
                    sink.extend(done);
                }
                StreamItem::Frame {
                    ftype,
                    channel,
                    payload,
                    packet,
                    ts_ns,
                    resync,
                } => {
                    let at = sink.len();
                    self.frame(
                        ctx, d, ftype, channel, &payload, packet, ts_ns, resync, sink,
                    );
                    if let Some(layer) = self.layer {
                        for ev in &mut sink[at..] {
                            if let Event::Frame(f) = ev {
                                f.tls = Some(layer);
                            }
                        }
                    }
                }
                StreamItem::Header {
                    version,
                    raw,
                    packet,
                    ts_ns,
                } => {
                    if self.version.is_none() {
                        self.version = Some(version.clone());
                    }
                    sink.push(Event::ProtocolHeader(Box::new(ProtocolHeader {
                        base: base(id, packet, ts_ns, d, None),
                        version,
                        raw,
                    })));
                }
                StreamItem::Gap {
                    size,
                    lost_frame,
                    packet,
                    ts_ns,
                } => {
                    sink.push(Event::Gap(Box::new(Gap {
                        base: base(id, packet, ts_ns, d, None),
                        size,
                        lost_frame,
                    })));
                }
                StreamItem::Resync {
                    skipped,
                    reason,
                    packet,
                    ts_ns,
                } => {
                    sink.push(Event::Resync(Box::new(Resync {
                        base: base(id, packet, ts_ns, d, None),
                        skipped,
                        reason,
                    })));
                }
                StreamItem::Malformed {
                    reason,
                    offset,
                    packet,
                    ts_ns,
                } => {
                    sink.push(Event::Malformed(Box::new(Malformed {
                        base: base(id, packet, ts_ns, d, None),
                        reason,
                        offset,
                    })));
                }
            }
        }
        if held {
            self.pending.append(&mut fresh);
        }
    }

    /// A body frame's share of the message on its channel, and the message if it completes it.
    fn body(
        &mut self,
        ctx: &Ctx<'_>,
        d: Dir,
        channel: u16,
        payload: &[u8],
        packet: u64,
        ts_ns: i64,
    ) -> Option<Event> {
        let content = self.contents.get_mut(&(d, channel))?;
        content.properties.as_ref()?;
        content.frames += 1;
        content.received += payload.len() as u64;
        if let Some(sha) = content.sha.as_mut() {
            sha.update(payload);
        }
        if ctx.options.keep_bodies && content.received <= ctx.limits.max_body_kept {
            content.body.extend_from_slice(payload);
        }
        if content.received < content.body_size {
            return None;
        }
        let content = self.contents.remove(&(d, channel))?;
        Some(self.message(d, channel, content, packet, ts_ns, true))
    }

    #[allow(clippy::too_many_arguments)]
    fn frame(
        &mut self,
        ctx: &Ctx<'_>,
        d: Dir,
        ftype: u8,
        channel: u16,
        payload: &[u8],
        packet: u64,
        ts_ns: i64,
        resync: bool,
        out: &mut Vec<Event>,
    ) {
        let b = base(self.id, packet, ts_ns, d, Some(channel));
        let size = payload.len() as u32;
        match ftype {
            FRAME_METHOD => {
                let m = ctx.codec.decode_method(payload);
                let mut args = m.args;
                if m.known && m.class_id == CONNECTION_CLASS {
                    args = self.negotiation(ctx, &m.name, args, d);
                }
                let content = m.known && m.content;
                let name = m.name.clone();
                out.push(Event::Frame(Box::new(Frame {
                    base: b,
                    ftype: Name::Spec("method"),
                    size,
                    class_id: Some(m.class_id),
                    method_id: Some(m.method_id),
                    method: Some(name.clone()),
                    args: Some(if content {
                        args.clone()
                    } else {
                        std::mem::take(&mut args)
                    }),
                    body_size: None,
                    properties: None,
                    resync,
                    problem: m.problem,
                    payload: None,
                    tls: None,
                })));
                if !content {
                    return;
                }
                if let Some(prev) = self.contents.remove(&(d, channel)) {
                    out.push(self.message(d, channel, prev, packet, ts_ns, false));
                }
                self.next_seq += 1;
                let c = Content {
                    seq: self.next_seq,
                    method: name,
                    args,
                    first_packet: packet,
                    properties: None,
                    body_size: 0,
                    received: 0,
                    frames: 1,
                    body: Vec::new(),
                    sha: None,
                };
                self.contents.insert((d, channel), c);
            }
            FRAME_HEADER => {
                let h = ctx.codec.decode_header(payload);
                out.push(Event::Frame(Box::new(Frame {
                    base: b,
                    ftype: Name::Spec("header"),
                    size,
                    class_id: Some(h.class_id),
                    method_id: None,
                    method: None,
                    args: None,
                    body_size: Some(h.body_size),
                    properties: Some(h.properties.clone()),
                    resync,
                    problem: h.problem,
                    payload: None,
                    tls: None,
                })));
                let Some(content) = self.contents.get_mut(&(d, channel)) else {
                    return;
                };
                if content.properties.is_some() {
                    return;
                }
                content.properties = Some(h.properties);
                content.body_size = h.body_size;
                content.frames += 1;
                content.sha = Some(Sha256::new());
                if ctx.options.keep_bodies {
                    // the whole kept body at once: growing it by doubling would copy it and hold
                    // twice its size at the moment of each copy
                    let kept = h.body_size.min(ctx.limits.max_body_kept);
                    content
                        .body
                        .reserve_exact(usize::try_from(kept).unwrap_or(0));
                }
                if h.body_size == 0 {
                    if let Some(content) = self.contents.remove(&(d, channel)) {
                        out.push(self.message(d, channel, content, packet, ts_ns, true));
                    }
                }
            }
            _ => {
                out.push(Event::Frame(Box::new(plain_frame(b, ftype, size, resync))));
            }
        }
    }

    fn message(
        &self,
        d: Dir,
        channel: u16,
        c: Content,
        packet: u64,
        ts_ns: i64,
        complete: bool,
    ) -> Event {
        let body = if !c.body.is_empty() || c.properties.is_some() {
            Some(c.body)
        } else {
            None
        };
        let sha = c.sha.map(|s| hex(&s.finalize()));
        Event::Message(Box::new(Message {
            base: base(self.id, packet, ts_ns, d, Some(channel)),
            method: c.method,
            args: c.args,
            properties: c.properties.unwrap_or_default(),
            body_size: c.body_size,
            body_received: c.received,
            complete: complete && c.received == c.body_size,
            first_packet: c.first_packet,
            frames: c.frames,
            body_sha256: sha,
            body,
        }))
    }

    // --- connection-level state ------------------------------------------------------------------

    fn negotiation(&mut self, ctx: &Ctx<'_>, name: &str, mut args: Table, d: Dir) -> Table {
        let show = ctx.options.show_credentials;
        let info = &mut self.info;
        let arg = |args: &Table, k: &str| get(args, k).cloned();
        match name {
            // version-major/minor are 0 and 9 in both 0-9 and 0-9-1: only the protocol header
            // tells them apart, so the version is never taken from here
            "connection.start" => info.server_properties = arg(&args, "server_properties"),
            "connection.start-ok" => {
                info.client_properties = arg(&args, "client_properties");
                info.mechanism = get(&args, "mechanism")
                    .and_then(|v| v.as_str())
                    .map(str::to_owned);
                let (user, password) =
                    parse_credentials(ctx.codec, info.mechanism.as_deref(), get(&args, "response"));
                info.user = user;
                info.password = password;
                if !show {
                    let redacted = redact_response(
                        info.mechanism.as_deref(),
                        info.user.as_deref(),
                        get(&args, "response"),
                    );
                    set(&mut args, "response", redacted);
                }
            }
            "connection.secure-ok" if !show => {
                set(&mut args, "response", Value::Str(REDACTED.into()))
            }
            "connection.update-secret" if !show => {
                set(&mut args, "new_secret", Value::Str(REDACTED.into()))
            }
            "connection.tune-ok" => {
                info.channel_max = arg(&args, "channel_max");
                info.frame_max = arg(&args, "frame_max");
                info.heartbeat = arg(&args, "heartbeat");
            }
            "connection.open" => info.vhost = arg(&args, "virtual_host"),
            "connection.close" => {
                if info.close.is_none() {
                    info.close = Some((arg(&args, "reply_code"), arg(&args, "reply_text"), d));
                }
                self.close_seen = true;
                if let Some((i, end)) = self.feeding {
                    // the end of the data that completed it: at or after the close's last byte
                    self.close_end[i].get_or_insert(end);
                }
            }
            _ => {}
        }
        args
    }

    fn open_event(&self) -> Event {
        Event::Connection(Box::new(Connection {
            base: Base {
                packet: self.first_packet,
                ts_ns: self.first_ts,
                conn: self.id as i64,
                dir: None,
                channel: None,
            },
            state: "open".into(),
            client: self.client.to_string(),
            server: self.server.to_string(),
            syn_seen: self.syn_seen,
            tls_version: self.tls_fields().0,
            tls_suite: self.tls_fields().1,
            tls_resumed: self.tls_fields().2,
            ..Connection::default()
        }))
    }

    fn close_event(&self, ctx: &Ctx<'_>, how: &str, packet: u64, ts_ns: i64) -> Event {
        let info = &self.info;
        let table = |v: &Option<Value>| match v {
            Some(Value::Table(t)) if !t.is_empty() => Some(t.clone()),
            _ => None,
        };
        let cp = table(&info.client_properties);
        let sp = table(&info.server_properties);
        let prop =
            |t: &Option<Table>, k: &str| t.as_ref().and_then(|t| get(t, k)).and_then(py_str_opt);
        let acc = |ep: Endpoint| {
            self.stream_of(ep)
                .map(|i| self.streams[i].accounting)
                .unwrap_or_default()
        };
        let (c2s, s2c) = (acc(self.client), acc(self.server));
        let int = |v: &Option<Value>| v.as_ref().and_then(Value::as_i64);
        let ended = if self.close_seen && matches!(how, "fin" | "eof" | "rst") {
            "connection.close"
        } else {
            how
        };
        let (close_code, close_text, close_by) = match &info.close {
            Some((code, text, d)) => (
                int(code),
                text.as_ref().and_then(py_str_opt),
                Some(if *d == Dir::C2S { "client" } else { "server" }.to_string()),
            ),
            None => (None, None, None),
        };
        Event::Connection(Box::new(Connection {
            base: Base {
                packet,
                ts_ns,
                conn: self.id as i64,
                dir: None,
                channel: None,
            },
            state: "close".into(),
            client: self.client.to_string(),
            server: self.server.to_string(),
            syn_seen: self.syn_seen,
            version: self.version.clone(),
            ended: Some(ended.to_string()),
            frame_max: int(&info.frame_max),
            channel_max: int(&info.channel_max),
            heartbeat: int(&info.heartbeat),
            mechanism: info.mechanism.clone(),
            user: info.user.clone(),
            password: if ctx.options.show_credentials {
                info.password.clone()
            } else {
                None
            },
            vhost: info.vhost.as_ref().and_then(py_str_opt),
            client_product: prop(&cp, "product"),
            client_version: prop(&cp, "version"),
            client_platform: prop(&cp, "platform"),
            server_product: prop(&sp, "product"),
            server_version: prop(&sp, "version"),
            close_code,
            close_text,
            close_by,
            frames_c2s: c2s.frames,
            frames_s2c: s2c.frames,
            bytes_c2s: c2s.stream_bytes,
            bytes_s2c: s2c.stream_bytes,
            client_properties: cp,
            server_properties: sp,
            tls_version: self.tls_fields().0,
            tls_suite: self.tls_fields().1,
            tls_resumed: self.tls_fields().2,
            fin_by: self.fin.map(|m| self.side(m.by).to_owned()),
            fin_packet: self.fin.map(|m| m.packet),
            rst_by: self.rst.map(|m| self.side(m.by).to_owned()),
            rst_packet: self.rst.map(|m| m.packet),
            opening: self.opening(c2s.frames + s2c.frames),
        }))
    }

    fn side(&self, ep: Endpoint) -> &'static str {
        if ep == self.client {
            "client"
        } else {
            "server"
        }
    }

    /// What the connection began with when it did not speak AMQP 0-9-1 (or 0-9); `frames`: the
    /// frames decoded on it.
    fn opening(&self, frames: u64) -> Option<&'static str> {
        let head: &[u8] = match self.stream_of(self.client) {
            Some(i) => &self.heads[i],
            None => &[],
        };
        if let Some(version) = head.strip_prefix(b"AMQP") {
            return match version {
                [0, 0, 9, 1, ..] | [1, 1, 0, 9, ..] => None,
                [0 | 2 | 3, 1, 0, 0, ..] => Some("amqp-1.0"),
                [1, 1, 0, 10, ..] => Some("amqp-0-10"),
                _ => Some("amqp-other"),
            };
        }
        if frames > 0 {
            return None; // AMQP 0-9-1 frames, the protocol header not captured
        }
        if self.tls.as_ref().is_some_and(|t| !t.summary().decrypted) {
            return Some("tls");
        }
        if opening_is_http(head) {
            return Some("http");
        }
        let bytes = self.tcp_off[0] + self.tcp_off[1];
        Some(if head.is_empty() && bytes == 0 {
            "nothing"
        } else {
            "other"
        })
    }
}

/// An HTTP request line's start (HTTP/2's connection preface included).
fn opening_is_http(head: &[u8]) -> bool {
    const METHODS: [&[u8]; 10] = [
        b"GET ",
        b"POST ",
        b"PUT ",
        b"HEAD ",
        b"DELETE ",
        b"OPTIONS ",
        b"PATCH ",
        b"CONNECT ",
        b"TRACE ",
        b"PRI * HTTP/2",
    ];
    METHODS.iter().any(|m| head.starts_with(m))
}

/// A frame that carries no method or properties (body, heartbeat, the 0-8/0-9 oob and trace types).
fn plain_frame(base: Base, ftype: u8, size: u32, resync: bool) -> Frame {
    Frame {
        base,
        ftype: frame_type_name(ftype),
        size,
        class_id: None,
        method_id: None,
        method: None,
        args: None,
        body_size: None,
        properties: None,
        resync,
        problem: None,
        payload: None,
        tls: None,
    }
}

/// Replace the value of `key` in place (its position kept), as `dict(args, key=value)` does.
fn set(args: &mut Table, key: &str, value: Value) {
    match args.iter_mut().find(|(k, _)| &**k == key) {
        Some((_, v)) => *v = value,
        None => args.push((key.into(), value)),
    }
}

fn hex(raw: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(raw.len() * 2);
    for b in raw {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// A value as Python's `str()` shows it, for the few places the events print one.
fn py_str(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "None".into(),
        Some(Value::Str(s)) | Some(Value::Problem(s)) => s.clone(),
        Some(Value::Int(i)) => i.to_string(),
        Some(Value::UInt(u)) | Some(Value::Timestamp(u)) => u.to_string(),
        Some(Value::Bool(b)) => if *b { "True" } else { "False" }.into(),
        Some(Value::Bytes(b)) => format!("b'{}'", String::from_utf8_lossy(b)),
        Some(other) => format!("{other:?}"),
    }
}

fn py_str_opt(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        other => Some(py_str(Some(other))),
    }
}

/// User and password from a start-ok response (PLAIN: authzid NUL user NUL password; AMQPLAIN: a
/// field table without its length prefix holding LOGIN and PASSWORD).
fn parse_credentials(
    codec: &Codec,
    mechanism: Option<&str>,
    response: Option<&Value>,
) -> (Option<String>, Option<String>) {
    let raw: &[u8] = match response {
        Some(Value::Str(s)) => s.as_bytes(),
        Some(Value::Bytes(b)) => b,
        _ => return (None, None),
    };
    match mechanism {
        Some("PLAIN") => {
            let parts: Vec<&[u8]> = raw.split(|b| *b == 0).collect();
            if parts.len() == 3 {
                let text = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
                (Some(text(parts[1])), Some(text(parts[2])))
            } else {
                (None, None)
            }
        }
        Some("AMQPLAIN") => {
            let table = codec.decode_table_body(raw);
            let s = |k: &str| get(&table, k).and_then(|v| v.as_str()).map(str::to_owned);
            (s("LOGIN"), s("PASSWORD"))
        }
        _ => (None, None),
    }
}

fn redact_response(mechanism: Option<&str>, user: Option<&str>, response: Option<&Value>) -> Value {
    if let (Some("PLAIN"), Some(user)) = (mechanism, user) {
        return Value::Str(format!("\0{user}\0{REDACTED}"));
    }
    let empty = match response {
        None | Some(Value::Null) => true,
        Some(Value::Str(s)) => s.is_empty(),
        Some(Value::Bytes(b)) => b.is_empty(),
        _ => false,
    };
    if mechanism == Some("EXTERNAL") || empty {
        return response.cloned().unwrap_or(Value::Null);
    }
    Value::Str(REDACTED.into())
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;

//! One direction of one connection: ordered bytes and gaps in, protocol headers and frames out.
//!
//! The stream is *in sync* when it knows where the next frame starts (from the stream's first
//! byte, or after confirming a candidate boundary with several consecutive valid frames). A gap
//! or bytes that do not frame make it *lost*; it then scans for a boundary again (a resync). When
//! a gap cuts into a frame whose header was seen, the frame's declared size tells where the next
//! one starts, so the stream skips the rest of the lost frame and stays in sync.
//!
//! Every byte fed ends up counted as frame bytes, protocol-header bytes, skipped bytes or (at the
//! end) pending bytes. A port of amqpscope.dissect.stream: same items, offsets and texts.

use crate::limits::Limits;
use std::collections::VecDeque;

/// What the frame walker asks of the spec while it judges where a stream starts.
pub trait MethodInfo {
    /// The spec defines (class, method).
    fn known(&self, class_id: u16, method_id: u16) -> bool;
    /// The server's side of a connection begins with it (connection.start in 0-9 and 0-9-1).
    fn opens_stream(&self, class_id: u16, method_id: u16) -> bool;
}

/// What the frame walker finds in one direction's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamItem {
    Header {
        version: String,
        raw: [u8; 8],
        packet: u64,
        ts_ns: i64,
    },
    Frame {
        ftype: u8,
        channel: u16,
        payload: Vec<u8>,
        packet: u64,
        ts_ns: i64,
        resync: bool,
    },
    Gap {
        size: u64,
        lost_frame: Option<String>,
        packet: u64,
        ts_ns: i64,
    },
    Resync {
        skipped: u64,
        reason: String,
        packet: u64,
        ts_ns: i64,
    },
    Malformed {
        reason: String,
        offset: u64,
        packet: u64,
        ts_ns: i64,
    },
}

/// Where the bytes of a stream went; frame + header + skipped + pending == stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamAccounting {
    pub stream_bytes: u64,
    pub frame_bytes: u64,
    pub header_bytes: u64,
    pub gap_bytes: u64,
    pub skipped_bytes: u64,
    pub pending_bytes: u64,
    pub frames: u64,
}

impl StreamAccounting {
    pub fn add(&mut self, o: &StreamAccounting) {
        self.stream_bytes += o.stream_bytes;
        self.frame_bytes += o.frame_bytes;
        self.header_bytes += o.header_bytes;
        self.gap_bytes += o.gap_bytes;
        self.skipped_bytes += o.skipped_bytes;
        self.pending_bytes += o.pending_bytes;
        self.frames += o.frames;
    }
}

pub const FRAME_METHOD: u8 = 1;
pub const FRAME_HEADER: u8 = 2;
pub const FRAME_BODY: u8 = 3;
pub const FRAME_HEARTBEAT: u8 = 8;
pub const FRAME_END: u8 = 0xCE;
const HEADER_SIZE: usize = 7;

/// The name of a frame type, for texts ("method frame on channel 1, …").
pub fn frame_type_name(t: u8) -> Option<&'static str> {
    Some(match t {
        1 => "method",
        2 => "header",
        3 => "body",
        8 => "heartbeat",
        4 => "oob-method",
        5 => "oob-header",
        6 => "oob-body",
        7 => "trace",
        _ => return None,
    })
}

/// The version a protocol header names ("0-9-1", or "unknown (1.2.3.4)").
pub fn protocol_version(raw: &[u8; 8]) -> String {
    let [_, _, _, _, a, b, c, d] = *raw;
    let known = match (a, b, c, d) {
        (0, 0, 9, 1) => "0-9-1",
        (1, 1, 0, 9) => "0-9",
        (1, 1, 8, 0) | (1, 1, 9, 1) => "0-8",
        (1, 1, 0, 10) => "0-10",
        (0, 1, 0, 0) => "1.0",
        (2, 1, 0, 0) => "1.0-tls",
        (3, 1, 0, 0) => "1.0-sasl",
        _ => return format!("unknown ({a}.{b}.{c}.{d})"),
    };
    known.to_owned()
}

/// What the bytes at an offset hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// Bytes needed from the frame's start before it can be decoded.
    NeedMore(u64),
    /// A frame: type, channel, payload range, offset after its frame-end octet.
    Frame {
        ftype: u8,
        channel: u16,
        payload: std::ops::Range<usize>,
        end: usize,
    },
    Malformed(String),
}

/// The frame that starts at `off` (wire.decode_frame).
pub fn decode_frame(buf: &[u8], off: usize, max_size: u64) -> Decoded {
    let Some(h) = header_at(buf, off) else {
        return Decoded::NeedMore(HEADER_SIZE as u64 + 1);
    };
    let (ftype, channel, size) = h;
    let end = off as u64 + HEADER_SIZE as u64 + u64::from(size);
    let end_byte = usize::try_from(end).ok().and_then(|e| buf.get(e).copied());
    if u64::from(size) <= max_size && end_byte == Some(FRAME_END) {
        let end = end as usize; // it indexes buf
        return Decoded::Frame {
            ftype,
            channel,
            payload: off + HEADER_SIZE..end,
            end: end + 1,
        };
    }
    if u64::from(size) > max_size {
        if buf.get(off..off + 4) == Some(b"AMQP") {
            // its "size" is always over 1.3 GB: say what it is instead
            let version = match buf
                .get(off..off + 8)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
            {
                Some(raw) => protocol_version(&raw),
                None => "?, cut short".to_owned(),
            };
            return Decoded::Malformed(format!(
                "protocol header (AMQP {version}) where a frame was expected"
            ));
        }
        return Decoded::Malformed(format!(
            "declared frame size {size} exceeds the limit of {max_size}"
        ));
    }
    match end_byte {
        None => Decoded::NeedMore(HEADER_SIZE as u64 + u64::from(size) + 1),
        Some(b) => Decoded::Malformed(format!("frame-end octet is 0x{b:02x}, not 0xce")),
    }
}

/// Type, channel and declared size of the frame header at `off`.
fn header_at(buf: &[u8], off: usize) -> Option<(u8, u16, u32)> {
    let h = buf.get(off..off.checked_add(HEADER_SIZE)?)?;
    Some((
        h[0],
        u16::from_be_bytes([h[1], h[2]]),
        u32::from_be_bytes([h[3], h[4], h[5], h[6]]),
    ))
}

/// A protocol header at `off`: the version, need-more, or not a protocol header.
enum ProtoHeader {
    Version(String),
    NeedMore,
    No,
}

fn protocol_header(buf: &[u8], off: usize) -> ProtoHeader {
    let have = buf.get(off..).unwrap_or_default();
    let head = &have[..have.len().min(4)];
    if !b"AMQP".starts_with(head) {
        return ProtoHeader::No;
    }
    match have.get(..8).and_then(|s| <[u8; 8]>::try_from(s).ok()) {
        Some(raw) => ProtoHeader::Version(protocol_version(&raw)),
        None => ProtoHeader::NeedMore,
    }
}

fn describe(buf: &[u8]) -> String {
    let (t, ch, size) = header_at(buf, 0).unwrap_or_default();
    let name = match frame_type_name(t) {
        Some(n) => n.to_owned(),
        None => format!("type {t}"),
    };
    format!("{name} frame on channel {ch}, {size} bytes")
}

fn is_amqp_0_9_x(version: &str) -> bool {
    matches!(version, "0-9-1" | "0-9" | "0-8")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Sync,
    /// The capture begins after the stream's first byte: the first bytes are tried as its start
    /// (a protocol header, or the method the server's side begins with) before scanning.
    Start,
    /// A gap fell exactly between two frames (whole packets lost): the byte after it is tried as
    /// a frame boundary first, confirmed by the frames that follow.
    AfterGap,
    Lost,
    Skip,
    Dead,
}

/// The packet and time of the data fed, by the stream offset where it ends.
#[derive(Debug, Clone, Copy)]
struct Chunk {
    end: u64,
    packet: u64,
    ts_ns: i64,
}

/// Frames of one direction. `at_start`: the first byte fed is the first byte of the stream.
pub struct FrameStream {
    pub accounting: StreamAccounting,
    /// The protocol version from this direction's protocol header, once seen.
    pub version: Option<String>,
    pub synced_once: bool,
    limits: Limits,
    /// Unconsumed bytes: `buf[pos..]` starts at stream offset `base`. Bytes are appended as
    /// they come and the consumed prefix dropped now and then, so a large frame arriving in many
    /// chunks costs O(size) copying, not O(size²).
    buf: Vec<u8>,
    pos: usize,
    base: u64,
    chunks: VecDeque<Chunk>,
    state: State,
    expect_header: bool,
    skip_left: u64,
    resynced: bool,
    lost_reason: String,
    /// Frames ending after this offset in the buffer end in the newest chunk.
    end_of_older: usize,
    /// While an incomplete frame needs this many buffered bytes, data is only appended.
    need: usize,
    /// The first candidate boundary that needs more data before it can be judged.
    pending_from: Option<usize>,
    /// Bytes passed over since the stream was lost, over every call: what its resync reports.
    lost_skipped: u64,
}

impl FrameStream {
    pub fn new(at_start: bool, limits: &Limits) -> FrameStream {
        FrameStream {
            accounting: StreamAccounting::default(),
            version: None,
            synced_once: at_start,
            limits: limits.clone(),
            buf: Vec::new(),
            pos: 0,
            base: 0,
            chunks: VecDeque::new(),
            state: if at_start { State::Sync } else { State::Start },
            expect_header: at_start,
            skip_left: 0,
            resynced: !at_start,
            lost_reason: if at_start {
                String::new()
            } else {
                "stream start not captured".to_owned()
            },
            end_of_older: 0,
            need: 0,
            pending_from: None,
            lost_skipped: 0,
        }
    }

    fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Feed in-order bytes; `known(class, method)` tells whether the spec knows a method (used to
    /// judge candidate boundaries while lost).
    pub fn feed(
        &mut self,
        data: &[u8],
        packet: u64,
        ts_ns: i64,
        known: &dyn MethodInfo,
        out: &mut Vec<StreamItem>,
    ) {
        let len = data.len() as u64;
        self.accounting.stream_bytes += len;
        let mut data = data;
        match self.state {
            State::Dead => {
                self.accounting.skipped_bytes += len;
                return;
            }
            State::Skip => {
                if len <= self.skip_left {
                    self.skip_left -= len;
                    self.accounting.skipped_bytes += len;
                    self.base += len;
                    return;
                }
                self.accounting.skipped_bytes += self.skip_left;
                self.base += self.skip_left;
                data = data.get(self.skip_left as usize..).unwrap_or_default();
                self.skip_left = 0;
                self.state = State::Sync;
            }
            State::Sync | State::Start | State::AfterGap | State::Lost => {}
        }
        let newest = data.len();
        self.compact();
        self.buf.extend_from_slice(data);
        let n = self.buffered();
        if self.need != 0 {
            if n < self.need {
                self.chunks.push_back(Chunk {
                    end: self.base + n as u64,
                    packet,
                    ts_ns,
                });
                return;
            }
            self.need = 0;
        }
        self.end_of_older = n - newest;
        self.chunks.push_back(Chunk {
            end: self.base + n as u64,
            packet,
            ts_ns,
        });
        let consumed = self.run_buffered(known, out);
        self.consume(consumed);
        while self.chunks.len() > 1 && self.chunks.front().is_some_and(|c| c.end <= self.base) {
            self.chunks.pop_front(); // fully consumed: no frame can end in it any more
        }
        if self.state == State::Sync && !self.expect_header {
            if let Some((_, _, size)) = header_at(self.buf.get(self.pos..).unwrap_or_default(), 0) {
                let want = 8 + size as usize;
                if self.buffered() < want && u64::from(size) <= u64::from(self.limits.max_frame) {
                    self.need = want;
                }
            }
        }
    }

    /// Drop the consumed prefix once it is at least half the buffer (amortized O(1) per byte).
    fn compact(&mut self) {
        if self.pos > 0 && self.pos >= self.buf.len() / 2 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
    }

    fn consume(&mut self, n: usize) {
        self.pos += n;
        self.base += n as u64;
        if self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        }
    }

    /// Run the state machine over the buffered bytes; returns how many it consumed.
    fn run_buffered(&mut self, known: &dyn MethodInfo, out: &mut Vec<StreamItem>) -> usize {
        let buf = std::mem::take(&mut self.buf);
        let consumed = self.run(&buf[self.pos..], 0, known, out);
        self.buf = buf;
        consumed
    }

    /// Bytes of this direction that never arrived.
    pub fn gap(&mut self, size: u64, packet: u64, ts_ns: i64, out: &mut Vec<StreamItem>) {
        self.accounting.gap_bytes += size;
        self.need = 0;
        let mut lost = None;
        let buf = self.buf.get(self.pos..).unwrap_or_default();
        if self.state == State::Sync && buf.len() >= HEADER_SIZE && size > 0 {
            match decode_frame(buf, 0, self.limits.max_frame.into()) {
                Decoded::NeedMore(needed) => {
                    lost = Some(describe(buf));
                    let missing = needed - buf.len() as u64;
                    if size <= missing {
                        // the lost frame's declared size says where the next frame starts
                        self.skip_left = missing - size;
                        self.state = if self.skip_left > 0 {
                            State::Skip
                        } else {
                            State::Sync
                        };
                    } else {
                        self.lose("gap");
                    }
                }
                _ => self.lose("gap"),
            }
        } else if self.state == State::Skip && size > 0 {
            if size > self.skip_left {
                self.lose("gap");
            } else {
                self.skip_left -= size;
                if self.skip_left == 0 {
                    self.state = State::Sync;
                }
            }
        } else if self.state == State::Sync && buf.is_empty() && size > 0 {
            self.state = State::AfterGap;
        } else if self.state != State::Dead {
            self.lose("gap");
        }
        let held = self.buffered() as u64;
        self.accounting.skipped_bytes += held;
        self.base += held + size;
        self.buf.clear();
        self.pos = 0;
        self.chunks.clear();
        out.push(StreamItem::Gap {
            size,
            lost_frame: lost,
            packet,
            ts_ns,
        });
    }

    /// End of the stream: a candidate seen to the very end is accepted; the rest is pending.
    pub fn finish(&mut self, known: &dyn MethodInfo, out: &mut Vec<StreamItem>) {
        self.need = 0;
        let buf = std::mem::take(&mut self.buf);
        let mut rest = buf.get(self.pos..).unwrap_or_default();
        if matches!(self.state, State::Start | State::AfterGap) && !rest.is_empty() {
            // seen to the very end: a start that frames to the end is the start
            if self.try_start(rest, 0, true, known) == Some(true) {
                self.end_of_older = rest.len();
                let off = self.run(rest, 0, known, out);
                rest = rest.get(off..).unwrap_or_default();
            } else {
                self.lose_start();
            }
        }
        if self.state == State::Lost && !rest.is_empty() {
            if let Some(start) = self.find_boundary(rest, 0, true, known) {
                self.accounting.skipped_bytes += start as u64;
                self.base += start as u64;
                let (packet, ts_ns) = self.where_(self.base);
                out.push(StreamItem::Resync {
                    skipped: self.lost_skipped + start as u64,
                    reason: self.lost_reason.clone(),
                    packet,
                    ts_ns,
                });
                self.state = State::Sync;
                rest = rest.get(start..).unwrap_or_default();
                self.end_of_older = rest.len(); // attribute every frame through where_
                let off = self.run(rest, 0, known, out);
                rest = rest.get(off..).unwrap_or_default();
            }
        }
        self.accounting.pending_bytes += rest.len() as u64;
        self.pos = 0;
    }

    fn run(
        &mut self,
        buf: &[u8],
        mut off: usize,
        known: &dyn MethodInfo,
        out: &mut Vec<StreamItem>,
    ) -> usize {
        loop {
            match self.state {
                State::Sync => {
                    if self.expect_header {
                        match protocol_header(buf, off) {
                            ProtoHeader::NeedMore => return off,
                            ProtoHeader::No => self.expect_header = false,
                            ProtoHeader::Version(v) => {
                                self.expect_header = false;
                                let mut raw = [0u8; 8];
                                raw.copy_from_slice(buf.get(off..off + 8).unwrap_or(&[0; 8]));
                                let (packet, ts_ns) = self.where_(self.base + off as u64 + 8);
                                let dead = !is_amqp_0_9_x(&v);
                                self.version = Some(v.clone());
                                out.push(StreamItem::Header {
                                    version: v,
                                    raw,
                                    packet,
                                    ts_ns,
                                });
                                self.accounting.header_bytes += 8;
                                off += 8;
                                if dead {
                                    // 0-10 and 1.0 frame differently: not ours to dissect
                                    self.state = State::Dead;
                                    self.accounting.skipped_bytes += (buf.len() - off) as u64;
                                    return buf.len();
                                }
                                continue;
                            }
                        }
                    }
                    off = self.frames(buf, off, out);
                    if self.state == State::Sync {
                        return off;
                    }
                }
                State::Start | State::AfterGap => match self.try_start(buf, off, false, known) {
                    None => return off, // not enough bytes to tell yet: keep them all
                    Some(true) => {}
                    Some(false) => self.lose_start(),
                },
                State::Lost => {
                    let Some(start) = self.find_boundary(buf, off, false, known) else {
                        // keep a tail that may hold the start of a pending candidate
                        let keep = self
                            .pending_from
                            .unwrap_or_else(|| off.max(buf.len().saturating_sub(7)));
                        self.accounting.skipped_bytes += (keep - off) as u64;
                        self.lost_skipped += (keep - off) as u64;
                        return keep;
                    };
                    self.accounting.skipped_bytes += (start - off) as u64;
                    let (packet, ts_ns) = self.where_(self.base + start as u64);
                    out.push(StreamItem::Resync {
                        skipped: self.lost_skipped + (start - off) as u64,
                        reason: self.lost_reason.clone(),
                        packet,
                        ts_ns,
                    });
                    self.state = State::Sync;
                    self.synced_once = true;
                    off = start;
                }
                State::Dead | State::Skip => {
                    self.accounting.skipped_bytes += (buf.len() - off) as u64;
                    return buf.len();
                }
            }
        }
    }

    /// The in-sync fast path: frames back to back. Returns where the next frame starts; leaves
    /// the stream lost (after a malformed item) when the bytes at that offset do not frame.
    fn frames(&mut self, buf: &[u8], mut off: usize, out: &mut Vec<StreamItem>) -> usize {
        let limit = u64::from(self.limits.max_frame);
        let start = off;
        let mut frames = 0;
        // frames completed by the newest chunk end in it; earlier ones only after a resync
        let (packet, ts_ns) = self.chunks.back().map_or((0, 0), |c| (c.packet, c.ts_ns));
        while buf.len() - off >= 8 {
            let Some((ftype, channel, size)) = header_at(buf, off) else {
                break;
            };
            let end = off as u64 + 7 + u64::from(size);
            let end_byte = usize::try_from(end).ok().and_then(|e| buf.get(e).copied());
            if u64::from(size) > limit || end_byte != Some(FRAME_END) {
                let reason = if u64::from(size) > limit {
                    Some(format!(
                        "declared frame size {size} exceeds the limit of {limit}"
                    ))
                } else {
                    end_byte.map(|b| format!("frame-end octet is 0x{b:02x}, not 0xce"))
                };
                if let Some(reason) = reason {
                    let at = self.base + off as u64;
                    let (p, t) = self.where_(at + 1);
                    out.push(StreamItem::Malformed {
                        reason: reason.clone(),
                        offset: at,
                        packet: p,
                        ts_ns: t,
                    });
                    self.lose(&reason);
                }
                break;
            }
            let end = end as usize; // it indexes buf
            let (p, t) = if end + 1 > self.end_of_older {
                (packet, ts_ns)
            } else {
                self.where_(self.base + end as u64 + 1)
            };
            out.push(StreamItem::Frame {
                ftype,
                channel,
                payload: buf.get(off + 7..end).unwrap_or_default().to_vec(),
                packet: p,
                ts_ns: t,
                resync: self.resynced,
            });
            frames += 1;
            off = end + 1;
        }
        self.accounting.frame_bytes += (off - start) as u64;
        self.accounting.frames += frames;
        off
    }

    /// Some(true): the bytes at `off` start the stream (the state is then Sync, nothing skipped,
    /// nothing marked resynced); Some(false): they do not; None: cannot tell yet.
    fn try_start(
        &mut self,
        buf: &[u8],
        off: usize,
        final_: bool,
        known: &dyn MethodInfo,
    ) -> Option<bool> {
        let confirmed = match self.state {
            State::Start => match protocol_header(buf, off) {
                ProtoHeader::NeedMore if !final_ => return None,
                ProtoHeader::Version(_) => {
                    self.expect_header = true; // the Sync branch takes it as at a stream start
                    true
                }
                _ => {
                    opens_stream(buf, off, known)
                        && self.chain(buf, off, final_, self.limits.max_frame, known)?
                }
            },
            State::AfterGap => self.chain(buf, off, final_, self.limits.max_frame, known)?,
            _ => false,
        };
        if confirmed {
            if self.state == State::Start {
                self.resynced = false; // nothing before it was missed after all
                self.lost_reason.clear();
            }
            self.state = State::Sync;
            self.synced_once = true;
        }
        Some(confirmed)
    }

    /// The first bytes were not the stream's start, or the byte after a gap not a boundary:
    /// lost, as before the stream was tried there.
    fn lose_start(&mut self) {
        let reason = if self.state == State::Start {
            "stream start not captured"
        } else {
            "gap"
        };
        self.lose(reason);
    }

    fn lose(&mut self, reason: &str) {
        self.lost_skipped = 0;
        self.state = State::Lost;
        self.resynced = true;
        reason.clone_into(&mut self.lost_reason);
    }

    /// The first offset from which `confirm_frames` valid frames follow (or, when `final`,
    /// valid frames up to the very end). Sets `pending_from` to the first candidate that needs
    /// more data before it can be judged, so the caller keeps those bytes.
    fn find_boundary(
        &mut self,
        buf: &[u8],
        off: usize,
        final_: bool,
        known: &dyn MethodInfo,
    ) -> Option<usize> {
        self.pending_from = None;
        let mut i = off;
        while i + 7 < buf.len() {
            if matches!(
                buf[i],
                FRAME_METHOD | FRAME_HEADER | FRAME_BODY | FRAME_HEARTBEAT
            ) {
                let max = self.limits.max_frame.min(self.limits.max_candidate);
                match self.chain(buf, i, final_, max, known) {
                    Some(true) => return Some(i),
                    None => {
                        self.pending_from = Some(i);
                        return None;
                    }
                    Some(false) => {}
                }
            }
            i += 1;
        }
        None
    }

    /// Some(true): confirmed; Some(false): not a boundary; None: cannot tell yet.
    fn chain(
        &self,
        buf: &[u8],
        mut i: usize,
        final_: bool,
        max: u32,
        known: &dyn MethodInfo,
    ) -> Option<bool> {
        let mut count = 0;
        while count < self.limits.confirm_frames {
            match decode_frame(buf, i, max.into()) {
                Decoded::Frame {
                    ftype,
                    channel,
                    payload,
                    end,
                } => {
                    let payload = buf.get(payload).unwrap_or_default();
                    if !plausible(ftype, channel, payload, known) {
                        return Some(false);
                    }
                    count += 1;
                    i = end;
                    if i == buf.len() && final_ {
                        return Some(true);
                    }
                }
                Decoded::NeedMore(_) => return if final_ { Some(false) } else { None },
                Decoded::Malformed(_) => return Some(false),
            }
        }
        Some(true)
    }

    /// Packet number and timestamp of the chunk holding stream offset `end_offset - 1`.
    fn where_(&mut self, end_offset: u64) -> (u64, i64) {
        while self.chunks.len() > 1 && self.chunks.front().is_some_and(|c| c.end < end_offset) {
            self.chunks.pop_front();
        }
        self.chunks.front().map_or((0, 0), |c| (c.packet, c.ts_ns))
    }
}

/// A method frame at `off` whose method begins the server's side of a connection.
fn opens_stream(buf: &[u8], off: usize, known: &dyn MethodInfo) -> bool {
    match (header_at(buf, off), buf.get(off + 7..off + 11)) {
        (Some((FRAME_METHOD, 0, _)), Some(&[a, b, c, d])) => {
            known.opens_stream(u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]))
        }
        _ => false,
    }
}

fn plausible(ftype: u8, channel: u16, p: &[u8], known: &dyn MethodInfo) -> bool {
    match ftype {
        FRAME_METHOD => match p {
            [a, b, c, d, ..] => {
                known.known(u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))
            }
            _ => false,
        },
        FRAME_HEADER => p.len() >= 14 && p[2] == 0 && p[3] == 0 && channel != 0,
        FRAME_BODY => channel != 0,
        FRAME_HEARTBEAT => channel == 0 && p.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(ftype: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![ftype];
        v.extend(channel.to_be_bytes());
        v.extend((payload.len() as u32).to_be_bytes());
        v.extend(payload);
        v.push(FRAME_END);
        v
    }

    /// basic.publish and connection.start, the latter opening the server's stream.
    struct Methods;

    impl MethodInfo for Methods {
        fn known(&self, c: u16, m: u16) -> bool {
            matches!((c, m), (60, 40) | (10, 10))
        }

        fn opens_stream(&self, c: u16, m: u16) -> bool {
            (c, m) == (10, 10)
        }
    }

    #[allow(non_upper_case_globals)]
    const known: Methods = Methods;

    fn feed(s: &mut FrameStream, data: &[u8], packet: u64) -> Vec<StreamItem> {
        let mut out = Vec::new();
        s.feed(data, packet, packet as i64 * 10, &known, &mut out);
        out
    }

    fn kinds(items: &[StreamItem]) -> Vec<&'static str> {
        items
            .iter()
            .map(|i| match i {
                StreamItem::Header { .. } => "header",
                StreamItem::Frame { .. } => "frame",
                StreamItem::Gap { .. } => "gap",
                StreamItem::Resync { .. } => "resync",
                StreamItem::Malformed { .. } => "malformed",
            })
            .collect()
    }

    #[test]
    fn protocol_header_detection() {
        let mut s = FrameStream::new(true, &Limits::default());
        assert!(feed(&mut s, b"AMQ", 1).is_empty());
        let out = feed(&mut s, b"P\x00\x00\x09\x01", 2);
        assert!(
            matches!(&out[..], [StreamItem::Header { version, packet: 2, .. }] if version == "0-9-1")
        );
        let mut s = FrameStream::new(true, &Limits::default());
        let out = feed(&mut s, b"AMQP\x01\x01\x00\x0a rest", 1);
        assert_eq!(kinds(&out), ["header"]);
        assert_eq!(s.version.as_deref(), Some("0-10"));
        assert_eq!(s.accounting.skipped_bytes, 5);
        assert_eq!(
            protocol_version(b"AMQP\x09\x08\x07\x06"),
            "unknown (9.8.7.6)"
        );
    }

    #[test]
    fn frames_split_over_chunks() {
        let mut s = FrameStream::new(true, &Limits::default());
        let mut data = b"AMQP\x00\x00\x09\x01".to_vec();
        data.extend(frame(3, 1, &[7; 5000]));
        data.extend(frame(8, 0, &[]));
        let mut out = Vec::new();
        for (i, c) in data.chunks(100).enumerate() {
            out.extend(feed(&mut s, c, i as u64 + 1));
        }
        assert_eq!(kinds(&out), ["header", "frame", "frame"]);
        assert!(
            matches!(&out[1], StreamItem::Frame { payload, packet: 51, .. } if payload.len() == 5000)
        );
        let a = s.accounting;
        assert_eq!(a.frame_bytes + a.header_bytes, a.stream_bytes);
    }

    #[test]
    fn frame_end_error_and_resync_after_garbage() {
        let mut s = FrameStream::new(true, &Limits::default());
        let mut bad = frame(1, 1, &[0, 60, 0, 40]);
        let last = bad.len() - 1;
        bad[last] = 0x00;
        let mut data = bad.clone();
        data.extend(b"garbage");
        for _ in 0..3 {
            data.extend(frame(1, 1, &[0, 60, 0, 40]));
        }
        let mut out = feed(&mut s, &data, 1);
        assert_eq!(kinds(&out), ["malformed"]);
        assert!(
            matches!(&out[0], StreamItem::Malformed { reason, offset: 0, .. } if reason == "frame-end octet is 0x00, not 0xce")
        );
        // the candidates are only confirmed at the end (a 0x01 inside the tail needs more bytes)
        s.finish(&known, &mut out);
        assert_eq!(
            kinds(&out),
            ["malformed", "resync", "frame", "frame", "frame"]
        );
        assert!(
            // every byte passed over since the loss: the bad frame (12) and the garbage (7)
            matches!(&out[1], StreamItem::Resync { skipped, reason, .. } if *skipped == 19 && reason == "frame-end octet is 0x00, not 0xce")
        );
        assert!(matches!(&out[2], StreamItem::Frame { resync: true, .. }));
    }

    #[test]
    fn oversized_frame() {
        let limits = Limits {
            max_frame: 100,
            ..Limits::default()
        };
        let mut s = FrameStream::new(true, &limits);
        let out = feed(&mut s, &frame(3, 1, &[0; 101]), 1);
        assert!(
            matches!(&out[0], StreamItem::Malformed { reason, .. } if reason == "declared frame size 101 exceeds the limit of 100")
        );
        let mut s = FrameStream::new(true, &limits);
        let out = feed(&mut s, b"\x03\x00\x01AMQP\x00\x00\x09\x01", 1);
        assert!(matches!(&out[..], [StreamItem::Malformed { offset: 3, .. }]) || !out.is_empty());
        assert_eq!(
            decode_frame(b"AMQP\x00\x00\x09\x01", 0, 100),
            Decoded::Malformed("protocol header (AMQP 0-9-1) where a frame was expected".into())
        );
    }

    #[test]
    fn gap_inside_a_frame_skips_it() {
        let mut s = FrameStream::new(true, &Limits::default());
        let f = frame(3, 1, &[1; 20]);
        feed(&mut s, &f[..10], 1);
        let mut out = Vec::new();
        s.gap(10, 2, 20, &mut out);
        assert!(
            matches!(&out[0], StreamItem::Gap { lost_frame: Some(l), .. } if l == "body frame on channel 1, 20 bytes")
        );
        let mut rest = f[20..].to_vec();
        rest.extend(frame(8, 0, &[]));
        let out = feed(&mut s, &rest, 3);
        assert_eq!(kinds(&out), ["frame"]);
        s.finish(&known, &mut out.clone());
        let a = s.accounting;
        assert_eq!(
            a.frame_bytes + a.skipped_bytes + a.pending_bytes,
            a.stream_bytes
        );
    }

    #[test]
    fn mid_stream_start_resyncs_at_the_end() {
        let mut s = FrameStream::new(false, &Limits::default());
        let mut data = vec![0xaa; 5];
        data.extend(frame(3, 1, b"x"));
        let out = feed(&mut s, &data, 1);
        assert!(out.is_empty());
        let mut out = Vec::new();
        s.finish(&known, &mut out);
        assert_eq!(kinds(&out), ["resync", "frame"]);
        assert!(
            matches!(&out[0], StreamItem::Resync { skipped: 5, reason, .. } if reason == "stream start not captured")
        );
    }

    fn frames_of(items: &[StreamItem]) -> Vec<(u8, bool)> {
        items
            .iter()
            .filter_map(|i| match i {
                StreamItem::Frame { ftype, resync, .. } => Some((*ftype, *resync)),
                _ => None,
            })
            .collect()
    }

    fn publish() -> Vec<u8> {
        frame(FRAME_METHOD, 1, &[0, 60, 0, 40, 0, 0, 0, 0, 0])
    }

    #[test]
    fn a_protocol_header_first_is_the_stream_start_without_a_syn() {
        let mut s = FrameStream::new(false, &Limits::default());
        assert!(
            feed(&mut s, b"AMQP\x00\x00", 1).is_empty(),
            "waits for the whole header"
        );
        let mut data = b"\x09\x01".to_vec();
        data.extend(publish());
        let out = feed(&mut s, &data, 2);
        assert_eq!(kinds(&out), ["header", "frame"]);
        assert_eq!(frames_of(&out), [(FRAME_METHOD, false)]);
        assert_eq!(s.version.as_deref(), Some("0-9-1"));
        assert_eq!(s.accounting.skipped_bytes, 0);
    }

    #[test]
    fn connection_start_first_is_the_servers_stream_start() {
        let start = frame(FRAME_METHOD, 0, &[0, 10, 0, 10, 0, 9]);
        let heartbeat = frame(FRAME_HEARTBEAT, 0, &[]);
        let mut s = FrameStream::new(false, &Limits::default());
        assert!(
            feed(&mut s, &start, 1).is_empty(),
            "confirmed by the frames that follow"
        );
        let out = feed(&mut s, &[heartbeat.clone(), heartbeat].concat(), 2);
        assert_eq!(kinds(&out), ["frame", "frame", "frame"]);
        assert!(frames_of(&out).iter().all(|(_, resync)| !resync));
        // the same frame at the very end of a capture is taken as it is
        let mut s = FrameStream::new(false, &Limits::default());
        assert!(feed(&mut s, &start, 1).is_empty());
        let mut out = Vec::new();
        s.finish(&known, &mut out);
        assert_eq!(kinds(&out), ["frame"]);
    }

    #[test]
    fn a_start_mid_conversation_is_still_a_resync() {
        let mut s = FrameStream::new(false, &Limits::default());
        let out = feed(&mut s, &[publish(), publish(), publish()].concat(), 1);
        assert_eq!(kinds(&out), ["resync", "frame", "frame", "frame"]);
        assert!(
            matches!(&out[0], StreamItem::Resync { skipped: 0, reason, .. } if reason == "stream start not captured")
        );
        assert!(frames_of(&out).iter().all(|(_, resync)| *resync));
    }

    #[test]
    fn whole_packets_lost_keep_the_frames_after_the_gap() {
        let limits = Limits {
            max_candidate: 1000,
            ..Limits::default()
        };
        let mut s = FrameStream::new(true, &limits);
        feed(&mut s, &publish(), 1);
        let mut out = Vec::new();
        s.gap(100, 2, 20, &mut out);
        assert!(matches!(
            &out[..],
            [StreamItem::Gap {
                lost_frame: None,
                ..
            }]
        ));
        // a body larger than a scan would wait for, right after the gap
        let body = frame(FRAME_BODY, 1, &[7; 5000]);
        let out = feed(&mut s, &[body, publish(), publish()].concat(), 3);
        assert_eq!(kinds(&out), ["frame", "frame", "frame"]);
        assert_eq!(
            frames_of(&out),
            [
                (FRAME_BODY, false),
                (FRAME_METHOD, false),
                (FRAME_METHOD, false)
            ]
        );
        assert_eq!(s.accounting.skipped_bytes, 0);
    }

    #[test]
    fn a_gap_that_was_not_at_a_boundary_resyncs_as_before() {
        let mut s = FrameStream::new(true, &Limits::default());
        feed(&mut s, &publish(), 1);
        let mut out = Vec::new();
        s.gap(100, 2, 20, &mut out);
        let mut data = vec![0xAA; 5]; // the tail of a frame whose start was lost
        data.extend([publish(), publish(), publish()].concat());
        let out = feed(&mut s, &data, 3);
        assert_eq!(kinds(&out), ["resync", "frame", "frame", "frame"]);
        assert!(
            matches!(&out[0], StreamItem::Resync { skipped: 5, reason, .. } if reason == "gap")
        );
    }
}

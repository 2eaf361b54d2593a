//! TCP reassembly: segments to in-order bytes, gaps and flow events; a port of
//! `amqpscope/reassembly.py` that emits the same events, in the same order, with the same chunking.
//!
//! Per flow and direction ("half"):
//!
//! * sequence numbers are compared modulo 2^32 (signed 32-bit distance);
//! * the stream is anchored on the SYN (ISN + 1) when seen — or on the SYN-ACK's ack number for
//!   the client side — otherwise on the first segment carrying data (capture started mid-stream);
//! * retransmissions and overlaps are trimmed, only new bytes are emitted;
//! * segments beyond a hole are held (bounded) until the hole is filled;
//! * a hole is declared lost — a `Gap` and the held data after it delivered, each segment at the
//!   packet that carried it — when the peer ACKs past it (the receiver had those bytes, so the
//!   capture dropped them), when the per-direction or total buffer bound is exceeded, or when the
//!   flow ends. Never zero-filled;
//! * every `Data` carries what its packet acknowledged of the other direction, and `Close` the
//!   flow's first FIN and first RST.
//!
//! Flows: ids are assigned in order of first appearance. `Close` is emitted once per flow: "rst"
//! on a reset, "fin" once both directions have delivered their FIN in order, "evicted" for
//! LRU/idle eviction (and a new SYN reusing an open 4-tuple), "eof" from [`Reassembler::finish`].
//! After a close, stray packets on the 4-tuple are absorbed for `closed_linger_ns`; a new SYN
//! starts a new flow id.
//!
//! Structures: a hash map from (src, dst) to the flow's slot and side, flows in a slab threaded on
//! an intrusive LRU list (Python's OrderedDict), held segments in a BTreeMap by sequence number
//! with their insertion order kept (Python's dict order decides which overlapping held segment is
//! taken first).

use std::collections::{BTreeMap, HashMap};

use crate::limits::Limits;
use crate::types::{CloseHow, Endpoint, Segment, TcpEvent, TcpMark, ACK, FIN, RST, SYN};

const NIL: u32 = u32::MAX;

/// Signed distance seq - base in sequence space.
#[inline]
fn dist(seq: u32, base: u32) -> i64 {
    seq.wrapping_sub(base) as i32 as i64
}

#[inline]
fn add(seq: u32, n: i64) -> u32 {
    seq.wrapping_add(n as u32)
}

/// Counters of what reassembly met (Python's `TcpReassembler.stats`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Stat {
    Retransmitted,
    Overlapping,
    OutOfOrder,
    GapsBufferBound,
    GapsTotalBufferBound,
    GapsAcked,
    EvictedMaxFlows,
    EvictedIdle,
    ReplacedBySyn,
    PacketsAfterClose,
}

const STAT_NAMES: [&str; 10] = [
    "retransmitted segments",
    "overlapping segments",
    "out-of-order segments",
    "gaps (buffer bound)",
    "gaps (total buffer bound)",
    "gaps (acked, not captured)",
    "flows evicted (max flows)",
    "flows evicted (idle)",
    "flows replaced by new SYN",
    "packets after close",
];

/// One held out-of-order segment and its place in insertion order.
#[derive(Debug)]
struct Held {
    data: Vec<u8>,
    order: u64,
    /// The segment's own packet: after a gap its bytes are reported there (tshark does), not at
    /// the packet that declared the gap.
    from: From,
}

/// The packet a piece of data came in, its time and what it acknowledged.
#[derive(Debug, Clone, Copy)]
struct From {
    packet: u64,
    ts: i64,
    acked: Option<u32>,
}

/// Bytes of `peer`'s stream a segment with these flags and ack number acknowledges (modulo 2^32).
#[inline]
fn acked(flags: u8, ack: u32, peer: &Half) -> Option<u32> {
    if flags & ACK == 0 {
        return None;
    }
    peer.anchor.map(|a| ack.wrapping_sub(a))
}

/// One direction of a flow.
#[derive(Debug)]
struct Half {
    src: Endpoint,
    dst: Endpoint,
    /// Sequence number of this direction's SYN, if seen.
    isn: Option<u32>,
    /// None until anchored.
    next_seq: Option<u32>,
    /// The sequence number of the stream's first byte (where `next_seq` was anchored).
    anchor: Option<u32>,
    ooo: BTreeMap<u32, Held>,
    ooo_bytes: u64,
    /// Insertion counter for `ooo`.
    order: u64,
    /// Sequence number of the FIN, once seen.
    fin_seq: Option<u32>,
    /// FIN delivered in order.
    done: bool,
}

impl Half {
    fn new(src: Endpoint, dst: Endpoint) -> Half {
        Half {
            src,
            dst,
            isn: None,
            next_seq: None,
            anchor: None,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            order: 0,
            fin_seq: None,
            done: false,
        }
    }

    fn fin_pending(&self) -> Option<u32> {
        if self.done {
            None
        } else {
            self.fin_seq
        }
    }
}

#[derive(Debug)]
struct Flow {
    id: u64,
    /// [a, b]: a is client → server.
    h: [Half; 2],
    closed: bool,
    last_ts: i64,
    last_packet: u64,
    /// The first FIN and the first RST captured.
    fin: Option<TcpMark>,
    rst: Option<TcpMark>,
    /// LRU neighbours (slots); `prev` is older.
    prev: u32,
    next: u32,
}

/// What every half's operation needs besides the half: bounds, the global buffer, counters.
struct Ctx {
    max_per_dir: u64,
    max_segments: u64,
    max_total: u64,
    buffered_total: u64,
    stats: [u64; 10],
    /// Reused list of wholly old held segments to drop.
    old: Vec<u32>,
}

impl Ctx {
    #[inline]
    fn stat(&mut self, s: Stat) {
        self.stats[s as usize] += 1;
    }

    fn release(&mut self, h: &mut Half, n: usize) {
        h.ooo_bytes -= n as u64;
        self.buffered_total -= n as u64;
    }
}

/// Stateful reassembler: feed segments in capture order, then `finish`.
pub struct Reassembler {
    max_flows: u64,
    idle_timeout_ns: Option<i64>,
    closed_linger_ns: i64,
    ctx: Ctx,
    halves: HashMap<(Endpoint, Endpoint), (u32, u8)>,
    flows: Vec<Option<Flow>>,
    free: Vec<u32>,
    /// LRU list: head is the least recently used.
    head: u32,
    tail: u32,
    count: usize,
    next_id: u64,
    sweep_at: i128,
    sweep_every: i128,
}

impl Reassembler {
    pub fn new(limits: &Limits) -> Reassembler {
        let linger = limits.closed_linger_ns;
        let idle = match limits.idle_timeout_ns {
            Some(v) if v != 0 => v,
            _ => linger,
        };
        let mut every = (linger.min(idle) as i128).div_euclid(4);
        if every == 0 {
            every = 1;
        }
        Reassembler {
            max_flows: limits.max_flows,
            idle_timeout_ns: limits.idle_timeout_ns,
            closed_linger_ns: linger,
            ctx: Ctx {
                max_per_dir: limits.ooo_bytes_per_dir,
                max_segments: limits.ooo_segments_per_dir,
                max_total: limits.ooo_bytes_total,
                buffered_total: 0,
                stats: [0; 10],
                old: Vec::new(),
            },
            halves: HashMap::new(),
            flows: Vec::new(),
            free: Vec::new(),
            head: NIL,
            tail: NIL,
            count: 0,
            next_id: 0,
            sweep_at: 0,
            sweep_every: every,
        }
    }

    /// Out-of-order bytes currently held across all flows.
    pub fn buffered_bytes(&self) -> u64 {
        self.ctx.buffered_total
    }

    /// Flows currently tracked (including recently closed ones).
    pub fn flow_count(&self) -> usize {
        self.count
    }

    /// What reassembly met so far, by Python's counter names (non-zero ones).
    pub fn stats(&self) -> Vec<(&'static str, u64)> {
        STAT_NAMES
            .iter()
            .zip(self.ctx.stats.iter())
            .filter(|(_, &n)| n > 0)
            .map(|(&k, &n)| (k, n))
            .collect()
    }

    pub fn stat(&self, s: Stat) -> u64 {
        self.ctx.stats[s as usize]
    }

    pub fn feed(&mut self, seg: &Segment<'_>, out: &mut Vec<TcpEvent>) {
        let h = self.halves.get(&(seg.src, seg.dst)).copied();
        // Fast path: known open flow, anchored, in order, no flags needing care, nothing held.
        if let Some((slot, side)) = h {
            let flow = self.flows[slot as usize].as_mut().expect("mapped flow");
            let side = side as usize;
            let me = &flow.h[side];
            let peer = &flow.h[1 - side];
            if seg.flags & 0x07 == 0 // FIN | SYN | RST
                && me.next_seq == Some(seg.seq)
                && me.ooo.is_empty()
                && peer.ooo.is_empty()
                && peer.fin_seq.is_none() // a pending FIN may need an ACK-declared gap
                && !flow.closed
            {
                let ts = seg.ts_ns;
                flow.last_ts = ts;
                flow.last_packet = seg.index;
                let (id, src, dst) = (flow.id, me.src, me.dst);
                let acked = acked(seg.flags, seg.ack, peer);
                self.touch(slot);
                if ts as i128 >= self.sweep_at {
                    self.sweep(ts, out);
                }
                if !seg.payload.is_empty() {
                    if let Some(f) = self.flows[slot as usize].as_mut().filter(|f| f.id == id) {
                        f.h[side].next_seq = Some(add(seg.seq, seg.payload.len() as i64));
                    }
                    out.push(TcpEvent::Data {
                        flow: id,
                        src,
                        dst,
                        data: seg.payload.to_vec(),
                        packet: seg.index,
                        ts_ns: ts,
                        acked,
                    });
                }
                return;
            }
        }
        self.feed_slow(seg, h, out);
    }

    /// End of capture: flush held data (with gaps) and close every open flow with "eof".
    pub fn finish(&mut self, out: &mut Vec<TcpEvent>) {
        let mut order: Vec<(u64, u32)> = Vec::with_capacity(self.count);
        let mut s = self.head;
        while s != NIL {
            let f = self.flows[s as usize].as_ref().expect("listed flow");
            order.push((f.id, s));
            s = f.next;
        }
        order.sort_unstable();
        for (_, slot) in order {
            let f = self.flows[slot as usize].as_mut().expect("listed flow");
            if !f.closed {
                let (p, t) = (f.last_packet, f.last_ts);
                close(f, &mut self.ctx, CloseHow::Eof, p, t, out);
            }
        }
        self.halves.clear();
        self.flows.clear();
        self.free.clear();
        self.head = NIL;
        self.tail = NIL;
        self.count = 0;
    }

    // --- flow table --------------------------------------------------------------------------------

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = {
            let f = self.flows[slot as usize].as_ref().expect("linked flow");
            (f.prev, f.next)
        };
        if prev == NIL {
            self.head = next;
        } else {
            self.flows[prev as usize].as_mut().expect("linked").next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            self.flows[next as usize].as_mut().expect("linked").prev = prev;
        }
    }

    fn push_tail(&mut self, slot: u32) {
        let old = self.tail;
        {
            let f = self.flows[slot as usize].as_mut().expect("flow");
            f.prev = old;
            f.next = NIL;
        }
        if old == NIL {
            self.head = slot;
        } else {
            self.flows[old as usize].as_mut().expect("linked").next = slot;
        }
        self.tail = slot;
    }

    #[inline]
    fn touch(&mut self, slot: u32) {
        if self.tail != slot {
            self.unlink(slot);
            self.push_tail(slot);
        }
    }

    /// Take a flow out of the LRU and the 4-tuple map (Python's `_lru.pop` + `_forget`).
    fn remove(&mut self, slot: u32) -> Flow {
        self.unlink(slot);
        let flow = self.flows[slot as usize].take().expect("flow");
        for (side, half) in flow.h.iter().enumerate() {
            let key = (half.src, half.dst);
            if self.halves.get(&key) == Some(&(slot, side as u8)) {
                self.halves.remove(&key);
            }
        }
        self.free.push(slot);
        self.count -= 1;
        flow
    }

    fn new_flow(&mut self, seg: &Segment<'_>, out: &mut Vec<TcpEvent>) -> Option<(u32, u64)> {
        let flags = seg.flags;
        let syn_seen = flags & SYN != 0;
        let (client, server) = if flags & SYN != 0 && flags & ACK != 0 {
            (seg.dst, seg.src) // SYN-ACK: we missed the SYN; its sender is dst
        } else {
            (seg.src, seg.dst)
        };
        let id = self.next_id;
        self.next_id += 1;
        let flow = Flow {
            id,
            h: [Half::new(client, server), Half::new(server, client)],
            closed: false,
            last_ts: 0,
            last_packet: 0,
            fin: None,
            rst: None,
            prev: NIL,
            next: NIL,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                self.flows[s as usize] = Some(flow);
                s
            }
            None => {
                self.flows.push(Some(flow));
                (self.flows.len() - 1) as u32
            }
        };
        self.halves.insert((client, server), (slot, 0));
        self.halves.insert((server, client), (slot, 1));
        self.push_tail(slot);
        self.count += 1;
        out.push(TcpEvent::Open {
            flow: id,
            client,
            server,
            syn_seen,
            packet: seg.index,
            ts_ns: seg.ts_ns,
        });
        while self.count as u64 > self.max_flows {
            let victim = self.head;
            let mut f = self.remove(victim);
            if !f.closed {
                self.ctx.stat(Stat::EvictedMaxFlows);
                close(
                    &mut f,
                    &mut self.ctx,
                    CloseHow::Evicted,
                    seg.index,
                    seg.ts_ns,
                    out,
                );
            }
        }
        match &self.flows.get(slot as usize) {
            Some(Some(f)) if f.id == id => Some((slot, id)),
            _ => None,
        }
    }

    /// Drop closed flows after the linger time and evict idle ones (by capture time).
    fn sweep(&mut self, now: i64, out: &mut Vec<TcpEvent>) {
        let now = now as i128;
        self.sweep_at = now + self.sweep_every;
        let linger_cut = now - self.closed_linger_ns as i128;
        let idle_cut = self.idle_timeout_ns.map(|i| now - i as i128);
        let mut s = self.head;
        while s != NIL {
            let (next, last, closed) = {
                let f = self.flows[s as usize].as_ref().expect("listed flow");
                (f.next, f.last_ts as i128, f.closed)
            };
            if last >= linger_cut && idle_cut.is_none_or(|c| last >= c) {
                break; // LRU order: everything after was touched later (capture order)
            }
            if closed {
                if last < linger_cut {
                    self.remove(s);
                }
            } else if idle_cut.is_some_and(|c| last < c) {
                let mut f = self.remove(s);
                self.ctx.stat(Stat::EvictedIdle);
                let (p, t) = (f.last_packet, f.last_ts);
                close(&mut f, &mut self.ctx, CloseHow::Evicted, p, t, out);
            }
            s = next;
        }
    }

    // --- the general path ----------------------------------------------------------------------------

    fn feed_slow(&mut self, seg: &Segment<'_>, h: Option<(u32, u8)>, out: &mut Vec<TcpEvent>) {
        let flags = seg.flags;
        let ts = seg.ts_ns;
        let key = (seg.src, seg.dst);
        let mut h = h;
        if ts as i128 >= self.sweep_at {
            self.sweep(ts, out);
            if h.is_some() && self.halves.get(&key).copied() != h {
                h = None; // the sweep just forgot this flow
            }
        }
        if let Some((slot, side)) = h {
            if flags & SYN != 0 && flags & ACK == 0 {
                let flow = self.flows[slot as usize].as_ref().expect("mapped flow");
                let me = &flow.h[side as usize];
                let peer = &flow.h[1 - side as usize];
                if flow.closed {
                    self.remove(slot);
                    h = None;
                } else if me.isn != Some(seg.seq)
                    && (me.next_seq.is_some() || peer.next_seq.is_some())
                {
                    // A fresh SYN with another ISN on an open 4-tuple: the old connection's end
                    // was not captured; close it and start a new flow.
                    self.ctx.stat(Stat::ReplacedBySyn);
                    let mut f = self.remove(slot);
                    close(&mut f, &mut self.ctx, CloseHow::Evicted, seg.index, ts, out);
                    h = None;
                }
            }
        }
        let (slot, side) = match h {
            Some((slot, side)) => (slot, side as usize),
            None => {
                let Some((slot, _)) = self.new_flow(seg, out) else {
                    // evicted at once (max_flows 0): Python's closed-flow path
                    self.ctx.stat(Stat::PacketsAfterClose);
                    return;
                };
                let a = &self.flows[slot as usize].as_ref().expect("new flow").h[0];
                let side = if (a.src, a.dst) != (seg.src, seg.dst) {
                    1
                } else {
                    0
                };
                (slot, side)
            }
        };
        {
            let flow = self.flows[slot as usize].as_mut().expect("flow");
            if flow.closed {
                self.ctx.stat(Stat::PacketsAfterClose);
                return;
            }
            flow.last_ts = ts;
            flow.last_packet = seg.index;
        }
        self.touch(slot);
        let flow = self.flows[slot as usize].as_mut().expect("flow");

        let mark = TcpMark {
            by: seg.src,
            packet: seg.index,
        };
        if flags & FIN != 0 && flow.fin.is_none() {
            flow.fin = Some(mark);
        }
        if flags & RST != 0 {
            flow.rst = Some(mark);
            close(flow, &mut self.ctx, CloseHow::Rst, seg.index, ts, out);
            return;
        }

        let mut seq = seg.seq;
        let payload = seg.payload;
        {
            let (me, peer) = pair(&mut flow.h, side);
            if flags & SYN != 0 {
                if me.isn.is_none() {
                    me.isn = Some(seq);
                }
                if me.next_seq.is_none() {
                    me.next_seq = Some(seq.wrapping_add(1));
                }
                seq = seq.wrapping_add(1); // SYN occupies one sequence number; data (TFO) follows
                if flags & ACK != 0 && peer.next_seq.is_none() {
                    peer.next_seq = Some(seg.ack); // SYN-ACK acknowledges the client's ISN + 1
                }
            }
            if me.next_seq.is_none() && (!payload.is_empty() || flags & FIN != 0) {
                me.next_seq = Some(seq); // mid-stream start: anchor on the first data we see
            }
            if flags & FIN != 0 && me.fin_seq.is_none() {
                me.fin_seq = Some(add(seq, payload.len() as i64));
            }
            for half in [me, peer] {
                if half.anchor.is_none() {
                    half.anchor = half.next_seq;
                }
            }
        }

        if !payload.is_empty() && flow.h[side].next_seq.is_some() {
            let from = From {
                packet: seg.index,
                ts,
                acked: acked(flags, seg.ack, &flow.h[1 - side]),
            };
            self.add_data(slot, side, seq, payload, from, out);
        }

        let flow = self.flows[slot as usize].as_mut().expect("flow");
        let id = flow.id;
        // The peer ACKing beyond what we have seen of this direction's opposite half means the
        // capture lost those bytes: declare the hole once data is waiting behind it.
        if flags & ACK != 0 {
            let other = &mut flow.h[1 - side];
            if let Some(nxt) = other.next_seq {
                if !other.ooo.is_empty() || other.fin_pending().is_some() {
                    // _gap_on_ack
                    if dist(seg.ack, nxt) > 0 {
                        self.ctx.stat(Stat::GapsAcked);
                        skip_hole(other, id, &mut self.ctx, seg.index, ts, out, Some(seg.ack));
                    }
                }
            }
        }

        // _check_fin
        for s in [side, 1 - side] {
            let half = &mut flow.h[s];
            if let Some(fin) = half.fin_pending() {
                if half.next_seq == Some(fin) {
                    half.done = true;
                    half.next_seq = Some(fin.wrapping_add(1));
                }
            }
        }
        if flow.h[0].done && flow.h[1].done {
            close(flow, &mut self.ctx, CloseHow::Fin, seg.index, ts, out);
        }
    }

    fn add_data(
        &mut self,
        slot: u32,
        side: usize,
        seq: u32,
        payload: &[u8],
        from: From,
        out: &mut Vec<TcpEvent>,
    ) {
        let (packet, ts) = (from.packet, from.ts);
        let flow = self.flows[slot as usize].as_mut().expect("flow");
        let id = flow.id;
        let h = &mut flow.h[side];
        let ctx = &mut self.ctx;
        let Some(nxt) = h.next_seq else { return };
        let mut seq = seq;
        let mut payload = payload;
        let mut off = dist(seq, nxt);
        if off < 0 {
            if off + payload.len() as i64 <= 0 {
                ctx.stat(Stat::Retransmitted);
                return;
            }
            ctx.stat(Stat::Overlapping);
            payload = &payload[(-off) as usize..];
            seq = nxt;
            off = 0;
        }
        if off == 0 {
            h.next_seq = Some(add(seq, payload.len() as i64));
            let mut data = Vec::with_capacity(payload.len());
            data.extend_from_slice(payload);
            if !h.ooo.is_empty() {
                // held bytes this segment joins up are complete at its packet
                drain(h, ctx, &mut |piece, _| data.extend_from_slice(piece));
            }
            out.push(TcpEvent::Data {
                flow: id,
                src: h.src,
                dst: h.dst,
                data,
                packet,
                ts_ns: ts,
                acked: from.acked,
            });
            return;
        }
        // Beyond a hole: hold it. Keep the longer of two segments at the same seq.
        let n = payload.len() as u64;
        if let Some(held) = h.ooo.get_mut(&seq) {
            if held.data.len() >= payload.len() {
                ctx.stat(Stat::Retransmitted);
                return;
            }
            let old = held.data.len() as u64;
            held.data.clear();
            held.data.extend_from_slice(payload);
            held.from = from;
            h.ooo_bytes -= old;
            ctx.buffered_total -= old;
        } else {
            ctx.stat(Stat::OutOfOrder);
            let order = h.order;
            h.order += 1;
            h.ooo.insert(
                seq,
                Held {
                    data: payload.to_vec(),
                    order,
                    from,
                },
            );
        }
        h.ooo_bytes += n;
        ctx.buffered_total += n;
        while !h.ooo.is_empty()
            && (h.ooo_bytes > ctx.max_per_dir || h.ooo.len() as u64 > ctx.max_segments)
        {
            ctx.stat(Stat::GapsBufferBound);
            skip_hole(h, id, ctx, packet, ts, out, None);
        }
        if ctx.buffered_total > ctx.max_total {
            self.shed_total(slot, side, packet, ts, out);
        }
    }

    /// Over the global buffer budget: declare holes, current direction first, then others.
    fn shed_total(
        &mut self,
        slot: u32,
        side: usize,
        packet: u64,
        ts: i64,
        out: &mut Vec<TcpEvent>,
    ) {
        {
            let flow = self.flows[slot as usize].as_mut().expect("flow");
            let id = flow.id;
            let h = &mut flow.h[side];
            while !h.ooo.is_empty() && self.ctx.buffered_total > self.ctx.max_total {
                self.ctx.stat(Stat::GapsTotalBufferBound);
                skip_hole(h, id, &mut self.ctx, packet, ts, out, None);
            }
        }
        if self.ctx.buffered_total <= self.ctx.max_total {
            return;
        }
        let mut s = self.head;
        while s != NIL {
            let flow = self.flows[s as usize].as_mut().expect("listed flow");
            let id = flow.id;
            for half in flow.h.iter_mut() {
                while !half.ooo.is_empty() && self.ctx.buffered_total > self.ctx.max_total {
                    self.ctx.stat(Stat::GapsTotalBufferBound);
                    skip_hole(half, id, &mut self.ctx, packet, ts, out, None);
                }
            }
            if self.ctx.buffered_total <= self.ctx.max_total {
                return;
            }
            s = flow.next;
        }
    }
}

/// (this side, the other side) of a flow's halves.
fn pair(h: &mut [Half; 2], side: usize) -> (&mut Half, &mut Half) {
    let [a, b] = h;
    if side == 0 {
        (a, b)
    } else {
        (b, a)
    }
}

/// Hand held segments that are now contiguous with `h.next_seq` to `sink`, in stream order,
/// each with the packet it came in.
///
/// An exact fit at the edge is taken first; otherwise, of the held segments at or before the
/// edge, the one held first (Python's dict order). Those wholly before the edge give nothing and
/// are dropped whatever their order.
fn drain(h: &mut Half, ctx: &mut Ctx, sink: &mut dyn FnMut(&[u8], From)) {
    while !h.ooo.is_empty() {
        let Some(nxt) = h.next_seq else { return };
        if let Some(held) = h.ooo.remove(&nxt) {
            ctx.release(h, held.data.len());
            sink(&held.data, held.from);
            h.next_seq = Some(add(nxt, held.data.len() as i64));
            continue;
        }
        // Not an exact fit: held segments overlapping the edge, i.e. dist(s, nxt) <= 0, are the
        // keys in the cyclic range [nxt - 2^31, nxt].
        let lo = nxt.wrapping_add(0x8000_0000);
        let mut best: Option<(u64, u32)> = None;
        ctx.old.clear();
        {
            let mut visit = |s: u32, held: &Held| {
                let trim = nxt.wrapping_sub(s) as usize;
                if trim >= held.data.len() {
                    ctx.old.push(s);
                } else if best.is_none_or(|(o, _)| held.order < o) {
                    best = Some((held.order, s));
                }
            };
            if lo <= nxt {
                for (&s, held) in h.ooo.range(lo..=nxt) {
                    visit(s, held);
                }
            } else {
                for (&s, held) in h.ooo.range(lo..).chain(h.ooo.range(..=nxt)) {
                    visit(s, held);
                }
            }
        }
        // Wholly old segments held before the chosen one are what Python pops on the way to it;
        // the later ones it pops once the edge has moved past them. Either way: gone, no bytes.
        let old = std::mem::take(&mut ctx.old);
        for s in &old {
            if let Some(held) = h.ooo.remove(s) {
                ctx.release(h, held.data.len());
            }
        }
        ctx.old = old;
        let Some((_, s)) = best else { return };
        let held = h.ooo.remove(&s).expect("candidate");
        ctx.release(h, held.data.len());
        let trim = nxt.wrapping_sub(s) as usize;
        let part = &held.data[trim..];
        sink(part, held.from);
        h.next_seq = Some(add(nxt, part.len() as i64));
    }
}

/// Declare the hole before the earliest held segment (or a pending FIN) lost.
///
/// With `upto` the hole ends there at the latest (bytes the peer acknowledged).
/// Returns false when there was nothing to skip.
#[allow(clippy::too_many_arguments)]
fn skip_hole(
    h: &mut Half,
    id: u64,
    ctx: &mut Ctx,
    packet: u64,
    ts: i64,
    out: &mut Vec<TcpEvent>,
    upto: Option<u32>,
) -> bool {
    let Some(nxt) = h.next_seq else { return false };
    // The smallest signed distance among held keys: the first key at or after nxt - 2^31,
    // cyclically.
    let lo = nxt.wrapping_add(0x8000_0000);
    let first = h
        .ooo
        .range(lo..)
        .next()
        .or_else(|| h.ooo.iter().next())
        .map(|(&s, _)| dist(s, nxt));
    let fin = h.fin_pending().map(|f| dist(f, nxt));
    let mut size = match (first, fin) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => return false,
    };
    if let Some(u) = upto {
        size = size.min(dist(u, nxt));
    }
    if size > 0 {
        out.push(TcpEvent::Gap {
            flow: id,
            src: h.src,
            dst: h.dst,
            size: size as u64,
            packet,
            ts_ns: ts,
        });
        h.next_seq = Some(add(nxt, size));
    }
    // The bytes after the hole are reported at the packets that carried them: no later packet
    // was needed to make them whole, and tshark places their frames there too.
    let (src, dst) = (h.src, h.dst);
    let mut any = false;
    let mut sink = |piece: &[u8], from: From| {
        if any {
            // pieces of one packet (a held segment the edge cut into) stay one chunk
            if let Some(TcpEvent::Data { data, packet, .. }) = out.last_mut() {
                if *packet == from.packet {
                    data.extend_from_slice(piece);
                    return;
                }
            }
        }
        any = true;
        out.push(TcpEvent::Data {
            flow: id,
            src,
            dst,
            data: piece.to_vec(),
            packet: from.packet,
            ts_ns: from.ts,
            acked: from.acked,
        });
    };
    drain(h, ctx, &mut sink);
    if let Some(fin) = h.fin_pending() {
        if h.next_seq == Some(fin) {
            h.done = true;
            h.next_seq = Some(fin.wrapping_add(1));
        }
    }
    size > 0 || any
}

fn flush(h: &mut Half, id: u64, ctx: &mut Ctx, packet: u64, ts: i64, out: &mut Vec<TcpEvent>) {
    if h.next_seq.is_none() {
        return;
    }
    while skip_hole(h, id, ctx, packet, ts, out, None) {}
}

fn close(
    flow: &mut Flow,
    ctx: &mut Ctx,
    how: CloseHow,
    packet: u64,
    ts: i64,
    out: &mut Vec<TcpEvent>,
) {
    let id = flow.id;
    for half in flow.h.iter_mut() {
        flush(half, id, ctx, packet, ts, out);
    }
    flow.closed = true;
    out.push(TcpEvent::Close {
        flow: id,
        how,
        packet,
        ts_ns: ts,
        fin: flow.fin,
        rst: flow.rst,
    });
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::*;
    use crate::types::PSH;

    fn ep(port: u16) -> Endpoint {
        Endpoint {
            addr: IpAddr::V4(Ipv4Addr::LOCALHOST),
            port,
        }
    }

    const C: u16 = 40000;
    const S: u16 = 5672;

    /// Feeds segments with packet numbers 1, 2, … and ts = packet * 1000.
    struct Run {
        r: Reassembler,
        n: u64,
        out: Vec<TcpEvent>,
    }

    impl Run {
        fn new(limits: Limits) -> Run {
            Run {
                r: Reassembler::new(&limits),
                n: 0,
                out: Vec::new(),
            }
        }

        fn seg(&mut self, from_client: bool, seq: u32, ack: u32, flags: u8, payload: &[u8]) {
            self.n += 1;
            let (src, dst) = if from_client {
                (ep(C), ep(S))
            } else {
                (ep(S), ep(C))
            };
            let s = Segment {
                index: self.n,
                ts_ns: self.n as i64 * 1000,
                src,
                dst,
                seq,
                ack,
                flags,
                payload,
            };
            self.r.feed(&s, &mut self.out);
        }

        fn finish(&mut self) {
            self.r.finish(&mut self.out);
        }

        /// The events as short strings: "open 0 c", "data 0 c>s 'abc' @3", "gap 0 s>c 5 @4",
        /// "close 0 fin @9".
        fn text(&self) -> Vec<String> {
            self.out
                .iter()
                .map(|e| match e {
                    TcpEvent::Open {
                        flow,
                        client,
                        syn_seen,
                        ..
                    } => format!(
                        "open {flow} {}{}",
                        if client.port == C { "c" } else { "s" },
                        if *syn_seen { " syn" } else { "" }
                    ),
                    TcpEvent::Data {
                        flow,
                        src,
                        data,
                        packet,
                        ..
                    } => format!(
                        "data {flow} {} {:?} @{packet}",
                        if src.port == C { "c>s" } else { "s>c" },
                        String::from_utf8_lossy(data)
                    ),
                    TcpEvent::Gap {
                        flow,
                        src,
                        size,
                        packet,
                        ..
                    } => format!(
                        "gap {flow} {} {size} @{packet}",
                        if src.port == C { "c>s" } else { "s>c" }
                    ),
                    TcpEvent::Close {
                        flow, how, packet, ..
                    } => format!("close {flow} {} @{packet}", how.as_str()),
                })
                .collect()
        }
    }

    fn handshake(run: &mut Run, cisn: u32, sisn: u32) {
        run.seg(true, cisn, 0, SYN, b"");
        run.seg(false, sisn, cisn.wrapping_add(1), SYN | ACK, b"");
        run.seg(true, cisn.wrapping_add(1), sisn.wrapping_add(1), ACK, b"");
    }

    #[test]
    fn sequence_numbers_wrap() {
        let mut run = Run::new(Limits::default());
        let cisn = u32::MAX - 3; // data starts at 2^32 - 2
        handshake(&mut run, cisn, 77);
        run.seg(true, u32::MAX - 2, 78, ACK | PSH, b"abc"); // 2^32-3 ..= 2^32-1
        run.seg(true, 2, 78, ACK, b"defg"); // past zero, beyond a hole: held
        run.seg(true, 0, 78, ACK, b"xy"); // 0..2 fills it: "xy" + held "defg"
        run.seg(true, 6, 78, ACK | FIN, b"");
        run.seg(false, 78, 7, ACK | FIN, b"");
        assert_eq!(
            run.text(),
            [
                "open 0 c syn",
                "data 0 c>s \"abc\" @4",
                "data 0 c>s \"xydefg\" @6",
                "close 0 fin @8"
            ]
        );
    }

    #[test]
    fn retransmissions_and_overlaps_are_trimmed() {
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 1000, 5000);
        run.seg(true, 1001, 5001, ACK, b"hello");
        run.seg(true, 1001, 5001, ACK, b"hello"); // retransmission: nothing
        run.seg(true, 1004, 5001, ACK, b"lo world"); // overlap: only " world"
        run.seg(true, 990, 5001, ACK, b"old"); // wholly old
        assert_eq!(
            run.text()[1..],
            ["data 0 c>s \"hello\" @4", "data 0 c>s \" world\" @6"]
        );
        assert_eq!(run.r.stat(Stat::Retransmitted), 2);
        assert_eq!(run.r.stat(Stat::Overlapping), 1);
    }

    #[test]
    fn out_of_order_segments_are_held_then_joined() {
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 0, 0);
        run.seg(true, 7, 1, ACK, b"ghi"); // held (hole 1..4)
        run.seg(true, 4, 1, ACK, b"def"); // held
        run.seg(true, 4, 1, ACK, b"d"); // shorter at the same seq: dropped
        assert_eq!(run.r.buffered_bytes(), 6);
        run.seg(true, 1, 1, ACK, b"abc"); // fills: one chunk for the three
        assert_eq!(run.text()[1..], ["data 0 c>s \"abcdefghi\" @7"]);
        assert_eq!(run.r.buffered_bytes(), 0);
    }

    #[test]
    fn overlapping_held_segments_are_taken_in_the_order_they_came() {
        // Python's dict keeps insertion order: of two held segments overlapping the edge, the
        // one held first is taken, even when the other starts earlier.
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 0, 0);
        run.seg(true, 6, 1, ACK, b"FGHIJ"); // held first: 6..11
        run.seg(true, 5, 1, ACK, b"efghijk"); // held second: 5..12
        run.seg(true, 1, 1, ACK, b"abcdefg"); // edge 8: both overlap it
        assert_eq!(run.text()[1..], ["data 0 c>s \"abcdefgHIJk\" @6"]);
    }

    #[test]
    fn a_hole_the_peer_acknowledged_becomes_a_gap() {
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 0, 0);
        run.seg(true, 1, 1, ACK, b"abc");
        run.seg(true, 9, 1, ACK, b"XYZ"); // 4..9 never captured
        run.seg(false, 1, 12, ACK, b""); // the server had it all
        run.seg(true, 12, 1, ACK, b"tail");
        assert_eq!(
            run.text()[1..],
            [
                "data 0 c>s \"abc\" @4",
                "gap 0 c>s 5 @6",
                "data 0 c>s \"XYZ\" @5", // at the packet that carried it, not the ACK's
                "data 0 c>s \"tail\" @7"
            ]
        );
        assert_eq!(run.r.stat(Stat::GapsAcked), 1);
    }

    #[test]
    fn an_ack_past_a_pending_fin_declares_the_hole_and_closes() {
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 0, 0);
        run.seg(true, 4, 1, ACK | FIN, b"end"); // 1..4 lost, FIN at 7
        run.seg(false, 1, 8, ACK | FIN, b"");
        run.seg(true, 8, 2, ACK, b"");
        assert_eq!(
            run.text()[1..],
            ["gap 0 c>s 3 @5", "data 0 c>s \"end\" @4", "close 0 fin @5",]
        );
        assert_eq!(run.r.stat(Stat::PacketsAfterClose), 1);
    }

    #[test]
    fn bytes_after_a_hole_keep_their_own_packets() {
        // Three segments held behind a hole, declared lost by the peer's ACK at packet 8: each
        // is reported at the packet that carried it; two pieces of one packet stay one chunk.
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 0, 0);
        run.seg(true, 1, 1, ACK, b"ab");
        run.seg(true, 6, 1, ACK, b"FG"); // 3..6 never captured
        run.seg(true, 8, 1, ACK, b"HI");
        run.seg(true, 10, 1, ACK, b"JK");
        run.seg(false, 1, 12, ACK, b"");
        assert_eq!(
            run.text()[1..],
            [
                "data 0 c>s \"ab\" @4",
                "gap 0 c>s 3 @8",
                "data 0 c>s \"FG\" @5",
                "data 0 c>s \"HI\" @6",
                "data 0 c>s \"JK\" @7",
            ]
        );
    }

    #[test]
    fn the_first_fin_and_rst_are_marked_with_their_sender_and_packet() {
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 0, 0);
        run.seg(true, 1, 1, ACK | FIN, b""); // packet 4: the client's FIN
        run.seg(true, 1, 1, ACK | FIN, b""); // a retransmission: not the first
        run.seg(false, 1, 2, RST, b""); // packet 6: the server resets
        let close = run.out.iter().find_map(|e| match e {
            TcpEvent::Close { how, fin, rst, .. } => Some((*how, *fin, *rst)),
            _ => None,
        });
        let mark = |port, packet| {
            Some(TcpMark {
                by: ep(port),
                packet,
            })
        };
        assert_eq!(close, Some((CloseHow::Rst, mark(C, 4), mark(S, 6))));
    }

    #[test]
    fn data_carries_what_its_packet_acknowledged_of_the_other_stream() {
        let mut run = Run::new(Limits::default());
        handshake(&mut run, 100, 5000);
        run.seg(false, 5001, 101, ACK, b"hello"); // fast path: acks 0 client bytes
        run.seg(true, 101, 5006, ACK, b"hi"); // acks the server's 5 bytes
        run.seg(true, 103, 5003, ACK | PSH, b"!"); // an old ack number
        let acks: Vec<Option<u32>> = run
            .out
            .iter()
            .filter_map(|e| match e {
                TcpEvent::Data { acked, .. } => Some(*acked),
                _ => None,
            })
            .collect();
        assert_eq!(acks, [Some(0), Some(5), Some(2)]);
    }

    #[test]
    fn buffer_bounds_declare_the_earliest_hole() {
        let limits = Limits {
            ooo_segments_per_dir: 2,
            ..Limits::default()
        };
        let mut run = Run::new(limits);
        handshake(&mut run, 0, 0);
        run.seg(true, 11, 1, ACK, b"b");
        run.seg(true, 21, 1, ACK, b"c");
        run.seg(true, 31, 1, ACK, b"d"); // third held: the hole before "b" goes
        assert_eq!(run.text()[1..], ["gap 0 c>s 10 @6", "data 0 c>s \"b\" @4"]);
        run.finish();
        assert_eq!(
            run.text()[3..],
            [
                "gap 0 c>s 9 @6",
                "data 0 c>s \"c\" @5",
                "gap 0 c>s 9 @6",
                "data 0 c>s \"d\" @6",
                "close 0 eof @6"
            ]
        );
    }

    #[test]
    fn mid_stream_start_reset_and_new_syn_on_the_same_tuple() {
        let mut run = Run::new(Limits::default());
        run.seg(false, 500, 900, ACK, b"srv"); // no handshake: the first source is the client
        run.seg(true, 900, 503, ACK, b"cli");
        run.seg(true, 903, 503, RST, b"");
        run.seg(true, 903, 503, ACK, b"stray"); // absorbed
        run.seg(true, 7000, 0, SYN, b""); // a new connection on the same 4-tuple
        run.seg(false, 100, 7001, SYN | ACK, b"");
        run.seg(true, 7001, 101, ACK, b"new");
        run.seg(true, 9000, 0, SYN, b""); // another ISN while open: the old one is evicted
        run.finish();
        assert_eq!(
            run.text(),
            [
                "open 0 s",
                "data 0 s>c \"srv\" @1",
                "data 0 c>s \"cli\" @2",
                "close 0 rst @3",
                "open 1 c syn",
                "data 1 c>s \"new\" @7",
                "close 1 evicted @8",
                "open 2 c syn",
                "close 2 eof @8",
            ]
        );
    }

    #[test]
    fn lru_eviction_beyond_max_flows() {
        let limits = Limits {
            max_flows: 1,
            ..Limits::default()
        };
        let mut r = Reassembler::new(&limits);
        let mut out = Vec::new();
        for (i, port) in [1000u16, 2000, 1000].into_iter().enumerate() {
            let s = Segment {
                index: i as u64 + 1,
                ts_ns: 0,
                src: ep(port),
                dst: ep(S),
                seq: 1,
                ack: 1,
                flags: ACK,
                payload: b"x",
            };
            r.feed(&s, &mut out);
            assert_eq!(r.flow_count(), 1);
        }
        let kinds: Vec<String> = out
            .iter()
            .map(|e| match e {
                TcpEvent::Open { flow, .. } => format!("open {flow}"),
                TcpEvent::Close { flow, how, .. } => format!("close {flow} {}", how.as_str()),
                TcpEvent::Data { flow, .. } => format!("data {flow}"),
                TcpEvent::Gap { .. } => "gap".into(),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "open 0",
                "data 0",
                "open 1",
                "close 0 evicted",
                "data 1",
                "open 2",
                "close 1 evicted",
                "data 2"
            ]
        );
    }

    #[test]
    fn idle_flows_are_evicted_by_capture_time() {
        let limits = Limits {
            idle_timeout_ns: Some(10_000),
            closed_linger_ns: 5_000,
            ..Limits::default()
        };
        let mut run = Run::new(limits);
        run.seg(true, 1, 1, ACK, b"a"); // t=1000
        for _ in 0..20 {
            run.n += 1; // time passes without packets of this flow
        }
        run.seg(false, 1, 2, ACK, b"b"); // t=22000: the sweep evicts flow 0 first
        assert_eq!(
            run.text(),
            [
                "open 0 c",
                "data 0 c>s \"a\" @1",
                "close 0 evicted @1",
                "open 1 s",
                "data 1 s>c \"b\" @22"
            ]
        );
    }
    /// A segment from `src` to `dst` with packet `index` at `ts_ns`.
    #[allow(clippy::too_many_arguments)]
    fn feed(
        r: &mut Reassembler,
        out: &mut Vec<TcpEvent>,
        index: u64,
        ts_ns: i64,
        src: Endpoint,
        dst: Endpoint,
        seq: u32,
        flags: u8,
        payload: &[u8],
    ) {
        let s = Segment {
            index,
            ts_ns,
            src,
            dst,
            seq,
            ack: 0,
            flags,
            payload,
        };
        r.feed(&s, out);
    }

    fn host(a: u8, port: u16) -> Endpoint {
        Endpoint {
            addr: IpAddr::V4(Ipv4Addr::new(10, 0, 0, a)),
            port,
        }
    }

    fn closes(out: &[TcpEvent]) -> Vec<(u64, &'static str)> {
        out.iter()
            .filter_map(|e| match e {
                TcpEvent::Close { flow, how, .. } => Some((*flow, how.as_str())),
                _ => None,
            })
            .collect()
    }

    fn opens(out: &[TcpEvent]) -> Vec<u64> {
        out.iter()
            .filter_map(|e| match e {
                TcpEvent::Open { flow, .. } => Some(*flow),
                _ => None,
            })
            .collect()
    }

    fn data_bytes(out: &[TcpEvent]) -> Vec<u8> {
        out.iter()
            .filter_map(|e| match e {
                TcpEvent::Data { data, .. } => Some(&data[..]),
                _ => None,
            })
            .collect::<Vec<_>>()
            .concat()
    }

    fn gap_sizes(out: &[TcpEvent]) -> Vec<u64> {
        out.iter()
            .filter_map(|e| match e {
                TcpEvent::Gap { size, .. } => Some(*size),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_syn_at_the_top_of_sequence_space_anchors_at_zero() {
        let mut run = Run::new(Limits::default());
        run.seg(true, u32::MAX, 0, SYN, b""); // ISN + 1 wraps to 0
        run.seg(true, 0, 0, ACK, b"aa");
        run.seg(true, 4, 0, ACK, b"cc"); // held
        run.seg(true, 6, 0, ACK, b"dd"); // held
        assert_eq!(run.text(), ["open 0 c syn", "data 0 c>s \"aa\" @2"]);
        assert_eq!(run.r.buffered_bytes(), 4);
        run.seg(true, 2, 0, ACK, b"bb");
        assert_eq!(run.text()[2..], ["data 0 c>s \"bbccdd\" @5"]);
        assert_eq!(run.r.buffered_bytes(), 0);
    }

    #[test]
    fn in_order_segments_across_the_wrap() {
        let mut run = Run::new(Limits::default());
        let seq = 0xFFFF_FFF0u32;
        run.seg(true, seq - 1, 0, SYN, b"");
        let mut want = Vec::new();
        for i in 0..10u8 {
            let chunk = [i; 10];
            run.seg(true, seq.wrapping_add(10 * i as u32), 0, ACK, &chunk);
            want.extend_from_slice(&chunk);
        }
        assert_eq!(data_bytes(&run.out), want);
        assert!(gap_sizes(&run.out).is_empty());
    }

    #[test]
    fn a_lost_bare_fin_is_declared_by_the_peer_ack() {
        let mut run = Run::new(Limits::default());
        run.seg(true, 99, 0, SYN, b"");
        run.seg(false, 499, 100, SYN | ACK, b"");
        run.seg(true, 104, 500, FIN | ACK, b""); // 100..104 lost, no data held behind it
        run.seg(false, 500, 105, FIN | ACK, b"");
        run.seg(true, 105, 501, ACK, b"");
        assert_eq!(
            run.text(),
            ["open 0 c syn", "gap 0 c>s 4 @4", "close 0 fin @4"]
        );
    }

    #[test]
    fn the_per_direction_byte_bound_declares_the_hole() {
        let limits = Limits {
            ooo_bytes_per_dir: 1000,
            ..Limits::default()
        };
        let mut run = Run::new(limits);
        run.seg(true, 0, 0, ACK, b"x"); // mid-stream anchor: 1..101 never comes
        let start = run.out.len();
        for i in 0..20u32 {
            run.seg(true, 101 + 100 * i, 0, 0, &[b'y'; 100]);
        }
        let later = &run.out[start..];
        assert_eq!(gap_sizes(later), [100]);
        assert_eq!(run.r.buffered_bytes(), 0); // everything after the hole was contiguous
        assert_eq!(data_bytes(later), [b'y'; 2000]);
        assert_eq!(run.r.stat(Stat::GapsBufferBound), 1);
    }

    #[test]
    fn the_total_byte_bound_holds_across_flows() {
        let limits = Limits {
            ooo_bytes_total: 5000,
            ooo_bytes_per_dir: 1_000_000,
            ..Limits::default()
        };
        let mut r = Reassembler::new(&limits);
        let mut out = Vec::new();
        for f in 0..10u16 {
            let src = host(1, 1000 + f);
            feed(
                &mut r,
                &mut out,
                f as u64,
                f as i64,
                src,
                ep(S),
                0,
                ACK,
                b"x",
            );
            feed(
                &mut r,
                &mut out,
                f as u64,
                f as i64,
                src,
                ep(S),
                100,
                ACK,
                &[b'y'; 1000],
            );
            assert!(r.buffered_bytes() <= 5000);
        }
        assert!(r.stat(Stat::GapsTotalBufferBound) > 0);
    }

    #[test]
    fn max_flows_evicts_the_least_recently_used_and_finish_closes_the_rest() {
        let limits = Limits {
            max_flows: 3,
            ..Limits::default()
        };
        let mut r = Reassembler::new(&limits);
        let mut out = Vec::new();
        for f in 0..5u16 {
            let src = host(1, 1000 + f);
            feed(
                &mut r,
                &mut out,
                f as u64 + 1,
                f as i64,
                src,
                ep(S),
                0,
                ACK,
                b"x",
            );
        }
        assert_eq!(closes(&out), [(0, "evicted"), (1, "evicted")]);
        assert_eq!(r.flow_count(), 3);
        let mut tail = Vec::new();
        r.finish(&mut tail);
        assert_eq!(closes(&tail), [(2, "eof"), (3, "eof"), (4, "eof")]);
    }

    #[test]
    fn an_idle_evicted_flow_forgets_its_four_tuple() {
        const SEC: i64 = 1_000_000_000;
        let limits = Limits {
            idle_timeout_ns: Some(60 * SEC),
            ..Limits::default()
        };
        let mut r = Reassembler::new(&limits);
        let mut out = Vec::new();
        let (one, two) = (host(1, 1), host(1, 2));
        feed(&mut r, &mut out, 1, 0, one, ep(S), 0, ACK, b"x");
        feed(&mut r, &mut out, 2, 10 * SEC, two, ep(S), 0, ACK, b"x");
        let start = out.len();
        feed(&mut r, &mut out, 3, 65 * SEC, two, ep(S), 1, ACK, b"y");
        assert_eq!(closes(&out[start..]), [(0, "evicted")]);
        assert_eq!(r.stat(Stat::EvictedIdle), 1);
        // flow 0's 4-tuple is forgotten: a packet there starts flow 2
        let start = out.len();
        feed(&mut r, &mut out, 4, 66 * SEC, one, ep(S), 1, ACK, b"z");
        assert_eq!(opens(&out[start..]), [2]);
    }

    #[test]
    fn a_syn_ack_first_makes_its_receiver_the_client() {
        let mut run = Run::new(Limits::default());
        run.seg(false, 499, 100, SYN | ACK, b"");
        run.seg(true, 100, 500, ACK, b"hello");
        assert_eq!(run.text(), ["open 0 c syn", "data 0 c>s \"hello\" @2"]);
        let TcpEvent::Open { client, server, .. } = &run.out[0] else {
            panic!("not an open: {:?}", run.out[0])
        };
        assert_eq!((*client, *server), (ep(C), ep(S)));
    }

    #[test]
    fn a_new_isn_on_an_open_tuple_replaces_the_flow_once() {
        let mut run = Run::new(Limits::default());
        run.seg(true, 99, 0, SYN, b"");
        run.seg(true, 100, 0, ACK, b"one");
        run.seg(true, 5000, 0, SYN, b"");
        assert_eq!(closes(&run.out), [(0, "evicted")]);
        assert_eq!(opens(&run.out), [0, 1]);
        // a retransmitted SYN of the new flow does not start yet another
        run.seg(true, 5000, 0, SYN, b"");
        assert_eq!(opens(&run.out), [0, 1]);
        assert_eq!(run.r.stat(Stat::ReplacedBySyn), 1);
    }

    #[test]
    fn many_short_flows_are_forgotten_after_the_linger_time() {
        // 200 connections a second apart (handshake, 50 bytes, FIN both ways), linger 5 s.
        const SEC: i64 = 1_000_000_000;
        let limits = Limits {
            max_flows: 10_000,
            closed_linger_ns: 5 * SEC,
            ..Limits::default()
        };
        let mut r = Reassembler::new(&limits);
        let mut out = Vec::new();
        let mut index = 0;
        let mut most = 0;
        for f in 0..200u16 {
            let (c, s) = (ep(20000 + f), ep(S));
            let mut ts = 1_700_000_000 * SEC + f as i64 * SEC;
            let mut send =
                |src: Endpoint, dst: Endpoint, seq: u32, ack: u32, flags: u8, p: &[u8]| {
                    index += 1;
                    ts += 1_000_000;
                    let seg = Segment {
                        index,
                        ts_ns: ts,
                        src,
                        dst,
                        seq,
                        ack,
                        flags,
                        payload: p,
                    };
                    r.feed(&seg, &mut out);
                };
            send(c, s, 1000, 0, SYN, b"");
            send(s, c, 5000, 1001, SYN | ACK, b"");
            send(c, s, 1001, 5001, ACK, b"");
            send(c, s, 1001, 5001, PSH | ACK, &[b'm'; 50]);
            send(s, c, 5001, 1051, ACK, b"");
            send(c, s, 1051, 5001, FIN | ACK, b"");
            send(s, c, 5001, 1052, FIN | ACK, b"");
            send(c, s, 1052, 5002, ACK, b"");
            most = most.max(r.flow_count());
        }
        r.finish(&mut out);
        assert_eq!(opens(&out).len(), 200);
        let c = closes(&out);
        assert!(c.len() == 200 && c.iter().all(|&(_, how)| how == "fin"));
        for f in 0..200 {
            let data: Vec<u8> = out
                .iter()
                .filter_map(|e| match e {
                    TcpEvent::Data { flow, data, .. } if *flow == f => Some(&data[..]),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .concat();
            assert_eq!(data, [b'm'; 50], "flow {f}");
        }
        // closed flows linger 5 s, swept every 1.25 s: a handful tracked at once, not 200
        assert!(most <= 8, "{most} flows tracked");
    }

    #[test]
    fn a_flood_beyond_max_flows_keeps_the_flow_table_at_the_cap() {
        // What tests/test_hostile.py measured with a lowered cap: the state stays at the cap.
        let limits = Limits {
            max_flows: 2000,
            ..Limits::default()
        };
        for with_data in [false, true] {
            let mut r = Reassembler::new(&limits);
            let mut out = Vec::new();
            for i in 0..8000u32 {
                let src = Endpoint {
                    addr: IpAddr::V4(Ipv4Addr::from(0x0A00_0000 | i)),
                    port: 1024 + (i % 60000) as u16,
                };
                let ts = i as i64 * 1000;
                feed(
                    &mut r,
                    &mut out,
                    2 * i as u64 + 1,
                    ts,
                    src,
                    ep(S),
                    1000,
                    SYN,
                    b"",
                );
                if with_data {
                    let p = b"AMQP\x00\x00\x09\x01";
                    feed(
                        &mut r,
                        &mut out,
                        2 * i as u64 + 2,
                        ts + 500,
                        src,
                        ep(S),
                        1001,
                        ACK | PSH,
                        p,
                    );
                }
                assert!(r.flow_count() <= 2000);
                assert!(r.flows.len() <= 2001 && r.halves.len() <= 2 * 2001);
                assert!(r.buffered_bytes() == 0);
                if i % 1000 == 0 {
                    out.clear(); // the events go downstream; only the state is kept
                }
            }
            assert_eq!(r.stat(Stat::EvictedMaxFlows), 6000);
            out.clear();
            r.finish(&mut out);
            assert_eq!(closes(&out).len(), 2000);
        }
    }
}

"""TCP reassembly: :class:`Segment` objects → in-order byte chunks, gaps and flow events.

Per flow and direction ("half"):

* sequence numbers are compared modulo 2^32 (signed 32-bit distance);
* the stream is anchored on the SYN (ISN + 1) when seen — or on the SYN-ACK's ack number for
  the client side — otherwise on the first segment carrying data (capture started mid-stream);
* retransmissions and overlaps are trimmed, only new bytes are emitted;
* segments beyond a hole are buffered (bounded) until the hole is filled;
* a hole is declared lost — ``TcpGap(size)`` and the buffered data after it delivered — when
  the peer ACKs past it (the receiver had those bytes, so the capture dropped them), when the
  per-direction or total buffer bound is exceeded, or when the flow ends. Never zero-filled.

Flows: ids are assigned in order of first appearance. ``TcpClose`` is emitted once per flow:
``"rst"`` on a reset, ``"fin"`` once both directions have delivered their FIN in order,
``"evicted"`` for LRU/idle eviction (and a new SYN reusing an open 4-tuple), ``"eof"`` from
:meth:`TcpReassembler.finish`. After a close, stray packets on the 4-tuple (the last ACK) are
absorbed; a new SYN starts a new flow id.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from amqpscope.packets import (
    ACK,
    FIN,
    RST,
    SYN,
    Endpoint,
    Segment,
    TcpClose,
    TcpData,
    TcpEvent,
    TcpGap,
    TcpOpen,
)

_MASK = 0xFFFFFFFF
_HALF = 0x80000000
_WRAP = 0x100000000

# One buffered out-of-order segment: (payload, packet index, ts_ns)
_Held = tuple[bytes, int, int]


class _Half:
    """One direction of a flow."""

    __slots__ = ("done", "dst", "fin_seq", "flow", "isn", "next_seq", "ooo", "ooo_bytes", "peer", "src")

    def __init__(self, flow: _Flow, src: Endpoint, dst: Endpoint) -> None:
        self.flow = flow
        self.src = src
        self.dst = dst
        self.isn: int | None = None  # sequence number of this direction's SYN, if seen
        self.next_seq: int | None = None  # None until anchored
        self.ooo: dict[int, _Held] = {}  # absolute seq -> held segment
        self.ooo_bytes = 0
        self.fin_seq: int | None = None  # sequence number of the FIN, once seen
        self.done = False  # FIN delivered in order
        self.peer: _Half = self


class _Flow:
    __slots__ = ("a", "b", "closed", "id", "last_packet", "last_ts")

    def __init__(self, fid: int, src: Endpoint, dst: Endpoint) -> None:
        self.id = fid
        self.a = _Half(self, src, dst)
        self.b = _Half(self, dst, src)
        self.a.peer = self.b
        self.b.peer = self.a
        self.closed = False
        self.last_ts = 0
        self.last_packet = 0


def _dist(seq: int, base: int) -> int:
    """Signed distance seq - base in sequence space."""
    d = (seq - base) & _MASK
    return d - _WRAP if d & _HALF else d


class TcpReassembler:
    """Stateful TCP reassembler; feed segments in capture order, then call :meth:`finish`.

    Bounds: ``max_flows`` (least recently used flow evicted beyond it), ``idle_timeout_ns``
    (flows without packets for that long, by capture timestamps, are evicted; None = never),
    ``max_buffer_per_dir`` / ``max_segments_per_dir`` (out-of-order data held per direction)
    and ``max_buffer_total`` (across all flows). Exceeding a buffer bound declares the
    earliest hole lost. ``closed_linger_ns``: how long a closed flow's 4-tuple is remembered
    to absorb trailing packets.
    """

    def __init__(
        self,
        *,
        max_flows: int = 100_000,
        idle_timeout_ns: int | None = None,
        max_buffer_per_dir: int = 4 << 20,
        max_segments_per_dir: int = 4096,
        max_buffer_total: int = 256 << 20,
        closed_linger_ns: int = 120 * 1_000_000_000,
    ) -> None:
        self.max_flows = max_flows
        self.idle_timeout_ns = idle_timeout_ns
        self.max_buffer_per_dir = max_buffer_per_dir
        self.max_segments_per_dir = max_segments_per_dir
        self.max_buffer_total = max_buffer_total
        self.closed_linger_ns = closed_linger_ns
        self._halves: dict[tuple[Endpoint, Endpoint], _Half] = {}
        self._lru: OrderedDict[int, _Flow] = OrderedDict()  # flow id -> flow, oldest first
        self._last_flow: _Flow | None = None
        self._next_id = 0
        self._buffered_total = 0
        self._sweep_at = 0
        self._sweep_every = min(closed_linger_ns, idle_timeout_ns or closed_linger_ns) // 4 or 1
        self.stats: Counter[str] = Counter()

    # --- public ---------------------------------------------------------------------------------

    @property
    def buffered_bytes(self) -> int:
        """Out-of-order bytes currently held across all flows."""
        return self._buffered_total

    @property
    def flow_count(self) -> int:
        """Flows currently tracked (including recently closed ones)."""
        return len(self._lru)

    def feed(self, seg: Segment) -> list[TcpEvent]:
        h = self._halves.get((seg.src, seg.dst))
        flags = seg.flags
        # Fast path: known open flow, anchored, in order, no flags needing care, nothing held.
        if (
            h is not None
            and not flags & 0x07  # FIN | SYN | RST
            and h.next_seq == seg.seq
            and not h.ooo
            and not h.peer.ooo
            and h.peer.fin_seq is None  # a pending FIN may need an ACK-declared gap
        ):
            flow = h.flow
            if not flow.closed:
                flow.last_ts = ts = seg.ts_ns
                flow.last_packet = seg.index
                if flow is not self._last_flow:
                    self._touch(flow)
                if ts >= self._sweep_at:
                    out: list[TcpEvent] = self._sweep(ts)
                else:
                    out = []
                payload = seg.payload
                if payload:
                    h.next_seq = (seg.seq + len(payload)) & _MASK
                    out.append(TcpData(flow.id, h.src, h.dst, payload, seg.index, ts))
                return out
        return self._feed_slow(seg, h)

    def finish(self) -> list[TcpEvent]:
        """End of capture: flush held data (with gaps) and close every open flow with "eof"."""
        out: list[TcpEvent] = []
        for flow in sorted(self._lru.values(), key=lambda f: f.id):
            if not flow.closed:
                self._close(flow, "eof", flow.last_packet, flow.last_ts, out)
        self._lru.clear()
        self._halves.clear()
        self._last_flow = None
        return out

    # --- flow table -----------------------------------------------------------------------------

    def _touch(self, flow: _Flow) -> None:
        self._lru.move_to_end(flow.id)
        self._last_flow = flow

    def _new_flow(self, seg: Segment, out: list[TcpEvent]) -> _Flow:
        flags = seg.flags
        syn_seen = bool(flags & SYN)
        if flags & SYN and flags & ACK:
            client, server = seg.dst, seg.src  # SYN-ACK: we missed the SYN; its sender is dst
        else:
            client, server = seg.src, seg.dst
        flow = _Flow(self._next_id, client, server)
        self._next_id += 1
        self._halves[(client, server)] = flow.a
        self._halves[(server, client)] = flow.b
        self._lru[flow.id] = flow
        self._last_flow = flow
        out.append(TcpOpen(flow.id, client, server, syn_seen, seg.index, seg.ts_ns))
        while len(self._lru) > self.max_flows:
            _, victim = self._lru.popitem(last=False)
            self._forget(victim)
            if not victim.closed:
                self.stats["flows evicted (max flows)"] += 1
                self._close(victim, "evicted", seg.index, seg.ts_ns, out)
        return flow

    def _forget(self, flow: _Flow) -> None:
        for half in (flow.a, flow.b):
            key = (half.src, half.dst)
            if self._halves.get(key) is half:
                del self._halves[key]
        if self._last_flow is flow:
            self._last_flow = None

    def _sweep(self, now: int) -> list[TcpEvent]:
        """Drop closed flows after the linger time and evict idle ones (by capture time)."""
        out: list[TcpEvent] = []
        self._sweep_at = now + self._sweep_every
        linger_cut = now - self.closed_linger_ns
        idle_cut = now - self.idle_timeout_ns if self.idle_timeout_ns is not None else None
        for fid, flow in list(self._lru.items()):
            if flow.last_ts >= linger_cut and (idle_cut is None or flow.last_ts >= idle_cut):
                break  # LRU order: everything after was touched later (capture order)
            if flow.closed:
                if flow.last_ts < linger_cut:
                    del self._lru[fid]
                    self._forget(flow)
            elif idle_cut is not None and flow.last_ts < idle_cut:
                del self._lru[fid]
                self._forget(flow)
                self.stats["flows evicted (idle)"] += 1
                self._close(flow, "evicted", flow.last_packet, flow.last_ts, out)
        return out

    # --- the general path -----------------------------------------------------------------------

    def _feed_slow(self, seg: Segment, h: _Half | None) -> list[TcpEvent]:
        flags = seg.flags
        ts = seg.ts_ns
        out: list[TcpEvent] = self._sweep(ts) if ts >= self._sweep_at else []
        if h is not None and self._halves.get((seg.src, seg.dst)) is not h:
            h = None  # the sweep just forgot this flow
        if h is not None and flags & SYN and not flags & ACK:
            flow = h.flow
            if flow.closed:
                self._lru.pop(flow.id, None)
                self._forget(flow)
                h = None
            elif h.isn != seg.seq and (h.next_seq is not None or h.peer.next_seq is not None):
                # A fresh SYN with another ISN on an open 4-tuple: the old connection's end was
                # not captured; close it and start a new flow.
                self.stats["flows replaced by new SYN"] += 1
                self._lru.pop(flow.id, None)
                self._forget(flow)
                self._close(flow, "evicted", seg.index, ts, out)
                h = None
        if h is None:
            h = self._new_flow(seg, out).a
            if (h.src, h.dst) != (seg.src, seg.dst):
                h = h.peer
        flow = h.flow
        if flow.closed:
            self.stats["packets after close"] += 1
            return out
        flow.last_ts = ts
        flow.last_packet = seg.index
        if flow is not self._last_flow:
            self._touch(flow)

        if flags & RST:
            self._close(flow, "rst", seg.index, ts, out)
            return out

        seq = seg.seq
        payload = seg.payload
        if flags & SYN:
            if h.isn is None:
                h.isn = seq
            if h.next_seq is None:
                h.next_seq = (seq + 1) & _MASK
            seq = (seq + 1) & _MASK  # SYN occupies one sequence number; data (TFO) follows it
            if flags & ACK and h.peer.next_seq is None:
                h.peer.next_seq = seg.ack  # SYN-ACK acknowledges the client's ISN + 1
        if h.next_seq is None and (payload or flags & FIN):
            h.next_seq = seq  # mid-stream start: anchor on the first data we see
        if flags & FIN and h.fin_seq is None:
            h.fin_seq = (seq + len(payload)) & _MASK

        if payload and h.next_seq is not None:
            self._add_data(h, seq, payload, seg.index, ts, out)

        # The peer ACKing beyond what we have seen of this direction's opposite half means the
        # capture lost those bytes: declare the hole once data is waiting behind it.
        if flags & ACK:
            other = h.peer
            if other.next_seq is not None and (other.ooo or (other.fin_seq is not None and not other.done)):
                self._gap_on_ack(other, seg.ack, seg.index, ts, out)

        self._check_fin(h, seg.index, ts, out)
        return out

    def _add_data(self, h: _Half, seq: int, payload: bytes, packet: int, ts: int, out: list[TcpEvent]) -> None:
        assert h.next_seq is not None
        off = _dist(seq, h.next_seq)
        if off < 0:
            if off + len(payload) <= 0:
                self.stats["retransmitted segments"] += 1
                return
            self.stats["overlapping segments"] += 1
            payload = payload[-off:]
            seq = h.next_seq
            off = 0
        if off == 0:
            h.next_seq = (seq + len(payload)) & _MASK
            if h.ooo:
                chunks = [payload]
                self._drain(h, chunks)
                payload = b"".join(chunks)
            out.append(TcpData(h.flow.id, h.src, h.dst, payload, packet, ts))
            return
        # Beyond a hole: hold it. Keep the longer of two segments at the same seq.
        held = h.ooo.get(seq)
        if held is not None:
            if len(held[0]) >= len(payload):
                self.stats["retransmitted segments"] += 1
                return
            h.ooo_bytes -= len(held[0])
            self._buffered_total -= len(held[0])
        else:
            self.stats["out-of-order segments"] += 1
        h.ooo[seq] = (payload, packet, ts)
        h.ooo_bytes += len(payload)
        self._buffered_total += len(payload)
        while h.ooo and (h.ooo_bytes > self.max_buffer_per_dir or len(h.ooo) > self.max_segments_per_dir):
            self.stats["gaps (buffer bound)"] += 1
            self._skip_hole(h, packet, ts, out)
        if self._buffered_total > self.max_buffer_total:
            self._shed_total(h, packet, ts, out)

    def _drain(self, h: _Half, chunks: list[bytes]) -> None:
        """Append held segments that are now contiguous with ``h.next_seq``."""
        ooo = h.ooo
        while ooo:
            nxt = h.next_seq
            assert nxt is not None
            held = ooo.pop(nxt, None)
            if held is None:
                # Not an exact fit: look for a held segment overlapping the new edge.
                best: int | None = None
                for s in ooo:
                    if _dist(s, nxt) <= 0:
                        best = s
                        break
                if best is None:
                    return
                held = ooo.pop(best)
                self._release(h, len(held[0]))
                trim = -_dist(best, nxt)
                data = held[0][trim:]
                if not data:
                    continue  # wholly old
            else:
                self._release(h, len(held[0]))
                data = held[0]
            chunks.append(data)
            h.next_seq = (nxt + len(data)) & _MASK

    def _release(self, h: _Half, n: int) -> None:
        h.ooo_bytes -= n
        self._buffered_total -= n

    def _skip_hole(self, h: _Half, packet: int, ts: int, out: list[TcpEvent], upto: int | None = None) -> bool:
        """Declare the hole before the earliest held segment (or a pending FIN) lost.

        With ``upto`` the hole ends there at the latest (bytes the peer acknowledged).
        Returns False when there was nothing to skip.
        """
        nxt = h.next_seq
        assert nxt is not None
        targets = list(h.ooo)
        if h.fin_seq is not None and not h.done:
            targets.append(h.fin_seq)
        if not targets:
            return False
        size = min(_dist(s, nxt) for s in targets)
        if upto is not None:
            size = min(size, _dist(upto, nxt))
        if size > 0:
            out.append(TcpGap(h.flow.id, h.src, h.dst, size, packet, ts))
            h.next_seq = (nxt + size) & _MASK
        chunks: list[bytes] = []
        self._drain(h, chunks)
        if chunks:
            out.append(TcpData(h.flow.id, h.src, h.dst, b"".join(chunks), packet, ts))
        if h.fin_seq is not None and not h.done and h.next_seq == h.fin_seq:
            h.done = True
            h.next_seq = (h.fin_seq + 1) & _MASK
        return size > 0 or bool(chunks)

    def _gap_on_ack(self, h: _Half, ack: int, packet: int, ts: int, out: list[TcpEvent]) -> None:
        nxt = h.next_seq
        assert nxt is not None
        if _dist(ack, nxt) > 0:
            self.stats["gaps (acked, not captured)"] += 1
            self._skip_hole(h, packet, ts, out, upto=ack)

    def _shed_total(self, current: _Half, packet: int, ts: int, out: list[TcpEvent]) -> None:
        """Over the global buffer budget: declare holes, current direction first, then others."""
        while current.ooo and self._buffered_total > self.max_buffer_total:
            self.stats["gaps (total buffer bound)"] += 1
            self._skip_hole(current, packet, ts, out)
        if self._buffered_total <= self.max_buffer_total:
            return
        for flow in list(self._lru.values()):
            for half in (flow.a, flow.b):
                while half.ooo and self._buffered_total > self.max_buffer_total:
                    self.stats["gaps (total buffer bound)"] += 1
                    self._skip_hole(half, packet, ts, out)
            if self._buffered_total <= self.max_buffer_total:
                return

    def _flush(self, h: _Half, packet: int, ts: int, out: list[TcpEvent]) -> None:
        if h.next_seq is None:
            return
        while self._skip_hole(h, packet, ts, out):
            pass

    def _check_fin(self, h: _Half, packet: int, ts: int, out: list[TcpEvent]) -> None:
        for half in (h, h.peer):
            if not half.done and half.fin_seq is not None and half.next_seq == half.fin_seq:
                half.done = True
                half.next_seq = (half.fin_seq + 1) & _MASK
        if h.done and h.peer.done:
            self._close(h.flow, "fin", packet, ts, out)

    def _close(self, flow: _Flow, how: str, packet: int, ts: int, out: list[TcpEvent]) -> None:
        for half in (flow.a, flow.b):
            self._flush(half, packet, ts, out)
        flow.closed = True
        out.append(TcpClose(flow.id, how, packet, ts))

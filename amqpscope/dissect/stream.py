"""One direction of one connection: ordered bytes and gaps in, protocol headers and frames out.

The stream is *in sync* when it knows where the next frame starts (from the stream's first byte,
or after confirming a candidate boundary with several consecutive valid frames). A gap or bytes
that do not frame make it *lost*; it then scans for a boundary again (a resync). When a gap cuts
into a frame whose header was seen, the frame's declared size tells where the next one starts, so
the stream skips the rest of the lost frame and stays in sync.

Every byte fed ends up counted as frame bytes, protocol-header bytes, skipped bytes or (at the end)
pending bytes; ``FrameStream.accounting`` holds the totals.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from .wire import (
    DEFAULT_MAX_FRAME,
    FRAME_BODY,
    FRAME_HEADER,
    FRAME_HEARTBEAT,
    FRAME_METHOD,
    FRAME_TYPE_NAMES,
    NeedMore,
    RawFrame,
    decode_frame,
    protocol_header,
)

CONFIRM_FRAMES = 3  # consecutive valid frames that confirm a candidate boundary
MAX_CANDIDATE = 1 << 20  # while lost, a candidate frame larger than this is not waited for
_SYNC, _LOST, _SKIP, _DEAD = 0, 1, 2, 3
AMQP_0_9_X = {"0-9-1", "0-9", "0-8"}


class HeaderItem(NamedTuple):
    version: str
    raw: bytes
    packet: int
    ts_ns: int


class FrameItem(NamedTuple):
    type: int
    channel: int
    payload: bytes
    packet: int
    ts_ns: int
    resync: bool


class GapItem(NamedTuple):
    size: int
    lost_frame: str | None
    packet: int
    ts_ns: int


class ResyncItem(NamedTuple):
    skipped: int
    reason: str
    packet: int
    ts_ns: int


class MalformedItem(NamedTuple):
    reason: str
    offset: int
    packet: int
    ts_ns: int


StreamItem = HeaderItem | FrameItem | GapItem | ResyncItem | MalformedItem


@dataclass(slots=True)
class StreamAccounting:
    stream_bytes: int = 0
    frame_bytes: int = 0
    header_bytes: int = 0
    gap_bytes: int = 0
    skipped_bytes: int = 0
    pending_bytes: int = 0
    frames: int = 0

    def balanced(self) -> bool:
        accounted = self.frame_bytes + self.header_bytes + self.skipped_bytes + self.pending_bytes
        return accounted == self.stream_bytes


MethodKnown = Callable[[int, int], bool]


class FrameStream:
    """Frames of one direction. ``at_start``: the first byte fed is the first byte of the stream."""

    def __init__(
        self, method_known: MethodKnown, at_start: bool = True, max_frame: int = DEFAULT_MAX_FRAME
    ) -> None:
        self._known = method_known
        self._buf = b""
        self._base = 0  # stream offset of _buf[0]
        self._chunks: deque[tuple[int, int, int]] = deque()  # (end offset, packet, ts_ns) of fed data
        self._state = _SYNC if at_start else _LOST
        self._expect_header = at_start
        self._skip_left = 0
        self._resynced = not at_start
        self._lost_reason = "stream start not captured" if not at_start else ""
        self.max_frame = max_frame
        self.version: str | None = None
        self.accounting = StreamAccounting()
        self.synced_once = at_start
        self._base_end_of_older = 0
        # While an incomplete frame needs more than is buffered, data is held here unjoined: joining
        # on every packet made a frame of N bytes in packets of P bytes cost O(N²/P) copying.
        self._parts: list[bytes] = []
        self._held = 0  # bytes in _parts
        self._need = 0  # len(_buf) + _held at which the incomplete frame is complete

    # --- input ----------------------------------------------------------------------------------

    def feed(self, data: bytes, packet: int, ts_ns: int) -> list[StreamItem]:
        acc = self.accounting
        acc.stream_bytes += len(data)
        if self._state == _DEAD:
            acc.skipped_bytes += len(data)
            return []
        if self._state == _SKIP:
            if len(data) <= self._skip_left:
                self._skip_left -= len(data)
                acc.skipped_bytes += len(data)
                self._base += len(data)
                return []
            acc.skipped_bytes += self._skip_left
            self._base += self._skip_left
            data = data[self._skip_left :]
            self._skip_left = 0
            self._state = _SYNC
        newest = len(data)
        if self._need:
            self._held += newest
            self._parts.append(data)
            if len(self._buf) + self._held < self._need:
                self._chunks.append((self._base + len(self._buf) + self._held, packet, ts_ns))
                return []
            data = b"".join(self._parts)
            self._parts, self._held, self._need = [], 0, 0
        buf = self._buf + data if self._buf else data
        self._base_end_of_older = len(buf) - newest  # frames ending after this are the new chunk's
        self._chunks.append((self._base + len(buf), packet, ts_ns))
        out: list[StreamItem] = []
        off = self._run(buf, 0, out)
        self._buf = buf[off:]
        self._base += off
        chunks = self._chunks
        while len(chunks) > 1 and chunks[0][0] <= self._base:
            chunks.popleft()  # fully consumed: no frame can end in it any more
        if self._state == _SYNC and not self._expect_header and len(self._buf) >= 7:
            size = int.from_bytes(self._buf[3:7], "big")  # _frames stopped at an incomplete frame
            if len(self._buf) < 8 + size and size <= self.max_frame:
                self._need = 8 + size
        return out

    def _collect(self) -> None:
        """Join held-back data into the buffer (before a gap or the end of the capture)."""
        if self._parts:
            self._buf += b"".join(self._parts)
            self._parts, self._held = [], 0
        self._need = 0

    def gap(self, size: int, packet: int, ts_ns: int) -> list[StreamItem]:
        """``size`` bytes of this direction are missing from the capture."""
        acc = self.accounting
        acc.gap_bytes += size
        lost: str | None = None
        self._collect()
        buf = self._buf
        if self._state == _SYNC and len(buf) >= 7 and size > 0:
            frame = decode_frame(buf, 0, self.max_frame)
            if isinstance(frame, NeedMore):
                lost = _describe(buf)
                missing = frame.needed - len(buf)
                if size <= missing:
                    # the lost frame's declared size says where the next frame starts
                    self._skip_left = missing - size
                    self._state = _SKIP if self._skip_left else _SYNC
                else:
                    self._lose("gap")
            else:
                self._lose("gap")
        elif self._state == _SKIP and size > 0:
            self._skip_left -= size
            if self._skip_left < 0:
                self._lose("gap")
            elif self._skip_left == 0:
                self._state = _SYNC
        elif self._state != _DEAD:
            self._lose("gap")
        acc.skipped_bytes += len(buf)
        self._base += len(buf) + size
        self._buf = b""
        self._chunks.clear()
        return [GapItem(size, lost, packet, ts_ns)]

    def finish(self) -> list[StreamItem]:
        """End of capture: a candidate seen to the very end is accepted; the rest is pending."""
        out: list[StreamItem] = []
        self._collect()
        buf = self._buf
        if self._state == _LOST and buf:
            start = self._find_boundary(buf, 0, final=True)
            if start is not None:
                self.accounting.skipped_bytes += start
                self._base += start
                out.append(ResyncItem(start, self._lost_reason, *self._where(self._base)))
                self._state = _SYNC
                buf = buf[start:]
                self._base_end_of_older = len(buf)  # attribute every frame through _where
                off = self._run(buf, 0, out)
                buf = buf[off:]
        self.accounting.pending_bytes += len(buf)
        self._buf = b""
        return out

    # --- decoding -------------------------------------------------------------------------------

    def _run(self, buf: bytes, off: int, out: list[StreamItem]) -> int:
        acc = self.accounting
        while True:
            if self._state == _SYNC:
                if self._expect_header:
                    got = protocol_header(buf, off)
                    if isinstance(got, NeedMore):
                        return off
                    self._expect_header = False
                    if got is not None:
                        self.version = got
                        out.append(HeaderItem(got, bytes(buf[off : off + 8]), *self._where(self._base + off + 8)))
                        acc.header_bytes += 8
                        off += 8
                        if got not in AMQP_0_9_X:
                            self._state = _DEAD  # 0-10 and 1.0 frame differently: not ours to dissect
                            acc.skipped_bytes += len(buf) - off
                            return len(buf)
                        continue
                off = self._frames(buf, off, out)
                if self._state == _SYNC:
                    return off
            elif self._state == _LOST:
                start = self._find_boundary(buf, off, final=False)
                if start is None:
                    # keep a tail that may hold the start of a pending candidate
                    keep = self._pending_from if self._pending_from is not None else max(off, len(buf) - 7)
                    acc.skipped_bytes += keep - off
                    return keep
                acc.skipped_bytes += start - off
                out.append(ResyncItem(start - off, self._lost_reason, *self._where(self._base + start)))
                self._state = _SYNC
                self.synced_once = True
                off = start
            else:  # _DEAD (or _SKIP, which feed() resolves before calling us)
                acc.skipped_bytes += len(buf) - off
                return len(buf)

    def _frames(self, buf: bytes, off: int, out: list[StreamItem]) -> int:
        """The in-sync fast path: frames back to back. Returns where the next frame starts; leaves
        the stream lost (after a malformed item) when the bytes at that offset do not frame."""
        unpack = _HDR.unpack_from
        n = len(buf)
        limit = self.max_frame
        resync = self._resynced
        append = out.append
        frames = 0
        start = off
        # frames completed by the newest chunk end in it; earlier chunks only matter after a resync
        _, packet, ts_ns = self._chunks[-1]
        while n - off >= 8:
            ftype, channel, size = unpack(buf, off)
            end = off + 7 + size
            if size > limit or end >= n or buf[end] != 0xCE:
                if size > limit or (end < n and buf[end] != 0xCE):
                    reason = (f"declared frame size {size} exceeds the limit of {limit}" if size > limit
                              else f"frame-end octet is 0x{buf[end]:02x}, not 0xce")  # fmt: skip
                    out.append(MalformedItem(reason, self._base + off, *self._where(self._base + off + 1)))
                    self._lose(reason)
                break
            if end + 1 > self._base_end_of_older:
                p, t = packet, ts_ns
            else:
                p, t = self._where(self._base + end + 1)
            append(_new(FrameItem, (ftype, channel, buf[off + 7 : end], p, t, resync)))
            frames += 1
            off = end + 1
        self.accounting.frame_bytes += off - start
        self.accounting.frames += frames
        return off

    def _lose(self, reason: str) -> None:
        self._state = _LOST
        self._resynced = True
        self._lost_reason = reason

    _pending_from: int | None = None

    def _find_boundary(self, buf: bytes, off: int, final: bool) -> int | None:
        """The first offset from which CONFIRM_FRAMES valid frames follow (or, when ``final``, valid
        frames up to the very end). Sets ``_pending_from`` to the first candidate that needs more
        data before it can be judged, so the caller keeps those bytes."""
        self._pending_from = None
        n = len(buf)
        i = off
        while i + 7 < n:
            t = buf[i]
            if t in _TYPES:
                verdict = self._chain(buf, i, final)
                if verdict is True:
                    return i
                if verdict is None:
                    self._pending_from = i
                    return None
            i += 1
        if n - off > 6:
            self._pending_from = None
        return None

    def _chain(self, buf: bytes, i: int, final: bool) -> bool | None:
        """True: confirmed; False: not a boundary; None: cannot tell yet."""
        count = 0
        while count < CONFIRM_FRAMES:
            r = decode_frame(buf, i, min(self.max_frame, MAX_CANDIDATE))
            if type(r) is RawFrame:
                if not self._plausible(r):
                    return False
                count += 1
                i = r.end
                if i == len(buf) and final:
                    return True
                continue
            if type(r) is NeedMore:
                return False if final else None
            return False
        return True

    def _plausible(self, f: RawFrame) -> bool:
        t = f.type
        if t == FRAME_METHOD:
            p = f.payload
            return len(p) >= 4 and self._known((p[0] << 8) | p[1], (p[2] << 8) | p[3])
        if t == FRAME_HEADER:
            p = f.payload
            return len(p) >= 14 and p[2] == 0 and p[3] == 0 and f.channel != 0
        if t == FRAME_BODY:
            return f.channel != 0
        if t == FRAME_HEARTBEAT:
            return f.channel == 0 and not f.payload
        return False

    def _where(self, end_offset: int) -> tuple[int, int]:
        """Packet number and timestamp of the chunk holding stream offset ``end_offset - 1``."""
        chunks = self._chunks
        while len(chunks) > 1 and chunks[0][0] < end_offset:
            chunks.popleft()
        if not chunks:
            return 0, 0
        _, packet, ts_ns = chunks[0]
        return packet, ts_ns


_HDR = struct.Struct(">BHI")
_new = tuple.__new__  # a NamedTuple without its Python-level __new__: this is the per-frame hot path
_TYPES = frozenset((FRAME_METHOD, FRAME_HEADER, FRAME_BODY, FRAME_HEARTBEAT))


def _describe(buf: bytes) -> str:
    t, ch = buf[0], (buf[1] << 8) | buf[2]
    size = int.from_bytes(buf[3:7], "big")
    return f"{FRAME_TYPE_NAMES.get(t, f'type {t}')} frame on channel {ch}, {size} bytes"

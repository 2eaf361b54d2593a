"""Per-channel summary rows: when a channel opened and closed, how, and what went over it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ..events import C2S, Frame
from .common import MAX_LISTED, ConnKeyed

_COUNTED = {"basic.publish": "publishes", "basic.deliver": "deliveries", "basic.get-ok": "deliveries",
            "basic.return": "returns"}  # fmt: skip
_SETTLE = ("basic.ack", "basic.nack", "basic.reject")


@dataclass(slots=True)
class ChannelRow:
    conn: int
    channel: int
    opened: float | None = None  # channel.open time
    closed: float | None = None  # channel.close-ok time (or when the connection ended)
    close_code: int | None = None
    close_by: str | None = None  # client | server
    close_text: str | None = None
    mode: str = ""  # "confirm", "tx" or ""
    methods: int = 0
    publishes: int = 0
    deliveries: int = 0
    returns: int = 0
    client_settles: int = 0  # basic.ack/nack/reject from the client
    server_confirms: int = 0  # basic.ack/nack from the server
    body_bytes: int = 0
    ended: str = "open"  # "closed", "connection ended", "open at end"


class ChannelTable:
    """Rows per (conn, channel) open in the capture; a reused channel number starts a new row."""

    def __init__(self) -> None:
        self.open: ConnKeyed[tuple[int, int], ChannelRow] = ConnKeyed()
        self.rows: list[ChannelRow] = []
        self.total = 0

    def _row(self, conn: int, channel: int) -> ChannelRow:
        key = (conn, channel)
        row = self.open.get(key)
        if row is None:
            row = self.open[key] = ChannelRow(conn, channel)
        return row

    def feed(self, ev: Frame, conn: int) -> None:
        channel = ev.channel or 0
        if channel == 0:
            return
        if ev.type == "header" and ev.body_size:
            self._row(conn, channel).body_bytes += ev.body_size
            return
        method = ev.method
        if ev.type != "method" or method is None:
            return
        if method == "channel.open" and (conn, channel) in self.open:
            self._end((conn, channel), ev.ts, "closed")  # reopened without a close seen
        row = self._row(conn, channel)
        row.methods += 1
        args = ev.args or {}
        if method == "channel.open":
            row.opened = ev.ts
        elif method in _COUNTED:
            setattr(row, _COUNTED[method], getattr(row, _COUNTED[method]) + 1)
        elif method in _SETTLE:
            if ev.dir == C2S:
                row.client_settles += 1
            else:
                row.server_confirms += 1
        elif method == "confirm.select":
            row.mode = "confirm"
        elif method == "tx.select":
            row.mode = "tx"
        elif method == "channel.close" and row.close_code is None:
            code = args.get("reply_code")
            row.close_code = code if isinstance(code, int) else None
            row.close_by = "client" if ev.dir == C2S else "server"
            text = args.get("reply_text")
            row.close_text = text if isinstance(text, str) else None
        elif method == "channel.close-ok":
            self._end((conn, channel), ev.ts, "closed")

    def _end(self, key: tuple[int, int], ts: float, how: str) -> None:
        row = self.open.pop(key, None)
        if row is None:
            return
        row.closed, row.ended = ts, how
        self.total += 1
        if len(self.rows) < MAX_LISTED:
            self.rows.append(row)

    def connection_ended(self, conn: int, ts: float, at_eof: bool) -> None:
        for key in self.open.keys_of(conn):
            self._end(key, ts, "open at end" if at_eof else "connection ended")

    def finish(self, ts: float) -> None:
        for key in sorted(self.open):
            self._end(key, ts, "open at end")

    def result(self) -> list[dict[str, Any]]:
        return [asdict(r) for r in sorted(self.rows, key=lambda r: (r.conn, r.opened or 0.0, r.channel))]

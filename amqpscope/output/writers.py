"""Streaming writers for machine formats: JSONL, JSON (one array), CSV and plain text columns."""

from __future__ import annotations

import csv
import time
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import orjson

from ..events import Event, record_maker
from .records import LINE_OPTIONS, default, dumpb_line, dumps, record
from .summary import summary

CSV_COLUMNS = ("kind", "packet", "ts", "conn", "dir", "channel", "type", "class_id", "method_id", "method",
               "body_size", "summary", "args", "properties")  # fmt: skip


class Writer:
    def __init__(self, out: TextIO, body: str = "none") -> None:
        self.out = out
        self.body = body

    def write(self, ev: Event, rec: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.out.flush()


class JsonlWriter(Writer):
    """One JSON object per line. Lines are collected and written in batches: one write per record
    cost as much as encoding it."""

    BATCH = 512

    def __init__(self, out: TextIO, body: str = "none", flush_each: bool = False) -> None:
        super().__init__(out, body)
        self._lines: list[bytes] = []
        self.flush_each = flush_each
        buffer = getattr(out, "buffer", None)
        if buffer is not None:
            out.flush()
            self._sink = buffer.write
            self._flush_out = buffer.flush
        else:  # a text stream without bytes underneath (tests, StringIO)
            self._sink = lambda data: out.write(data.decode())
            self._flush_out = out.flush

    def write(self, ev: Event, rec: dict[str, Any]) -> None:
        lines = self._lines
        lines.append(dumpb_line(rec))
        if self.flush_each or len(lines) >= self.BATCH:
            self._drain()
            if self.flush_each:
                self._flush_out()

    def write_all(self, events: Iterable[Event]) -> None:
        """Every event's record (no body, no filter), as ``write`` would: the loop of a plain
        ``decode --format jsonl``, with the per-event calls of ``to_record`` and ``write`` inlined."""
        if self.flush_each:
            for ev in events:
                self.write(ev, ev.to_record())
            return
        makers: dict[type, Callable[[Event], dict[str, Any]]] = {}
        encode, opt, batch = orjson.dumps, LINE_OPTIONS, self.BATCH
        lines = self._lines
        append = lines.append
        for ev in events:
            make = makers.get(type(ev))
            if make is None:
                make = makers[type(ev)] = record_maker(type(ev))
            append(encode(make(ev), default=default, option=opt))
            if len(lines) >= batch:
                self._sink(b"".join(lines))
                lines.clear()

    def write_bytes(self, chunks: Iterable[bytes]) -> None:
        """JSON lines already written (by the native core), passed through as they come."""
        self._drain()
        sink = self._sink
        for chunk in chunks:
            sink(chunk)
            if self.flush_each:
                self._flush_out()

    def flush(self) -> None:
        """Write and flush what is collected (live capture: once per batch, not per line)."""
        self._drain()
        self._flush_out()

    def _drain(self) -> None:
        if self._lines:
            self._sink(b"".join(self._lines))
            self._lines.clear()

    def close(self) -> None:
        self._drain()
        self._flush_out()


class JsonWriter(Writer):
    def __init__(self, out: TextIO, body: str = "none") -> None:
        super().__init__(out, body)
        self.first = True
        out.write("[")

    def write(self, ev: Event, rec: dict[str, Any]) -> None:
        self.out.write(("\n" if self.first else ",\n") + dumps(rec))
        self.first = False

    def close(self) -> None:
        self.out.write("\n]\n")
        super().close()


class CsvWriter(Writer):
    def __init__(self, out: TextIO, body: str = "none") -> None:
        super().__init__(out, body)
        self.csv = csv.writer(out)
        self.csv.writerow(CSV_COLUMNS)

    def write(self, ev: Event, rec: dict[str, Any]) -> None:
        row = []
        for col in CSV_COLUMNS:
            if col == "summary":
                row.append(summary(ev))
            elif col in ("args", "properties"):
                v = rec.get(col)
                row.append(dumps(v) if v else "")
            else:
                v = rec.get(col)
                row.append("" if v is None else v)
        self.csv.writerow(row)


class TableWriter(Writer):
    """tshark-like text lines: packet, relative time, connection, direction, channel, summary."""

    def __init__(self, out: TextIO, body: str = "none") -> None:
        super().__init__(out, body)
        self.t0: float | None = None

    def write(self, ev: Event, rec: dict[str, Any]) -> None:
        if self.t0 is None:
            self.t0 = ev.ts
        d = {"c2s": "C→S", "s2c": "S→C"}.get(ev.dir or "", "   ")
        ch = "" if ev.channel is None else str(ev.channel)
        self.out.write(f"{ev.packet:>7} {ev.ts - self.t0:>11.6f} {ev.conn:>4} {d} {ch:>5}  {summary(ev)}\n")


WRITERS: dict[str, Callable[..., Writer]] = {
    "jsonl": JsonlWriter, "json": JsonWriter, "csv": CsvWriter, "table": TableWriter,
}  # fmt: skip


def clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int((ts % 1) * 1e6):06d}"


__all__ = ["WRITERS", "Writer", "clock", "record"]

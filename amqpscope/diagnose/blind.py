"""What the capture did not show, gathered for the top of ``diagnose``, ``stats`` and ``report``.

The findings of severity ``not-seen`` (the core's ``validate/rules/blind.rs``: gaps, mid-stream
starts, undecrypted TLS, a truncated file; the CLI's ``tls.keylog-unmatched``) are grouped by rule
into one ``Blindness`` each, in a fixed order: the worst blindness first. An answer built on a
capture with any of them must say so before its causes, and never "nothing wrong".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..events import Connection, Event, Finding
from ..validate.findings import BLIND_RULES, not_seen

MAX_ITEMS = 50  # findings kept per rule (every one is counted)


def _n(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


# rule -> what a count of its connections is called
_TITLES = {
    "capture.truncated": ("the capture file is truncated", "the capture files are truncated"),
    "tls.keylog-unmatched": ("the TLS key log matches no connection", "the TLS key logs match no connection"),
    "tls.undecrypted": ("TLS connection not decrypted", "TLS connections not decrypted"),
    "capture.midstream-start": ("connection seen from its middle", "connections seen from their middle"),
    "capture.gap": ("connection with bytes missing from the capture", "connections with bytes missing from the capture"),
}  # fmt: skip
_RUN_WIDE = ("capture.truncated", "tls.keylog-unmatched")  # about the input, not about a connection
_OF_THE_RUN = ("tls.keylog-unmatched",)  # judged over every file of the run: no file of its own


@dataclass(frozen=True, slots=True)
class Item:
    """One not-seen finding, as shown under its rule."""

    conn: int  # -1: the whole capture
    packet: int
    packets: tuple[int, ...]
    message: str
    client: str | None = None  # "ip:port → ip:port" when the connection is known
    file: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {"conn": self.conn, "client": self.client, "packet": self.packet, "packets": list(self.packets),
                "message": self.message, **({"file": self.file} if self.file is not None else {})}  # fmt: skip


@dataclass(slots=True)
class Blindness:
    """Every not-seen finding of one rule."""

    kind = "not-seen"
    rule: str
    count: int = 0
    connections: set[int] = field(default_factory=set)
    items: list[Item] = field(default_factory=list)

    @property
    def what(self) -> str:
        """'2 TLS connections not decrypted'."""
        one, many = _TITLES.get(self.rule, (self.rule, self.rule))
        if self.rule in _RUN_WIDE:
            return one if self.count == 1 else many
        n = len(self.connections)
        return f"{n} {one if n == 1 else many}"

    @property
    def summary(self) -> str:
        """The findings' own words, one after the other (the first few)."""
        text = "; ".join(i.message for i in self.items[:3])
        more = self.count - min(3, len(self.items))
        return text + (f"; and {more} more" if more > 0 else "")

    def to_record(self) -> dict[str, Any]:
        return {"kind": "not-seen", "rule": self.rule, "what": self.what, "count": self.count,
                "connections": sorted(self.connections), "summary": self.summary,
                "items": [i.to_record() for i in self.items]}  # fmt: skip


class BlindSpots:
    """Feed it a run's events (the not-seen findings and the connections they name); ``result``
    is what was not seen, the worst first."""

    def __init__(self) -> None:
        self.by_rule: dict[str, Blindness] = {}
        self.file: str | None = None
        self.offset = 0  # added to connection ids (several files)
        # the endpoints of open connections, and of the one that closed last: a connection's
        # not-seen findings come right after its close
        self._who: dict[int, str] = {}
        self._closed: tuple[int, str | None] = (-1, None)

    def feed(self, ev: Event) -> bool:
        """Take one event; True when it is a not-seen finding (kept here, for nothing else)."""
        t = type(ev)
        if t is Connection:
            if ev.state == "open":  # type: ignore[attr-defined]
                self._who[ev.conn] = f"{ev.client} → {ev.server}"  # type: ignore[attr-defined]
            else:
                self._closed = (ev.conn, self._who.pop(ev.conn, None))
        elif t is Finding and not_seen(ev):  # type: ignore[arg-type]
            self.add(ev)  # type: ignore[arg-type]
            return True
        return False

    def add(self, f: Finding) -> None:
        b = self.by_rule.get(f.rule)
        if b is None:
            b = self.by_rule[f.rule] = Blindness(f.rule)
        b.count += 1
        conn = f.conn + self.offset if f.conn >= 0 else -1
        if conn >= 0:
            b.connections.add(conn)
        if len(b.items) < MAX_ITEMS:
            who = self._closed[1] if self._closed[0] == f.conn else self._who.get(f.conn)
            file = None if f.rule in _OF_THE_RUN else self.file
            b.items.append(Item(conn, f.packet, tuple(f.packets), f.message, who, file))

    def next_file(self, name: str | None, offset: int = 0) -> None:
        self.file, self.offset = name, offset
        self._who, self._closed = {}, (-1, None)

    def result(self) -> list[Blindness]:
        order = {r: i for i, r in enumerate(BLIND_RULES)}
        return sorted(self.by_rule.values(), key=lambda b: order.get(b.rule, len(order)))

    def records(self) -> list[dict[str, Any]]:
        return [b.to_record() for b in self.result()]


def lines(records: list[dict[str, Any]]) -> list[str]:
    """Rich markup for the "not seen" section: a heading, then per rule its count and findings."""
    # rich only here: the diagnoser itself runs on Spark executors, whose packed environment has no rich
    from rich.markup import escape

    if not records:
        return []
    out = ["[bold magenta]not seen[/] (the capture does not show everything: what follows covers only what it shows)"]
    for r in records:
        out.append(f"  [magenta]{escape(r['what'])}[/] [dim]({r['rule']})[/]")
        for i in r["items"]:
            where = f"{i['file']}: " if i.get("file") else ""
            conn = "" if i["conn"] < 0 else f"conn {i['conn']}" + (f" {i['client']}" if i.get("client") else "") + ": "
            out.append(f"    {escape(where + conn + i['message'])}")
        more = r["count"] - len(r["items"])
        if more > 0:
            out.append(f"    … and {more} more")
    return out

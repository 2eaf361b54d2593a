"""Who may send a method (chassis) and which reply answers which request (``<response>``)."""

from __future__ import annotations

from typing import Any

from amqpscope.dissect import errata
from amqpscope.dissect.spec import Spec
from amqpscope.events import Finding, Frame

from .findings import VIOLATION, WARNING, Catalogue
from .state import ChanState, Pending

CLOSES = frozenset({"connection.close", "channel.close"})


class Pairing:
    def __init__(self, spec: Spec) -> None:
        self.senders: dict[str, frozenset[str]] = {}
        self.requests: dict[str, frozenset[str]] = {}
        self.no_wait: dict[str, str] = {}  # method -> its no-wait argument name
        # the spec's mistakes are corrected in one place (dissect/errata.py)
        for m in spec.methods():
            name = m.full_name
            self.senders[name] = errata.senders(m)
            responses = errata.responses(m)
            if responses:
                self.requests[name] = frozenset(responses)
            no_wait = errata.no_wait_field(m)
            if no_wait:
                self.no_wait[name] = no_wait
        self.replies = frozenset(r for rs in self.requests.values() for r in rs)

    def wrong_direction(self, name: str, d: str) -> bool:
        dirs = self.senders.get(name)
        return bool(dirs) and d not in dirs  # type: ignore[operator]

    def nowait(self, name: str, args: dict[str, Any] | None) -> bool:
        key = self.no_wait.get(name)
        return bool(key and args and args.get(key))

    def check(self, cat: Catalogue, ch: ChanState, ev: Frame, name: str, out: list[Finding]) -> bool:
        """Pair replies with requests; True when a finding claimed the frame."""
        d = ev.dir or ""
        peer = "s2c" if d == "c2s" else "c2s"
        claimed = False
        if name in self.replies:
            fifo = ch.pending[peer]
            while fifo and fifo[0].optional and name not in fifo[0].replies:
                fifo.popleft()  # an optional reply that never came (server-sent cancel)
            if not fifo:
                out.append(cat.finding(ev, "sync.unexpected-reply", VIOLATION, f"{name} answers no outstanding request"))
                claimed = True
            elif name not in fifo[0].replies:
                head = fifo[0]
                out.append(cat.finding(ev, "sync.wrong-reply", VIOLATION,
                                       f"{name} in reply to {head.method} (packet {head.packet}), which expects "
                                       f"{' or '.join(sorted(head.replies))}", packets=(head.packet, ev.packet)))
                claimed = True
                if any(name in p.replies for p in fifo):  # a reply to a later request: the earlier ones were skipped
                    while name not in fifo[0].replies:
                        fifo.popleft()
                    fifo.popleft()
            else:
                fifo.popleft()
        replies = self.requests.get(name)
        if replies is not None and not self.nowait(name, ev.args):
            fifo = ch.pending[d]
            optional = name == "basic.cancel" and d == "s2c"
            if name in CLOSES:
                fifo.clear()  # a close abandons whatever was outstanding
            else:
                while fifo and fifo[0].optional:
                    fifo.popleft()
                if fifo and not optional and not claimed:
                    # the spec lets a peer pipeline ("SHOULD wait … MAY implement asynchronously");
                    # RabbitMQ answers both, so this is a warning
                    head = fifo[0]
                    out.append(cat.finding(ev, "sync.pipelined", WARNING,
                                           f"{name} sent before {head.method} (packet {head.packet}) was answered",
                                           packets=(head.packet, ev.packet)))
            fifo.append(Pending(name, replies, ev.packet, optional, ev.args))
        return claimed

"""Which close answers which violation: causality, not proximity.

The validator holds a violation until the peer's next close and names that close in the finding's
``peer_reaction`` whatever it says. Here a close answers a violation only when it is the peer's
first close on the violation's channel (or of the connection) after it, and it fits: the close
names the violating frame's method (its class and method id) or answers that very request (the
pending synchronous request it closes for), and its reply code is the rule's (or RabbitMQ's own
answer to it). A close with another code on another request answers nothing: the reaction is
"none seen". Everything is read from structured fields (packets, channels, ids, codes), never
from the text of a finding.
"""

from __future__ import annotations

from ..events import Finding
from .facts import Close, ConnFacts


def answering(facts: ConnFacts, f: Finding) -> Close | None:
    """The close that answers violation ``f``, or None."""
    if f.dir is None:
        return None
    ch = f.channel or 0
    ids = facts.sent.get((f.dir, ch, f.packet), set())
    for c in facts.closes:
        if c.by == f.dir or c.packet < f.packet or c.channel not in (ch, 0):
            continue
        # the peer's first close that reaches this channel after the violation: fitting or not, a
        # later close cannot be its answer (the channel or connection was closed by then)
        on_request = c.request is not None and c.request.packet == f.packet and (c.request.channel or 0) == ch
        names_it = c.class_id == 0 or (c.class_id, c.method_id) in ids
        code = c.code in {f.code, f.rabbitmq_code} - {None}
        return c if names_it and (code or on_request) else None
    return None


def link(facts: ConnFacts) -> None:
    """Fill each close's ``explained_by`` with the violations it answers (idempotent). A close
    that names an asynchronous method answers the violating frame of it, not a later one of the
    same method (publishes pipelined behind the bad one): that frame becomes its request."""
    for c in facts.closes:
        c.explained_by.clear()
    for f in facts.violations:
        close = answering(facts, f)
        if close is None:
            continue
        close.explained_by.append(f)
        if close.class_id and (close.request is None or close.request.packet != f.packet):
            ch, ids = f.channel or 0, (close.class_id, close.method_id)
            close.request = next((fr for fr in facts.recent if fr.packet == f.packet and (fr.channel or 0) == ch
                                  and (fr.class_id, fr.method_id) == ids), close.request)  # fmt: skip

"""Frame rules (spec §4.2.3-4.2.7, checklist §6): frame types, channel 0, sizes, content order."""

from __future__ import annotations

from amqpscope.dissect.spec import Spec
from amqpscope.events import Finding, Frame, Malformed

from .findings import DEVIATION, VIOLATION, WARNING, Catalogue
from .state import ConnState

# frame type names the session uses for each spec constant (0-9's out-of-band frames included)
_TYPE_NAMES = {"frame-method": "method", "frame-header": "header", "frame-body": "body",
               "frame-heartbeat": "heartbeat", "frame-oob-method": "oob-method",
               "frame-oob-header": "oob-header", "frame-oob-body": "oob-body", "frame-trace": "trace"}  # fmt: skip


def frame_types(spec: Spec) -> frozenset[str]:
    """The frame types the spec defines, from its ``frame-*`` constants."""
    return frozenset(_TYPE_NAMES[n] for n in spec.constants if n in _TYPE_NAMES) or frozenset(
        ("method", "header", "body", "heartbeat"))


def malformed(cat: Catalogue, ev: Malformed) -> Finding:
    rid = "frame.end" if "frame-end" in ev.reason else "frame.malformed"
    return cat.finding(ev, rid, VIOLATION, ev.reason)


def check_frame(cat: Catalogue, types: frozenset[str], min_size: int, cs: ConnState, ev: Frame,
                out: list[Finding]) -> None:  # fmt: skip
    """Rules any frame is subject to, whatever the state of its channel."""
    t = ev.type
    ch = ev.channel or 0
    if t not in types:
        out.append(cat.finding(ev, "frame.type", VIOLATION, f"frame type {t} is not defined by the spec"))
        return
    if t == "heartbeat":
        if ch != 0:
            out.append(cat.finding(ev, "frame.heartbeat-channel", VIOLATION, f"heartbeat on channel {ch}"))
        if ev.size:
            out.append(cat.finding(ev, "frame.heartbeat-size", VIOLATION, f"heartbeat with a {ev.size}-octet payload"))
        return
    if t == "method":
        if ev.class_id == 10 and ch != 0:
            out.append(cat.finding(ev, "frame.connection-channel", VIOLATION, f"{ev.method} on channel {ch}"))
        elif ev.class_id != 10 and ch == 0:
            out.append(cat.finding(ev, "frame.channel-zero", VIOLATION, f"{ev.method} on channel 0"))
    elif ch == 0:
        out.append(cat.finding(ev, "frame.channel-zero", VIOLATION, f"content {t} frame on channel 0"))
    total = ev.size + 8  # frame-max counts the 7-octet header and the frame-end octet
    if cs.tuned:
        if cs.frame_max and total > cs.frame_max:
            # RabbitMQ accepts a payload of up to frame-max (8 octets of slack, FRAME_SIZE_FUDGE) and
            # rabbitmq-c sends body frames that big: the letter of the spec is broken, brokers accept it
            sev = DEVIATION if ev.size <= cs.frame_max else VIOLATION
            out.append(cat.finding(ev, "frame.max-size", sev,
                                   f"frame of {total} octets exceeds the negotiated frame-max {cs.frame_max}"))
        if cs.channel_max and ch > cs.channel_max and ev.method == "channel.open":
            # the client picks channel numbers: judged once, where it opens the channel
            out.append(cat.finding(ev, "frame.channel-max", VIOLATION,
                                   f"channel {ch} is above the negotiated channel-max {cs.channel_max}"))
    elif cs.started and total > min_size:
        # the rule (tune frame-max "minimum") obliges receivers to accept up to frame-min-size, it
        # does not forbid more: a warning. RabbitMQ < 4.1 refuses it (501), 4.1 accepts up to 8192.
        out.append(cat.finding(ev, "frame.min-size", WARNING,
                               f"frame of {total} octets before tune-ok; peers need only accept "
                               f"frame-min-size ({min_size})"))  # fmt: skip


def check_content(cat: Catalogue, cs: ConnState, ev: Frame, content_method: bool, out: list[Finding]) -> None:
    """Content order per (direction, channel): method, one header, bodies summing to body-size."""
    key = (ev.dir or "", ev.channel or 0)
    cur = cs.content.get(key)
    t = ev.type
    if cur is None and cs.content_unsure and key not in cs.content_fresh:
        if t == "method":
            cs.content_fresh.add(key)  # from here on this channel's content order is known again
        else:
            return  # the rest of a message whose start a gap swallowed
    if t == "method":
        if cur is not None:
            what = "content header" if cur[1] < 0 else f"{cur[1]} more body octets"
            out.append(cat.finding(ev, "content.sequence", VIOLATION, f"{ev.method} while {what} were due"))
            del cs.content[key]
        if content_method:
            cs.content[key] = [ev.class_id or 0, -1]
    elif t == "header":
        if cur is None or cur[1] >= 0:
            why = "no content method before it" if cur is None else "a second header before the body was complete"
            out.append(cat.finding(ev, "content.sequence", VIOLATION, f"content header with {why}"))
            cs.content.pop(key, None)
            return
        if ev.class_id != cur[0]:
            out.append(cat.finding(ev, "content.class-id", VIOLATION,
                                   f"content header for class {ev.class_id} after a class {cur[0]} method"))
        if not ev.body_size:
            del cs.content[key]
        else:
            cur[1] = ev.body_size
    elif t == "body":
        if cur is None or cur[1] < 0:
            why = "no content method before it" if cur is None else "no content header before it"
            out.append(cat.finding(ev, "content.sequence", VIOLATION, f"body frame with {why}"))
            cs.content.pop(key, None)
            return
        if ev.size > cur[1]:
            out.append(cat.finding(ev, "content.body-size", VIOLATION,
                                   f"body frame of {ev.size} octets where only {cur[1]} remained of the body-size"))
            del cs.content[key]
            return
        cur[1] -= ev.size
        if cur[1] == 0:
            del cs.content[key]

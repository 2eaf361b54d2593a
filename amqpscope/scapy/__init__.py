"""AMQP 0-9-1 (and 0-9, and any ``--spec`` file) as Scapy layers, built from the same compiled
spec tables the native core executes: dissect captures in Scapy, craft frames.

The layers of the default spec (0-9-1 with RabbitMQ's extensions) are built when this module is
imported and bound to TCP port 5672::

    from scapy.all import rdpcap, sniff, TCPSession, wrpcap
    from amqpscope.scapy import AMQP, BasicPublish, BasicHeader, AMQPBody

    frames = AMQP(channel=1) / BasicPublish(exchange="x", routing_key="k")
    frames /= AMQP(channel=1) / BasicHeader(content_type="text/plain")
    frames /= AMQP(channel=1) / AMQPBody(load=b"hello")
    bytes(frames)                               # three frames; sizes, frame-ends, body_size filled in
    sniff(offline="capture.pcap", session=TCPSession)   # frames spread over segments reassembled

Names: ``AMQP`` (a frame), ``AMQPProtocolHeader``, one layer per method in CamelCase
(``ConnectionStartOk``, ``BasicPublish``…), ``BasicHeader`` (a content header with basic's
properties; other classes with properties likewise), ``AMQPContentHeader`` (a class without
properties), ``AMQPBody``, ``AMQPHeartbeat`` and ``AMQPRaw`` (what could not be dissected, with
``reason``). Other specs: ``layers_for("spec.xml")`` or :func:`build_layers`; other ports:
``bind_port(5673)``.
"""

from __future__ import annotations

from pathlib import Path

from scapy.packet import Packet

from amqpscope.dissect.codec import get_codec

from .layers import (
    BodyLayer,
    ContentHeaderLayer,
    FrameBodyLayer,
    FrameLayer,
    HeartbeatLayer,
    Layers,
    MethodLayer,
    ProtocolHeaderLayer,
    RawLayer,
    SegmentLayer,
    build_layers,
    frames,
)
from .table import Array, Table, TableError, Typed, encode_table, encode_table_body, encode_value

AMQP_PORT = 5672


def layers_for(spec_path: str | Path | None = None) -> Layers:
    """The layers of a spec file (default: the shipped 0-9-1 with RabbitMQ's extensions), made
    once per spec; not bound to any port."""
    return get_codec(spec_path).layers


DEFAULT = layers_for()
DEFAULT.bind([AMQP_PORT])
_NAMED = DEFAULT.named()


def bind_port(port: int, layers: Layers = DEFAULT) -> None:
    """Dissect TCP traffic to or from ``port`` as AMQP too (5672 is bound on import)."""
    layers.bind([port])


def unbind_port(port: int, layers: Layers = DEFAULT) -> None:
    layers.unbind([port])


def __getattr__(name: str) -> type[Packet]:
    """The default spec's layers by name: ``AMQP``, ``BasicPublish``, ``BasicHeader``, …"""
    try:
        return _NAMED[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted([*globals(), *_NAMED])


__all__ = [
    "AMQP_PORT",
    "DEFAULT",
    "Array",
    "BodyLayer",
    "ContentHeaderLayer",
    "FrameBodyLayer",
    "FrameLayer",
    "HeartbeatLayer",
    "Layers",
    "MethodLayer",
    "ProtocolHeaderLayer",
    "RawLayer",
    "SegmentLayer",
    "Table",
    "TableError",
    "Typed",
    "bind_port",
    "build_layers",
    "encode_table",
    "encode_table_body",
    "encode_value",
    "frames",
    "layers_for",
    "unbind_port",
    *_NAMED,
]

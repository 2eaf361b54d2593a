"""amqpscope: an AMQP 0-9-1 protocol analyzer for packet captures and live traffic."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .pipeline import EventStream, decode_packets, read

__all__ = ["EventStream", "__version__", "decode_packets", "read"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # the pipeline (and the native core) are imported on first use, so `amqpscope --help` and
    # the commands that never decode do not pay for them
    if name in ("EventStream", "decode_packets", "read"):
        from . import pipeline

        return getattr(pipeline, name)
    raise AttributeError(f"module 'amqpscope' has no attribute {name!r}")

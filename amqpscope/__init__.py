"""amqpscope: an AMQP 0-9-1 protocol analyzer for packet captures and live traffic."""

from .pipeline import EventStream, decode_packets, read

__all__ = ["EventStream", "__version__", "decode_packets", "read"]
__version__ = "0.1.0"

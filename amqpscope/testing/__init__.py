"""Test infrastructure: a private loopback-only RabbitMQ broker and a loopback recorder."""

from amqpscope.testing.broker import BrokerError, PrivateBroker, rabbitmq_available
from amqpscope.testing.sniffer import LoopbackRecorder, RecorderError, tcpdump_available

__all__ = [
    "BrokerError",
    "LoopbackRecorder",
    "PrivateBroker",
    "RecorderError",
    "rabbitmq_available",
    "tcpdump_available",
]

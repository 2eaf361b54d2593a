"""A real AMQP-over-TLS client session (pika), writing the NSS key log, for the TLS tests.

Run as a process (``python -m amqpscope.testing.tls_client …``) so that an ``OPENSSL_CONF`` can
force a TLS 1.3 suite (Python's ssl module has no call for TLS 1.3 suites) and each run has its
own key log. Prints one JSON line: messages published, confirmed and fetched per connection.

The session: a queue, ``--messages`` publishes with confirms (every third body larger than
128 KiB), each fetched back with basic.get and acked, then a channel error (a passive declare of a
missing queue: 404) and a clean close.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import ssl
import sys
from typing import Any

import pika

BIG = 130 * 1024


class _Context(ssl.SSLContext):
    """Keeps the sockets it made (to take their session) and resumes a session when given one."""

    resume: ssl.SSLSession | None = None
    first_session: ssl.SSLSession | None = None
    sockets: list[ssl.SSLSocket]

    def wrap_socket(self, *args: Any, **kwargs: Any) -> ssl.SSLSocket:  # type: ignore[override]
        if self.resume is not None:
            kwargs["session"] = self.resume
        sock = super().wrap_socket(*args, **kwargs)
        self.sockets.append(sock)
        return sock


def context(ca: str, keylog: str | None, tls12: bool, ciphers: str | None) -> _Context:
    ctx = _Context(ssl.PROTOCOL_TLS_CLIENT)
    ctx.sockets = []
    ctx.load_verify_locations(ca)
    if keylog:
        ctx.keylog_filename = keylog
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if ciphers:
        ctx.set_ciphers(ciphers)
    return ctx


def session(port: int, ctx: _Context, messages: int, queue: str) -> dict[str, int]:
    params = pika.ConnectionParameters(
        "127.0.0.1", port, ssl_options=pika.SSLOptions(ctx, server_hostname="localhost"), heartbeat=0
    )
    conn = pika.BlockingConnection(params)
    ch = conn.channel()
    ch.confirm_delivery()
    ch.queue_declare(queue, auto_delete=False)
    published = got = 0
    for i in range(messages):
        body = (b"x" * BIG) if i % 3 == 0 else f"message {i}".encode()
        ch.basic_publish("", queue, body, pika.BasicProperties(content_type="text/plain", message_id=str(i)))
        published += 1
    for _ in range(messages):
        method, _props, _body = ch.basic_get(queue)
        if method is None:
            break
        ch.basic_ack(method.delivery_tag)
        got += 1
    ch.queue_delete(queue)
    with contextlib.suppress(pika.exceptions.ChannelClosedByBroker):
        ch.queue_declare("amqpscope.tls.missing", passive=True)  # a channel error: 404
    out = {"published": published, "got": got}
    if ctx.resume is not None:
        out["resumed"] = int(bool(ctx.sockets[-1].session_reused))
    elif ctx.sockets:
        ctx.first_session = ctx.sockets[0].session  # taken while the connection is open
    conn.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--keylog", default=None)
    p.add_argument("--tls12", action="store_true")
    p.add_argument("--ciphers", default=None, help="TLS 1.2 cipher list (OpenSSL names)")
    p.add_argument("--messages", type=int, default=10)
    p.add_argument("--connections", type=int, default=1)
    p.add_argument("--resume", action="store_true", help="resume the first connection's session")
    p.add_argument("--no-keylog-after", type=int, default=None, help="connections after N write no key log")
    a = p.parse_args(argv)
    results = []
    ctx = context(a.ca, a.keylog, a.tls12, a.ciphers)
    for n in range(a.connections):
        if a.no_keylog_after is not None and n >= a.no_keylog_after:
            ctx = context(a.ca, None, a.tls12, a.ciphers)
        if a.resume and n > 0:
            ctx.resume = ctx.first_session
        out = session(a.port, ctx, a.messages, f"amqpscope.tls.{n}")
        results.append(out)
    json.dump(results, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Record the large benchmark capture bench/data/large.pcap.

A private loopback RabbitMQ (``PrivateBroker``), a ``LoopbackRecorder`` on its port,
then, at the same time:

* publisher processes (pika ``SelectConnection``, confirm.select) that keep a window of
  unconfirmed publishes in flight (pipelined: never wait for one confirm);
* one consumer process (basic.qos prefetch, basic.consume, manual ``basic.ack`` with
  multiple=1 every ``--ack-every`` deliveries).

``--tls``: the same workload over TLS 1.3 with TLS_AES_128_GCM_SHA256, forced by the broker (its
``ssl_options`` allow only that version and suite); every client process writes its secrets to the
NSS key log ``OUT.keys`` (``SSLContext.keylog_filename``), default ``bench/data/large-tls13.pcap``.

Usage: sudo python3 bench/record_large.py [--messages 300000] [--publishers 2] [--out FILE] [--mtu 1500] [--tls]
Prints a JSON summary (sizes, packet and frame counts, timings).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pika  # noqa: E402

from amqpscope.testing.broker import PrivateBroker  # noqa: E402
from amqpscope.testing.sniffer import LoopbackRecorder, count_amqp_frames  # noqa: E402

QUEUE = "amqpscope.bench"
HOST = "127.0.0.1"
TLS_SUITE = "TLS_AES_128_GCM_SHA256"

Tls = tuple[str, str] | None
"""(CA file, key log file) of a TLS run; None in plaintext."""


def _params(port: int, name: str, tls: Tls = None) -> pika.ConnectionParameters:
    extra: dict[str, Any] = {}
    if tls is not None:
        ctx = ssl.create_default_context(cafile=tls[0])
        ctx.keylog_filename = tls[1]  # each process appends its own connection's secrets
        extra["ssl_options"] = pika.SSLOptions(ctx, server_hostname="localhost")
    return pika.ConnectionParameters(
        host=HOST,
        port=port,
        credentials=pika.PlainCredentials("guest", "guest"),
        heartbeat=0,
        connection_attempts=1,
        client_properties={"connection_name": name},
        **extra,
    )


def publisher(port: int, index: int, count: int, window: int, result: Any, tls: Tls = None) -> None:
    """Publish ``count`` messages with confirms, at most ``window`` unconfirmed."""
    props = pika.BasicProperties(content_type="application/json", delivery_mode=1)
    state = {"sent": 0, "confirmed": 0, "nacked": 0, "multiple": 0}
    chans: list[Any] = []
    conn: pika.SelectConnection

    def pump() -> None:
        ch = chans[0]
        while state["sent"] < count and state["sent"] - state["confirmed"] < window:
            i = state["sent"]
            ch.basic_publish("", QUEUE, b'{"p":%d,"i":%d}' % (index, i), props)
            state["sent"] += 1

    def on_confirm(frame: Any) -> None:
        m = frame.method
        if isinstance(m, pika.spec.Basic.Nack):
            state["nacked"] += 1
        if m.multiple:
            state["multiple"] += 1
        state["confirmed"] = max(state["confirmed"], m.delivery_tag)
        if state["confirmed"] >= count:
            chans[0].close()
        else:
            pump()

    def on_channel(ch: Any) -> None:
        chans.append(ch)
        ch.add_on_close_callback(lambda *_a: conn.close())
        ch.confirm_delivery(on_confirm, callback=lambda _f: ch.queue_declare(QUEUE, callback=lambda _f2: pump()))

    conn = pika.SelectConnection(
        _params(port, f"bench-publisher-{index}", tls),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_open_error_callback=lambda _c, err: conn.ioloop.stop(),
        on_close_callback=lambda *_a: conn.ioloop.stop(),
    )
    conn.ioloop.start()
    result.put(("publisher", index, state))


def consumer(port: int, total: int, prefetch: int, ack_every: int, ready: Any, result: Any, tls: Tls = None) -> None:
    """Consume ``total`` messages, acking with multiple=1 every ``ack_every``."""
    state: dict[str, Any] = {"received": 0, "acks": 0}
    chans: list[Any] = []
    conn: pika.SelectConnection

    def on_message(ch: Any, method: Any, _props: Any, _body: bytes) -> None:
        state["received"] += 1
        if state["received"] % ack_every == 0 or state["received"] >= total:
            ch.basic_ack(method.delivery_tag, multiple=True)
            state["acks"] += 1
        if state["received"] >= total:
            ch.basic_cancel(state["ctag"], callback=lambda _f: ch.queue_delete(QUEUE, callback=lambda _f2: ch.close()))

    def on_qos(_f: Any) -> None:
        state["ctag"] = chans[0].basic_consume(QUEUE, on_message)
        ready.set()

    def on_declared(_f: Any) -> None:
        chans[0].basic_qos(prefetch_count=prefetch, callback=on_qos)

    def on_channel(ch: Any) -> None:
        chans.append(ch)
        ch.add_on_close_callback(lambda *_a: conn.close())
        ch.queue_declare(QUEUE, callback=on_declared)

    conn = pika.SelectConnection(
        _params(port, "bench-consumer", tls),
        on_open_callback=lambda c: c.channel(on_open_callback=on_channel),
        on_open_error_callback=lambda _c, err: conn.ioloop.stop(),
        on_close_callback=lambda *_a: conn.ioloop.stop(),
    )
    conn.ioloop.start()
    result.put(("consumer", 0, state))


def packet_count(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        f.read(24)
        while True:
            rh = f.read(16)
            if len(rh) < 16:
                return n
            f.seek(int.from_bytes(rh[8:12], "little"), 1)
            n += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=300_000, help="total messages (default 300000)")
    ap.add_argument("--publishers", type=int, default=2)
    ap.add_argument("--window", type=int, default=2000, help="unconfirmed publishes in flight per publisher")
    ap.add_argument("--prefetch", type=int, default=2000)
    ap.add_argument("--ack-every", type=int, default=250)
    ap.add_argument("--out", type=Path, default=None,
                    help="capture file (default bench/data/large.pcap, large-tls13.pcap with --tls)")
    ap.add_argument("--tls", action="store_true", help=f"over TLS 1.3 ({TLS_SUITE}, forced by the broker); "
                    "the key log is written to OUT.keys")  # fmt: skip
    ap.add_argument("--no-count", action="store_true", help="skip the AMQP frame count")
    ap.add_argument("--mtu", type=int, default=None,
                    help="loopback MTU while recording (1500: Ethernet-sized segments, reordering); restored after")
    args = ap.parse_args()
    if args.out is None:
        args.out = ROOT / "bench" / "data" / ("large-tls13.pcap" if args.tls else "large.pcap")
    if args.mtu is None:
        return record(args)
    before = Path("/sys/class/net/lo/mtu").read_text().strip()
    subprocess.run(["ip", "link", "set", "lo", "mtu", str(args.mtu)], check=True)
    try:
        return record(args)
    finally:
        subprocess.run(["ip", "link", "set", "lo", "mtu", before], check=True)


def record(args: argparse.Namespace) -> int:

    args.out.parent.mkdir(parents=True, exist_ok=True)
    gitignore = args.out.parent / ".gitignore"
    if args.out.parent == ROOT / "bench" / "data" and not gitignore.exists():
        gitignore.write_text("*\n!.gitignore\n")

    per = [args.messages // args.publishers] * args.publishers
    per[0] += args.messages - sum(per)
    ctx = mp.get_context("fork")
    result: Any = ctx.Queue()
    summary: dict[str, Any] = {"messages": args.messages, "publishers": args.publishers}
    keys = args.out.with_name(args.out.name.removesuffix(".pcap") + ".keys")
    with PrivateBroker(tls=args.tls, tls_versions=("tlsv1.3",), tls_ciphers=(TLS_SUITE,)) as broker:
        port = broker.tls_port if args.tls else broker.port
        tls: Tls = None
        if args.tls:
            keys.unlink(missing_ok=True)
            tls = (str(broker.ca_file), str(keys))
            summary["keylog"] = str(keys)
        summary["broker_startup_s"] = round(broker.startup_seconds, 2)
        summary["port"] = port
        t0 = time.monotonic()
        with LoopbackRecorder(args.out, port, buffer_kib=262144) as rec:
            ready = ctx.Event()
            cons = ctx.Process(
                target=consumer, args=(port, args.messages, args.prefetch, args.ack_every, ready, result, tls)
            )
            cons.start()
            if not ready.wait(30):
                cons.terminate()
                raise SystemExit("consumer did not start")
            pubs = [
                ctx.Process(target=publisher, args=(port, i, n, args.window, result, tls)) for i, n in enumerate(per)
            ]
            for p in pubs:
                p.start()
            for p in [*pubs, cons]:
                p.join(timeout=600)
                if p.is_alive():
                    p.terminate()
                    p.join()
        summary["record_s"] = round(time.monotonic() - t0, 2)
        summary["tcpdump_captured"] = rec.packets_captured
        summary["tcpdump_dropped"] = rec.packets_dropped
    states = []
    while not result.empty():
        states.append(result.get())
    summary["clients"] = [{"role": r, "index": i, **s} for r, i, s in sorted(states)]
    summary["file"] = str(args.out)
    summary["size_bytes"] = args.out.stat().st_size
    summary["packets"] = packet_count(args.out)
    if not args.no_count and not args.tls:  # the independent count reads plaintext only
        t1 = time.monotonic()
        frames = count_amqp_frames(args.out)
        summary["count_s"] = round(time.monotonic() - t1, 2)
        summary["amqp_frames"] = frames["frames"]
        summary["frame_counts"] = dict(sorted(frames.items()))
    print(json.dumps(summary, indent=1))
    ok = sum(s.get("received", 0) for r, _i, s in states if r == "consumer") >= args.messages
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

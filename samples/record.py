#!/usr/bin/env python3
"""Record the small sample captures in samples/ from a private loopback RabbitMQ.

Starts a ``PrivateBroker`` (127.0.0.1 only, non-standard port), runs each scenario
with pika while a ``LoopbackRecorder`` (tcpdump -i lo) records the broker's port, and
writes one pcap per scenario plus ``samples/README.md`` with the observed frame counts.

Usage: python3 samples/record.py [--out DIR] [--no-readme]
Needs root (tcpdump) and tools/install-system-deps.sh.
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pika  # noqa: E402
import pika.exceptions  # noqa: E402
from pika.adapters.blocking_connection import BlockingChannel  # noqa: E402

from amqpscope.testing.broker import PrivateBroker  # noqa: E402
from amqpscope.testing.sniffer import LoopbackRecorder, count_amqp_frames  # noqa: E402

HOST = "127.0.0.1"


def _params(
    broker: PrivateBroker, user: str = "guest", password: str = "guest", vhost: str = "/"
) -> pika.ConnectionParameters:
    return pika.ConnectionParameters(
        host=HOST,
        port=broker.port,
        virtual_host=vhost,
        credentials=pika.PlainCredentials(user, password),
        heartbeat=0,
        connection_attempts=1,
        client_properties={"connection_name": "amqpscope-samples"},
    )


# -- scenarios ----------------------------------------------------------------------


def scenario_hello(broker: PrivateBroker) -> dict[str, Any]:
    """Declare a queue, publish 5 messages with properties, consume and ack them."""
    conn = pika.BlockingConnection(_params(broker))
    ch = conn.channel()
    queue = "amqpscope.hello"
    ch.queue_declare(queue, durable=False, auto_delete=False)
    messages: list[tuple[bytes, pika.BasicProperties]] = [
        (
            json.dumps({"greeting": "hello", "n": 1}).encode(),
            pika.BasicProperties(
                content_type="application/json",
                content_encoding="utf-8",
                delivery_mode=2,
                priority=3,
                correlation_id="corr-0001",
                reply_to="amqpscope.replies",
                message_id="msg-0001",
                timestamp=1700000000,
                type="greeting",
                app_id="amqpscope-samples",
                headers={
                    "x-trace-id": "4bf92f3577b34da6a3ce929d0e0e4736",
                    "retries": 0,
                    "ratio": decimal.Decimal("0.25"),
                    "flag": True,
                    "tags": ["a", "b", 3],
                    "nested": {"k": "v", "n": 42},
                    "big": 2**40,
                    "none": None,
                },
            ),
        ),
        (b"hello, world\n", pika.BasicProperties(content_type="text/plain", delivery_mode=1)),
        (
            json.dumps({"greeting": "hola", "n": 3, "unicode": "\u00e9\u00e8\u2713"}).encode(),
            pika.BasicProperties(content_type="application/json", headers={"lang": "es"}),
        ),
        (
            "plain text with caf\u00e9\n".encode(),
            pika.BasicProperties(content_type="text/plain; charset=utf-8", expiration="60000"),
        ),
        (json.dumps([1, 2, 3]).encode(), pika.BasicProperties(content_type="application/json", user_id="guest")),
    ]
    for body, props in messages:
        ch.basic_publish("", queue, body, props)
    ch.basic_qos(prefetch_count=len(messages))
    got = 0
    for method, _props, _body in ch.consume(queue, inactivity_timeout=5):
        if method is None:
            break
        ch.basic_ack(method.delivery_tag)
        got += 1
        if got == len(messages):
            break
    ch.cancel()
    ch.queue_delete(queue)
    ch.close()
    conn.close()
    return {"published": len(messages), "consumed": got}


def scenario_confirms(broker: PrivateBroker, count: int = 50) -> dict[str, Any]:
    """confirm.select then ``count`` pipelined publishes (SelectConnection), wait for acks."""
    queue = "amqpscope.confirms"
    state: dict[str, Any] = {"acked": 0, "acks": 0, "multiple": 0, "nacks": 0}
    errors: list[BaseException] = []
    channels: list[Any] = []
    conn: pika.SelectConnection

    def on_open(c: pika.SelectConnection) -> None:
        c.channel(on_open_callback=on_channel)

    def on_channel(ch: Any) -> None:
        channels.append(ch)
        ch.add_on_close_callback(lambda *_a: conn.close())
        ch.confirm_delivery(on_confirm, callback=lambda _f: ch.queue_declare(queue, callback=on_declared))

    def on_declared(_frame: Any) -> None:
        for i in range(count):
            channels[0].basic_publish(
                "",
                queue,
                f"confirm me {i}".encode(),
                pika.BasicProperties(content_type="text/plain", message_id=f"c-{i:03d}"),
            )

    def on_confirm(frame: Any) -> None:
        method = frame.method
        if isinstance(method, pika.spec.Basic.Nack):
            state["nacks"] += 1
        else:
            state["acks"] += 1
        if method.multiple:
            state["multiple"] += 1
        state["acked"] = max(state["acked"], method.delivery_tag)
        if state["acked"] >= count:
            channels[0].queue_delete(queue, callback=lambda _f: channels[0].close())

    def on_open_error(_conn: Any, err: BaseException) -> None:
        errors.append(err)
        conn.ioloop.stop()

    conn = pika.SelectConnection(
        _params(broker),
        on_open_callback=on_open,
        on_open_error_callback=on_open_error,
        on_close_callback=lambda *_a: conn.ioloop.stop(),
    )
    conn.ioloop.call_later(30, conn.ioloop.stop)
    conn.ioloop.start()
    if errors:
        raise RuntimeError(f"confirms scenario failed: {errors[0]}")
    if state["acked"] < count:
        raise RuntimeError(f"confirms scenario: only {state['acked']} of {count} confirmed")
    return state


def scenario_errors(broker: PrivateBroker) -> dict[str, Any]:
    """404 on a passive declare, basic.return 312, alice (PLAIN) allowed and refused."""
    out: dict[str, Any] = {}
    # 1. guest: passive declare of a missing queue -> channel.close 404 NOT_FOUND.
    conn = pika.BlockingConnection(_params(broker))
    ch: BlockingChannel = conn.channel()
    try:
        ch.queue_declare("amqpscope.no-such-queue", passive=True)
    except pika.exceptions.ChannelClosedByBroker as exc:
        out["passive_declare"] = exc.reply_code
    # 2. mandatory publish without a route -> basic.return 312 NO_ROUTE.
    ch = conn.channel()
    returned: list[int] = []
    ch.add_on_return_callback(lambda _ch, method, _props, _body: returned.append(method.reply_code))
    ch.basic_publish(
        "amq.direct",
        "amqpscope.nowhere",
        b"nobody will get this",
        pika.BasicProperties(content_type="text/plain"),
        mandatory=True,
    )
    deadline = time.monotonic() + 5
    while not returned and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    out["basic_return"] = returned
    ch.close()
    conn.close()
    # 3. alice/s3cret (PLAIN) on vhost 'scope': allowed on alice.*, refused elsewhere (403).
    conn = pika.BlockingConnection(_params(broker, "alice", "s3cret", "scope"))
    ch = conn.channel()
    ch.queue_declare("alice.inbox", auto_delete=True)
    ch.basic_publish("", "alice.inbox", b'{"to": "alice"}', pika.BasicProperties(content_type="application/json"))
    method, _props, _body = ch.basic_get("alice.inbox", auto_ack=True)
    out["alice_get"] = method is not None
    try:
        ch.queue_declare("bob.inbox")
    except pika.exceptions.ChannelClosedByBroker as exc:
        out["alice_refused"] = exc.reply_code
    conn.close()
    # 4. alice with a wrong password -> connection.close 403 ACCESS_REFUSED.
    try:
        pika.BlockingConnection(_params(broker, "alice", "wrong-password", "scope"))
    except pika.exceptions.ProbableAuthenticationError as exc:
        out["bad_password"] = str(exc)[:60]
    except pika.exceptions.AMQPConnectionError as exc:
        out["bad_password"] = type(exc).__name__
    return out


# -- recording ------------------------------------------------------------------------

SCENARIOS: dict[str, tuple[Callable[[PrivateBroker], dict[str, Any]], str]] = {
    "hello": (
        scenario_hello,
        "guest on vhost `/`: queue.declare, 5 basic.publish with properties (a headers table with "
        "string/int/decimal/bool/array/nested-table/64-bit/void values, delivery-mode, priority, "
        "correlation-id, reply-to, message-id, timestamp, type, app-id, expiration, user-id; "
        "content-type application/json and text/plain bodies), basic.qos, basic.consume, 5 "
        "basic.deliver + basic.ack, basic.cancel, queue.delete, channel.close, connection.close.",
    ),
    "confirms": (
        scenario_confirms,
        "guest, pika SelectConnection: confirm.select, queue.declare, 50 pipelined basic.publish "
        "(no wait between them), the broker's basic.ack confirms (some with multiple=1), "
        "queue.delete, channel.close, connection.close.",
    ),
    "errors": (
        scenario_errors,
        "Three connections. (1) guest: passive queue.declare of a missing queue -> channel.close "
        "404 NOT_FOUND; then on a new channel a mandatory basic.publish to amq.direct with an "
        "unbound routing key -> basic.return 312 NO_ROUTE. (2) alice/s3cret with PLAIN "
        "(password `s3cret` is in connection.start-ok's response: redaction test) on vhost "
        "`scope`: declare/publish/get on `alice.inbox`, then queue.declare `bob.inbox` -> "
        "channel.close 403 ACCESS_REFUSED. (3) alice with password `wrong-password` -> "
        "connection.close 403 ACCESS_REFUSED right after start-ok (pika just closes TCP).",
    ),
}


def tshark_summary(path: Path, port: int) -> Counter[str] | None:
    """Method/frame counts as TShark decodes them (None when tshark is missing)."""
    tshark = shutil.which("tshark")
    if tshark is None:
        return None
    res = subprocess.run(
        [
            tshark,
            "-r",
            str(path),
            "-d",
            f"tcp.port=={port},amqp",
            "-Y",
            "amqp",
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-E",
            "separator=|",
            "-e",
            "amqp.type",
            "-e",
            "_ws.col.Info",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    counts: Counter[str] = Counter()
    for line in res.stdout.splitlines():
        types, _info = line.split("|", 1)
        for t in types.split(","):
            counts[{"1": "method", "2": "content-header", "3": "content-body", "8": "heartbeat"}.get(t, t)] += 1
    counts["packets-with-amqp"] = len(res.stdout.splitlines())
    return counts


def packet_count(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        f.read(24)
        while True:
            rh = f.read(16)
            if len(rh) < 16:
                return n
            incl = int.from_bytes(rh[8:12], "little")
            f.seek(incl, 1)
            n += 1


def record_all(out_dir: Path, only: list[str] | None = None) -> dict[str, Any]:
    out_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    with PrivateBroker() as broker:
        version = broker.ctl("version").stdout.strip()
        results["_broker"] = {
            "version": version,
            "port": broker.port,
            "node": broker.node,
            "startup_seconds": round(broker.startup_seconds, 2),
        }
        for name, (func, _desc) in SCENARIOS.items():
            if only and name not in only:
                continue
            path = out_dir / f"{name}.pcap"
            for attempt in range(3):
                with LoopbackRecorder(path, broker.port) as rec:
                    info = func(broker)
                if name != "confirms" or info.get("multiple", 0) > 0:
                    break
                print(f"confirms: no multiple ack on attempt {attempt + 1}, recording again", file=sys.stderr)
            frames = count_amqp_frames(path)
            results[name] = {
                "scenario": info,
                "size": path.stat().st_size,
                "packets": packet_count(path),
                "captured": rec.packets_captured,
                "dropped": rec.packets_dropped,
                "frames": dict(sorted(frames.items())),
                "tshark": dict(sorted((tshark_summary(path, broker.port) or {}).items())),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
            print(
                f"{path}: {results[name]['size']} bytes, {results[name]['packets']} packets, "
                f"{frames['frames']} AMQP frames; {info}",
                file=sys.stderr,
            )
    return results


def _fmt_counts(frames: dict[str, int]) -> str:
    skip = {"frames", "connections"}
    return ", ".join(f"{k} {v}" for k, v in frames.items() if k not in skip and " multiple" not in k)


def write_readme(out_dir: Path, results: dict[str, Any]) -> None:
    b = results["_broker"]
    lines = [
        "# Sample captures",
        "",
        "Small AMQP 0-9-1 captures made by `samples/record.py` (regenerate with "
        "`sudo python3 samples/record.py`; it rewrites the pcaps and this file). Each file is real "
        "traffic between pika and a private RabbitMQ node on the loopback interface, recorded "
        "with `tcpdump -i lo -s 0 -U --immediate-mode -w FILE tcp port PORT` "
        "(`amqpscope.testing.LoopbackRecorder`; Ethernet link type, full packets).",
        "",
        "## Provenance",
        "",
        f"- recorded: {dt.date.today().isoformat()}",
        f"- broker: RabbitMQ {b['version']} ({_pkg_version('rabbitmq-server')}, Erlang "
        f"{_pkg_version('erlang-base')}), a private node `amqpscope-<pid>-0@localhost` started by "
        "`amqpscope.testing.PrivateBroker`: listener 127.0.0.1 only, no plugins, users guest/guest "
        "(vhost `/`) and alice/s3cret (vhost `scope`, configure `^alice\\.`, read/write "
        "`^alice\\.|^amq\\.`); defaults frame_max 131072, channel_max 2047; heartbeats disabled "
        "by the client (heartbeat=0).",
        f"- client: pika {pika.__version__} (Python {sys.version.split()[0]})",
        f"- recorder: {_tool_version(['tcpdump', '--version'])}",
        f"- **TCP port {b['port']}** (the private broker's first free port from 25672; not 5672). "
        "amqpscope detects AMQP on any port; TShark needs "
        f"`tshark -r FILE -d tcp.port=={b['port']},amqp`.",
        "",
        "Counts below come from an independent frame walk (`amqpscope.testing.sniffer."
        "count_amqp_frames`: TCP reassembly per direction, then AMQP frames) and are checked "
        f"against {_tool_version(['tshark', '--version']).split(' (Git')[0]} "
        "(`-T fields -E occurrence=a -e amqp.type`, which does not count the 8-byte protocol header): "
        "the AMQP frame column equals the sum of the last column.",
        "",
        "| file | size | packets | connections | AMQP frames (+ protocol headers) | tshark method/header/body frames |",
        "|---|---|---|---|---|---|",
    ]
    for name in SCENARIOS:
        r = results.get(name)
        if r is None:
            continue
        fr = r["frames"]
        ts = r["tshark"]
        ts_txt = f"{ts.get('method', 0)}/{ts.get('content-header', 0)}/{ts.get('content-body', 0)}" if ts else "n/a"
        lines.append(
            f"| `{name}.pcap` | {r['size']} B | {r['packets']} | {fr.get('connections', 0)} | "
            f"{fr['frames']} (+{fr.get('protocol-header', 0)}) | {ts_txt} |"
        )
    lines.append("")
    for name, (_func, desc) in SCENARIOS.items():
        r = results.get(name)
        if r is None:
            continue
        multiple = {k: v for k, v in r["frames"].items() if " multiple" in k}
        lines += [
            f"### `{name}.pcap`",
            "",
            desc,
            "",
            f"- frames: {_fmt_counts(r['frames'])}",
        ]
        if multiple:
            lines.append("- of those, " + ", ".join(f"{k} {v}" for k, v in multiple.items()))
        lines += [
            f"- scenario result: `{json.dumps(r['scenario'], sort_keys=True)}`",
            f"- sha256: `{r['sha256']}`",
            "",
        ]
    lines += [
        "Client ports, timestamps, server-generated names (amq.ctag-*) and the confirm "
        "batching (how many basic.ack have multiple=1) change from one recording to the next.",
        "",
    ]
    (out_dir / "README.md").write_text("\n".join(lines))


def _pkg_version(pkg: str) -> str:
    res = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True, text=True)
    return f"Debian {pkg} {res.stdout.strip()}" if res.returncode == 0 else pkg


def _tool_version(cmd: list[str]) -> str:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
    except OSError:
        return cmd[0]
    return (res.stdout or res.stderr).splitlines()[0].strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
    parser.add_argument("--no-readme", action="store_true")
    parser.add_argument("--json", type=Path, help="also write the results as JSON here")
    parser.add_argument("scenario", nargs="*", help=f"default: all of {', '.join(SCENARIOS)}")
    args = parser.parse_args()
    unknown = set(args.scenario) - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    results = record_all(args.out, args.scenario or None)
    if not args.no_readme and not args.scenario:
        write_readme(args.out, results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())

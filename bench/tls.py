#!/usr/bin/env python3
"""Decoding AMQP over TLS 1.3 (AES-128-GCM) with a key log, against the same workload in plaintext
and against tshark decrypting it.

Records two captures from a private RabbitMQ with a TLS listener (``PrivateBroker(tls=True)``): a
pika session publishing ``--messages`` messages of ``--size`` bytes and consuming them back, once
over TLS (``SSLContext.keylog_filename`` writes the key log; the suite is forced with an
``OPENSSL_CONF``) and once in plaintext. Then, in one run, the best of ``--repeat``:

* ``amqpscope decode --format jsonl --no-validate`` of the TLS capture with ``--tls-keylog``;
* the same of the plaintext capture;
* ``tshark -o tls.keylog_file:KEYS -Y amqp -T fields -e amqp.method.method``.

Usage: PYTHONPATH=. python bench/tls.py [--messages 300000] [--size 64] [--repeat 3] [--dir DIR]
Targets (issue #21): TLS ≤ 1.5× plaintext, ≤ 0.25× tshark. Prints MB/s per core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from amqpscope.testing.broker import PrivateBroker  # noqa: E402
from amqpscope.testing.sniffer import LoopbackRecorder  # noqa: E402

CLIENT = r"""
import sys, ssl, pika
port, n, size, ca, keys = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
params = {}
if ca != "-":
    ctx = ssl.create_default_context(cafile=ca)
    ctx.keylog_filename = keys
    params["ssl_options"] = pika.SSLOptions(ctx, "localhost")
conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", port, heartbeat=0, **params))
ch = conn.channel()
ch.queue_declare("bench.tls")
body = b"x" * size
for i in range(n):
    ch.basic_publish("", "bench.tls", body)
got = 0
for method, props, b in ch.consume("bench.tls", auto_ack=True, inactivity_timeout=5):
    if method is None:
        break
    got += 1
    if got == n:
        break
ch.cancel()
ch.queue_delete("bench.tls")
conn.close()
print(got)
"""


def record(broker: PrivateBroker, out: Path, n: int, size: int, tls: bool) -> None:
    port = broker.tls_port if tls else broker.port
    env = dict(os.environ)
    if tls:
        conf = out.with_suffix(".cnf")
        conf.write_text("openssl_conf = d\n[d]\nssl_conf = s\n[s]\nsystem_default = sd\n[sd]\n"
                        "Ciphersuites = TLS_AES_128_GCM_SHA256\n")  # fmt: skip
        env["OPENSSL_CONF"] = str(conf)
    with LoopbackRecorder(out, port):
        args = [str(port), str(n), str(size), str(broker.ca_file) if tls else "-", str(out.with_suffix(".keys"))]
        subprocess.run([sys.executable, "-c", CLIENT, *args], check=True, env=env)


def best(cmd: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="keep the captures here (default: a temporary directory)")
    a = ap.parse_args()
    d = Path(a.dir or tempfile.mkdtemp(prefix="amqpscope-tls-bench-"))
    d.mkdir(parents=True, exist_ok=True)
    tls_cap, plain_cap = d / "tls13.pcap", d / "plain.pcap"
    if not (tls_cap.exists() and plain_cap.exists()):
        with PrivateBroker(tls=True) as broker:
            record(broker, tls_cap, a.messages, a.size, True)
            record(broker, plain_cap, a.messages, a.size, False)
    keys = tls_cap.with_suffix(".keys")
    # this checkout's CLI (the editable install may point at another one)
    amqpscope = [sys.executable, "-c", "import sys; from cli.main import main; sys.exit(main())"]
    # the broker's TLS port (the first packet is the client's SYN): tshark dissects AMQP inside TLS
    # only when told the port (without it, it decrypts and shows no AMQP at all)
    port = subprocess.run(["tshark", "-r", str(tls_cap), "-c", "1", "-T", "fields", "-e", "tcp.dstport"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    tshark = ["tshark", "-r", str(tls_cap), "-o", f"tls.keylog_file:{keys}", "-d", f"tcp.port=={port},tls",
              "-d", f"tls.port=={port},amqp", "-Y", "amqp", "-T", "fields", "-e", "amqp.method.method"]  # fmt: skip
    shown = subprocess.run(tshark, capture_output=True, text=True, check=True).stdout
    tshark_methods = sum(len(line.split(",")) for line in shown.splitlines() if line.strip())
    runs = {
        "tls": best([*amqpscope, "decode", "--format", "jsonl", "--no-validate", "--tls-keylog", str(keys),
                     str(tls_cap)], a.repeat),
        "plain": best([*amqpscope, "decode", "--format", "jsonl", "--no-validate", str(plain_cap)], a.repeat),
        "tshark": best(tshark, a.repeat),
    }
    mb = tls_cap.stat().st_size / 1e6
    result = {
        "messages": a.messages,
        "tls_capture_mb": round(mb, 1),
        "plain_capture_mb": round(plain_cap.stat().st_size / 1e6, 1),
        "seconds": {k: round(v, 3) for k, v in runs.items()},
        "tshark_method_frames": tshark_methods,
        "tls_over_plain": round(runs["tls"] / runs["plain"], 2),
        "tls_over_tshark": round(runs["tls"] / runs["tshark"], 3),
        "tls_mb_per_s_per_core": round(mb / runs["tls"], 1),
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

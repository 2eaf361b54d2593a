"""Security audit: users, vhosts, mechanisms, guest, plaintext credentials and client libraries."""

from __future__ import annotations

import json
from pathlib import Path

import amqpscope
from amqpscope.analysis import analyse

from .analysis_events import capture_report


def test_s09_users_vhosts_and_refusals() -> None:
    s = capture_report("s09_pika_errors.pcap")["security"]
    # README: guest on '/', alice on 'scope' (ok), alice on 'private' (530), wrong password (403)
    assert s["users"] == {"alice": 3, "guest": 3}
    assert s["vhosts"] == {"/": 3, "private": 1, "scope": 1}
    assert s["mechanisms"] == {"PLAIN": 6}
    assert s["client_libraries"] == {"Pika Python Client Library 1.4.4": 6}
    outcomes = {(e["user"], e["vhost"], e["outcome"]) for e in s["connections"]}
    assert ("alice", "private", "vhost refused") in outcomes
    assert ("alice", None, "authentication refused") in outcomes
    assert ("alice", "scope", "ok") in outcomes
    assert s["guest_connections"] == 3 and s["plaintext_credentials"] == 6
    assert s["issues"]["credentials in plaintext (PLAIN over unencrypted AMQP)"] == 6


def test_passwords_stay_redacted_unless_asked_for(captures_dir: Path) -> None:
    path = captures_dir / "s09_pika_errors.pcap"
    hidden = analyse(amqpscope.read(path)).report()
    assert all(e["password"] is None for e in hidden["security"]["connections"])
    assert "s3cret" not in json.dumps(hidden, default=str)
    shown = analyse(amqpscope.read(path, show_credentials=True)).report()["security"]["connections"]
    by_outcome = {(e["user"], e["outcome"]): e["password"] for e in shown}
    assert by_outcome[("alice", "ok")] == "s3cret" and by_outcome[("guest", "ok")] == "guest"
    assert by_outcome[("alice", "authentication refused")] not in (None, "s3cret")  # the wrong password


def test_client_libraries_and_versions() -> None:
    assert capture_report("s13_kombu_simple_queue.pcap")["security"]["client_libraries"] == {"py-amqp 5.4.2": 1}
    assert capture_report("s11_amqptools_basic.pcap")["security"]["client_libraries"] == {"rabbitmq-c 0.11.0": 16}
    assert capture_report("s14_aiopika_rpc.pcap")["security"]["client_libraries"] == {"aiormq 7.2.4": 2}
    s13 = capture_report("s13_kombu_simple_queue.pcap")
    assert s13["security"]["users"] == {"alice": 1} and s13["security"]["vhosts"] == {"scope": 1}
    assert s13["security"]["guest_connections"] == 0
    # py-amqp names its version product_version; the connection row shows it too
    assert s13["connections"][0]["client_version"] == "5.4.2"

"""Suites forced on the broker's side: RabbitMQ's ``ssl_options`` allow one TLS version and one
cipher suite (``versions``, ``ciphers``, ``honor_cipher_order``) while the pika client offers every
suite it has (``--ciphers ALL``, OpenSSL's three TLS 1.3 suites). Each TLS 1.2 AEAD suite (ECDHE
and RSA key exchange; AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305) and each TLS 1.3 suite:
amqpscope's frames must equal tshark's decryption (``-o tls.keylog_file:``) frame by frame.

TLS 1.3 resumption: the TLS 1.3 brokers issue stateless session tickets (``session_tickets``, set
in advanced.config); a second connection resumes the first one's session (a PSK, no certificate)
and is decrypted with the secrets the key log has for it.

One broker per forced configuration, started once per test session and stopped when the next
configuration is asked for (the tests ask in order): a node starts in about 4 s.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_tls import assert_session, decode, of, ours, record, tshark_frames

from amqpscope.events import Connection, Frame, Tls
from amqpscope.testing.broker import PrivateBroker, rabbitmq_available
from amqpscope.testing.sniffer import tcpdump_available

pytestmark = [
    pytest.mark.broker,
    pytest.mark.skipif(not rabbitmq_available() or not tcpdump_available(), reason="needs RabbitMQ and tcpdump"),
    pytest.mark.skipif(shutil.which("tshark") is None, reason="needs tshark"),
]

# (broker's version, broker's only suite (OpenSSL name for 1.2), the suite's IANA name)
FORCED = [
    ("tlsv1.2", "ECDHE-RSA-AES128-GCM-SHA256", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"),
    ("tlsv1.2", "ECDHE-RSA-AES256-GCM-SHA384", "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"),
    ("tlsv1.2", "ECDHE-RSA-CHACHA20-POLY1305", "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256"),
    ("tlsv1.2", "AES128-GCM-SHA256", "TLS_RSA_WITH_AES_128_GCM_SHA256"),
    ("tlsv1.2", "AES256-GCM-SHA384", "TLS_RSA_WITH_AES_256_GCM_SHA384"),
    ("tlsv1.3", "TLS_CHACHA20_POLY1305_SHA256", "TLS_CHACHA20_POLY1305_SHA256"),
    ("tlsv1.3", "TLS_AES_256_GCM_SHA384", "TLS_AES_256_GCM_SHA384"),
    ("tlsv1.3", "TLS_AES_128_GCM_SHA256", "TLS_AES_128_GCM_SHA256"),  # last: the resumption test's
]
VERSION = {"tlsv1.2": "TLSv1.2", "tlsv1.3": "TLSv1.3"}
OFFER_ALL = ("--ciphers", "ALL")  # the client offers every TLS 1.2 suite, RSA key exchange included


@pytest.fixture(scope="session")
def forced_broker() -> Iterator[Callable[[str, str], PrivateBroker]]:
    """``forced_broker(version, suite)``: a broker allowing only these (kept until another is asked for)."""
    current: dict[tuple[str, str], PrivateBroker] = {}

    def get(version: str, suite: str) -> PrivateBroker:
        if (version, suite) not in current:
            for broker in current.values():
                broker.stop()
            current.clear()
            broker = PrivateBroker(tls=True, tls_versions=(version,), tls_ciphers=(suite,),
                                   tls_session_tickets=version == "tlsv1.3")  # fmt: skip
            broker.start()
            current[(version, suite)] = broker
        return current[(version, suite)]

    try:
        yield get
    finally:
        for broker in current.values():
            broker.stop()


@pytest.mark.parametrize(("version", "suite", "iana"), FORCED, ids=[f[2] for f in FORCED])
def test_suite_forced_by_the_broker_equals_tshark(forced_broker: Callable[[str, str], PrivateBroker],
                                                  tmp_path: Path, version: str, suite: str, iana: str) -> None:  # fmt: skip
    broker = forced_broker(version, suite)
    cap, keys, result = record(broker, tmp_path, "forced", *OFFER_ALL, "--messages", "6")
    events = decode(cap, keys)
    assert_session(events, result, VERSION[version], iana)
    assert ours(events) == tshark_frames(cap, keys, broker.tls_port)


def test_resumed_tls13_session_is_decrypted(forced_broker: Callable[[str, str], PrivateBroker],
                                            tmp_path: Path) -> None:  # fmt: skip
    broker = forced_broker("tlsv1.3", "TLS_AES_128_GCM_SHA256")
    cap, keys, result = record(broker, tmp_path, "resume13", "--connections", "2", "--resume", "--messages", "4")
    assert [r.get("resumed") for r in result] == [None, 1]  # the client resumed with a ticket (PSK)
    events = decode(cap, keys)
    t1, t2 = of(events, Tls)
    assert (t1.version, t2.version) == ("TLSv1.3", "TLSv1.3")
    assert (t1.resumed, t2.resumed) == (False, True)
    assert (t2.decrypted, t2.reason, t2.records_failed) == (True, None, 0)
    closes = [c for c in of(events, Connection) if c.state == "close"]
    assert [c.tls_resumed for c in closes] == [False, True]
    assert {f.conn for f in of(events, Frame)} == {t1.conn, t2.conn}
    assert ours(events) == tshark_frames(cap, keys, broker.tls_port)
    # the resumed connection's own secrets decrypt it: the first one's alone do not
    first_only = tmp_path / "first.keys"
    lines = keys.read_text().splitlines()
    randoms = list(dict.fromkeys(ln.split()[1] for ln in lines if ln and not ln.startswith("#")))
    first_only.write_text("\n".join(ln for ln in lines if randoms[0] in ln) + "\n")
    t1b, t2b = of(decode(cap, first_only), Tls)
    assert t1b.decrypted and (t2b.decrypted, t2b.reason, t2b.resumed) == (False, "no key for this connection", True)

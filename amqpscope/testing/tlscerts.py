"""A throw-away CA and a server certificate for ``localhost`` / 127.0.0.1 (openssl CLI), for the
private broker's TLS listener."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Certificates:
    ca: Path
    cert: Path
    key: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(directory: Path) -> Certificates:
    """CA key and certificate, a server key and a certificate signed by the CA (SAN localhost,
    127.0.0.1), valid for a day; RSA 2048 so that the RSA and ECDHE-RSA suites both apply."""
    directory.mkdir(parents=True, exist_ok=True)
    d = directory
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=amqpscope test CA",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=d)  # fmt: skip
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "server.key",
             "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName = DNS:localhost, IP:127.0.0.1\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "1", "-extfile", "san.ext", "-out", "server.pem", cwd=d)  # fmt: skip
    for name in ("ca.key", "server.key"):
        (d / name).chmod(0o644)  # the broker runs as this user; the directory is private and temporary
    return Certificates(ca=d / "ca.pem", cert=d / "server.pem", key=d / "server.key")

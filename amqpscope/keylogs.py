"""``--tls-keylog`` files judged: a file without one NSS key log line is refused (a usage error,
exit 2), and key logs that match no TLS connection of a run are said in one warning line on
stderr and a ``tls.keylog-unmatched`` finding. Without this a key log of another capture, or a
text file given by mistake, reads as a capture with no AMQP in it.

A key log that matches nothing is not an error exit: the capture was still read, and what could
not be decrypted is reported as ``tls.undecrypted`` findings; the exit status stays the
capture's. Secrets are never read into a message: only counts and the file names are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from .events import Event, Finding, Tls
from .validate.findings import NOT_SEEN

# LABEL <client random: 32 bytes in hex> <secret in hex>, as SSLKEYLOGFILE writers and the core's
# reader (crates/amqpscope-core/src/tls/keylog.rs) have it
KEY_LINE = re.compile(r"[A-Z][A-Z0-9_]*[ \t]+[0-9A-Fa-f]{64}[ \t]+(?:[0-9A-Fa-f]{2})+")
NO_KEY = "no key for this connection"  # the core's reason (tls/conn.rs TlsConn::summary)
UNMATCHED = "tls.keylog-unmatched"


class NotAKeylog(ValueError):
    """A --tls-keylog file with no key line: garbage, a text file, an empty file."""


def key_lines(text: str) -> int:
    """The lines of ``text`` in the NSS key log format."""
    return sum(1 for line in text.splitlines() if KEY_LINE.fullmatch(line.strip()))


def read_checked(paths: Iterable[str | Path]) -> str:
    """The text of key log files, each refused (``NotAKeylog``) unless it has a key line; an
    unreadable file raises ``OSError``."""
    texts = []
    for p in paths:
        text = Path(p).read_text(errors="replace")
        if not key_lines(text):
            what = "is empty" if not text.strip() else "has no key line"
            raise NotAKeylog(f"TLS key log {p} {what}: an NSS key log (SSLKEYLOGFILE) has lines "
                             "'LABEL CLIENT_RANDOM SECRET' in hex")  # fmt: skip
        texts.append(text + "\n")
    return "".join(texts)


class KeylogWatch:
    """What the TLS connections of one run made of its key log files: keyed (something decrypted)
    or without a key. The run's key logs are judged together: the core holds their keys as one
    set, so with several files only "none of them matched" can be told."""

    def __init__(self, files: Sequence[str]) -> None:
        self.files = tuple(files)
        self.tls = 0  # TLS connections seen
        self.keyed = 0  # of which something was decrypted
        self.keyless = 0  # of which the core found no key
        self.last: tuple[int, float] = (0, 0.0)  # the run's last event (packet, ts): where its finding goes

    def see(self, events: Sequence[Event]) -> None:
        for ev in events:
            if type(ev) is Tls:
                self._one(ev.decrypted, ev.reason)  # type: ignore[attr-defined]
        if events:
            self.last = (events[-1].packet, events[-1].ts)

    def see_jsonl(self, batch: bytes) -> None:
        """The same from JSON lines written by the core."""
        if b'"kind":"tls"' not in batch:
            return
        for line in batch.splitlines():
            if line.startswith(b'{"kind":"tls"'):
                rec = json.loads(line)
                self._one(bool(rec.get("decrypted")), rec.get("reason"))

    def _one(self, decrypted: bool, reason: str | None) -> None:
        self.tls += 1
        self.keyed += decrypted
        self.keyless += not decrypted and reason == NO_KEY

    def unmatched(self) -> str | None:
        """The warning, when the key logs matched no TLS connection of the run: there was none, or
        none found its key. None when some matched, or when the connections' keys could not be
        looked up at all (handshake not captured, a suite not decrypted): not the key log's fault."""
        if not self.files or self.keyed or (self.tls and not self.keyless):
            return None
        one = len(self.files) == 1
        logs = f"{'TLS key log' if one else 'TLS key logs'} {', '.join(self.files)} {'matches' if one else 'match'}"
        if not self.tls:
            return f"{logs} no connection: the capture has no TLS connection"
        n = "the TLS connection" if self.tls == 1 else f"any of the {self.tls} TLS connections"
        return f"{logs} no connection: no key for {n} (a key log of another capture or client?)"

    def finding(self) -> Finding | None:
        """``unmatched`` as a finding of the run (conn -1, at its last event), for the outputs built
        on findings."""
        message = self.unmatched()
        if message is None:
            return None
        packet, ts = self.last
        return Finding(packet=packet, ts=ts, conn=-1, rule=UNMATCHED, severity=NOT_SEEN, code=None, message=message)

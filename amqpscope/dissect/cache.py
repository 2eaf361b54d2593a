"""The compiled spec tables kept on disk, so a command does not parse and compile the spec at each start.

Compiling the spec (parsing the XML, then the decoder's and the validator's tables) costs about a
third of a second, which a tool run dozens of times an hour should not pay every time. The two
JSON documents the core reads are therefore written once to a cache file and read back afterwards.

The cache is never trusted blindly. An entry is used only when
- its key matches: the SHA-256 of the spec file's bytes, of the sources of every module that
  compiles it (a changed compiler or erratum makes a new key), the package version and the format;
- its own digest matches the documents it holds (a torn or edited file is rebuilt, not read).
Anything else (missing, stale, corrupt, unreadable, a read-only cache directory) compiles the spec
as before; a failure to write is silent because the cache only saves time.

Where: ``$AMQPSCOPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/amqpscope``, else ``~/.cache/amqpscope``.
``AMQPSCOPE_CACHE=off`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

FORMAT = 1
# the modules whose code decides what the compiled tables hold (relative to the package root)
_COMPILERS = (
    "dissect/spec.py",
    "dissect/tables.py",
    "dissect/errata.py",
    "validate/tables.py",
    "validate/rules_tables.py",
    "validate/grammar.py",
    "validate/findings.py",
)
_PACKAGE = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class Compiled:
    """The two documents the core executes for one spec."""

    tables: str
    validation: str


def directory() -> Path | None:
    """The cache directory, or None when caching is off."""
    if os.environ.get("AMQPSCOPE_CACHE", "").lower() in ("off", "0", "no", "false"):
        return None
    if d := os.environ.get("AMQPSCOPE_CACHE_DIR"):
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "amqpscope"


def key(spec_path: Path) -> str:
    """What an entry for this spec file must have been built from."""
    from amqpscope import __version__

    h = hashlib.sha256(f"amqpscope {__version__} cache {FORMAT}\n".encode())
    h.update(hashlib.sha256(spec_path.read_bytes()).digest())
    for rel in _COMPILERS:
        p = _PACKAGE / rel
        h.update(rel.encode())
        h.update(hashlib.sha256(p.read_bytes()).digest() if p.exists() else b"-")
    return h.hexdigest()


def _digest(doc: Compiled) -> str:
    h = hashlib.sha256(doc.tables.encode())
    h.update(b"\0")
    h.update(doc.validation.encode())
    return h.hexdigest()


def read(path: Path, want: str) -> Compiled | None:
    """The entry at ``path`` when it is whole and built for ``want``; None otherwise."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        doc = Compiled(raw["tables"], raw["validation"])
        if raw.get("key") != want or raw.get("digest") != _digest(doc):
            return None
        if not (isinstance(doc.tables, str) and isinstance(doc.validation, str)):
            return None
        return doc
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(path: Path, want: str, doc: Compiled) -> None:
    """Write the entry atomically (a reader sees the old file or the new one, never half of one)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"key": want, "digest": _digest(doc), "tables": doc.tables, "validation": doc.validation})
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return  # a read-only or full cache directory only costs the compile next time


def compiled(spec_path: Path, build: Callable[[], Compiled]) -> Compiled:
    """The compiled tables of the spec file at ``spec_path``: from the cache when a valid entry is
    there, else ``build()``, stored for the next run."""
    where = directory()
    if where is None:
        return build()
    try:
        want = key(spec_path)
    except OSError:
        return build()
    path = where / f"spec-{want[:32]}.json"
    doc = read(path, want)
    if doc is None:
        doc = build()
        write(path, want, doc)
    return doc

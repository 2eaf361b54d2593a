"""What the capture did not show, for the banner at the top of the report: a truncated or damaged
file, bytes lost in gaps, streams that had to be searched again, TLS connections without keys.
A report over such a capture must not say "nothing wrong": it can only say what it saw."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .report_evidence import OpaqueTls

TRUNCATED_EXIT = 5  # capture.TruncatedCapture's exit code


@dataclass(frozen=True, slots=True)
class Unseen:
    what: str  # a few words, shown bold
    detail: str
    rule: str | None = None  # the diagnoser's not-seen rule this is about, when there is one


def _n(count: int, one: str, many: str) -> str:
    return f"{count:,} {one if count == 1 else many}"


def unseen(error: object | None, exit_code: int, accountings: Iterable[Any], counts: dict[str, int],
           opaque: list[OpaqueTls], diagnosed: Iterable[Any] = ()) -> list[Unseen]:  # fmt: skip
    """``error``: the first input's capture error (an exception or a message); ``accountings``:
    each input's byte accounting (``StreamAccounting``); ``counts``: the report's gap, resync and
    malformed counts; ``opaque``: the TLS connections not decrypted; ``diagnosed``: what the
    diagnoser itself says it could not see (records with a summary), when it says so."""
    out = []
    if error is not None:
        what = "Truncated capture" if exit_code == TRUNCATED_EXIT else "Damaged capture"
        out.append(Unseen(what, f"{error}. Nothing after that point was read: the report covers the packets before it.",
                          "capture.truncated" if exit_code == TRUNCATED_EXIT else None))  # fmt: skip
    acc = list(accountings)
    gap_bytes = sum(a.gap_bytes for a in acc)
    if counts.get("gaps") or gap_bytes:
        missing = f"{_n(gap_bytes, 'byte', 'bytes')} of AMQP traffic missing from the capture"
        out.append(Unseen("Gaps in the streams", f"{_n(counts.get('gaps', 0), 'gap', 'gaps')}: {missing} (dropped "
                          "packets); frames and acks in them were not seen.", "capture.gap"))  # fmt: skip
    skipped = sum(a.skipped_bytes for a in acc)
    if skipped or counts.get("malformed"):
        out.append(Unseen("Bytes that could not be framed", f"{_n(skipped, 'byte', 'bytes')} skipped "
                          f"({_n(counts.get('resyncs', 0), 'resynchronisation', 'resynchronisations')}, "
                          f"{_n(counts.get('malformed', 0), 'malformed stretch', 'malformed stretches')})."))  # fmt: skip
    pending = sum(a.pending_bytes for a in acc)
    if pending:
        out.append(Unseen("Cut-off frames", f"{_n(pending, 'byte', 'bytes')} of frames left incomplete when "
                          "the capture ended."))  # fmt: skip
    opaque_bytes = sum(a.tls_opaque_bytes for a in acc)
    if opaque:
        reasons = sorted({o.reason for o in opaque})
        shown = ", ".join(f"{o.client} ⇄ {o.server}" for o in opaque[:5]) + (" …" if len(opaque) > 5 else "")
        out.append(Unseen("TLS connections not decrypted",
                          f"{_n(len(opaque), 'connection', 'connections')} ({shown}): {'; '.join(reasons)}"
                          + (f"; {opaque_bytes:,} bytes of TLS records" if opaque_bytes else "")
                          + ". Give their keys (--tls-keylog) to see inside.", "tls.undecrypted"))  # fmt: skip
    elif opaque_bytes:
        out.append(Unseen("TLS not decrypted", f"{opaque_bytes:,} bytes of TLS records were not decrypted "
                          "(no keys for them).", "tls.undecrypted"))  # fmt: skip
    return _merge(out, [_told(d) for d in diagnosed])


def _told(d: Any) -> Unseen:
    """One of the diagnoser's not-seen entries (``Blindness``: what, summary, rule)."""
    rec = d.to_record() if hasattr(d, "to_record") else d
    if not isinstance(rec, dict):
        return Unseen("Not seen", str(rec))
    what = str(rec.get("what") or rec.get("rule") or "not seen")
    return Unseen(what[:1].upper() + what[1:], str(rec.get("summary") or ""), rec.get("rule"))


def _merge(ours: list[Unseen], told: list[Unseen]) -> list[Unseen]:
    """The diagnoser's entries first (its order: the worst first; each says what it counted),
    then what only the report saw (the report's own sentence for a rule the diagnoser names only
    when the diagnoser's says nothing)."""
    by_rule = {u.rule: u for u in ours if u.rule is not None}
    out = []
    for t in told:
        mine = by_rule.pop(t.rule, None) if t.rule is not None else None
        out.append(Unseen(t.what, mine.detail, t.rule) if mine is not None and not t.detail else t)
    taken = {t.rule for t in told}
    return out + [u for u in ours if u.rule is None or u.rule not in taken]


def tls_inputs(run: Any) -> frozenset[int]:
    """The inputs of a capture run with TLS bytes not decrypted (read again to name their connections)."""
    return frozenset(i for i, (_, stats) in enumerate(getattr(run, "stats", [])) if stats.accounting.tls_opaque_bytes)


def from_run(analyzer: Any, run: Any, opaque: list[OpaqueTls]) -> list[Unseen]:
    """``unseen`` for a finished run: its first error and exit code, each input's accounting
    (capture runs; table runs have none), the analyzer's counts, and what the diagnoser says it
    did not see when it has a ``not_seen()``."""
    counts = {"gaps": analyzer.gaps, "resyncs": analyzer.resyncs, "malformed": analyzer.malformed}
    accountings = [stats.accounting for _, stats in getattr(run, "stats", [])]
    told = getattr(analyzer.diagnoser, "not_seen", None)
    return unseen(run.error, run.exit_code, accountings, counts, opaque, told() if callable(told) else ())

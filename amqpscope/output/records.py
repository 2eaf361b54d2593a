"""Events to JSON-ready records: bytes, decimals and body handling in one place.

``to_jsonable`` is the single rule for values that JSON has no type for: byte strings become
``{"hex": "…"}`` (never guessed into text), decimals become strings, problems stay strings.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import orjson

from ..events import Event, Message

TEXT_TYPES = ("text/", "application/json", "application/xml", "application/x-www-form-urlencoded",
              "application/javascript", "application/yaml")  # fmt: skip
PREVIEW_BYTES = 64


def _default(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"hex": bytes(value).hex()}
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


_OPTIONS = orjson.OPT_SERIALIZE_NUMPY if hasattr(orjson, "OPT_SERIALIZE_NUMPY") else 0
_LINE_OPTIONS = LINE_OPTIONS = _OPTIONS | orjson.OPT_APPEND_NEWLINE
default = _default  # for writers that call orjson themselves


def dumpb(value: Any) -> bytes:
    """Compact JSON as UTF-8 bytes (orjson: the JSON encoding is most of a decode's output cost)."""
    return orjson.dumps(value, default=_default, option=_OPTIONS)


def dumpb_line(value: Any) -> bytes:
    """``dumpb`` with the newline appended by orjson (no second bytes object per line)."""
    return orjson.dumps(value, default=_default, option=_LINE_OPTIONS)


def dumps(value: Any) -> str:
    return dumpb(value).decode()


def to_jsonable(value: Any) -> Any:
    """A deep copy of ``value`` made of JSON types only (for Parquet/CSV writers)."""
    return json.loads(dumps(value))


def is_text(content_type: Any) -> bool:
    return isinstance(content_type, str) and content_type.lower().startswith(TEXT_TYPES)


def body_view(body: bytes | None, content_type: Any, limit: int | None) -> dict[str, Any] | None:
    """The body as text when its content type says so and it decodes, else as hex."""
    if body is None:
        return None
    cut = body if limit is None else body[:limit]
    if is_text(content_type) or _looks_text(cut):
        try:
            return {"text": cut.decode(), "truncated": len(cut) < len(body)}
        except UnicodeDecodeError:
            pass
    return {"hex": cut.hex(), "truncated": len(cut) < len(body)}


def _looks_text(raw: bytes) -> bool:
    if not raw:
        return True
    try:
        s = raw.decode()
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\r\n\t" for c in s[:256])


def record(ev: Event, body: str = "none") -> dict[str, Any]:
    """The output record of an event; ``body`` is none | preview | full for messages."""
    rec = ev.to_record()
    if body != "none" and isinstance(ev, Message):
        limit = PREVIEW_BYTES if body == "preview" else None
        rec["body"] = body_view(ev.body, ev.properties.get("content_type"), limit)
    return rec

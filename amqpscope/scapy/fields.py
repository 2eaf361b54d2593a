"""Scapy fields for AMQP's primitive types: what the compiled tables name (``octet``, ``short``,
``long``, ``longlong``, ``timestamp``, ``bit``, ``shortstr``, ``longstr``, ``table``) and the few
framing fields (property flags, the frame-end octet, the protocol version).

Dissection is strict: a field that runs past the end of its frame raises :class:`FieldError`
(the frame then shows as raw bytes with that reason). Building accepts what the old encoder took:
``None`` is zero or empty, text is UTF-8, ``bytes`` are written as they are.
"""

from __future__ import annotations

import datetime
import struct
from collections.abc import Callable, Sequence
from typing import Any

from scapy.fields import Field
from scapy.packet import Packet

from amqpscope.dissect.values import Timestamp
from amqpscope.dissect.wire import PROTOCOL_VERSIONS

from .redact import redacted
from .table import TableError, decode_table_body, encode_table

_U32 = struct.Struct(">I")
FIXED_FORMATS = {"octet": "B", "short": "H", "long": "I", "longlong": "Q", "timestamp": "Q"}


class FieldError(ValueError):
    """A field that cannot be dissected from what is left of its frame."""


def _need(name: str, want: int, have: int) -> None:
    if have < want:
        raise FieldError(f"{name} needs {want} bytes, {have} left")


def _raw(value: Any) -> bytes:
    if value is None:
        return b""
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def _text(raw: bytes) -> str | bytes:
    """Text when it is UTF-8, else the bytes as seen (what the core hands to Python too)."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw


class NumberField(Field[Any, Any]):
    """``octet``, ``short``, ``long`` or ``longlong``: unsigned, big-endian; ``None`` is 0."""

    def __init__(self, name: str, default: int | None, amqp_type: str) -> None:
        super().__init__(name, default, FIXED_FORMATS[amqp_type])

    def i2m(self, pkt: Packet | None, x: Any) -> int:
        return int(x or 0)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        _need(self.name, self.sz, len(s))
        return s[self.sz :], self.m2i(pkt, self.struct.unpack_from(s)[0])


class TimestampField(NumberField):
    """``timestamp``: seconds since the epoch, shown as a UTC date too."""

    def __init__(self, name: str, default: int | None) -> None:
        super().__init__(name, default, "timestamp")

    def m2i(self, pkt: Packet | None, x: Any) -> Any:
        return Timestamp(x)

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if x is None:
            return "None"
        try:
            when = datetime.datetime.fromtimestamp(int(x), datetime.UTC).isoformat()
        except (OverflowError, ValueError, OSError):
            return str(int(x))
        return f"{int(x)} ({when})"


class BitField(Field[Any, Any]):
    """One AMQP ``bit``: consecutive bits share an octet, the first in its lowest bit. The
    fields of one octet pass ``(rest, octet)`` along while dissecting and building; the last of
    them consumes or writes the octet."""

    __slots__ = ["bit", "last"]

    def __init__(self, name: str, default: bool | None, bit: int, last: bool) -> None:
        super().__init__(name, default, "B")
        self.bit = bit
        self.last = last

    def h2i(self, pkt: Packet | None, x: Any) -> Any:
        return None if x is None else bool(x)

    def getfield(self, pkt: Packet, s: Any) -> tuple[Any, Any]:
        if isinstance(s, tuple):
            rest, octet = s
        else:
            _need(self.name, 1, len(s))
            rest, octet = s[1:], s[0]
        value = bool(octet >> self.bit & 1)
        return (rest if self.last else (rest, octet)), value

    def addfield(self, pkt: Packet, s: Any, val: Any) -> Any:
        p, octet = s if isinstance(s, tuple) else (s, 0)
        if val:
            octet |= 1 << self.bit
        return p + bytes((octet,)) if self.last else (p, octet)


class _TextField(Field[Any, Any]):
    """A string field; ``secret`` names the method whose secret it holds (shown redacted)."""

    __slots__ = ["secret"]

    def __init__(self, name: str, default: Any, fmt: str, secret: str | None = None) -> None:
        super().__init__(name, default, fmt)
        self.secret = secret

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if self.secret is None:
            return repr(x)
        return repr(redacted(self.secret, x, getattr(pkt, "mechanism", None)))


class ShortStrField(_TextField):
    """``shortstr``: an octet length and up to 255 bytes."""

    def __init__(self, name: str, default: Any, secret: str | None = None) -> None:
        super().__init__(name, default, "B", secret)

    def i2len(self, pkt: Packet, x: Any) -> int:
        return 1 + len(_raw(x))

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        raw = _raw(val)
        if len(raw) > 255:
            raise ValueError(f"{self.name}: short string of {len(raw)} bytes (at most 255)")
        return s + bytes((len(raw),)) + raw

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        _need(self.name, 1, len(s))
        n = s[0]
        _need(self.name, 1 + n, len(s))
        return s[1 + n :], _text(s[1 : 1 + n])


class LongStrField(_TextField):
    """``longstr`` (and ``content``): a 32-bit length and the bytes."""

    def __init__(self, name: str, default: Any, secret: str | None = None) -> None:
        super().__init__(name, default, "I", secret)

    def i2len(self, pkt: Packet, x: Any) -> int:
        return 4 + len(_raw(x))

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        raw = _raw(val)
        return s + _U32.pack(len(raw)) + raw

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        _need(self.name, 4, len(s))
        (n,) = _U32.unpack_from(s)
        _need(self.name, 4 + n, len(s))
        return s[4 + n :], _text(s[4 : 4 + n])


class TableField(Field[Any, Any]):
    """``table``: a 32-bit length and typed entries (see :mod:`.table`); the value is a dict."""

    ismutable = True

    def __init__(self, name: str, default: Any) -> None:
        super().__init__(name, default, "I")

    def i2len(self, pkt: Packet, x: Any) -> int:
        return len(encode_table(x))

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s + encode_table(val)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        _need(self.name, 4, len(s))
        (n,) = _U32.unpack_from(s)
        if 4 + n > len(s):
            raise FieldError(f"{self.name}: field table of {n} bytes runs past the end ({len(s) - 4} left)")
        try:
            return s[4 + n :], decode_table_body(s, 4, 4 + n)
        except (TableError, IndexError, struct.error) as exc:
            raise FieldError(f"{self.name}: {exc}") from None

    def do_copy(self, x: Any) -> Any:
        import copy  # the dissected table is compared against this copy to notice edits

        return copy.deepcopy(x)


class BitPropertyField(Field[Any, Any]):
    """A ``bit`` content property: its flag is its value, it has no bytes of its own."""

    def __init__(self, name: str, default: Any) -> None:
        super().__init__(name, default, "B")

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        return s, True


def field_for(name: str, amqp_type: str, default: Any, secret: str | None = None) -> Field[Any, Any]:
    """The field of one argument or property, by the type the compiled tables give it; ``secret``:
    the method whose secret the field carries."""
    if amqp_type == "timestamp":
        return TimestampField(name, default)
    if amqp_type in FIXED_FORMATS:
        return NumberField(name, default, amqp_type)
    if amqp_type == "shortstr":
        return ShortStrField(name, default, secret)
    if amqp_type in ("longstr", "content"):
        return LongStrField(name, default, secret)
    if amqp_type == "table":
        return TableField(name, default)
    raise ValueError(f"no field for AMQP type {amqp_type!r}")


def zero(amqp_type: str) -> Any:
    """The zero or empty value of a type: what a reserved field holds (and every default)."""
    if amqp_type == "bit":
        return False
    if amqp_type in FIXED_FORMATS:
        return 0
    if amqp_type == "table":
        return {}
    return ""


class PropertyFlagsField(Field[Any, Any]):
    """The property flag words of a content header: 15 properties a word, the first in the top
    bit; bit 0 says another word follows. The value is the list of words; ``None`` builds them
    from the properties that are set."""

    __slots__ = ["props"]
    islist = 1  # one value of words, not a set of values to build a packet each
    ismutable = True

    def __init__(self, name: str, props: Sequence[str]) -> None:
        super().__init__(name, None, "H")
        self.props = tuple(props)

    def words(self, pkt: Packet) -> list[int]:
        present = [i for i, p in enumerate(self.props) if pkt.getfieldval(p) is not None]
        words = [0] * (max(present, default=0) // 15 + 1)
        for i in present:
            words[i // 15] |= 1 << (15 - i % 15)
        for w in range(len(words) - 1):
            words[w] |= 1
        return words

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        words = self.words(pkt) if val is None else val
        return s + b"".join(struct.pack(">H", w) for w in words)

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        words: list[int] = []
        while True:
            _need(self.name, 2 * len(words) + 2, len(s))
            words.append(struct.unpack_from(">H", s, 2 * len(words))[0])
            if not words[-1] & 1:
                return s[2 * len(words) :], words

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        if x is None:
            return "None (from the properties set)"
        names = [p for i, p in enumerate(self.props) if present(x, i)]
        return " ".join(f"{w:#06x}" for w in x) + (f" ({'+'.join(names)})" if names else "")


def present(words: Sequence[int], index: int) -> bool:
    """Whether property ``index`` is flagged in ``words``."""
    word, bit = divmod(index, 15)
    return word < len(words) and bool(words[word] >> (15 - bit) & 1)


def property_condition(flags: str, index: int, name: str) -> Callable[[Packet], bool]:
    """Whether a property is on the wire: its flag when the flags are given (dissected or set by
    hand), else whether it has a value."""

    def cond(pkt: Packet) -> bool:
        words = pkt.getfieldval(flags)
        return pkt.getfieldval(name) is not None if words is None else present(words, index)

    return cond


class FrameEndField(Field[Any, Any]):
    """The frame-end octet. It follows the frame's payload, so the frame layer writes it after
    the payload; dissecting reads it at ``size`` without consuming anything."""

    def __init__(self, name: str, default: int, size_field: str) -> None:
        super().__init__(name, default, "B")
        self.size_field = size_field

    __slots__ = ["size_field"]

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        size = pkt.getfieldval(self.size_field)
        return s, (s[size] if size < len(s) else None)

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return "None" if x is None else f"{x:#04x}"


class NoteField(Field[Any, Any]):
    """Text about the layer that is not on the wire (why a frame is shown raw)."""

    def __init__(self, name: str, default: str | None) -> None:
        super().__init__(name, default, "B")

    def addfield(self, pkt: Packet, s: bytes, val: Any) -> bytes:
        return s

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        return s, None

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        return str(x)


class VersionField(Field[Any, Any]):
    """The four octets after ``AMQP`` in a protocol header; ``"0-9-1"`` or ``"0-9"`` is accepted."""

    def __init__(self, name: str, default: Any) -> None:
        super().__init__(name, default, "4s")

    def h2i(self, pkt: Packet | None, x: Any) -> Any:
        if isinstance(x, str):
            for raw, name in PROTOCOL_VERSIONS.items():
                if name == x:
                    return raw[4:]
            raise ValueError(f"unknown protocol version {x!r}")
        return x

    def getfield(self, pkt: Packet, s: bytes) -> tuple[bytes, Any]:
        _need(self.name, 4, len(s))
        return s[4:], s[:4]

    def i2repr(self, pkt: Packet | None, x: Any) -> str:
        name = PROTOCOL_VERSIONS.get(b"AMQP" + bytes(x or b""))
        return f"{bytes(x or b'').hex(' ')} ({name or 'unknown'})"

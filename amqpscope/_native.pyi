"""Types of the native core's binding (crates/amqpscope-py); checked against it by tests/test_native_stub.py."""

from collections.abc import Callable, Iterable
from os import PathLike
from typing import IO, Any, overload

from amqpscope.events import Event
from amqpscope.packets import RawPacket

__version__: str

Source = str | PathLike[str] | IO[bytes]

class Decoder:
    def __init__(
        self,
        source: Source,
        tables: str,
        ports: list[int] = ...,
        show_credentials: bool = ...,
        keep_bodies: bool = ...,
        max_packets: int | None = ...,
        select: Callable[[tuple[str, int], tuple[str, int]], bool] | None = ...,
        tls_keylog: str | None = ...,
        validation: str | None = ...,
        ledger: bool = ...,
    ) -> None: ...
    def add_tls_keylog(self, text: str) -> int: ...
    def jsonl(self, body: str = ...) -> bytes | None: ...
    def events(self, kinds: set[str] | frozenset[str] | None = ...) -> list[Event] | None: ...
    def arrow(
        self,
        tables: dict[str, Any],  # table name -> pyarrow.Schema (anything with __arrow_c_schema__)
        constants: dict[str, str],
        kinds: dict[str, str],  # event kind -> table name (schema.TABLE_OF_KIND)
        batch_events: int = ...,
    ) -> dict[str, ArrowBatch] | None: ...
    @overload
    def to_sink(self, sink: ParquetSink, batch_events: int = ..., event_kinds: None = ...) -> int | None: ...
    @overload
    def to_sink(
        self,
        sink: ParquetSink,
        batch_events: int,
        event_kinds: set[str] | frozenset[str],  # kinds to hand over as Python events too
    ) -> tuple[int, list[Event]] | None: ...
    def stats(self) -> dict[str, Any]: ...

class ArrowBatch:
    """One table's record batch built by the core; ``pyarrow.record_batch(obj)`` takes it (no copy)."""

    @property
    def num_rows(self) -> int: ...
    def __len__(self) -> int: ...
    def __arrow_c_array__(self, requested_schema: object | None = None) -> tuple[object, object]: ...

class ParquetSink:
    """The Parquet files of a decode's tables: built by the core as events come, encoded on its own thread."""

    def __init__(
        self,
        tables: dict[str, Any],  # table name -> pyarrow.Schema (anything with __arrow_c_schema__)
        constants: dict[str, str],
        kinds: dict[str, str],  # event kind -> table name (schema.TABLE_OF_KIND)
        options: dict[str, Any],  # compression, dictionary, statistics, uncompressed, row_group_rows
    ) -> None: ...
    def write(self, table: str, schema: Any, rows: bytes) -> None: ...  # rows: a JSON array of objects
    def end_events(self) -> dict[str, int]: ...
    def take(self) -> dict[str, bytes]: ...
    def close(self) -> tuple[dict[str, bytes], dict[str, int]]: ...

class Engine:
    def __init__(
        self,
        tables: str,
        ports: list[int] = ...,
        show_credentials: bool = ...,
        keep_bodies: bool = ...,
        idle_timeout_ns: int | None = ...,
        tls_keylog: str | None = ...,
        validation: str | None = ...,
        ledger: bool = ...,
        tls_follow: list[str] = ...,
    ) -> None: ...
    def add_tls_keylog(self, text: str) -> int: ...
    def feed(self, packets: Iterable[RawPacket]) -> list[Event]: ...
    def finish(self) -> list[Event]: ...
    def stats(self) -> dict[str, Any]: ...

class LiveDecoder:
    def __init__(
        self,
        path: str,
        tables: str,
        ports: list[int] = ...,
        show_credentials: bool = ...,
        keep_bodies: bool = ...,
        idle_timeout_ns: int | None = ...,
        max_frames: int | None = ...,
        copy_to: str | None = ...,
        validation: str | None = ...,
        ledger: bool = ...,
        tls_follow: list[str] = ...,
    ) -> None: ...
    def jsonl(self, body: str = ...) -> bytes | None: ...
    def events(self) -> list[Event] | None: ...
    def stats(self) -> dict[str, Any]: ...
    def capture_stats(self) -> dict[str, Any]: ...

class Ledger:
    """The core's ledger fed with Python events (those a decoder made without it, or by hand)."""

    def __init__(self, tables: str) -> None: ...
    def feed(self, ev: Event) -> list[Event]: ...
    def finish(self, packet: int, ts: float) -> list[Event]: ...

class PacketReader:
    def __init__(self, source: Source) -> None: ...
    def batch(self) -> list[RawPacket]: ...

class Codec:
    def __init__(self, tables: str) -> None: ...
    def decode_method(self, payload: bytes) -> tuple[int, int, str, bool, dict[str, Any], str | None]: ...
    def decode_header(self, payload: bytes) -> tuple[int, int, int, dict[str, Any], str | None]: ...
    def decode_table_body(self, body: bytes) -> dict[str, Any]: ...

def flow_weights(source: Source, plan_bytes: int, packet_weight: int) -> list[tuple[tuple[str, int], tuple[str, int], int]]: ...
def _event_roundtrip(ev: Event) -> Event: ...
def _jsonl(events: list[Event], body: str) -> bytes: ...
def _jsonl_bench(events: list[Event], body: str, passes: int) -> tuple[int, float]: ...

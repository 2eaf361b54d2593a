"""The compiled spec tables cached on disk: used when whole and fresh, rebuilt otherwise."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from amqpscope.dissect import cache
from amqpscope.dissect.cache import Compiled
from amqpscope.dissect.spec import bundled_spec_path


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "cache"
    monkeypatch.setenv("AMQPSCOPE_CACHE_DIR", str(d))
    monkeypatch.delenv("AMQPSCOPE_CACHE", raising=False)
    return d


def _counting(doc: Compiled) -> tuple[list[int], object]:
    calls: list[int] = []

    def build() -> Compiled:
        calls.append(1)
        return doc

    return calls, build


def test_second_run_reads_the_cache(cache_dir: Path, tmp_path: Path) -> None:
    spec = tmp_path / "s.xml"
    shutil.copy(bundled_spec_path(), spec)
    calls, build = _counting(Compiled("{}", "[]"))
    assert cache.compiled(spec, build) == Compiled("{}", "[]")  # type: ignore[arg-type]
    assert cache.compiled(spec, build) == Compiled("{}", "[]")  # type: ignore[arg-type]
    assert len(calls) == 1
    assert len(list(cache_dir.glob("spec-*.json"))) == 1


def test_a_changed_spec_file_is_compiled_again(cache_dir: Path, tmp_path: Path) -> None:
    spec = tmp_path / "s.xml"
    shutil.copy(bundled_spec_path(), spec)
    calls, build = _counting(Compiled("{}", "[]"))
    cache.compiled(spec, build)  # type: ignore[arg-type]
    spec.write_bytes(spec.read_bytes().replace(b"<amqp ", b"<amqp  ", 1))
    cache.compiled(spec, build)  # type: ignore[arg-type]
    assert len(calls) == 2


@pytest.mark.parametrize(
    "damage",
    [
        lambda raw: {**raw, "tables": raw["tables"] + " "},  # content no longer matches its digest
        lambda raw: {**raw, "key": "0" * 64},  # built from something else
        lambda raw: {k: v for k, v in raw.items() if k != "validation"},
    ],
)
def test_a_damaged_entry_is_never_trusted(cache_dir: Path, tmp_path: Path, damage: object) -> None:
    spec = tmp_path / "s.xml"
    shutil.copy(bundled_spec_path(), spec)
    calls, build = _counting(Compiled('{"a": 1}', "[]"))
    cache.compiled(spec, build)  # type: ignore[arg-type]
    (entry,) = cache_dir.glob("spec-*.json")
    entry.write_text(json.dumps(damage(json.loads(entry.read_text()))))  # type: ignore[operator]
    assert cache.compiled(spec, build) == Compiled('{"a": 1}', "[]")  # type: ignore[arg-type]
    assert len(calls) == 2
    entry.write_bytes(b"\x00garbage")
    assert cache.compiled(spec, build) == Compiled('{"a": 1}', "[]")  # type: ignore[arg-type]
    assert len(calls) == 3


def test_off_and_unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tmp_path / "s.xml"
    shutil.copy(bundled_spec_path(), spec)
    calls, build = _counting(Compiled("{}", "[]"))
    monkeypatch.setenv("AMQPSCOPE_CACHE", "off")
    cache.compiled(spec, build)  # type: ignore[arg-type]
    cache.compiled(spec, build)  # type: ignore[arg-type]
    assert len(calls) == 2
    monkeypatch.delenv("AMQPSCOPE_CACHE")
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("AMQPSCOPE_CACHE_DIR", str(blocker / "sub"))  # cannot be made: a file is in the way
    assert cache.compiled(spec, build) == Compiled("{}", "[]")  # type: ignore[arg-type]


def test_the_codec_reads_what_it_compiled(cache_dir: Path) -> None:
    """The cached documents equal a fresh compile, for both shipped specs."""
    from amqpscope.dissect.codec import Codec
    from amqpscope.dissect.spec import load_spec
    from amqpscope.dissect.tables import to_json
    from amqpscope.validate.tables import validation_tables

    for name in ("amqp0-9-1.xml", "amqp0-9.xml"):
        path = bundled_spec_path(name)
        first = Codec(path=path)
        assert first.tables == to_json(load_spec(path))
        again = Codec(path=path)  # a new process would do the same: read the entry
        assert again.tables == first.tables
        assert again.validation == validation_tables(load_spec(path))
        assert "spec" not in again.__dict__  # the model was not loaded to get the tables

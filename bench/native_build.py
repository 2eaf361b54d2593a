"""The benchmarks time the native core as released: built with cargo's ``release`` profile (fat LTO,
one codegen unit), not the ``quick`` profile ``pip install -e .`` builds by default (see docs/build.md).

``ensure_release_core()`` makes the extension the checkout imports that release build: when it is not
(its bytes differ from ``target/release/lib_native.so``), it runs
``SETUPTOOLS_RUST_CARGO_PROFILE=release python -m pip install -e . --no-deps`` (minutes the first
time, seconds once target/release is built). ``pip install -e .`` brings the quick build back.
``AMQPSCOPE_BENCH_ANY_CORE=1`` times whatever extension is installed (to compare builds).
"""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _installed_extension() -> Path | None:
    found = sorted((ROOT / "amqpscope").glob("_native.*.so"))
    return found[0] if found else None


def is_release_core() -> bool:
    release = ROOT / "target" / "release" / "lib_native.so"
    installed = _installed_extension()
    return installed is not None and release.exists() and filecmp.cmp(installed, release, shallow=False)


def ensure_release_core() -> None:
    if os.environ.get("AMQPSCOPE_BENCH_ANY_CORE") or is_release_core():
        return
    print("bench: building the native core with the release profile (fat LTO): "
          "SETUPTOOLS_RUST_CARGO_PROFILE=release pip install -e . --no-deps", file=sys.stderr)  # fmt: skip
    env = dict(os.environ, SETUPTOOLS_RUST_CARGO_PROFILE="release")
    env.pop("PYO3_PYTHON", None)  # the interpreter running pip, as every install of the checkout
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], env=env, check=True)
    if not is_release_core():
        sys.exit("bench: the installed native core is still not target/release/lib_native.so")

#!/usr/bin/env bash
# Install everything the test suite needs, then run all of it.
#   - a virtualenv in .venv with amqpscope (its native core built optimized by setuptools-rust) and its
#     test extras (pytest, hypothesis, pamqp, pika, pyspark, ...)
#   - Debian packages for the live tests: rabbitmq-server, tcpdump, tshark (tools/install-system-deps.sh)
#   - the Rust checks: cargo fmt, clippy (-D warnings), cargo test, a short cargo-fuzz run (10 s a target,
#     AMQPSCOPE_FUZZ_SECONDS to change); then ruff, mypy and pytest.
# Needs Rust (cargo) and Python 3.11+; Java 17 must be on the machine for the Spark tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
# pyo3 rebuilds whenever the interpreter it detects changes: pin it to the venv's.
export PYO3_PYTHON="$PWD/.venv/bin/python"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; then
    bash tools/install-system-deps.sh
fi
echo "== cargo fmt, clippy, test"
cargo fmt --all -- --check
cargo clippy -q --workspace --all-targets -- -D warnings
cargo test -q --workspace
echo "== cargo fuzz smoke run"
bash tools/fuzz-native.sh "${AMQPSCOPE_FUZZ_SECONDS:-10}"
echo "== ruff, mypy"
.venv/bin/ruff check -q .
.venv/bin/mypy amqpscope cli
echo "== pytest"
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Install everything the test suite needs, then run all of it (README "Tests": what it installs, the
# disk it takes, how long it runs).
#   - .venv with amqpscope and its test extras (tools/install.sh test): the same pip command and build
#     profile as the quick start, so a core the quick start built is reused, not compiled again
#   - as root or with sudo, the Debian packages of tools/install-system-deps.sh
#   - the Rust checks: cargo fmt, clippy (-D warnings), cargo test, a short cargo-fuzz run (10 s a target,
#     AMQPSCOPE_FUZZ_SECONDS to change; cargo-fuzz is installed into ~/.cargo/bin); then ruff, mypy, pytest.
# Needs Rust (cargo) and Python 3.11+; Java 17 must be on the machine for the Spark tests.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "== $* (at $((SECONDS / 60))m$((SECONDS % 60))s)"; }
bash tools/install.sh test
if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; then
    step "Debian packages (tools/install-system-deps.sh)"
    bash tools/install-system-deps.sh
fi
# Set only now: setuptools-rust gives pip's own interpreter to pyo3, and the same one must build the
# workspace for clippy and the tests (pyo3's build script reruns whenever the interpreter changes).
export PYO3_PYTHON="$PWD/.venv/bin/python"
step "cargo fmt, clippy, test"
cargo fmt --all -- --check
cargo clippy -q --workspace --all-targets -- -D warnings
cargo test -q --workspace
step "cargo fuzz smoke run"
bash tools/fuzz-native.sh "${AMQPSCOPE_FUZZ_SECONDS:-10}"
step "ruff, mypy"
.venv/bin/ruff check -q .
.venv/bin/mypy amqpscope cli
step "pytest"
exec .venv/bin/python -m pytest "$@"

#!/usr/bin/env bash
# Install everything the test suite needs, then run all of it.
#   - a virtualenv in .venv with amqpscope and its test extras (pytest, hypothesis, pamqp, pika, pyspark, ...)
#   - Debian packages for the live tests: rabbitmq-server, tcpdump, tshark (tools/install-system-deps.sh)
# Java 17 must be on the machine for the Spark tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
if [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1; then
    bash tools/install-system-deps.sh
fi
exec .venv/bin/python -m pytest "$@"

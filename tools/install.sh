#!/usr/bin/env bash
# Install amqpscope into .venv (made if absent), editable, showing the native core's build as it goes.
#   tools/install.sh [EXTRAS]        e.g. tools/install.sh test   ->  pip install -e '.[test]'
# It runs `.venv/bin/python -m pip install -v -e .` and prints pip's own lines and cargo's
# `Compiling …`/`Finished …` lines; setuptools' and cargo's verbose lines go to .venv/install.log only
# (shown when the install fails). The build is the one `pip install -e .` makes (the `quick` cargo
# profile, see docs/build.md), so either command reuses the other's build.
set -euo pipefail
cd "$(dirname "$0")/.."
spec=.
[ $# -eq 0 ] || spec=".[$1]"
if [ ! -x .venv/bin/python ]; then
    echo "== python3 -m venv .venv"
    "${PYTHON:-python3}" -m venv .venv
fi
log=.venv/install.log
echo "== pip install -e '$spec' (the native core compiles the first time: minutes, see docs/build.md; log: $log)"
# setuptools-rust takes the interpreter that runs pip as PYO3_PYTHON unless one is set; a different
# one (or none) from one install to the next makes cargo rebuild the whole core.
unset PYO3_PYTHON
set +e
.venv/bin/python -m pip install -v -e "$spec" 2>&1 | tee "$log" |
    grep --line-buffered -E '^(Obtaining|Collecting|Successfully|ERROR)|^ +(Compiling|Finished) '
statuses=("${PIPESTATUS[@]}")
set -e
if [ "${statuses[0]}" -ne 0 ]; then
    echo "pip install failed (exit ${statuses[0]}); the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit "${statuses[0]}"
fi

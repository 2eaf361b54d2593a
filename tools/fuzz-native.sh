#!/usr/bin/env bash
# Fuzz the native core with cargo-fuzz (libFuzzer) on the stable toolchain.
#   tools/fuzz-native.sh [SECONDS] [TARGET...]    default: 20 s each of frames, field_table, stream, tls_records
# cargo fuzz needs nightly's -Z flags: RUSTC_BOOTSTRAP=1 lets stable accept them. Seeds: the streams,
# payloads and connections of samples/*.pcap (tools/fuzz_seeds.py). Crashes land in crates/amqpscope-core/fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(frames field_table stream tls_records)
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz
py=.venv/bin/python
[ -x "$py" ] || py=python3
"$py" -c "from amqpscope.dissect.tables import tables_json; print(tables_json())" > crates/amqpscope-core/fuzz/tables.json
[ -d crates/amqpscope-core/fuzz/corpus ] || "$py" tools/fuzz_seeds.py crates/amqpscope-core/fuzz/corpus
export RUSTC_BOOTSTRAP=1
cd crates/amqpscope-core
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    echo "== fuzz $t for ${secs}s"
    cargo fuzz run --sanitizer none "$t" "fuzz/corpus/$t" -- -max_total_time="$secs" -max_len=65536 \
        -print_final_stats=1 2>&1 | grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|==[0-9]+==|SUMMARY|thread .* panicked|Done)" || true
    if ls "fuzz/artifacts/$t"/crash-* >/dev/null 2>&1; then
        echo "fuzz $t: crash found: $(ls fuzz/artifacts/$t/crash-* | head -1)" >&2
        exit 1
    fi
done

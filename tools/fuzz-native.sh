#!/usr/bin/env bash
# Fuzz the native core with cargo-fuzz (libFuzzer) on the stable toolchain.
#   tools/fuzz-native.sh [SECONDS] [TARGET...]    default: 20 s each of frames, field_table, stream, tls_records
# One `cargo fuzz build` makes every target's binary (the core and its dependencies are compiled
# once, instrumented), then each target runs for SECONDS. The script fails when the build fails or
# when a run ends other than by its time limit: a crash (panic), an input running over
# AMQPSCOPE_FUZZ_TIMEOUT seconds (default 10) or memory over AMQPSCOPE_FUZZ_RSS_MB (default 2048);
# the input is then in crates/amqpscope-core/fuzz/artifacts/TARGET/ and the run's output in
# crates/amqpscope-core/fuzz/target/TARGET.log.
# cargo-fuzz is installed into ~/.cargo/bin (`cargo install --locked cargo-fuzz`) when absent. cargo
# fuzz needs nightly's -Z flags: RUSTC_BOOTSTRAP=1 lets stable accept them. Seeds: the streams,
# payloads and connections of samples/*.pcap (tools/fuzz_seeds.py).
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(frames field_table stream tls_records)
command -v cargo-fuzz >/dev/null || cargo install --locked -q cargo-fuzz
py=.venv/bin/python
[ -x "$py" ] || py=python3
"$py" -c "from amqpscope.dissect.tables import tables_json; print(tables_json())" > crates/amqpscope-core/fuzz/tables.json
[ -d crates/amqpscope-core/fuzz/corpus ] || "$py" tools/fuzz_seeds.py crates/amqpscope-core/fuzz/corpus
export RUSTC_BOOTSTRAP=1
cd crates/amqpscope-core
triple=$(rustc -vV | sed -n 's/^host: //p')
echo "== cargo fuzz build (every target)"
cargo fuzz build --sanitizer none --target "$triple"
bin=fuzz/target/$triple/release
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t" "fuzz/artifacts/$t"
    log=fuzz/target/$t.log
    echo "== fuzz $t for ${secs}s"
    # the flags `cargo fuzz run` would give, on the binary just built (a run must not rebuild)
    rc=0
    "$bin/$t" -artifact_prefix="fuzz/artifacts/$t/" -max_total_time="$secs" -max_len=65536 \
        -timeout="${AMQPSCOPE_FUZZ_TIMEOUT:-10}" -rss_limit_mb="${AMQPSCOPE_FUZZ_RSS_MB:-2048}" \
        -print_final_stats=1 "fuzz/corpus/$t" >"$log" 2>&1 || rc=$?
    sed -n -E '/^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb)/p' "$log"
    if [ "$rc" -ne 0 ]; then
        echo "fuzz $t failed (exit $rc); the end of crates/amqpscope-core/$log:" >&2
        tail -n 30 "$log" >&2
        exit 1
    fi
done

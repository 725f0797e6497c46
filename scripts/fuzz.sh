#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser hostile bytes reach (fuzz/fuzz_targets),
# with libFuzzer and AddressSanitizer on nightly Rust:
#
#   scripts/fuzz.sh [seconds per target] [target ...]
#
# Installs cargo-fuzz once if missing. Each target runs from its checked-in
# corpus (fuzz/corpus/<target>/); what libFuzzer finds worth keeping is added
# there, and a crash stops the run with its input in fuzz/artifacts/<target>/.
# Prints one line per target with libFuzzer's run count and coverage, for
# RELIABILITY.md. The short, stable-Rust replay of the same corpora is part
# of the test suite (tests/fuzz_corpus.rs).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
SECS=${1:-120}
shift || true
command -v cargo-fuzz >/dev/null || cargo install --locked cargo-fuzz
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
# cc-rs compiles the C dependencies (zstd) with AddressSanitizer under
# `-Zsanitizer=address`; librdkafka's configure then links its test programs
# against that libzstd, which needs the ASan runtime on the link line.
export LDFLAGS="${LDFLAGS:-} -fsanitize=address"
targets=("$@")
((${#targets[@]})) || mapfile -t targets < <(cargo +nightly fuzz list)
for t in "${targets[@]}"; do
  log=$(mktemp)
  cargo +nightly fuzz run "$t" "corpus/$t" -- -max_total_time="$SECS" -print_final_stats=1 > "$log" 2>&1 || {
    tail -40 "$log"; echo "== $t: FAILED (input in fuzz/artifacts/$t/)"; exit 1; }
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
  echo "== $t: ${SECS}s, $runs runs, $cov edges covered, no failure, corpus $(ls "corpus/$t" | wc -l) inputs"
done

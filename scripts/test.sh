#!/usr/bin/env bash
# The test suite: makes sure the real peers are there (Apache Kafka from
# Maven Central, Jaeger and the OpenTelemetry Collector built from the Go
# module proxy, the polyglot test bed's Go services and its Java services'
# jars with the OpenTelemetry Java agent: scripts/peers.sh, each once,
# cached by version and by the files that define it) and the
# Debian packages and npm modules the end-to-end tests start
# (scripts/deps.sh), then runs
# `cargo test --workspace --no-fail-fast` (extra args go to cargo), then
# the Node.js and Python root-cause beds behind the shipped sampler, and
# ends with the list of failed tests. Each test starts its own servers on
# free 127.0.0.1 ports.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase says what it does and, when it ends, how long it took.
t0=$SECONDS
phase_start=$SECONDS
phase() { echo "== $1"; phase_start=$SECONDS; }
took() { echo "== $1 took $((SECONDS - phase_start)) s"; }

phase "peers: Kafka, Jaeger, the Collector, the test bed's services (scripts/peers.sh; cached by version)"
. scripts/peers.sh
took peers

# Debian's packages and the test bed's npm modules (once; nothing when present).
phase "packages: Debian's servers and exporters, npm and pip modules (scripts/deps.sh; once)"
scripts/deps.sh
took packages

phase "build: cargo test --workspace --no-run"
cargo test --workspace --no-run "$@"
took build

# Every test binary runs even after one fails (--no-fail-fast); the run
# ends with the list of the tests that failed.
phase "tests: cargo test --workspace --no-fail-fast"
log=$(mktemp)
set +e
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
took tests

# The Node.js and Python beds again, as users wire causeway: behind
# examples/gateway.yaml's tail_sampling instead of always_sample (what it
# keeps is scored). The Java/Go and llama.cpp beds run so with
# `WIRING=shipped bench/rca_testbed.sh`; the code and retry beds always do.
phase "tests behind the shipped sampler: rca_testbed, rca_testbed_python"
set +e
CAUSEWAY_TESTBED_WIRING=shipped cargo test --no-fail-fast "$@" --test rca_testbed --test rca_testbed_python 2>&1 | tee -a "$log"
shipped_status=${PIPESTATUS[0]}
set -e
if [[ $shipped_status -ne 0 ]]; then status=$shipped_status; fi
took "tests behind the shipped sampler"
echo "== all phases took $((SECONDS - t0)) s"
failed=$(grep -E '^test .* \.\.\. FAILED$' "$log" | sed -E 's/^test (.*) \.\.\. FAILED$/\1/' || true)
binaries=$(grep -E '^error: .*test failed, to rerun pass' "$log" | sed -E 's/.*pass `(.*)`.*/\1/' || true)
rm -f "$log"
if [[ $status -ne 0 ]]; then
  echo
  echo "== failed tests"
  if [[ -n "$failed" ]]; then echo "$failed" | sed 's/^/  /'; fi
  if [[ -n "$binaries" ]]; then echo "== in test binaries"; echo "$binaries" | sed 's/^/  /'; fi
fi
exit "$status"

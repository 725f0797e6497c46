#!/usr/bin/env bash
# The root-cause test bed of real software, long run: NGINX, Redis, PostgreSQL
# and Node.js services on the stock OpenTelemetry SDK (tests/rca_testbed.rs),
# with the driver's load repeated SCALE times (default 5). Prints the per-cause
# table, the confusions and examples of rca.summary (BENCHMARKS.md).
# Needs what scripts/test.sh installs (run it once first).
set -euo pipefail
cd "$(dirname "$0")/.."
export CAUSEWAY_TESTBED_SCALE="${SCALE:-5}"
cargo test --test rca_testbed -- --nocapture 2>&1 | grep -E '^\||→|example|routes|not scored|test result'

#!/usr/bin/env bash
# The root-cause test beds of real software, long runs, with the drivers'
# load repeated SCALE times (default 5):
#   tests/rca_testbed.rs           NGINX, Redis, PostgreSQL, Kafka and Node.js
#                                  services on the stock OpenTelemetry SDK
#   tests/rca_testbed_polyglot.rs  Java (the OpenTelemetry Java agent) and Go
#                                  (otelhttp, otelgrpc) services over gRPC, two
#                                  NGINX in layers, PostgreSQL, Redis, Kafka
#   tests/rca_testbed_llm.rs       a coding assistant on the OpenAI client and
#                                  the official GenAI instrumentation, in front
#                                  of llama.cpp's own server, behind NGINX
# Prints each one's per-cause table, confusions, examples of rca.summary and
# the reliability table of the stated confidence (BENCHMARKS.md). Needs what
# scripts/test.sh installs and builds (run it once first); BED=node,
# BED=polyglot or BED=llm runs one.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/peers.sh >/dev/null
export CAUSEWAY_TESTBED_SCALE="${SCALE:-5}"
for bed in rca_testbed rca_testbed_polyglot rca_testbed_llm; do
  case "${BED:-all}:$bed" in
    all:* | node:rca_testbed | polyglot:rca_testbed_polyglot | llm:rca_testbed_llm) ;;
    *) continue ;;
  esac
  echo "== $bed (SCALE=$CAUSEWAY_TESTBED_SCALE)"
  cargo test --test "$bed" -- --nocapture 2>&1 | grep -E '^\||→|example|routes|not scored|test result|panicked'
done

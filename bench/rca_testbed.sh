#!/usr/bin/env bash
# The root-cause test beds of real software, long runs, with the drivers'
# load repeated SCALE times (default 5):
#   tests/rca_testbed.rs           NGINX, Redis, PostgreSQL, Kafka and Node.js
#                                  services on the stock OpenTelemetry SDK
#   tests/rca_testbed_polyglot.rs  Java (the OpenTelemetry Java agent) and Go
#                                  (otelhttp, otelgrpc) services over gRPC, two
#                                  NGINX in layers, PostgreSQL, Redis, Kafka
#   tests/rca_testbed_python.rs    Flask services on the stock OpenTelemetry
#                                  SDK, a breaker library, grpcio, SQLAlchemy
#   tests/rca_testbed_llm.rs       a coding assistant on the OpenAI client and
#                                  the official GenAI instrumentation, in front
#                                  of llama.cpp's own server, behind NGINX
# Prints each one's per-cause table, confusions, examples of rca.summary and
# the reliability table of the stated confidence (BENCHMARKS.md). Needs what
# scripts/test.sh installs and builds (run it once first); BED=node,
# BED=polyglot, BED=python or BED=llm runs one. WIRING=shipped runs them
# behind examples/gateway.yaml's tail_sampling instead of always_sample
# (what the sampler keeps is scored; what it drops is counted).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/peers.sh >/dev/null
export CAUSEWAY_TESTBED_SCALE="${SCALE:-5}"
export CAUSEWAY_TESTBED_WIRING="${WIRING:-keep_all}"
for bed in rca_testbed rca_testbed_polyglot rca_testbed_python rca_testbed_llm; do
  case "${BED:-all}:$bed" in
    all:* | node:rca_testbed | polyglot:rca_testbed_polyglot | python:rca_testbed_python | llm:rca_testbed_llm) ;;
    *) continue ;;
  esac
  echo "== $bed (SCALE=$CAUSEWAY_TESTBED_SCALE, WIRING=$CAUSEWAY_TESTBED_WIRING)"
  cargo test --test "$bed" -- --nocapture 2>&1 | grep -E '^\||→|example|routes|not scored|not kept|test result|panicked'
done

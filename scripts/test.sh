#!/usr/bin/env bash
# The test suite: makes sure the real peers are there (Apache Kafka from
# Maven Central, Jaeger and the OpenTelemetry Collector built from the Go
# module proxy, the polyglot test bed's Go services and its Java services'
# jars with the OpenTelemetry Java agent: scripts/peers.sh, each once,
# cached by version and by the files that define it) and the
# Debian packages and npm modules the end-to-end tests start
# (scripts/deps.sh), then runs
# `cargo test --workspace` (extra args go to cargo). Each test starts its own
# servers on free 127.0.0.1 ports.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/peers.sh

# Debian's packages and the test bed's npm modules (once; nothing when present).
scripts/deps.sh

cargo test --workspace "$@"

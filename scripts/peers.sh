#!/usr/bin/env bash
# The real peers of the test suite and the benches, each fetched or built once
# into a cache directory keyed by its version and by the files that define it:
#
#   Apache Kafka (broker jars from Maven Central, KRaft combined mode, Java 17)
#   Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, from the Go module proxy)
#   the OpenTelemetry Collector (tools/peers/otelcol: core v0.140.0 and contrib
#     v0.140.1, one release; v0.139.0, the one Jaeger v1.75.0 is built on, has
#     a loadbalancing exporter that cannot create its backends, contrib #43950)
#   the code test bed's Go service (tests/testbed/codeshop), async-profiler
#     (Maven Central) and its Java service (tests/testbed/javacode);
#   the polyglot test bed's services (tests/testbed/go: a Go binary from the
#     module proxy; tests/testbed/java: its jars from Maven Central, the
#     OpenTelemetry Java agent beside them, its classes compiled by javac)
#
# Source it (`. scripts/peers.sh`) to get CAUSEWAY_KAFKA_LIBS, CAUSEWAY_JAEGER
# and CAUSEWAY_OTELCOL exported; run it to only fetch and build. Nothing is
# done when the cache already holds a peer; each step says what it does.
set -euo pipefail

peers_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/peers"
PEERS_CACHE="${CAUSEWAY_PEERS:-${HOME:-/root}/.cache/causeway-peers}"
KAFKA_VERSION=4.1.1
JAEGER_VERSION=v1.75.0
OTELCOL_VERSION=v0.140.1
mkdir -p "$PEERS_CACHE"

# A short hash of the files that define a peer, so an edit rebuilds it.
peer_key() { cat "$@" | sha256sum | cut -c1-10; }

kafka_dir="$PEERS_CACHE/kafka-$KAFKA_VERSION-$(peer_key "$peers_root/kafka/pom.xml")"
if [[ ! -f "$kafka_dir/libs/kafka_2.13-$KAFKA_VERSION.jar" ]]; then
  echo "== fetching Apache Kafka $KAFKA_VERSION from Maven Central into $kafka_dir (once)"
  rm -rf "$kafka_dir.tmp"
  mvn -q -B -f "$peers_root/kafka/pom.xml" dependency:copy-dependencies \
    -Dkafka.version="$KAFKA_VERSION" -DincludeScope=runtime \
    -DoutputDirectory="$kafka_dir.tmp/libs"
  mv "$kafka_dir.tmp" "$kafka_dir"
fi
export CAUSEWAY_KAFKA_LIBS="$kafka_dir/libs"

# Go builds: the module proxy only (no VCS), read-only go.mod/go.sum as committed.
export GOFLAGS="-mod=readonly -buildvcs=false" GOTOOLCHAIN=local

jaeger_dir="$PEERS_CACHE/jaeger-$JAEGER_VERSION-$(peer_key "$peers_root/jaeger/go.mod" "$peers_root/jaeger/go.sum")"
if [[ ! -x "$jaeger_dir/jaeger" ]]; then
  echo "== building Jaeger $JAEGER_VERSION from the Go module proxy into $jaeger_dir (once; several minutes)"
  (cd "$peers_root/jaeger" && go build -trimpath -ldflags='-s -w' -o "$jaeger_dir/jaeger.tmp" \
    github.com/jaegertracing/jaeger/cmd/jaeger)
  mv "$jaeger_dir/jaeger.tmp" "$jaeger_dir/jaeger"
fi
export CAUSEWAY_JAEGER="$jaeger_dir/jaeger"

otelcol_dir="$PEERS_CACHE/otelcol-$OTELCOL_VERSION-$(peer_key "$peers_root/otelcol/go.mod" "$peers_root/otelcol/go.sum" "$peers_root/otelcol/main.go")"
if [[ ! -x "$otelcol_dir/otelcol" ]]; then
  echo "== building the OpenTelemetry Collector $OTELCOL_VERSION (tools/peers/otelcol) into $otelcol_dir (once; several minutes)"
  (cd "$peers_root/otelcol" && go build -trimpath -ldflags='-s -w' -o "$otelcol_dir/otelcol.tmp" .)
  mv "$otelcol_dir/otelcol.tmp" "$otelcol_dir/otelcol"
fi
export CAUSEWAY_OTELCOL="$otelcol_dir/otelcol"

# The Collector whose profiles proto is causeway's (OTLP 1.10: core v0.148.0,
# pdata v1.54.0): the OTLP components only, for tests/profiles_e2e.rs.
otelcol_profiles_dir="$PEERS_CACHE/otelcol-profiles-v0.148.0-$(peer_key "$peers_root/otelcol-profiles/go.mod" "$peers_root/otelcol-profiles/go.sum" "$peers_root/otelcol-profiles/main.go")"
if [[ ! -x "$otelcol_profiles_dir/otelcol" ]]; then
  echo "== building the OpenTelemetry Collector v0.148.0 (tools/peers/otelcol-profiles) into $otelcol_profiles_dir (once; a few minutes)"
  (cd "$peers_root/otelcol-profiles" && go build -trimpath -ldflags='-s -w' -o "$otelcol_profiles_dir/otelcol.tmp" .)
  mv "$otelcol_profiles_dir/otelcol.tmp" "$otelcol_profiles_dir/otelcol"
fi
export CAUSEWAY_OTELCOL_PROFILES="$otelcol_profiles_dir/otelcol"

testbed_root="$peers_root/../../tests/testbed"
tb_go_dir="$PEERS_CACHE/testbed-go-$(peer_key "$testbed_root"/go/go.mod "$testbed_root"/go/go.sum "$testbed_root"/go/*.go)"
if [[ ! -x "$tb_go_dir/testbed" ]]; then
  echo "== building the test bed's Go services (tests/testbed/go) into $tb_go_dir (once)"
  (cd "$testbed_root/go" && go build -trimpath -o "$tb_go_dir/testbed.tmp" .)
  mv "$tb_go_dir/testbed.tmp" "$tb_go_dir/testbed"
fi
export CAUSEWAY_TESTBED_GO="$tb_go_dir/testbed"

tb_code_dir="$PEERS_CACHE/testbed-codeshop-$(peer_key "$testbed_root"/codeshop/go.mod "$testbed_root"/codeshop/go.sum "$testbed_root"/codeshop/*.go)"
if [[ ! -x "$tb_code_dir/codeshop" ]]; then
  echo "== building the code test bed's Go service (tests/testbed/codeshop, otel-profiling-go) into $tb_code_dir (once)"
  (cd "$testbed_root/codeshop" && go build -o "$tb_code_dir/codeshop.tmp" .)
  mv "$tb_code_dir/codeshop.tmp" "$tb_code_dir/codeshop"
fi
export CAUSEWAY_TESTBED_CODESHOP="$tb_code_dir/codeshop"

OTEL_JAVAAGENT_VERSION=2.26.0
tb_java_dir="$PEERS_CACHE/testbed-java-$OTEL_JAVAAGENT_VERSION-$(peer_key "$testbed_root"/java/pom.xml "$testbed_root"/java/src/main/java/*.java)"
if [[ ! -f "$tb_java_dir/classes/Main.class" ]]; then
  echo "== fetching the test bed's Java libraries and the OpenTelemetry Java agent $OTEL_JAVAAGENT_VERSION into $tb_java_dir (once)"
  rm -rf "$tb_java_dir.tmp"
  mvn -q -B -f "$testbed_root/java/pom.xml" dependency:copy-dependencies -DincludeScope=runtime \
    -DoutputDirectory="$tb_java_dir.tmp/lib"
  mvn -q -B -f "$testbed_root/java/pom.xml" dependency:copy \
    -Dartifact="io.opentelemetry.javaagent:opentelemetry-javaagent:$OTEL_JAVAAGENT_VERSION" \
    -Dmdep.stripVersion=true -DoutputDirectory="$tb_java_dir.tmp"
  javac -d "$tb_java_dir.tmp/classes" -cp "$tb_java_dir.tmp/lib/*" "$testbed_root"/java/src/main/java/*.java
  mv "$tb_java_dir.tmp" "$tb_java_dir"
fi
export CAUSEWAY_TESTBED_JAVA="$tb_java_dir"

# async-profiler (its agent library, from Maven Central) and the Java
# service it profiles in tests/rca_testbed_code.rs (the JDK only).
ASYNC_PROFILER_VERSION=4.6
# async-profiler's converter (JFR to OTLP) is published up to 4.5; its JFR
# reader reads 4.6's recordings.
JFR_CONVERTER_VERSION=4.5
ap_dir="$PEERS_CACHE/async-profiler-$ASYNC_PROFILER_VERSION-$(peer_key "$testbed_root"/javacode/Ledger.java "$testbed_root"/javacode/Ship.java)"
if [[ ! -f "$ap_dir/linux-x64/libasyncProfiler.so" ]]; then
  echo "== fetching async-profiler $ASYNC_PROFILER_VERSION, its converter $JFR_CONVERTER_VERSION and compiling tests/testbed/javacode into $ap_dir (once)"
  rm -rf "$ap_dir.tmp"
  for artifact in "async-profiler:$ASYNC_PROFILER_VERSION" "jfr-converter:$JFR_CONVERTER_VERSION"; do
    mvn -q -B -f "$testbed_root/java/pom.xml" dependency:copy \
      -Dartifact="tools.profiler:$artifact" \
      -Dmdep.stripVersion=true -DoutputDirectory="$ap_dir.tmp"
  done
  (cd "$ap_dir.tmp" && jar xf async-profiler.jar linux-x64/libasyncProfiler.so)
  javac -d "$ap_dir.tmp/classes" -cp "$ap_dir.tmp/jfr-converter.jar" \
    "$testbed_root"/javacode/Ledger.java "$testbed_root"/javacode/Ship.java
  mv "$ap_dir.tmp" "$ap_dir"
fi
export CAUSEWAY_ASYNC_PROFILER="$ap_dir/linux-x64/libasyncProfiler.so"
export CAUSEWAY_JFR_CONVERTER="$ap_dir/jfr-converter.jar"
export CAUSEWAY_TESTBED_LEDGER="$ap_dir/classes"

echo "== peers: kafka $KAFKA_VERSION ($CAUSEWAY_KAFKA_LIBS), jaeger $JAEGER_VERSION, otelcol $OTELCOL_VERSION, otelcol for profiles v0.148.0"

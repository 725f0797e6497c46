#!/usr/bin/env bash
# The real peers of the test suite and the benches, each fetched or built once
# into a cache directory keyed by its version and by the files that define it:
#
#   Apache Kafka (broker jars from Maven Central, KRaft combined mode, Java 17)
#   Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, from the Go module proxy)
#   VictoriaLogs (tools/peers/victorialogs, from the Go module proxy: the loki
#     exporter's real server, its Loki push API and LogsQL queries)
#   the OpenTelemetry Collector (tools/peers/otelcol: core v0.140.0 and contrib
#     v0.140.1, one release; v0.139.0, the one Jaeger v1.75.0 is built on, has
#     a loadbalancing exporter that cannot create its backends, contrib #43950)
#   the code test bed's Go service (tests/testbed/codeshop), async-profiler
#     (Maven Central) and its Java service (tests/testbed/javacode);
#   the polyglot test bed's services (tests/testbed/go: a Go binary from the
#     module proxy; tests/testbed/java: its jars from Maven Central, the
#     OpenTelemetry Java agent beside them, its classes compiled by javac);
#   python-jsonschema (PyPI, in a venv: CAUSEWAY_SCHEMA_PYTHON checks
#     `causeway schema` as an editor would)
#
# Source it (`. scripts/peers.sh`) to get CAUSEWAY_KAFKA_LIBS, CAUSEWAY_JAEGER,
# CAUSEWAY_VICTORIALOGS and CAUSEWAY_OTELCOL exported; run it to only fetch and build. Nothing is
# done when the cache already holds a peer; each step says what it does.
set -euo pipefail

peers_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/peers"
PEERS_CACHE="${CAUSEWAY_PEERS:-${HOME:-/root}/.cache/causeway-peers}"
KAFKA_VERSION=4.1.1
JAEGER_VERSION=v1.75.0
VICTORIALOGS_VERSION=v1.52.2
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

victorialogs_dir="$PEERS_CACHE/victorialogs-$VICTORIALOGS_VERSION-$(peer_key "$peers_root/victorialogs/go.mod" "$peers_root/victorialogs/go.sum")"
if [[ ! -x "$victorialogs_dir/victoria-logs" ]]; then
  echo "== building VictoriaLogs $VICTORIALOGS_VERSION from the Go module proxy into $victorialogs_dir (once; a few minutes)"
  (cd "$peers_root/victorialogs" && go build -trimpath -ldflags='-s -w' -o "$victorialogs_dir/victoria-logs.tmp" \
    github.com/VictoriaMetrics/VictoriaLogs/app/victoria-logs)
  mv "$victorialogs_dir/victoria-logs.tmp" "$victorialogs_dir/victoria-logs"
fi
export CAUSEWAY_VICTORIALOGS="$victorialogs_dir/victoria-logs"

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

# The LLM test bed (tests/rca_testbed_llm.rs): llama.cpp's own server
# (`llama-server`, with `--metrics`), built from the llama.cpp that PyPI's
# llama-cpp-python source distribution vendors; a tiny llama-architecture
# model with random weights and llama.cpp's own vocabulary
# (tests/testbed/llm/make_model.py, PyPI's gguf); and the bed's venv: the
# OpenAI client with the official GenAI instrumentation
# (opentelemetry-instrumentation-openai-v2 2.4b0 works with
# opentelemetry-util-genai up to 1.1b0 and openai 2.x, whose client is on
# httpx), Flask, redis-py and the stock SDK. Several minutes, once.
LLAMA_CPP_PYTHON_VERSION=0.3.36
# (r1: the build recipe below; bump it when the recipe changes)
llm_dir="$PEERS_CACHE/llm-$LLAMA_CPP_PYTHON_VERSION-r1-$(peer_key "$testbed_root"/llm/make_model.py)"
if [[ ! -f "$llm_dir/tiny.gguf" ]]; then
  echo "== building llama.cpp's llama-server (llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's vendored tree), the LLM bed's venv and its model into $llm_dir (once; ~5 min)"
  rm -rf "$llm_dir.tmp"
  mkdir -p "$llm_dir.tmp"
  python3 -m venv "$llm_dir.tmp/venv"
  "$llm_dir.tmp/venv/bin/pip" install -q --disable-pip-version-check gguf==0.19.0 numpy==2.4.6
  "$llm_dir.tmp/venv/bin/pip" download -q --disable-pip-version-check --no-deps --no-binary :all: \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$llm_dir.tmp/sdist"
  tar -xzf "$llm_dir.tmp/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$llm_dir.tmp/sdist"
  src="$llm_dir.tmp/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp"
  # Ninja when there is one, else make.
  generator=(); if command -v ninja >/dev/null; then generator=(-G Ninja); fi
  cmake -S "$src" -B "$src/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
  cmake --build "$src/build" --target llama-server -j2 >/dev/null
  cp "$src/build/bin/llama-server" "$llm_dir.tmp/llama-server"
  # Two layers of 128: a 9K-token prompt prefills in seconds on one core.
  "$llm_dir.tmp/venv/bin/python" "$testbed_root/llm/make_model.py" "$src/models/ggml-vocab-llama-spm.gguf" \
    "$llm_dir.tmp/tiny.gguf" 128 2 16384 >/dev/null
  rm -rf "$llm_dir.tmp/sdist" "$llm_dir.tmp/venv"
  mv "$llm_dir.tmp" "$llm_dir"
fi
llm_venv="$PEERS_CACHE/pyvenv-llm-1"
if [[ ! -x "$llm_venv/bin/python" ]] || ! "$llm_venv/bin/python" -c 'import flask, redis, openai, opentelemetry.instrumentation.openai_v2, opentelemetry.instrumentation.flask, opentelemetry.instrumentation.redis, opentelemetry.exporter.otlp.proto.http' 2>/dev/null; then
  echo "== pip install the LLM bed's modules into $llm_venv (once)"
  rm -rf "$llm_venv"
  python3 -m venv "$llm_venv"
  "$llm_venv/bin/pip" install -q --disable-pip-version-check \
    openai==2.54.0 httpx==0.28.1 opentelemetry-instrumentation-openai-v2==2.4b0 opentelemetry-util-genai==1.1b0 \
    flask==3.1.3 redis==8.1.0 opentelemetry-api==1.45.1 opentelemetry-sdk==1.45.1 \
    opentelemetry-exporter-otlp-proto-http==1.45.1 opentelemetry-instrumentation==0.66b1 \
    opentelemetry-semantic-conventions==0.66b1 opentelemetry-instrumentation-flask==0.66b1 \
    opentelemetry-instrumentation-redis==0.66b1
fi
export CAUSEWAY_LLAMA_SERVER="$llm_dir/llama-server" CAUSEWAY_LLM_MODEL="$llm_dir/tiny.gguf" CAUSEWAY_LLM_PYTHON="$llm_venv/bin/python"

# python-jsonschema, the reference validator `tests/docs.rs` checks
# `causeway schema` with against the shipped configs (as an editor would).
schema_venv="$PEERS_CACHE/pyvenv-jsonschema-4.26.0"
if [[ ! -x "$schema_venv/bin/python" ]] || ! "$schema_venv/bin/python" -c 'import jsonschema' 2>/dev/null; then
  echo "== pip install jsonschema 4.26.0 into $schema_venv (once)"
  rm -rf "$schema_venv"
  python3 -m venv "$schema_venv"
  "$schema_venv/bin/pip" install -q --disable-pip-version-check jsonschema==4.26.0
fi
export CAUSEWAY_SCHEMA_PYTHON="$schema_venv/bin/python"

echo "== peers: kafka $KAFKA_VERSION ($CAUSEWAY_KAFKA_LIBS), jaeger $JAEGER_VERSION, victorialogs $VICTORIALOGS_VERSION, otelcol $OTELCOL_VERSION, otelcol for profiles v0.148.0"

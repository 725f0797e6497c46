#!/usr/bin/env bash
# What the end-to-end tests start besides the real peers (scripts/peers.sh):
# Debian's packages and the test bed's npm modules, each installed once.
# scripts/test.sh runs it; .ci/run runs it in the background while cargo
# builds, so the downloads overlap the compile. Nothing is done when all is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# The root-cause test bed (tests/rca_testbed.rs): NGINX, Redis and PostgreSQL
# from Debian, and the stock OpenTelemetry Node.js SDK from npm.
missing=()
[[ -x /usr/sbin/nginx ]] || missing+=(nginx-light)
[[ -x /usr/bin/redis-server ]] || missing+=(redis-server)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
command -v runuser >/dev/null || missing+=(util-linux)
# The persistent queue's fsync tests watch the daemon's syscalls.
command -v strace >/dev/null || missing+=(strace)
# The gateway_log rotation tests rotate with the real logrotate.
command -v logrotate >/dev/null || missing+=(logrotate)
# ...and compress the backups with each compresscmd the tailer reads.
for tool in gzip zstd xz bzip2; do
  command -v "$tool" >/dev/null || missing+=("$( [[ $tool == xz ]] && echo xz-utils || echo "$tool")")
done
# tests/real_backends_e2e.rs: the exporters against the real servers.
[[ -x /usr/bin/victoria-metrics ]] || missing+=(victoria-metrics)
[[ -x /usr/bin/prometheus ]] || missing+=(prometheus)
[[ -x /usr/bin/prometheus-alertmanager ]] || missing+=(prometheus-alertmanager)
# tests/prometheus_exporters_e2e.rs: the prometheus receiver against Debian's exporters.
[[ -x /usr/bin/prometheus-redis-exporter ]] || missing+=(prometheus-redis-exporter)
[[ -x /usr/bin/prometheus-nginx-exporter ]] || missing+=(prometheus-nginx-exporter)
[[ -x /usr/bin/prometheus-node-exporter ]] || missing+=(prometheus-node-exporter)
[[ -x /usr/bin/prometheus-postgres-exporter ]] || missing+=(prometheus-postgres-exporter)
# tests/rabbitmq_e2e.rs: a real RabbitMQ and a real AMQP client (pika).
[[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ]] || missing+=(rabbitmq-server)
/usr/bin/python3 -c 'import pika' 2>/dev/null || missing+=(python3-pika)
# tests/nats_e2e.rs: a real NATS server with JetStream.
command -v nats-server >/dev/null || [[ -x /usr/sbin/nats-server ]] || missing+=(nats-server)
# tests/ui_e2e.rs: the built-in page in a real headless browser.
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]})); then
  echo "== installing ${missing[*]} (apt-get, once)"
  if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; then
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
  fi
  # The packages' own services are not used: each test starts its own servers.
  (service nginx stop; service redis-server stop; service postgresql stop
   service prometheus stop; service prometheus-alertmanager stop; service victoria-metrics stop
   service prometheus-node-exporter stop; service prometheus-redis-exporter stop
   service prometheus-nginx-exporter stop; service prometheus-postgres-exporter stop
   service rabbitmq-server stop; service nats-server stop) >/dev/null 2>&1 || true
fi
# tests/nats_e2e.rs: nats-py traced by the stock OpenTelemetry Python SDK and
# PyPI's otel-instrumentation-nats, in a venv of their own (once, by version).
nats_venv="${HOME:-/root}/.cache/causeway-peers/pyvenv-nats-1"
if [[ ! -x "$nats_venv/bin/python" ]] || ! "$nats_venv/bin/python" -c 'import nats, otel_instrumentation_nats, opentelemetry.exporter.otlp.proto.http' 2>/dev/null; then
  echo "== pip install nats-py and the OpenTelemetry SDK into $nats_venv (once)"
  rm -rf "$nats_venv"
  python3 -m venv "$nats_venv"
  "$nats_venv/bin/pip" install -q --disable-pip-version-check nats-py==2.16.0 otel-instrumentation-nats==0.1.5 \
    opentelemetry-api==1.45.2 opentelemetry-sdk==1.45.2 opentelemetry-exporter-otlp-proto-http==1.45.2 \
    opentelemetry-instrumentation==0.66b2 opentelemetry-semantic-conventions==0.66b2
fi
# The Python test bed (tests/testbed/python): Flask, requests, grpcio,
# SQLAlchemy and the circuitbreaker package with the stock OpenTelemetry SDK and instrumentations
# (once, by version).
bed_venv="${HOME:-/root}/.cache/causeway-peers/pyvenv-bed-2"
if [[ ! -x "$bed_venv/bin/python" ]] || ! "$bed_venv/bin/python" -c 'import flask, requests, grpc, circuitbreaker, sqlalchemy, opentelemetry.instrumentation.sqlalchemy, opentelemetry.instrumentation.flask, opentelemetry.instrumentation.grpc, opentelemetry.instrumentation.requests, opentelemetry.exporter.otlp.proto.http' 2>/dev/null; then
  echo "== pip install the Python test bed's modules into $bed_venv (once)"
  rm -rf "$bed_venv"
  python3 -m venv "$bed_venv"
  "$bed_venv/bin/pip" install -q --disable-pip-version-check flask==3.1.3 requests==2.34.2 grpcio==1.85.1 \
    circuitbreaker==2.1.3 opentelemetry-api==1.45.1 opentelemetry-sdk==1.45.1 \
    opentelemetry-exporter-otlp-proto-http==1.45.1 opentelemetry-instrumentation==0.66b1 \
    opentelemetry-semantic-conventions==0.66b1 opentelemetry-instrumentation-flask==0.66b1 \
    opentelemetry-instrumentation-wsgi==0.66b1 opentelemetry-instrumentation-requests==0.66b1 \
    opentelemetry-instrumentation-grpc==0.66b1 opentelemetry-util-http==0.66b1 \
    sqlalchemy==2.0.58 opentelemetry-instrumentation-sqlalchemy==0.66b1
fi
if [[ ! -d tests/testbed/node_modules/@opentelemetry/sdk-node || ! -d tests/testbed/node_modules/amqplib || ! -d tests/testbed/node_modules/brakes ]]; then
  echo "== npm ci in tests/testbed (the OpenTelemetry Node.js SDK, express, ioredis, pg, amqplib, brakes; once)"
  (cd tests/testbed && npm ci --no-audit --no-fund --loglevel=error)
fi


#!/usr/bin/env bash
# The test suite: makes sure a Kafka-protocol broker (tansu) is installed for
# the Kafka tests, then runs `cargo test --workspace` (extra args go to cargo).
# Each Kafka test starts its own broker on a free 127.0.0.1 port.
set -euo pipefail
cd "$(dirname "$0")/.."

TANSU_VERSION=0.6.0
TANSU_ROOT="${CAUSEWAY_TANSU_ROOT:-${HOME:-/root}/.cache/tansu}"
if [[ -z "${CAUSEWAY_TANSU:-}" ]]; then
  if [[ -x "$TANSU_ROOT/bin/tansu" ]] && "$TANSU_ROOT/bin/tansu" --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    :
  elif command -v tansu >/dev/null && tansu --version 2>/dev/null | grep -q "$TANSU_VERSION"; then
    TANSU_ROOT="$(dirname "$(dirname "$(command -v tansu)")")"
  else
    echo "== installing the tansu broker $TANSU_VERSION to $TANSU_ROOT (once; long)"
    # Its own target directory, so the workspace build cache is not disturbed.
    CARGO_TARGET_DIR="$TANSU_ROOT/target" cargo install tansu --version "$TANSU_VERSION" \
      --features dynostore,libsql --locked --root "$TANSU_ROOT"
    rm -rf "$TANSU_ROOT/target"
  fi
  export CAUSEWAY_TANSU="$TANSU_ROOT/bin/tansu"
fi
echo "== broker: $CAUSEWAY_TANSU ($("$CAUSEWAY_TANSU" --version 2>/dev/null || echo '?'))"

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
   service rabbitmq-server stop) >/dev/null 2>&1 || true
fi
if [[ ! -d tests/testbed/node_modules/@opentelemetry/sdk-node || ! -d tests/testbed/node_modules/amqplib ]]; then
  echo "== npm ci in tests/testbed (the OpenTelemetry Node.js SDK, express, ioredis, pg, amqplib; once)"
  (cd tests/testbed && npm ci --no-audit --no-fund --loglevel=error)
fi

cargo test --workspace "$@"

#!/usr/bin/env bash
# Whole-daemon forwarding benchmark: OTLP/gRPC in -> batch -> OTLP/gRPC out.
# The daemon under test is pinned to CPU 0; the load generator and the sink
# share CPU 1. Reports spans/s, spans per daemon CPU-second and peak RSS.
#
#   [CAUSEWAY_PROFILE=dist] bench/forward.sh [seconds] [causeway|otelcol|rotel|both|all] [none|gzip|zstd] [none|gzip|zstd]
#
# The third argument is how the load generator compresses (pre-compressed
# requests, as an SDK or a sidecar Collector sends them), the fourth how the
# daemon exports (default: the same as the third). `otelcol` is the OpenTelemetry Collector
# (contrib v0.140.1, built by scripts/peers.sh) on the same pipeline; `both` is causeway and rotel, `all`
# the three in one run. rotel is installed with `pip install --pre rotel` when asked for; it
# exports gzip or none only.
# The daemon's CPU is read once the sink has gone idle, so it includes the
# batches still in flight when the load stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
WHICH=${2:-causeway}
COMP=${3:-none}
COMP_OUT=${4:-$COMP}
. bench/build.sh   # T, PROFILE, DAEMON, LG (CAUSEWAY_PROFILE=dist for the Dockerfile's build)
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)

run_one() {
  local name=$1; shift
  taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit 2 > "$OUT/$name-sink.json" &
  local sink=$!
  wait_port 15317
  taskset -c 0 "$@" > "$OUT/$name.log" 2>&1 &
  local daemon=$!
  wait_port 14317
  local before; before=$(cpu_ticks "$daemon")
  taskset -c 1 "$LG" send --target 127.0.0.1:14317 --seconds "$SECS" --spans 500 --concurrency 8 \
    --compression "$COMP" > "$OUT/$name-send.json"
  wait "$sink" || true
  local after; after=$(cpu_ticks "$daemon")
  local hwm; hwm=$(awk '/VmHWM/{print $2}' "/proc/$daemon/status")
  kill -TERM "$daemon"; wait "$daemon" || true
  python3 - "$name" "$OUT" "$before" "$after" "$TCK" "$hwm" "$COMP" "$COMP_OUT" <<'PY'
import json, sys
name, out, before, after, tck, hwm = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
send = json.load(open(f"{out}/{name}-send.json"))
sink = json.load(open(f"{out}/{name}-sink.json"))
cpu = (after - before) / tck
print(json.dumps({
  "daemon": name,
  "compression_in": sys.argv[7],
  "compression_out": sys.argv[8],
  "spans_accepted": send["spans_accepted"],
  "spans_at_sink": sink["spans_received"],
  "spans_per_sec": round(send["spans_per_sec"]),
  "daemon_cpu_seconds": round(cpu, 2),
  "spans_per_cpu_second": round(send["spans_accepted"] / cpu) if cpu else None,
  "peak_rss_mib": round(hwm / 1024, 1),
  "bytes_per_span": send["bytes_per_span"],
  "wire_bytes_per_span_in": send["wire_bytes_per_span"],
}))
PY
}

if [[ $WHICH == causeway || $WHICH == both || $WHICH == all ]]; then
  sed "s/compression: none/compression: $COMP_OUT/" bench/forward.yaml > "$OUT/forward.yaml"
  run_one causeway "$DAEMON" --config "$OUT/forward.yaml" --log-level warn
fi
if [[ $WHICH == otelcol || $WHICH == all ]]; then
  . scripts/peers.sh >&2
  # The same pipeline in the Collector's own keys (its telemetry off: causeway's is a port too).
  sed -e "s/compression: none/compression: $COMP_OUT/" -e '/^  telemetry:/,$d' bench/forward.yaml \
    | sed 's/^    sending_queue:/    tls: { insecure: true }\n    sending_queue:/' > "$OUT/otelcol.yaml"
  printf '  telemetry:\n    metrics: { level: none }\n' >> "$OUT/otelcol.yaml"
  run_one otelcol "$CAUSEWAY_OTELCOL" --config "$OUT/otelcol.yaml"
fi
if [[ $WHICH == rotel || $WHICH == both || $WHICH == all ]]; then
  ROTEL=$(python3 -c 'import rotel, os; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))' 2>/dev/null || true)
  if [[ -z $ROTEL ]]; then
    pip install --quiet --pre rotel
    ROTEL=$(python3 -c 'import rotel, os; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))')
  fi
  run_one rotel "$ROTEL" start --otlp-grpc-endpoint 127.0.0.1:14317 --otlp-http-endpoint 127.0.0.1:14318 \
    --exporter otlp --otlp-exporter-endpoint http://127.0.0.1:15317 --otlp-exporter-compression "$COMP_OUT"
fi

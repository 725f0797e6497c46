#!/usr/bin/env bash
# Whole-daemon benchmark driver: runs causeway on CONFIG pinned to CPU 0, the
# load generator and a counting OTLP sink (127.0.0.1:15317) on CPU 1, and
# prints spans/s, spans per daemon CPU-second and peak RSS as JSON.
#
#   bench/run.sh CONFIG SECONDS [loadgen send args...]
# CONFIG must receive OTLP/gRPC on 127.0.0.1:14317.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=$1; SECS=$2; shift 2
. bench/build.sh   # T, PROFILE, DAEMON, LG (CAUSEWAY_PROFILE=dist for the Dockerfile's build)
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)
wait_port() {
  for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; return 1
}
taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit 3 > "$OUT/sink.json" &
SINK=$!
wait_port 15317
taskset -c 0 "$DAEMON" --config "$CONFIG" --log-level warn > "$OUT/daemon.log" 2>&1 &
D=$!
wait_port 14317
BEFORE=$(awk '{print $14+$15}' /proc/$D/stat)
RSS0=$(awk '/VmRSS/{print $2}' /proc/$D/status)
taskset -c 1 "$LG" send --target 127.0.0.1:14317 --seconds "$SECS" "$@" > "$OUT/send.json"
AFTER=$(awk '{print $14+$15}' /proc/$D/stat)
RSS1=$(awk '/VmRSS/{print $2}' /proc/$D/status)
HWM=$(awk '/VmHWM/{print $2}' /proc/$D/status)
METRICS=$(curl -s "http://${CAUSEWAY_BENCH_TELEMETRY:-127.0.0.1:18888}/metrics" | grep -E '^causeway_tail_sampling_(pending|traces_total|early|decision_lag)' || true)
kill -TERM "$D"; wait "$D" || true
wait "$SINK" || true
python3 - "$OUT" "$BEFORE" "$AFTER" "$TCK" "$HWM" "$RSS0" "$RSS1" "$CONFIG" <<'PY'
import json, sys
out, before, after, tck, hwm, rss0, rss1, config = sys.argv[1], *map(int, sys.argv[2:8]), sys.argv[8]
send = json.load(open(f"{out}/send.json"))
sink = json.load(open(f"{out}/sink.json"))
cpu = (after - before) / tck
print(json.dumps({
  "config": config,
  "spans_accepted": send["spans_accepted"],
  "spans_at_sink": sink["spans_received"],
  "spans_per_sec": round(send["spans_per_sec"]),
  "daemon_cpu_seconds": round(cpu, 2),
  "spans_per_cpu_second": round(send["spans_accepted"] / cpu) if cpu else None,
  "rss_before_mib": round(rss0 / 1024, 1),
  "rss_after_send_mib": round(rss1 / 1024, 1),
  "peak_rss_mib": round(hwm / 1024, 1),
  "bytes_per_span": send["bytes_per_span"],
}))
PY
echo "$METRICS"

#!/usr/bin/env bash
# End-to-end gateway-log benchmark: a file of N JSON access-log lines (~320
# bytes each) -> gateway_log -> batch -> OTLP/gRPC -> counting sink. The
# daemon is pinned to CPU 0, the sink to CPU 1. Reports lines per daemon
# CPU-second and peak RSS.
#
#   bench/gateway_log.sh [lines]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-2000000}
. bench/build.sh   # T, PROFILE, DAEMON, LG (CAUSEWAY_PROFILE=dist for the Dockerfile's build)
export BENCH_DIR; BENCH_DIR=$(mktemp -d)
python3 - "$N" "$BENCH_DIR/access.log" <<'PY'
import sys, random
n, path = int(sys.argv[1]), sys.argv[2]
rules = ["qps-100-per-ip", "burst-20", "-"]
states = ["CLOSED", "HALF_OPEN", "OPEN"]
with open(path, "w") as f:
    for i in range(n):
        f.write('{"timestamp":"2026-11-29T10:%02d:%02d.%03dZ","trace_id":"%032x","span_id":"%016x","route_id":"user-service-v2","method":"GET","path":"/api/v2/users/%d","status_code":%d,"duration_ms":%d,"rate_limit_rule":"%s","circuit_state":"%s","upstream":"10.0.3.%d:8080","client_ip":"203.0.113.%d"}\n'
                % (i // 60000 % 60, i // 1000 % 60, i % 1000, i + 1, i + 1, i % 100000, [200, 200, 200, 429, 503][i % 5], 5 + i % 300, rules[i % 3], states[i % 3], i % 250, i % 250))
PY
SIZE=$(stat -c %s "$BENCH_DIR/access.log")
TCK=$(getconf CLK_TCK)
taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit 3 > "$BENCH_DIR/sink.json" &
SINK=$!
sleep 0.3
START=$(date +%s.%N)
taskset -c 0 "$DAEMON" --config bench/gateway_log.yaml --log-level warn > "$BENCH_DIR/daemon.log" 2>&1 &
D=$!
sent() { curl -s http://127.0.0.1:18888/metrics | awk '/^causeway_exporter_sent_items_total\{component="otlp\/sink",signal="logs"\}/{print $2}'; }
until [[ "$(sent)" == "$N" ]]; do sleep 0.1; done
END=$(date +%s.%N)
CPU=$(awk '{print $14+$15}' /proc/$D/stat)
HWM=$(awk '/VmHWM/{print $2}' /proc/$D/status)
kill -TERM "$D"; wait "$D" || true
wait "$SINK" || true
python3 - "$N" "$SIZE" "$CPU" "$TCK" "$HWM" "$START" "$END" "$BENCH_DIR/sink.json" <<'PY'
import json, sys
n, size, cpu, tck, hwm = map(int, sys.argv[1:6]); start, end = float(sys.argv[6]), float(sys.argv[7])
sink = json.load(open(sys.argv[8]))
cpu_s = cpu / tck
print(json.dumps({"lines": n, "bytes_per_line": round(size / n, 1), "records_at_sink": sink["log_records_received"],
  "wall_seconds": round(end - start, 2), "daemon_cpu_seconds": round(cpu_s, 2),
  "lines_per_cpu_second": round(n / cpu_s), "peak_rss_mib": round(hwm / 1024, 1)}))
PY
rm -rf "$BENCH_DIR"

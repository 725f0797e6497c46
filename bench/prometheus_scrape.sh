#!/usr/bin/env bash
# The prometheus receiver scraping many targets: CPU and memory.
#
#   bench/prometheus_scrape.sh [targets] [series per target] [interval] [rounds]
#
# Defaults: 200 targets × 2,000 series every 15 s, 8 rounds (2 minutes).
# The targets (bench/prom_targets.py, one asyncio process) serve
# node_exporter-shaped text: a quarter of the series in histograms, the rest
# gauges and counters with three labels, values changing every scrape.
# causeway (release build) scrapes them into a metrics pipeline with the
# `correlate` processor (so the dependency join's filter runs too) and a
# `debug` exporter at basic verbosity (counts only). Measured from
# /proc/<pid>: CPU seconds over the rounds after the first, and peak RSS
# (VmHWM).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=${1:-200}; SERIES=${2:-2000}; INTERVAL=${3:-15}; ROUNDS=${4:-8}
. bench/build.sh   # T, PROFILE, DAEMON, LG (CAUSEWAY_PROFILE=dist for the Dockerfile's build)
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)
FIRST=${FIRST_PORT:-31000}
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$OUT"; }
trap cleanup EXIT
python3 bench/prom_targets.py "$FIRST" "$TARGETS" "$SERIES" > "$OUT/targets.log" &
PIDS+=($!)
for _ in $(seq 1 100); do [ -s "$OUT/targets.log" ] && break; sleep 0.1; done
TLIST=$(seq "$FIRST" $((FIRST + TARGETS - 1)) | sed 's/.*/"127.0.0.1:&"/' | paste -sd, -)
cat > "$OUT/scrape.yaml" <<YAML
receivers:
  prometheus:
    config:
      global: { scrape_interval: ${INTERVAL}s, scrape_timeout: 10s }
      scrape_configs:
        - job_name: bench
          static_configs: [{ targets: [$TLIST] }]
processors:
  correlate: {}
exporters:
  debug: { verbosity: basic }
service:
  pipelines:
    metrics: { receivers: [prometheus], processors: [correlate], exporters: [debug] }
  telemetry: { metrics: { address: "127.0.0.1:18889" }, logs: { level: warn } }
YAML
"$DAEMON" --config "$OUT/scrape.yaml" > "$OUT/causeway.log" 2>&1 &
CW=$!
PIDS+=($CW)
cpu() { awk -v t="$TCK" '{print ($14 + $15) / t}' "/proc/$CW/stat"; }
metric() { curl -s "http://127.0.0.1:18889/metrics" | awk -v s="$1" 'index($0, s) == 1 {v += $NF} END {print v + 0}'; }
# The first round warms up (connections, buffers); measure the rest.
sleep "$INTERVAL"
C0=$(cpu); S0=$(metric 'causeway_receiver_accepted_items_total{component="prometheus"'); T0=$(date +%s.%N)
sleep $((INTERVAL * (ROUNDS - 1)))
C1=$(cpu); S1=$(metric 'causeway_receiver_accepted_items_total{component="prometheus"'); T1=$(date +%s.%N)
HWM=$(awk '/VmHWM/ {print $2}' "/proc/$CW/status")
RSS=$(awk '/VmRSS/ {print $2}' "/proc/$CW/status")
ERR=$(metric 'causeway_prometheus_scrape_errors_total')
python3 - "$C0" "$C1" "$S0" "$S1" "$T0" "$T1" "$HWM" "$RSS" "$ERR" "$TARGETS" "$SERIES" "$INTERVAL" <<'PY'
import json, sys
c0, c1, s0, s1, t0, t1, hwm, rss, err, n, series, interval = map(float, sys.argv[1:])
cpu, secs, points = c1 - c0, t1 - t0, s1 - s0
print(json.dumps({
    "targets": int(n), "series_per_target": int(series), "interval_s": interval,
    "seconds": round(secs, 1), "points": int(points),
    "points_per_s": round(points / secs),
    "cpu_share_of_one_core": round(cpu / secs, 4),
    "cpu_ms_per_round": round(cpu / (secs / interval) * 1000, 1),
    "cpu_us_per_point": round(cpu / points * 1e6, 2) if points else None,
    "peak_rss_mib": round(hwm / 1024, 1), "rss_mib": round(rss / 1024, 1),
    "scrape_errors": int(err),
}))
PY

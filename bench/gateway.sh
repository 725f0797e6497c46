#!/usr/bin/env bash
# The gateway pipeline of examples/gateway.yaml, as shipped, under a mixed
# load, with a CPU profile.
#
#   bench/gateway.sh [seconds] [spans/s] [log records/s] [points/s]
#
# Defaults: 30 s of 100,000 spans/s, 20,000 gateway log records/s and 5,000
# metric points/s (5 : 1 : 0.25, our reading of a site behind an API
# gateway: every request is a trace of 5 spans and one access-log record,
# host metrics every 10 s from a few hundred hosts).
#
# What runs, all on 127.0.0.1:
#  - causeway on examples/gateway.yaml unchanged (TLS and a bearer token on
#    OTLP, tail sampling with 5 policies, correlate with RCA on every kept
#    trace and alert rules, persistent queues under /var/lib/causeway/queue),
#    pinned to CPU 0, profiled with `perf record`;
#  - the load generator (spans over 5 requests each, 1.6 s apart, new trace
#    ids; log records carrying those trace ids; host gauges), over TLS;
#  - the Jaeger stand-in: the load generator's OTLP sink, which records when
#    each trace set is first exported;
#  - VictoriaMetrics (Debian package) for remote write;
#  - NGINX (Debian package) answering Loki's push API (204) and
#    Alertmanager's (200) without storing.
#  - kafka_lag points at a closed port (no broker): it retries quietly.
#
# Output: one JSON line (throughput, CPU counted until every pending trace is
# decided and exported, peak RSS, arrival-to-export latency p50/p99), the
# per-component CPU split from the profile, and bench/gateway-flamegraph.svg
# (inferno, installed with `cargo install inferno` when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-30}; SPANS=${2:-100000}; LOGS=${3:-20000}; POINTS=${4:-5000}
T=${CARGO_TARGET_DIR:-${HOME:-/root}/.cache/causeway-target}
export CARGO_TARGET_DIR=$T
# The `profiling` profile: release code generation with debug info, for
# perf; or binaries built already (CAUSEWAY_DAEMON and CAUSEWAY_LOADGEN, to
# compare two commits on one machine) and their config (CAUSEWAY_CONFIG).
if [ -n "${CAUSEWAY_DAEMON:-}" ]; then
  DAEMON=$CAUSEWAY_DAEMON; LG=${CAUSEWAY_LOADGEN:?set CAUSEWAY_LOADGEN with CAUSEWAY_DAEMON}
else
  cargo build --profile profiling -q -p causeway -p causeway-loadgen
  DAEMON=$T/profiling/causeway; LG=$T/profiling/loadgen
fi
CONFIG=${CAUSEWAY_CONFIG:-examples/gateway.yaml}
command -v inferno-flamegraph >/dev/null || cargo install -q inferno
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)
TOKEN=bench-token
wait_port() {
  for _ in $(seq 1 400); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; return 1
}
metric() { curl -sk -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:8888/metrics" | awk -v s="$1" -v t="${2:-$1}" 'index($0, s) == 1 && index($0, t) {v += $NF} END {print v + 0}'; }
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; }
trap cleanup EXIT

. bench/gateway_peers.sh
gateway_peers '[]' || { echo "the gateway's peers did not start (scripts/deps.sh installs NGINX and VictoriaMetrics)" >&2; exit 1; }
taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit 3 --seen-log "$OUT/seen.txt" \
  > "$OUT/sink.json" & SINK=$!; PIDS+=($SINK)
wait_port 15317
rm -rf /var/lib/causeway/queue; mkdir -p /var/lib/causeway/queue
CAUSEWAY_TLS_DIR=$OUT CAUSEWAY_OTLP_TOKEN=$TOKEN CAUSEWAY_TELEMETRY_TOKEN=$TOKEN KAFKA_BROKERS=127.0.0.1:1 \
  JAEGER_ENDPOINT=127.0.0.1:15317 LOKI_ENDPOINT=http://127.0.0.1:13100 \
  VM_ENDPOINT=http://127.0.0.1:18428 ALERTMANAGER_URL=http://127.0.0.1:13100 \
  taskset -c 0 "$DAEMON" --config "$CONFIG" > "$OUT/daemon.log" 2>&1 &
D=$!; PIDS+=($D)
wait_port 4317
perf record -F 99 --call-graph dwarf,16384 -p "$D" -o "$OUT/perf.data" > "$OUT/perf.log" 2>&1 & PERF=$!
BEFORE=$(awk '{print $14+$15}' /proc/$D/stat)
taskset -c 1 "$LG" send --target 127.0.0.1:4317 --tls-ca "$OUT/ca.crt" --token "$TOKEN" \
  --seconds "$SECS" --spans 500 --concurrency 8 --spread 80 --rate "$SPANS" \
  --logs-per-sec "$LOGS" --points-per-sec "$POINTS" --error-every 1000 --slow-every 500 \
  --sent-log "$OUT/sent.txt" > "$OUT/send.json"
SENT_AT=$(date +%s.%N)
# Drained: no trace pending or held, and nothing more delivered for 2 s (a
# persistent queue's size counts its segment's delivered records too, so it
# is no signal); those 2 s are counted.
last=-1; still=0
for _ in $(seq 1 1800); do
  p=$(metric causeway_tail_sampling_pending_traces)
  h=$(metric causeway_correlate_held_traces)
  sent=$(metric causeway_exporter_sent_items_total)
  if [[ $p == 0 && $h == 0 && $sent == "$last" ]]; then
    still=$((still + 1)); ((still >= 20)) && break
  else
    still=0
  fi
  last=$sent
  sleep 0.1
done
DECIDED_AT=$(date +%s.%N)
AFTER=$(awk '{print $14+$15}' /proc/$D/stat)
kill -INT "$PERF"; wait "$PERF" || true
HWM=$(awk '/VmHWM/{print $2}' /proc/$D/status)
SAMPLED=$(metric causeway_tail_sampling_traces_total 'decision="sampled"')
DROPPED=$(metric causeway_tail_sampling_traces_total 'decision="not_sampled"')
ANALYSED=$(metric causeway_correlate_analysed_traces_total)
LOGS_IN=$(metric causeway_receiver_accepted_items_total 'signal="logs"')
POINTS_IN=$(metric causeway_receiver_accepted_items_total 'signal="metrics"')
SENT_LOKI=$(metric causeway_exporter_sent_items_total 'component="loki"')
SENT_VM=$(metric causeway_exporter_sent_items_total 'component="victoriametrics"')
kill -TERM "$D"; wait "$D" || true
wait "$SINK" || true
perf script --no-inline -i "$OUT/perf.data" 2>/dev/null | inferno-collapse-perf > "$OUT/collapsed.txt"
inferno-flamegraph --title "causeway, examples/gateway.yaml, ${SPANS} spans/s + ${LOGS} logs/s + ${POINTS} points/s" \
  < "$OUT/collapsed.txt" > bench/gateway-flamegraph.svg
python3 - "$OUT" "$BEFORE" "$AFTER" "$TCK" "$HWM" "$SENT_AT" "$DECIDED_AT" "$SAMPLED" "$DROPPED" \
  "$ANALYSED" "$LOGS_IN" "$POINTS_IN" "$SENT_LOKI" "$SENT_VM" <<'PY'
import json, sys, collections
out = sys.argv[1]
before, after, tck, hwm = map(int, sys.argv[2:6])
sent_at, decided_at, sampled, dropped, analysed, logs_in, points_in, sent_loki, sent_vm = map(float, sys.argv[6:15])
send = json.load(open(f"{out}/send.json"))
sink = json.load(open(f"{out}/sink.json"))
cpu = (after - before) / tck
# Arrival-to-export latency per trace set: from the send of its first slice
# (the roots) and of its last slice, to the first export of any of its kept traces.
sent = {int(s): (int(a), int(b)) for s, a, b in (l.split() for l in open(f"{out}/sent.txt"))}
seen = {int(s): int(t) for s, t in (l.split() for l in open(f"{out}/seen.txt"))}
first, last = [], []
for s, t in seen.items():
    if s in sent:
        first.append(t - sent[s][0]); last.append(t - sent[s][1])
def pct(v, q):
    v = sorted(v); return v[min(len(v) - 1, int(q * len(v)))] if v else None
print(json.dumps({
  "spans_accepted": send["spans_accepted"],
  "spans_per_sec": round(send["spans_per_sec"]),
  "log_records_accepted": int(logs_in), "points_accepted": int(points_in),
  "traces_sampled": int(sampled), "traces_dropped": int(dropped),
  "kept_share": round(sampled / (sampled + dropped), 4) if sampled + dropped else None,
  "traces_analysed": int(analysed),
  "spans_at_jaeger_sink": sink["spans_received"],
  "log_records_to_loki": int(sent_loki), "points_to_victoriametrics": int(sent_vm),
  "seconds_from_load_stop_to_last_decision": round(decided_at - sent_at, 1),
  "daemon_cpu_seconds": round(cpu, 2),
  "spans_per_cpu_second": round(send["spans_accepted"] / cpu) if cpu else None,
  "peak_rss_mib": round(hwm / 1024, 1),
  "export_latency_ms_from_first_span": {"p50": pct(first, .5), "p99": pct(first, .99)},
  "export_latency_ms_from_last_span": {"p50": pct(last, .5), "p99": pct(last, .99)},
  "trace_sets_measured": len(first),
}))
# Per-component CPU from the profile: each sample goes to the innermost
# frame that names a component (its allocations and protobuf work
# included); samples outside any component go to a generic kind.
components = [
  ("receivers::otlp", "otlp receiver"),
  ("tail_sampling", "tail_sampling"),
  ("correlate", "correlate (join, RCA, alerts)"),
  ("processors::batch", "batch"),
  ("exporters::loki", "loki exporter"),
  ("exporters::victoriametrics", "victoriametrics exporter"),
  ("exporters::otlp", "otlp exporter"),
  ("exporters::alertmanager", "alertmanager exporter"),
  ("persistent", "persistent queue"),
  ("kafka_lag", "kafka_lag"),
  ("topology", "topology (pipeline plumbing)"),
]
generic = [
  ("datafusion", "datafusion (outside correlate frames)"), ("arrow", "datafusion (outside correlate frames)"),
  ("rustls", "TLS"), ("ring_core", "TLS"), ("ring::", "TLS"),
  ("h2::", "HTTP/2"), ("hyper", "HTTP/2"),
  ("rdkafka", "kafka_lag"),
  ("malloc", "allocator"), ("free", "allocator"),
  ("tokio", "runtime"),
]
totals = collections.Counter()
n = 0
for line in open(f"{out}/collapsed.txt"):
    stack, _, count = line.rstrip().rpartition(" ")
    c = int(count); n += c
    frames = stack.split(";")
    who = None
    for f in reversed(frames):
        who = next((name for pat, name in components if pat in f), None)
        if who: break
    if not who:
        for f in reversed(frames):
            who = next((name for pat, name in generic if pat in f), None)
            if who: break
    totals[who or "other (kernel, syscalls)"] += c
for who, c in totals.most_common():
    print(f"{who:40s} {100 * c / n:5.1f}%")
PY

#!/usr/bin/env bash
# Tail sampling with realistic arrival, CPU counted to the last decision.
#
#   [DAEMON=causeway|otelcol] bench/tail_sampling_realistic.sh [seconds] [spread] [config]
#
# DAEMON=otelcol runs the OpenTelemetry Collector (contrib v0.140.1, built by
# scripts/peers.sh) on bench/tail_sampling_otelcol.yaml, the same pipeline in
# its own keys, and reads its own self-metrics the same way.
#
# Every trace id is new. Each trace's 5 spans arrive in 5 different requests,
# `spread` requests apart (default 400: about 2 s apart at 400k spans/s), as
# SDK batch processors export a trace's spans over several batches. One span
# in 1,000 is an error, one trace in 500 is slow (3 s), and the config keeps
# errors, slow traces and 1% of the rest: about 2% of traces are kept.
#
# The daemon runs on CPU 0, the load generator and the counting sink on
# CPU 1. After the load stops, the script waits until no trace is pending,
# the exporter's queue is empty and the sink has gone idle, and only then
# reads the daemon's CPU time: every decision made and every kept span
# exported is paid for. With PROFILE=1 it also records a perf profile and
# prints the functions where the daemon's time went.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
SPREAD=${2:-400}
DAEMON=${DAEMON:-causeway}
T=${CARGO_TARGET_DIR:-${HOME:-/root}/.cache/causeway-target}
export CARGO_TARGET_DIR=$T
# With PROFILE=1 the `profiling` profile (release code generation with debug
# info, for perf); else $CAUSEWAY_PROFILE (release by default, or dist: the
# Dockerfile's build), as in bench/build.sh.
BUILD=${CAUSEWAY_PROFILE:-release}
[[ ${PROFILE:-0} == 1 ]] && BUILD=profiling
cargo build --profile "$BUILD" -q -p causeway -p causeway-loadgen
LG=$T/$BUILD/loadgen
if [[ $DAEMON == otelcol ]]; then
  . scripts/peers.sh >&2
  CONFIG=${3:-bench/tail_sampling_otelcol.yaml}
  RUN=("$CAUSEWAY_OTELCOL" --config "$CONFIG")
  M_PENDING=otelcol_processor_tail_sampling_sampling_traces_on_memory
  M_QUEUE=otelcol_exporter_queue_size
  M_DECIDED=otelcol_processor_tail_sampling_global_count_traces_sampled
  SAMPLED_SEL='sampled="true"'; DROPPED_SEL='sampled="false"'
else
  CONFIG=${3:-bench/tail_sampling.yaml}
  RUN=("$T/$BUILD/causeway" --config "$CONFIG" --log-level warn)
  M_PENDING=causeway_tail_sampling_pending_traces
  M_QUEUE=causeway_exporter_queue_size
  M_DECIDED=causeway_tail_sampling_traces_total
  SAMPLED_SEL='decision="sampled"'; DROPPED_SEL='decision="not_sampled"'
fi
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)
TEL=127.0.0.1:18888
wait_port() {
  for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; return 1
}
# metric NAME [TEXT]: the sum of NAME's series (those containing TEXT).
metric() { curl -s "http://$TEL/metrics" | awk -v s="$1" -v t="${2:-$1}" 'index($0, s) == 1 && index($0, t) {v += $NF} END {print v + 0}'; }

taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit 3 > "$OUT/sink.json" &
SINK=$!
wait_port 15317
taskset -c 0 "${RUN[@]}" > "$OUT/daemon.log" 2>&1 &
D=$!
wait_port 14317
if [[ ${PROFILE:-0} == 1 ]]; then
  perf record -F 99 --call-graph dwarf,16384 -p "$D" -o "$OUT/perf.data" > "$OUT/perf.log" 2>&1 & PERF=$!
fi
BEFORE=$(awk '{print $14+$15}' /proc/$D/stat)
START=$(date +%s.%N)
taskset -c 1 "$LG" send --target 127.0.0.1:14317 --seconds "$SECS" --spans 500 --concurrency 8 \
  --error-every 1000 --slow-every 500 --spread "$SPREAD" > "$OUT/send.json"
SENT_AT=$(date +%s.%N)
PENDING_AT_STOP=$(metric $M_PENDING)
# Every decision made, the queue drained, the sink idle.
for _ in $(seq 1 600); do
  p=$(metric $M_PENDING)
  q=$(metric $M_QUEUE)
  [[ $p == 0 && $q == 0 ]] && break
  sleep 0.1
done
DECIDED_AT=$(date +%s.%N)
wait "$SINK" || true
AFTER=$(awk '{print $14+$15}' /proc/$D/stat)
HWM=$(awk '/VmHWM/{print $2}' /proc/$D/status)
SAMPLED=$(metric $M_DECIDED "$SAMPLED_SEL")
DROPPED=$(metric $M_DECIDED "$DROPPED_SEL")
PENDING=$(metric $M_PENDING)
kill -TERM "$D"; wait "$D" || true
if [[ ${PROFILE:-0} == 1 ]]; then
  kill -INT "$PERF"; wait "$PERF" || true
  echo "== where the time went (self time, top 25)"
  perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio 2>/dev/null \
    | grep -E '^ +[0-9.]+%' | head -25
  echo "== by component (inclusive)"
  perf report -i "$OUT/perf.data" --children --sort symbol --stdio 2>/dev/null \
    | grep -E '^ +[0-9.]+% +[0-9.]+%' \
    | grep -E 'tail_sampling::TailSampling|extract::for_each_span|policy::|exporters::otlp|receivers::otlp::grpc::export|processors::batch|wire::scan|encode' | head -20
fi
python3 - "$OUT" "$BEFORE" "$AFTER" "$TCK" "$HWM" "$START" "$SENT_AT" "$DECIDED_AT" "$SAMPLED" "$DROPPED" "$PENDING" "$PENDING_AT_STOP" "$SPREAD" "$DAEMON" <<'PY'
import json, sys
out = sys.argv[1]
before, after, tck, hwm = map(int, sys.argv[2:6])
start, sent_at, decided_at, sampled, dropped, pending, pending_at_stop = map(float, sys.argv[6:13])
send = json.load(open(f"{out}/send.json"))
sink = json.load(open(f"{out}/sink.json"))
cpu = (after - before) / tck
print(json.dumps({
  "daemon": sys.argv[14],
  "spans_accepted": send["spans_accepted"],
  "spread_requests": int(sys.argv[13]),
  "spans_per_sec_while_sending": round(send["spans_per_sec"]),
  "traces_pending_when_load_stopped": int(pending_at_stop),
  "seconds_from_load_stop_to_last_decision": round(decided_at - sent_at, 1),
  "traces_sampled": int(sampled),
  "traces_dropped": int(dropped),
  "traces_pending_at_end": int(pending),
  "kept_share": round(sampled / (sampled + dropped), 4) if sampled + dropped else None,
  "spans_at_sink": sink["spans_received"],
  "daemon_cpu_seconds_to_last_decision": round(cpu, 2),
  "spans_per_cpu_second": round(send["spans_accepted"] / cpu) if cpu else None,
  "peak_rss_mib": round(hwm / 1024, 1),
}))
PY

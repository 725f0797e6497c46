#!/usr/bin/env bash
# The scaled-out tier on one machine: a sidecar (kafka exporter, keyed by
# trace id) -> Apache Kafka (one node, KRaft) -> N gateways (kafka receiver,
# one consumer group) -> tail sampling -> a counting sink.
#
#   [RATE=spans/s] bench/kafka_tier.sh [seconds] [gateways] [partitions]
#
# Arrival as bench/tail_sampling_realistic.sh: new trace ids, each trace's
# 5 spans in 5 requests about 2 s apart, ~2% of traces kept. The load
# generator sends for `seconds`; the script then waits until the gateways
# have read every span the sidecar wrote, decided every trace and emptied
# their queues, and reads each process's CPU time: spans per CPU-second of
# the sidecar and of the gateways together, and each one's peak RSS.
# The sidecar runs on CPU 0, the gateways on CPU 1; the broker and the load
# generator float (this machine has 2 cores: the broker competes with both).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-15}
N=${2:-1}
PARTS=${3:-6}
. bench/build.sh   # T, PROFILE, DAEMON, LG (CAUSEWAY_PROFILE=dist for the Dockerfile's build)
. bench/kafka_broker.sh
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)
wait_port() {
  for _ in $(seq 1 200); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; return 1
}
# metric PORT NAME [TEXT]: the sum of NAME's series (those containing TEXT).
metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v s="$2" -v t="${3:-$2}" 'index($0, s) == 1 && index($0, t) {v += $NF} END {print v + 0}'; }
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
hwm() { awk '/VmHWM/{print $2}' "/proc/$1/status"; }
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

# The topic is created on first use with PARTS partitions.
start_kafka "$OUT/kafka" 19092 19093 "num.partitions=$PARTS" "auto.create.topics.enable=true"
PIDS+=("$KAFKA_PID"); BROKER_PID=$KAFKA_PID
"$LG" sink --listen 127.0.0.1:15317 --idle-exit 5 > "$OUT/sink.json" &
SINK=$!
wait_port 15317
GW=(); GWPORT=()
for i in $(seq 1 "$N"); do
  port=$((18900 + i))
  TEL=127.0.0.1:$port taskset -c 1 "$DAEMON" --config bench/kafka_gateway.yaml --log-level warn > "$OUT/gw$i.log" 2>&1 &
  GW+=($!); GWPORT+=($port); PIDS+=($!)
  wait_port "$port"
done
# The group settled: every partition owned.
for _ in $(seq 1 300); do
  owned=0; for p in "${GWPORT[@]}"; do owned=$((owned + $(metric "$p" causeway_kafka_receiver_assigned_partitions))); done
  [[ $owned == "$PARTS" ]] && break
  sleep 0.1
done
taskset -c 0 "$DAEMON" --config bench/kafka_sidecar.yaml --log-level warn > "$OUT/sidecar.log" 2>&1 &
SC=$!; PIDS+=($SC)
wait_port 14317
SC0=$(cpu "$SC"); GW0=(); for p in "${GW[@]}"; do GW0+=($(cpu "$p")); done; TK0=$(cpu "$BROKER_PID")
START=$(date +%s.%N)
"$LG" send --target 127.0.0.1:14317 --seconds "$SECS" --spans 500 --concurrency 8 \
  --error-every 1000 --slow-every 500 --spread 400 --rate "${RATE:-0}" > "$OUT/send.json"
SENT_AT=$(date +%s.%N)
ACCEPTED=$(python3 -c "import json,sys; print(json.load(open('$OUT/send.json'))['spans_accepted'])")
# Every accepted span written to Kafka and acknowledged by the broker.
for _ in $(seq 1 600); do
  [[ $(metric 18888 causeway_exporter_sent_items_total 'signal="traces"') -ge $ACCEPTED ]] && break; sleep 0.1
done
SC1=$(cpu "$SC")
WRITTEN=$(metric 18888 causeway_exporter_sent_items_total 'signal="traces"')
# Every span read, every trace decided, every queue empty.
for _ in $(seq 1 1200); do
  read_=0; pend=0; q=0
  for p in "${GWPORT[@]}"; do
    read_=$((read_ + $(metric "$p" causeway_receiver_accepted_items_total 'signal="traces"')))
    pend=$((pend + $(metric "$p" causeway_tail_sampling_pending_traces)))
    q=$((q + $(metric "$p" causeway_exporter_queue_size)))
  done
  [[ $read_ -ge $WRITTEN && $pend == 0 && $q == 0 ]] && break
  sleep 0.1
done
DONE_AT=$(date +%s.%N)
GWCPU=0; GWHWM=""; PER=""
for i in "${!GW[@]}"; do
  c=$(( $(cpu "${GW[$i]}") - ${GW0[$i]} ))
  GWCPU=$((GWCPU + c))
  PER+="$c "
  GWHWM+="$(hwm "${GW[$i]}") "
done
TK1=$(cpu "$BROKER_PID")
SAMPLED=0; DROPPED=0; LATE=0
for p in "${GWPORT[@]}"; do
  LATE=$((LATE + $(metric "$p" causeway_tail_sampling_late_spans_total)))
  SAMPLED=$((SAMPLED + $(metric "$p" causeway_tail_sampling_traces_total 'decision="sampled"')))
  DROPPED=$((DROPPED + $(metric "$p" causeway_tail_sampling_traces_total 'decision="not_sampled"')))
done
SCHWM=$(hwm "$SC")
cleanup; trap - EXIT
python3 - "$OUT" "$TCK" "$N" "$PARTS" "$SC0" "$SC1" "$GWCPU" "$TK0" "$TK1" "$START" "$SENT_AT" "$DONE_AT" "$WRITTEN" "$SAMPLED" "$DROPPED" "$SCHWM" "$GWHWM" "$PER" "$LATE" <<'PY'
import json, sys
a = sys.argv
out, tck, n, parts = a[1], int(a[2]), int(a[3]), int(a[4])
sc0, sc1, gwcpu, tk0, tk1 = (int(x) for x in a[5:10])
start, sent_at, done_at = (float(x) for x in a[10:13])
written, sampled, dropped = (int(float(x)) for x in a[13:16])
late = int(float(a[19]))
send = json.load(open(f"{out}/send.json"))
sink = json.load(open(f"{out}/sink.json"))
sc = (sc1 - sc0) / tck
gw = gwcpu / tck
print(json.dumps({
  "gateways": n, "partitions": parts,
  "spans_accepted_by_sidecar": send["spans_accepted"],
  "spans_per_sec_while_sending": round(send["spans_per_sec"]),
  "spans_written_to_kafka": written,
  "seconds_from_load_stop_to_last_decision": round(done_at - sent_at, 1),
  "traces_sampled": sampled, "traces_dropped": dropped,
  "late_spans": late,
  "spans_at_sink": sink["spans_received"],
  "sidecar_cpu_seconds": round(sc, 2),
  "sidecar_spans_per_cpu_second": round(written / sc) if sc else None,
  "gateways_cpu_seconds": round(gw, 2),
  "gateway_cpu_seconds_each": [round(int(x) / tck, 2) for x in a[18].split()],
  "gateways_spans_per_cpu_second": round(written / gw) if gw else None,
  "broker_cpu_seconds": round((tk1 - tk0) / tck, 2),
  "sidecar_peak_rss_mib": round(int(a[16]) / 1024, 1),
  "gateway_peak_rss_mib": [round(int(x) / 1024, 1) for x in a[17].split()],
}))
PY

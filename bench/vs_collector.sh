#!/usr/bin/env bash
# Where a gateway tier spends its CPU, causeway and the OpenTelemetry
# Collector side by side in one run (issue #48's table), rotel beside them
# where it has the feature (forwarding, gzip or none).
#
#   [CAUSEWAY_DAEMON=binary] [PERF=1] bench/vs_collector.sh [seconds] [rounds] [rows]
#
# PERF=1 records each daemon with `perf record` (PERF_RECORD: more of its
# options, e.g. "--call-graph dwarf") and prints its top
# functions by self time (to stderr); on the gateway rows it records call
# graphs, prints causeway's CPU by component (bench/perf_buckets.py) and
# gives correlate's share (the samples with a correlate function on their
# stack) below the table. perf costs the daemon
# CPU: a PERF=1 run's figures are not comparable with another's.
# rows: a comma list of forward-gzip, forward-zstd, forward-none, tail,
# gateway and gateway-profiles, each as fast as the daemon takes it or, as
# ROW@RATE, at RATE spans/s (default: all, with forward-zstd@100000 and
# tail@50000). Each round runs every row's daemons one
# after another; the table gives each figure's median over the rounds, and
# every round's figure below it.
#
#  - forward-*: OTLP/gRPC in -> batch -> OTLP/gRPC out (bench/forward.yaml;
#    the Collector and rotel on the same pipeline in their own keys). The
#    load: 500 spans a request, pre-compressed as an SDK or a sidecar
#    Collector sends them, 8 in flight, as fast as the daemon takes them.
#  - tail: tail sampling (bench/tail_split.yaml, bench/tail_split_otelcol.yaml):
#    latency >= 500 ms OR status ERROR OR 10% by trace id, decision_wait 2 s.
#    The load: traces of 10-20 spans from 4 services, each trace's spans
#    split over 3 requests 40 requests apart, every trace id new (about 11%
#    kept). The sink records every trace id it receives: the kept sets of the
#    two daemons are compared on the trace sets both were sent (the policies
#    are deterministic, the Collector's hash and salt included).
#  - ROW@RATE: the row's load at RATE spans/s, below what either daemon
#    takes: memory compared at the same load (as fast as each takes it, a
#    sampler holds for decision_wait what it took in, and a forwarder that
#    outruns its sink fills its sending queue, so the faster holds more).
#  - gateway: examples/gateway.yaml as shipped (TLS and a bearer token, tail
#    sampling with 5 policies, correlate with RCA and alert rules, persistent
#    queues; Jaeger, Loki, VictoriaMetrics, Alertmanager) against the
#    Collector's nearest equivalent (bench/gateway_otelcol.yaml: tail
#    sampling with the policies it has, the same exporters, no correlate).
#    The load: the tail row's traces at 40,000 spans/s (both keep up),
#    8,000 gateway log records/s carrying their trace ids, 2,000 points/s.
#  - gateway-profiles: the gateway row with profiles flowing into
#    causeway: each of the 4 services' CPU and mutex profiles of the last
#    second, every second, 5,000 CPU samples/s in all (the services spend
#    50 cores on the requests whose spans arrive, profiled at Go's 100 Hz),
#    each linked to a span just sent, and 100 mutex samples/s
#    (`loadgen send --profile-samples-per-sec`). The Collector's gateway
#    joins no profiles: it gets the gateway row's load.
#
# The daemon under test runs on CPU 0, the load generator and the sink on
# CPU 1. CPU is counted from the daemon's start of load to the moment the
# sink has been idle for a while after the last span (every decision made,
# every kept span exported): spans per CPU-second is the figure that
# compares the daemons (forwarding: the spans delivered to the sink, since
# a daemon may drop what it accepted when its queue overflows; sampling:
# the spans taken in); peak RSS is VmHWM.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
ROUNDS=${2:-3}
ROWS=${3:-forward-gzip,forward-zstd,forward-none,tail,forward-zstd@100000,tail@50000,gateway,gateway-profiles}
if [[ -n ${CAUSEWAY_DAEMON:-} ]]; then # a daemon built already (another commit's)
  T=${CARGO_TARGET_DIR:-${HOME:-/root}/.cache/causeway-target}
  export CARGO_TARGET_DIR=$T
  cargo build --release -q -p causeway-loadgen
  DAEMON=$CAUSEWAY_DAEMON LG=$T/release/loadgen
else
  . bench/build.sh # T, PROFILE, DAEMON, LG
fi
. scripts/peers.sh >&2
set +e
set -uo pipefail
OTELCOL=$CAUSEWAY_OTELCOL
ROTEL=$(python3 -c 'import rotel, os; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))' 2>/dev/null)
if [[ -z $ROTEL ]]; then
  pip install --quiet --pre rotel >&2 &&
    ROTEL=$(python3 -c 'import rotel, os; print(os.path.join(os.path.dirname(rotel.__file__), "rotel-agent"))')
fi
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)
RESULTS=$OUT/results.jsonl
TOKEN=bench-token
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null; }
trap cleanup EXIT

wait_port() {
  for _ in $(seq 1 400); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; return 1
}

# measure ROW DAEMON ROUND PORT IDLE: runs RUN (the daemon, with ENVS) on CPU
# 0, the sink (SINK_ARGS) and the load (LOAD) on CPU 1; appends a JSON line.
measure() {
  local row=$1 name=$2 round=$3 port=$4 idle=$5 o="$OUT/$1-$2-$3"
  taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit "$idle" "${SINK_ARGS[@]}" > "$o-sink.json" &
  local sink=$!
  wait_port 15317 || return 1
  env "${ENVS[@]}" taskset -c 0 "${RUN[@]}" > "$o.log" 2>&1 &
  local d=$!
  if ! wait_port "$port"; then tail -5 "$o.log" >&2; kill $sink; return 1; fi
  local perf= record=${PERF_RECORD:-}
  [[ $row == gateway* && $name == causeway ]] && record="--call-graph dwarf,16384 -F 199"
  if [[ ${PERF:-0} == 1 ]]; then # where the daemon's time goes (self time by function)
    perf record -F 999 $record -p "$d" -o "$o.perf" > /dev/null 2>&1 & perf=$!
  fi
  local before; before=$(awk '{print $14+$15}' "/proc/$d/stat")
  taskset -c 1 "$LG" send --target "127.0.0.1:$port" --seconds "$SECS" "${LOAD[@]}" > "$o-send.json"
  wait "$sink"
  if [[ -n $perf ]]; then
    kill -INT "$perf"; wait "$perf"
    echo "== $1 $2: self time, top 30" >&2
    perf report -i "$o.perf" --no-children --sort dso,symbol --stdio 2>/dev/null | grep -E '^ +[0-9.]+%' | head -30 >&2
    if [[ $record == *call-graph* ]]; then # correlate's share: samples with it on the stack
      perf script --no-inline -i "$o.perf" -F ip,sym 2>/dev/null | python3 bench/perf_buckets.py > "$o.buckets"
      echo "== $1 $2: by component" >&2; grep '^|' "$o.buckets" >&2
      awk '/^correlate /{print $2}' "$o.buckets" > "$o.share"
      echo "== $1 $2: correlate's share $(cat "$o.share")%" >&2
    fi
  fi
  local after; after=$(awk '{print $14+$15}' "/proc/$d/stat")
  local hwm; hwm=$(awk '/VmHWM/{print $2}' "/proc/$d/status")
  kill -TERM "$d"; wait "$d"
  python3 - "$row" "$name" "$round" "$o" "$before" "$after" "$TCK" "$hwm" >> "$RESULTS" <<'PY'
import json, sys
row, name, rnd, o = sys.argv[1:5]
before, after, tck, hwm = map(int, sys.argv[5:9])
send = json.load(open(f"{o}-send.json")); sink = json.load(open(f"{o}-sink.json"))
cpu = (after - before) / tck
# Forwarding counts the spans delivered (a daemon whose queue overflows
# drops what it accepted: the Collector's batch processor does); sampling
# rows count the spans taken in (their kept sets are compared below).
done = min(send["spans_accepted"], sink["spans_received"]) if row.startswith("forward") else send["spans_accepted"]
try:
    share = float(open(f"{o}.share").read())
except (OSError, ValueError):
    share = None
print(json.dumps({"row": row, "daemon": name, "round": int(rnd), "spans_accepted": send["spans_accepted"],
  "spans_at_sink": sink["spans_received"], "cpu_s": round(cpu, 2),
  "spans_per_cpu_s": round(done / cpu) if cpu else None, "rss_mib": round(hwm / 1024, 1),
  "correlate_share": share}))
PY
  tail -1 "$RESULTS" >&2
}

forward() { # forward ROUND COMPRESSION
  local r=$1 c=$2
  SINK_ARGS=(); ENVS=(); LOAD=(--spans 500 --concurrency 8 --compression "$c" "${RATE[@]}")
  sed "s/compression: none/compression: $c/" bench/forward.yaml > "$OUT/forward-$c.yaml"
  RUN=("$DAEMON" --config "$OUT/forward-$c.yaml" --log-level warn)
  measure "$ROW" causeway "$r" 14317 2
  sed -e "s/compression: none/compression: $c/" -e '/^  telemetry:/,$d' bench/forward.yaml |
    sed 's/^    sending_queue:/    tls: { insecure: true }\n    sending_queue:/' > "$OUT/otelcol-$c.yaml"
  printf '  telemetry:\n    metrics: { level: none }\n' >> "$OUT/otelcol-$c.yaml"
  RUN=("$OTELCOL" --config "$OUT/otelcol-$c.yaml")
  measure "$ROW" otelcol "$r" 14317 2
  if [[ -n $ROTEL && $c != zstd ]]; then # rotel's exporter takes gzip or none
    RUN=("$ROTEL" start --otlp-grpc-endpoint 127.0.0.1:14317 --otlp-http-endpoint 127.0.0.1:14318
      --exporter otlp --otlp-exporter-endpoint http://127.0.0.1:15317 --otlp-exporter-compression "$c")
    measure "$ROW" rotel "$r" 14317 2
  fi
}

SPLIT=(--spans 500 --concurrency 8 --spread 40 --parts 3 --trace-spans 10-20 --services 4
  --error-every 1000 --slow-every 500)
tail_row() { # tail ROUND
  local r=$1
  ENVS=(); LOAD=("${SPLIT[@]}" "${RATE[@]}")
  SINK_ARGS=(--kept-log "$OUT/$ROW-causeway-$r-kept.txt")
  RUN=("$DAEMON" --config bench/tail_split.yaml --log-level warn)
  measure "$ROW" causeway "$r" 14317 3
  SINK_ARGS=(--kept-log "$OUT/$ROW-otelcol-$r-kept.txt")
  RUN=("$OTELCOL" --config bench/tail_split_otelcol.yaml)
  measure "$ROW" otelcol "$r" 14317 3
}

. bench/gateway_peers.sh
gateway_up() { gateway_peers '{}'; }
gateway_row() { # gateway ROUND [more of causeway's load]
  local r=$1
  SINK_ARGS=()
  LOAD=("${SPLIT[@]}" --tls-ca "$OUT/ca.crt" --token "$TOKEN" --rate 40000 --logs-per-sec 8000 --points-per-sec 2000 "${@:2}")
  ENVS=(CAUSEWAY_TLS_DIR="$OUT" CAUSEWAY_OTLP_TOKEN="$TOKEN" CAUSEWAY_TELEMETRY_TOKEN="$TOKEN"
    KAFKA_BROKERS=127.0.0.1:1 JAEGER_ENDPOINT=127.0.0.1:15317 LOKI_ENDPOINT=http://127.0.0.1:13100
    VM_ENDPOINT=http://127.0.0.1:18428 ALERTMANAGER_URL=http://127.0.0.1:13100)
  rm -rf /var/lib/causeway/queue && mkdir -p /var/lib/causeway/queue
  RUN=("$DAEMON" --config examples/gateway.yaml)
  measure "$ROW" causeway "$r" 4317 5
  LOAD=("${LOAD[@]:0:${#LOAD[@]}-$(($# - 1))}") # the Collector joins no profiles
  RUN=("$OTELCOL" --config bench/gateway_otelcol.yaml)
  measure "$ROW" otelcol "$r" 4317 5
}

if [[ ,$ROWS, == *,gateway* ]] && ! gateway_up; then
  echo "the gateway's peers did not start (scripts/deps.sh installs NGINX and VictoriaMetrics)" >&2
  exit 1
fi
for r in $(seq 1 "$ROUNDS"); do
  for ROW in ${ROWS//,/ }; do
    row=${ROW%@*} RATE=()
    [[ $ROW == *@* ]] && RATE=(--rate "${ROW#*@}")
    case $row in
      forward-*) forward "$r" "${row#forward-}" ;;
      tail) tail_row "$r" ;;
      gateway) gateway_row "$r" ;;
      gateway-profiles) gateway_row "$r" --profile-samples-per-sec 5000 ;;
      *) echo "unknown row $row" >&2; exit 2 ;;
    esac
  done
done

python3 - "$RESULTS" "$OUT" "$ROUNDS" <<'PY'
import json, sys, statistics, collections
res = [json.loads(l) for l in open(sys.argv[1])]
out, rounds = sys.argv[2], int(sys.argv[3])
by = collections.defaultdict(list)
for r in res:
    by[(r["row"], r["daemon"])].append(r)
names = {"forward-gzip": "forwarding gzip → gzip", "forward-zstd": "forwarding zstd → zstd",
         "forward-none": "forwarding, no compression",
         "tail": "tail sampling, traces split over 3 requests (~11% kept)",
         "gateway": "the gateway pipeline (causeway: + correlate; the Collector: without)",
         "gateway-profiles": "the gateway pipeline with 5,000 profile samples/s joined (the Collector: as above)"}
for row in sorted({r for r, _ in by if "@" in r}):
    base, rate = row.split("@")
    names[row] = f"{names[base]}, at {int(rate):,} spans/s (both keep up: memory at the same load)"
names["gateway"] = names.pop("gateway")
names["gateway-profiles"] = names.pop("gateway-profiles")
med = lambda rs, k: statistics.median(r[k] for r in rs if r[k] is not None)
print("| configuration | causeway spans/CPU-s | the Collector | ratio | rotel | causeway RSS | the Collector RSS | RSS ratio |")
print("|---|---|---|---|---|---|---|---|")
for row in names:
    c, o, t = by.get((row, "causeway")), by.get((row, "otelcol")), by.get((row, "rotel"))
    if not c or not o:
        continue
    cs, os_ = med(c, "spans_per_cpu_s"), med(o, "spans_per_cpu_s")
    cr, orr = med(c, "rss_mib"), med(o, "rss_mib")
    rot = f"{med(t, 'spans_per_cpu_s'):,.0f}" if t else "—"
    print(f"| {names[row]} | {cs:,.0f} | {os_:,.0f} | **{cs / os_:.1f}×** | {rot} | {cr:.0f} MiB | {orr:.0f} MiB | {cr / orr:.2f}× |")
shares = {row: [r["correlate_share"] for r in rs if r.get("correlate_share") is not None]
          for (row, d), rs in by.items() if d == "causeway"}
for row, s in shares.items():
    if s:
        print(f"\n{names.get(row, row)}: correlate on the stack in {statistics.median(s):.1f}% of causeway's perf samples (median of {len(s)})")
print()
print("Every round (spans accepted / at the sink / daemon CPU s / spans per CPU-s / peak RSS MiB):")
for (row, d), rs in sorted(by.items()):
    print(f"- {row} {d}: " + "; ".join(f"{r['spans_accepted']:,} / {r['spans_at_sink']:,} / {r['cpu_s']} / {r['spans_per_cpu_s']:,} / {r['rss_mib']}" for r in rs))
# The kept sets of the tail row, on the trace sets both daemons were sent
# whole: a trace id's bytes 4..8 are its set, and sets go out in blocks of
# 40 (--spread), part 0 of the block's sets first; the last block of a run
# may be partly sent.
def kept(path):
    try:
        rows = [l.split() for l in open(path)]
    except OSError:
        return None
    return {bytes.fromhex(h): f == "1" for h, f in rows}
for row, r in [(row, r) for row in names if row.split("@")[0] == "tail" for r in range(1, rounds + 1)]:
    c, o = kept(f"{out}/{row}-causeway-{r}-kept.txt"), kept(f"{out}/{row}-otelcol-{r}-kept.txt")
    if c is None or o is None:
        continue
    s = lambda k: int.from_bytes(k[4:8], "big")
    last = (min(max(map(s, c)), max(map(s, o))) - 1) // 40 * 40
    cc = {k for k in c if s(k) < last}; oo = {k for k in o if s(k) < last}
    det_c = {k for k in cc if c[k]}; det_o = {k for k in oo if o[k]}
    print(f"{row} round {r}: kept on sets below {last}: causeway {len(cc):,}, the Collector {len(oo):,}, "
          f"both {len(cc & oo):,}, only causeway {len(cc - oo):,}, only the Collector {len(oo - cc):,}; "
          f"with an error or slow span: causeway {len(det_c):,}, the Collector {len(det_o):,}, both {len(det_c & det_o):,}")
PY
echo "raw results: $RESULTS" >&2

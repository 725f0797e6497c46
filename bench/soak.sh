#!/usr/bin/env bash
# A soak: the gateway tier's pipeline (bench/soak.yaml) for 30 minutes at a
# steady mixed load, with a backend that flaps and a gateway log that
# rotates, recording every 10 s what would show a leak or a loss.
#
#   bench/soak.sh [seconds] [spans/s] [gateway lines/s]
#   SOAK_CPU_PERCENT=40 bench/soak.sh …   # the daemon under a CPU quota
#
# With SOAK_CPU_PERCENT, the daemon runs in a cgroup of its own held to
# that share of one core (cgroup v2 `cpu.max`, else v1
# `cpu.cfs_quota_us`), as a sidecar's CPU limit holds it: the tailer falls
# behind the rotations and reads what was compressed before it got there
# from the compressed backups (`causeway_gateway_log_compressed_lines_total`,
# in the last column of the CSV).
#
# Defaults: 1800 s of 10,000 spans/s (OTLP/gRPC, 5-span traces) and 1,000
# gateway access-log lines/s, all on 127.0.0.1:
#  - causeway ($CAUSEWAY_PROFILE, release by default) on bench/soak.yaml with its default memory budget;
#  - the backend: `loadgen sink`, up 60 s then down 20 s (UNAVAILABLE,
#    retryable) over and over, counting spans and log records received;
#  - a writer appending JSON access-log lines to access.log, reopening it
#    when it is renamed away, as NGINX does on USR1;
#  - Debian's logrotate every 30 s, alternating `create` + `compress` +
#    `delaycompress` and `create` + `compress` (5 backups kept). Not
#    `copytruncate`: it loses by itself what is written between its copy
#    and its truncation (7 lines a rotation at 1,000 lines/s in a first
#    run), which no reader can get back, so the loss count would not be
#    causeway's.
#  - `loadgen send` at a fixed rate.
#
# Every 10 s: resident memory, open files, the exporter's and the
# pipelines' queue sizes, what was sent and what reached the backend. At
# the end, after the backlog drains: bench/soak.csv, bench/soak.png (the
# plot) and one JSON line. The script fails if anything sent did not reach
# the backend, or if RSS grew after the warm-up (the correlate window, 10
# minutes, fills first): the last third's peak more than 10% above the
# middle third's.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-1800}; SPANS=${2:-10000}; LINES=${3:-1000}
. bench/build.sh   # T, PROFILE, DAEMON, LG (CAUSEWAY_PROFILE=dist for the Dockerfile's build)
command -v logrotate >/dev/null || apt-get install -y -q logrotate >/dev/null
/usr/bin/python3 -c 'import matplotlib' 2>/dev/null || apt-get install -y -q python3-matplotlib >/dev/null
export SOAK_DIR; SOAK_DIR=$(mktemp -d)
D=$SOAK_DIR
PIDS=()
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; }
trap cleanup EXIT
wait_port() {
  for _ in $(seq 1 400); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.05; done
  echo "port $1 never opened" >&2; return 1
}
metric() { curl -s http://127.0.0.1:18888/metrics | awk -v s="$1" 'index($0, s) == 1 {v += $NF} END {print v + 0}'; }

"$LG" sink --listen 127.0.0.1:15317 --idle-exit 100000 --flap 60,20 \
  --count-file "$D/sink.count" > "$D/sink.json" &
PIDS+=($!)
: > "$D/access.log"
mkdir -p "$D/state"
"$DAEMON" --config bench/soak.yaml --log-level warn > "$D/daemon.log" 2>&1 &
CW=$!; PIDS+=($CW)
wait_port 14317; wait_port 18888
if [[ -n ${SOAK_CPU_PERCENT:-} ]]; then
  quota=$(( SOAK_CPU_PERCENT * 1000 ))
  v2=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
  v1=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ {print $2; exit}' /proc/mounts)
  cg=""
  if [[ -n $v2 ]] && own=$(awk -F'::' '/^0::/ {print $2}' /proc/self/cgroup) \
      && mkdir -p "$v2$own/causeway-soak" 2>/dev/null \
      && echo "$quota 100000" > "$v2$own/causeway-soak/cpu.max" 2>/dev/null; then
    cg="$v2$own/causeway-soak"; how="cgroup v2 cpu.max"
  elif [[ -n $v1 ]] && mkdir -p "$v1/causeway-soak" \
      && echo "$quota" > "$v1/causeway-soak/cpu.cfs_quota_us"; then
    cg="$v1/causeway-soak"; how="cgroup v1 cpu.cfs_quota_us"
  else
    echo "no cgroup cpu controller to write: SOAK_CPU_PERCENT needs one" >&2; exit 1
  fi
  echo "$CW" > "$cg/cgroup.procs"
  echo "the daemon is held to $SOAK_CPU_PERCENT% of a core ($how, $cg)" >&2
fi

# The gateway: LINES a second, its count in written.count every second.
/usr/bin/python3 - "$D/access.log" "$LINES" "$D/written.count" <<'PY' &
import os, signal, sys, time
path, rate, count = sys.argv[1], int(sys.argv[2]), sys.argv[3]
stop = False
def on_term(*_):
    global stop
    stop = True
signal.signal(signal.SIGTERM, on_term)
f = open(path, "a")
n, t0, last = 0, time.time(), 0.0
while not stop:
    due = int((time.time() - t0) * rate)
    while n < due:
        f.write('{"timestamp":"%s","trace_id":"%032x","route_id":"orders","method":"GET","path":"/api/v1/orders/%d","status_code":200,"duration_ms":%d,"upstream":"10.0.3.%d:8080"}\n'
                % (time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), n + 1, n, 5 + n % 300, n % 250))
        n += 1
    f.flush()
    try:
        if os.stat(path).st_ino != os.fstat(f.fileno()).st_ino:
            f.close(); f = open(path, "a")  # renamed away and created again
    except FileNotFoundError:
        pass  # between logrotate's rename and its create
    if time.time() - last >= 1:
        open(count + ".tmp", "w").write(f"{n}\n"); os.replace(count + ".tmp", count); last = time.time()
    time.sleep(0.01)
f.close()
open(count, "w").write(f"{n}\n")
PY
WRITER=$!; PIDS+=($WRITER)

for i in 0 1; do
  if [[ $i == 0 ]]; then mode=$'  create\n  compress\n  delaycompress'; else mode=$'  create\n  compress'; fi
  printf '%s {\n  rotate 5\n  missingok\n  nomail\n%s\n}\n' "$D/access.log" "$mode" > "$D/logrotate-$i.conf"
done
(
  i=0
  while sleep 30; do
    logrotate -f -s "$D/logrotate.state" "$D/logrotate-$((i % 2)).conf" || echo "logrotate failed" >&2
    i=$((i + 1)); echo "$i" > "$D/rotations"
  done
) &
ROT=$!; PIDS+=($ROT)

"$LG" send --target 127.0.0.1:14317 --seconds "$SECS" --rate "$SPANS" \
  --concurrency 4 --spans 500 > "$D/send.json" &
SEND=$!; PIDS+=($SEND)

START=$(date +%s)
echo "t,rss_kb,open_files,exporter_queue,pipeline_queue,spans_accepted,spans_at_backend,lines_written,records_at_backend,backend_up,compressed_lines" > "$D/soak.csv"
sample() {
  local t=$(( $(date +%s) - START ))
  local rss fds q pq acc sink lines up
  rss=$(awk '/VmRSS/{print $2}' /proc/$CW/status)
  fds=$(ls /proc/$CW/fd | wc -l)
  q=$(metric causeway_exporter_queue_size)
  pq=$(metric causeway_pipeline_queue_size)
  acc=$(metric 'causeway_receiver_accepted_items_total{component="otlp",signal="traces"')
  sink=0; logs=0
  [[ -f $D/sink.count ]] && read -r sink logs < "$D/sink.count"
  lines=$(cat "$D/written.count" 2>/dev/null || echo 0)
  up=$(( (t % 80) < 60 ? 1 : 0 ))
  packed=$(metric causeway_gateway_log_compressed_lines_total)
  echo "$t,$rss,$fds,$q,$pq,$acc,$sink,$lines,$logs,$up,$packed" >> "$D/soak.csv"
}
while kill -0 "$SEND" 2>/dev/null; do sample; sleep 10; done
kill -TERM "$WRITER"; wait "$WRITER" || true
kill "$ROT" 2>/dev/null || true
ACCEPTED=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["spans_accepted"])' "$D/send.json")
WRITTEN=$(cat "$D/written.count")
# Drain: the backlog left by the last outage reaches the backend.
DEADLINE=$(( $(date +%s) + 600 ))
while :; do
  sample
  read -r sink logs < "$D/sink.count"
  [[ $sink -ge $ACCEPTED && $logs -ge $WRITTEN ]] && break
  [[ $(date +%s) -ge $DEADLINE ]] && break
  sleep 10
done
ROTATIONS=$(cat "$D/rotations" 2>/dev/null || echo 0)
cp "$D/soak.csv" bench/soak.csv
/usr/bin/python3 bench/soak_plot.py bench/soak.csv bench/soak.png "$ACCEPTED" "$WRITTEN" "$ROTATIONS" "$SECS"

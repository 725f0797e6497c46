#!/usr/bin/env bash
# What open pages cost: the forwarding benchmark (bench/forward.sh's load,
# OTLP/gRPC in -> batch -> OTLP/gRPC out, plus a 1% sample through
# tail_sampling and correlate so that the page has routes and traces to
# serve), once with nobody looking and once with 10 clients polling the
# page's API every 2 s (bench/ui_poll.py), alternating, ROUNDS times each.
# The daemon is pinned to CPU 0; the load generator, the sink and the
# pollers share CPU 1.
#
#   bench/ui_poll.sh [seconds] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-20}
ROUNDS=${2:-2}
. bench/build.sh   # T, PROFILE, DAEMON, LG (CAUSEWAY_PROFILE=dist for the Dockerfile's build)
TCK=$(getconf CLK_TCK)
OUT=$(mktemp -d)
sed "s|@OUT@|$OUT|" bench/ui_poll.yaml > "$OUT/ui_poll.yaml"

run_one() {
  local name=$1 clients=$2
  taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit 2 > "$OUT/$name-sink.json" &
  local sink=$!
  wait_port 15317
  taskset -c 0 "$DAEMON" --config "$OUT/ui_poll.yaml" --log-level warn > "$OUT/$name.log" 2>&1 &
  local daemon=$!
  wait_port 14317
  wait_port 18888
  local poller=""
  if ((clients > 0)); then
    taskset -c 1 python3 bench/ui_poll.py 127.0.0.1:18888 "$clients" 2 "$SECS" > "$OUT/$name-poll.json" &
    poller=$!
  fi
  local before; before=$(cpu_ticks "$daemon")
  taskset -c 1 "$LG" send --target 127.0.0.1:14317 --seconds "$SECS" --spans 500 --concurrency 8 \
    > "$OUT/$name-send.json"
  [[ -n $poller ]] && wait "$poller"
  wait "$sink" || true
  local after; after=$(cpu_ticks "$daemon")
  kill -TERM "$daemon"; wait "$daemon" || true
  python3 - "$name" "$OUT" "$before" "$after" "$TCK" "$clients" <<'PY'
import json, os, sys
name, out, before, after, tck, clients = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
send = json.load(open(f"{out}/{name}-send.json"))
sink = json.load(open(f"{out}/{name}-sink.json"))
poll = json.load(open(f"{out}/{name}-poll.json")) if os.path.exists(f"{out}/{name}-poll.json") else None
cpu = (after - before) / tck
print(json.dumps({
  "run": name, "pollers": clients,
  "spans_per_sec": round(send["spans_per_sec"]),
  "spans_at_sink": sink["spans_received"],
  "daemon_cpu_seconds": round(cpu, 2),
  "spans_per_cpu_second": round(send["spans_accepted"] / cpu) if cpu else None,
  "poll": poll,
}))
PY
}

# The page's own cost, without the noise of a saturated forwarding run: the
# daemon's CPU over SECS of 10 pollers after a load has filled its state.
poll_only() {
  taskset -c 1 "$LG" sink --listen 127.0.0.1:15317 --idle-exit 2 > "$OUT/po-sink.json" &
  local sink=$!
  wait_port 15317
  taskset -c 0 "$DAEMON" --config "$OUT/ui_poll.yaml" --log-level warn > "$OUT/po.log" 2>&1 &
  local daemon=$!
  wait_port 14317
  taskset -c 1 "$LG" send --target 127.0.0.1:14317 --seconds 10 --spans 500 --concurrency 8 > /dev/null
  wait "$sink" || true
  sleep 3  # tail sampling's decision_wait (2s) passes: the last traces analysed
  local idle0; idle0=$(cpu_ticks "$daemon")
  sleep "$SECS"
  local idle1; idle1=$(cpu_ticks "$daemon")
  taskset -c 1 python3 bench/ui_poll.py 127.0.0.1:18888 10 2 "$SECS" > "$OUT/po-poll.json"
  local polled1; polled1=$(cpu_ticks "$daemon")
  local traces; traces=$(curl -s 127.0.0.1:18888/api/traces | python3 -c 'import json,sys; print(json.load(sys.stdin)["kept"])')
  kill -TERM "$daemon"; wait "$daemon" || true
  python3 - "$idle0" "$idle1" "$polled1" "$TCK" "$SECS" "$traces" "$OUT/po-poll.json" <<'PY'
import json, sys
i0, i1, p1, tck, secs, traces = (int(x) for x in sys.argv[1:7])
poll = json.load(open(sys.argv[7]))
print(json.dumps({
  "run": "poll-only", "pollers": 10, "traces_kept_for_the_page": traces,
  "daemon_cpu_idle_s": round((i1 - i0) / tck, 2),
  "daemon_cpu_polled_s": round((p1 - i1) / tck, 2),
  "share_of_a_core_for_the_page": round(((p1 - i1) - (i1 - i0)) / tck / secs, 4),
  "poll": poll,
}))
PY
}

for r in $(seq 1 "$ROUNDS"); do
  run_one "idle-$r" 0
  run_one "polled-$r" 10
done
poll_only

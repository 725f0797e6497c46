#!/usr/bin/env python3
"""N clients polling the built-in page's API every P seconds, as open pages do.

    bench/ui_poll.py <telemetry host:port> <clients> <period_s> <seconds>

Each client loads the page and its assets once, then every period fetches
what the page fetches (routes, causes, traces, one trace, pipelines, kafka,
queues). Prints a JSON line: requests, failures, mean latency (ms)."""
import json
import sys
import threading
import time
import urllib.request

addr, clients, period, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
stats = {"requests": 0, "failures": 0, "ms": 0.0}
lock = threading.Lock()


def get(path):
    t0 = time.monotonic()
    ok = True
    body = b""
    try:
        with urllib.request.urlopen(f"http://{addr}{path}", timeout=10) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        ok = e.code < 500
    except Exception:
        ok = False
    with lock:
        stats["requests"] += 1
        stats["failures"] += 0 if ok else 1
        stats["ms"] += (time.monotonic() - t0) * 1000
    return body


def client(i):
    end = time.monotonic() + seconds
    for p in ("/", "/ui/app.js", "/ui/app.css"):
        get(p)
    time.sleep(period * i / clients)  # spread over the period, as pages opened at different times
    while time.monotonic() < end:
        t0 = time.monotonic()
        for p in ("/api/routes", "/api/causes", "/api/pipelines", "/api/kafka", "/api/queues"):
            get(p)
        try:
            traces = json.loads(get("/api/traces") or b"{}").get("traces", [])
        except ValueError:
            traces = []
        if traces:
            get("/api/traces/" + traces[0]["trace_id"])
        time.sleep(max(0.0, period - (time.monotonic() - t0)))


threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
n = max(1, stats["requests"])
print(json.dumps({"requests": stats["requests"], "failures": stats["failures"], "mean_ms": round(stats["ms"] / n, 2)}))

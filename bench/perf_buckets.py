#!/usr/bin/env python3
"""Where a daemon's CPU goes, by component: `perf script --no-inline -F ip,sym`
of a `perf record --call-graph dwarf` on stdin. Each sample goes to the first
component of the list below that has a frame on its stack (so the learning
that `correlate` does on `tail_sampling`'s tick is `correlate`'s, and TLS under
a receiver is TLS). Prints a Markdown row per component, heaviest first, then
`correlate SHARE`: the share of its components' samples, in percent.

    perf script --no-inline -i run.perf -F ip,sym | bench/perf_buckets.py
"""
import collections
import re
import sys

B = [
 ("correlate: learning from the traces not kept", r"correlate::stage::unkept"),
 ("correlate: the profiles source (window, join)", r"correlate::source::profiles"),
 ("correlate: the log window", r"correlate::source::Correlation::add_logs|correlate::store::logs"),
 ("correlate: the rules (DataFusion)", r"correlate::rules|datafusion|arrow"),
 ("correlate: the analysis of kept traces and the rest", r"correlate::"),
 ("tail sampling", r"tail_sampling::"),
 ("the Loki exporter", r"exporters::loki"),
 ("the VictoriaMetrics exporter", r"exporters::victoriametrics"),
 ("the OTLP exporter", r"exporters::otlp"),
 ("the receiver's schema check", r"wire::scan|wire::check|receivers::otlp::check"),
 ("the batch processor", r"processors::batch"),
 ("the persistent queues", r"exporter_runner|persist|::queue::"),
 ("librdkafka (the kafka_lag receiver's absent broker)", r"rdkafka|rd_kafka"),
 ("TLS", r"rustls::|\bring::|aws_lc|tokio_rustls"),
 ("HTTP/2 and gRPC", r"(?<![\w:])(h2|hyper|hyper_util|tonic|axum)::"),
]
rx = [(n, re.compile(p)) for n, p in B]
cnt = collections.Counter(); n = 0; frames = []
def flush():
    global n
    if not frames: return
    n += 1
    for name, r in rx:
        if any(r.search(f) for f in frames):
            cnt[name] += 1; return
    cnt["other (allocator, the runtime, the kernel)"] += 1
for line in sys.stdin:
    if not line.strip():
        flush(); frames = []; continue
    frames.append(line.strip())
flush()
if n:
    for k, v in cnt.most_common():
        print(f"| {k} | {100 * v / n:.1f}% |")
    share = sum(v for k, v in cnt.items() if k.startswith("correlate"))
    print(f"correlate {100 * share / n:.1f}")

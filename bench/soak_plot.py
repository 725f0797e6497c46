#!/usr/bin/env python3
"""The soak's figures and plot from its CSV (bench/soak.sh writes both).

    bench/soak_plot.py soak.csv soak.png spans_accepted lines_written rotations seconds

Prints one JSON line; exits 1 on any loss or when RSS grew after the
warm-up (the last third's peak more than 10% above the middle third's).
"""
import csv, json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
path, png, accepted, written, rotations, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
rows = [{k: float(v) for k, v in r.items()} for r in csv.DictReader(open(path))]
t = [r["t"] / 60 for r in rows]
load = [r for r in rows if r["t"] <= secs]
third = len(load) // 3
mid = max(r["rss_kb"] for r in load[third:2 * third]) / 1024
end = max(r["rss_kb"] for r in load[2 * third:]) / 1024
last = rows[-1]
lost_spans = accepted - int(last["spans_at_backend"])
lost_lines = written - int(last["records_at_backend"])
fig, ax = plt.subplots(4, 1, figsize=(10, 11), sharex=True)
ax[0].plot(t, [r["rss_kb"] / 1024 for r in rows], color="tab:blue")
ax[0].set_ylabel("RSS (MiB)"); ax[0].set_ylim(bottom=0)
ax[1].plot(t, [r["open_files"] for r in rows], color="tab:green")
ax[1].set_ylabel("open files"); ax[1].set_ylim(bottom=0)
ax[2].plot(t, [r["exporter_queue"] for r in rows], label="exporter queue (batches)")
ax[2].plot(t, [r["pipeline_queue"] for r in rows], label="pipeline queues (batches)")
ax[2].set_ylabel("queued"); ax[2].legend(loc="upper right")
ax[3].plot(t, [(r["spans_accepted"] - r["spans_at_backend"]) / 1000 for r in rows], label="spans accepted, not yet at the backend (k)")
ax[3].plot(t, [(r["lines_written"] - r["records_at_backend"]) / 1000 for r in rows], label="gateway lines written, not yet at the backend (k)")
ax[3].set_ylabel("in flight (k)"); ax[3].set_xlabel("minutes"); ax[3].legend(loc="upper right")
for a in ax:
    for r0, r1 in zip(rows, rows[1:]):
        if r0["backend_up"] == 0:
            a.axvspan(r0["t"] / 60, r1["t"] / 60, color="0.9", lw=0)
fig.suptitle(f"causeway soak: {secs // 60} min, backend down 20 s of every 80 (shaded), log rotated every 30 s ({rotations} rotations)")
fig.tight_layout()
fig.savefig(png, dpi=80)
out = {"minutes": secs / 60, "spans_accepted": accepted, "spans_lost": lost_spans,
       "lines_written": written, "lines_lost": lost_lines, "rotations": rotations,
       "rss_mib_peak_middle_third": round(mid, 1), "rss_mib_peak_last_third": round(end, 1),
       "rss_mib_first": round(rows[0]["rss_kb"] / 1024, 1),
       "open_files_max": int(max(r["open_files"] for r in rows)),
       "exporter_queue_max": int(max(r["exporter_queue"] for r in rows))}
print(json.dumps(out))
ok = lost_spans == 0 and lost_lines == 0 and end <= mid * 1.10
sys.exit(0 if ok else 1)

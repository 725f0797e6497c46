//! The host source: the pressure of the machines a trace's spans ran on
//! (CPU, iowait, memory, disk, PSI; GPUs by DCGM), from the `hostmetrics`
//! receiver or the Collector's, joined by the resource's machine (see
//! `HOST_KEYS`).
//!
//! - series: points whose resource names a machine (`k8s.node.name`,
//!   `host.name`, ...; a scraped target named only by its instance counts
//!   for `system.*` metrics only);
//! - rules' table `host` (host the trace ran on, declared in [`HOST`]);
//! - trouble: a host of the trace above the policy's `cpu_busy`, `iowait`
//!   or `memory_used`;
//! - a trace none of whose hosts has series while other hosts have is a
//!   join miss (`join="host"`).

use std::collections::{BTreeMap, BTreeSet};

use super::capabilities;
use super::{json, row_time, Asked, Join, Source, Tick, JOIN_ATTRS};
use super::{KeepsMetrics, ShowsTrouble};
use crate::correlate::model::cause::{self, Cause};
use crate::correlate::model::series::{find, machine, s, Kept, Offer, PointKind, ROUTE_KEYS};
use crate::correlate::model::table::{About, Column, Declared, Purpose, Traced, V};
use crate::correlate::model::{Joined, Key, Rule, Series, TraceRow};

/// The GPU was busy.
pub static GPU_SATURATION: Cause = Cause::new("gpu_saturation", cause::host);

/// The GPU's memory was nearly full.
pub static GPU_MEMORY_PRESSURE: Cause = Cause::new("gpu_memory_pressure", cause::host);

/// Tokenising the prompt held the CPU of the model server's host.
pub static TOKENIZER_CPU: Cause = Cause::new("tokenizer_cpu", cause::dependency);

/// The host's CPU was saturated.
pub static HOST_CPU_SATURATION: Cause = Cause::new("host_cpu_saturation", cause::host);

/// The host waited on its disks.
pub static HOST_IO_WAIT: Cause = Cause::new("host_io_wait", cause::host);

/// The host was short of memory.
pub static HOST_MEMORY_PRESSURE: Cause = Cause::new("host_memory_pressure", cause::host);

/// The host source.
#[derive(Debug, Default)]
pub struct Host;

/// Pressure of a host a trace ran on.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HostRow {
    /// `host.name`.
    pub host: String,
    /// Whether the culprit span ran there.
    pub culprit: bool,
    /// 1 − idle utilization.
    pub cpu_busy: Option<f64>,
    /// iowait utilization.
    pub iowait: Option<f64>,
    /// Memory used fraction.
    pub mem_used: Option<f64>,
    /// MemAvailable / total.
    pub mem_available_ratio: Option<f64>,
    /// Busiest disk's busy fraction.
    pub disk_util: Option<f64>,
    /// PSI some avg10 (%).
    pub psi_cpu: Option<f64>,
    /// PSI some avg10 (%).
    pub psi_memory: Option<f64>,
    /// PSI some avg10 (%).
    pub psi_io: Option<f64>,
    /// Busiest GPU's utilization (0..1; DCGM `DCGM_FI_DEV_GPU_UTIL` ÷ 100).
    pub gpu_util: Option<f64>,
    /// Fullest GPU's framebuffer memory used (0..1; `FB_USED ÷ (FB_USED + FB_FREE)`).
    pub gpu_mem_used: Option<f64>,
    /// Time of the latest point used (ns).
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
}

/// A host's pressure over a trace `(start, end)`: the readings nearest it —
/// the last one at or before its start, those during it and the first one
/// after it (a utilization or PSI reading at `t` is over the interval
/// before `t`), waiting no longer than `limit`. Not the busiest reading of
/// the minutes around it: a hog that ended a minute before a request did
/// not slow it.
fn host_row(series: &[Series], host: &str, (start, end): (u64, u64), limit: u64) -> HostRow {
    let mut reads = Reads {
        row: HostRow {
            host: host.to_string(),
            ..Default::default()
        },
        ..Default::default()
    };
    for s in series.iter().filter(|s| s.key.get("host") == Some(host)) {
        // From the last reading at or before the trace (its interval ends
        // where the trace begins), not the busiest of the minutes before.
        let from = s
            .points
            .iter()
            .rev()
            .map(|p| p.0)
            .find(|t| *t <= start)
            .unwrap_or(start);
        let to = s
            .points
            .iter()
            .map(|p| p.0)
            .find(|t| *t >= end && *t <= limit)
            .unwrap_or(end);
        if let Some(t) = reads.take(s, from, to) {
            row_time(&mut reads.row.time_ns, t);
        }
    }
    reads.finish()
}

fn max(a: Option<f64>, b: f64) -> Option<f64> {
    Some(a.map_or(b, |x| x.max(b)))
}

fn min(a: Option<f64>, b: f64) -> Option<f64> {
    Some(a.map_or(b, |x| x.min(b)))
}

/// A host's readings over a trace, as they are taken: the row, and what
/// makes the memory available ratio and the GPUs' memory in use.
#[derive(Default)]
struct Reads {
    row: HostRow,
    mem_total: Option<f64>,
    mem_avail: Option<f64>,
    /// By GPU: its memory used and free.
    fb: BTreeMap<String, (Option<f64>, Option<f64>)>,
}

impl Reads {
    /// Series `s` read over `from..=to`; the time of the reading taken.
    fn take(&mut self, s: &Series, from: u64, to: u64) -> Option<u64> {
        let mode = s
            .attr("cpu.mode")
            .or_else(|| s.attr("state"))
            .or_else(|| s.attr("system.memory.state"));
        match s.name.as_str() {
            "system.cpu.utilization" if mode == Some("idle") => {
                // The least idle in the interval: the busiest moment.
                s.points
                    .iter()
                    .filter(|(t, _)| *t >= from && *t <= to)
                    .fold(None, |acc: Option<(u64, f64)>, p| match acc {
                        Some(a) if a.1 <= p.1 => Some(a),
                        _ => Some(*p),
                    })
                    .map(|(t, v)| {
                        self.row.cpu_busy = max(self.row.cpu_busy, 1.0 - v);
                        t
                    })
            }
            "system.cpu.utilization" if mode == Some("iowait") || mode == Some("wait") => {
                s.max_in(from, to).map(|(t, v)| {
                    self.row.iowait = max(self.row.iowait, v);
                    t
                })
            }
            "system.memory.utilization" if mode == Some("used") => {
                s.max_in(from, to).map(|(t, v)| {
                    self.row.mem_used = max(self.row.mem_used, v);
                    t
                })
            }
            "system.linux.memory.available" => s
                .points
                .iter()
                .filter(|(t, _)| *t >= from && *t <= to)
                .map(|p| p.1)
                .reduce(f64::min)
                .map(|v| {
                    self.mem_avail = min(self.mem_avail, v);
                    s.points.back().map_or(0, |p| p.0)
                }),
            "system.memory.usage" => s.max_in(from, to).map(|(t, v)| {
                self.mem_total = Some(self.mem_total.unwrap_or(0.0) + v);
                t
            }),
            "system.disk.utilization" => s.max_in(from, to).map(|(t, v)| {
                self.row.disk_util = max(self.row.disk_util, v);
                t
            }),
            "system.disk.io_time" => s.rate_in(from, to).map(|v| {
                self.row.disk_util = max(self.row.disk_util, v.min(1.0));
                s.points.back().map_or(0, |p| p.0)
            }),
            "DCGM_FI_DEV_GPU_UTIL" => s.max_in(from, to).map(|(t, v)| {
                self.row.gpu_util = max(self.row.gpu_util, v / 100.0);
                t
            }),
            "DCGM_FI_DEV_FB_USED" | "DCGM_FI_DEV_FB_FREE" => s.max_in(from, to).map(|(t, v)| {
                let gpu = s.attr("gpu").or_else(|| s.attr("UUID")).unwrap_or("");
                let e = self.fb.entry(gpu.to_string()).or_default();
                if s.name == "DCGM_FI_DEV_FB_USED" {
                    e.0 = Some(v);
                } else {
                    e.1 = Some(v);
                }
                t
            }),
            "system.linux.pressure" => s.max_in(from, to).map(|(t, v)| {
                match s.attr("resource") {
                    Some("cpu") => self.row.psi_cpu = max(self.row.psi_cpu, v),
                    Some("memory") => self.row.psi_memory = max(self.row.psi_memory, v),
                    Some("io") => self.row.psi_io = max(self.row.psi_io, v),
                    _ => {}
                }
                t
            }),
            _ => None,
        }
    }

    fn finish(mut self) -> HostRow {
        for (used, free) in self.fb.values() {
            if let (Some(u), Some(f)) = (used, free) {
                if u + f > 0.0 {
                    self.row.gpu_mem_used = max(self.row.gpu_mem_used, u / (u + f));
                }
            }
        }
        if let (Some(a), Some(total)) = (self.mem_avail, self.mem_total) {
            if total > 0.0 {
                self.row.mem_available_ratio = Some(a / total);
            }
        }
        self.row
    }
}

/// The rules' table of the hosts the trace's spans ran on.
static HOST: Declared<Traced<HostRow>> = Declared {
    name: "host",
    doc: "A machine a span of the trace ran on, by the readings nearest the trace (the last at \
          or before its start, those during it, the first after it): one row per trace and host.",
    purpose: Purpose::Rules,
    columns: &[
        Column::<Traced<HostRow>>::text("trace_id", |r, _| V::S(Some(r.trace_id.as_str())))
            .doc("The trace."),
        Column::<Traced<HostRow>>::text("host", |r, _| V::S(Some(r.row.host.as_str())))
            .doc("The machine (`host.name`, `k8s.node.name`, …)."),
        Column::<Traced<HostRow>>::bool("culprit", |r, _| V::B(Some(r.row.culprit)))
            .doc("Whether the culprit span ran there."),
        Column::<Traced<HostRow>>::float("cpu_busy", |r, _| V::F(r.row.cpu_busy))
            .doc("CPU busy fraction (1 − idle), largest."),
        Column::<Traced<HostRow>>::float("iowait", |r, _| V::F(r.row.iowait))
            .doc("CPU iowait fraction, largest."),
        Column::<Traced<HostRow>>::float("mem_used", |r, _| V::F(r.row.mem_used))
            .doc("Memory used fraction, largest."),
        Column::<Traced<HostRow>>::float("mem_available_ratio", |r, _| {
            V::F(r.row.mem_available_ratio)
        })
        .doc("MemAvailable ÷ MemTotal over those readings."),
        Column::<Traced<HostRow>>::float("disk_util", |r, _| V::F(r.row.disk_util))
            .doc("The busiest disk's busy fraction."),
        Column::<Traced<HostRow>>::float("psi_cpu", |r, _| V::F(r.row.psi_cpu))
            .doc("CPU pressure stall, `some avg10` (%)."),
        Column::<Traced<HostRow>>::float("psi_memory", |r, _| V::F(r.row.psi_memory))
            .doc("Memory pressure stall, `some avg10` (%)."),
        Column::<Traced<HostRow>>::float("psi_io", |r, _| V::F(r.row.psi_io))
            .doc("I/O pressure stall, `some avg10` (%)."),
        Column::<Traced<HostRow>>::float("time_ms", |r, _| V::F(Some(r.row.time_ns as f64 / 1e6)))
            .doc("The latest reading used (ms since the epoch)."),
        Column::<Traced<HostRow>>::float("gpu_util", |r, _| V::F(r.row.gpu_util))
            .doc("The busiest GPU's utilization (0..1; DCGM `DCGM_FI_DEV_GPU_UTIL` ÷ 100)."),
        Column::<Traced<HostRow>>::float("gpu_mem_used", |r, _| V::F(r.row.gpu_mem_used))
            .doc("The fullest GPU's framebuffer used (0..1; `FB_USED ÷ (FB_USED + FB_FREE)`)."),
    ],
};

/// The `gpu_busy` rule.
const GPU_BUSY_SQL: &str = r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('GPU of ', max(h.host), ' ', CAST(CAST(round(max(h.gpu_util) * 100) AS BIGINT) AS VARCHAR),
         '% busy (DCGM_FI_DEV_GPU_UTIL) while ', max(s.service), ' ran ', coalesce(max(s.gen_ai_model), max(s.name)), ' for ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM spans s JOIN host h ON h.trace_id = s.trace_id AND h.host = s.host
WHERE (s.gen_ai_prefill_ms IS NOT NULL OR s.gen_ai_model IS NOT NULL) AND h.gpu_util >= 0.95
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 0.8 AS confidence,
  concat('GPU behind triton ', max(r.address), ' ', CAST(CAST(round(max(r.gpu_util) * 100) AS BIGINT) AS VARCHAR),
         '% busy (nv_gpu_utilization) while ', max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it') AS summary,
  max(s.span_id) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'triton' AND r.gpu_util >= 0.95
GROUP BY s.trace_id"#;

/// The `gpu_memory` rule.
const GPU_MEMORY_SQL: &str = r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('GPU memory of ', max(h.host), ' ', CAST(CAST(round(max(h.gpu_mem_used) * 100) AS BIGINT) AS VARCHAR),
         '% used (DCGM_FI_DEV_FB_USED of FB_USED + FB_FREE) while ', max(s.service), ' ran ', coalesce(max(s.gen_ai_model), max(s.name)), ' for ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM spans s JOIN host h ON h.trace_id = s.trace_id AND h.host = s.host
WHERE (s.gen_ai_prefill_ms IS NOT NULL OR s.gen_ai_model IS NOT NULL) AND h.gpu_mem_used >= 0.95
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 0.8 AS confidence,
  concat('GPU memory behind triton ', max(r.address), ' ', CAST(CAST(round(max(r.gpu_mem_used) * 100) AS BIGINT) AS VARCHAR),
         '% used (nv_gpu_memory_used_bytes of total) while ', max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it') AS summary,
  max(s.span_id) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'triton' AND r.gpu_mem_used >= 0.95
GROUP BY s.trace_id"#;

/// The `tokenizer_cpu` rule.
const TOKENIZER_CPU_SQL: &str = r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat(max(s.service), ' spent ', CAST(CAST(max(s.self_ms) AS BIGINT) AS VARCHAR), ' ms in ', max(s.name), ' on ', max(h.host),
         ', its CPU ', CAST(CAST(round(max(h.cpu_busy) * 100) AS BIGINT) AS VARCHAR), '% busy') AS summary,
  first_value(s.span_id ORDER BY s.self_ms DESC) AS culprit_span_id,
  max(s.self_ms) AS explained_ms
FROM spans s JOIN host h ON h.trace_id = s.trace_id AND h.host = s.host
WHERE s.critical AND regexp_like(lower(s.name), '(tokeni[sz]|detokeni[sz]|preprocess|pre-process|pre_process)')
  AND (h.cpu_busy >= 0.85 OR h.psi_cpu >= 40)
GROUP BY s.trace_id"#;

/// The `host_cpu` rule.
const HOST_CPU_SQL: &str = r#"
SELECT h.trace_id, 0.8 AS confidence,
  concat('host ', max(h.host), ' CPU saturated (', CAST(CAST(max(h.cpu_busy) * 100 AS BIGINT) AS VARCHAR), '% busy) while ',
         max(t.culprit_service), ' ran ', max(t.culprit_name)) AS summary,
  coalesce(max(t.culprit_excess_ms), max(t.culprit_self_ms)) AS explained_ms
FROM host h JOIN traces t ON h.trace_id = t.trace_id
WHERE h.culprit
  -- PSI alone is no saturation: on two cores, one single-threaded server
  -- and a few busy threads beside it make tasks wait 40% of the time at
  -- 60% busy (llama.cpp's bed), and the request's time went elsewhere.
  AND (h.cpu_busy >= 0.9 OR (h.psi_cpu >= 40 AND coalesce(h.cpu_busy, 1.0) >= 0.8))
  -- not a wait on a database: its time is the database's, which the
  -- caller's host does not slow (a query's own scan makes a shared host busy)
  AND t.culprit_db_system IS NULL
GROUP BY h.trace_id"#;

/// The `host_iowait` rule.
const HOST_IOWAIT_SQL: &str = r#"
SELECT h.trace_id, 0.8 AS confidence,
  concat('host ', max(h.host), ' waiting on disk IO (iowait ', CAST(CAST(coalesce(max(h.iowait), 0) * 100 AS BIGINT) AS VARCHAR),
         '%, disk busy ', CAST(CAST(coalesce(max(h.disk_util), 0) * 100 AS BIGINT) AS VARCHAR), '%) while ',
         max(t.culprit_service), ' ran ', max(t.culprit_name)) AS summary,
  coalesce(max(t.culprit_excess_ms), max(t.culprit_self_ms)) AS explained_ms
FROM host h JOIN traces t ON h.trace_id = t.trace_id
WHERE h.culprit AND (h.iowait >= 0.2 OR h.disk_util >= 0.9 OR h.psi_io >= 30)
  -- not a wait on a database: its time is the database's, which the
  -- caller's host does not slow (a query's own scan makes a shared host busy)
  AND t.culprit_db_system IS NULL
GROUP BY h.trace_id"#;

/// The `host_memory` rule.
const HOST_MEMORY_SQL: &str = r#"
SELECT h.trace_id, 0.8 AS confidence,
  concat('host ', max(h.host), ' under memory pressure (',
         CAST(CAST(coalesce(max(h.mem_used), 1 - min(h.mem_available_ratio)) * 100 AS BIGINT) AS VARCHAR), '% used) while ',
         max(t.culprit_service), ' ran ', max(t.culprit_name)) AS summary,
  coalesce(max(t.culprit_excess_ms), max(t.culprit_self_ms)) AS explained_ms
FROM host h JOIN traces t ON h.trace_id = t.trace_id
WHERE h.culprit AND (h.mem_used >= 0.95 OR h.mem_available_ratio <= 0.05 OR h.psi_memory >= 20)
  -- not a wait on a database: its time is the database's, which the
  -- caller's host does not slow (a query's own scan makes a shared host busy)
  AND t.culprit_db_system IS NULL
GROUP BY h.trace_id"#;

impl Source for Host {
    fn name(&self) -> &'static str {
        "host"
    }

    fn tables(&self) -> Vec<About> {
        vec![HOST.about()]
    }

    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        let hosts: BTreeSet<&str> = traces
            .iter()
            .flat_map(|t| t.spans.iter().map(|s| &*s.host))
            .filter(|h| !h.is_empty())
            .collect();
        // Any series with a host (DCGM's are kept by its dependency family).
        let series = if hosts.is_empty() {
            Vec::new()
        } else {
            tick.store
                .series
                .matching(|s| s.key.get("host").is_some_and(|h| hosts.contains(h)))
        };
        let any = tick.store.series.any_with("host");
        let mut rows = Vec::new();
        if series.is_empty() {
            // Nothing joins: every trace is a miss while other hosts report.
            return Ok(Join {
                tables: vec![HOST.batch(&rows)?],
                misses: if any { traces.len() as u64 } else { 0 },
            });
        }
        let mut misses = 0;
        for t in traces.iter_mut() {
            let (_, limit) = tick.interval(t);
            let culprit_host = t.spans[t.culprit].host.clone();
            let span_hosts: BTreeSet<std::sync::Arc<str>> = t
                .spans
                .iter()
                .map(|s| s.host.clone())
                .filter(|h| !h.is_empty())
                .collect();
            let mut joined = false;
            for h in span_hosts {
                let mut row = host_row(&series, &h, (t.start_ns, t.end_ns), limit);
                if row.time_ns == 0 {
                    continue;
                }
                row.culprit = *h == *culprit_host;
                t.joined.push(Joined::Metric("host", json(&row)));
                let trace_id = t.trace_id.clone();
                rows.push(Traced { trace_id, row });
                joined = true;
            }
            if !joined && any {
                misses += 1;
            }
        }
        Ok(Join {
            tables: vec![HOST.batch(&rows)?],
            misses,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r("gpu_busy", &GPU_SATURATION, GPU_BUSY_SQL),
            r("gpu_memory", &GPU_MEMORY_PRESSURE, GPU_MEMORY_SQL),
            r("tokenizer_cpu", &TOKENIZER_CPU, TOKENIZER_CPU_SQL),
            r("host_cpu", &HOST_CPU_SATURATION, HOST_CPU_SQL),
            r("host_iowait", &HOST_IO_WAIT, HOST_IOWAIT_SQL),
            r("host_memory", &HOST_MEMORY_PRESSURE, HOST_MEMORY_SQL),
        ]
    }

    capabilities!(metrics, trouble);
}

impl KeepsMetrics for Host {
    fn keep(&self, o: &Offer<'_>) -> Option<Kept> {
        if o.kind != PointKind::Number {
            return None;
        }
        let host = machine(o.resource, o.metric)?;
        Some(Kept {
            key: Key::new("host")
                .with("host", Some(host))
                .with("route_id", find(o.attrs, &ROUTE_KEYS).and_then(s)),
            drop: JOIN_ATTRS,
            add: Vec::new(),
        })
    }

    fn dims(&self) -> &'static [&'static str] {
        &["host", "route_id"]
    }
}

impl ShowsTrouble for Host {
    fn trouble_keys(&self) -> &'static [&'static str] {
        &["host.name"]
    }

    fn in_trouble(&self, asked: &Asked<'_, '_>) -> bool {
        let Asked {
            store,
            values,
            trouble: tr,
            ..
        } = *asked;
        let hosts = values("host.name");
        if hosts.is_empty() {
            return false;
        }
        let last = |s: &Series| s.points.back().map(|p| p.1);
        !store
            .series
            .matching(|s| {
                if !s.key.get("host").is_some_and(|h| hosts.contains(&h)) {
                    return false;
                }
                let mode = s
                    .attr("cpu.mode")
                    .or_else(|| s.attr("state"))
                    .or_else(|| s.attr("system.memory.state"));
                match (s.name.as_str(), mode) {
                    ("system.cpu.utilization", Some("idle")) => {
                        last(s).is_some_and(|v| 1.0 - v >= tr.cpu_busy)
                    }
                    ("system.cpu.utilization", Some("iowait" | "wait")) => {
                        last(s).is_some_and(|v| v >= tr.iowait)
                    }
                    ("system.memory.utilization", Some("used")) => {
                        last(s).is_some_and(|v| v >= tr.memory_used)
                    }
                    _ => false,
                }
            })
            .is_empty()
    }
}

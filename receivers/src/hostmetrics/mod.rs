//! The `hostmetrics` receiver: host CPU, memory, disk IO and pressure from
//! /proc, with the OpenTelemetry Collector hostmetrics receiver's names
//! (`system.cpu.time`, `system.cpu.utilization` by `cpu.mode`,
//! `system.cpu.load_average.*`, `system.memory.usage` / `.utilization` by
//! `system.memory.state`, `system.linux.memory.available`,
//! `system.disk.io_time`, `system.network.*`, `system.paging.*`), plus `system.disk.utilization`,
//! `system.linux.memory.anon` (AnonPages) and `system.linux.pressure`
//! (PSI `some avg10`, percent). `host.name` is on the resource, so the
//! correlation state can join a span's host with its pressure.

pub mod config;
pub mod proc;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Counter;
use causeway_core::topology::Output;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

use crate::metric_builder::{kv, Builder, Kind, Value};
use config::HostMetricsConfig;
use proc::{Reading, CPU_MODES};

causeway_core::metrics! {
    /// Problems reading /proc (file missing or malformed).
    pub Errors: counter = "causeway_hostmetrics_errors_total";
}

/// Factory of the `hostmetrics` receiver.
pub struct HostMetricsFactory;

#[async_trait]
impl ReceiverFactory for HostMetricsFactory {
    fn kind(&self) -> &'static str {
        "hostmetrics"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Metrics)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<HostMetricsConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<HostMetricsConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: HostMetricsConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let root = PathBuf::from(&cfg.root_path);
        let host = match &cfg.host_name {
            Some(h) => h.clone(),
            None => std::fs::read_to_string(root.join("proc/sys/kernel/hostname"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "unknown".into()),
        };
        let id = ctx.id.to_string();
        Ok(Box::new(HostMetricsReceiver {
            errors: ctx.telemetry.counter(Errors, &[("component", &id)]),
            id,
            root,
            host,
            interval: cfg.collection_interval.get(),
            cfg,
        }))
    }
}

struct HostMetricsReceiver {
    id: String,
    root: PathBuf,
    host: String,
    interval: std::time::Duration,
    errors: Counter,
    cfg: HostMetricsConfig,
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// The metrics of a reading; utilizations need the previous one (`prev`, taken `seconds` earlier).
pub fn to_metrics(
    host: &str,
    cur: &Reading,
    prev: Option<(&Reading, f64)>,
    time_ns: u64,
    start_ns: u64,
) -> ResourceMetrics {
    let mut b = Builder::new(time_ns, start_ns);
    cpu(&mut b, cur, prev);
    memory(&mut b, cur);
    disk(&mut b, cur, prev);
    network(&mut b, cur);
    paging_and_pressure(&mut b, cur);
    b.finish(
        vec![kv("host.name", host), kv("os.type", "linux")],
        "causeway.hostmetrics",
    )
}

/// CPU time by mode, its utilization over the last interval, logical CPUs, load averages.
fn cpu(b: &mut Builder, cur: &Reading, prev: Option<(&Reading, f64)>) {
    if let Some(cpu) = cur.cpu {
        for (i, mode) in CPU_MODES.iter().enumerate() {
            b.point(
                "system.cpu.time",
                Kind::Sum { monotonic: true },
                "s",
                "Seconds each logical CPU spent on each mode (summed over CPUs).",
                vec![kv("cpu.mode", mode)],
                Value::Double(cpu[i]),
            );
        }
    }
    if let Some(util) = prev.and_then(|(p, _)| proc::cpu_utilization(p, cur)) {
        for (i, mode) in CPU_MODES.iter().enumerate() {
            b.gauge(
                "system.cpu.utilization",
                "1",
                "Fraction of CPU time in each mode over the last interval, all CPUs.",
                vec![kv("cpu.mode", mode)],
                Value::Double(util[i]),
            );
        }
    }
    if cur.cpus > 0 {
        b.point(
            "system.cpu.logical.count",
            Kind::Sum { monotonic: false },
            "{cpu}",
            "Logical CPUs.",
            vec![],
            Value::Int(i64::try_from(cur.cpus).unwrap_or(i64::MAX)),
        );
    }
    if let Some([l1, l5, l15]) = cur.load {
        b.gauge(
            "system.cpu.load_average.1m",
            "{thread}",
            "Load average over 1 minute.",
            vec![],
            Value::Double(l1),
        );
        b.gauge(
            "system.cpu.load_average.5m",
            "{thread}",
            "Load average over 5 minutes.",
            vec![],
            Value::Double(l5),
        );
        b.gauge(
            "system.cpu.load_average.15m",
            "{thread}",
            "Load average over 15 minutes.",
            vec![],
            Value::Double(l15),
        );
    }
}

/// Memory by state, available and anonymous.
fn memory(b: &mut Builder, cur: &Reading) {
    let m = |k: &str| cur.mem.get(k).copied();
    if let (Some(total), Some(free)) = (m("MemTotal"), m("MemFree")) {
        let buffers = m("Buffers").unwrap_or(0);
        let cached = m("Cached").unwrap_or(0) + m("SReclaimable").unwrap_or(0);
        let used = total.saturating_sub(free + buffers + cached);
        for (state, v) in [
            ("used", used),
            ("free", free),
            ("buffered", buffers),
            ("cached", cached),
        ] {
            b.point(
                "system.memory.usage",
                Kind::Sum { monotonic: false },
                "By",
                "Bytes of memory in use, by state.",
                vec![kv("system.memory.state", state)],
                Value::Int(i64::try_from(v).unwrap_or(i64::MAX)),
            );
            if total > 0 {
                b.gauge(
                    "system.memory.utilization",
                    "1",
                    "Fraction of memory by state.",
                    vec![kv("system.memory.state", state)],
                    Value::Double(v as f64 / total as f64),
                );
            }
        }
    }
    if let Some(avail) = m("MemAvailable") {
        b.point(
            "system.linux.memory.available",
            Kind::Sum { monotonic: false },
            "By",
            "Memory available for new work without swapping (MemAvailable).",
            vec![],
            Value::Int(i64::try_from(avail).unwrap_or(i64::MAX)),
        );
    }
    if let Some(anon) = m("AnonPages") {
        b.point(
            "system.linux.memory.anon",
            Kind::Sum { monotonic: false },
            "By",
            "Anonymous memory (AnonPages): process heaps and stacks, not reclaimable without swap.",
            vec![],
            Value::Int(i64::try_from(anon).unwrap_or(i64::MAX)),
        );
    }
}

/// Disk IO time, and utilization over the last interval.
fn disk(b: &mut Builder, cur: &Reading, prev: Option<(&Reading, f64)>) {
    for (dev, secs) in &cur.disk_io_time {
        b.point(
            "system.disk.io_time",
            Kind::Sum { monotonic: true },
            "s",
            "Time the disk spent doing IO.",
            vec![kv("device", dev)],
            Value::Double(*secs),
        );
    }
    if let Some((p, seconds)) = prev {
        for (dev, u) in proc::disk_utilization(p, cur, seconds) {
            b.gauge(
                "system.disk.utilization",
                "1",
                "Fraction of the last interval the disk was busy.",
                vec![kv("device", &dev)],
                Value::Double(u),
            );
        }
    }
}

/// Network bytes, packets, errors and drops by device and direction.
fn network(b: &mut Builder, cur: &Reading) {
    for (dev, c) in &cur.network {
        for (name, unit, desc, v) in [
            (
                "system.network.io",
                "By",
                "Bytes received and transmitted.",
                c.bytes,
            ),
            (
                "system.network.packets",
                "{packet}",
                "Packets received and transmitted.",
                c.packets,
            ),
            (
                "system.network.errors",
                "{error}",
                "Errors receiving and transmitting.",
                c.errors,
            ),
            (
                "system.network.dropped",
                "{packet}",
                "Packets dropped receiving and transmitting.",
                c.dropped,
            ),
        ] {
            for (i, dir) in ["receive", "transmit"].iter().enumerate() {
                b.point(
                    name,
                    Kind::Sum { monotonic: true },
                    unit,
                    desc,
                    vec![kv("device", dev), kv("direction", dir)],
                    Value::Int(i64::try_from(v[i]).unwrap_or(i64::MAX)),
                );
            }
        }
    }
}

/// Paging operations and faults, swap usage, pressure stall information.
fn paging_and_pressure(b: &mut Builder, cur: &Reading) {
    let vm = |k: &str| cur.vmstat.get(k).copied();
    for (dir, minor, major) in [
        ("page_in", "pgpgin", "pswpin"),
        ("page_out", "pgpgout", "pswpout"),
    ] {
        for (ty, key) in [("minor", minor), ("major", major)] {
            if let Some(v) = vm(key) {
                b.point(
                    "system.paging.operations",
                    Kind::Sum { monotonic: true },
                    "{operation}",
                    "Paging operations: pages paged in and out (minor) and swapped in and out (major).",
                    vec![kv("direction", dir), kv("type", ty)],
                    Value::Int(i64::try_from(v).unwrap_or(i64::MAX)),
                );
            }
        }
    }
    if let (Some(all), Some(major)) = (vm("pgfault"), vm("pgmajfault")) {
        for (ty, v) in [("minor", all.saturating_sub(major)), ("major", major)] {
            b.point(
                "system.paging.faults",
                Kind::Sum { monotonic: true },
                "{fault}",
                "Page faults.",
                vec![kv("type", ty)],
                Value::Int(i64::try_from(v).unwrap_or(i64::MAX)),
            );
        }
    }
    for (dev, (size, used)) in &cur.swaps {
        for (state, v) in [("used", *used), ("free", size.saturating_sub(*used))] {
            b.point(
                "system.paging.usage",
                Kind::Sum { monotonic: false },
                "By",
                "Swap space in use and free, by device.",
                vec![kv("device", dev), kv("state", state)],
                Value::Int(i64::try_from(v).unwrap_or(i64::MAX)),
            );
        }
    }
    for (res, v) in &cur.pressure {
        b.gauge(
            "system.linux.pressure",
            "%",
            "Pressure stall information: share of time some task waited on the resource (avg10).",
            vec![kv("resource", res)],
            Value::Double(*v),
        );
    }
}

#[async_trait]
impl Receiver for HostMetricsReceiver {
    async fn run(
        self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let start_ns = now_ns();
        let mut prev: Option<(Reading, std::time::Instant)> = None;
        let mut tick = crate::polling::rounds(self.interval);
        let mut reported = std::collections::HashSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            let root = self.root.clone();
            let (reading, problems) =
                tokio::task::spawn_blocking(move || proc::read(&root)).await?;
            let at = std::time::Instant::now();
            for p in problems {
                self.errors.add(1);
                if reported.insert(p.clone()) {
                    tracing::warn!(receiver = %self.id, problem = %p, "Cannot read part of /proc; the rest is reported.");
                }
            }
            let mut rm = to_metrics(
                &self.host,
                &reading,
                prev.as_ref()
                    .map(|(r, t)| (r, at.duration_since(*t).as_secs_f64())),
                now_ns(),
                start_ns,
            );
            for sm in &mut rm.scope_metrics {
                sm.metrics.retain(|m| self.cfg.wants(&m.name));
            }
            prev = Some((reading, at));
            if !out
                .send_until_stopped(Batch::from_metrics(vec![rm]), &shutdown)
                .await
            {
                return Ok(());
            }
        }
        Ok(())
    }
}

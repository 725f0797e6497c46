//! The servers a trace called, by their own metrics: Redis, PostgreSQL,
//! NGINX, Envoy and LLM inference servers (vLLM, Triton), as their
//! exporters expose them and the `prometheus` receiver scrapes them.
//!
//! **Which series.** Only the series the causes read are kept in the
//! correlation state (see [`system_of`]); everything else a scrape brings
//! passes through untouched. Each is keyed by its scrape `job`
//! (`service.name`) and `instance` (`service.instance.id`). Histograms are
//! kept as their `_sum` and `_count`.
//!
//! **Which server a series describes** — its addresses:
//! - the scrape `instance` itself (vLLM serves `/metrics` on its API port;
//!   set a target's `instance` label to the server's address in the
//!   Prometheus multi-target pattern);
//! - an `addr`, `server` or `target` label on its points (multi-target exporters);
//! - what the exporter reports of the server beside it: redis_exporter's
//!   `redis_instance_info{tcp_port}`, postgres_exporter's `pg_settings_port`,
//!   on the instance's host (an exporter next to its server, as Debian's
//!   packages and Kubernetes sidecars run);
//! - `correlate.dependencies.addresses`: address → job or instance.
//!
//! **Which spans.** A span's `server.address` (`net.peer.name`) and
//! `server.port` (`net.peer.port`) against those addresses, after both
//! are normalised ([`norm`]): lower case, scheme, user and path removed,
//! `localhost` and `::1` as `127.0.0.1`, a trailing dot and the Kubernetes
//! cluster domain (`.svc.cluster.local`, `.svc`) removed, so
//! `redis.shop.svc.cluster.local:6379` and `redis.shop:6379` are one
//! server. A span without a port matches on the host when its `db.system`
//! is the dependency's. Envoy's series describe its upstream clusters: a
//! span joins the cluster whose `envoy_cluster_name` names its host (Istio's
//! `outbound|9080||reviews.default.svc.cluster.local`). GPU series of
//! DCGM (`DCGM_FI_DEV_*`) describe a machine: they join by their
//! `Hostname` label as host metrics do (see the `host` table).
//!
//! One row per (trace, server): the values over the longest span to that
//! server, widened by `dependencies.sample_interval` on each side.
//!
//! - rules' table `dependency` (server the trace called): `trace_id, span_id, system, address,
//!   job, instance, envoy_cluster, time_ms` and the measured columns of [`DepRow`];
//! - alerts' table `dependencies` (each scraped server, and each Envoy cluster, over the
//!   window): `system, job, instance, addresses, envoy_cluster, time_ms` and the same
//!   measured columns (counters as increases, gauges at their largest).

use causeway_core::config::Duration;
use datafusion::arrow::datatypes::{Field, SchemaRef};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

use super::{json, Join, Source, Tick, View, JOIN_ATTRS};
use crate::correlate::model::series::{find, host_key, s as attr_s, Kept, Offer};
use crate::correlate::model::table::{f64f, s, schema, so, utf8, Cols, Table, V};
use crate::correlate::model::{Hex16, Joined, Key, Rule, Series, TraceRow};

/// The histograms kept (as `<name>_sum` and `<name>_count`).
pub const HISTOGRAMS: [&str; 7] = [
    "envoy_cluster_upstream_cx_connect_ms",
    "vllm:request_queue_time_seconds",
    "vllm:time_to_first_token_seconds",
    "gen_ai.server.time_to_first_token",
    "gen_ai.server.request.duration",
    "gen_ai_server_time_to_first_token_seconds",
    "gen_ai_server_request_duration_seconds",
];

/// A kept histogram's `_sum` or `_count` series: (histogram, is the sum).
fn hist_part(name: &str) -> Option<(&str, bool)> {
    let (base, sum) = match name.strip_suffix("_sum") {
        Some(b) => (b, true),
        None => (name.strip_suffix("_count")?, false),
    };
    HISTOGRAMS.contains(&base).then_some((base, sum))
}

/// The dependency a kept metric describes, by its name; `None` for the
/// series correlate does not keep for this join.
pub fn system_of(name: &str) -> Option<&'static str> {
    let base = name.strip_suffix("_total").unwrap_or(name);
    let base = hist_part(base).map_or(base, |(b, _)| b);
    Some(match base {
        "redis_keyspace_hits"
        | "redis_keyspace_misses"
        | "redis_connected_clients"
        | "redis_blocked_clients"
        | "redis_instance_info"
        | "redis_latency_percentiles_usec"
        | "redis_up" => "redis",
        "pg_locks_count"
        | "pg_stat_activity_count"
        | "pg_stat_activity_max_tx_duration"
        | "pg_settings_max_connections"
        | "pg_settings_port"
        | "pg_up" => "postgresql",
        "nginx_connections_active"
        | "nginx_connections_waiting"
        | "nginx_connections_reading"
        | "nginx_connections_writing"
        | "nginx_up" => "nginx",
        "envoy_cluster_upstream_rq_pending_overflow"
        | "envoy_cluster_upstream_cx_overflow"
        | "envoy_cluster_upstream_cx_pool_overflow"
        | "envoy_cluster_upstream_cx_connect_fail"
        | "envoy_cluster_upstream_rq_timeout"
        | "envoy_cluster_upstream_cx_connect_ms"
        | "envoy_cluster_circuit_breakers_default_cx_open"
        | "envoy_cluster_circuit_breakers_default_cx_pool_open"
        | "envoy_cluster_circuit_breakers_default_rq_pending_open"
        | "envoy_cluster_circuit_breakers_default_rq_open"
        | "envoy_cluster_ssl_connection_error"
        | "envoy_cluster_ssl_fail_verify_error"
        | "envoy_cluster_ssl_fail_verify_san"
        | "envoy_cluster_ssl_fail_verify_no_cert"
        | "envoy_cluster_ssl_fail_verify_cert_hash"
        | "envoy_cluster_ssl_handshake" => "envoy",
        "vllm:num_requests_waiting"
        | "vllm:num_requests_running"
        | "vllm:kv_cache_usage_perc"
        | "vllm:gpu_cache_usage_perc"
        | "vllm:num_preemptions"
        | "vllm:request_queue_time_seconds"
        | "vllm:time_to_first_token_seconds" => "vllm",
        // OpenTelemetry GenAI server metrics, pushed over OTLP or scraped.
        "gen_ai.server.time_to_first_token"
        | "gen_ai.server.request.duration"
        | "gen_ai_server_time_to_first_token_seconds"
        | "gen_ai_server_request_duration_seconds" => "genai",
        "nv_inference_queue_duration_us"
        | "nv_inference_request_success"
        | "nv_gpu_utilization"
        | "nv_gpu_memory_used_bytes"
        | "nv_gpu_memory_total_bytes" => "triton",
        "DCGM_FI_DEV_GPU_UTIL" | "DCGM_FI_DEV_FB_USED" | "DCGM_FI_DEV_FB_FREE" => "gpu",
        _ => return None,
    })
}

/// An address as `host[:port]`, normalised for comparison (see the module doc).
pub fn norm(addr: &str) -> String {
    let mut a = addr.trim().to_ascii_lowercase();
    if let Some(i) = a.find("://") {
        a = a[i + 3..].to_string();
    }
    if let Some(i) = a.find(['/', '?']) {
        a.truncate(i);
    }
    if let Some(i) = a.rfind('@') {
        a = a[i + 1..].to_string();
    }
    // host and port: `[v6]:p`, `v4:p`, `name:p`, or a bare v6 address.
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, p)) => (h.to_string(), p.strip_prefix(':').map(str::to_string)),
            None => (rest.to_string(), None),
        }
    } else if a.matches(':').count() == 1 {
        let (h, p) = a.split_once(':').unwrap_or((&a, ""));
        (h.to_string(), Some(p.to_string()))
    } else {
        (a.clone(), None)
    };
    let mut host = host.trim_end_matches('.').to_string();
    if matches!(host.as_str(), "localhost" | "::1" | "0:0:0:0:0:0:0:1") {
        host = "127.0.0.1".into();
    }
    for suffix in [".svc.cluster.local", ".svc"] {
        if let Some(h) = host.strip_suffix(suffix) {
            host = h.to_string();
            break;
        }
    }
    match port.filter(|p| !p.is_empty()) {
        Some(p) => format!("{host}:{p}"),
        None => host,
    }
}

fn host_part(a: &str) -> &str {
    match a.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => a,
    }
}

/// The servers the scraped series describe.
#[derive(Debug, Clone)]
pub struct Dependency<'a> {
    /// `redis`, `postgresql`, `nginx`, `envoy`, `vllm`, `triton`.
    pub system: &'static str,
    /// Scrape job.
    pub job: String,
    /// Scrape instance.
    pub instance: String,
    /// The addresses it answers at (normalised).
    pub addresses: Vec<String>,
    /// Its series.
    pub series: Vec<&'a Series>,
}

/// Group the kept dependency series by (system, job, instance) and work out
/// the addresses of each (see the module doc). `configured`: address → job
/// or instance.
pub fn dependencies<'a>(
    series: &'a [Series],
    configured: &HashMap<String, String>,
) -> Vec<Dependency<'a>> {
    let mut groups: BTreeMap<(&'static str, &str, &str), Vec<&'a Series>> = BTreeMap::new();
    for s in series {
        let Some(system) = system_of(&s.name).filter(|s| *s != "gpu") else {
            continue;
        };
        // Pushed over OTLP without `service.instance.id`: the service is the key.
        let (Some(job), Some(inst)) =
            (s.key.get("job"), s.key.get("instance").or(s.key.get("job")))
        else {
            continue;
        };
        groups.entry((system, job, inst)).or_default().push(s);
    }
    groups
        .into_iter()
        .map(|((system, job, instance), series)| {
            let inst = norm(instance);
            let mut addresses = vec![inst.clone()];
            let last = |s: &Series| s.points.back().map(|p| p.1);
            for s in &series {
                for k in ["addr", "server", "target"] {
                    if let Some(v) = s.attr(k) {
                        addresses.push(norm(v));
                    }
                }
                // The GenAI conventions put the server on the points.
                if let Some(host) = s
                    .attr("server.address")
                    .or_else(|| s.attr("server_address"))
                {
                    addresses.push(
                        match s.attr("server.port").or_else(|| s.attr("server_port")) {
                            Some(port) => norm(&format!("{host}:{port}")),
                            None => norm(host),
                        },
                    );
                }
                let beside = match s.name.as_str() {
                    "redis_instance_info" => s.attr("tcp_port").map(str::to_string),
                    "pg_settings_port" => last(s).map(|v| format!("{}", v as u64)),
                    _ => None,
                };
                if let Some(port) = beside {
                    addresses.push(format!("{}:{port}", host_part(&inst)));
                }
            }
            for (addr, target) in configured {
                if target == job || norm(target) == inst {
                    addresses.push(norm(addr));
                }
            }
            addresses.sort();
            addresses.dedup();
            Dependency {
                system,
                job: job.to_string(),
                instance: instance.to_string(),
                addresses,
                series,
            }
        })
        .collect()
}

/// Whether a span calling `addr` (normalised `host[:port]`) with `db.system`
/// `db` calls `d`.
pub fn calls(d: &Dependency<'_>, addr: &str, db: Option<&str>) -> bool {
    if d.system == "envoy" {
        return false;
    }
    if d.addresses.iter().any(|a| a == addr) {
        return true;
    }
    // No port on the span: the host, when the span says what it talks to.
    let has_port = addr != host_part(addr);
    !has_port
        && db.is_some_and(|db| db.eq_ignore_ascii_case(d.system))
        && d.addresses.iter().any(|a| host_part(a) == addr)
}

/// The Envoy clusters of `d` whose name names `host` (normalised, no port).
pub fn envoy_clusters<'a>(d: &Dependency<'a>, host: &str) -> Vec<String> {
    if d.system != "envoy" || host.is_empty() {
        return Vec::new();
    }
    let mut out: Vec<String> = d
        .series
        .iter()
        .filter_map(|s| {
            s.attr("envoy_cluster_name")
                .or_else(|| s.attr("cluster_name"))
        })
        .filter(|c| {
            let c = c.to_ascii_lowercase();
            c == host
                || c.split(['|', ':']).any(|part| {
                    let p = norm(part);
                    p == host || host_part(&p) == host
                })
        })
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A server a trace called, with its numbers while the trace called it.
/// Counters are increases over the interval, gauges their largest value.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DepRow {
    /// The longest span to it (hex id).
    pub span_id: String,
    /// `redis`, `postgresql`, `nginx`, `envoy`, `vllm`, `triton`.
    pub system: &'static str,
    /// The address the span called.
    pub address: String,
    /// Scrape job.
    pub job: String,
    /// Scrape instance.
    pub instance: String,
    /// The Envoy cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Latest point used (ns).
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
    /// `redis_up`, `pg_up`, `nginx_up`: the lowest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up: Option<f64>,
    /// Redis keyspace hits (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hits: Option<f64>,
    /// Redis keyspace misses (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub misses: Option<f64>,
    /// misses ÷ (hits + misses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub miss_ratio: Option<f64>,
    /// `redis_connected_clients`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connected_clients: Option<f64>,
    /// `redis_blocked_clients`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked_clients: Option<f64>,
    /// The server's own 99th percentile latency (µs) of the command the span
    /// ran (`redis_latency_percentiles_usec{cmd,quantile="99"}`, Redis 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command_p99_us: Option<f64>,
    /// `pg_locks_count` in the blocking modes (AccessExclusive, Exclusive), as a scrape during the span saw them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locks_exclusive: Option<f64>,
    /// `pg_locks_count` by mode, the non-zero ones (`mode=n,…`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub locks_by_mode: Option<String>,
    /// `pg_stat_activity_count`, all states.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections: Option<f64>,
    /// `pg_settings_max_connections`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_connections: Option<f64>,
    /// `pg_stat_activity_max_tx_duration` (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tx_duration_s: Option<f64>,
    /// `nginx_connections_active`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_active: Option<f64>,
    /// `nginx_connections_waiting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connections_waiting: Option<f64>,
    /// Envoy `upstream_rq_pending_overflow` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending_overflow: Option<f64>,
    /// Envoy `upstream_cx_overflow` + `upstream_cx_pool_overflow` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cx_overflow: Option<f64>,
    /// Envoy `upstream_cx_connect_fail` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_fail: Option<f64>,
    /// Envoy `upstream_rq_timeout` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rq_timeout: Option<f64>,
    /// Envoy `ssl.connection_error` + `ssl.fail_verify_*` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ssl_errors: Option<f64>,
    /// Envoy `circuit_breakers.default.*_open`: the largest (1 = at capacity).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breaker_open: Option<f64>,
    /// Envoy `upstream_cx_connect_ms`: the mean over the interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_ms: Option<f64>,
    /// `vllm:num_requests_waiting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_waiting: Option<f64>,
    /// `vllm:num_requests_running`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_running: Option<f64>,
    /// `vllm:kv_cache_usage_perc` (or the older `gpu_cache_usage_perc`), 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<f64>,
    /// `vllm:num_preemptions_total` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// `vllm:request_queue_time_seconds`: the mean over the interval (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_time_s: Option<f64>,
    /// `vllm:time_to_first_token_seconds` (or the GenAI convention's
    /// `gen_ai.server.time_to_first_token`): the mean over the interval (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<f64>,
    /// `gen_ai.server.request.duration`: the mean over the interval (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_duration_s: Option<f64>,
    /// Triton: queue µs ÷ successful requests over the interval, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_ms_per_request: Option<f64>,
    /// Triton `nv_gpu_utilization` (0..1): the largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    /// Triton `nv_gpu_memory_used_bytes ÷ nv_gpu_memory_total_bytes`: the largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_mem_used: Option<f64>,
}

/// Points of `s` in `[from, to]`, with the last one before and the first
/// one after (a counter's increase over a span shorter than the scrape
/// interval needs the scrapes around it).
fn bracket(s: &Series, from: u64, to: u64) -> Vec<(u64, f64)> {
    let mut out = Vec::new();
    let mut before = None;
    for &(t, v) in &s.points {
        if t < from {
            before = Some((t, v));
        } else if t <= to {
            if let Some(b) = before.take() {
                out.push(b);
            }
            out.push((t, v));
        } else {
            if let Some(b) = before.take() {
                out.push(b);
            }
            out.push((t, v));
            break;
        }
    }
    out
}

/// A counter's increase over the points (resets counted as a restart from 0).
fn increase(points: &[(u64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    Some(
        points
            .windows(2)
            .map(|w| {
                if w[1].1 >= w[0].1 {
                    w[1].1 - w[0].1
                } else {
                    w[1].1
                }
            })
            .sum(),
    )
}

fn add(a: &mut Option<f64>, v: f64) {
    *a = Some(a.unwrap_or(0.0) + v);
}

fn maxed(a: &mut Option<f64>, v: f64) {
    *a = Some(a.map_or(v, |x| x.max(v)));
}

/// The row of `d` for a span over `[start, end]` that ran `command` (its
/// `db.operation`, e.g. `GET`), its points taken over
/// that widened by `widen` on each side, for the cluster `cluster` of an
/// Envoy. Locks are the exception: a lock counts only when a scrape during
/// the span saw it (a lock released just before the span began is what
/// the widened interval would otherwise show).
pub fn row(
    d: &Dependency<'_>,
    cluster: Option<&str>,
    command: Option<&str>,
    (start, end): (u64, u64),
    widen: u64,
) -> DepRow {
    let command = command.map(str::to_ascii_lowercase);
    let (from, to) = (start.saturating_sub(widen), end.saturating_add(widen));
    let mut r = DepRow {
        system: d.system,
        job: d.job.clone(),
        instance: d.instance.clone(),
        cluster: cluster.map(str::to_string),
        ..Default::default()
    };
    // Sums of series that must be summed over their labels first (per time).
    let mut by_mode: BTreeMap<String, f64> = BTreeMap::new();
    let mut activity: BTreeMap<u64, f64> = BTreeMap::new();
    let mut hist: HashMap<&str, (Option<f64>, Option<f64>)> = HashMap::new();
    let (mut triton_queue, mut triton_ok) = (None, None);
    let (mut mem_used, mut mem_total): (BTreeMap<String, f64>, BTreeMap<String, f64>) =
        Default::default();
    for s in &d.series {
        if let Some(c) = cluster {
            if s.attr("envoy_cluster_name")
                .or_else(|| s.attr("cluster_name"))
                != Some(c)
            {
                continue;
            }
        }
        let pts = bracket(s, from, to);
        let Some(&(t, _)) = pts.last() else { continue };
        r.time_ns = r.time_ns.max(t);
        let inside = || {
            s.points
                .iter()
                .filter(|(t, _)| *t >= from && *t <= to)
                .map(|p| p.1)
                .reduce(f64::max)
                .or_else(|| pts.iter().map(|p| p.1).reduce(f64::max))
        };
        if let Some((h, is_sum)) = hist_part(&s.name) {
            let e = hist.entry(h).or_default();
            let inc = increase(&pts);
            if is_sum {
                e.0 = inc;
            } else {
                e.1 = inc;
            }
            continue;
        }
        let name = s.name.strip_suffix("_total").unwrap_or(&s.name);
        match name {
            "redis_up" | "pg_up" | "nginx_up" => {
                if let Some(v) = pts.iter().map(|p| p.1).reduce(f64::min) {
                    r.up = Some(r.up.map_or(v, |x| x.min(v)));
                }
            }
            "redis_keyspace_hits" => r.hits = increase(&pts).or(r.hits),
            "redis_keyspace_misses" => r.misses = increase(&pts).or(r.misses),
            "redis_connected_clients" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.connected_clients, v)),
            "redis_latency_percentiles_usec"
                if s.attr("quantile") == Some("99")
                    && command.is_some()
                    && s.attr("cmd") == command.as_deref() =>
            {
                inside()
                    .into_iter()
                    .for_each(|v| maxed(&mut r.command_p99_us, v))
            }
            "redis_blocked_clients" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.blocked_clients, v)),
            "pg_locks_count" => {
                let during = s
                    .points
                    .iter()
                    .filter(|(t, _)| *t >= start && *t <= end)
                    .map(|p| p.1)
                    .reduce(f64::max);
                if let (Some(mode), Some(v)) = (s.attr("mode"), during) {
                    *by_mode.entry(mode.to_string()).or_default() += v;
                }
            }
            "pg_stat_activity_count" => {
                for (t, v) in s.points.iter().filter(|(t, _)| *t >= from && *t <= to) {
                    *activity.entry(*t).or_default() += v;
                }
            }
            "pg_stat_activity_max_tx_duration" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.max_tx_duration_s, v)),
            "pg_settings_max_connections" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.max_connections, v)),
            "nginx_connections_active" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.connections_active, v)),
            "nginx_connections_waiting" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.connections_waiting, v)),
            "envoy_cluster_upstream_rq_pending_overflow" => increase(&pts)
                .into_iter()
                .for_each(|v| add(&mut r.pending_overflow, v)),
            "envoy_cluster_upstream_cx_overflow" | "envoy_cluster_upstream_cx_pool_overflow" => {
                increase(&pts)
                    .into_iter()
                    .for_each(|v| add(&mut r.cx_overflow, v))
            }
            "envoy_cluster_upstream_cx_connect_fail" => increase(&pts)
                .into_iter()
                .for_each(|v| add(&mut r.connect_fail, v)),
            "envoy_cluster_upstream_rq_timeout" => increase(&pts)
                .into_iter()
                .for_each(|v| add(&mut r.rq_timeout, v)),
            n if n.starts_with("envoy_cluster_ssl_") && n != "envoy_cluster_ssl_handshake" => {
                increase(&pts)
                    .into_iter()
                    .for_each(|v| add(&mut r.ssl_errors, v))
            }
            n if n.starts_with("envoy_cluster_circuit_breakers_") => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.breaker_open, v)),
            "vllm:num_requests_waiting" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.requests_waiting, v)),
            "vllm:num_requests_running" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.requests_running, v)),
            "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" => inside()
                .into_iter()
                .for_each(|v| maxed(&mut r.kv_cache_usage, v)),
            "vllm:num_preemptions" => increase(&pts)
                .into_iter()
                .for_each(|v| add(&mut r.preemptions, v)),
            "nv_inference_queue_duration_us" => increase(&pts)
                .into_iter()
                .for_each(|v| add(&mut triton_queue, v)),
            "nv_inference_request_success" => increase(&pts)
                .into_iter()
                .for_each(|v| add(&mut triton_ok, v)),
            "nv_gpu_utilization" => inside().into_iter().for_each(|v| maxed(&mut r.gpu_util, v)),
            "nv_gpu_memory_used_bytes" | "nv_gpu_memory_total_bytes" => {
                let gpu = s.attr("gpu_uuid").unwrap_or("").to_string();
                if let Some(v) = inside() {
                    if name == "nv_gpu_memory_used_bytes" {
                        mem_used.insert(gpu, v);
                    } else {
                        mem_total.insert(gpu, v);
                    }
                }
            }
            _ => {}
        }
    }
    if let (Some(h), Some(m)) = (r.hits, r.misses) {
        if h + m > 0.0 {
            r.miss_ratio = Some(m / (h + m));
        }
    }
    if !by_mode.is_empty() {
        r.locks_exclusive = Some(
            ["accessexclusivelock", "exclusivelock"]
                .iter()
                .filter_map(|m| by_mode.get(*m))
                .sum(),
        );
        let nz: Vec<String> = by_mode
            .iter()
            .filter(|(_, v)| **v > 0.0)
            .map(|(m, v)| format!("{m}={v}"))
            .collect();
        r.locks_by_mode = Some(nz.join(","));
    }
    r.connections = activity.values().copied().reduce(f64::max);
    let mean = |h: Option<&(Option<f64>, Option<f64>)>| match h {
        Some((Some(sum), Some(count))) if *count > 0.0 => Some(sum / count),
        _ => None,
    };
    r.connect_ms = mean(hist.get("envoy_cluster_upstream_cx_connect_ms"));
    r.queue_time_s = mean(hist.get("vllm:request_queue_time_seconds"));
    r.ttft_s = mean(hist.get("vllm:time_to_first_token_seconds"))
        .or_else(|| mean(hist.get("gen_ai.server.time_to_first_token")))
        .or_else(|| mean(hist.get("gen_ai_server_time_to_first_token_seconds")));
    r.request_duration_s = mean(hist.get("gen_ai.server.request.duration"))
        .or_else(|| mean(hist.get("gen_ai_server_request_duration_seconds")));
    if let (Some(q), Some(n)) = (triton_queue, triton_ok) {
        if n > 0.0 {
            r.queue_ms_per_request = Some(q / n / 1000.0);
        }
    }
    for (gpu, used) in &mem_used {
        if let Some(total) = mem_total.get(gpu).filter(|t| **t > 0.0) {
            maxed(&mut r.gpu_mem_used, used / total);
        }
    }
    r
}

/// `processors.correlate.dependencies`: a dependency's metrics (Redis,
/// PostgreSQL, NGINX, Envoy, vLLM, Triton, DCGM; see the module doc) join
/// the client spans that called it by address.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DependenciesConfig {
    /// How often the dependencies are scraped: a client span joins the
    /// points within this of its start and end (default 15s). Set it to
    /// your `scrape_interval`.
    #[serde(default = "dep_sample_interval")]
    pub sample_interval: Duration,
    /// Addresses spans call → the scrape `job` or `instance` whose metrics
    /// describe that server, for what the automatic mapping cannot know,
    /// e.g. `{"redis.shop:6379": redis-cache}` when the exporter runs
    /// elsewhere than the server it watches.
    #[serde(default)]
    pub addresses: HashMap<String, String>,
}

impl Default for DependenciesConfig {
    fn default() -> Self {
        DependenciesConfig {
            sample_interval: dep_sample_interval(),
            addresses: HashMap::new(),
        }
    }
}

fn dep_sample_interval() -> Duration {
    Duration::secs(15)
}

/// The measured columns of a dependency row (see [`DepRow`]),
/// shared by the rules' `dependency` table and the alerts' `dependencies`.
pub fn dep_fields() -> Vec<Field> {
    let mut v: Vec<Field> = [
        "up",
        "hits",
        "misses",
        "miss_ratio",
        "connected_clients",
        "blocked_clients",
        "command_p99_us",
        "locks_exclusive",
    ]
    .iter()
    .map(|n| f64f(n))
    .collect();
    v.push(utf8("locks_by_mode"));
    v.extend(
        [
            "connections",
            "max_connections",
            "max_tx_duration_s",
            "connections_active",
            "connections_waiting",
            "pending_overflow",
            "cx_overflow",
            "connect_fail",
            "rq_timeout",
            "ssl_errors",
            "breaker_open",
            "connect_ms",
            "requests_waiting",
            "requests_running",
            "kv_cache_usage",
            "preemptions",
            "queue_time_s",
            "ttft_s",
            "request_duration_s",
            "queue_ms_per_request",
            "gpu_util",
            "gpu_mem_used",
        ]
        .iter()
        .map(|n| f64f(n)),
    );
    v
}

/// The cells of [`dep_fields`].
pub fn dep_values(d: &DepRow) -> [V<'_>; 31] {
    [
        V::F(d.up),
        V::F(d.hits),
        V::F(d.misses),
        V::F(d.miss_ratio),
        V::F(d.connected_clients),
        V::F(d.blocked_clients),
        V::F(d.command_p99_us),
        V::F(d.locks_exclusive),
        so(&d.locks_by_mode),
        V::F(d.connections),
        V::F(d.max_connections),
        V::F(d.max_tx_duration_s),
        V::F(d.connections_active),
        V::F(d.connections_waiting),
        V::F(d.pending_overflow),
        V::F(d.cx_overflow),
        V::F(d.connect_fail),
        V::F(d.rq_timeout),
        V::F(d.ssl_errors),
        V::F(d.breaker_open),
        V::F(d.connect_ms),
        V::F(d.requests_waiting),
        V::F(d.requests_running),
        V::F(d.kv_cache_usage),
        V::F(d.preemptions),
        V::F(d.queue_time_s),
        V::F(d.ttft_s),
        V::F(d.request_duration_s),
        V::F(d.queue_ms_per_request),
        V::F(d.gpu_util),
        V::F(d.gpu_mem_used),
    ]
}

/// One row per server the trace called.
fn dependency_rows(t: &TraceRow, dependencies: &[Dependency<'_>], sample_ns: u64) -> Vec<DepRow> {
    if dependencies.is_empty() {
        return Vec::new();
    }
    // (dependency, cluster) → the longest span to it.
    let mut longest: BTreeMap<(usize, Option<String>), usize> = BTreeMap::new();
    for (i, s) in t.spans.iter().enumerate() {
        let Some(host) = s.server_address.as_deref() else {
            continue;
        };
        let addr = match s.server_port {
            Some(port) => norm(&format!("{host}:{port}")),
            None => norm(host),
        };
        let bare = norm(host);
        for (di, d) in dependencies.iter().enumerate() {
            let keys: Vec<Option<String>> = if d.system == "envoy" {
                envoy_clusters(d, &bare).into_iter().map(Some).collect()
            } else if calls(d, &addr, s.db_system.as_deref()) {
                vec![None]
            } else {
                Vec::new()
            };
            for k in keys {
                let e = longest.entry((di, k)).or_insert(i);
                if t.spans[*e].duration_ms < s.duration_ms {
                    *e = i;
                }
            }
        }
    }
    longest
        .into_iter()
        .filter_map(|((di, cluster), i)| {
            let s = &t.spans[i];
            let start = t.start_ns + (s.start_ms * 1e6) as u64;
            let end = t.start_ns + (s.end_ms * 1e6) as u64;
            let mut r = row(
                &dependencies[di],
                cluster.as_deref(),
                s.db_operation.as_deref(),
                (start, end),
                sample_ns,
            );
            (r.time_ns > 0).then(|| {
                r.span_id = Hex16::of(s.span_id).as_str().to_string();
                r.address = match s.server_port {
                    Some(port) => format!("{}:{port}", s.server_address.as_deref().unwrap_or("")),
                    None => s.server_address.clone().unwrap_or_default(),
                };
                r
            })
        })
        .collect()
}

/// The dependency source (Redis, PostgreSQL, NGINX, Envoy, vLLM, Triton,
/// the GenAI server metrics, DCGM).
pub struct Deps {
    cfg: DependenciesConfig,
}

impl Deps {
    /// With `correlate.dependencies`.
    pub fn new(cfg: &DependenciesConfig) -> Self {
        Deps { cfg: cfg.clone() }
    }
}

fn dependency_schema() -> SchemaRef {
    schema(
        [
            utf8("trace_id"),
            utf8("span_id"),
            utf8("system"),
            utf8("address"),
            utf8("job"),
            utf8("instance"),
            utf8("envoy_cluster"),
            f64f("time_ms"),
        ]
        .into_iter()
        .chain(dep_fields())
        .collect(),
    )
}

impl Source for Deps {
    fn name(&self) -> &'static str {
        "dependency"
    }

    fn keep(&self, o: &Offer<'_>) -> Option<Kept> {
        let system = system_of(o.metric)?;
        let key = if system == "gpu" {
            // GPUs describe a machine: joined by host, as host metrics are.
            Key::new("dependency").with(
                "host",
                find(o.attrs, &["Hostname"])
                    .and_then(attr_s)
                    .or_else(|| host_key(o.resource)),
            )
        } else {
            Key::new("dependency")
                .with("job", find(o.resource, &["service.name"]).and_then(attr_s))
                .with(
                    "instance",
                    find(o.resource, &["service.instance.id"]).and_then(attr_s),
                )
        };
        Some(Kept {
            key,
            drop: JOIN_ATTRS,
            add: Vec::new(),
        })
    }

    fn dims(&self) -> &'static [&'static str] {
        &["job", "instance", "host"]
    }

    fn tables(&self) -> Vec<(&'static str, SchemaRef)> {
        vec![("dependency", dependency_schema())]
    }

    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        let series = tick.store.series_where(|s| s.key.get("job").is_some());
        let dependencies = dependencies(&series, &self.cfg.addresses);
        let sch = dependency_schema();
        let mut c = Cols::new(&sch, 0);
        let sample_ns =
            u64::try_from(self.cfg.sample_interval.get().as_nanos()).unwrap_or(u64::MAX);
        for t in traces.iter_mut() {
            for d in dependency_rows(t, &dependencies, sample_ns) {
                c.row(
                    [
                        s(&t.trace_id),
                        s(&d.span_id),
                        s(d.system),
                        s(&d.address),
                        s(&d.job),
                        s(&d.instance),
                        so(&d.cluster),
                        V::F(Some(d.time_ns as f64 / 1e6)),
                    ]
                    .into_iter()
                    .chain(dep_values(&d)),
                );
                t.joined.push(Joined::Metric("dependency", json(&d)));
            }
        }
        Ok(Join {
            tables: vec![("dependency", sch.clone(), c.finish(sch)?)],
            misses: 0,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r(
                "cache_miss_fallback",
                "cache_miss_fallback",
                r#"
SELECT d.trace_id, CASE WHEN max(r.miss_ratio) >= 0.5 THEN 0.93 ELSE 0.88 END AS confidence,
  concat('cache miss in ', max(c.service), ' (', coalesce(max(c.db_system), 'cache'),
         CASE WHEN bool_or(c.cache_inferred) THEN ' GET, then a fallback read, then SET' ELSE '' END,
         ') fell back to ', coalesce(max(d.db_system), max(d.server_address), max(d.name)), ' ', coalesce(max(d.db_operation), ''), ' taking ',
         CAST(CAST(max(d.duration_ms) AS BIGINT) AS VARCHAR), ' ms',
         CASE WHEN max(r.miss_ratio) IS NULL THEN ''
              ELSE concat('; ', max(r.system), ' ', max(r.address), ' missed ', CAST(CAST(round(max(r.miss_ratio) * 100) AS BIGINT) AS VARCHAR),
                          '% of lookups meanwhile (', CAST(CAST(max(r.misses) AS BIGINT) AS VARCHAR), ' misses, ',
                          CAST(CAST(max(r.hits) AS BIGINT) AS VARCHAR), ' hits, redis_keyspace_*_total)') END) AS summary,
  CASE WHEN max(r.miss_ratio) IS NULL THEN NULL
       ELSE concat('miss_ratio=', CAST(max(r.miss_ratio) AS VARCHAR), ' misses=', CAST(max(r.misses) AS VARCHAR),
                   ' hits=', CAST(max(r.hits) AS VARCHAR), ' instance=', max(r.instance)) END AS evidence,
  first_value(d.span_id ORDER BY d.path_ms DESC) AS culprit_span_id,
  max(d.path_ms) AS explained_ms
FROM spans c JOIN spans d ON c.trace_id = d.trace_id AND c.parent_id = d.parent_id
  LEFT JOIN dependency r ON r.trace_id = c.trace_id AND r.system = 'redis' AND r.miss_ratio IS NOT NULL
WHERE c.cache_hit = false AND d.start_ms >= c.end_ms - 1.0 AND d.span_id <> c.span_id
  AND (d.db_system IS NULL OR lower(d.db_system) NOT IN ('redis', 'memcached', 'valkey'))
GROUP BY d.trace_id"#,
            ),
            r(
                "db_lock",
                "db_lock_contention",
                r#"
SELECT s.trace_id, 0.9 AS confidence,
  concat(max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on PostgreSQL ', max(r.address),
         ' while ', CAST(CAST(max(r.locks_exclusive) AS BIGINT) AS VARCHAR), ' exclusive lock(s) were held (pg_locks_count ',
         coalesce(max(r.locks_by_mode), ''), ')',
         CASE WHEN max(r.max_tx_duration_s) IS NULL THEN ''
              ELSE concat('; longest transaction ', CAST(round(max(r.max_tx_duration_s) * 10) / 10 AS VARCHAR), ' s') END) AS summary,
  concat('pg_locks_count ', coalesce(max(r.locks_by_mode), ''), ' max_tx_duration_s=',
         coalesce(CAST(max(r.max_tx_duration_s) AS VARCHAR), ''), ' instance=', max(r.instance)) AS evidence,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'postgresql' AND r.locks_exclusive >= 1 AND s.duration_ms >= 50
GROUP BY s.trace_id"#,
            ),
            r(
                "db_connections",
                "db_connection_saturation",
                r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('PostgreSQL ', max(r.address), ' had ', CAST(CAST(max(r.connections) AS BIGINT) AS VARCHAR), ' of ',
         CAST(CAST(max(r.max_connections) AS BIGINT) AS VARCHAR), ' connections in use while ', max(s.service), ' waited ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it') AS summary,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'postgresql' AND r.max_connections > 0 AND r.connections >= 0.9 * r.max_connections AND s.duration_ms >= 50
GROUP BY s.trace_id"#,
            ),
            r(
                "envoy_overflow",
                "circuit_open",
                r#"
SELECT s.trace_id, 0.92 AS confidence,
  concat('Envoy''s circuit breaker for ', max(r.envoy_cluster), ' was at capacity when ', max(s.service), ' called ',
         coalesce(max(s.server_address), max(s.name)), ': ', CAST(CAST(coalesce(max(r.pending_overflow), 0) AS BIGINT) AS VARCHAR),
         ' requests overflowed its pending queue (upstream_rq_pending_overflow) and ',
         CAST(CAST(coalesce(max(r.cx_overflow), 0) AS BIGINT) AS VARCHAR), ' its connection limit (upstream_cx_overflow) meanwhile') AS summary,
  concat('upstream_rq_pending_overflow=', coalesce(CAST(max(r.pending_overflow) AS VARCHAR), ''), ' upstream_cx_overflow=',
         coalesce(CAST(max(r.cx_overflow) AS VARCHAR), ''), ' circuit_breakers_open=', coalesce(CAST(max(r.breaker_open) AS VARCHAR), '')) AS evidence,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.path_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND (r.pending_overflow > 0 OR r.cx_overflow > 0 OR r.breaker_open >= 1)
  AND (s.status = 'error' OR s.http_status = 503)
GROUP BY s.trace_id"#,
            ),
            r(
                "envoy_connect_fail",
                "upstream_unavailable",
                r#"
SELECT s.trace_id, 0.86 AS confidence,
  concat('Envoy could not connect to ', max(r.envoy_cluster), ' when ', max(s.service), ' called it: ',
         CAST(CAST(max(r.connect_fail) AS BIGINT) AS VARCHAR), ' connection failures meanwhile (upstream_cx_connect_fail)') AS summary,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.path_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND r.connect_fail > 0 AND coalesce(r.pending_overflow, 0) = 0 AND coalesce(r.cx_overflow, 0) = 0
  AND coalesce(r.ssl_errors, 0) = 0 AND (s.status = 'error' OR s.http_status IN (502, 503))
GROUP BY s.trace_id"#,
            ),
            r(
                "envoy_tls",
                "tls_handshake",
                r#"
SELECT s.trace_id, 0.88 AS confidence,
  concat('TLS to ', max(r.envoy_cluster), ' through Envoy: ',
         CASE WHEN max(r.ssl_errors) > 0 THEN concat(CAST(CAST(max(r.ssl_errors) AS BIGINT) AS VARCHAR), ' handshake errors (ssl.connection_error, ssl.fail_verify_*)')
              ELSE concat('connections took ', CAST(CAST(max(r.connect_ms) AS BIGINT) AS VARCHAR), ' ms to set up (upstream_cx_connect_ms)') END,
         ' when ', max(s.service), ' called it') AS summary,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) AND max(r.ssl_errors) > 0 THEN max(t.duration_ms)
       ELSE least(max(s.path_ms), coalesce(max(r.connect_ms), max(s.path_ms))) END AS explained_ms,
  bool_or(t.failed) AND coalesce(max(r.ssl_errors), 0) > 0 AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND ((r.ssl_errors > 0 AND (s.status = 'error' OR s.http_status IN (502, 503)))
                              OR (r.connect_ms >= 200 AND s.duration_ms >= r.connect_ms))
GROUP BY s.trace_id"#,
            ),
            r(
                "inference_queue",
                "inference_queueing",
                r#"
SELECT s.trace_id, 0.9 AS confidence,
  concat(coalesce(max(s.gen_ai_model), max(s.service)), ' request waited ', CAST(CAST(max(s.gen_ai_queue_ms) AS BIGINT) AS VARCHAR),
         ' ms of ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms in the queue of ', max(s.service), ' before it was scheduled',
         CASE WHEN max(r.requests_waiting) IS NULL THEN ''
              ELSE concat(' (vllm:num_requests_waiting ', CAST(CAST(max(r.requests_waiting) AS BIGINT) AS VARCHAR),
                          ', num_requests_running ', coalesce(CAST(CAST(max(r.requests_running) AS BIGINT) AS VARCHAR), '?'), ')') END) AS summary,
  first_value(s.span_id ORDER BY s.gen_ai_queue_ms DESC) AS culprit_span_id,
  max(s.gen_ai_queue_ms) AS explained_ms
FROM spans s LEFT JOIN dependency r ON r.trace_id = s.trace_id AND r.system = 'vllm'
WHERE s.gen_ai_queue_ms >= 100 AND s.gen_ai_queue_ms >= 0.3 * s.duration_ms
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 0.84 AS confidence,
  concat(max(r.system), ' ', max(r.address), ' queued requests for ',
         CAST(CAST(max(coalesce(r.queue_ms_per_request, r.queue_time_s * 1000)) AS BIGINT) AS VARCHAR),
         ' ms on average while ', max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it (',
         CASE WHEN max(r.system) = 'triton' THEN 'nv_inference_queue_duration_us / nv_inference_request_success'
              ELSE 'vllm:request_queue_time_seconds' END, ')') AS summary,
  max(s.span_id) AS culprit_span_id,
  least(max(s.path_ms), max(coalesce(r.queue_ms_per_request, r.queue_time_s * 1000))) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system IN ('vllm', 'triton') AND coalesce(r.queue_ms_per_request, r.queue_time_s * 1000) >= 100
GROUP BY s.trace_id"#,
            ),
            r(
                "kv_cache",
                "kv_cache_pressure",
                r#"
SELECT s.trace_id, 0.88 AS confidence,
  concat('vLLM ', max(r.address), ' KV cache ', CAST(CAST(round(max(r.kv_cache_usage) * 100) AS BIGINT) AS VARCHAR), '% full',
         CASE WHEN max(r.preemptions) > 0 THEN concat(', ', CAST(CAST(max(r.preemptions) AS BIGINT) AS VARCHAR), ' requests preempted') ELSE '' END,
         ' (vllm:kv_cache_usage_perc, vllm:num_preemptions_total) while ', max(s.service), ' waited ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms for ', coalesce(max(s.gen_ai_model), 'the model')) AS summary,
  concat('kv_cache_usage=', coalesce(CAST(max(r.kv_cache_usage) AS VARCHAR), ''), ' preemptions=', coalesce(CAST(max(r.preemptions) AS VARCHAR), '')) AS evidence,
  max(s.span_id) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'vllm' AND (r.kv_cache_usage >= 0.95 OR r.preemptions > 0)
GROUP BY s.trace_id"#,
            ),
        ]
    }

    fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        // dependencies: each server's numbers over the window.
        let sch = schema(
            [
                utf8("system"),
                utf8("job"),
                utf8("instance"),
                utf8("addresses"),
                utf8("envoy_cluster"),
                f64f("time_ms"),
            ]
            .into_iter()
            .chain(dep_fields())
            .collect(),
        );
        let series = view
            .map(|v| v.store.series_where(|x| x.key.get("job").is_some()))
            .unwrap_or_default();
        let deps = dependencies(&series, &HashMap::new());
        let mut rows = Vec::new();
        for d in &deps {
            let clusters: Vec<Option<String>> = if d.system == "envoy" {
                let mut c: Vec<String> = d
                    .series
                    .iter()
                    .filter_map(|x| x.attr("envoy_cluster_name").map(str::to_string))
                    .collect();
                c.sort();
                c.dedup();
                c.into_iter().map(Some).collect()
            } else {
                vec![None]
            };
            for cl in clusters {
                let r = row(
                    d,
                    cl.as_deref(),
                    None,
                    view.map_or((0, 0), |v| (v.now_ns.saturating_sub(v.window_ns), v.now_ns)),
                    0,
                );
                if r.time_ns > 0 {
                    rows.push((d.addresses.join(","), r));
                }
            }
        }
        let mut c = Cols::new(&sch, rows.len());
        for (addresses, r) in &rows {
            c.row(
                [
                    s(r.system),
                    s(&r.job),
                    s(&r.instance),
                    s(addresses),
                    so(&r.cluster),
                    V::F(Some(r.time_ns as f64 / 1e6)),
                ]
                .into_iter()
                .chain(dep_values(r)),
            );
        }
        Ok(vec![("dependencies", sch.clone(), c.finish(sch)?)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_normalise_to_one_server() {
        for (a, want) in [
            (
                "redis://:secret@Redis.Shop.svc.cluster.local:6379/0",
                "redis.shop:6379",
            ),
            (
                "postgresql://postgres@127.0.0.1:5432/postgres?sslmode=disable",
                "127.0.0.1:5432",
            ),
            ("localhost:6379", "127.0.0.1:6379"),
            ("[::1]:8000", "127.0.0.1:8000"),
            ("::1", "127.0.0.1"),
            ("reviews.default.svc.", "reviews.default"),
            ("10.1.2.3", "10.1.2.3"),
            ("[2001:db8::1]:9121", "2001:db8::1:9121"),
        ] {
            assert_eq!(norm(a), want, "{a}");
        }
    }

    #[test]
    fn counters_increase_across_resets_and_need_two_points() {
        assert_eq!(increase(&[(1, 5.0)]), None);
        assert_eq!(
            increase(&[(1, 5.0), (2, 9.0), (3, 2.0), (4, 4.0)]),
            Some(8.0)
        );
    }
}

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

use std::collections::{BTreeMap, HashMap};

use super::store::Series;

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
        let (Some(job), Some(inst)) = (
            s.dims.job.as_deref(),
            s.dims.instance.as_deref().or(s.dims.job.as_deref()),
        ) else {
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

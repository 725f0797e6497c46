//! Scenarios for root-cause analysis: traces with a known fault, and the
//! gateway logs, Kafka lag and host metrics a real system would show for
//! it, in the conventions real systems use (OTel semantic conventions,
//! otelhttptrace phase spans, exception events, the Collector's hostmetrics
//! and kafkametrics names, gateway access-log fields).
//!
//! Used by the evaluation harness (`rcaeval`), the end-to-end tests and
//! `causeway demo`. Every trace starts at an edge gateway span, goes through
//! a random topology of services (depth and fan-out vary, latencies are
//! noisy) and carries the fault at one place. Faults of different classes
//! use different routes, hosts and topics, as concurrent incidents would.

use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans};

mod build;
mod causes;
mod conventions;
mod rng;

pub use build::host_metrics;
use build::*;
pub use causes::OWNER_OPS;
pub use rng::Rng;

/// The fault classes (the causes the analysis must find), and `healthy`.
pub const CAUSES: [&str; 14] = [
    "rate_limited",
    "circuit_open",
    "upstream_timeout",
    "upstream_unavailable",
    "tls_handshake",
    "consumer_lag",
    "retry_storm",
    "cache_miss_fallback",
    "slow_dependency",
    "queueing",
    "host_cpu_saturation",
    "host_io_wait",
    "host_memory_pressure",
    "error",
];

/// One generated trace and its evidence.
#[derive(Debug, Clone)]
pub struct Case {
    /// Trace id.
    pub trace_id: [u8; 16],
    /// The cause planted (`healthy` for none).
    pub cause: &'static str,
    /// Whether it is a healthy trace made slow by noise only.
    pub healthy_slow: bool,
    /// The span the fault is in.
    pub culprit_span_id: [u8; 8],
    /// Its service.
    pub culprit_service: String,
    /// Route.
    pub route: String,
    /// Spans, one ResourceSpans per service and host.
    pub spans: Vec<ResourceSpans>,
    /// Gateway and application logs.
    pub logs: Vec<ResourceLogs>,
    /// Metrics (Kafka, hosts), with times around the trace.
    pub metrics: Vec<ResourceMetrics>,
    /// The metrics arrive after the trace was decided (scraped late).
    pub late_metrics: bool,
    /// A second fault on the same trace, smaller than the first: it must be
    /// among the alternatives.
    pub second: Option<&'static str>,
    /// The generator kind (a cause, or one of [`HARD`]).
    pub kind: &'static str,
}

/// Hard cases (kind, the cause expected): evidence as stock instrumentation
/// and stock Collector receivers give it, and layouts that fool simple rules.
pub const HARD: [(&str, &str); 16] = [
    // Retries against a failing upstream (503s), each attempt its own client
    // span, no resend_count: the 503s trigger them, so the cause is the
    // callee's unavailability and the storm its consequence (#49).
    ("retry_loop_503", "upstream_unavailable"),
    // urllib3 Retry: one client span, several server spans (503) under it.
    ("retry_hidden_server_spans", "upstream_unavailable"),
    // Failed once, retried, succeeded quickly: healthy for the user.
    ("retry_recovered_fast", "unknown"),
    // Lag only as kafkametrics' lag_sum (growing), old messaging names, no group on spans.
    ("kafkametrics_lag", "consumer_lag"),
    // Stock Redis: GET ?, a slow SELECT, SET ? ? ? ?, no cache.hit.
    ("stock_redis_miss", "cache_miss_fallback"),
    // A downstream handler computes for a second and then queries: its own
    // work, not waiting (not queueing); the dependency is slow.
    ("compute_before_call", "slow_dependency"),
    // No host.name: a pod with service.instance.id, k8s.pod.name and k8s.node.name.
    ("no_host_name_cpu", "host_cpu_saturation"),
    // Host metrics scraped after the trace was decided.
    ("late_metrics_cpu", "host_cpu_saturation"),
    // A large cache miss and a smaller slow TLS handshake on one trace.
    ("concurrent_cache_tls", "cache_miss_fallback"),
    // The gateway timed out (504) while the backend later finished 200.
    ("gateway_504_backend_ok", "upstream_timeout"),
    // Go's otelgrpc: DEADLINE_EXCEEDED by number, the callee still working.
    ("grpc_deadline", "upstream_timeout"),
    // Java's agent: UNAVAILABLE, a StatusRuntimeException, no server span.
    ("grpc_unavailable", "upstream_unavailable"),
    // RESOURCE_EXHAUSTED by name, passed on by the frontend as 429.
    ("grpc_resource_exhausted", "rate_limited"),
    // An edge gateway (502) in front of a sidecar (503 UF) whose line arrives last.
    ("two_gateway_layers", "upstream_unavailable"),
    // A slow query on a table called job_queue: not queueing.
    ("job_queue_table", "slow_dependency"),
    // Client spans named just GET (stable conventions): a fast route slow.
    ("stable_get_routes", "slow_dependency"),
];

/// Generate one case of `cause` (or `healthy`, `healthy_slow`), number `n`, starting at `t0_ns`.
pub fn case(rng: &mut Rng, cause: &'static str, n: u64, t0_ns: u64) -> Case {
    let (mut cx, up) = enter(rng, cause, n, t0_ns);
    if let Some((_, build)) = causes::BUILDERS.iter().find(|(k, _)| *k == cause) {
        build(&mut cx);
    }
    confounders(&mut cx);
    finish(cx, up)
}

/// The start every case shares: the edge gateway's server span, its call
/// to a frontend and the frontend's server span, then the frontend's normal
/// work before the fault. The context, and the gateway's call.
fn enter<'r>(rng: &'r mut Rng, cause: &'static str, n: u64, t0_ns: u64) -> (Ctx<'r>, [u8; 8]) {
    let mut tid = [0u8; 16];
    tid[..8].copy_from_slice(&rng.next_u64().to_be_bytes());
    tid[8..].copy_from_slice(&(n + 1).to_be_bytes());
    let class = CAUSES.iter().position(|c| *c == cause).unwrap_or(99);
    let route = format!(
        "route-{}-{}",
        if class == 99 {
            cause.to_string()
        } else {
            cause.replace('_', "-")
        },
        n % 3
    );
    let mut t = Trace::new(tid, t0_ns);
    let gw_host = format!("gateway-{}", rng.range(1, 2));
    let front = format!("frontend-{}", rng.range(1, 2));
    let front_host = format!("{front}-host");
    let root = t.add(
        None,
        "edge-gateway",
        &gw_host,
        &format!("POST /{route}"),
        span::SpanKind::Server,
        0.0,
        0.0,
        vec![ks("http.route", &route), ks("http.request.method", "POST")],
    );
    let up = t.add(
        Some(root),
        "edge-gateway",
        &gw_host,
        "router frontend egress",
        span::SpanKind::Client,
        0.3,
        0.3,
        vec![ks("server.address", &front)],
    );
    let srv = t.add(
        Some(up),
        &front,
        &front_host,
        &format!("POST /{route}"),
        span::SpanKind::Server,
        0.6,
        0.6,
        vec![ks("http.route", &route)],
    );
    let mut at = 0.6 + rng.latency(1.0);
    // Normal work before the fault.
    for _ in 0..rng.range(0, 2) {
        let callee = *rng.pick(&SERVICES);
        at = normal_call(&mut t, rng, srv, &front, &front_host, callee, at, 1) + rng.latency(0.3);
    }
    let hard = HARD.iter().any(|(k, _)| *k == cause);
    let owner = format!(
        "{}-svc",
        if class == 99 && !hard {
            "app".to_string()
        } else {
            cause.replace('_', "-")
        }
    );
    let owner_host = format!("{owner}-host");
    let culprit_service = front.clone();
    let cx = Ctx {
        rng,
        cause,
        n,
        t0_ns,
        tid,
        route,
        t,
        front,
        front_host,
        owner,
        owner_host,
        root,
        srv,
        at,
        culprit: srv,
        culprit_service,
        gw_status: 200,
        gw_extra: Vec::new(),
        logs: Vec::new(),
        metrics: Vec::new(),
    };
    (cx, up)
}

/// Confounders any trace may carry, healthy or not: a cache miss served
/// fast, a call re-sent once, a publish to a topic whose consumers keep up.
fn confounders(cx: &mut Ctx<'_>) {
    let (srv, front, front_host) = (cx.srv, cx.front.as_str(), cx.front_host.as_str());
    let (rng, t) = (&mut *cx.rng, &mut cx.t);
    if rng.f() < 0.3 {
        let c0 = cx.at;
        t.add(
            Some(srv),
            front,
            front_host,
            "GET",
            span::SpanKind::Client,
            c0,
            c0 + 0.6,
            vec![
                ks("db.system", "redis"),
                ks("db.operation.name", "GET"),
                kb("cache.hit", false),
            ],
        );
        let d = rng.latency(4.0);
        t.add(
            Some(srv),
            front,
            front_host,
            "SELECT profile",
            span::SpanKind::Client,
            c0 + 0.8,
            c0 + 0.8 + d,
            vec![
                ks("db.system", "postgresql"),
                ks("db.operation.name", "SELECT"),
            ],
        );
        cx.at = c0 + 0.8 + d + rng.latency(0.3);
    }
    if rng.f() < 0.2 {
        let callee = *rng.pick(&SERVICES);
        let d = rng.latency(6.0);
        let at = cx.at;
        t.add(
            Some(srv),
            front,
            front_host,
            &format!("GET {callee}"),
            span::SpanKind::Client,
            at,
            at + d,
            vec![
                ks("server.address", callee),
                ki("http.request.resend_count", 1),
            ],
        );
        cx.at += d + rng.latency(0.3);
    }
    if rng.f() < 0.2 {
        let topic = "audit-events";
        let at = cx.at;
        t.add(
            Some(srv),
            front,
            front_host,
            &format!("{topic} publish"),
            span::SpanKind::Producer,
            at,
            at + 1.5,
            vec![
                ks("messaging.system", "kafka"),
                ks("messaging.destination.name", topic),
            ],
        );
        cx.at += 1.5;
        let tm = cx.t0_ns.saturating_sub(rng.range(0, 30) * 1_000_000_000);
        cx.metrics.push(kafka_metrics(
            "audit-sink",
            topic,
            tm,
            rng.between(0.0, 40.0),
            rng.between(0.0, 2.0),
            1.0,
            false,
            false,
            rng.between(20.0, 120.0),
        ));
    }
}

/// The end every case shares: normal work after the fault, the responses
/// (the gateway's status on its span and in its access log), the
/// frontend host's pressure; the case with its ground truth.
fn finish(cx: Ctx<'_>, up: [u8; 8]) -> Case {
    let Ctx {
        rng,
        cause,
        t0_ns,
        tid,
        route,
        mut t,
        front,
        front_host,
        mut at,
        root,
        srv,
        culprit,
        culprit_service,
        gw_status,
        gw_extra,
        mut logs,
        mut metrics,
        ..
    } = cx;
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    if rng.f() < 0.5 {
        let callee = *rng.pick(&SERVICES);
        at = normal_call(&mut t, rng, srv, &front, &front_host, callee, at, 1) + rng.latency(0.3);
    }
    let srv_end = at + rng.latency(1.0);
    for (id, end) in [(srv, srv_end), (up, srv_end + 0.3), (root, srv_end + 0.6)] {
        if let Some(x) = t.get(id) {
            x.end_time_unix_nano = t_ns(end);
        }
    }
    if gw_status >= 500 {
        t.fail(root, &gw_status.to_string(), None);
        if let Some(x) = t.get(root) {
            x.attributes
                .push(ki("http.response.status_code", gw_status));
        }
    }
    let mut records = gw_extra;
    records.push(gateway_log(
        &route,
        &tid,
        t_ns(srv_end + 0.6),
        gw_status,
        srv_end + 0.6,
        &front,
        vec![],
    ));
    logs.push(ResourceLogs {
        resource: Some(Resource {
            attributes: vec![ks("service.name", "edge-gateway")],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: records,
            ..Default::default()
        }],
        ..Default::default()
    });
    // Hosts report their pressure, scraped before or after the request;
    // healthy ones are sometimes busy, never saturated.
    let tm = (t0_ns + rng.range(0, 75) * 1_000_000_000).saturating_sub(30_000_000_000);
    metrics.push(host_metrics(
        &front_host,
        tm,
        rng.between(0.15, 0.8),
        rng.between(0.0, 0.08),
        rng.between(0.3, 0.85),
        rng.between(0.0, 0.6),
    ));
    let hard_label = HARD.iter().find(|(k, _)| *k == cause).map(|(_, l)| *l);
    Case {
        trace_id: tid,
        kind: cause,
        late_metrics: cause == "late_metrics_cpu",
        second: (cause == "concurrent_cache_tls").then_some("tls_handshake"),
        cause: if matches!(cause, "healthy_slow" | "healthy" | "warmup") {
            "healthy"
        } else {
            hard_label.unwrap_or(cause)
        },
        healthy_slow: cause == "healthy_slow",
        culprit_span_id: culprit,
        culprit_service,
        route,
        spans: t.finish(),
        logs,
        metrics,
    }
}

pub mod config;
pub mod profiles;
pub mod send;

#[cfg(test)]
mod tests;

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

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, span::Event, ResourceSpans, ScopeSpans, Span, Status,
};
use std::collections::BTreeMap;

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

/// A small deterministic PRNG (xorshift64*), so scenarios are reproducible.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// Next 64 bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [0, 1).
    pub fn f(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// Uniform integer in [lo, hi].
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
    /// Uniform float in [lo, hi).
    pub fn between(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f()
    }
    /// A latency with a long tail around `median` ms (log-normal-ish).
    pub fn latency(&mut self, median: f64) -> f64 {
        let z = (self.f() + self.f() + self.f() - 1.5) * 2.0; // ~N(0,1)
        (median * (0.5 * z).exp()).max(0.2)
    }
    /// One of.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[(self.next_u64() % xs.len() as u64) as usize]
    }
}

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
pub const HARD: [(&str, &str); 10] = [
    // Retries against a failing upstream (503s), each attempt its own client span, no resend_count.
    ("retry_loop_503", "retry_storm"),
    // urllib3 Retry: one client span, several server spans (503) under it.
    ("retry_hidden_server_spans", "retry_storm"),
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
];

/// The services whose operations hold faults, and their normal latency
/// (ms): the warm-up traffic their baselines learn from.
pub const OWNER_OPS: [(&str, &str, f64); 8] = [
    ("slow-dependency-svc", "GET /data", 15.0),
    ("slow-dependency-svc", "SELECT report", 4.0),
    ("host-cpu-saturation-svc", "GET /compute", 20.0),
    ("host-io-wait-svc", "GET /compute", 20.0),
    ("host-memory-pressure-svc", "GET /compute", 20.0),
    ("compute-before-call-svc", "GET /compute", 20.0),
    ("no-host-name-cpu-svc", "GET /compute", 20.0),
    ("late-metrics-cpu-svc", "GET /compute", 20.0),
];

fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}
fn ks(k: &str, v: &str) -> KeyValue {
    kv(k, any_value::Value::StringValue(v.into()))
}
fn ki(k: &str, v: i64) -> KeyValue {
    kv(k, any_value::Value::IntValue(v))
}
fn kb(k: &str, v: bool) -> KeyValue {
    kv(k, any_value::Value::BoolValue(v))
}

/// Builds a trace span by span.
struct Trace {
    tid: [u8; 16],
    next: u64,
    t0: u64,
    spans: Vec<(String, String, Span)>,
    /// Resources as a Kubernetes pod reports them: no `host.name`, the pod
    /// and (from a k8sattributes-style enrichment) its node.
    k8s: bool,
}

impl Trace {
    fn new(tid: [u8; 16], t0: u64) -> Self {
        Trace {
            tid,
            next: 1,
            t0,
            spans: Vec::new(),
            k8s: false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        parent: Option<[u8; 8]>,
        service: &str,
        host: &str,
        name: &str,
        kind: span::SpanKind,
        start_ms: f64,
        end_ms: f64,
        attrs: Vec<KeyValue>,
    ) -> [u8; 8] {
        let mut id = [0u8; 8];
        id[..8].copy_from_slice(
            &(self.next ^ (u64::from(self.tid[0]) << 56) ^ 0x5a5a_0000_0000_0000).to_be_bytes(),
        );
        self.next += 1;
        let ns = |ms: f64| self.t0 + (ms * 1e6) as u64;
        self.spans.push((
            service.into(),
            host.into(),
            Span {
                trace_id: self.tid.to_vec(),
                span_id: id.to_vec(),
                parent_span_id: parent.map(|p| p.to_vec()).unwrap_or_default(),
                name: name.into(),
                kind: kind as i32,
                start_time_unix_nano: ns(start_ms),
                end_time_unix_nano: ns(end_ms.max(start_ms)),
                attributes: attrs,
                ..Default::default()
            },
        ));
        id
    }

    fn get(&mut self, id: [u8; 8]) -> Option<&mut Span> {
        self.spans
            .iter_mut()
            .map(|x| &mut x.2)
            .find(|s| s.span_id == id)
    }

    fn fail(&mut self, id: [u8; 8], message: &str, exception: Option<(&str, &str)>) {
        if let Some(s) = self.get(id) {
            s.status = Some(Status {
                code: 2,
                message: message.into(),
            });
            if let Some((ty, msg)) = exception {
                s.events.push(Event {
                    name: "exception".into(),
                    time_unix_nano: s.end_time_unix_nano,
                    attributes: vec![ks("exception.type", ty), ks("exception.message", msg)],
                    ..Default::default()
                });
            }
        }
    }

    fn finish(self) -> Vec<ResourceSpans> {
        let mut by: BTreeMap<(String, String), Vec<Span>> = BTreeMap::new();
        for (svc, host, s) in self.spans {
            by.entry((svc, host)).or_default().push(s);
        }
        let k8s = self.k8s;
        by.into_iter()
            .map(|((svc, host), spans)| ResourceSpans {
                resource: Some(Resource {
                    attributes: if k8s {
                        vec![
                            ks("service.name", &svc),
                            ks("service.instance.id", &format!("{svc}-7d9f-{}", host.len())),
                            ks("k8s.pod.name", &format!("{svc}-7d9f-x2k4")),
                            ks("k8s.node.name", &host),
                        ]
                    } else {
                        vec![ks("service.name", &svc), ks("host.name", &host)]
                    },
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect()
    }
}

/// A normal call from `service` to `callee` at `start` (ms): a client span,
/// the callee's server span and maybe a database call; returns its end.
#[allow(clippy::too_many_arguments)] // a generator's knobs, all positional in one place
fn normal_call(
    t: &mut Trace,
    rng: &mut Rng,
    parent: [u8; 8],
    service: &str,
    host: &str,
    callee: &str,
    start: f64,
    depth: u32,
) -> f64 {
    let callee_host = format!("{callee}-host-{}", rng.range(1, 3));
    let c = t.add(
        Some(parent),
        service,
        host,
        &format!("GET {callee}"),
        span::SpanKind::Client,
        start,
        start,
        vec![
            ks("server.address", callee),
            ks("http.request.method", "GET"),
        ],
    );
    let s0 = start + rng.between(0.2, 1.0);
    let srv = t.add(
        Some(c),
        callee,
        &callee_host,
        &format!("GET /{callee}"),
        span::SpanKind::Server,
        s0,
        s0,
        vec![],
    );
    let mut at = s0 + rng.latency(1.5);
    let n = if depth < 3 { rng.range(0, 2) } else { 0 };
    for _ in 0..n {
        if rng.f() < 0.5 {
            let d = rng.latency(4.0);
            t.add(
                Some(srv),
                callee,
                &callee_host,
                "SELECT items",
                span::SpanKind::Client,
                at,
                at + d,
                vec![
                    ks("db.system", "postgresql"),
                    ks("db.operation.name", "SELECT"),
                ],
            );
            at += d + rng.latency(0.5);
        } else {
            let next = *rng.pick(&SERVICES);
            at = normal_call(t, rng, srv, callee, &callee_host, next, at, depth + 1)
                + rng.latency(0.5);
        }
    }
    let end = at + rng.latency(2.0);
    let t0 = t.t0;
    if let Some(s) = t.get(srv) {
        s.end_time_unix_nano = t0 + (end * 1e6) as u64;
    }
    let cend = end + rng.between(0.2, 1.0);
    if let Some(s) = t.get(c) {
        s.end_time_unix_nano = t0 + (cend * 1e6) as u64;
    }
    cend
}

const SERVICES: [&str; 8] = [
    "catalog",
    "pricing",
    "inventory",
    "users",
    "search",
    "reviews",
    "shipping",
    "tax",
];

fn gateway_log(
    route: &str,
    tid: &[u8; 16],
    t_ns: u64,
    status: i64,
    duration_ms: f64,
    upstream: &str,
    extra: Vec<KeyValue>,
) -> LogRecord {
    let mut attrs = vec![
        ks("route_id", route),
        ki("http.response.status_code", status),
        ks("server.address", upstream),
        kv(
            "http.server.request.duration",
            any_value::Value::DoubleValue(duration_ms / 1000.0),
        ),
    ];
    attrs.extend(extra);
    LogRecord {
        time_unix_nano: t_ns,
        observed_time_unix_nano: t_ns,
        severity_number: if status >= 500 {
            17
        } else if status >= 400 {
            13
        } else {
            9
        },
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(format!(
                "{{\"route_id\":\"{route}\",\"status_code\":{status},\"trace_id\":\"{}\"}}",
                hex(tid)
            ))),
        }),
        attributes: attrs,
        trace_id: tid.to_vec(),
        ..Default::default()
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn gauge(name: &str, attrs: Vec<KeyValue>, t_ns: u64, v: f64) -> Metric {
    Metric {
        name: name.into(),
        data: Some(metric::Data::Gauge(Gauge {
            data_points: vec![NumberDataPoint {
                attributes: attrs,
                time_unix_nano: t_ns,
                value: Some(number_data_point::Value::AsDouble(v)),
                ..Default::default()
            }],
        })),
        ..Default::default()
    }
}

fn resource_metrics(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: resource,
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Host metrics as the hostmetrics receiver reports them.
pub fn host_metrics(
    host: &str,
    t_ns: u64,
    idle: f64,
    iowait: f64,
    mem_used: f64,
    disk_util: f64,
) -> ResourceMetrics {
    let user = (1.0 - idle - iowait).max(0.0) * 0.8;
    let system = (1.0 - idle - iowait).max(0.0) * 0.2;
    let total = 16.0 * (1u64 << 30) as f64;
    resource_metrics(
        vec![ks("host.name", host), ks("os.type", "linux")],
        vec![
            gauge(
                "system.cpu.utilization",
                vec![ks("cpu.mode", "idle")],
                t_ns,
                idle,
            ),
            gauge(
                "system.cpu.utilization",
                vec![ks("cpu.mode", "user")],
                t_ns,
                user,
            ),
            gauge(
                "system.cpu.utilization",
                vec![ks("cpu.mode", "system")],
                t_ns,
                system,
            ),
            gauge(
                "system.cpu.utilization",
                vec![ks("cpu.mode", "iowait")],
                t_ns,
                iowait,
            ),
            gauge(
                "system.memory.utilization",
                vec![ks("system.memory.state", "used")],
                t_ns,
                mem_used,
            ),
            gauge(
                "system.linux.memory.available",
                vec![],
                t_ns,
                total * (1.0 - mem_used),
            ),
            gauge(
                "system.disk.utilization",
                vec![ks("device", "nvme0n1")],
                t_ns,
                disk_util,
            ),
        ],
    )
}

#[allow(clippy::too_many_arguments)] // one value per kafka_lag metric
fn kafka_metrics(
    group: &str,
    topic: &str,
    t_ns: u64,
    lag: f64,
    lag_seconds: f64,
    status: f64,
    alarm: bool,
    storm: bool,
    rate: f64,
) -> ResourceMetrics {
    let g = |n: &str, v: f64| gauge(n, vec![ks("group", group), ks("topic", topic)], t_ns, v);
    let mut ms = vec![
        g("kafka.consumer_group.lag_sum", lag),
        g(
            "kafka.consumer_group.lag_alarm",
            if alarm { 1.0 } else { 0.0 },
        ),
        gauge(
            "kafka.consumer_group.lag_seconds",
            vec![ks("group", group), ks("topic", topic), ki("partition", 0)],
            t_ns,
            lag_seconds,
        ),
        gauge(
            "kafka.consumer_group.partition_status",
            vec![ks("group", group), ks("topic", topic), ki("partition", 0)],
            t_ns,
            status,
        ),
    ];
    ms.push(gauge(
        "kafka.topic.produce_rate",
        vec![ks("topic", topic)],
        t_ns,
        rate,
    ));
    ms.push(gauge(
        "kafka.topic.retry_storm",
        vec![ks("topic", topic)],
        t_ns,
        if storm { 1.0 } else { 0.0 },
    ));
    resource_metrics(
        vec![
            ks("kafka.cluster.alias", "kafka"),
            ks("service.name", "kafka"),
        ],
        ms,
    )
}

/// Generate one case of `cause` (or `healthy`, `healthy_slow`), number `n`, starting at `t0_ns`.
pub fn case(rng: &mut Rng, cause: &'static str, n: u64, t0_ns: u64) -> Case {
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
    let mut logs = Vec::new();
    let mut metrics = Vec::new();
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
    let mut culprit = srv;
    let mut culprit_service = front.clone();
    let mut gw_status = 200;
    let mut gw_extra: Vec<LogRecord> = Vec::new();
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
    let t_ns = |ms: f64| t0_ns + (ms * 1e6) as u64;
    match cause {
        "rate_limited" => {
            // The gateway answered 429 to earlier attempts of this request, then let one through.
            let attempts = rng.range(3, 14);
            let rule = format!("qps-{}-per-ip", rng.pick(&[50, 100, 200]));
            for i in 0..attempts {
                gw_extra.push(gateway_log(
                    &route,
                    &tid,
                    t_ns(i as f64),
                    429,
                    0.4,
                    &front,
                    vec![ks("gateway.rate_limit_rule", &rule)],
                ));
            }
            // The last attempt was rejected too: the request failed with 429.
            gw_status = 429;
            gw_extra.push(gateway_log(
                &route,
                &tid,
                t_ns(at),
                429,
                0.4,
                &front,
                vec![ks("gateway.rate_limit_rule", &rule)],
            ));
            culprit = root;
            culprit_service = "edge-gateway".into();
        }
        "circuit_open" => {
            gw_status = 503;
            for _ in 0..rng.range(1, 3) {
                gw_extra.push(gateway_log(
                    &route,
                    &tid,
                    t_ns(0.0),
                    503,
                    0.3,
                    &owner,
                    vec![
                        ks("gateway.circuit_state", "OPEN"),
                        ks("gateway.response_flags", "UO"),
                    ],
                ));
            }
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("POST {owner}"),
                span::SpanKind::Client,
                at,
                at + rng.latency(300.0),
                vec![
                    ks("server.address", &owner),
                    ki("http.response.status_code", 503),
                ],
            );
            at += rng.latency(300.0);
            t.fail(c, "503", None);
            culprit = c;
            culprit_service = front.clone();
        }
        "upstream_timeout" => {
            gw_status = 504;
            let timeout = *rng.pick(&[1000.0, 2000.0, 3000.0]);
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("POST {owner}"),
                span::SpanKind::Client,
                at,
                at + timeout,
                vec![ks("server.address", &owner), ks("error.type", "timeout")],
            );
            let s = t.add(
                Some(c),
                &owner,
                &owner_host,
                "POST /work",
                span::SpanKind::Server,
                at + 1.0,
                at + timeout + rng.latency(500.0),
                vec![],
            );
            t.fail(
                c,
                "context deadline exceeded",
                Some(("TimeoutError", "request timed out")),
            );
            at += timeout;
            culprit = s;
            culprit_service = owner.clone();
            gw_extra.push(gateway_log(
                &route,
                &tid,
                t_ns(at),
                504,
                at,
                &front,
                vec![ks("gateway.response_flags", "UT")],
            ));
        }
        "upstream_unavailable" => {
            gw_status = 503;
            for i in 0..1 {
                let s0 = at + i as f64 * 250.0;
                let c = t.add(
                    Some(srv),
                    &front,
                    &front_host,
                    &format!("POST {owner}"),
                    span::SpanKind::Client,
                    s0,
                    s0 + rng.latency(3.0),
                    vec![
                        ks("server.address", &owner),
                        ks("error.type", "connection_refused"),
                    ],
                );
                t.fail(c, "connect: connection refused", None);
                culprit = c;
            }
            at += 5.0;
            culprit_service = front.clone();
            gw_extra.push(gateway_log(
                &route,
                &tid,
                t_ns(at),
                503,
                at,
                &front,
                vec![
                    ks("gateway.response_flags", "UF"),
                    ks("gateway.circuit_state", "CLOSED"),
                ],
            ));
        }
        "tls_handshake" => {
            let tls = rng.between(400.0, 1500.0);
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("POST {owner}"),
                span::SpanKind::Client,
                at,
                at + tls + 30.0,
                vec![ks("server.address", &owner)],
            );
            t.add(
                Some(c),
                &front,
                &front_host,
                "http.getconn",
                span::SpanKind::Internal,
                at,
                at + 2.0,
                vec![],
            );
            t.add(
                Some(c),
                &front,
                &front_host,
                "http.dns",
                span::SpanKind::Internal,
                at + 2.0,
                at + 4.0,
                vec![],
            );
            t.add(
                Some(c),
                &front,
                &front_host,
                "http.connect",
                span::SpanKind::Internal,
                at + 4.0,
                at + 6.0,
                vec![],
            );
            let h = t.add(
                Some(c),
                &front,
                &front_host,
                "http.tls",
                span::SpanKind::Internal,
                at + 6.0,
                at + 6.0 + tls,
                vec![ks("server.address", &owner)],
            );
            t.add(
                Some(c),
                &owner,
                &owner_host,
                "POST /work",
                span::SpanKind::Server,
                at + 8.0 + tls,
                at + tls + 25.0,
                vec![],
            );
            at += tls + 30.0;
            culprit = h;
            culprit_service = front.clone();
        }
        "consumer_lag" | "retry_storm" => {
            let storm = cause == "retry_storm";
            if storm && rng.f() < 0.5 {
                // Client-side retries: the same call re-sent.
                let d = rng.latency(200.0);
                let c = t.add(
                    Some(srv),
                    &front,
                    &front_host,
                    &format!("POST {owner}"),
                    span::SpanKind::Client,
                    at,
                    at + d * 4.0,
                    vec![
                        ks("server.address", &owner),
                        ki("http.request.resend_count", rng.range(3, 6) as i64),
                    ],
                );
                at += d * 4.0;
                culprit = c;
                culprit_service = front.clone();
            } else {
                let topic = if storm {
                    format!("{owner}-events-retry")
                } else {
                    format!("{owner}-events")
                };
                let group = format!("{owner}-workers");
                let p = t.add(
                    Some(srv),
                    &front,
                    &front_host,
                    &format!("{topic} publish"),
                    span::SpanKind::Producer,
                    at,
                    at + 2.0,
                    vec![
                        ks("messaging.system", "kafka"),
                        ks("messaging.destination.name", &topic),
                    ],
                );
                let wait = rng.between(800.0, 4000.0);
                let d = rng.latency(20.0);
                let c = t.add(
                    Some(p),
                    &owner,
                    &owner_host,
                    &format!("{topic} process"),
                    span::SpanKind::Consumer,
                    at + 2.0 + wait,
                    at + 2.0 + wait + d,
                    vec![
                        ks("messaging.system", "kafka"),
                        ks("messaging.destination.name", &topic),
                        ks("messaging.consumer.group.name", &group),
                    ],
                );
                at += 2.0 + wait + d;
                culprit = c;
                culprit_service = owner.clone();
                let tm = t0_ns.saturating_sub(rng.range(0, 30) * 1_000_000_000);
                metrics.push(if storm {
                    kafka_metrics(
                        &group,
                        &topic,
                        tm,
                        rng.between(10.0, 500.0),
                        rng.between(0.0, 3.0),
                        1.0,
                        false,
                        true,
                        rng.between(400.0, 3000.0),
                    )
                } else {
                    kafka_metrics(
                        &group,
                        &topic,
                        tm,
                        rng.between(20_000.0, 200_000.0),
                        rng.between(30.0, 600.0),
                        *rng.pick(&[2.0, 4.0]),
                        true,
                        false,
                        rng.between(50.0, 150.0),
                    )
                });
            }
        }
        "cache_miss_fallback" => {
            let s = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("GET {owner}"),
                span::SpanKind::Client,
                at,
                at,
                vec![ks("server.address", &owner)],
            );
            let o = t.add(
                Some(s),
                &owner,
                &owner_host,
                "GET /item",
                span::SpanKind::Server,
                at + 0.5,
                at + 0.5,
                vec![],
            );
            let c0 = at + 1.0;
            t.add(
                Some(o),
                &owner,
                &owner_host,
                "GET",
                span::SpanKind::Client,
                c0,
                c0 + 0.8,
                vec![
                    ks("db.system", "redis"),
                    ks("db.operation.name", "GET"),
                    kb("cache.hit", false),
                ],
            );
            let d = rng.between(300.0, 1500.0);
            let q = t.add(
                Some(o),
                &owner,
                &owner_host,
                "SELECT items",
                span::SpanKind::Client,
                c0 + 1.0,
                c0 + 1.0 + d,
                vec![
                    ks("db.system", "postgresql"),
                    ks("db.operation.name", "SELECT"),
                ],
            );
            let end = c0 + 1.0 + d + 1.0;
            if let Some(x) = t.get(o) {
                x.end_time_unix_nano = t_ns(end);
            }
            if let Some(x) = t.get(s) {
                x.end_time_unix_nano = t_ns(end + 0.5);
            }
            at = end + 0.5;
            culprit = q;
            culprit_service = owner.clone();
        }
        "slow_dependency" | "healthy_slow" => {
            let d = rng.between(300.0, 1500.0);
            let callee = if cause == "healthy_slow" {
                (*rng.pick(&SERVICES)).to_string()
            } else {
                owner.clone()
            };
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("GET {callee}"),
                span::SpanKind::Client,
                at,
                at + d + 2.0,
                vec![ks("server.address", &callee)],
            );
            let s = t.add(
                Some(c),
                &callee,
                &format!("{callee}-host-{}", rng.range(1, 3)),
                "GET /data",
                span::SpanKind::Server,
                at + 1.0,
                at + d + 1.0,
                vec![],
            );
            if rng.f() < 0.5 {
                let q = t.add(
                    Some(s),
                    &callee,
                    &format!("{callee}-db-host"),
                    "SELECT report",
                    span::SpanKind::Client,
                    at + 2.0,
                    at + d,
                    vec![
                        ks("db.system", "postgresql"),
                        ks("db.operation.name", "SELECT"),
                    ],
                );
                culprit = q;
            } else {
                culprit = s;
            }
            culprit_service = callee;
            at += d + 2.0;
        }
        "queueing" => {
            let wait = rng.between(400.0, 1500.0);
            let d = rng.latency(5.0);
            if rng.f() < 0.5 {
                // The callee's worker pool was busy: its server span began late.
                let s = t.add(
                    Some(srv),
                    &front,
                    &front_host,
                    &format!("GET {owner}"),
                    span::SpanKind::Client,
                    at,
                    at + wait + d + 3.0,
                    vec![ks("server.address", &owner)],
                );
                let o = t.add(
                    Some(s),
                    &owner,
                    &owner_host,
                    "GET /orders",
                    span::SpanKind::Server,
                    at + 0.5 + wait,
                    at + wait + d + 2.5,
                    vec![],
                );
                t.add(
                    Some(o),
                    &owner,
                    &owner_host,
                    "SELECT orders",
                    span::SpanKind::Client,
                    at + 1.0 + wait,
                    at + 1.0 + wait + d,
                    vec![
                        ks("db.system", "postgresql"),
                        ks("db.operation.name", "SELECT"),
                    ],
                );
                culprit = s;
                culprit_service = front.clone();
            } else {
                // A connection pool with no free connection (node-postgres' pg-pool.connect).
                let s = t.add(
                    Some(srv),
                    &front,
                    &front_host,
                    &format!("GET {owner}"),
                    span::SpanKind::Client,
                    at,
                    at + wait + d + 3.0,
                    vec![ks("server.address", &owner)],
                );
                let o = t.add(
                    Some(s),
                    &owner,
                    &owner_host,
                    "GET /orders",
                    span::SpanKind::Server,
                    at + 0.5,
                    at + wait + d + 2.5,
                    vec![],
                );
                let pool = t.add(
                    Some(o),
                    &owner,
                    &owner_host,
                    "pg-pool.connect",
                    span::SpanKind::Internal,
                    at + 0.8,
                    at + 0.8 + wait,
                    vec![],
                );
                t.add(
                    Some(o),
                    &owner,
                    &owner_host,
                    "pg.query:SELECT shop",
                    span::SpanKind::Client,
                    at + 1.0 + wait,
                    at + 1.0 + wait + d,
                    vec![
                        ks("db.system", "postgresql"),
                        ks("db.statement", "SELECT * FROM orders WHERE id = $1"),
                    ],
                );
                culprit = pool;
                culprit_service = owner.clone();
            }
            at += wait + d + 3.0;
        }
        "host_cpu_saturation" | "host_io_wait" | "host_memory_pressure" => {
            let d = rng.between(300.0, 1500.0);
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("GET {owner}"),
                span::SpanKind::Client,
                at,
                at + d + 2.0,
                vec![ks("server.address", &owner)],
            );
            let s = t.add(
                Some(c),
                &owner,
                &owner_host,
                "GET /compute",
                span::SpanKind::Server,
                at + 1.0,
                at + d + 1.0,
                vec![],
            );
            at += d + 2.0;
            culprit = s;
            culprit_service = owner.clone();
            let tm = (t0_ns + rng.range(0, 75) * 1_000_000_000).saturating_sub(30_000_000_000);
            metrics.push(match cause {
                "host_cpu_saturation" => {
                    host_metrics(&owner_host, tm, rng.between(0.0, 0.06), 0.01, 0.5, 0.1)
                }
                "host_io_wait" => host_metrics(
                    &owner_host,
                    tm,
                    rng.between(0.1, 0.3),
                    rng.between(0.3, 0.6),
                    0.5,
                    rng.between(0.92, 1.0),
                ),
                _ => host_metrics(&owner_host, tm, 0.5, 0.02, rng.between(0.96, 0.995), 0.1),
            });
        }
        "error" => {
            gw_status = 500;
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("POST {owner}"),
                span::SpanKind::Client,
                at,
                at + 1.0,
                vec![
                    ks("server.address", &owner),
                    ki("http.response.status_code", 500),
                ],
            );
            let d = rng.latency(30.0);
            let s = t.add(
                Some(c),
                &owner,
                &owner_host,
                "POST /charge",
                span::SpanKind::Server,
                at + 0.5,
                at + 0.5 + d,
                vec![ki("http.response.status_code", 500)],
            );
            if let Some(x) = t.get(c) {
                x.end_time_unix_nano = t_ns(at + 1.0 + d);
            }
            t.fail(
                s,
                "NullPointerException",
                Some(("java.lang.NullPointerException", "order.customer is null")),
            );
            t.fail(c, "500", None);
            at += d + 1.0;
            culprit = s;
            culprit_service = owner.clone();
        }
        "warmup" => {
            // Normal traffic, from which the operations' baselines are learned:
            // the SERVICES' GET /data is slow by nature, the owners' operations fast.
            let k = (n % (SERVICES.len() + OWNER_OPS.len()) as u64) as usize;
            let (callee, op, d) = if k < SERVICES.len() {
                (
                    SERVICES[k].to_string(),
                    "GET /data",
                    rng.between(300.0, 1500.0),
                )
            } else {
                let (svc, op, ms) = OWNER_OPS[k - SERVICES.len()];
                let op = if op == "SELECT report" {
                    "GET /data"
                } else {
                    op
                };
                (svc.to_string(), op, rng.latency(ms))
            };
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("GET {callee}"),
                span::SpanKind::Client,
                at,
                at + d + 2.0,
                vec![ks("server.address", &callee)],
            );
            let sv = t.add(
                Some(c),
                &callee,
                &format!("{callee}-host-{}", rng.range(1, 3)),
                op,
                span::SpanKind::Server,
                at + 1.0,
                at + d + 1.0,
                vec![],
            );
            // As in `healthy_slow`: half the time, the report query holds it.
            let slow_query = k < SERVICES.len() && rng.f() < 0.5;
            if (k >= SERVICES.len() && op == "GET /data") || slow_query {
                let q = if slow_query {
                    d - 2.0
                } else {
                    rng.latency(4.0).min(d * 0.8)
                };
                t.add(
                    Some(sv),
                    &callee,
                    &format!("{callee}-db-host"),
                    "SELECT report",
                    span::SpanKind::Client,
                    at + 1.5,
                    at + 1.5 + q,
                    vec![
                        ks("db.system", "postgresql"),
                        ks("db.operation.name", "SELECT"),
                    ],
                );
            }
            at += d + 2.0;
        }
        "retry_loop_503" | "retry_recovered_fast" => {
            // An explicit retry loop: each attempt its own client span, ERROR on 503.
            let fast = cause == "retry_recovered_fast";
            let n = if fast { 2 } else { rng.range(4, 6) };
            let backoff = if fast { 1.0 } else { rng.between(150.0, 400.0) };
            let mut first = None;
            for i in 0..n {
                let last = i == n - 1;
                let d = rng.latency(if fast { 2.0 } else { 15.0 });
                let ok = fast && last;
                let c = t.add(
                    Some(srv),
                    &front,
                    &front_host,
                    &format!("POST {owner}"),
                    span::SpanKind::Client,
                    at,
                    at + d,
                    vec![
                        ks("server.address", &owner),
                        ki("http.response.status_code", if ok { 200 } else { 503 }),
                    ],
                );
                if !ok {
                    t.fail(c, "503 Service Unavailable", None);
                }
                first.get_or_insert(c);
                at += d + if last { 0.0 } else { backoff };
            }
            if !fast {
                gw_status = 503;
                gw_extra.push(gateway_log(&route, &tid, t_ns(at), 503, at, &front, vec![]));
            }
            culprit = first.unwrap_or(srv);
            culprit_service = front.clone();
        }
        "retry_hidden_server_spans" => {
            // urllib3 Retry: one client span; the attempts show as server spans under it.
            let n = rng.range(3, 5);
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("POST {owner}"),
                span::SpanKind::Client,
                at,
                at,
                vec![
                    ks("server.address", &owner),
                    ki("http.response.status_code", 200),
                ],
            );
            let mut x = at + 0.5;
            for i in 0..n {
                let d = rng.latency(20.0);
                let ok = i == n - 1;
                let sv = t.add(
                    Some(c),
                    &owner,
                    &owner_host,
                    "POST /charge",
                    span::SpanKind::Server,
                    x,
                    x + d,
                    vec![ki("http.response.status_code", if ok { 200 } else { 503 })],
                );
                if !ok {
                    t.fail(sv, "503", None);
                }
                x += d + if ok { 0.5 } else { rng.between(200.0, 500.0) };
            }
            if let Some(sp) = t.get(c) {
                sp.end_time_unix_nano = t_ns(x);
            }
            at = x;
            culprit = c;
            culprit_service = front.clone();
        }
        "kafkametrics_lag" => {
            // kafka-python: `messaging.destination`, no group, a zero-length consumer child.
            let topic = format!("{owner}-orders");
            let p = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("{topic} send"),
                span::SpanKind::Producer,
                at,
                at + 2.0,
                vec![
                    ks("messaging.system", "kafka"),
                    ks("messaging.destination", &topic),
                    ki("messaging.kafka.partition", 0),
                ],
            );
            at += 3.0;
            let wait = rng.between(1500.0, 5000.0);
            let c = t.add(
                Some(p),
                &owner,
                &owner_host,
                &format!("{topic} receive"),
                span::SpanKind::Consumer,
                at + wait,
                at + wait,
                vec![
                    ks("messaging.system", "kafka"),
                    ks("messaging.destination", &topic),
                ],
            );
            // The consumer's own work, a child of the consumer span.
            let d = rng.latency(15.0);
            t.add(
                Some(c),
                &owner,
                &owner_host,
                "process order",
                span::SpanKind::Internal,
                at + wait,
                at + wait + d,
                vec![],
            );
            at += wait + d;
            culprit = c;
            culprit_service = owner.clone();
            // The Collector's kafkametrics receiver: lag and lag_sum only, growing.
            let base = rng.between(2000.0, 4000.0);
            let step = rng.between(600.0, 1500.0);
            let group = format!("{owner}-consumers");
            let mut pts = Vec::new();
            for i in 0..5u64 {
                let tm = (t0_ns + i * 20_000_000_000).saturating_sub(90_000_000_000);
                pts.push(gauge(
                    "kafka.consumer_group.lag_sum",
                    vec![ks("group", &group), ks("topic", &topic)],
                    tm,
                    base + step * i as f64,
                ));
            }
            metrics.push(resource_metrics(vec![ks("service.name", "otelcol")], pts));
        }
        "stock_redis_miss" | "concurrent_cache_tls" => {
            // @opentelemetry/instrumentation-ioredis: no cache.hit; keys masked.
            let o = srv;
            let get = |t: &mut Trace, a: f64, b: f64, stmt: &str, name: &str| {
                t.add(
                    Some(o),
                    &front,
                    &front_host,
                    name,
                    span::SpanKind::Client,
                    a,
                    b,
                    vec![
                        ks("db.system", "redis"),
                        ks("db.statement", stmt),
                        ks("net.peer.name", "cache-1"),
                        ki("db.redis.database_index", 0),
                    ],
                )
            };
            get(&mut t, at, at + 0.7, "GET ?", "get");
            let d = rng.between(400.0, 1500.0);
            let q = t.add(
                Some(o),
                &front,
                &front_host,
                "pg.query:SELECT shop",
                span::SpanKind::Client,
                at + 1.0,
                at + 1.0 + d,
                vec![
                    ks("db.system", "postgresql"),
                    ks("db.statement", "SELECT * FROM items WHERE id = $1"),
                ],
            );
            get(&mut t, at + 1.5 + d, at + 2.0 + d, "SET ? ? ? ?", "set");
            at += d + 2.2;
            culprit = q;
            culprit_service = front.clone();
            if cause == "concurrent_cache_tls" {
                // A smaller second fault: a slow TLS handshake on another call.
                let tls = rng.between(0.25, 0.4) * d;
                let c = t.add(
                    Some(srv),
                    &front,
                    &front_host,
                    &format!("POST {owner}"),
                    span::SpanKind::Client,
                    at,
                    at + tls + 20.0,
                    vec![ks("server.address", &owner)],
                );
                t.add(
                    Some(c),
                    &front,
                    &front_host,
                    "http.tls",
                    span::SpanKind::Internal,
                    at + 2.0,
                    at + 2.0 + tls,
                    vec![ks("server.address", &owner)],
                );
                t.add(
                    Some(c),
                    &owner,
                    &owner_host,
                    "POST /work",
                    span::SpanKind::Server,
                    at + 4.0 + tls,
                    at + tls + 15.0,
                    vec![],
                );
                at += tls + 20.0;
            }
        }
        "compute_before_call" => {
            // The handler computes for a while, then queries: not waiting.
            let s = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("GET {owner}"),
                span::SpanKind::Client,
                at,
                at,
                vec![ks("server.address", &owner)],
            );
            let work = rng.between(800.0, 2000.0);
            let o = t.add(
                Some(s),
                &owner,
                &owner_host,
                "GET /compute",
                span::SpanKind::Server,
                at + 0.5,
                at + 0.5,
                vec![],
            );
            let d = rng.latency(4.0);
            t.add(
                Some(o),
                &owner,
                &owner_host,
                "SELECT items",
                span::SpanKind::Client,
                at + 0.5 + work,
                at + 0.5 + work + d,
                vec![
                    ks("db.system", "postgresql"),
                    ks("db.operation.name", "SELECT"),
                ],
            );
            let end = at + 0.5 + work + d + 1.0;
            if let Some(x) = t.get(o) {
                x.end_time_unix_nano = t_ns(end);
            }
            if let Some(x) = t.get(s) {
                x.end_time_unix_nano = t_ns(end + 0.5);
            }
            at = end + 0.5;
            culprit = o;
            culprit_service = owner.clone();
        }
        "no_host_name_cpu" | "late_metrics_cpu" => {
            let node = format!("node-{}", rng.range(10, 99));
            let host = if cause == "no_host_name_cpu" {
                t.k8s = true;
                node.clone()
            } else {
                owner_host.clone()
            };
            let d = rng.between(300.0, 1500.0);
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("GET {owner}"),
                span::SpanKind::Client,
                at,
                at + d + 2.0,
                vec![ks("server.address", &owner)],
            );
            let sv = t.add(
                Some(c),
                &owner,
                &host,
                "GET /compute",
                span::SpanKind::Server,
                at + 1.0,
                at + d + 1.0,
                vec![],
            );
            at += d + 2.0;
            culprit = sv;
            culprit_service = owner.clone();
            let tm = t0_ns + 5_000_000_000;
            metrics.push(host_metrics(
                &host,
                tm,
                rng.between(0.0, 0.06),
                0.01,
                0.5,
                0.1,
            ));
        }
        "gateway_504_backend_ok" => {
            // The gateway gave up after its timeout; the backend finished later with 200.
            gw_status = 504;
            let timeout = *rng.pick(&[1000.0, 2000.0]);
            let c = t.add(
                Some(srv),
                &front,
                &front_host,
                &format!("POST {owner}"),
                span::SpanKind::Client,
                at,
                at + timeout + 400.0,
                vec![
                    ks("server.address", &owner),
                    ki("http.response.status_code", 200),
                ],
            );
            let sv = t.add(
                Some(c),
                &owner,
                &owner_host,
                "POST /work",
                span::SpanKind::Server,
                at + 1.0,
                at + timeout + 399.0,
                vec![ki("http.response.status_code", 200)],
            );
            gw_extra.push(gateway_log(
                &route,
                &tid,
                t_ns(at + timeout),
                504,
                at + timeout,
                &front,
                vec![],
            ));
            at += timeout + 400.0;
            culprit = sv;
            culprit_service = owner.clone();
        }
        _ => {}
    }
    // Confounders any trace may carry, healthy or not: a cache miss served
    // fast, a call re-sent once, a publish to a topic whose consumers keep up.
    if rng.f() < 0.3 {
        let c0 = at;
        t.add(
            Some(srv),
            &front,
            &front_host,
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
            &front,
            &front_host,
            "SELECT profile",
            span::SpanKind::Client,
            c0 + 0.8,
            c0 + 0.8 + d,
            vec![
                ks("db.system", "postgresql"),
                ks("db.operation.name", "SELECT"),
            ],
        );
        at = c0 + 0.8 + d + rng.latency(0.3);
    }
    if rng.f() < 0.2 {
        let callee = *rng.pick(&SERVICES);
        let d = rng.latency(6.0);
        t.add(
            Some(srv),
            &front,
            &front_host,
            &format!("GET {callee}"),
            span::SpanKind::Client,
            at,
            at + d,
            vec![
                ks("server.address", callee),
                ki("http.request.resend_count", 1),
            ],
        );
        at += d + rng.latency(0.3);
    }
    if rng.f() < 0.2 {
        let topic = "audit-events";
        t.add(
            Some(srv),
            &front,
            &front_host,
            &format!("{topic} publish"),
            span::SpanKind::Producer,
            at,
            at + 1.5,
            vec![
                ks("messaging.system", "kafka"),
                ks("messaging.destination.name", topic),
            ],
        );
        at += 1.5;
        let tm = t0_ns.saturating_sub(rng.range(0, 30) * 1_000_000_000);
        metrics.push(kafka_metrics(
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
    // Normal work after the fault, then the responses.
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
    let culprit_span_id = culprit;
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
        culprit_span_id,
        culprit_service,
        route,
        spans: t.finish(),
        logs,
        metrics,
    }
}

pub mod send;

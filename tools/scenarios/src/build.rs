//! What every scenario is built from: attributes, a trace built span by
//! span, normal calls, gateway records, host and Kafka metrics, and the
//! context a cause's builder is handed.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, span::Event, ResourceSpans, ScopeSpans, Span, Status,
};
use std::collections::BTreeMap;

use crate::rng::Rng;

pub(crate) fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}
pub(crate) fn ks(k: &str, v: &str) -> KeyValue {
    kv(k, any_value::Value::StringValue(v.into()))
}
pub(crate) fn ki(k: &str, v: i64) -> KeyValue {
    kv(k, any_value::Value::IntValue(v))
}
pub(crate) fn kb(k: &str, v: bool) -> KeyValue {
    kv(k, any_value::Value::BoolValue(v))
}

/// Builds a trace span by span.
pub(crate) struct Trace {
    pub(crate) tid: [u8; 16],
    pub(crate) next: u64,
    pub(crate) t0: u64,
    pub(crate) spans: Vec<(String, String, Span)>,
    /// Resources as a Kubernetes pod reports them: no `host.name`, the pod
    /// and (from a k8sattributes-style enrichment) its node.
    pub(crate) k8s: bool,
}

impl Trace {
    pub(crate) fn new(tid: [u8; 16], t0: u64) -> Self {
        Trace {
            tid,
            next: 1,
            t0,
            spans: Vec::new(),
            k8s: false,
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn add(
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

    pub(crate) fn get(&mut self, id: [u8; 8]) -> Option<&mut Span> {
        self.spans
            .iter_mut()
            .map(|x| &mut x.2)
            .find(|s| s.span_id == id)
    }

    pub(crate) fn fail(&mut self, id: [u8; 8], message: &str, exception: Option<(&str, &str)>) {
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

    pub(crate) fn finish(self) -> Vec<ResourceSpans> {
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
pub(crate) fn normal_call(
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

pub(crate) const SERVICES: [&str; 8] = [
    "catalog",
    "pricing",
    "inventory",
    "users",
    "search",
    "reviews",
    "shipping",
    "tax",
];

pub(crate) fn gateway_log(
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

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub(crate) fn gauge(name: &str, attrs: Vec<KeyValue>, t_ns: u64, v: f64) -> Metric {
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

pub(crate) fn resource_metrics(resource: Vec<KeyValue>, metrics: Vec<Metric>) -> ResourceMetrics {
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
pub(crate) fn kafka_metrics(
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

/// What a cause's builder works on: the trace so far (an edge gateway span,
/// its egress and the frontend's server span, with normal work before the
/// fault), and what the builder sets: the culprit, the gateway's answer and
/// records, the evidence metrics, the time the frontend has reached (ms).
pub(crate) struct Ctx<'r> {
    /// The case's random numbers.
    pub(crate) rng: &'r mut Rng,
    /// The generator kind.
    pub(crate) cause: &'static str,
    /// The case number.
    pub(crate) n: u64,
    /// The trace's start (ns).
    pub(crate) t0_ns: u64,
    /// Trace id.
    pub(crate) tid: [u8; 16],
    /// Route.
    pub(crate) route: String,
    /// The trace being built.
    pub(crate) t: Trace,
    /// The frontend service.
    pub(crate) front: String,
    /// The frontend's host.
    pub(crate) front_host: String,
    /// The service the fault belongs to (`<kind>-svc`).
    pub(crate) owner: String,
    /// The owner's host.
    pub(crate) owner_host: String,
    /// The edge gateway's server span.
    pub(crate) root: [u8; 8],
    /// The frontend's server span.
    pub(crate) srv: [u8; 8],
    /// Where the frontend is (ms from the start).
    pub(crate) at: f64,
    /// The span the fault is in.
    pub(crate) culprit: [u8; 8],
    /// Its service.
    pub(crate) culprit_service: String,
    /// The gateway's answer.
    pub(crate) gw_status: i64,
    /// Gateway records besides the final one.
    pub(crate) gw_extra: Vec<LogRecord>,
    /// Application logs.
    pub(crate) logs: Vec<ResourceLogs>,
    /// Evidence metrics.
    pub(crate) metrics: Vec<ResourceMetrics>,
}

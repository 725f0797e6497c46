//! The correlation state: a time window, in bounded memory, of
//! - log records (gateway and application) indexed by `trace_id`;
//! - per-route window statistics from gateway logs;
//! - metric series that join to traces: by Kafka topic / consumer group,
//!   by `host.name`, by `route_id`.
//!
//! Arrival order does not matter within the window: everything is kept by
//! its own time and looked up when a trace is analysed.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::ResourceLogs;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, ResourceMetrics};
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::tail_sampling::sketch::Sketch;

/// Limits of the store.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long evidence is kept (ns).
    pub window_ns: u64,
    /// Log records kept at most (oldest evicted first).
    pub max_log_records: usize,
    /// Bytes of log records kept at most (body + 256 bytes each; oldest evicted first).
    pub max_log_bytes: usize,
    /// Analysed trace ids remembered, so that their late spans are not analysed again.
    pub max_analysed: usize,
    /// Metric series kept at most (least recently updated evicted first).
    pub max_series: usize,
    /// Points per series.
    pub max_points: usize,
    /// Routes with statistics at most.
    pub max_routes: usize,
    /// RCA events waiting to be emitted at most (oldest dropped and counted).
    pub max_events: usize,
    /// The window a latency baseline covers (ns).
    pub baseline_window_ns: u64,
    /// Samples an operation needs before its baseline is used.
    pub baseline_min_samples: u64,
    /// Operations with a baseline at most.
    pub baseline_max_operations: usize,
}

/// One log record, as evidence.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogEvidence {
    /// Record time (ns).
    pub time_ns: u64,
    /// From a gateway (it carries gateway fields) rather than an application.
    pub gateway: bool,
    /// `service.name` of the resource.
    pub service: String,
    /// Route.
    pub route: Option<String>,
    /// HTTP status.
    pub status: Option<i64>,
    /// Rate-limit rule that answered.
    pub rate_limit_rule: Option<String>,
    /// Circuit-breaker state (CLOSED, OPEN, HALF_OPEN).
    pub circuit_state: Option<String>,
    /// Envoy response flags (UT, UF, UO, UH, URX, RL, ...).
    pub response_flags: Option<String>,
    /// Upstream (`server.address`).
    pub upstream: Option<String>,
    /// Request duration at the gateway (ms).
    pub duration_ms: Option<f64>,
    /// Severity number.
    pub severity: i32,
    /// `error.type` / `exception.type`.
    pub error_type: Option<String>,
    /// The body, cut to 512 bytes.
    pub body: String,
}

/// Ten-second buckets of a route's gateway traffic.
#[derive(Debug, Clone, Default)]
struct Bucket {
    start_s: u64,
    requests: u64,
    s4xx: u64,
    s5xx: u64,
    s429: u64,
    s503: u64,
    s504: u64,
    not_closed: u64,
    rules: BTreeMap<String, u64>,
    latency: Sketch,
}

#[derive(Debug, Clone, Default)]
struct RouteWindow {
    buckets: VecDeque<Bucket>,
    circuit_state: Option<String>,
    circuit_changes: u64,
}

/// A route's statistics over the window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RouteStats {
    /// Requests.
    pub requests: u64,
    /// 4xx answers.
    pub s4xx: u64,
    /// 5xx answers.
    pub s5xx: u64,
    /// 429 answers.
    pub s429: u64,
    /// 503 answers.
    pub s503: u64,
    /// 504 answers.
    pub s504: u64,
    /// Records whose circuit state was not CLOSED.
    pub not_closed: u64,
    /// The most frequent rate-limit rule.
    pub top_rule: Option<String>,
    /// Latest circuit state.
    pub circuit_state: Option<String>,
    /// Circuit state changes seen.
    pub circuit_changes: u64,
    /// Median latency (ms).
    pub p50_ms: Option<f64>,
    /// 99th percentile latency (ms).
    pub p99_ms: Option<f64>,
}

/// What joins a metric series to traces.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Dims {
    /// Kafka topic (`topic`, `messaging.destination.name`).
    pub topic: Option<String>,
    /// Consumer group (`group`, `messaging.consumer.group.name`).
    pub group: Option<String>,
    /// `host.name` (resource).
    pub host: Option<String>,
    /// `route_id` / `http.route`.
    pub route: Option<String>,
    /// Scrape job (`service.name`) of a dependency's series (see [`super::deps`]).
    pub job: Option<String>,
    /// Scrape instance (`service.instance.id`) of a dependency's series.
    pub instance: Option<String>,
    /// RabbitMQ queue (`rabbitmq.queue.name` on the resource; its vhost is
    /// the `rabbitmq.vhost.name` attribute; see [`super::rabbit`]).
    pub queue: Option<String>,
}

/// A metric series.
#[derive(Debug, Clone)]
pub struct Series {
    /// Metric name.
    pub name: String,
    /// Join dimensions.
    pub dims: Dims,
    /// Other attributes (`cpu.mode`, `status`, `device`, ...), sorted.
    pub attrs: Vec<(String, String)>,
    /// (time ns, value), oldest first.
    pub points: VecDeque<(u64, f64)>,
    updated: u64,
}

impl Series {
    /// An empty series.
    pub fn new(name: &str, dims: Dims) -> Self {
        Series {
            name: name.to_string(),
            dims,
            attrs: Vec::new(),
            points: VecDeque::new(),
            updated: 0,
        }
    }

    /// An attribute.
    pub fn attr(&self, k: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    /// The largest value with a time in `[from, to]`, and its time.
    pub fn max_in(&self, from: u64, to: u64) -> Option<(u64, f64)> {
        self.points
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .copied()
            .fold(None, |acc: Option<(u64, f64)>, p| match acc {
                Some(a) if a.1 >= p.1 => Some(a),
                _ => Some(p),
            })
    }

    /// Rate per second between the first and last points in `[from, to]` (counters).
    pub fn rate_in(&self, from: u64, to: u64) -> Option<f64> {
        let mut it = self.points.iter().filter(|(t, _)| *t >= from && *t <= to);
        let first = it.next()?;
        let last = it.next_back()?;
        let dt = (last.0.saturating_sub(first.0)) as f64 / 1e9;
        (dt > 0.0).then(|| (last.1 - first.1).max(0.0) / dt)
    }
}

/// What counts as trouble for signal-aware sampling.
#[derive(Debug, Clone)]
pub struct Trouble {
    /// Gateway statuses.
    pub statuses: Vec<i64>,
    /// Share of a route's requests answered with `statuses`.
    pub route_error_ratio: f64,
    /// CPU busy share.
    pub cpu_busy: f64,
    /// iowait share.
    pub iowait: f64,
    /// Memory used share.
    pub memory_used: f64,
}

/// One analysed trace, for the RCA log record and counter.
#[derive(Debug, Clone, PartialEq)]
pub struct RcaEvent {
    /// When (ns).
    pub time_ns: u64,
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Root span id.
    pub span_id: [u8; 8],
    /// Cause.
    pub cause: String,
    /// Summary sentence.
    pub summary: String,
    /// Route.
    pub route: String,
    /// Culprit service.
    pub service: String,
    /// Culprit span id (hex).
    pub culprit_span_id: String,
    /// Confidence.
    pub confidence: f64,
    /// Rule name.
    pub rule: String,
}

/// The latest point of a series: name, join dimensions, other attributes, time (ns), value.
pub type LatestPoint = (String, Dims, Vec<(String, String)>, u64, f64);

/// A point as the store takes it in: (series name, attributes, time, value, flags).
type PointIn<'a> = (std::borrow::Cow<'a, str>, &'a [KeyValue], u64, f64, u32);

/// A point built here (a summary's quantile, with its `quantile` attribute).
type OwnedPointIn = (String, Vec<KeyValue>, u64, f64, u32);

/// Metric name, join dimensions, other attributes.
type SeriesKey = (String, Dims, Vec<(String, String)>);

#[derive(Default)]
struct Inner {
    logs: HashMap<[u8; 16], Vec<Arc<LogEvidence>>>,
    log_order: VecDeque<(u64, [u8; 16])>,
    log_count: usize,
    routes: HashMap<String, RouteWindow>,
    series: HashMap<SeriesKey, Series>,
    events: VecDeque<RcaEvent>,
    /// Analysed traces of the window, with the time they were analysed (for alert rules).
    recent: VecDeque<(u64, RcaEvent)>,
    counts: BTreeMap<(String, String, String), u64>,
    counts_changed: bool,
    evicted_logs: u64,
    evicted_logs_bytes: u64,
    log_bytes: usize,
    dropped_events: u64,
    clock: u64,
    /// Entry route → gateway route id, learned from traces that had both.
    learned_routes: HashMap<String, String>,
    /// Traces analysed (or held for evidence), with when: late spans of them
    /// are not analysed again.
    analysed: HashMap<[u8; 16], u64>,
    analysed_order: VecDeque<(u64, [u8; 16])>,
    late_spans: u64,
    /// Producer spans of analysed traces (trace id, span id), each as a
    /// one-span resource: a consumer span that arrives after its trace was
    /// analysed is measured from the span that produced its message.
    producers: HashMap<([u8; 16], u64), (u64, Arc<ResourceSpans>)>,
    producer_order: VecDeque<(u64, ([u8; 16], u64))>,
}

/// The memory a log record is counted at: its body plus a fixed overhead.
fn log_cost(ev: &LogEvidence) -> usize {
    256 + ev.body.len()
}

/// The shared correlation state.
pub struct Store {
    limits: Limits,
    /// Per-operation latency baselines.
    pub baselines: super::baseline::Baselines,
    inner: Mutex<Inner>,
    log_events_owner: AtomicBool,
    metric_events_owner: AtomicBool,
    /// The last analysed traces as the page shows them: (capacity, ring).
    views: Mutex<(usize, VecDeque<Arc<super::ui::TraceView>>)>,
    ui_owner: AtomicBool,
}

/// One ten-second bucket of a route's gateway traffic, for a chart.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BucketPoint {
    /// Bucket start (s since the epoch).
    pub t: u64,
    /// Requests.
    pub requests: u64,
    /// 4xx answers.
    pub s4xx: u64,
    /// 5xx answers.
    pub s5xx: u64,
    /// 429 answers.
    pub s429: u64,
    /// Median latency (ms).
    pub p50_ms: Option<f64>,
    /// 99th percentile (ms).
    pub p99_ms: Option<f64>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("limits", &self.limits)
            .finish()
    }
}

/// An attribute value as text (numbers and booleans printed).
pub(crate) fn s(v: &Option<AnyValue>) -> Option<String> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(x) => Some(x.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn num(v: &Option<AnyValue>) -> Option<f64> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::IntValue(i) => Some(*i as f64),
        any_value::Value::DoubleValue(d) => Some(*d),
        any_value::Value::StringValue(x) => x.parse().ok(),
        _ => None,
    }
}

/// The value of the first of `keys` present in `attrs`.
pub(crate) fn find<'a>(attrs: &'a [KeyValue], keys: &[&str]) -> Option<&'a Option<AnyValue>> {
    keys.iter()
        .find_map(|k| attrs.iter().find(|kv| kv.key == *k).map(|kv| &kv.value))
}

/// Resource attributes that name the machine a resource ran on, in order of
/// preference, for the join with host metrics. `k8s.node.name` comes first:
/// a pod enriched by a k8sattributes-style processor names its node, which
/// is what node-level metrics carry; `host.name` inside a pod is the pod's
/// name. Without any of them, `k8s.pod.name` and `service.instance.id` still
/// join metrics reported per pod or per instance.
pub const HOST_KEYS: [&str; 5] = [
    "k8s.node.name",
    "host.name",
    "host.id",
    "k8s.pod.name",
    "service.instance.id",
];

/// The host a resource ran on (see [`HOST_KEYS`]).
pub(crate) fn host_key(resource_attrs: &[KeyValue]) -> Option<String> {
    HOST_KEYS.iter().find_map(|k| {
        find(resource_attrs, &[k])
            .and_then(s)
            .filter(|v| !v.is_empty())
    })
}

/// Route keys, in order of preference.
pub const ROUTE_KEYS: [&str; 3] = ["route_id", "http.route", "gateway.route_id"];

impl Store {
    /// An empty store.
    pub fn new(limits: Limits) -> Self {
        Store {
            baselines: super::baseline::Baselines::new(
                limits.baseline_window_ns,
                limits.baseline_max_operations,
                limits.baseline_min_samples,
            ),
            limits,
            inner: Mutex::new(Inner::default()),
            log_events_owner: AtomicBool::new(false),
            metric_events_owner: AtomicBool::new(false),
            views: Mutex::new((0, VecDeque::new())),
            ui_owner: AtomicBool::new(false),
        }
    }

    /// Claim the page's API for this state (the first instance does).
    pub fn claim_ui(&self) -> bool {
        !self.ui_owner.swap(true, Ordering::SeqCst)
    }

    fn views(&self) -> std::sync::MutexGuard<'_, (usize, VecDeque<Arc<super::ui::TraceView>>)> {
        match self.views.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Keep the last `n` analysed traces for the page (0: none).
    pub fn keep_views(&self, n: usize) {
        let mut g = self.views();
        g.0 = g.0.max(n);
    }

    /// Whether analysed traces are kept for the page.
    pub fn keeps_views(&self) -> bool {
        self.views().0 > 0
    }

    /// Keep an analysed trace for the page (the oldest leaves beyond the capacity).
    pub fn push_view(&self, v: super::ui::TraceView) {
        let mut g = self.views();
        if g.0 == 0 {
            return;
        }
        g.1.push_back(Arc::new(v));
        while g.1.len() > g.0 {
            g.1.pop_front();
        }
    }

    /// The kept analysed traces, oldest first.
    pub fn trace_views(&self) -> Vec<Arc<super::ui::TraceView>> {
        self.views().1.iter().cloned().collect()
    }

    /// Every route with traffic in the `window_ns` ending at `now_ns`: its
    /// statistics and its ten-second buckets.
    pub fn routes_detail(
        &self,
        now_ns: u64,
        window_ns: u64,
    ) -> Vec<(String, RouteStats, Vec<BucketPoint>)> {
        let g = self.lock();
        let from_s = now_ns.saturating_sub(window_ns) / 1_000_000_000;
        routes_since(&g, from_s)
            .map(|(r, w)| {
                let points = w
                    .buckets
                    .iter()
                    .filter(|b| b.start_s + 10 >= from_s)
                    .map(|b| BucketPoint {
                        t: b.start_s,
                        requests: b.requests,
                        s4xx: b.s4xx,
                        s5xx: b.s5xx,
                        s429: b.s429,
                        p50_ms: b.latency.quantile(0.5),
                        p99_ms: b.latency.quantile(0.99),
                    })
                    .collect();
                (r.clone(), stats_over(w, now_ns, window_ns), points)
            })
            .collect()
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        match self.inner.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Claim the emission of RCA log records (the first logs pipeline does).
    pub fn claim_log_events(&self) -> bool {
        !self.log_events_owner.swap(true, Ordering::SeqCst)
    }

    /// Claim the emission of the RCA counter (the first metrics pipeline does).
    pub fn claim_metric_events(&self) -> bool {
        !self.metric_events_owner.swap(true, Ordering::SeqCst)
    }

    /// Take in log records. Records without a trace id still feed route statistics.
    pub fn add_logs(&self, resource_logs: &[ResourceLogs], now_ns: u64) {
        let mut g = self.lock();
        g.clock = g.clock.max(now_ns);
        for rl in resource_logs {
            let res_attrs = rl
                .resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or(&[]);
            let service = find(res_attrs, &["service.name"])
                .and_then(s)
                .unwrap_or_default();
            for sl in &rl.scope_logs {
                for r in &sl.log_records {
                    let a = &r.attributes;
                    let status = find(a, &["http.response.status_code", "status_code", "status"])
                        .and_then(num)
                        .map(|x| x as i64);
                    let rate_limit_rule =
                        find(a, &["gateway.rate_limit_rule", "rate_limit_rule"]).and_then(s);
                    let circuit_state =
                        find(a, &["gateway.circuit_state", "circuit_state"]).and_then(s);
                    let response_flags =
                        find(a, &["gateway.response_flags", "response_flags"]).and_then(s);
                    let duration_ms = find(a, &["http.server.request.duration"])
                        .and_then(num)
                        .map(|sec| sec * 1000.0)
                        .or_else(|| find(a, &["duration_ms"]).and_then(num));
                    let gateway = rate_limit_rule.is_some()
                        || circuit_state.is_some()
                        || response_flags.is_some()
                        || (status.is_some() && find(a, &ROUTE_KEYS).is_some());
                    let time_ns = if r.time_unix_nano > 0 {
                        r.time_unix_nano
                    } else if r.observed_time_unix_nano > 0 {
                        r.observed_time_unix_nano
                    } else {
                        now_ns
                    };
                    let body = r
                        .body
                        .as_ref()
                        .and_then(|b| s(&Some(b.clone())))
                        .unwrap_or_default();
                    let mut body = body;
                    if body.len() > 512 {
                        let mut cut = 512;
                        while !body.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        body.truncate(cut);
                    }
                    let ev = LogEvidence {
                        time_ns,
                        gateway,
                        service: service.clone(),
                        route: find(a, &ROUTE_KEYS).and_then(s),
                        status,
                        rate_limit_rule: rate_limit_rule.filter(|x| !x.is_empty() && x != "-"),
                        circuit_state,
                        response_flags: response_flags.filter(|x| !x.is_empty() && x != "-"),
                        upstream: find(a, &["server.address", "upstream"]).and_then(s),
                        duration_ms,
                        severity: r.severity_number,
                        error_type: find(a, &["error.type", "exception.type"]).and_then(s),
                        body,
                    };
                    if ev.gateway {
                        if let Some(route) = ev.route.clone() {
                            add_route(&mut g, &self.limits, &route, &ev);
                        }
                    }
                    if r.trace_id.len() == 16 && r.trace_id.iter().any(|b| *b != 0) {
                        let mut tid = [0u8; 16];
                        tid.copy_from_slice(&r.trace_id);
                        g.log_bytes += log_cost(&ev);
                        g.logs.entry(tid).or_default().push(Arc::new(ev));
                        g.log_order.push_back((now_ns, tid));
                        g.log_count += 1;
                    }
                }
            }
        }
        self.evict_logs(&mut g, now_ns);
    }

    fn evict_logs(&self, g: &mut Inner, now_ns: u64) {
        let horizon = now_ns.saturating_sub(self.limits.window_ns);
        while let Some(&(t, tid)) = g.log_order.front() {
            let over_count = g.log_count > self.limits.max_log_records;
            let over_bytes = g.log_bytes > self.limits.max_log_bytes;
            if t >= horizon && !over_count && !over_bytes {
                break;
            }
            g.log_order.pop_front();
            let mut freed = None;
            if let Some(v) = g.logs.get_mut(&tid) {
                if !v.is_empty() {
                    freed = Some(log_cost(&v.remove(0)));
                }
                if v.is_empty() {
                    g.logs.remove(&tid);
                }
            }
            if let Some(cost) = freed {
                g.log_count -= 1;
                g.log_bytes = g.log_bytes.saturating_sub(cost);
                // Evicted before the window ended: counted, by what forced it.
                if t >= horizon {
                    if over_count {
                        g.evicted_logs += 1;
                    } else {
                        g.evicted_logs_bytes += 1;
                    }
                }
            }
        }
    }

    /// Take in metric points that join to traces (a topic, group, host or route).
    pub fn add_metrics(&self, resource_metrics: &[ResourceMetrics], now_ns: u64) {
        let mut g = self.lock();
        g.clock = g.clock.max(now_ns);
        for rm in resource_metrics {
            let res_attrs = rm
                .resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or(&[]);
            let host = host_key(res_attrs);
            // Only `service.instance.id` names it (a scraped target, say):
            // its series join by host only if they are host metrics.
            let host_by_instance_only = HOST_KEYS[..HOST_KEYS.len() - 1].iter().all(|k| {
                find(res_attrs, &[k])
                    .and_then(s)
                    .is_none_or(|v| v.is_empty())
            });
            let job = find(res_attrs, &["service.name"]).and_then(s);
            let queue = find(res_attrs, &["rabbitmq.queue.name"]).and_then(s);
            let vhost = find(res_attrs, &[super::rabbit::VHOST]).and_then(s);
            let instance = find(res_attrs, &["service.instance.id"]).and_then(s);
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    let system = super::deps::system_of(&m.name);
                    // (name, attributes, time, value, flags)
                    let mut points: Vec<PointIn<'_>> = Vec::new();
                    let mut owned: Vec<OwnedPointIn> = Vec::new();
                    let number =
                        |p: &'_ opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| match p
                            .value
                        {
                            Some(number_data_point::Value::AsDouble(d)) => Some(d),
                            Some(number_data_point::Value::AsInt(i)) => Some(i as f64),
                            None => None,
                        };
                    match &m.data {
                        Some(metric::Data::Gauge(x)) => x.data_points.iter().for_each(|p| {
                            if let Some(v) = number(p) {
                                points.push((
                                    m.name.as_str().into(),
                                    &p.attributes,
                                    p.time_unix_nano,
                                    v,
                                    p.flags,
                                ));
                            }
                        }),
                        Some(metric::Data::Sum(x)) => x.data_points.iter().for_each(|p| {
                            if let Some(v) = number(p) {
                                points.push((
                                    m.name.as_str().into(),
                                    &p.attributes,
                                    p.time_unix_nano,
                                    v,
                                    p.flags,
                                ));
                            }
                        }),
                        // A dependency's histogram: its sum and count, for a mean over an interval.
                        Some(metric::Data::Histogram(x)) if system.is_some() => {
                            for p in &x.data_points {
                                let t = p.time_unix_nano;
                                points.push((
                                    format!("{}_sum", m.name).into(),
                                    &p.attributes,
                                    t,
                                    p.sum.unwrap_or(0.0),
                                    p.flags,
                                ));
                                points.push((
                                    format!("{}_count", m.name).into(),
                                    &p.attributes,
                                    t,
                                    p.count as f64,
                                    p.flags,
                                ));
                            }
                        }
                        // A dependency's summary (redis_exporter's latency
                        // percentiles): each quantile as a point.
                        Some(metric::Data::Summary(x)) if system.is_some() => {
                            for p in &x.data_points {
                                for q in &p.quantile_values {
                                    let mut a = p.attributes.clone();
                                    a.push(KeyValue {
                                        key: "quantile".into(),
                                        value: Some(AnyValue {
                                            value: Some(any_value::Value::StringValue(format!(
                                                "{}",
                                                q.quantile
                                            ))),
                                        }),
                                        ..Default::default()
                                    });
                                    owned.push((
                                        m.name.clone(),
                                        a,
                                        p.time_unix_nano,
                                        q.value,
                                        p.flags,
                                    ));
                                }
                            }
                        }
                        _ => continue,
                    }
                    for (name, a, time, v, flags) in owned
                        .iter()
                        .map(|(n, a, t, v, f)| (n.as_str().into(), a.as_slice(), *t, *v, *f))
                        .chain(points)
                    {
                        // A staleness marker (no recorded value) is not a value.
                        if flags & 1 != 0 || v.is_nan() {
                            continue;
                        }
                        let rabbit = queue.is_some() && name.starts_with("rabbitmq.");
                        let dims = match system {
                            _ if rabbit => Dims {
                                queue: queue.clone(),
                                ..Default::default()
                            },
                            // GPUs describe a machine: joined by host, as host metrics are.
                            Some("gpu") => Dims {
                                host: find(a, &["Hostname"]).and_then(s).or_else(|| host.clone()),
                                ..Default::default()
                            },
                            Some(_) => Dims {
                                job: job.clone(),
                                instance: instance.clone(),
                                ..Default::default()
                            },
                            None => Dims {
                                topic: find(a, &["topic", "messaging.destination.name"])
                                    .and_then(s),
                                group: find(
                                    a,
                                    &[
                                        "group",
                                        "messaging.consumer.group.name",
                                        "messaging.kafka.consumer.group",
                                    ],
                                )
                                .and_then(s),
                                host: host.clone().filter(|_| {
                                    !host_by_instance_only || name.starts_with("system.")
                                }),
                                route: find(a, &ROUTE_KEYS).and_then(s),
                                ..Default::default()
                            },
                        };
                        if dims == Dims::default() {
                            continue;
                        }
                        let mut attrs: Vec<(String, String)> = a
                            .iter()
                            .filter(|kv| {
                                !matches!(
                                    kv.key.as_str(),
                                    "topic"
                                        | "group"
                                        | "messaging.destination.name"
                                        | "route_id"
                                        | "http.route"
                                )
                            })
                            .filter_map(|kv| s(&kv.value).map(|v| (kv.key.clone(), v)))
                            .collect();
                        if rabbit {
                            attrs.push((
                                super::rabbit::VHOST.to_string(),
                                vhost.clone().unwrap_or_else(|| "/".into()),
                            ));
                        }
                        attrs.sort();
                        let t = if time > 0 { time } else { now_ns };
                        let key = (name.to_string(), dims.clone(), attrs.clone());
                        let max_points = self.limits.max_points;
                        let series = g.series.entry(key).or_insert_with(|| Series {
                            name: name.to_string(),
                            dims,
                            attrs,
                            points: VecDeque::new(),
                            updated: now_ns,
                        });
                        series.points.push_back((t, v));
                        series.updated = now_ns;
                        while series.points.len() > max_points {
                            series.points.pop_front();
                        }
                    }
                }
            }
        }
        let horizon = now_ns.saturating_sub(self.limits.window_ns);
        g.series.retain(|_, s| s.updated >= horizon);
        if g.series.len() > self.limits.max_series {
            let mut ages: Vec<u64> = g.series.values().map(|s| s.updated).collect();
            ages.sort_unstable();
            let cut = ages[g.series.len() - self.limits.max_series];
            g.series.retain(|_, s| s.updated > cut);
        }
    }

    /// The log records of a trace.
    pub fn logs_of(&self, trace_id: &[u8; 16]) -> Vec<Arc<LogEvidence>> {
        self.lock().logs.get(trace_id).cloned().unwrap_or_default()
    }

    /// Whether any log record of the trace is known.
    pub fn has_logs(&self, trace_id: &[u8; 16]) -> bool {
        self.lock().logs.contains_key(trace_id)
    }

    /// A route's statistics over the window ending at `now_ns`.
    pub fn route_stats(&self, route: &str, now_ns: u64) -> Option<RouteStats> {
        let g = self.lock();
        let w = g.routes.get(route)?;
        Some(stats_over(w, now_ns, self.limits.window_ns))
    }

    /// Every route's statistics over the `window_ns` ending at `now_ns`
    /// (10-second buckets: a bucket counts when any of it is in the window).
    pub fn routes_over(&self, now_ns: u64, window_ns: u64) -> Vec<(String, RouteStats)> {
        let g = self.lock();
        let from_s = now_ns.saturating_sub(window_ns) / 1_000_000_000;
        routes_since(&g, from_s)
            .map(|(r, w)| (r.clone(), stats_over(w, now_ns, window_ns)))
            .collect()
    }

    /// Visit the traces analysed since `since_ns` (analysis time), oldest
    /// first, without copying them (the state is locked meanwhile: keep `f` short).
    pub fn visit_rca(&self, since_ns: u64, mut f: impl FnMut(u64, &RcaEvent)) {
        let g = self.lock();
        for (t, e) in g.recent.iter().filter(|(t, _)| *t >= since_ns) {
            f(*t, e);
        }
    }

    /// Traces analysed since `since_ns` (analysis time), oldest first.
    pub fn recent_rca(&self, since_ns: u64) -> Vec<(u64, RcaEvent)> {
        let g = self.lock();
        g.recent
            .iter()
            .filter(|(t, _)| *t >= since_ns)
            .cloned()
            .collect()
    }

    /// The latest point of every metric series: (name, dims, attributes, time ns, value).
    pub fn latest_points(&self) -> Vec<LatestPoint> {
        let g = self.lock();
        g.series
            .values()
            .filter_map(|s| {
                let (t, v) = *s.points.back()?;
                Some((s.name.clone(), s.dims.clone(), s.attrs.clone(), t, v))
            })
            .collect()
    }
}

/// The routes with a ten-second bucket reaching into `[from_s, …)`.
fn routes_since(g: &Inner, from_s: u64) -> impl Iterator<Item = (&String, &RouteWindow)> {
    g.routes
        .iter()
        .filter(move |(_, w)| w.buckets.iter().any(|b| b.start_s + 10 >= from_s))
}

fn stats_over(w: &RouteWindow, now_ns: u64, window_ns: u64) -> RouteStats {
    let horizon = now_ns.saturating_sub(window_ns) / 1_000_000_000;
    let mut st = RouteStats {
        circuit_state: w.circuit_state.clone(),
        circuit_changes: w.circuit_changes,
        ..Default::default()
    };
    let mut rules: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sketch = Sketch::default();
    for b in w.buckets.iter().filter(|b| b.start_s + 10 >= horizon) {
        st.requests += b.requests;
        st.s4xx += b.s4xx;
        st.s5xx += b.s5xx;
        st.s429 += b.s429;
        st.s503 += b.s503;
        st.s504 += b.s504;
        st.not_closed += b.not_closed;
        for (r, n) in &b.rules {
            *rules.entry(r).or_default() += n;
        }
        sketch.merge(&b.latency);
    }
    st.top_rule = rules
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(r, _)| r.to_string());
    st.p50_ms = sketch.quantile(0.5);
    st.p99_ms = sketch.quantile(0.99);
    st
}

impl Store {
    /// Whether the trace's gateway logs, or the state of its routes, topics,
    /// RabbitMQ queues or hosts, show trouble (for the `correlated` sampling
    /// policy). `topics`: the messaging destinations of its spans;
    /// `routing_keys`: their RabbitMQ routing keys.
    pub fn in_trouble(
        &self,
        trace_id: &[u8; 16],
        routes: &[&str],
        (topics, routing_keys): (&[&str], &[&str]),
        hosts: &[&str],
        tr: &Trouble,
    ) -> bool {
        let g = self.lock();
        if let Some(logs) = g.logs.get(trace_id) {
            let bad = logs.iter().any(|l| {
                l.status.is_some_and(|s| tr.statuses.contains(&s))
                    || l.circuit_state
                        .as_deref()
                        .is_some_and(|c| !c.eq_ignore_ascii_case("CLOSED"))
            });
            if bad {
                return true;
            }
        }
        let now_s = g.clock / 1_000_000_000;
        let horizon = now_s.saturating_sub(self.limits.window_ns / 1_000_000_000);
        for r in routes {
            if let Some(w) = g.routes.get(*r) {
                if w.circuit_state.as_deref().is_some_and(|c| c != "CLOSED") {
                    return true;
                }
                let (mut req, mut bad) = (0u64, 0u64);
                for b in w.buckets.iter().filter(|b| b.start_s + 10 >= horizon) {
                    req += b.requests;
                    for st in &tr.statuses {
                        bad += match st {
                            429 => b.s429,
                            503 => b.s503,
                            504 => b.s504,
                            _ => 0,
                        };
                    }
                }
                if req > 0 && bad as f64 / req as f64 >= tr.route_error_ratio {
                    return true;
                }
            }
        }
        let last = |s: &Series| s.points.back().map(|p| p.1);
        // Queues in alarm (a backlog, a stop or stall, a retry storm) that
        // the trace's destinations or routing keys may reach.
        if !topics.is_empty() || !routing_keys.is_empty() {
            let troubled: BTreeSet<(&str, &str)> = g
                .series
                .values()
                .filter(|s| match s.name.as_str() {
                    "rabbitmq.queue.backlog_alarm" | "rabbitmq.queue.retry_storm" => {
                        last(s).is_some_and(|v| v >= 1.0)
                    }
                    "rabbitmq.queue.status" => last(s).is_some_and(|v| v >= 2.0),
                    _ => false,
                })
                .filter_map(|s| {
                    Some((
                        s.attr(super::rabbit::VHOST).unwrap_or("/"),
                        s.dims.queue.as_deref()?,
                    ))
                })
                .collect();
            if !troubled.is_empty() {
                let ix = super::rabbit::Index::new(g.series.values().filter(|s| {
                    s.name == super::rabbit::BINDING
                        && s.dims
                            .queue
                            .as_deref()
                            .is_some_and(|q| troubled.iter().any(|t| t.1 == q))
                }));
                if troubled
                    .iter()
                    .any(|q| ix.may_touch(*q, topics, routing_keys))
                {
                    return true;
                }
            }
        }
        for s in g.series.values() {
            if let Some(t) = s.dims.topic.as_deref() {
                if topics.contains(&t) {
                    let on = match s.name.as_str() {
                        "kafka.consumer_group.lag_alarm" | "kafka.topic.retry_storm" => {
                            last(s).is_some_and(|v| v >= 1.0)
                        }
                        "kafka.consumer_group.partition_status" => {
                            last(s).is_some_and(|v| v >= 2.0)
                        }
                        _ => false,
                    };
                    if on {
                        return true;
                    }
                }
            }
            if let Some(h) = s.dims.host.as_deref() {
                if hosts.contains(&h) {
                    let mode = s
                        .attr("cpu.mode")
                        .or_else(|| s.attr("state"))
                        .or_else(|| s.attr("system.memory.state"));
                    let on = match (s.name.as_str(), mode) {
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
                    };
                    if on {
                        return true;
                    }
                }
            }
        }
        false
    }

    /// Series matching `pick`, cloned.
    pub fn series_where(&self, mut pick: impl FnMut(&Series) -> bool) -> Vec<Series> {
        self.lock()
            .series
            .values()
            .filter(|s| pick(s))
            .cloned()
            .collect()
    }

    /// Record a trace analysed at `now_ns` for the RCA log record, the
    /// counter and the alert rules.
    pub fn push_event(&self, ev: RcaEvent, now_ns: u64) {
        let mut g = self.lock();
        let horizon = now_ns.saturating_sub(self.limits.window_ns);
        while g
            .recent
            .front()
            .is_some_and(|(t, _)| *t < horizon || g.recent.len() >= self.limits.max_events)
        {
            g.recent.pop_front();
        }
        g.recent.push_back((now_ns, ev.clone()));
        *g.counts
            .entry((ev.cause.clone(), ev.route.clone(), ev.service.clone()))
            .or_default() += 1;
        g.counts_changed = true;
        if self.log_events_owner.load(Ordering::SeqCst) {
            g.events.push_back(ev);
            while g.events.len() > self.limits.max_events {
                g.events.pop_front();
                g.dropped_events += 1;
            }
        }
    }

    /// RCA events waiting to be emitted.
    pub fn take_events(&self) -> Vec<RcaEvent> {
        self.lock().events.drain(..).collect()
    }

    /// The RCA counter, when it changed since the last call.
    pub fn take_counts(&self) -> Option<BTreeMap<(String, String, String), u64>> {
        let mut g = self.lock();
        if !g.counts_changed {
            return None;
        }
        g.counts_changed = false;
        Some(g.counts.clone())
    }

    /// Remember the gateway route id of an entry route (bounded).
    pub fn learn_route(&self, entry: &str, route_id: &str) {
        let mut g = self.lock();
        if g.learned_routes.get(entry).map(String::as_str) == Some(route_id) {
            return;
        }
        if g.learned_routes.len() >= self.limits.max_routes && !g.learned_routes.contains_key(entry)
        {
            return;
        }
        g.learned_routes
            .insert(entry.to_string(), route_id.to_string());
    }

    /// The gateway route id learned for an entry route.
    pub fn learned_route(&self, entry: &str) -> Option<String> {
        self.lock().learned_routes.get(entry).cloned()
    }

    /// Whether any host series and any Kafka series are held (a join that
    /// finds nothing then counts as a miss).
    pub fn has_series(&self) -> (bool, bool) {
        let g = self.lock();
        let host = g.series.values().any(|s| s.dims.host.is_some());
        let kafka = g.series.values().any(|s| s.dims.topic.is_some());
        (host, kafka)
    }

    /// Mark traces as analysed at `now_ns`; returns, for each, whether it was
    /// analysed before (its spans are late).
    pub fn mark_analysed(&self, ids: &[[u8; 16]], now_ns: u64) -> Vec<bool> {
        let mut g = self.lock();
        let horizon = now_ns.saturating_sub(self.limits.window_ns);
        while let Some(&(t, id)) = g.analysed_order.front() {
            if t >= horizon && g.analysed_order.len() <= self.limits.max_analysed {
                break;
            }
            g.analysed_order.pop_front();
            if g.analysed.get(&id) == Some(&t) {
                g.analysed.remove(&id);
            }
        }
        ids.iter()
            .map(|id| {
                let before = g.analysed.contains_key(id);
                if !before {
                    g.analysed.insert(*id, now_ns);
                    g.analysed_order.push_back((now_ns, *id));
                }
                before
            })
            .collect()
    }

    /// Remember a producer span of an analysed trace (as a one-span
    /// resource), for as long as the window and `max_analysed` allow.
    pub fn remember_producer(
        &self,
        trace: [u8; 16],
        span_id: u64,
        span: ResourceSpans,
        now_ns: u64,
    ) {
        let mut g = self.lock();
        let horizon = now_ns.saturating_sub(self.limits.window_ns);
        while let Some(&(t, key)) = g.producer_order.front() {
            if t >= horizon && g.producer_order.len() < self.limits.max_analysed {
                break;
            }
            g.producer_order.pop_front();
            if g.producers.get(&key).is_some_and(|(at, _)| *at == t) {
                g.producers.remove(&key);
            }
        }
        let key = (trace, span_id);
        g.producers.insert(key, (now_ns, Arc::new(span)));
        g.producer_order.push_back((now_ns, key));
    }

    /// The remembered producer span `span_id` of `trace`.
    pub fn producer(&self, trace: &[u8; 16], span_id: u64) -> Option<Arc<ResourceSpans>> {
        let g = self.lock();
        g.producers.get(&(*trace, span_id)).map(|(_, r)| r.clone())
    }

    /// Count late spans (of traces analysed already); returns the total.
    pub fn count_late(&self, n: u64) -> u64 {
        let mut g = self.lock();
        g.late_spans += n;
        g.late_spans
    }

    /// Log records evicted before the window ended: (for the count limit, for the byte limit).
    pub fn evictions(&self) -> (u64, u64) {
        let g = self.lock();
        (g.evicted_logs, g.evicted_logs_bytes)
    }

    /// Bytes of log records held, and the age (ns) of the oldest at `now_ns`.
    pub fn log_retention(&self, now_ns: u64) -> (usize, u64) {
        let g = self.lock();
        let age = g
            .log_order
            .front()
            .map_or(0, |(t, _)| now_ns.saturating_sub(*t));
        (g.log_bytes, age)
    }

    /// Log records held, series held, routes tracked.
    pub fn sizes(&self) -> (usize, usize, usize) {
        let g = self.lock();
        (g.log_count, g.series.len(), g.routes.len())
    }
}

fn add_route(g: &mut Inner, limits: &Limits, route: &str, ev: &LogEvidence) {
    if !g.routes.contains_key(route) && g.routes.len() >= limits.max_routes {
        return;
    }
    let w = g.routes.entry(route.to_string()).or_default();
    let start_s = ev.time_ns / 1_000_000_000 / 10 * 10;
    if w.buckets.back().is_none_or(|b| b.start_s < start_s) {
        w.buckets.push_back(Bucket {
            start_s,
            ..Default::default()
        });
    }
    let window_buckets = (limits.window_ns / 10_000_000_000).max(1) as usize + 1;
    while w.buckets.len() > window_buckets {
        w.buckets.pop_front();
    }
    // A record older than the newest bucket goes to the bucket of its time if kept.
    let Some(b) = w.buckets.iter_mut().rev().find(|b| b.start_s <= start_s) else {
        return;
    };
    b.requests += 1;
    if let Some(st) = ev.status {
        b.s4xx += u64::from((400..500).contains(&st));
        b.s5xx += u64::from((500..600).contains(&st));
        b.s429 += u64::from(st == 429);
        b.s503 += u64::from(st == 503);
        b.s504 += u64::from(st == 504);
    }
    if let Some(r) = &ev.rate_limit_rule {
        if ev.status == Some(429) {
            *b.rules.entry(r.clone()).or_default() += 1;
        }
    }
    if let Some(d) = ev.duration_ms {
        b.latency.add(d);
    }
    // A record without a circuit state whose request reached the upstream
    // and was answered (status below 500) says the circuit is closed now:
    // gateways that report the breaker only when it trips (Envoy's `UO`
    // flag, a 503 with `circuit_state: OPEN`) would otherwise leave the
    // route open for the whole window after one trip, and every trace of
    // the route would look troubled.
    let answered = ev.circuit_state.is_none()
        && ev
            .status
            .is_some_and(|st| (100..500).contains(&st) && st != 429);
    let closed = answered.then(|| "CLOSED".to_string());
    if let Some(cs) = ev.circuit_state.as_ref().or(closed.as_ref()) {
        let cs_up = cs.to_ascii_uppercase();
        if cs_up != "CLOSED" {
            b.not_closed += 1;
        }
        if answered && w.circuit_state.is_none() {
            // Never reported open: nothing to close.
            return;
        }
        if w.circuit_state.as_deref().is_some_and(|prev| prev != cs_up) {
            w.circuit_changes += 1;
        }
        w.circuit_state = Some(cs_up);
    }
}

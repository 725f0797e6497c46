//! The correlation state: a time window, in bounded memory, of
//! - log records (gateway and application) indexed by `trace_id`;
//! - metric series, each under the key the evidence source that keeps it
//!   gave it (see [`Classify`]): the state knows no source;
//! - the analysed traces (for the RCA records, the alert rules and the page).
//!
//! Arrival order does not matter within the window: everything is kept by
//! its own time and looked up when a trace is analysed.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, ResourceMetrics, Sum,
};
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::analysis::baseline::Baselines;
use super::analysis::peers::Peers;
use super::model::series::{find, s, Kept, Offer, PointKind};
use super::model::view::TraceView;
use super::model::{Key, LatestPoint, LogEvidence, RcaEvent, Series};

/// Who keeps a metric point, and under which key: the evidence sources,
/// asked in turn (`None`: no source keeps it; it passes on untouched).
pub type Classify<'a> = &'a dyn Fn(&Offer<'_>) -> Option<Kept>;

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

/// Metric name, key, other attributes.
type SeriesKey = (String, Key, Vec<(String, String)>);

#[derive(Default)]
struct Inner {
    logs: HashMap<[u8; 16], Vec<Arc<LogEvidence>>>,
    log_order: VecDeque<(u64, [u8; 16])>,
    log_count: usize,
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

/// A log record's evidence as every record has it: its time (the
/// observed time, or now, when it has none), its service, severity, error
/// type, body (cut to 512 bytes) and span id.
fn record(r: &LogRecord, service: &str, now_ns: u64) -> LogEvidence {
    let a = &r.attributes;
    let time_ns = if r.time_unix_nano > 0 {
        r.time_unix_nano
    } else if r.observed_time_unix_nano > 0 {
        r.observed_time_unix_nano
    } else {
        now_ns
    };
    let mut body = r
        .body
        .as_ref()
        .and_then(|b| s(&Some(b.clone())))
        .unwrap_or_default();
    if body.len() > 512 {
        let mut cut = 512;
        while !body.is_char_boundary(cut) {
            cut -= 1;
        }
        body.truncate(cut);
    }
    LogEvidence {
        time_ns,
        service: service.to_string(),
        severity: r.severity_number,
        error_type: find(a, &["error.type", "exception.type"])
            .and_then(s)
            .filter(|x| !x.trim().is_empty() && x.trim() != "-"),
        body,
        span_id: (r.span_id.len() == 8 && r.span_id.iter().any(|b| *b != 0))
            .then(|| r.span_id.iter().map(|b| format!("{b:02x}")).collect()),
        parts: Default::default(),
    }
}

/// The shared correlation state.
pub struct Store {
    limits: Limits,
    /// Per-operation latency baselines.
    pub baselines: Baselines,
    /// The services seen serving each address (callees named by address).
    pub peers: Peers,
    inner: Mutex<Inner>,
    log_events_owner: AtomicBool,
    metric_events_owner: AtomicBool,
    /// The last analysed traces as the page shows them: (capacity, ring).
    views: Mutex<(usize, VecDeque<Arc<TraceView>>)>,
    ui_owner: AtomicBool,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("limits", &self.limits)
            .finish()
    }
}

impl Store {
    /// An empty store.
    pub fn new(limits: Limits) -> Self {
        Store {
            baselines: Baselines::new(
                limits.baseline_window_ns,
                limits.baseline_max_operations,
                limits.baseline_min_samples,
            ),
            peers: Peers::new(limits.baseline_max_operations),
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

    fn views(&self) -> std::sync::MutexGuard<'_, (usize, VecDeque<Arc<TraceView>>)> {
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
    pub fn push_view(&self, v: TraceView) {
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
    pub fn trace_views(&self) -> Vec<Arc<TraceView>> {
        self.views().1.iter().cloned().collect()
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

    /// Take in log records: `read` adds to each what the sources read of
    /// its attributes, then `observe` sees it (the sources that keep
    /// statistics of them). Records without a trace id are only observed.
    pub fn add_logs(
        &self,
        resource_logs: &[ResourceLogs],
        now_ns: u64,
        read: &dyn Fn(&[KeyValue], &mut LogEvidence),
        observe: &dyn Fn(&LogEvidence, u64),
    ) {
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
                    let mut ev = record(r, &service, now_ns);
                    read(&r.attributes, &mut ev);
                    observe(&ev, g.clock);
                    if r.trace_id.len() == 16 && r.trace_id.iter().any(|b| *b != 0) {
                        let mut tid = [0u8; 16];
                        tid.copy_from_slice(&r.trace_id);
                        g.log_bytes += ev.cost();
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
                    freed = Some(v.remove(0).cost());
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

    /// Take in the metric points a source keeps (`classify`), each under
    /// the key it gives. Histograms are kept as their `_sum` and `_count`,
    /// summaries as a point per quantile, when a source keeps them.
    pub fn add_metrics(
        &self,
        resource_metrics: &[ResourceMetrics],
        now_ns: u64,
        classify: Classify<'_>,
    ) {
        let mut g = self.lock();
        g.clock = g.clock.max(now_ns);
        let number = |p: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| match p.value {
            Some(number_data_point::Value::AsDouble(d)) => Some(d),
            Some(number_data_point::Value::AsInt(i)) => Some(i as f64),
            None => None,
        };
        for rm in resource_metrics {
            let resource = rm
                .resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or(&[]);
            for sm in &rm.scope_metrics {
                for m in &sm.metrics {
                    let offer = |kind, attrs| Offer {
                        metric: &m.name,
                        kind,
                        resource,
                        attrs,
                    };
                    match &m.data {
                        Some(metric::Data::Gauge(Gauge { data_points }))
                        | Some(metric::Data::Sum(Sum { data_points, .. })) => {
                            for p in data_points {
                                if let (Some(v), Some(k)) = (
                                    number(p),
                                    classify(&offer(PointKind::Number, &p.attributes)),
                                ) {
                                    self.keep(
                                        &mut g,
                                        &m.name,
                                        &p.attributes,
                                        k,
                                        (p.time_unix_nano, v, p.flags),
                                        now_ns,
                                    );
                                }
                            }
                        }
                        // A histogram: its sum and count, for a mean over an interval.
                        Some(metric::Data::Histogram(x)) => {
                            for p in &x.data_points {
                                let Some(k) = classify(&offer(PointKind::Histogram, &p.attributes))
                                else {
                                    continue;
                                };
                                let t = p.time_unix_nano;
                                let sum = format!("{}_sum", m.name);
                                let count = format!("{}_count", m.name);
                                self.keep(
                                    &mut g,
                                    &sum,
                                    &p.attributes,
                                    k.clone(),
                                    (t, p.sum.unwrap_or(0.0), p.flags),
                                    now_ns,
                                );
                                self.keep(
                                    &mut g,
                                    &count,
                                    &p.attributes,
                                    k,
                                    (t, p.count as f64, p.flags),
                                    now_ns,
                                );
                            }
                        }
                        // A summary (redis_exporter's latency percentiles): each quantile as a point.
                        Some(metric::Data::Summary(x)) => {
                            for p in &x.data_points {
                                let Some(k) = classify(&offer(PointKind::Summary, &p.attributes))
                                else {
                                    continue;
                                };
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
                                    self.keep(
                                        &mut g,
                                        &m.name,
                                        &a,
                                        k.clone(),
                                        (p.time_unix_nano, q.value, p.flags),
                                        now_ns,
                                    );
                                }
                            }
                        }
                        _ => continue,
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

    /// Add a point to the series of `name` under what `kept` says.
    fn keep(
        &self,
        g: &mut Inner,
        name: &str,
        attrs: &[KeyValue],
        kept: Kept,
        (time, v, flags): (u64, f64, u32),
        now_ns: u64,
    ) {
        // A staleness marker (no recorded value) is not a value.
        if flags & 1 != 0 || v.is_nan() || kept.key.is_empty() {
            return;
        }
        let mut attrs: Vec<(String, String)> = attrs
            .iter()
            .filter(|kv| !kept.drop.contains(&kv.key.as_str()))
            .filter_map(|kv| s(&kv.value).map(|v| (kv.key.clone(), v)))
            .collect();
        attrs.extend(kept.add);
        attrs.sort();
        let t = if time > 0 { time } else { now_ns };
        let key = (name.to_string(), kept.key, attrs);
        let max_points = self.limits.max_points;
        let series = g
            .series
            .entry(key)
            .or_insert_with_key(|(name, key, attrs)| Series {
                name: name.clone(),
                key: key.clone(),
                attrs: attrs.clone(),
                points: VecDeque::new(),
                updated: now_ns,
            });
        series.points.push_back((t, v));
        series.updated = now_ns;
        while series.points.len() > max_points {
            series.points.pop_front();
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
                Some((s.name.clone(), s.key.clone(), s.attrs.clone(), t, v))
            })
            .collect()
    }
}

impl Store {
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
    pub fn push_event(&self, mut ev: RcaEvent, now_ns: u64) {
        let mut g = self.lock();
        let horizon = now_ns.saturating_sub(self.limits.window_ns);
        while g
            .recent
            .front()
            .is_some_and(|(t, _)| *t < horizon || g.recent.len() >= self.limits.max_events)
        {
            g.recent.pop_front();
        }
        let extra = std::mem::take(&mut ev.extra);
        g.recent.push_back((now_ns, ev.clone()));
        ev.extra = extra;
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

    /// Whether any series has the dimension `dim` (a join on it that finds
    /// nothing then counts as a miss).
    pub fn any_series_with(&self, dim: &str) -> bool {
        self.lock()
            .series
            .values()
            .any(|s| s.key.get(dim).is_some())
    }

    /// The time of the newest record or point taken in (ns).
    pub fn clock(&self) -> u64 {
        self.lock().clock
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

    /// Log records held, series held.
    pub fn sizes(&self) -> (usize, usize) {
        let g = self.lock();
        (g.log_count, g.series.len())
    }
}

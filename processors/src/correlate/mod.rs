//! The `correlate` processor: joins kept traces with logs and metrics and
//! annotates each with its root cause.
//!
//! Put the same `correlate` id in the logs and metrics pipelines and in the
//! traces pipeline after `tail_sampling`. Every instance of one id (one per
//! pipeline, as in the Collector) shares one correlation state
//! ([`store::Store`]): in logs pipelines it takes in log records, in metrics
//! pipelines metric points, both passed on unchanged; in traces pipelines it
//! analyses each batch of kept traces (one decision tick of the sampler) —
//! critical path, self times, culprit, the join with the state, and the
//! rules (SQL over Arrow tables, run with DataFusion) — and writes the
//! `rca.*` attributes. The first logs pipeline it is in also emits an RCA
//! log record per analysed trace, and the first metrics pipeline the
//! `causeway.rca.traces` counter.

pub mod alerts;
pub mod baseline;
pub mod config;
pub mod critical;
pub mod deps;
pub mod features;
pub mod rabbit;
pub mod rules;
pub mod shape;
pub mod store;
#[cfg(test)]
mod tests;
pub mod ui;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, ProcessError, Processor, ProcessorFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Counter;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::time::Instant;

use config::CorrelateConfig;
use features::{Hex16, JoinParams, RouteMap, TraceRow};
use rules::{Finding, Rule};
use store::{Limits, RcaEvent, Store};

/// Traces analysed, by cause.
pub const ANALYSED: &str = "causeway_correlate_analysed_traces_total";
/// Rule failures at run time, by rule.
pub const RULE_ERRORS: &str = "causeway_rca_rule_errors_total";
/// Log records evicted before the window ended, by the limit that forced it.
pub const EVICTED_LOGS: &str = "causeway_correlate_evicted_log_records_total";
/// Age of the oldest log record held (how far back gateway evidence reaches).
pub const LOG_RETENTION: &str = "causeway_correlate_log_retention_seconds";
/// Spans of traces analysed already (late), passed on without a second analysis.
pub const LATE_SPANS: &str = "causeway_correlate_late_spans_total";
/// Traces whose join with host, Kafka or RabbitMQ metrics found nothing while such metrics flow.
pub const JOIN_MISSES: &str = "causeway_correlate_join_misses_total";
/// Traces held by `evidence_wait`.
pub const HELD_TRACES: &str = "causeway_correlate_held_traces";
/// Alert instances firing, by alert.
pub const ALERTS_FIRING: &str = "causeway_alerts_firing";
/// Alert notifications emitted, by alert and status.
pub const ALERTS_SENT: &str = "causeway_alerts_sent_total";

/// Factory of the `correlate` processor.
pub struct CorrelateFactory;

#[async_trait]
impl ProcessorFactory for CorrelateFactory {
    fn kind(&self) -> &'static str {
        "correlate"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::ALL
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<CorrelateConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Processor>, BoxError> {
        let cfg: CorrelateConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let id = ctx.id.to_string();
        let store = ctx.shared.get_or_init(&id, || Store::new(limits(&cfg)));
        store.keep_views(cfg.recent_traces);
        if store.claim_ui() {
            ctx.telemetry.add_api_source(Arc::new(ui::Api {
                store: store.clone(),
                links: cfg.alerts.links.clone(),
                window_ns: nanos(cfg.window.get()),
            }));
        }
        let emit_logs =
            cfg.events && ctx.pipeline_signals.contains(Signal::Logs) && store.claim_log_events();
        let emit_metrics = cfg.events
            && ctx.pipeline_signals.contains(Signal::Metrics)
            && store.claim_metric_events();
        // Alerts are evaluated by the instance that emits the RCA log records.
        let alerting =
            (emit_logs && !cfg.alerts.rules.is_empty()).then(|| alerts::Alerting::new(&cfg.alerts));
        if !cfg.alerts.rules.is_empty() && !ctx.pipeline_signals.contains(Signal::Logs) {
            tracing::debug!(processor = %id, "Alert rules are evaluated by this processor's instance in a logs pipeline.");
        }
        let rules = rules::assemble(cfg.builtin_rules, &cfg.rules);
        // Every rule's error counter exists from the start (at 0), so dashboards
        // and alert rules on it see a series before the first failure.
        let names = rules
            .iter()
            .map(|r| r.name.as_str())
            .chain(cfg.alerts.rules.iter().map(|r| r.alert.as_str()));
        if emit_logs || ctx.pipeline_signals.contains(Signal::Traces) {
            for rule in names {
                ctx.telemetry
                    .counter(
                        RULE_ERRORS,
                        "Root-cause and alert rules that failed at run time, by rule.",
                        &[("component", &id), ("rule", rule)],
                    )
                    .add(0);
            }
        }
        Ok(Box::new(Correlate {
            join: JoinParams {
                lookback_ns: nanos(cfg.metric_lookback.get()),
                lookahead_ns: nanos(cfg.metric_lookahead.get()),
                lag_threshold: cfg.consumer_lag.lag_threshold,
                lag_growth: cfg.consumer_lag.lag_growth,
                lag_sample_ns: nanos(cfg.consumer_lag.sample_interval.get()),
                dep_sample_ns: nanos(cfg.dependencies.sample_interval.get()),
                dep_addresses: cfg.dependencies.addresses.clone(),
            },
            min_share: cfg.min_explained_share,
            min_ms: nanos(cfg.min_explained.get()) as f64 / 1e6,
            route_map: RouteMap {
                fixed: cfg.route_map.clone().into_iter().collect(),
            },
            evidence_wait: cfg.evidence_wait.get(),
            max_held: cfg.max_held_traces,
            held: Vec::new(),
            reported_evictions: (0, 0),
            alert_every: cfg.alerts.interval.get(),
            next_alert: Instant::now(),
            alerting,
            rules,
            planner: rules::Planner::new(),
            telemetry: ctx.telemetry.clone(),
            store,
            emit_logs,
            emit_metrics,
            next_emit: Instant::now() + EMIT_EVERY,
            rule_errors_logged: std::collections::HashSet::new(),
            analysed: ctx.telemetry.counter(
                ANALYSED,
                "Kept traces analysed by correlate.",
                &[("component", &id)],
            ),
            id,
        }))
    }
}

/// The store limits of a config.
pub fn limits(cfg: &CorrelateConfig) -> Limits {
    Limits {
        window_ns: nanos(cfg.window.get()),
        max_log_records: cfg.max_log_records,
        max_log_bytes: usize::try_from(cfg.max_log_bytes.0).unwrap_or(usize::MAX),
        max_analysed: 200_000,
        baseline_window_ns: nanos(cfg.baseline.window.get()),
        baseline_min_samples: cfg.baseline.min_samples,
        baseline_max_operations: cfg.baseline.max_operations,
        max_series: cfg.max_series,
        max_points: 64,
        max_routes: cfg.max_routes,
        max_events: 100_000,
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// How often RCA events are emitted.
const EMIT_EVERY: Duration = Duration::from_secs(1);

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(nanos)
        .unwrap_or(0)
}

/// Traces held by `evidence_wait`, analysed again when it has passed.
struct Held {
    due: Instant,
    batch: Batch,
    traces: usize,
    ids: std::collections::HashSet<[u8; 16]>,
}

/// The span at `at` of `rs` alone in a resource (its resource and scope kept).
fn one_span(rs: &[ResourceSpans], (ri, si, pi): features::SpanRef) -> Option<ResourceSpans> {
    let r = rs.get(ri)?;
    let sc = r.scope_spans.get(si)?;
    let span = sc.spans.get(pi)?;
    Some(ResourceSpans {
        resource: r.resource.clone(),
        scope_spans: vec![opentelemetry_proto::tonic::trace::v1::ScopeSpans {
            scope: sc.scope.clone(),
            spans: vec![span.clone()],
            schema_url: sc.schema_url.clone(),
        }],
        schema_url: r.schema_url.clone(),
    })
}

/// Move the spans of the traces in `ids` out of `rs` (resources and scopes
/// kept), dropping what is left empty.
fn split_traces(
    rs: &mut Vec<ResourceSpans>,
    ids: &std::collections::HashSet<[u8; 16]>,
) -> Vec<ResourceSpans> {
    let mut out = Vec::new();
    for r in rs.iter_mut() {
        let mut scopes = Vec::new();
        for sc in r.scope_spans.iter_mut() {
            let (h, keep): (Vec<_>, Vec<_>) =
                std::mem::take(&mut sc.spans).into_iter().partition(|sp| {
                    <[u8; 16]>::try_from(sp.trace_id.as_slice()).is_ok_and(|id| ids.contains(&id))
                });
            sc.spans = keep;
            if !h.is_empty() {
                scopes.push(opentelemetry_proto::tonic::trace::v1::ScopeSpans {
                    scope: sc.scope.clone(),
                    spans: h,
                    schema_url: sc.schema_url.clone(),
                });
            }
        }
        r.scope_spans.retain(|sc| !sc.spans.is_empty());
        if !scopes.is_empty() {
            out.push(ResourceSpans {
                resource: r.resource.clone(),
                scope_spans: scopes,
                schema_url: r.schema_url.clone(),
            });
        }
    }
    rs.retain(|r| !r.scope_spans.is_empty());
    out
}

struct Correlate {
    id: String,
    join: JoinParams,
    min_share: f64,
    min_ms: f64,
    route_map: RouteMap,
    evidence_wait: Duration,
    max_held: usize,
    held: Vec<Held>,
    reported_evictions: (u64, u64),
    alerting: Option<alerts::Alerting>,
    alert_every: Duration,
    next_alert: Instant,
    rules: Vec<Rule>,
    /// The rules' plans, made once.
    planner: rules::Planner,
    store: Arc<Store>,
    emit_logs: bool,
    emit_metrics: bool,
    next_emit: Instant,
    telemetry: causeway_core::telemetry::Registry,
    rule_errors_logged: std::collections::HashSet<String>,
    analysed: Counter,
}

/// Values that become OTLP attribute values.
pub trait IntoAny {
    /// The OTLP value.
    fn any(self) -> any_value::Value;
}
impl IntoAny for String {
    fn any(self) -> any_value::Value {
        any_value::Value::StringValue(self)
    }
}
impl IntoAny for &str {
    fn any(self) -> any_value::Value {
        any_value::Value::StringValue(self.to_string())
    }
}
impl IntoAny for f64 {
    fn any(self) -> any_value::Value {
        any_value::Value::DoubleValue(self)
    }
}
impl IntoAny for i64 {
    fn any(self) -> any_value::Value {
        any_value::Value::IntValue(self)
    }
}
impl IntoAny for bool {
    fn any(self) -> any_value::Value {
        any_value::Value::BoolValue(self)
    }
}
impl IntoAny for any_value::Value {
    fn any(self) -> any_value::Value {
        self
    }
}

fn kv(k: &str, v: impl IntoAny) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(v.any()),
        }),
        ..Default::default()
    }
}

fn set_attr(attrs: &mut Vec<KeyValue>, k: &str, v: any_value::Value) {
    attrs.retain(|a| a.key != k);
    attrs.push(kv(k, v));
}

/// The root-cause verdict of one trace.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The winning finding (cause `unknown` when no finding explains enough).
    pub best: Finding,
    /// The others, best first, each with the time it explains.
    pub alternatives: Vec<Finding>,
    /// Culprit span index.
    pub culprit: usize,
}

/// Where an error began, or, when the call that failed spent its time
/// waiting on a callee (a timeout), the innermost server span below it that
/// still took half of that time.
fn slowest_below(t: &TraceRow, e: usize) -> usize {
    // The spans below `e`: one pass over the parent links, parents first.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); t.spans.len()];
    for (i, s) in t.spans.iter().enumerate() {
        if let Some(p) = s.parent {
            children[p].push(i);
        }
    }
    let mut below = Vec::new();
    let mut stack = vec![e];
    while let Some(i) = stack.pop() {
        below.push(i);
        stack.extend(&children[i]);
    }
    below
        .into_iter()
        .filter(|&i| {
            i != e
                && t.spans[i].kind == "server"
                && t.spans[i].duration_ms >= 0.5 * t.spans[e].duration_ms
        })
        // The innermost (deepest) server span that still holds half of the time.
        .max_by_key(|&i| (t.spans[i].depth, i))
        .unwrap_or(e)
}

/// The time a finding explains when its rule did not say: the critical
/// time of the subtree of the span it blames (or of the trace's culprit).
fn default_explained(t: &TraceRow, f: &Finding) -> f64 {
    let span = f
        .culprit_span_id
        .as_deref()
        .and_then(features::parse_hex16)
        .and_then(|id| t.spans.iter().position(|s| s.span_id == id))
        .unwrap_or(t.culprit);
    t.spans[span].path_ms
}

/// Pick the verdict of a trace from its findings: the cause is the finding
/// that explains the request's failure, else the one that accounts for the
/// most critical-path time (in steps of a tenth of the trace: nearly equal
/// counts as equal), strength of evidence (confidence) breaking ties. A
/// finding that explains less than `min_share` of the trace and not its
/// failure, or less than `min_share.1` ms, is only an alternative. Confidence is scaled by the share of the
/// time a finding explains (a failure's cause keeps its own).
pub fn verdict(t: &TraceRow, findings: Option<&Vec<Finding>>, min_share: (f64, f64)) -> Verdict {
    let dur = t.duration_ms.max(1e-6);
    let mut all: Vec<Finding> = findings.cloned().unwrap_or_default();
    for f in &mut all {
        if !f.explained_ms.is_finite() {
            f.explained_ms = default_explained(t, f);
        }
        f.explained_ms = f.explained_ms.clamp(0.0, dur);
        f.explains_failure &= t.failed;
        if !f.explains_failure {
            let share = f.explained_ms / dur;
            f.confidence *= 0.5 + 0.5 * (share / 0.6).min(1.0);
        }
        f.confidence = (f.confidence * 1000.0).round() / 1000.0;
    }
    let eligible = |f: &Finding| {
        f.explains_failure || (f.explained_ms / dur >= min_share.0 && f.explained_ms >= min_share.1)
    };
    // A retry sequence that failed and spans most of the trace is the story
    // of that failure: it outranks its own trigger (the 503s, the timeouts),
    // which its summary names.
    // `slow_dependency` names a span, not a mechanism: a mechanism that
    // explains nearly as much (within three tenths) is the better answer.
    let step = |f: &Finding| {
        let s = (f.explained_ms / dur * 10.0).round() as i64;
        if f.explains_failure && f.cause == "retry_storm" && f.explained_ms / dur >= 0.5 {
            11
        } else if f.cause == "slow_dependency" && !f.user {
            s - 3
        } else {
            s
        }
    };
    all.sort_by(|a, b| {
        eligible(b)
            .cmp(&eligible(a))
            .then(b.explains_failure.cmp(&a.explains_failure))
            .then(step(b).cmp(&step(a)))
            .then(b.confidence.total_cmp(&a.confidence))
            .then(b.user.cmp(&a.user))
            .then(b.explained_ms.total_cmp(&a.explained_ms))
    });
    // One finding per cause: its best.
    let mut seen = std::collections::HashSet::new();
    all.retain(|x| seen.insert(x.cause.clone()));
    let best = if all.first().is_some_and(eligible) {
        all.remove(0)
    } else {
        let c = t
            .spans
            .iter()
            .max_by(|a, b| a.self_ms.total_cmp(&b.self_ms))
            .unwrap_or(&t.spans[t.culprit]);
        Finding {
            rule: "none".into(),
            cause: "unknown".into(),
            confidence: 0.0,
            summary: format!(
                "no evidence explains it; the largest self time on the critical path is {} {} ({} ms of {} ms)",
                c.service,
                c.name,
                c.self_ms.round(),
                t.duration_ms.round()
            ),
            culprit_span_id: Some(Hex16::of(c.span_id).as_str().to_string()),
            evidence: None,
            user: false,
            explained_ms: c.self_ms,
            explains_failure: false,
        }
    };
    // A failure's cause with no span of its own blames where the error began.
    let fallback = match t.error_origin {
        Some(e) if best.explains_failure => slowest_below(t, e),
        _ => t.culprit,
    };
    let culprit = best
        .culprit_span_id
        .as_ref()
        .and_then(|id| features::parse_hex16(id))
        .and_then(|id| t.spans.iter().position(|s| s.span_id == id))
        .unwrap_or(fallback);
    Verdict {
        best,
        alternatives: all,
        culprit,
    }
}

/// The evidence of a verdict as JSON, bounded: the culprit span, up to 5
/// telling log records (bodies cut to 200 characters), the metric rows
/// joined, the route's statistics and up to 4 alternatives.
pub fn evidence_json(t: &TraceRow, v: &Verdict) -> String {
    #[derive(serde::Serialize)]
    struct Evidence<'a> {
        rule: &'a str,
        explained_ms: f64,
        explains_failure: bool,
        detail: Option<&'a str>,
        spans: [EvSpan<'a>; 1],
        logs: Vec<EvLog<'a>>,
        metrics: Vec<EvMetric<'a>>,
        route_stats: Option<EvRoute<'a>>,
        alternatives: Vec<EvAlt<'a>>,
    }
    #[derive(serde::Serialize)]
    struct EvSpan<'a> {
        span_id: &'a str,
        service: &'a str,
        name: &'a str,
        self_ms: f64,
        duration_ms: f64,
        status: &'a str,
        host: &'a str,
    }
    #[derive(serde::Serialize)]
    struct EvLog<'a> {
        time_unix_nano: u64,
        gateway: bool,
        service: &'a str,
        route: Option<&'a str>,
        status: Option<i64>,
        rate_limit_rule: Option<&'a str>,
        circuit_state: Option<&'a str>,
        response_flags: Option<&'a str>,
        upstream: Option<&'a str>,
        duration_ms: Option<f64>,
        body: &'a str,
    }
    #[derive(serde::Serialize)]
    #[serde(tag = "kind", rename_all = "lowercase")]
    enum EvMetric<'a> {
        Kafka(&'a features::KafkaRow),
        Host(&'a features::HostRow),
        Dependency(&'a deps::DepRow),
        Queue(&'a rabbit::QueueRow),
    }
    #[derive(serde::Serialize)]
    struct EvRoute<'a> {
        route: &'a str,
        #[serde(flatten)]
        stats: &'a store::RouteStats,
    }
    #[derive(serde::Serialize)]
    struct EvAlt<'a> {
        cause: &'a str,
        confidence: f64,
        rule: &'a str,
        explained_ms: f64,
        summary: &'a str,
    }
    let c = &t.spans[v.culprit];
    let culprit_id = Hex16::of(c.span_id);
    let cut = |b: &'_ str| -> usize { b.char_indices().nth(200).map_or(b.len(), |(i, _)| i) };
    let ev = Evidence {
        rule: &v.best.rule,
        explained_ms: (v.best.explained_ms * 10.0).round() / 10.0,
        explains_failure: v.best.explains_failure,
        detail: v.best.evidence.as_deref(),
        spans: [EvSpan {
            span_id: culprit_id.as_str(),
            service: &c.service,
            name: &c.name,
            self_ms: c.self_ms,
            duration_ms: c.duration_ms,
            status: c.status,
            host: &c.host,
        }],
        logs: t
            .logs
            .iter()
            .filter(|l| l.gateway || l.severity >= 13 || l.error_type.is_some())
            .take(5)
            .map(|l| EvLog {
                time_unix_nano: l.time_ns,
                gateway: l.gateway,
                service: &l.service,
                route: l.route.as_deref(),
                status: l.status,
                rate_limit_rule: l.rate_limit_rule.as_deref(),
                circuit_state: l.circuit_state.as_deref(),
                response_flags: l.response_flags.as_deref(),
                upstream: l.upstream.as_deref(),
                duration_ms: l.duration_ms,
                body: &l.body[..cut(&l.body)],
            })
            .collect(),
        metrics: t
            .kafka
            .iter()
            .map(EvMetric::Kafka)
            .chain(t.hosts.iter().map(EvMetric::Host))
            .chain(t.deps.iter().map(EvMetric::Dependency))
            .chain(t.queues.iter().map(EvMetric::Queue))
            .collect(),
        route_stats: t
            .route_stats
            .as_ref()
            .map(|(route, stats)| EvRoute { route, stats }),
        alternatives: v
            .alternatives
            .iter()
            .take(4)
            .map(|a| EvAlt {
                cause: &a.cause,
                confidence: a.confidence,
                rule: &a.rule,
                explained_ms: (a.explained_ms * 10.0).round() / 10.0,
                summary: &a.summary,
            })
            .collect(),
    };
    serde_json::to_string(&ev).unwrap_or_default()
}

/// Write the verdict on the trace's spans; returns the evidence written
/// (`rca.evidence`).
pub fn annotate(rs: &mut [ResourceSpans], t: &TraceRow, v: &Verdict) -> String {
    let culprit = &t.spans[v.culprit];
    let route = t.route.clone().unwrap_or_default();
    let evidence = evidence_json(t, v);
    for (i, row) in t.spans.iter().enumerate() {
        let (ri, si, pi) = row.at;
        let Some(span) = rs
            .get_mut(ri)
            .and_then(|r| r.scope_spans.get_mut(si))
            .and_then(|s| s.spans.get_mut(pi))
        else {
            continue;
        };
        let a = &mut span.attributes;
        if row.critical {
            set_attr(a, "rca.critical_path", any_value::Value::BoolValue(true));
            set_attr(
                a,
                "rca.self_time_ms",
                any_value::Value::DoubleValue((row.self_ms * 1000.0).round() / 1000.0),
            );
        }
        if i == t.root {
            if t.continuation {
                // The verdict of spans that came after their trace's: it
                // supersedes the one on the trace's root.
                set_attr(a, "rca.continuation", any_value::Value::BoolValue(true));
            }
            set_attr(
                a,
                "rca.cause",
                any_value::Value::StringValue(v.best.cause.clone()),
            );
            set_attr(
                a,
                "rca.summary",
                any_value::Value::StringValue(v.best.summary.clone()),
            );
            set_attr(
                a,
                "rca.confidence",
                any_value::Value::DoubleValue(v.best.confidence),
            );
            set_attr(
                a,
                "rca.culprit.service",
                any_value::Value::StringValue(culprit.service.to_string()),
            );
            set_attr(
                a,
                "rca.culprit.span_id",
                any_value::Value::StringValue(Hex16::of(culprit.span_id).as_str().to_string()),
            );
            set_attr(
                a,
                "rca.rule",
                any_value::Value::StringValue(v.best.rule.clone()),
            );
            set_attr(
                a,
                "rca.explained_share",
                any_value::Value::DoubleValue(
                    (v.best.explained_ms / t.duration_ms.max(1e-6) * 1000.0).round() / 1000.0,
                ),
            );
            set_attr(
                a,
                "rca.route_id",
                any_value::Value::StringValue(route.clone()),
            );
            set_attr(
                a,
                "rca.evidence",
                any_value::Value::StringValue(evidence.clone()),
            );
            let alts: Vec<String> = v
                .alternatives
                .iter()
                .map(|x| {
                    format!(
                        "{}:{:.2}:{:.2}",
                        x.cause,
                        x.confidence,
                        x.explained_ms / t.duration_ms.max(1e-6)
                    )
                })
                .collect();
            set_attr(
                a,
                "rca.alternatives",
                any_value::Value::StringValue(alts.join(",")),
            );
        }
    }
    evidence
}

impl Correlate {
    /// Analyse the kept traces of a batch and annotate them. With `again`,
    /// the batch is one held by `evidence_wait`: analysed whatever it finds.
    async fn analyse(&mut self, batch: &mut Batch, again: bool) -> Result<(), ProcessError> {
        let r = self.analyse_spans(batch, again).await;
        // Held spans may have left it.
        batch.recount();
        r
    }

    async fn analyse_spans(&mut self, batch: &mut Batch, again: bool) -> Result<(), ProcessError> {
        let now = now_ns();
        let rs = match batch.traces_mut() {
            Ok(Some(rs)) => rs,
            Ok(None) => return Ok(()),
            Err(e) => return Err(ProcessError(Box::new(e))),
        };
        if !again && !self.held.is_empty() {
            // Late spans of a trace still held join it: it is analysed whole
            // when the hold ends (the spans of one trace leave an SDK in
            // several exports, and a sampler may decide between them).
            let in_batch: std::collections::HashSet<[u8; 16]> = rs
                .iter()
                .flat_map(|r| r.scope_spans.iter().flat_map(|sc| sc.spans.iter()))
                .filter_map(|sp| <[u8; 16]>::try_from(sp.trace_id.as_slice()).ok())
                .collect();
            for h in &mut self.held {
                let mine: std::collections::HashSet<[u8; 16]> =
                    h.ids.intersection(&in_batch).copied().collect();
                if mine.is_empty() {
                    continue;
                }
                let moved = split_traces(rs, &mine);
                if let Ok(Some(held_rs)) = h.batch.traces_mut() {
                    held_rs.extend(moved);
                }
                h.batch.recount();
            }
        }
        let mut traces = features::traces(rs, Some(&self.store.baselines), &self.route_map);
        if traces.is_empty() {
            return Ok(());
        }
        if !again {
            // Late spans of a trace analysed already are passed on as they
            // are: never analysed as a new (fragment of a) trace.
            let ids: Vec<[u8; 16]> = traces.iter().map(|t| t.id).collect();
            // Except a consumer span whose message a remembered producer span
            // of the trace sent: the message's wait is measured from there.
            let late = self.store.mark_analysed(&ids, now);
            let mut n = 0u64;
            let mut continued = Vec::new();
            let mut k = 0;
            traces.retain(|t| {
                let keep = !late[k];
                k += 1;
                if !keep {
                    match self.continuation(rs, t) {
                        Some(c) => {
                            let analysed = c
                                .spans
                                .iter()
                                .filter(|s| s.at != features::NOT_IN_BATCH)
                                .count();
                            n += t.spans.len().saturating_sub(analysed) as u64;
                            continued.push(c);
                        }
                        None => n += t.spans.len() as u64,
                    }
                }
                keep
            });
            traces.extend(continued);
            if n > 0 {
                self.store.count_late(n);
                self.telemetry
                    .counter(
                        LATE_SPANS,
                        "Spans of traces analysed already, passed on without a second analysis.",
                        &[("component", &self.id)],
                    )
                    .add(n);
            }
            if traces.is_empty() {
                return Ok(());
            }
        }
        let misses = features::join(&mut traces, &self.store, &self.join, now);
        for (join, n) in [
            ("host", misses.host),
            ("kafka", misses.kafka),
            ("rabbitmq", misses.queue),
        ] {
            if n > 0 {
                self.telemetry
                    .counter(
                        JOIN_MISSES,
                        "Traces whose join with host, Kafka or RabbitMQ metrics found nothing while such metrics flow.",
                        &[("component", &self.id), ("join", join)],
                    )
                    .add(n);
            }
        }
        let (findings, errors) = self.planner.evaluate(&self.rules, &traces).await;
        for (rule, error) in errors {
            self.telemetry
                .counter(
                    RULE_ERRORS,
                    "Root-cause and alert rules that failed at run time, by rule.",
                    &[("component", &self.id), ("rule", &rule)],
                )
                .add(1);
            if self.rule_errors_logged.insert(rule.clone()) {
                tracing::warn!(processor = %self.id, %rule, %error, "A root-cause rule failed; the other rules still ran.");
            }
        }
        let mut hold: std::collections::HashSet<[u8; 16]> = std::collections::HashSet::new();
        let held_now: usize = self.held.iter().map(|h| h.traces).sum();
        let mut fed: Vec<(&str, &str, f64)> = Vec::new();
        for t in &traces {
            let v = verdict(t, findings.get(&t.trace_id), (self.min_share, self.min_ms));
            // Unexplained: no cause, or only the fallback that gateway logs or
            // metrics arriving later could replace; or a timeout, whose callee
            // was still running when the caller gave up: its spans come later.
            let unexplained = matches!(
                v.best.cause.as_str(),
                "unknown" | "slow_dependency" | "upstream_timeout"
            );
            if unexplained
                && !again
                && !t.continuation
                && !self.evidence_wait.is_zero()
                && held_now + hold.len() < self.max_held
            {
                hold.insert(t.id);
                continue;
            }
            for s in t.spans.iter().filter(|s| s.at != features::NOT_IN_BATCH) {
                fed.push((&s.service, &s.name, s.duration_ms));
                if let Some(tokens) = s.input_tokens {
                    let model = s.gen_ai_model.as_deref().unwrap_or("");
                    fed.push((features::PROMPT_BASELINE, model, tokens as f64));
                }
                if s.kind == "producer"
                    || (s.destination.is_some() && matches!(s.kind, "client" | "internal"))
                {
                    if let Some(one) = one_span(rs, s.at) {
                        self.store.remember_producer(t.id, s.span_id, one, now);
                    }
                }
            }
            let evidence = annotate(rs, t, &v);
            if self.store.keeps_views() {
                self.store.push_view(ui::view(t, &v, evidence));
            }
            self.analysed.add(1);
            self.store.push_event(
                RcaEvent {
                    time_ns: t.end_ns.max(1),
                    trace_id: t.id,
                    span_id: t.spans[t.root].span_id.to_be_bytes(),
                    cause: v.best.cause.clone(),
                    summary: v.best.summary.clone(),
                    route: t.route.clone().unwrap_or_default(),
                    service: t.spans[v.culprit].service.to_string(),
                    culprit_span_id: Hex16::of(t.spans[v.culprit].span_id).as_str().to_string(),
                    confidence: v.best.confidence,
                    rule: v.best.rule.clone(),
                },
                now,
            );
        }
        self.store.baselines.feed(now, fed.into_iter());
        if !hold.is_empty() {
            // The held traces leave this batch for one of their own, which
            // shares its acknowledgements.
            let held_rs = split_traces(rs, &hold);
            let held = batch.sibling_traces(held_rs);
            self.held.push(Held {
                due: Instant::now() + self.evidence_wait,
                batch: held,
                traces: hold.len(),
                ids: hold,
            });
            self.set_held_gauge();
        }
        Ok(())
    }

    /// The late spans `t` of an analysed trace as a trace of their own, when
    /// a remembered producer span of the trace sent the message one of them
    /// consumed: that span joins them, so the message's wait counts (a
    /// consumer behind a lagging group runs long after the sampler decided).
    /// The verdict is written on the top span of the late ones.
    fn continuation(&self, rs: &[ResourceSpans], t: &TraceRow) -> Option<TraceRow> {
        let ids: std::collections::HashSet<u64> = t.spans.iter().map(|s| s.span_id).collect();
        let mut producers: Vec<Arc<ResourceSpans>> = Vec::new();
        // The consumers of remembered messages and the late spans below them.
        let mut mine: std::collections::HashSet<u64> = std::collections::HashSet::new();
        for s in t.spans.iter().filter(|s| !ids.contains(&s.parent_id)) {
            if let Some(p) = self.store.producer(&t.id, s.parent_id) {
                producers.push(p);
                mine.insert(s.span_id);
            }
        }
        if producers.is_empty() {
            return None;
        }
        loop {
            let before = mine.len();
            for s in &t.spans {
                if mine.contains(&s.parent_id) {
                    mine.insert(s.span_id);
                }
            }
            if mine.len() == before {
                break;
            }
        }
        let picked: Vec<&features::SpanRow> = t
            .spans
            .iter()
            .filter(|s| mine.contains(&s.span_id))
            .collect();
        let mut sub: Vec<ResourceSpans> =
            picked.iter().filter_map(|s| one_span(rs, s.at)).collect();
        if sub.len() != picked.len() {
            return None;
        }
        let real = sub.len();
        sub.extend(producers.iter().map(|p| (**p).clone()));
        let mut c = features::traces(&sub, Some(&self.store.baselines), &self.route_map)
            .into_iter()
            .find(|x| x.id == t.id)?;
        // Back to the batch: the i-th resource of `sub` is the i-th late span.
        for row in &mut c.spans {
            row.at = if row.at.0 < real {
                picked[row.at.0].at
            } else {
                features::NOT_IN_BATCH
            };
        }
        c.root = (0..c.spans.len())
            .filter(|&i| c.spans[i].at != features::NOT_IN_BATCH)
            .min_by(|&a, &b| {
                (c.spans[a].depth, c.spans[a].start_ms)
                    .partial_cmp(&(c.spans[b].depth, c.spans[b].start_ms))
                    .unwrap_or(std::cmp::Ordering::Equal)
            })?;
        c.continuation = true;
        Some(c)
    }

    fn set_held_gauge(&self) {
        let n: usize = self.held.iter().map(|h| h.traces).sum();
        self.telemetry
            .gauge(
                HELD_TRACES,
                "Traces held by evidence_wait.",
                &[("component", &self.id)],
            )
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Analyse again, and pass on, the held traces that are due (all at a flush).
    async fn release_held(&mut self, now: Instant, all: bool, out: &mut Vec<Batch>) {
        let (due, keep): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| all || h.due <= now);
        self.held = keep;
        for mut h in due {
            if let Err(e) = self.analyse(&mut h.batch, true).await {
                tracing::warn!(processor = %self.id, error = %e.0, "Held traces could not be analysed again; passed on.");
            }
            out.push(h.batch);
        }
        self.set_held_gauge();
    }

    /// Log retention and evictions as self-metrics.
    fn retention_metrics(&mut self) {
        let now = now_ns();
        let (count, bytes) = self.store.evictions();
        let (was_count, was_bytes) =
            std::mem::replace(&mut self.reported_evictions, (count, bytes));
        for (reason, n) in [
            ("count", count.saturating_sub(was_count)),
            ("bytes", bytes.saturating_sub(was_bytes)),
        ] {
            self.telemetry
                .counter(
                    EVICTED_LOGS,
                    "Log records evicted before the window ended, by the limit that forced it (count or bytes).",
                    &[("component", &self.id), ("reason", reason)],
                )
                .add(n);
        }
        let (_, age) = self.store.log_retention(now);
        self.telemetry
            .gauge(
                LOG_RETENTION,
                "Age of the oldest log record held, in seconds.",
                &[("component", &self.id)],
            )
            .set(i64::try_from(age / 1_000_000_000).unwrap_or(i64::MAX));
    }

    async fn evaluate_alerts(&mut self, out: &mut Vec<Batch>) {
        let Some(alerting) = self.alerting.as_mut() else {
            return;
        };
        let now = alerts::wall_ns();
        let sent = alerting.evaluate(&self.store, now).await;
        for (rule, error) in std::mem::take(&mut alerting.errors) {
            self.telemetry
                .counter(
                    RULE_ERRORS,
                    "Root-cause and alert rules that failed at run time, by rule.",
                    &[("component", &self.id), ("rule", &rule)],
                )
                .add(1);
            if self.rule_errors_logged.insert(rule.clone()) {
                tracing::warn!(processor = %self.id, %rule, %error, "An alert rule failed; the other rules still ran.");
            }
        }
        for (alert, n) in alerting.firing() {
            self.telemetry
                .gauge(
                    ALERTS_FIRING,
                    "Alert instances firing, by alert.",
                    &[("component", &self.id), ("alert", &alert)],
                )
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        if sent.is_empty() {
            return;
        }
        for a in &sent {
            let name = a.labels.get("alertname").map_or("", String::as_str);
            let status = if a.firing { "firing" } else { "resolved" };
            tracing::info!(processor = %self.id, alert = %name, status, labels = ?a.labels, "Alert.");
            self.telemetry
                .counter(
                    ALERTS_SENT,
                    "Alert notifications emitted, by alert and status.",
                    &[("component", &self.id), ("alert", name), ("status", status)],
                )
                .add(1);
        }
        let records = sent.iter().map(|a| alerts::record(a, now)).collect();
        out.push(Batch::from_logs(vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "causeway".to_string())],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "causeway.alerts".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }]));
    }

    fn emit(&mut self, out: &mut Vec<Batch>) {
        let resource = Some(Resource {
            attributes: vec![kv("service.name", "causeway".to_string())],
            ..Default::default()
        });
        let scope = Some(InstrumentationScope {
            name: "causeway.rca".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        });
        if self.emit_logs {
            let events = self.store.take_events();
            if !events.is_empty() {
                let records = events
                    .into_iter()
                    .map(|e| LogRecord {
                        time_unix_nano: e.time_ns,
                        observed_time_unix_nano: now_ns(),
                        severity_number: 13,
                        severity_text: "WARN".into(),
                        body: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(e.summary.clone())),
                        }),
                        attributes: vec![
                            kv("rca.cause", e.cause),
                            kv("rca.route_id", e.route),
                            kv("rca.culprit.service", e.service),
                            kv("rca.culprit.span_id", e.culprit_span_id),
                            kv("rca.confidence", e.confidence),
                            kv("rca.rule", e.rule),
                            kv("event.name", "causeway.rca".to_string()),
                        ],
                        trace_id: e.trace_id.to_vec(),
                        span_id: e.span_id.to_vec(),
                        ..Default::default()
                    })
                    .collect();
                out.push(Batch::from_logs(vec![ResourceLogs {
                    resource: resource.clone(),
                    scope_logs: vec![ScopeLogs {
                        scope: scope.clone(),
                        log_records: records,
                        ..Default::default()
                    }],
                    ..Default::default()
                }]));
            }
        }
        if self.emit_metrics {
            if let Some(counts) = self.store.take_counts() {
                let t = now_ns();
                let points = counts
                    .into_iter()
                    .map(|((cause, route, service), n)| NumberDataPoint {
                        attributes: vec![
                            kv("cause", cause),
                            kv("route_id", route),
                            kv("service", service),
                        ],
                        time_unix_nano: t,
                        value: Some(number_data_point::Value::AsInt(
                            i64::try_from(n).unwrap_or(i64::MAX),
                        )),
                        ..Default::default()
                    })
                    .collect();
                out.push(Batch::from_metrics(vec![ResourceMetrics {
                    resource,
                    scope_metrics: vec![ScopeMetrics {
                        scope,
                        metrics: vec![Metric {
                            name: "causeway.rca.traces".into(),
                            description:
                                "Kept traces analysed, by root cause, route and culprit service."
                                    .into(),
                            unit: "{trace}".into(),
                            data: Some(metric::Data::Sum(Sum {
                                data_points: points,
                                aggregation_temporality: AggregationTemporality::Cumulative as i32,
                                is_monotonic: true,
                            })),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                }]));
            }
        }
    }
}

#[async_trait]
impl Processor for Correlate {
    fn accepts(&self) -> SignalSet {
        SignalSet::ALL
    }

    async fn process(
        &mut self,
        mut batch: Batch,
        out: &mut Vec<Batch>,
    ) -> Result<(), ProcessError> {
        match batch.signal() {
            Signal::Logs => match batch.to_logs_request() {
                Ok(req) => self.store.add_logs(&req.resource_logs, now_ns()),
                Err(e) => {
                    tracing::warn!(processor = %self.id, error = %e, "Logs not taken into the correlation state; passed on.")
                }
            },
            Signal::Metrics => match batch.to_metrics_request() {
                Ok(req) => self.store.add_metrics(&req.resource_metrics, now_ns()),
                Err(e) => {
                    tracing::warn!(processor = %self.id, error = %e, "Metrics not taken into the correlation state; passed on.")
                }
            },
            Signal::Traces => {
                self.analyse(&mut batch, false).await?;
                if batch.is_empty() {
                    // Every trace of it is held by `evidence_wait`.
                    return Ok(());
                }
            }
        }
        out.push(batch);
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        let held = self.held.iter().map(|h| h.due).min();
        let emit = (self.emit_logs || self.emit_metrics).then_some(self.next_emit);
        let emit = match (emit, held) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let alert = self.alerting.as_ref().map(|_| self.next_alert);
        match (emit, alert) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn on_tick(&mut self, now: Instant, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        if self.held.iter().any(|h| h.due <= now) {
            self.release_held(now, false, out).await;
        }
        if now >= self.next_emit {
            self.next_emit = now + EMIT_EVERY;
            self.emit(out);
            if self.emit_logs {
                self.retention_metrics();
            }
        }
        if self.alerting.is_some() && now >= self.next_alert {
            self.next_alert = now + self.alert_every;
            self.evaluate_alerts(out).await;
        }
        Ok(())
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        self.release_held(Instant::now(), true, out).await;
        self.emit(out);
        Ok(())
    }
}

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
//!
//! The flow, and the layers (each module imports only those below it):
//! trace → features → findings → verdict → annotations.
//! 1. [`model`]: trace rows, findings, verdicts, series, tables;
//! 2. [`analysis`]: spans to trace rows (critical path, layout, baselines)
//!    and the verdict; [`annotate`]: the verdict on the spans;
//! 3. [`store`]: the state, which knows no source;
//! 4. [`source`]: the evidence sources, each one file, behind one trait
//!    (what each reads of a log record, and the join with the records, too);
//! 5. [`rules`], [`alerts`], [`incidents`], [`page`]: the rule engine, the
//!    alert rules, incidents per route and the page's API, handed the
//!    sources' tables;
//! 6. [`config`] and [`registry`] (the sources, one line each);
//! 7. this module: the processor.

pub mod alerts;
pub mod analysis;
pub mod annotate;
pub mod config;
pub mod incidents;
pub mod model;
pub mod page;
pub mod registry;
pub mod rules;
pub mod source;
pub mod store;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, ProcessError, Processor, ProcessorFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Counter;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope};
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

use analysis::trace::RouteMap;
use analysis::verdict::{verdict, Enough};
use annotate::{annotate, kv};
use config::CorrelateConfig;
use model::cause::{Causes, UNKNOWN};
use model::trace::{SpanRef, SpanRow, NOT_IN_BATCH, PROMPT_BASELINE};
use model::{Finding, Hex16, RcaEvent, Rule, TraceRow, Verdict};
use source::{Correlation, Tick};
use std::collections::HashMap;
use store::{Limits, Store};

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

/// Open incidents.
pub const INCIDENTS_OPEN: &str = "causeway_correlate_incidents_open";
/// Incident records written, by state.
pub const INCIDENTS_WRITTEN: &str = "causeway_correlate_incident_records_total";
/// Routes with incident statistics.
pub const INCIDENT_ROUTES: &str = "causeway_correlate_incident_routes";
/// Routes dropped from the incident statistics, by reason (`evicted`, `refused`).
pub const INCIDENT_ROUTES_DROPPED: &str = "causeway_correlate_incident_routes_dropped_total";

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
        let correlation = ctx.shared.get_or_init(&id, || Correlation {
            store: Store::new(limits(&cfg)),
            sources: registry::sources(&cfg),
        });
        // The `correlated` sampling policy reads it through the narrow interface.
        ctx.shared
            .get_or_init::<crate::trouble::Published>(&id, || Box::new(correlation.clone()));
        let incidents = cfg.incidents.enabled.then(|| {
            ctx.shared
                .get_or_init(&id, || incidents::Incidents::new(&cfg.incidents))
        });
        let store = &correlation.store;
        store.views.keep(cfg.recent_traces);
        if store.views.claim_ui() {
            ctx.telemetry.add_api_source(Arc::new(page::Api {
                correlation: correlation.clone(),
                incidents: incidents.clone(),
                links: cfg.alerts.links.clone(),
                window_ns: nanos(cfg.window.get()),
            }));
        }
        let emit_logs = cfg.events
            && ctx.pipeline_signals.contains(Signal::Logs)
            && store.outbox.claim_log_events();
        let emit_metrics = cfg.events
            && ctx.pipeline_signals.contains(Signal::Metrics)
            && store.outbox.claim_metric_events();
        // Incidents are evaluated by the instance that emits the RCA log
        // records, as the alerts are.
        let incident_ticks = incidents
            .as_ref()
            .filter(|_| emit_logs)
            .map(|i| IncidentTicks::new(i.clone(), &cfg.incidents));
        if incidents.is_some() && !cfg.events {
            tracing::warn!(processor = %id, "Incidents are written as log records with the RCA records: with `events: false` none is written.");
        }
        // Alerts are evaluated by the instance that emits the RCA log records.
        let alerting =
            (emit_logs && !cfg.alerts.rules.is_empty()).then(|| alerts::Alerting::new(&cfg.alerts));
        if !cfg.alerts.rules.is_empty() && !ctx.pipeline_signals.contains(Signal::Logs) {
            tracing::debug!(processor = %id, "Alert rules are evaluated by this processor's instance in a logs pipeline.");
        }
        let (rules, causes) = rules_of(&cfg, &correlation, &ctx, &id, emit_logs);
        Ok(Box::new(Correlate {
            causes,
            lookback_ns: nanos(cfg.metric_lookback.get()),
            lookahead_ns: nanos(cfg.metric_lookahead.get()),
            enough: Enough {
                share: cfg.min_explained_share,
                ms: nanos(cfg.min_explained.get()) as f64 / 1e6,
            },
            route_map: RouteMap {
                fixed: cfg.route_map.clone().into_iter().collect(),
            },
            evidence_wait: cfg.evidence_wait.get(),
            max_held: cfg.max_held_traces,
            held: Vec::new(),
            reported_evictions: (0, 0),
            alert_every: cfg.alerts.interval.get(),
            sample_attrs: cfg
                .incidents
                .attributes
                .iter()
                .filter_map(|a| {
                    incidents::sample::Attr::parse(a, |n| correlation.sources.log_column(n))
                })
                .collect(),
            feed_incidents: incidents.clone().filter(|_| !cfg.incidents.from_records),
            record_incidents: incidents.filter(|_| cfg.incidents.from_records),
            incident_ticks,
            links: cfg.alerts.links.clone(),
            next_alert: Instant::now(),
            alerting,
            rules,
            planner: rules::Planner::new(&correlation.sources.tables()),
            telemetry: ctx.telemetry.clone(),
            correlation,
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

/// The rules a config runs (the built-ins, unless disabled, and the
/// user's) and what each built-in cause is. Every rule's error counter
/// exists from the start (at 0), so dashboards and alert rules on it see a
/// series before the first failure.
fn rules_of(
    cfg: &CorrelateConfig,
    correlation: &Correlation,
    ctx: &BuildContext,
    id: &str,
    emit_logs: bool,
) -> (Vec<Rule>, Causes) {
    let builtin: Vec<Rule> = rules::builtin_with(&cfg.retry_storm, cfg.min_message_wait)
        .into_iter()
        .chain(correlation.sources.rules())
        .collect();
    // Every built-in cause is described, whichever rules run.
    let causes = Rule::causes(&builtin);
    let rules = rules::assemble(builtin, cfg.builtin_rules, &cfg.rules);
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
                    &[("component", id), ("rule", rule)],
                )
                .add(0);
        }
    }
    (rules, causes)
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
fn one_span(rs: &[ResourceSpans], (ri, si, pi): SpanRef) -> Option<ResourceSpans> {
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

/// The incident evaluation of the instance that writes the records.
struct IncidentTicks {
    engine: Arc<incidents::Incidents>,
    every: Duration,
    next: Instant,
    /// How long an incident's alert stays valid unless written again (ns).
    valid_ns: u64,
    /// Routes evicted and refused, as last reported.
    dropped: (u64, u64),
}

impl IncidentTicks {
    /// Ticks of `engine` every `incidents.interval`.
    fn new(engine: Arc<incidents::Incidents>, cfg: &incidents::config::IncidentsConfig) -> Self {
        IncidentTicks {
            engine,
            every: cfg.interval.get(),
            next: Instant::now() + cfg.interval.get(),
            valid_ns: 4 * nanos(cfg.update_every.get().max(cfg.interval.get())),
            dropped: (0, 0),
        }
    }
}

/// Log records of causeway's own (alerts, incidents) as a batch, under
/// `service.name = causeway` and the scope `scope`.
fn own_logs(scope: &str, records: Vec<LogRecord>) -> Batch {
    Batch::from_logs(vec![ResourceLogs {
        resource: Some(Resource {
            attributes: vec![kv("service.name", "causeway".to_string())],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            scope: Some(InstrumentationScope {
                name: scope.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            }),
            log_records: records,
            ..Default::default()
        }],
        ..Default::default()
    }])
}

struct Correlate {
    id: String,
    /// The discriminators read of each analysed trace.
    sample_attrs: Vec<incidents::sample::Attr>,
    /// The incident state fed by the traces analysed here.
    feed_incidents: Option<Arc<incidents::Incidents>>,
    /// The incident state fed by `causeway.rca` records (`from_records`).
    record_incidents: Option<Arc<incidents::Incidents>>,
    incident_ticks: Option<IncidentTicks>,
    links: indexmap::IndexMap<String, String>,
    lookback_ns: u64,
    lookahead_ns: u64,
    /// How much of a trace a cause must explain.
    enough: Enough,
    route_map: RouteMap,
    evidence_wait: Duration,
    max_held: usize,
    held: Vec<Held>,
    reported_evictions: (u64, u64),
    alerting: Option<alerts::Alerting>,
    alert_every: Duration,
    next_alert: Instant,
    rules: Vec<Rule>,
    /// What each cause is.
    causes: Causes,
    /// The rules' plans, made once.
    planner: rules::Planner,
    correlation: Arc<Correlation>,
    emit_logs: bool,
    emit_metrics: bool,
    next_emit: Instant,
    telemetry: causeway_core::telemetry::Registry,
    rule_errors_logged: std::collections::HashSet<String>,
    analysed: Counter,
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
            self.join_held(rs);
        }
        let mut traces =
            analysis::trace::traces(rs, Some(&self.correlation.store.baselines), &self.route_map);
        if traces.is_empty() {
            return Ok(());
        }
        if !again {
            self.pass_late(rs, &mut traces, now);
            if traces.is_empty() {
                return Ok(());
            }
        }
        let findings = self.findings(&mut traces, now).await;
        let mut hold: std::collections::HashSet<[u8; 16]> = std::collections::HashSet::new();
        let held_now: usize = self.held.iter().map(|h| h.traces).sum();
        let mut fed: Vec<(&str, &str, f64)> = Vec::new();
        let mut samples = Vec::new();
        for t in &traces {
            let v = verdict(
                t,
                findings.get(&t.trace_id),
                &self.enough,
                Some(&self.correlation.store.peers),
                &self.causes,
            );
            // Unexplained: no cause, or only the fallback that gateway logs or
            // metrics arriving later could replace; or a timeout, whose callee
            // was still running when the caller gave up: its spans come later.
            let unexplained = self.causes.get(&v.best.cause).waits;
            if unexplained
                && !again
                && !t.continuation
                && !self.evidence_wait.is_zero()
                && held_now + hold.len() < self.max_held
            {
                hold.insert(t.id);
                continue;
            }
            self.learn(rs, t, now, &mut fed);
            samples.push(self.record(rs, t, &v, now));
        }
        self.correlation.store.baselines.feed(now, fed.into_iter());
        if let Some(i) = &self.feed_incidents {
            i.feed(samples);
        }
        if !hold.is_empty() {
            // The held traces leave this batch for one of their own.
            let held_rs = split_traces(rs, &hold);
            let held = batch.sibling_traces(held_rs);
            self.hold(held, hold);
        }
        Ok(())
    }

    /// Late spans of a trace still held join it: it is analysed whole when
    /// the hold ends (the spans of one trace leave an SDK in several
    /// exports, and a sampler may decide between them).
    fn join_held(&mut self, rs: &mut Vec<ResourceSpans>) {
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

    /// Late spans of a trace analysed already are passed on as they are:
    /// never analysed as a new (fragment of a) trace; except a consumer
    /// span whose message a remembered producer span of the trace sent (the
    /// message's wait is measured from there).
    fn pass_late(&self, rs: &[ResourceSpans], traces: &mut Vec<TraceRow>, now: u64) {
        let ids: Vec<[u8; 16]> = traces.iter().map(|t| t.id).collect();
        // Except a consumer span whose message a remembered producer span
        // of the trace sent: the message's wait is measured from there.
        let late = self.correlation.store.traces.mark(&ids, now);
        let mut n = 0u64;
        let mut continued = Vec::new();
        let mut k = 0;
        traces.retain(|t| {
            let keep = !late[k];
            k += 1;
            if !keep {
                match self.continuation(rs, t) {
                    Some(c) => {
                        let analysed = c.spans.iter().filter(|s| s.at != NOT_IN_BATCH).count();
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
            self.correlation.store.traces.count_late(n);
            self.telemetry
                .counter(
                    LATE_SPANS,
                    "Spans of traces analysed already, passed on without a second analysis.",
                    &[("component", &self.id)],
                )
                .add(n);
        }
    }

    /// Join the traces with the logs and every source, and run the rules.
    async fn findings(
        &mut self,
        traces: &mut [TraceRow],
        now: u64,
    ) -> HashMap<String, Vec<Finding>> {
        self.correlation
            .sources
            .join_logs(traces, &self.correlation.store);
        self.correlation.store.peers.learn_and_fill(traces);
        let tick = Tick {
            store: &self.correlation.store,
            now_ns: now,
            lookback_ns: self.lookback_ns,
            lookahead_ns: self.lookahead_ns,
        };
        let joined = self.correlation.sources.join(&tick, traces);
        for (join, n) in joined.misses {
            self.telemetry
                .counter(
                    JOIN_MISSES,
                    "Traces whose join with an evidence source (host, Kafka, RabbitMQ, ...) found nothing while its metrics flow.",
                    &[("component", &self.id), ("join", join)],
                )
                .add(n);
        }
        for (source, error) in joined.errors {
            if self.rule_errors_logged.insert(format!("source:{source}")) {
                tracing::warn!(processor = %self.id, %source, %error, "An evidence source's join failed; the others still ran.");
            }
        }
        let (findings, errors) = self
            .planner
            .evaluate(&self.rules, traces, joined.tables)
            .await;
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
        findings
    }

    /// What an analysed trace's spans teach: the baselines' samples (into
    /// `fed`) and the producer spans whose messages a later consumer may wait for.
    fn learn<'a>(
        &self,
        rs: &[ResourceSpans],
        t: &'a TraceRow,
        now: u64,
        fed: &mut Vec<(&'a str, &'a str, f64)>,
    ) {
        for s in t.spans.iter().filter(|s| s.at != NOT_IN_BATCH) {
            fed.push((&s.service, &s.op, s.duration_ms));
            if s.op != s.name {
                // The coarser baseline by name, used until the operation's own has enough samples.
                fed.push((&s.service, &s.name, s.duration_ms));
            }
            if let Some(tokens) = s.input_tokens {
                let model = s.gen_ai_model.as_deref().unwrap_or("");
                fed.push((PROMPT_BASELINE, model, tokens as f64));
            }
            if s.kind == "producer"
                || (s.destination.is_some() && matches!(s.kind, "client" | "internal"))
            {
                if let Some(one) = one_span(rs, s.at) {
                    self.correlation
                        .store
                        .traces
                        .remember_producer(t.id, s.span_id, one, now);
                }
            }
        }
    }

    /// Write a trace's verdict: on its spans, in the page's views, as an
    /// RCA event; its incident sample.
    fn record(
        &self,
        rs: &mut [ResourceSpans],
        t: &TraceRow,
        v: &Verdict,
        now: u64,
    ) -> incidents::sample::Sample {
        let sample = incidents::sample::Sample::of(
            rs,
            t,
            now,
            (&v.best.cause, &v.culprit_service, v.culprit_kind, v.culprit),
            &self.sample_attrs,
        );
        let extra = incidents::sample::record_attributes(&sample);
        let healthy = v.best.cause == UNKNOWN.name && !sample.failed;
        let evidence = annotate(rs, t, v, self.correlation.sources.log_columns());
        if self.correlation.store.views.keeps() {
            self.correlation.store.views.push(model::view::view(
                t,
                v,
                evidence,
                self.correlation.sources.log_columns(),
            ));
        }
        self.analysed.add(1);
        self.correlation.store.outbox.push(
            RcaEvent {
                time_ns: t.end_ns.max(1),
                trace_id: t.id,
                span_id: t.spans[t.root].span_id.to_be_bytes(),
                cause: v.best.cause.clone(),
                summary: v.best.summary.clone(),
                route: t.route.clone().unwrap_or_default(),
                service: v.culprit_service.clone(),
                culprit_kind: v.culprit_kind,
                culprit_span_id: Hex16::of(t.spans[v.culprit].span_id).as_str().to_string(),
                confidence: v.best.confidence,
                rule: v.best.rule.clone(),
                healthy,
                extra,
            },
            now,
        );
        sample
    }

    /// Hold traces (`held`, a batch of their own that shares the
    /// acknowledgements of the one they left) for `evidence_wait`.
    fn hold(&mut self, held: Batch, hold: std::collections::HashSet<[u8; 16]>) {
        self.held.push(Held {
            due: Instant::now() + self.evidence_wait,
            batch: held,
            traces: hold.len(),
            ids: hold,
        });
        self.set_held_gauge();
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
            if let Some(p) = self.correlation.store.traces.producer(&t.id, s.parent_id) {
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
        let picked: Vec<&SpanRow> = t
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
        let mut c = analysis::trace::traces(
            &sub,
            Some(&self.correlation.store.baselines),
            &self.route_map,
        )
        .into_iter()
        .find(|x| x.id == t.id)?;
        // Back to the batch: the i-th resource of `sub` is the i-th late span.
        for row in &mut c.spans {
            row.at = if row.at.0 < real {
                picked[row.at.0].at
            } else {
                NOT_IN_BATCH
            };
        }
        c.root = (0..c.spans.len())
            .filter(|&i| c.spans[i].at != NOT_IN_BATCH)
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
        let (count, bytes) = self.correlation.store.logs.evictions();
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
        let (_, age) = self.correlation.store.logs.retention(now);
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
        let sent = alerting
            .evaluate(&self.correlation.store, &self.correlation.sources, now)
            .await;
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
        out.push(own_logs("causeway.alerts", records));
    }

    /// Evaluate the incidents; what opened, was written again or resolved
    /// leaves as `causeway.incident` records and alerts.
    fn evaluate_incidents(&mut self, now: Instant, out: &mut Vec<Batch>) {
        let Some(t) = self.incident_ticks.as_mut() else {
            return;
        };
        t.next = now + t.every;
        let wall = alerts::wall_ns();
        let changes = t.engine.tick(wall);
        let counts = t.engine.counts();
        let c = &self.id;
        self.telemetry
            .gauge(INCIDENTS_OPEN, "Open incidents.", &[("component", c)])
            .set(i64::try_from(counts.open).unwrap_or(i64::MAX));
        self.telemetry
            .gauge(
                INCIDENT_ROUTES,
                "Routes with incident statistics (at most incidents.max_routes).",
                &[("component", c)],
            )
            .set(i64::try_from(counts.routes).unwrap_or(i64::MAX));
        for (reason, now_n, was) in [
            ("evicted", counts.evicted, t.dropped.0),
            ("refused", counts.refused, t.dropped.1),
        ] {
            self.telemetry
                .counter(
                    INCIDENT_ROUTES_DROPPED,
                    "Routes dropped from the incident statistics for room: evicted (never had a normal, no incident) or refused (no room).",
                    &[("component", c), ("reason", reason)],
                )
                .add(now_n.saturating_sub(was));
        }
        t.dropped = (counts.evicted, counts.refused);
        if changes.is_empty() {
            return;
        }
        let mut records = Vec::with_capacity(changes.len() * 2);
        for ch in &changes {
            let i = &ch.incident;
            tracing::info!(processor = %c, incident = %i.id, route = %i.route, state = ch.state, summary = %i.summary(&ch.explanation), "Incident.");
            self.telemetry
                .counter(
                    INCIDENTS_WRITTEN,
                    "Incident records written, by state (open, update, resolved).",
                    &[("component", c), ("state", ch.state)],
                )
                .add(1);
            records.push(incidents::record(ch, wall));
            records.push(alerts::record(
                &incidents::alert(ch, wall, t.valid_ns, &self.links),
                wall,
            ));
        }
        out.push(own_logs("causeway.incidents", records));
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
            let events = self.correlation.store.outbox.take_events();
            if !events.is_empty() {
                let records = events
                    .into_iter()
                    .map(|mut e| LogRecord {
                        time_unix_nano: e.time_ns,
                        observed_time_unix_nano: now_ns(),
                        // A healthy trace's record is INFO: nothing to explain.
                        severity_number: if e.healthy { 9 } else { 13 },
                        severity_text: if e.healthy { "INFO" } else { "WARN" }.into(),
                        body: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(e.summary.clone())),
                        }),
                        attributes: vec![
                            kv("rca.cause", e.cause),
                            kv("rca.route_id", e.route),
                            kv("rca.culprit.service", e.service),
                            kv("rca.culprit.kind", e.culprit_kind.to_string()),
                            kv("rca.culprit.span_id", e.culprit_span_id),
                            kv("rca.confidence", e.confidence),
                            kv("rca.rule", e.rule),
                            kv("event.name", "causeway.rca".to_string()),
                        ]
                        .into_iter()
                        .chain(std::mem::take(&mut e.extra))
                        .collect(),
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
            if let Some(counts) = self.correlation.store.outbox.take_counts() {
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
                Ok(req) => {
                    let now = now_ns();
                    self.correlation.add_logs(&req.resource_logs, now);
                    if let Some(i) = &self.record_incidents {
                        i.feed(
                            req.resource_logs
                                .iter()
                                .flat_map(|r| r.scope_logs.iter())
                                .flat_map(|sc| sc.log_records.iter())
                                .filter_map(|r| incidents::sample::from_record(r, now)),
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(processor = %self.id, error = %e, "Logs not taken into the correlation state; passed on.")
                }
            },
            Signal::Metrics => match batch.to_metrics_request() {
                Ok(req) => self
                    .correlation
                    .add_metrics(&req.resource_metrics, now_ns()),
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
        let incident = self.incident_ticks.as_ref().map(|t| t.next);
        [emit, alert, incident].into_iter().flatten().min()
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
        if self.incident_ticks.as_ref().is_some_and(|t| now >= t.next) {
            self.evaluate_incidents(now, out);
        }
        Ok(())
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        self.release_held(Instant::now(), true, out).await;
        self.emit(out);
        Ok(())
    }
}

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

pub mod config;
pub mod critical;
pub mod features;
pub mod rules;
pub mod store;
#[cfg(test)]
mod tests;

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
use features::TraceRow;
use rules::{Finding, Rule};
use store::{Limits, RcaEvent, Store};

/// Traces analysed, by cause.
pub const ANALYSED: &str = "causeway_rca_traces_total";
/// Rule failures at run time, by rule.
pub const RULE_ERRORS: &str = "causeway_rca_rule_errors_total";

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
        let emit_logs =
            cfg.events && ctx.pipeline_signals.contains(Signal::Logs) && store.claim_log_events();
        let emit_metrics = cfg.events
            && ctx.pipeline_signals.contains(Signal::Metrics)
            && store.claim_metric_events();
        Ok(Box::new(Correlate {
            rules: rules::assemble(cfg.builtin_rules, &cfg.rules),
            lookback_ns: nanos(cfg.metric_lookback.get()),
            lookahead_ns: nanos(cfg.metric_lookahead.get()),
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

struct Correlate {
    id: String,
    rules: Vec<Rule>,
    store: Arc<Store>,
    lookback_ns: u64,
    lookahead_ns: u64,
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
    /// The winning finding (cause `unknown` when no rule matched).
    pub best: Finding,
    /// The others, best first.
    pub alternatives: Vec<Finding>,
    /// Culprit span index.
    pub culprit: usize,
}

/// Pick the verdict of a trace from its findings.
pub fn verdict(t: &TraceRow, findings: Option<&Vec<Finding>>) -> Verdict {
    let mut all = findings.cloned().unwrap_or_default();
    let best = if all.is_empty() {
        let c = &t.spans[t.culprit];
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
            culprit_span_id: None,
            evidence: None,
            user: false,
        }
    } else {
        all.remove(0)
    };
    let culprit = best
        .culprit_span_id
        .as_ref()
        .and_then(|id| t.spans.iter().position(|s| &s.span_id == id))
        .unwrap_or(t.culprit);
    Verdict {
        best,
        alternatives: all,
        culprit,
    }
}

/// The evidence of a verdict, as JSON (bounded).
pub fn evidence_json(t: &TraceRow, v: &Verdict) -> String {
    let c = &t.spans[v.culprit];
    let logs: Vec<serde_json::Value> = t
        .logs
        .iter()
        .filter(|l| l.gateway || l.severity >= 13 || l.error_type.is_some())
        .take(5)
        .map(|l| {
            serde_json::json!({
                "time_unix_nano": l.time_ns, "gateway": l.gateway, "service": l.service, "route": l.route,
                "status": l.status, "rate_limit_rule": l.rate_limit_rule, "circuit_state": l.circuit_state,
                "response_flags": l.response_flags, "upstream": l.upstream, "duration_ms": l.duration_ms,
                "body": l.body.chars().take(200).collect::<String>(),
            })
        })
        .collect();
    let mut metrics: Vec<serde_json::Value> = t
        .kafka
        .iter()
        .map(|k| {
            serde_json::json!({
                "kind": "kafka", "topic": k.topic, "group": k.group, "lag": k.lag, "lag_trend": k.lag_trend, "lag_seconds": k.lag_seconds,
                "status": k.status, "alarm": k.alarm, "retry_storm": k.retry_storm, "produce_rate": k.produce_rate,
                "time_unix_nano": k.time_ns,
            })
        })
        .collect();
    metrics.extend(t.hosts.iter().map(|h| {
        serde_json::json!({
            "kind": "host", "host": h.host, "culprit": h.culprit, "cpu_busy": h.cpu_busy, "iowait": h.iowait,
            "mem_used": h.mem_used, "mem_available_ratio": h.mem_available_ratio, "disk_util": h.disk_util,
            "psi_cpu": h.psi_cpu, "psi_memory": h.psi_memory, "psi_io": h.psi_io, "time_unix_nano": h.time_ns,
        })
    }));
    let route = t.route_stats.as_ref().map(|(r, s)| {
        serde_json::json!({
            "route": r, "requests": s.requests, "s429": s.s429, "s503": s.s503, "s504": s.s504, "s5xx": s.s5xx,
            "not_closed": s.not_closed, "top_rule": s.top_rule, "circuit_state": s.circuit_state, "p99_ms": s.p99_ms,
        })
    });
    serde_json::json!({
        "rule": v.best.rule,
        "detail": v.best.evidence,
        "spans": [{
            "span_id": c.span_id, "service": c.service, "name": c.name, "self_ms": c.self_ms,
            "duration_ms": c.duration_ms, "status": c.status, "host": c.host,
        }],
        "logs": logs,
        "metrics": metrics,
        "route_stats": route,
        "alternatives": v.alternatives.iter().take(4).map(|a| serde_json::json!({
            "cause": a.cause, "confidence": a.confidence, "rule": a.rule,
        })).collect::<Vec<_>>(),
    })
    .to_string()
}

/// Write the verdict on the trace's spans.
pub fn annotate(rs: &mut [ResourceSpans], t: &TraceRow, v: &Verdict) {
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
                any_value::Value::StringValue(culprit.span_id.clone()),
            );
            set_attr(
                a,
                "rca.rule",
                any_value::Value::StringValue(v.best.rule.clone()),
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
                .map(|x| format!("{}:{:.2}", x.cause, x.confidence))
                .collect();
            set_attr(
                a,
                "rca.alternatives",
                any_value::Value::StringValue(alts.join(",")),
            );
        }
    }
}

impl Correlate {
    async fn analyse(&mut self, batch: &mut Batch) -> Result<(), ProcessError> {
        let now = now_ns();
        let rs = match batch.traces_mut() {
            Ok(Some(rs)) => rs,
            Ok(None) => return Ok(()),
            Err(e) => return Err(ProcessError(Box::new(e))),
        };
        let mut traces = features::traces(rs);
        if traces.is_empty() {
            return Ok(());
        }
        features::join(
            &mut traces,
            &self.store,
            self.lookback_ns,
            self.lookahead_ns,
            now,
        );
        let (findings, errors) = rules::evaluate(&self.rules, &traces).await;
        for (rule, error) in errors {
            self.telemetry
                .counter(
                    RULE_ERRORS,
                    "Root-cause rules that failed at run time, by rule.",
                    &[("component", &self.id), ("rule", &rule)],
                )
                .add(1);
            if self.rule_errors_logged.insert(rule.clone()) {
                tracing::warn!(processor = %self.id, %rule, %error, "A root-cause rule failed; the other rules still ran.");
            }
        }
        for t in &traces {
            let v = verdict(t, findings.get(&t.trace_id));
            annotate(rs, t, &v);
            self.analysed.add(1);
            let mut root_id = [0u8; 8];
            if let Ok(b) = hex::decode(&t.spans[t.root].span_id) {
                if b.len() == 8 {
                    root_id.copy_from_slice(&b);
                }
            }
            self.store.push_event(RcaEvent {
                time_ns: t.end_ns.max(1),
                trace_id: t.id,
                span_id: root_id,
                cause: v.best.cause.clone(),
                summary: v.best.summary.clone(),
                route: t.route.clone().unwrap_or_default(),
                service: t.spans[v.culprit].service.to_string(),
                culprit_span_id: t.spans[v.culprit].span_id.clone(),
                confidence: v.best.confidence,
                rule: v.best.rule.clone(),
            });
        }
        Ok(())
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
            Signal::Traces => self.analyse(&mut batch).await?,
        }
        out.push(batch);
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        (self.emit_logs || self.emit_metrics).then_some(self.next_emit)
    }

    async fn on_tick(&mut self, now: Instant, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        self.next_emit = now + EMIT_EVERY;
        self.emit(out);
        Ok(())
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        self.emit(out);
        Ok(())
    }
}

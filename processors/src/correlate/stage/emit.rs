//! The emission stage, every second: the RCA log records (the first logs
//! pipeline's instance) and the `causeway.rca.traces` counter (the first
//! metrics pipeline's), and the log window's retention as self-metrics.

use async_trait::async_trait;
use causeway_core::telemetry::Registry;
use causeway_core::Batch;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::Stage;
use crate::correlate::annotate::kv;
use crate::correlate::model::now_ns;
use crate::correlate::source::Correlation;

causeway_core::metrics! {
    /// Log records evicted before the window ended, by the limit that forced it (count or bytes).
    pub EvictedLogs: counter = "causeway_correlate_evicted_log_records_total";
    /// Age of the oldest log record held, in seconds.
    pub LogRetention: gauge = "causeway_correlate_log_retention_seconds";
}

/// How often RCA events are emitted.
const EMIT_EVERY: Duration = Duration::from_secs(1);

/// The emission.
pub struct Emit {
    pub(crate) id: String,
    pub(crate) telemetry: Registry,
    pub(crate) correlation: Arc<Correlation>,
    pub(crate) emit_logs: bool,
    pub(crate) emit_metrics: bool,
    pub(crate) next_emit: Instant,
    pub(crate) reported_evictions: (u64, u64),
}

impl Emit {
    /// Emission by this instance of what it claimed (logs, metrics).
    pub fn new(
        (id, telemetry, correlation): (String, Registry, Arc<Correlation>),
        emit_logs: bool,
        emit_metrics: bool,
    ) -> Self {
        Emit {
            id,
            telemetry,
            correlation,
            emit_logs,
            emit_metrics,
            next_emit: Instant::now() + EMIT_EVERY,
            reported_evictions: (0, 0),
        }
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
                .counter(EvictedLogs, &[("component", &self.id), ("reason", reason)])
                .add(n);
        }
        let (_, age) = self.correlation.store.logs.retention(now);
        self.telemetry
            .gauge(LogRetention, &[("component", &self.id)])
            .set(i64::try_from(age / 1_000_000_000).unwrap_or(i64::MAX));
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
impl Stage for Emit {
    fn due(&self) -> Option<Instant> {
        (self.emit_logs || self.emit_metrics).then_some(self.next_emit)
    }

    async fn run(&mut self, now: Instant, out: &mut Vec<Batch>) {
        self.next_emit = now + EMIT_EVERY;
        self.emit(out);
        if self.emit_logs {
            self.retention_metrics();
        }
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) {
        self.emit(out);
    }
}

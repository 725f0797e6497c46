//! An analysed trace as the built-in page shows it.

use std::sync::Arc;

use super::table::{Cells, Column};
use super::trace::{Hex16, TraceRow};
use super::Verdict;

/// Spans kept per trace for the waterfall (the critical ones first).
pub const MAX_SPANS: usize = 300;
/// Log records kept per trace.
pub const MAX_LOGS: usize = 50;

/// One span of a kept trace.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpanView {
    /// Span id (hex).
    pub span_id: String,
    /// Parent id (hex, "" for a root).
    pub parent_id: String,
    /// `service.name`.
    pub service: Arc<str>,
    /// Span name.
    pub name: String,
    /// server, client, producer, consumer, internal.
    pub kind: &'static str,
    /// Start relative to the trace (ms).
    pub start_ms: f64,
    /// Duration (ms).
    pub duration_ms: f64,
    /// Self time on the critical path (ms).
    pub self_ms: f64,
    /// On the critical path.
    pub critical: bool,
    /// unset, ok, error.
    pub status: &'static str,
}

/// A log record of a kept trace, as written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogView {
    /// Time relative to the trace's start (ms).
    pub at_ms: f64,
    /// `service.name`.
    pub service: String,
    /// What the sources read of it (their `logs` columns that have a
    /// value: a gateway's line has `gateway`, `status`, `route`, ...).
    #[serde(flatten)]
    pub fields: serde_json::Map<String, serde_json::Value>,
    /// The body.
    pub body: String,
}

/// An analysed trace as the page shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TraceView {
    /// Trace id (hex).
    pub trace_id: String,
    /// Start (ms since the epoch).
    pub start_unix_ms: f64,
    /// Duration (ms).
    pub duration_ms: f64,
    /// Route.
    pub route: Option<String>,
    /// The request failed.
    pub failed: bool,
    /// The final status.
    pub final_status: Option<i64>,
    /// Cause.
    pub cause: String,
    /// Rule.
    pub rule: String,
    /// Summary.
    pub summary: String,
    /// Why this cause won over the others.
    pub reason: String,
    /// Confidence.
    pub confidence: f64,
    /// Culprit span id (hex).
    pub culprit_span_id: String,
    /// Culprit service.
    pub culprit_service: Arc<str>,
    /// Culprit kind (service, callee, dependency, ...).
    pub culprit_kind: super::cause::CulpritKind,
    /// Spans (at most [`MAX_SPANS`]).
    pub spans: Vec<SpanView>,
    /// Spans left out.
    pub spans_left_out: usize,
    /// Log records (at most [`MAX_LOGS`]).
    pub logs: Vec<LogView>,
    /// `rca.evidence` (JSON text; parsed when the trace is asked for).
    #[serde(skip)]
    pub evidence: String,
}

/// The view of an analysed trace, with the evidence written on it.
/// `log_columns` are the sources' columns of `logs`, shown with each record.
pub fn view(
    t: &TraceRow,
    v: &Verdict,
    evidence: String,
    log_columns: &[&Column<TraceRow>],
) -> TraceView {
    let mut order: Vec<usize> = (0..t.spans.len())
        .filter(|&i| t.spans[i].at != super::trace::NOT_IN_BATCH)
        .collect();
    // The critical spans first, then the longest, when a trace is too big.
    if order.len() > MAX_SPANS {
        order.sort_by(|&a, &b| {
            t.spans[b]
                .critical
                .cmp(&t.spans[a].critical)
                .then(t.spans[b].duration_ms.total_cmp(&t.spans[a].duration_ms))
        });
    }
    let left_out = order.len().saturating_sub(MAX_SPANS);
    order.truncate(MAX_SPANS);
    order.sort_by(|&a, &b| t.spans[a].start_ms.total_cmp(&t.spans[b].start_ms));
    let hex = |id: u64| {
        if id == 0 {
            String::new()
        } else {
            Hex16::of(id).as_str().to_string()
        }
    };
    let culprit = &t.spans[v.culprit];
    let start_ns = t.start_ns as f64;
    TraceView {
        trace_id: t.trace_id.clone(),
        start_unix_ms: t.start_unix_ms,
        duration_ms: t.duration_ms,
        route: t.route.clone(),
        failed: t.failed,
        final_status: t.final_status,
        cause: v.best.cause.clone(),
        rule: v.best.rule.clone(),
        summary: v.best.summary.clone(),
        reason: v.reason.clone(),
        confidence: v.best.confidence,
        culprit_span_id: hex(culprit.span_id),
        culprit_service: v.culprit_service.as_str().into(),
        culprit_kind: v.culprit_kind,
        spans: order
            .into_iter()
            .map(|i| {
                let s = &t.spans[i];
                SpanView {
                    span_id: hex(s.span_id),
                    parent_id: hex(s.parent_id),
                    service: s.service.clone(),
                    name: s.name.clone(),
                    kind: s.kind.as_str(),
                    start_ms: s.start_ms,
                    duration_ms: s.duration_ms,
                    self_ms: s.self_ms,
                    critical: s.critical,
                    status: s.status.as_str(),
                }
            })
            .collect(),
        spans_left_out: left_out,
        logs: t
            .logs
            .iter()
            .take(MAX_LOGS)
            .enumerate()
            .map(|(i, l)| LogView {
                at_ms: (l.time_ns as f64 - start_ns) / 1e6,
                service: l.service.to_string(),
                fields: match serde_json::to_value(Cells {
                    row: t,
                    i,
                    cols: log_columns,
                }) {
                    Ok(serde_json::Value::Object(m)) => m,
                    _ => serde_json::Map::new(),
                },
                body: l.body.clone(),
            })
            .collect(),
        evidence,
    }
}

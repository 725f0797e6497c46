//! The annotations of an analysed trace: its verdict written on its spans
//! (`rca.*`), and its evidence as bounded JSON.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;

use super::model::cause::CulpritKind;
use super::model::table::{Cells, Column};
use super::model::{Hex16, Joined, SpanFacts, TraceRow, Verdict};

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

/// An attribute.
pub fn kv(k: &str, v: impl IntoAny) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(v.any()),
        }),
        ..Default::default()
    }
}

/// Set an attribute, replacing one of the same key.
pub fn set_attr(attrs: &mut Vec<KeyValue>, k: &str, v: any_value::Value) {
    attrs.retain(|a| a.key != k);
    attrs.push(kv(k, v));
}

/// `rca.evidence`.
#[derive(serde::Serialize)]
struct Evidence<'a> {
    rule: &'a str,
    explained_ms: f64,
    explains_failure: bool,
    detail: Option<&'a str>,
    spans: [EvSpan<'a>; 1],
    logs: Vec<EvLog<'a>>,
    metrics: Vec<Tagged<'a>>,
    #[serde(flatten)]
    fields: std::collections::BTreeMap<&'a str, Fact<'a>>,
    alternatives: Vec<EvAlt<'a>>,
}
/// A field of the evidence: a source's own, or what it knows of the culprit span.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum Fact<'a> {
    Field(&'a serde_json::Value),
    Span(&'a SpanFacts),
}
/// A joined row, its `kind` first.
#[derive(serde::Serialize)]
struct Tagged<'a> {
    kind: &'a str,
    #[serde(flatten)]
    row: &'a serde_json::Value,
}
/// The culprit span in `rca.evidence`.
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
/// A log record in `rca.evidence`.
#[derive(serde::Serialize)]
struct EvLog<'a> {
    time_unix_nano: u64,
    service: &'a str,
    /// The sources' `logs` columns that have a value (a gateway's line:
    /// `gateway`, `route`, `status`, `rate_limit_rule`, ...).
    #[serde(flatten)]
    fields: Cells<'a, TraceRow>,
    body: &'a str,
}
/// An alternative cause in `rca.evidence`.
#[derive(serde::Serialize)]
struct EvAlt<'a> {
    cause: &'a str,
    confidence: f64,
    rule: &'a str,
    explained_ms: f64,
    summary: &'a str,
}

/// The evidence of a verdict as JSON, bounded: the culprit span, up to 5
/// telling log records (bodies cut to 200 characters), the metric rows
/// joined, the route's statistics and up to 4 alternatives. A record tells
/// when a source read it (a gateway's line), it is a warning or worse, or
/// it names an error; `log_columns` are the sources' columns of `logs`.
pub fn evidence_json<'a>(
    t: &'a TraceRow,
    v: &'a Verdict,
    log_columns: &'a [&'a Column<TraceRow>],
) -> String {
    let c = &t.spans[v.culprit];
    let v_culprit = v.culprit;
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
            status: c.status.as_str(),
            host: &c.host,
        }],
        logs: t
            .logs
            .iter()
            .enumerate()
            .filter(|(_, l)| !l.parts.is_empty() || l.severity >= 13 || l.error_type.is_some())
            .take(5)
            .map(|(i, l)| EvLog {
                time_unix_nano: l.time_ns,
                service: &l.service,
                fields: Cells {
                    row: t,
                    i,
                    cols: log_columns,
                },
                body: &l.body[..cut(&l.body)],
            })
            .collect(),
        metrics: t
            .joined
            .iter()
            .filter_map(|j| match j {
                Joined::Metric(kind, row) => Some(Tagged { kind, row }),
                Joined::Field(..) | Joined::Span(..) => None,
            })
            .collect(),
        fields: t
            .joined
            .iter()
            .filter_map(|j| match j {
                Joined::Field(k, v) => Some((*k, Fact::Field(v))),
                Joined::Span(i, k, v) if *i == v_culprit => Some((*k, Fact::Span(v))),
                Joined::Metric(..) | Joined::Span(..) => None,
            })
            .collect(),
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
pub fn annotate(
    rs: &mut [ResourceSpans],
    t: &TraceRow,
    v: &Verdict,
    log_columns: &[&Column<TraceRow>],
) -> String {
    let route = t.route.clone().unwrap_or_default();
    let evidence = evidence_json(t, v, log_columns);
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
            root_attributes(a, t, v, &route, &evidence);
        }
    }
    evidence
}

/// The verdict's attributes on the trace's root span.
fn root_attributes(a: &mut Vec<KeyValue>, t: &TraceRow, v: &Verdict, route: &str, evidence: &str) {
    let culprit = &t.spans[v.culprit];
    if t.continuation {
        // The verdict of spans that came after their trace's: it
        // supersedes the one on the trace's root.
        set_attr(a, "rca.continuation", any_value::Value::BoolValue(true));
    }
    set_str(a, "rca.cause", v.best.cause.clone());
    set_str(a, "rca.summary", v.best.summary.clone());
    set_attr(
        a,
        "rca.confidence",
        any_value::Value::DoubleValue(v.best.confidence),
    );
    set_str(a, "rca.culprit.service", v.culprit_service.clone());
    set_str(a, "rca.culprit.kind", v.culprit_kind.to_string());
    match v.culprit_kind {
        CulpritKind::Host if !culprit.host.is_empty() => set_attr(
            a,
            "rca.culprit.host",
            any_value::Value::StringValue(culprit.host.to_string()),
        ),
        CulpritKind::Dependency => {
            for (k, val) in [
                ("rca.culprit.db_system", &culprit.db_system),
                ("rca.culprit.messaging_system", &culprit.messaging_system),
                ("rca.culprit.server_address", &culprit.server_address),
            ] {
                if let Some(x) = val {
                    set_attr(a, k, any_value::Value::StringValue(x.clone()));
                }
            }
        }
        _ => {}
    }
    // What a source knows of the culprit span (its code): each plain value.
    for kv in culprit_attributes(t, v.culprit, false) {
        if let Some(x) = kv.value.and_then(|x| x.value) {
            set_attr(a, &kv.key, x);
        }
    }
    set_str(
        a,
        "rca.culprit.span_id",
        Hex16::of(culprit.span_id).as_str().to_string(),
    );
    set_str(a, "rca.rule", v.best.rule.clone());
    set_str(a, "rca.reason", v.reason.clone());
    set_attr(
        a,
        "rca.explained_share",
        any_value::Value::DoubleValue(
            (v.best.explained_ms / t.duration_ms.max(1e-6) * 1000.0).round() / 1000.0,
        ),
    );
    set_str(a, "rca.route_id", route.to_string());
    set_str(a, "rca.evidence", evidence.to_string());
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
    set_str(a, "rca.alternatives", alts.join(","));
}

/// Set string attribute `key` to `value`.
fn set_str(a: &mut Vec<KeyValue>, key: &str, value: String) {
    set_attr(a, key, any_value::Value::StringValue(value));
}

/// What the sources know of span `culprit` (its code): each plain value as
/// `rca.{key}.{field}`; with `lists`, each list too, as JSON
/// (`rca.code.top_own`: the top frames, for the RCA log record).
pub fn culprit_attributes(t: &TraceRow, culprit: usize, lists: bool) -> Vec<KeyValue> {
    let mut out = Vec::new();
    for j in &t.joined {
        let Joined::Span(i, key, val) = j else {
            continue;
        };
        if *i != culprit {
            continue;
        }
        for (k, x) in val.as_object().into_iter().flatten() {
            let value = match x {
                serde_json::Value::String(s) => any_value::Value::StringValue(s.clone()),
                serde_json::Value::Number(n) if n.is_i64() => {
                    any_value::Value::IntValue(n.as_i64().unwrap_or(0))
                }
                serde_json::Value::Number(n) => {
                    any_value::Value::DoubleValue(n.as_f64().unwrap_or(0.0))
                }
                serde_json::Value::Array(_) if lists => {
                    any_value::Value::StringValue(x.to_string())
                }
                _ => continue,
            };
            out.push(KeyValue {
                key: format!("rca.{key}.{k}"),
                value: Some(AnyValue { value: Some(value) }),
                ..Default::default()
            });
        }
    }
    out
}

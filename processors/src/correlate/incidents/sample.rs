//! What the incident engine takes of one analysed trace: its route, how
//! long it took and whether it failed, its weight (the sampler's
//! `sampling.adjusted_count`), its verdict, the values of the configured
//! attributes, and the levels of the evidence joined to it. The same
//! sample travels as the attributes of its `causeway.rca` log record, so a
//! scaled-out tier's alerts instance rebuilds it from there.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use serde::{Deserialize, Serialize};

use crate::correlate::annotate::kv;
use crate::correlate::model::table::Column;
use crate::correlate::model::trace::NOT_IN_BATCH;
use crate::correlate::model::{Joined, TraceRow};

/// Attributes a sample carries at most.
const MAX_ATTRS: usize = 64;
/// Evidence levels a sample carries at most.
const MAX_LEVELS: usize = 48;
/// String fields of a joined evidence row that name what it measures (the
/// others are per-trace detail).
const IDENTITY: &[&str] = &[
    "system", "address", "host", "topic", "group", "queue", "vhost", "cluster", "stream",
    "consumer", "instance",
];
/// Between a level's family (a service's code) and a function: a function
/// the family's normal samples never had held no time then.
pub const FUNCTION: &str = " fn ";
/// Numeric fields of a joined row that are not levels.
const NOT_LEVELS: &[&str] = &["time_unix_nano", "partitions", "port"];

/// One analysed trace, as the incident engine sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// When it was analysed (ns since the epoch).
    pub time_ns: u64,
    /// When the trace started (ns).
    pub start_ns: u64,
    /// Hex trace id.
    pub trace_id: String,
    /// Its route.
    pub route: String,
    /// Root to last end (ms).
    pub duration_ms: f64,
    /// The request failed (5xx, 429, a failed root or entry span).
    pub failed: bool,
    /// Traces it stands for (the sampler's `sampling.adjusted_count`, else 1).
    pub weight: f64,
    /// Its cause.
    pub cause: String,
    /// The culprit service.
    pub culprit_service: String,
    /// The culprit's kind.
    pub culprit_kind: String,
    /// The service whose span the culprit is (where it happened).
    pub at_service: String,
    /// The configured attributes' values (`service.version` → `2.4.1`).
    pub attrs: Vec<(String, String)>,
    /// Levels of the evidence joined to it (`dependency redis 127.0.0.1:6379 miss_ratio` → 0.8).
    pub levels: Vec<(String, f64)>,
}

impl Sample {
    /// The sample of an analysed trace: `now_ns`, its verdict's cause,
    /// culprit service and kind, and the culprit span's index.
    pub fn of(
        rs: &[ResourceSpans],
        t: &TraceRow,
        now_ns: u64,
        (cause, culprit_service, culprit_kind, culprit): (&str, &str, &str, usize),
        wanted: &[Attr],
    ) -> Sample {
        Sample {
            time_ns: now_ns,
            start_ns: t.start_ns,
            trace_id: t.trace_id.clone(),
            route: t.route.clone().unwrap_or_default(),
            duration_ms: t.duration_ms,
            failed: t.failed,
            weight: weight(rs, t),
            cause: cause.to_string(),
            culprit_service: culprit_service.to_string(),
            culprit_kind: culprit_kind.to_string(),
            at_service: t
                .spans
                .get(culprit)
                .map(|s| s.service.to_string())
                .unwrap_or_default(),
            attrs: attributes(rs, t, wanted),
            levels: levels(t),
        }
    }
}

/// Where a discriminator's value is read.
#[derive(Debug, Clone)]
pub enum Attr {
    /// A resource attribute of any span.
    Resource(String),
    /// A span attribute of any span.
    Span(String),
    /// A column of the trace's log records (`logs`: the gateway's
    /// `upstream`, `rate_limit_rule`, `status`, ...).
    Log(&'static Column<TraceRow>),
}

impl PartialEq for Attr {
    fn eq(&self, other: &Attr) -> bool {
        self.name() == other.name()
    }
}

impl Attr {
    /// Whether `s` is written as `resource.k`, `span.k` or `log.f`.
    pub fn well_formed(s: &str) -> bool {
        ["resource.", "span.", "log."]
            .iter()
            .any(|p| s.strip_prefix(p).is_some_and(|k| !k.is_empty()))
    }

    /// `resource.k`, `span.k`, `log.f` (`f` a column of `logs`, found by
    /// `log_column`).
    pub fn parse(
        s: &str,
        log_column: impl Fn(&str) -> Option<&'static Column<TraceRow>>,
    ) -> Option<Attr> {
        if let Some(k) = s.strip_prefix("resource.").filter(|k| !k.is_empty()) {
            return Some(Attr::Resource(k.to_string()));
        }
        if let Some(k) = s.strip_prefix("span.").filter(|k| !k.is_empty()) {
            return Some(Attr::Span(k.to_string()));
        }
        Some(Attr::Log(log_column(s.strip_prefix("log.")?)?))
    }

    /// The name the value of a well-formed attribute `s` is reported under.
    pub fn name_of(s: &str) -> Option<String> {
        if !Attr::well_formed(s) {
            return None;
        }
        Some(match s.split_once('.') {
            Some(("resource" | "span", k)) => k.to_string(),
            _ => s.to_string(),
        })
    }

    /// The name a value is reported under (`service.version`, `log.upstream`).
    pub fn name(&self) -> String {
        match self {
            Attr::Resource(k) | Attr::Span(k) => k.clone(),
            Attr::Log(c) => format!("log.{}", c.name),
        }
    }
}

/// A value as a discriminator compares it ("" for none).
fn text(v: &AnyValue, key: &str) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) if key == "gen_ai.usage.input_tokens" => bucket(*i),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        _ => String::new(),
    }
}

/// A token count's power-of-two bucket (`1024-2047`).
fn bucket(n: i64) -> String {
    if n <= 0 {
        return "0".into();
    }
    let lo = 1i64 << (63 - n.leading_zeros());
    format!("{lo}-{}", lo.saturating_mul(2) - 1)
}

fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs.iter().find(|kv| kv.key == key)?.value.as_ref()
}

/// The configured attributes' values over a trace's spans and log records
/// (each distinct pair once, at most [`MAX_ATTRS`]).
pub fn attributes(rs: &[ResourceSpans], t: &TraceRow, wanted: &[Attr]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut push = |k: String, v: String| {
        if !v.is_empty() && out.len() < MAX_ATTRS && !out.iter().any(|(a, b)| *a == k && *b == v) {
            out.push((k, v));
        }
    };
    for s in t.spans.iter().filter(|s| s.at != NOT_IN_BATCH) {
        let (ri, si, pi) = s.at;
        let Some(r) = rs.get(ri) else { continue };
        let span = r.scope_spans.get(si).and_then(|sc| sc.spans.get(pi));
        for a in wanted {
            match a {
                Attr::Resource(k) => {
                    if let Some(v) = r.resource.as_ref().and_then(|res| find(&res.attributes, k)) {
                        push(k.clone(), text(v, k));
                    }
                }
                Attr::Span(k) => {
                    if let Some(v) = span.and_then(|sp| find(&sp.attributes, k)) {
                        push(k.clone(), text(v, k));
                    }
                }
                Attr::Log(_) => {}
            }
        }
    }
    for i in 0..t.logs.len() {
        for a in wanted {
            if let Attr::Log(c) = a {
                let v = (c.get)(t, i).text();
                if let Some(v) = v.filter(|v| !v.trim().is_empty() && v.trim() != "-") {
                    push(a.name(), v);
                }
            }
        }
    }
    out
}

/// The levels of the evidence joined to a trace: each numeric field of each
/// joined row, named by the row's kind, the fields naming what it measures,
/// and the field (`dependency redis 127.0.0.1:6379 miss_ratio`). A level
/// seen twice (two spans to one server) keeps its largest value.
pub fn levels(t: &TraceRow) -> Vec<(String, f64)> {
    let mut out: Vec<(String, f64)> = Vec::new();
    // What a source says of a span's code: the time each of its top
    // functions held (`code checkout fn main.parseAST ms`).
    for j in &t.joined {
        let Joined::Span(i, key, v) = j else { continue };
        let (Some(span), Some(ms), Some(top)) = (
            t.spans.get(*i),
            v["time_ms"].as_f64(),
            v["top_own"].as_array(),
        ) else {
            continue;
        };
        for f in top {
            let (Some(name), Some(share)) = (f["function"].as_str(), f["share"].as_f64()) else {
                continue;
            };
            let k = format!("{key} {}{FUNCTION}{name} ms", span.service);
            match out.iter().position(|(n, _)| *n == k) {
                Some(at) => out[at].1 += ms * share,
                None if out.len() < MAX_LEVELS => out.push((k, ms * share)),
                None => {}
            }
        }
    }
    for j in &t.joined {
        let Joined::Metric(kind, row) = j else {
            continue;
        };
        let Some(obj) = row.as_object() else { continue };
        let mut name = (*kind).to_string();
        for k in IDENTITY {
            if let Some(v) = obj
                .get(*k)
                .and_then(|v| v.as_str())
                .filter(|v| !v.is_empty())
            {
                name.push(' ');
                name.push_str(v);
            }
        }
        for (k, v) in obj {
            let Some(x) = v.as_f64().filter(|x| x.is_finite()) else {
                continue;
            };
            if NOT_LEVELS.contains(&k.as_str()) || v.is_boolean() {
                continue;
            }
            let key = format!("{name} {k}");
            match out.iter().position(|(n, _)| *n == key) {
                Some(at) => out[at].1 = out[at].1.max(x),
                None if out.len() < MAX_LEVELS => out.push((key, x)),
                None => {}
            }
        }
    }
    out
}

/// The `rca.*` attributes that carry a sample on its RCA record (besides
/// the cause, route and culprit it has already).
pub fn record_attributes(s: &Sample) -> Vec<KeyValue> {
    let mut out = vec![
        kv("rca.duration_ms", s.duration_ms),
        kv("rca.failed", s.failed),
        kv("rca.culprit.at_service", s.at_service.as_str()),
    ];
    if s.weight != 1.0 {
        out.push(kv("rca.weight", s.weight));
    }
    if !s.attrs.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> =
            s.attrs
                .iter()
                .fold(serde_json::Map::new(), |mut m, (k, v)| {
                    // Two values of one key (two spans): kept as a list.
                    match m.get_mut(k) {
                        Some(serde_json::Value::Array(a)) => a.push(v.clone().into()),
                        Some(x) => *x = serde_json::Value::Array(vec![x.clone(), v.clone().into()]),
                        None => {
                            m.insert(k.clone(), v.clone().into());
                        }
                    }
                    m
                });
        out.push(kv(
            "rca.attributes",
            serde_json::Value::Object(m).to_string(),
        ));
    }
    if !s.levels.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> = s
            .levels
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::json!(v)))
            .collect();
        out.push(kv("rca.levels", serde_json::Value::Object(m).to_string()));
    }
    out
}

/// A sample from a `causeway.rca` log record (`None`: not one, or one
/// without a route).
pub fn from_record(r: &LogRecord, now_ns: u64) -> Option<Sample> {
    let get = |k: &str| find(&r.attributes, k).and_then(|v| v.value.as_ref());
    let s = |k: &str| match get(k) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        _ => String::new(),
    };
    let f = |k: &str| match get(k) {
        Some(any_value::Value::DoubleValue(d)) => Some(*d),
        Some(any_value::Value::IntValue(i)) => Some(*i as f64),
        _ => None,
    };
    if s("event.name") != "causeway.rca" {
        return None;
    }
    let route = s("rca.route_id");
    if route.is_empty() {
        return None;
    }
    let duration_ms = f("rca.duration_ms")?;
    let mut attrs = Vec::new();
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_str(&s("rca.attributes")) {
        for (k, v) in m {
            match v {
                serde_json::Value::String(x) => attrs.push((k, x)),
                serde_json::Value::Array(a) => attrs.extend(
                    a.into_iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .map(|x| (k.clone(), x)),
                ),
                _ => {}
            }
        }
    }
    let mut levels = Vec::new();
    if let Ok(serde_json::Value::Object(m)) = serde_json::from_str(&s("rca.levels")) {
        levels.extend(m.into_iter().filter_map(|(k, v)| Some((k, v.as_f64()?))));
    }
    attrs.truncate(MAX_ATTRS);
    levels.truncate(MAX_LEVELS);
    Some(Sample {
        time_ns: now_ns,
        start_ns: r.time_unix_nano.saturating_sub((duration_ms * 1e6) as u64),
        trace_id: hex::encode(&r.trace_id),
        route,
        duration_ms,
        failed: matches!(get("rca.failed"), Some(any_value::Value::BoolValue(true))),
        weight: f("rca.weight")
            .filter(|w| *w > 0.0 && w.is_finite())
            .unwrap_or(1.0),
        cause: s("rca.cause"),
        culprit_service: s("rca.culprit.service"),
        culprit_kind: s("rca.culprit.kind"),
        at_service: s("rca.culprit.at_service"),
        attrs,
        levels,
    })
}

/// The `sampling.adjusted_count` of a trace's spans (the sampler writes it
/// on every span it kept probabilistically), else 1.
pub fn weight(rs: &[ResourceSpans], t: &TraceRow) -> f64 {
    let s = &t.spans[t.root];
    let (ri, si, pi) = s.at;
    rs.get(ri)
        .and_then(|r| r.scope_spans.get(si))
        .and_then(|sc| sc.spans.get(pi))
        .and_then(|sp| find(&sp.attributes, "sampling.adjusted_count"))
        .and_then(|v| match v.value {
            Some(any_value::Value::DoubleValue(d)) => Some(d),
            Some(any_value::Value::IntValue(i)) => Some(i as f64),
            _ => None,
        })
        .filter(|w| *w >= 1.0 && w.is_finite())
        .unwrap_or(1.0)
}

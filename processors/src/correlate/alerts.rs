//! Alert rules evaluated in the daemon over what the correlation state
//! holds: root-cause results, the latest metric points, and the tables of
//! the evidence sources (route windows, consumer groups, queues, ...).
//!
//! A rule is SQL (DataFusion) over these tables, built afresh at each
//! evaluation:
//! - `rca` (trace analysed in the window): `trace_id, route_id, cause, service, confidence,
//!   rule, time_ms`;
//! - `metrics` (latest point of each joined series): `name`, a column per key dimension of
//!   the sources (`queue, job, instance, host, topic, consumer_group, route_id`, ...), `labels,
//!   value, time_ms` (`labels`: the other attributes as `k=v,…`);
//! - each evidence source's (see `super::source`): `routes` (gateway), `kafka_groups`,
//!   `rabbitmq_queues`, `dependencies`, `nats_consumers`, documented with their source.
//!
//! Each row the query returns is one alert instance, as a PromQL result
//! series is: its columns become labels, except `value` (the number shown
//! by `{{ $value }}`) and `trace_id` (the exemplar). As in Prometheus, an
//! instance is pending until it has been returned for `for`, then firing;
//! firing alerts are sent again every `resend` with `endsAt` four resend
//! intervals ahead (so the receiver resolves them if causeway dies), and
//! an instance no longer returned is sent once more, resolved.
//!
//! When an instance has a `route_id`, it is given the route's dominant
//! root cause in the window, that cause's share and an exemplar trace (the
//! latest trace with that cause), and the link templates are filled in, so
//! the alert leads straight to the trace and its logs.
//!
//! Alerts leave as log records (`event.name = causeway.alert`) into the
//! logs pipelines the processor is in; the `alertmanager` and `webhook`
//! exporters send them on.

use causeway_core::config::{ConfigError, Duration};
use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::array_value_to_string;
use indexmap::IndexMap;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};

use super::model::table::{f64f, s, schema, utf8, Cols, Table, V};
use super::model::RcaEvent;
use super::rules::context;
use super::source::{Sources, View};
use super::store::Store;

/// The `event.name` of alert log records.
pub const ALERT_EVENT: &str = "causeway.alert";

/// `correlate.alerts`.
#[derive(Debug, Clone, Deserialize, Default, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertsConfig {
    /// How often the rules are evaluated.
    #[serde(default = "interval")]
    pub interval: Duration,
    /// The stretch of time the `routes` and `rca` tables cover.
    #[serde(default = "window")]
    pub window: Duration,
    /// How often a firing alert is sent again (Prometheus's `resend_delay`).
    #[serde(default = "resend")]
    pub resend: Duration,
    /// Links added to every alert as annotations `<name>_url` (the first is
    /// also its `generatorURL`): URL templates such as
    /// `http://jaeger:16686/trace/{{ $trace_id }}`. Values are URL-encoded.
    #[serde(default)]
    pub links: IndexMap<String, String>,
    /// The rules.
    #[serde(default)]
    pub rules: Vec<AlertRuleConfig>,
}

/// One alert rule, shaped like a Prometheus alerting rule.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertRuleConfig {
    /// The alert's name (`alertname` label).
    pub alert: String,
    /// A SELECT over `routes`, `rca`, `kafka_groups` and `metrics`: one row
    /// per alert instance; columns become labels except `value` and `trace_id`.
    pub expr: String,
    /// How long an instance must be returned before it fires (0: at once).
    #[serde(default, rename = "for")]
    pub for_: Option<Duration>,
    /// Labels added to every instance.
    #[serde(default)]
    pub labels: IndexMap<String, String>,
    /// Annotations (templates: `{{ $labels.route_id }}`, `{{ $value }}`,
    /// `{{ $cause }}`, `{{ $cause_share }}`, `{{ $trace_id }}`).
    #[serde(default)]
    pub annotations: IndexMap<String, String>,
}

fn interval() -> Duration {
    Duration::secs(15)
}
fn window() -> Duration {
    Duration::secs(60)
}
fn resend() -> Duration {
    Duration::secs(60)
}

/// A parsed template: text and placeholders.
#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Label(String),
    Value,
    Cause,
    CauseShare,
    TraceId,
}

/// What a template can refer to.
struct Ctx<'a> {
    labels: &'a BTreeMap<String, String>,
    value: f64,
    cause: &'a str,
    cause_share: Option<f64>,
    trace_id: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
struct Template(Vec<Piece>);

impl Template {
    fn parse(text: &str) -> Result<Self, String> {
        let mut out = Vec::new();
        let mut rest = text;
        while let Some(i) = rest.find("{{") {
            if i > 0 {
                out.push(Piece::Text(rest[..i].to_string()));
            }
            let after = &rest[i + 2..];
            let Some(j) = after.find("}}") else {
                return Err(format!("`{{{{` at byte {i} is never closed"));
            };
            let inner = after[..j].trim();
            out.push(match inner {
                "$value" => Piece::Value,
                "$cause" => Piece::Cause,
                "$cause_share" => Piece::CauseShare,
                "$trace_id" => Piece::TraceId,
                _ => match inner.strip_prefix("$labels.") {
                    Some(l) if !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') => {
                        Piece::Label(l.to_string())
                    }
                    _ => {
                        return Err(format!(
                            "unknown placeholder `{{{{ {inner} }}}}`: use $labels.NAME, $value, $cause, $cause_share or $trace_id"
                        ))
                    }
                },
            });
            rest = &after[j + 2..];
        }
        if !rest.is_empty() {
            out.push(Piece::Text(rest.to_string()));
        }
        Ok(Template(out))
    }

    fn render(&self, c: &Ctx<'_>, url: bool) -> String {
        let mut out = String::new();
        for p in &self.0 {
            let v: std::borrow::Cow<'_, str> = match p {
                // The template's own text is written as is.
                Piece::Text(t) => {
                    out.push_str(t);
                    continue;
                }
                Piece::Label(l) => c.labels.get(l).map_or("", String::as_str).into(),
                Piece::Value => number(c.value).into(),
                Piece::Cause => c.cause.into(),
                Piece::CauseShare => c.cause_share.map(number).unwrap_or_default().into(),
                Piece::TraceId => c.trace_id.into(),
            };
            if url {
                out.push_str(&url_encode(&v));
            } else {
                out.push_str(&v);
            }
        }
        out
    }
}

fn url_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{:.3}", v)
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// The tables the rules query: the analysed traces, the latest point of
/// every series, and the sources' (empty without a view: for validation).
fn tables(sources: &Sources, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
    let mut out = Vec::new();
    // rca
    let sch = schema(vec![
        utf8("trace_id"),
        utf8("route_id"),
        utf8("cause"),
        utf8("service"),
        f64f("confidence"),
        utf8("rule"),
        f64f("time_ms"),
    ]);
    let recent = view
        .map(|v| v.store.outbox.recent(v.now_ns.saturating_sub(v.window_ns)))
        .unwrap_or_default();
    let mut c = Cols::new(&sch, recent.len());
    for (t, e) in &recent {
        let tid = hex::encode(e.trace_id);
        c.row([
            s(&tid),
            V::S(Some(e.route.as_str()).filter(|r| !r.is_empty())),
            s(&e.cause),
            s(&e.service),
            V::F(Some(e.confidence)),
            s(&e.rule),
            V::F(Some(*t as f64 / 1e6)),
        ]);
    }
    out.push(("rca", sch.clone(), c.finish(sch)?));
    // metrics: the latest points, a column per key dimension of the sources.
    let points = view
        .map(|v| v.store.series.latest_points())
        .unwrap_or_default();
    let dims = sources.dims();
    let sch = schema(
        std::iter::once(utf8("name"))
            .chain(dims.iter().map(|d| utf8(d)))
            .chain([utf8("labels"), f64f("value"), f64f("time_ms")])
            .collect(),
    );
    let mut c = Cols::new(&sch, points.len());
    for (name, key, attrs, t, v) in &points {
        let labels: Vec<String> = attrs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let labels = labels.join(",");
        c.row(
            std::iter::once(s(name))
                .chain(dims.iter().map(|d| V::S(key.get(d))))
                .chain([s(&labels), V::F(Some(*v)), V::F(Some(*t as f64 / 1e6))]),
        );
    }
    out.push(("metrics", sch.clone(), c.finish(sch)?));
    out.extend(sources.alert_tables(view)?);
    Ok(out)
}

/// Check the alerts section: durations, names, templates, and that every
/// expression plans against the tables (`sources`' among them). Paths are
/// relative to `alerts`.
pub fn validate(cfg: &AlertsConfig, sources: &Sources) -> Vec<ConfigError> {
    let mut e = Vec::new();
    for (k, d) in [
        ("interval", cfg.interval),
        ("window", cfg.window),
        ("resend", cfg.resend),
    ] {
        if d.get().is_zero() {
            e.push(ConfigError::new(
                format!("alerts.{k}"),
                "must be more than 0",
            ));
        }
    }
    for (name, t) in &cfg.links {
        if let Err(m) = Template::parse(t) {
            e.push(ConfigError::new(format!("alerts.links.{name}"), m));
        } else if !(t.starts_with("http://") || t.starts_with("https://")) {
            e.push(ConfigError::new(
                format!("alerts.links.{name}"),
                "must be an http:// or https:// URL template",
            ));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for (i, r) in cfg.rules.iter().enumerate() {
        let at = |f: &str| format!("alerts.rules[{i}].{f}");
        if r.alert.trim().is_empty()
            || !r
                .alert
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            e.push(ConfigError::new(
                at("alert"),
                format!(
                    "{:?} is not a valid alert name (letters, digits, _)",
                    r.alert
                ),
            ));
        }
        if !seen.insert(r.alert.clone()) {
            e.push(ConfigError::new(
                at("alert"),
                format!("alert {:?} is defined twice", r.alert),
            ));
        }
        for k in r.labels.keys() {
            if !valid_label(k) {
                e.push(ConfigError::new(
                    at(&format!("labels.{k}")),
                    "is not a valid label name",
                ));
            }
        }
        for (k, t) in &r.annotations {
            if let Err(m) = Template::parse(t) {
                e.push(ConfigError::new(at(&format!("annotations.{k}")), m));
            }
        }
        if let Err(m) = check_expr(&r.expr, sources) {
            e.push(ConfigError::new(at("expr"), m));
        }
    }
    e
}

fn valid_label(k: &str) -> bool {
    let mut c = k.chars();
    c.next()
        .is_some_and(|x| x.is_ascii_alphabetic() || x == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

fn check_expr(sql: &str, sources: &Sources) -> Result<(), String> {
    let ctx = context(tables(sources, None)?)?;
    let df = futures::executor::block_on(ctx.sql(sql)).map_err(|e| first_line(&e.to_string()))?;
    if let Ok(f) = df.schema().field_with_unqualified_name("value") {
        if !f.data_type().is_numeric() {
            return Err(format!(
                "the `value` column must be a number, not {}",
                f.data_type()
            ));
        }
    }
    Ok(())
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).to_string()
}

struct Rule {
    cfg: AlertRuleConfig,
    for_ns: u64,
    annotations: Vec<(String, Template)>,
}

#[derive(Debug, Clone)]
struct Active {
    labels: BTreeMap<String, String>,
    active_at: u64,
    firing: bool,
    last_sent: u64,
    value: f64,
    trace_id: String,
    cause: String,
    cause_share: Option<f64>,
}

/// An alert to send (firing or resolved).
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// Labels, `alertname` included.
    pub labels: BTreeMap<String, String>,
    /// Annotations, links included.
    pub annotations: BTreeMap<String, String>,
    /// `startsAt` (ns).
    pub starts_ns: u64,
    /// `endsAt` (ns): in the future while firing, the resolution time once resolved.
    pub ends_ns: u64,
    /// Firing (else resolved).
    pub firing: bool,
    /// The first link, or "".
    pub generator_url: String,
    /// Exemplar trace.
    pub trace_id: String,
}

/// The alert rules of one `correlate` id and their instances.
pub struct Alerting {
    rules: Vec<Rule>,
    links: Vec<(String, Template)>,
    window_ns: u64,
    resend_ns: u64,
    valid_ns: u64,
    active: Vec<HashMap<String, Active>>,
    /// Rule errors at run time, by rule (each logged once).
    pub errors: Vec<(String, String)>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.get().as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds since the epoch.
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Alerting {
    /// From a validated config.
    pub fn new(cfg: &AlertsConfig) -> Self {
        let parse = |t: &str| {
            Template::parse(t).unwrap_or_else(|_| Template(vec![Piece::Text(t.to_string())]))
        };
        let rules: Vec<Rule> = cfg
            .rules
            .iter()
            .map(|r| Rule {
                for_ns: r.for_.map_or(0, ns),
                annotations: r
                    .annotations
                    .iter()
                    .map(|(k, v)| (k.clone(), parse(v)))
                    .collect(),
                cfg: r.clone(),
            })
            .collect();
        let resend_ns = ns(cfg.resend);
        Alerting {
            active: vec![HashMap::new(); rules.len()],
            rules,
            links: cfg
                .links
                .iter()
                .map(|(k, v)| (k.clone(), parse(v)))
                .collect(),
            window_ns: ns(cfg.window),
            resend_ns,
            valid_ns: 4 * resend_ns.max(ns(cfg.interval)),
            errors: Vec::new(),
        }
    }

    /// Whether there are rules at all.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Evaluate every rule at `now_ns`; the alerts to send now.
    pub async fn evaluate(&mut self, store: &Store, sources: &Sources, now_ns: u64) -> Vec<Alert> {
        self.errors.clear();
        let view = View {
            store,
            now_ns,
            window_ns: self.window_ns,
        };
        let ctx = match tables(sources, Some(&view)).and_then(context) {
            Ok(c) => c,
            Err(e) => {
                self.errors.push(("*".into(), e));
                return Vec::new();
            }
        };
        let recent = store.outbox.recent(now_ns.saturating_sub(self.window_ns));
        let mut out = Vec::new();
        for (ri, rule) in self.rules.iter().enumerate() {
            let batches = match ctx.sql(&rule.cfg.expr).await {
                Ok(df) => df.collect().await,
                Err(e) => Err(e),
            };
            let batches = match batches {
                Ok(b) => b,
                Err(e) => {
                    self.errors
                        .push((rule.cfg.alert.clone(), first_line(&e.to_string())));
                    continue;
                }
            };
            let mut seen: HashMap<String, (BTreeMap<String, String>, f64, String)> = HashMap::new();
            for b in &batches {
                for row in 0..b.num_rows() {
                    let (labels, value, trace) = instance(b, row, rule);
                    seen.insert(fingerprint(&labels), (labels, value, trace));
                }
            }
            let active = &mut self.active[ri];
            // Gone: resolved (when it fired) or forgotten (when pending).
            let gone: Vec<String> = active
                .keys()
                .filter(|k| !seen.contains_key(*k))
                .cloned()
                .collect();
            for k in gone {
                if let Some(a) = active.remove(&k) {
                    if a.firing {
                        out.push(alert(rule, &self.links, &a, now_ns, false));
                    }
                }
            }
            for (k, (labels, value, trace)) in seen {
                let (cause, share, exemplar) = dominant(&recent, labels.get("route_id"));
                let a = active.entry(k).or_insert_with(|| Active {
                    labels: labels.clone(),
                    active_at: now_ns,
                    firing: false,
                    last_sent: 0,
                    value,
                    trace_id: String::new(),
                    cause: String::new(),
                    cause_share: None,
                });
                a.value = value;
                a.cause = cause;
                a.cause_share = share;
                a.trace_id = if trace.is_empty() { exemplar } else { trace };
                if !a.firing && now_ns.saturating_sub(a.active_at) >= rule.for_ns {
                    a.firing = true;
                    a.last_sent = 0;
                }
                if a.firing
                    && (a.last_sent == 0 || now_ns.saturating_sub(a.last_sent) >= self.resend_ns)
                {
                    a.last_sent = now_ns;
                    let mut x = alert(rule, &self.links, a, now_ns, true);
                    x.ends_ns = now_ns.saturating_add(self.valid_ns);
                    out.push(x);
                }
            }
        }
        out
    }

    /// Instances firing now, by alert name (for the daemon's own gauge).
    pub fn firing(&self) -> Vec<(String, usize)> {
        self.rules
            .iter()
            .zip(&self.active)
            .map(|(r, a)| (r.cfg.alert.clone(), a.values().filter(|x| x.firing).count()))
            .collect()
    }
}

/// The labels, value and trace of one result row.
fn instance(b: &RecordBatch, row: usize, rule: &Rule) -> (BTreeMap<String, String>, f64, String) {
    let mut labels = BTreeMap::new();
    let mut value = 1.0;
    let mut trace = String::new();
    for (i, f) in b.schema().fields().iter().enumerate() {
        let col = b.column(i);
        if col.is_null(row) {
            continue;
        }
        match f.name().as_str() {
            "value" => {
                if let Ok(c) = datafusion::arrow::compute::cast(col, &DataType::Float64) {
                    if let Some(a) = c
                        .as_any()
                        .downcast_ref::<datafusion::arrow::array::Float64Array>()
                    {
                        value = a.value(row);
                    }
                }
            }
            name => {
                let Ok(text) = array_value_to_string(col, row) else {
                    continue;
                };
                if name == "trace_id" {
                    trace = text;
                } else {
                    labels.insert(name.to_string(), text);
                }
            }
        }
    }
    for (k, v) in &rule.cfg.labels {
        labels.insert(k.clone(), v.clone());
    }
    labels.insert("alertname".into(), rule.cfg.alert.clone());
    (labels, value, trace)
}

fn fingerprint(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}\u{1}{v}"))
        .collect::<Vec<_>>()
        .join("\u{2}")
}

/// The dominant cause of a route's analysed traces, its share, and the latest trace with it.
fn dominant(recent: &[(u64, RcaEvent)], route: Option<&String>) -> (String, Option<f64>, String) {
    let Some(route) = route else {
        return (String::new(), None, String::new());
    };
    let mut counts: BTreeMap<&str, (usize, u64, [u8; 16])> = BTreeMap::new();
    let mut total = 0usize;
    for (t, e) in recent.iter().filter(|(_, e)| &e.route == route) {
        total += 1;
        let c = counts.entry(e.cause.as_str()).or_insert((0, 0, [0; 16]));
        c.0 += 1;
        if *t >= c.1 {
            c.1 = *t;
            c.2 = e.trace_id;
        }
    }
    match counts.into_iter().max_by_key(|(_, (n, t, _))| (*n, *t)) {
        Some((cause, (n, _, tid))) => (
            cause.to_string(),
            Some(n as f64 / total as f64),
            hex::encode(tid),
        ),
        None => (String::new(), None, String::new()),
    }
}

/// The `alerts.links` of one analysed trace, as its alert would carry them
/// (`{{ $labels.route_id }}`, `{{ $cause }}`, `{{ $trace_id }}` filled in):
/// (name, URL). A template that does not parse is left out.
pub fn trace_links(
    links: &IndexMap<String, String>,
    trace_id: &str,
    route: &str,
    cause: &str,
) -> Vec<(String, String)> {
    let mut labels = BTreeMap::new();
    if !route.is_empty() {
        labels.insert("route_id".to_string(), route.to_string());
    }
    let ctx = Ctx {
        labels: &labels,
        value: 0.0,
        cause,
        cause_share: None,
        trace_id,
    };
    links
        .iter()
        .filter_map(|(name, text)| {
            Template::parse(text)
                .ok()
                .map(|t| (name.clone(), t.render(&ctx, true)))
        })
        .collect()
}

fn alert(
    rule: &Rule,
    links: &[(String, Template)],
    a: &Active,
    now_ns: u64,
    firing: bool,
) -> Alert {
    let ctx = Ctx {
        labels: &a.labels,
        value: a.value,
        cause: &a.cause,
        cause_share: a.cause_share,
        trace_id: &a.trace_id,
    };
    let mut annotations: BTreeMap<String, String> = rule
        .annotations
        .iter()
        .map(|(k, t)| (k.clone(), t.render(&ctx, false)))
        .collect();
    if !a.cause.is_empty() {
        annotations.insert("cause".into(), a.cause.clone());
        if let Some(s) = a.cause_share {
            annotations.insert("cause_share".into(), number(s));
        }
    }
    if !a.trace_id.is_empty() {
        annotations.insert("trace_id".into(), a.trace_id.clone());
    }
    annotations.insert("value".into(), number(a.value));
    let mut generator_url = String::new();
    for (name, t) in links {
        // A link that needs a trace is left out when there is none.
        if a.trace_id.is_empty() && t.0.contains(&Piece::TraceId) {
            continue;
        }
        let url = t.render(&ctx, true);
        if generator_url.is_empty() {
            generator_url = url.clone();
        }
        annotations.insert(format!("{name}_url"), url);
    }
    Alert {
        labels: a.labels.clone(),
        annotations,
        starts_ns: a.active_at,
        ends_ns: now_ns,
        firing,
        generator_url,
        trace_id: a.trace_id.clone(),
    }
}

fn kv(k: &str, v: String) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v)),
        }),
        ..Default::default()
    }
}

/// RFC 3339 with milliseconds, UTC.
pub fn rfc3339(ns: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + std::time::Duration::from_nanos(ns)).to_string()
}

/// An alert as a log record: `event.name = causeway.alert`, `alert.*`
/// attributes (labels and annotations as JSON objects), the exemplar
/// trace as its `trace_id`, body = the `summary` annotation (or the name).
pub fn record(a: &Alert, now_ns: u64) -> LogRecord {
    let json = |m: &BTreeMap<String, String>| serde_json::to_string(m).unwrap_or_default();
    let name = a.labels.get("alertname").cloned().unwrap_or_default();
    let status = if a.firing { "firing" } else { "resolved" };
    let mut attributes = vec![
        kv("event.name", ALERT_EVENT.to_string()),
        kv("alert.name", name.clone()),
        kv("alert.status", status.to_string()),
        kv("alert.starts_at", rfc3339(a.starts_ns)),
        kv("alert.ends_at", rfc3339(a.ends_ns)),
        kv("alert.labels", json(&a.labels)),
        kv("alert.annotations", json(&a.annotations)),
        kv("alert.generator_url", a.generator_url.clone()),
    ];
    if let Some(r) = a.labels.get("route_id") {
        attributes.push(kv("route_id", r.clone()));
    }
    let trace_id = hex::decode(&a.trace_id)
        .ok()
        .filter(|b| b.len() == 16)
        .unwrap_or_default();
    LogRecord {
        time_unix_nano: now_ns,
        observed_time_unix_nano: now_ns,
        severity_number: if a.firing { 13 } else { 9 },
        severity_text: if a.firing { "WARN" } else { "INFO" }.into(),
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(
                a.annotations
                    .get("summary")
                    .cloned()
                    .unwrap_or_else(|| format!("{name} {status}")),
            )),
        }),
        attributes,
        trace_id,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_parse_render_and_refuse_unknown_placeholders() {
        let t = Template::parse("route {{ $labels.route_id }} p99 {{$value}} ms, {{ $cause }}")
            .unwrap();
        let labels = BTreeMap::from([("route_id".to_string(), "a b".to_string())]);
        let c = Ctx {
            labels: &labels,
            value: 2500.0,
            cause: "queueing",
            cause_share: Some(0.5),
            trace_id: "ab",
        };
        assert_eq!(t.render(&c, false), "route a b p99 2500 ms, queueing");
        let u =
            Template::parse("http://g/explore?q={{ $labels.route_id }}&t={{ $trace_id }}").unwrap();
        assert_eq!(u.render(&c, true), "http://g/explore?q=a%20b&t=ab");
        assert!(Template::parse("{{ .Labels.x }}")
            .unwrap_err()
            .contains("unknown placeholder"));
        assert!(Template::parse("{{ $value")
            .unwrap_err()
            .contains("never closed"));
    }

    use crate::correlate::config::CorrelateConfig;
    use crate::correlate::registry;
    use crate::correlate::source::Correlation;
    use crate::correlate::store::{Limits, Store};
    use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    };

    const S: u64 = 1_000_000_000;
    const T0: u64 = 1_800_000_000 * S;

    fn sources() -> Sources {
        let cfg: CorrelateConfig = serde_yaml::from_str("{}").unwrap();
        registry::sources(&cfg)
    }

    fn store() -> Correlation {
        let store = Store::new(Limits {
            window_ns: 600 * S,
            max_log_records: 1000,
            max_series: 1000,
            max_points: 64,
            max_routes: 100,
            max_events: 1000,
            max_log_bytes: usize::MAX,
            max_analysed: 100_000,
            baseline_window_ns: 3_600_000_000_000,
            baseline_min_samples: 20,
            baseline_max_operations: 10_000,
        });
        Correlation {
            store,
            sources: sources(),
        }
    }

    fn attr(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    fn gateway(route: &str, seconds: f64, t: u64) -> Vec<ResourceLogs> {
        vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    time_unix_nano: t,
                    attributes: vec![
                        attr("route_id", any_value::Value::StringValue(route.into())),
                        attr("http.response.status_code", any_value::Value::IntValue(200)),
                        attr(
                            "http.server.request.duration",
                            any_value::Value::DoubleValue(seconds),
                        ),
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }]
    }

    fn group_status(status: &str, code: i64, t: u64) -> Vec<ResourceMetrics> {
        vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "kafka.consumer_group.status".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            time_unix_nano: t,
                            attributes: vec![
                                attr("group", any_value::Value::StringValue("billing".into())),
                                attr("status", any_value::Value::StringValue(status.into())),
                            ],
                            value: Some(number_data_point::Value::AsInt(code)),
                            ..Default::default()
                        }],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }]
    }

    fn rules(yaml: &str) -> Alerting {
        let cfg: AlertsConfig = serde_yaml::from_str(yaml).unwrap();
        assert!(
            validate(&cfg, &sources()).is_empty(),
            "{:?}",
            validate(&cfg, &sources())
        );
        Alerting::new(&cfg)
    }

    #[tokio::test]
    async fn a_slow_route_pends_for_its_duration_fires_resends_and_resolves() {
        let st = store();
        let mut a = rules(
            r#"
resend: 1m
rules:
  - alert: RouteP99High
    expr: SELECT route_id, p99_ms AS value FROM routes WHERE p99_ms > 2000
    for: 5m
    annotations: {summary: "p99 of {{ $labels.route_id }} is {{ $value }} ms"}
"#,
        );
        // Slow from T0 on: pending for 5 minutes, then firing.
        let mut fired = Vec::new();
        for m in 0..=7u64 {
            let now = T0 + m * 60 * S;
            st.add_logs(&gateway("checkout", 2.5, now), now);
            st.add_logs(&gateway("search", 0.1, now), now);
            let sent = a.evaluate(&st.store, &st.sources, now).await;
            assert!(a.errors.is_empty(), "{:?}", a.errors);
            fired.extend(sent.into_iter().map(|x| (m, x)));
        }
        let minutes: Vec<u64> = fired.iter().map(|(m, _)| *m).collect();
        assert_eq!(
            minutes,
            [5, 6, 7],
            "pending for 5m, then sent every resend (1m)"
        );
        let (_, x) = &fired[0];
        assert!(x.firing);
        assert_eq!(x.labels["route_id"], "checkout");
        assert_eq!(x.labels["alertname"], "RouteP99High");
        assert_eq!(x.starts_ns, T0, "startsAt is when it became active");
        assert!(x.ends_ns > T0 + 5 * 60 * S, "endsAt ahead while firing");
        assert!(
            x.annotations["summary"].starts_with("p99 of checkout is 25"),
            "{:?}",
            x.annotations
        );
        assert_eq!(a.firing(), [("RouteP99High".to_string(), 1)]);
        // Fast again: once the slow buckets leave the 1m window it resolves.
        let mut resolved = None;
        for m in 8..=10u64 {
            let now = T0 + m * 60 * S;
            st.add_logs(&gateway("checkout", 0.1, now), now);
            if let Some(x) = a
                .evaluate(&st.store, &st.sources, now)
                .await
                .into_iter()
                .next()
            {
                resolved = Some((m, x));
                break;
            }
        }
        let (m, x) = resolved.expect("resolved");
        // Minute 7's slow request is still in the window at minute 8, but
        // beside a fast one the p99 of two (lower nearest rank) is fast.
        assert_eq!(m, 8);
        assert!(!x.firing);
        assert_eq!(x.ends_ns, T0 + 8 * 60 * S);
        assert_eq!(x.starts_ns, T0);
        assert_eq!(a.firing(), [("RouteP99High".to_string(), 0)]);
    }

    #[tokio::test]
    async fn a_consumer_group_not_ok_fires_after_its_for_and_a_short_blip_never_does() {
        let st = store();
        let mut a = rules(
            r#"
rules:
  - alert: ConsumerGroupNotOK
    expr: SELECT consumer_group, status AS value, status_name FROM kafka_groups WHERE status_name <> 'OK'
    for: 5m
"#,
        );
        // A 2-minute WARN blip: pending only, forgotten when OK returns.
        st.add_metrics(&group_status("WARN", 2, T0), T0);
        assert!(a.evaluate(&st.store, &st.sources, T0).await.is_empty());
        st.add_metrics(&group_status("OK", 1, T0 + 120 * S), T0 + 120 * S);
        assert!(a
            .evaluate(&st.store, &st.sources, T0 + 120 * S)
            .await
            .is_empty());
        // ERR for 6 minutes: fires at 5.
        let t1 = T0 + 200 * S;
        let mut sent = Vec::new();
        for m in 0..=6u64 {
            let now = t1 + m * 60 * S;
            st.add_metrics(&group_status("ERR", 3, now), now);
            sent.extend(
                a.evaluate(&st.store, &st.sources, now)
                    .await
                    .into_iter()
                    .map(|x| (m, x)),
            );
        }
        let minutes: Vec<u64> = sent.iter().map(|(m, _)| *m).collect();
        assert_eq!(
            minutes,
            [5, 6],
            "fired at 5 minutes, re-sent a minute later"
        );
        let (_, x) = &sent[0];
        assert_eq!(x.labels["consumer_group"], "billing");
        assert_eq!(x.labels["status_name"], "ERR");
        assert_eq!(x.annotations["value"], "3");
    }

    #[test]
    fn bad_expressions_and_fields_are_reported_with_their_path() {
        let cfg: AlertsConfig = serde_yaml::from_str(
            r#"
rules:
  - alert: Ok1
    expr: SELECT route_id, p99_ms AS value FROM routes WHERE p99_ms > 2000
  - alert: Bad
    expr: SELECT nope FROM routes
  - alert: BadValue
    expr: SELECT route_id, route_id AS value FROM routes
    annotations: {summary: "{{ $nope }}"}
"#,
        )
        .unwrap();
        let e = validate(&cfg, &sources());
        let paths: Vec<&str> = e.iter().map(|x| x.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "alerts.rules[1].expr",
                "alerts.rules[2].annotations.summary",
                "alerts.rules[2].expr"
            ],
            "{e:?}"
        );
    }
}

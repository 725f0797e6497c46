//! The NATS source: JetStream consumers (the `nats` receiver reads them
//! from the server's `/jsz`) joined to the spans that publish to and
//! consume from their streams.
//!
//! A span with `messaging.system = nats` (as `otel-instrumentation-nats`
//! writes it for nats-py: `{subject} send` producer spans and
//! `{subject} receive` consumer spans, the subject in
//! `messaging.destination.name`) reaches the consumers of every stream one
//! of whose subjects matches its subject, whose filter subjects (if any)
//! match it too, by NATS's wildcards (`*` one token, `>` the rest). The
//! instrumentation does not name the consumer that delivered a message: a
//! consumer span joins every consumer its subject reaches. The JetStream
//! API's subjects (`$JS.…`) and reply inboxes (`_INBOX.…`) reach none.
//!
//! - series: the `nats.consumer.*` points, keyed by stream and consumer;
//! - spans: `messaging.system = nats`;
//! - rules' table `nats_consumer` (consumer and role a trace touches, declared
//!   in [`CONSUMER`]); rule `nats_consumer_lag`;
//! - alerts' table `nats_consumers` (consumer, latest collection; [`CONSUMERS`]);
//! - page: `GET /api/nats`, the consumers as last collected;
//! - trouble: a consumer in backlog alarm that a destination of the trace reaches;
//! - a NATS span that reaches no known consumer while consumers are known
//!   is a join miss (`join="nats"`).

use std::collections::BTreeMap;

use super::capabilities;
use super::{
    json, wait_window, Asked, Join, PageColumn, PageTable, Source, Tick, View, JOIN_ATTRS,
};
use super::{KeepsMetrics, ShowsState, ShowsTrouble};
use crate::correlate::model::cause::CONSUMER_LAG;
use crate::correlate::model::series::{find, s as attr_s, Kept, Offer, PointKind};
use crate::correlate::model::table::{s, About, Column, Declared, Purpose, Table, Traced, V};
use crate::correlate::model::trace::SpanKind;
use crate::correlate::model::{Hex16, Joined, Key, Rule, Series, SpanRow, TraceRow};
use crate::correlate::store::Store;

const SUBJECTS: &str = "nats.stream.subjects";
const FILTERS: &str = "nats.consumer.filter_subject";

/// Whether a subject matches a NATS pattern (`*` one token, `>` one or more at the end).
pub fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut p = pattern.split('.');
    let mut s = subject.split('.');
    loop {
        match (p.next(), s.next()) {
            (Some(">"), Some(_)) => return true,
            (Some("*"), Some(_)) => {}
            (Some(a), Some(b)) if a == b => {}
            (None, None) => return true,
            _ => return false,
        }
    }
}

/// A consumer the state knows, with its series.
struct Known<'a> {
    stream: &'a str,
    consumer: &'a str,
    subjects: Vec<&'a str>,
    filters: Vec<&'a str>,
    series: Vec<&'a Series>,
}

impl Known<'_> {
    /// Whether a message published to `subject` reaches it.
    fn reaches(&self, subject: &str) -> bool {
        self.subjects.iter().any(|p| subject_matches(p, subject))
            && (self.filters.is_empty() || self.filters.iter().any(|p| subject_matches(p, subject)))
    }
}

fn known(series: &[Series]) -> Vec<Known<'_>> {
    let mut by: BTreeMap<(&str, &str), Known<'_>> = BTreeMap::new();
    for x in series {
        let (Some(stream), Some(consumer)) = (x.key.get("nats_stream"), x.key.get("nats_consumer"))
        else {
            continue;
        };
        let split = |k: &str| -> Vec<&str> {
            x.attr(k)
                .map(|v| v.split(',').filter(|p| !p.is_empty()).collect())
                .unwrap_or_default()
        };
        let k = by.entry((stream, consumer)).or_insert_with(|| Known {
            stream,
            consumer,
            subjects: Vec::new(),
            filters: Vec::new(),
            series: Vec::new(),
        });
        if k.subjects.is_empty() {
            k.subjects = split(SUBJECTS);
            k.filters = split(FILTERS);
        }
        k.series.push(x);
    }
    by.into_values().collect()
}

/// A consumer a trace publishes to or consumes from, by its own series.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConsumerRow {
    /// Stream.
    pub stream: String,
    /// Consumer.
    pub consumer: String,
    /// The span that publishes to it or consumes from it.
    pub span_id: String,
    /// `publish` or `consume`.
    pub role: &'static str,
    /// Messages not yet delivered to it, largest in the interval.
    pub pending: Option<f64>,
    /// Delivered and not acknowledged, largest.
    pub ack_pending: Option<f64>,
    /// Pending plus ack pending, largest.
    pub backlog: Option<f64>,
    /// How the backlog moved over the interval (last − first).
    pub backlog_trend: Option<f64>,
    /// Redelivered and not acknowledged, largest.
    pub redelivered: Option<f64>,
    /// Pull requests waiting, at the latest collection.
    pub waiting: Option<f64>,
    /// Backlog alarm on.
    pub alarm: bool,
    /// The latest time of the points used (ns).
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
}

fn consumer_row(k: &Known<'_>, (from, to): (u64, u64)) -> ConsumerRow {
    let mut row = ConsumerRow {
        stream: k.stream.to_string(),
        consumer: k.consumer.to_string(),
        ..Default::default()
    };
    let max = |a: Option<f64>, b: f64| Some(a.map_or(b, |x| x.max(b)));
    for x in &k.series {
        let pts: Vec<(u64, f64)> = x
            .points
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .copied()
            .collect();
        for &(t, v) in &pts {
            match x.name.as_str() {
                "nats.consumer.pending" => row.pending = max(row.pending, v),
                "nats.consumer.ack_pending" => row.ack_pending = max(row.ack_pending, v),
                "nats.consumer.backlog" => row.backlog = max(row.backlog, v),
                "nats.consumer.redelivered" => row.redelivered = max(row.redelivered, v),
                "nats.consumer.waiting" => row.waiting = Some(v),
                "nats.consumer.backlog_alarm" => row.alarm |= v >= 1.0,
                _ => continue,
            }
            row.time_ns = row.time_ns.max(t);
        }
        if x.name == "nats.consumer.backlog" {
            if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
                row.backlog_trend = Some(last.1 - first.1);
            }
        }
    }
    row
}

/// The subject of a NATS span, unless it is the JetStream API's or an inbox.
fn subject(s: &SpanRow) -> Option<&str> {
    s.destination
        .as_deref()
        .filter(|d| !d.starts_with("$JS.") && !d.starts_with("_INBOX."))
}

/// A consumer as last collected (the alerts' `nats_consumers`, the page's `/api/nats`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ConsumerState {
    /// Account.
    pub account: String,
    /// Stream.
    pub stream: String,
    /// Consumer.
    pub consumer: String,
    /// The stream's subjects (comma separated).
    pub subjects: String,
    /// Its filter subjects (comma separated; empty: all).
    pub filter_subject: String,
    /// Not yet delivered.
    pub pending: Option<f64>,
    /// Delivered, not acknowledged.
    pub ack_pending: Option<f64>,
    /// The two together.
    pub backlog: Option<f64>,
    /// Redelivered, not acknowledged.
    pub redelivered: Option<f64>,
    /// Pull requests waiting.
    pub waiting: Option<f64>,
    /// Backlog alarm on.
    pub alarm: bool,
    /// Latest collection (ms since the epoch).
    pub time_ms: f64,
}

/// The consumers as last collected, from the latest points.
pub fn consumers(store: &Store) -> Vec<ConsumerState> {
    let mut out: BTreeMap<(String, String), ConsumerState> = BTreeMap::new();
    for (name, key, attrs, t, v) in store.series.latest_points() {
        let (Some(stream), Some(consumer)) = (key.get("nats_stream"), key.get("nats_consumer"))
        else {
            continue;
        };
        let attr = |k: &str| {
            attrs
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        let c = out
            .entry((stream.to_string(), consumer.to_string()))
            .or_insert_with(|| ConsumerState {
                account: attr("nats.account.name"),
                stream: stream.to_string(),
                consumer: consumer.to_string(),
                subjects: attr(SUBJECTS),
                filter_subject: attr(FILTERS),
                ..Default::default()
            });
        c.time_ms = c.time_ms.max(t as f64 / 1e6);
        match name.as_str() {
            "nats.consumer.pending" => c.pending = Some(v),
            "nats.consumer.ack_pending" => c.ack_pending = Some(v),
            "nats.consumer.backlog" => c.backlog = Some(v),
            "nats.consumer.redelivered" => c.redelivered = Some(v),
            "nats.consumer.waiting" => c.waiting = Some(v),
            "nats.consumer.backlog_alarm" => c.alarm = v >= 1.0,
            _ => {}
        }
    }
    out.into_values().collect()
}

/// The NATS source.
pub struct Nats {
    sample_ns: u64,
}

impl Nats {
    /// A consumer's wait joins the backlog sampled within `sample_ns` of it.
    pub fn new(sample_ns: u64) -> Self {
        Nats { sample_ns }
    }
}

/// `processors.correlate.nats`: how often the `nats` receiver collects.
pub type NatsConfig = super::SampleInterval;

/// The rules' table of consumers the trace's spans touch.
static CONSUMER: Declared<Traced<ConsumerRow>> = Declared {
    name: "nats_consumer",
    doc: "A JetStream consumer a span of the trace publishes to or consumes from, over the span \
          that waited longest (a consumer span: while its message waited): one row per \
          consumer and role.",
    purpose: Purpose::Rules,
    columns: &[
        Column::<Traced<ConsumerRow>>::text("trace_id", |r, _| s(&r.trace_id)).doc("The trace."),
        Column::<Traced<ConsumerRow>>::text("stream", |r, _| s(&r.row.stream)).doc("The stream."),
        Column::<Traced<ConsumerRow>>::text("consumer", |r, _| s(&r.row.consumer))
            .doc("The consumer."),
        Column::<Traced<ConsumerRow>>::text("span_id", |r, _| s(&r.row.span_id))
            .doc("The span that publishes to it or consumes from it."),
        Column::<Traced<ConsumerRow>>::text("role", |r, _| s(r.row.role))
            .doc("`publish` or `consume`."),
        Column::<Traced<ConsumerRow>>::float("pending", |r, _| V::F(r.row.pending))
            .doc("Messages not yet delivered to it, largest in the interval."),
        Column::<Traced<ConsumerRow>>::float("ack_pending", |r, _| V::F(r.row.ack_pending))
            .doc("Delivered and not acknowledged, largest."),
        Column::<Traced<ConsumerRow>>::float("backlog", |r, _| V::F(r.row.backlog))
            .doc("Pending plus ack pending, largest."),
        Column::<Traced<ConsumerRow>>::float("backlog_trend", |r, _| V::F(r.row.backlog_trend))
            .doc("How the backlog moved over the interval (last − first)."),
        Column::<Traced<ConsumerRow>>::float("redelivered", |r, _| V::F(r.row.redelivered))
            .doc("Redelivered and not acknowledged, largest."),
        Column::<Traced<ConsumerRow>>::float("waiting", |r, _| V::F(r.row.waiting))
            .doc("Pull requests waiting, at the latest collection."),
        Column::<Traced<ConsumerRow>>::bool("alarm", |r, _| V::B(Some(r.row.alarm)))
            .doc("The backlog alarm is on."),
        Column::<Traced<ConsumerRow>>::float("time_ms", |r, _| {
            V::F(Some(r.row.time_ns as f64 / 1e6))
        })
        .doc("The latest time of the points used (ms since the epoch)."),
    ],
};

/// The alerts' table of consumers as last collected.
static CONSUMERS: Declared<ConsumerState> = Declared {
    name: "nats_consumers",
    doc: "A JetStream consumer as last collected: one row per consumer.",
    purpose: Purpose::Alerts,
    columns: &[
        Column::<ConsumerState>::text("account", |r, _| s(&r.account)).doc("The account."),
        Column::<ConsumerState>::text("stream", |r, _| s(&r.stream)).doc("The stream."),
        Column::<ConsumerState>::text("consumer", |r, _| s(&r.consumer)).doc("The consumer."),
        Column::<ConsumerState>::text("subjects", |r, _| s(&r.subjects))
            .doc("The stream's subjects, comma-separated."),
        Column::<ConsumerState>::text("filter_subject", |r, _| s(&r.filter_subject))
            .doc("The consumer's filter subjects, comma-separated (empty: all)."),
        Column::<ConsumerState>::float("pending", |r, _| V::F(r.pending)).doc("Not yet delivered."),
        Column::<ConsumerState>::float("ack_pending", |r, _| V::F(r.ack_pending))
            .doc("Delivered, not acknowledged."),
        Column::<ConsumerState>::float("backlog", |r, _| V::F(r.backlog)).doc("The two together."),
        Column::<ConsumerState>::float("redelivered", |r, _| V::F(r.redelivered))
            .doc("Redelivered, not acknowledged."),
        Column::<ConsumerState>::float("waiting", |r, _| V::F(r.waiting))
            .doc("Pull requests waiting."),
        Column::<ConsumerState>::bool("alarm", |r, _| V::B(Some(r.alarm)))
            .doc("The backlog alarm is on."),
        Column::<ConsumerState>::float("time_ms", |r, _| V::F(Some(r.time_ms)))
            .doc("The latest collection (ms since the epoch)."),
    ],
};

impl Source for Nats {
    fn name(&self) -> &'static str {
        "nats"
    }

    fn claims(&self, s: &SpanRow) -> bool {
        s.messaging_system
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("nats"))
    }

    fn tables(&self) -> Vec<About> {
        vec![CONSUMER.about(), CONSUMERS.about()]
    }

    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        let mut rows = Vec::new();
        let mut misses = 0;
        let mine = |s: &SpanRow| s.claimed == Some("nats") && subject(s).is_some();
        if !traces.iter().any(|t| t.spans.iter().any(mine)) {
            return Ok(Join {
                tables: vec![CONSUMER.batch(&rows)?],
                misses,
            });
        }
        let series = tick
            .store
            .series
            .matching(|s| s.key.get("nats_consumer").is_some());
        let known = known(&series);
        for t in traces.iter_mut() {
            // (consumer, role) → the span that waited on it longest.
            let mut best: BTreeMap<(usize, &'static str), usize> = BTreeMap::new();
            let mut missed = false;
            let weight = |x: &SpanRow| x.async_wait_ms.unwrap_or(0.0) + x.duration_ms;
            for (i, sp) in t.spans.iter().enumerate().filter(|(_, x)| mine(x)) {
                let subj = subject(sp).unwrap_or("");
                let role = if sp.kind == SpanKind::Consumer {
                    "consume"
                } else {
                    "publish"
                };
                let reached: Vec<usize> = (0..known.len())
                    .filter(|&k| known[k].reaches(subj))
                    .collect();
                missed |= reached.is_empty();
                for k in reached {
                    let e = best.entry((k, role)).or_insert(i);
                    if weight(&t.spans[*e]) < weight(sp) {
                        *e = i;
                    }
                }
            }
            if missed && !known.is_empty() {
                misses += 1;
            }
            for ((k, role), i) in best {
                let sp = &t.spans[i];
                let window = wait_window(t, sp, self.sample_ns).unwrap_or(tick.interval(t));
                let mut r = consumer_row(&known[k], window);
                if r.time_ns == 0 {
                    continue;
                }
                r.span_id = Hex16::of(sp.span_id).as_str().to_string();
                r.role = role;
                t.joined.push(Joined::Metric("nats", json(&r)));
                let trace_id = t.trace_id.clone();
                rows.push(Traced { trace_id, row: r });
            }
        }
        Ok(Join {
            tables: vec![CONSUMER.batch(&rows)?],
            misses,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        vec![Rule::builtin(
            "nats_consumer_lag",
            &CONSUMER_LAG,
            r#"
SELECT n.trace_id, 1.0 AS confidence,
  first_value(concat('NATS consumer ', n.consumer, ' of stream ', n.stream, ' is behind: ',
         CAST(CAST(coalesce(n.pending, 0) AS BIGINT) AS VARCHAR), ' messages not yet delivered',
         CASE WHEN coalesce(n.ack_pending, 0) > 0 THEN concat(' and ', CAST(CAST(n.ack_pending AS BIGINT) AS VARCHAR), ' not acknowledged') ELSE '' END,
         CASE WHEN coalesce(n.redelivered, 0) > 0 THEN concat(', ', CAST(CAST(n.redelivered AS BIGINT) AS VARCHAR), ' redelivered') ELSE '' END,
         '; the message waited ', CAST(CAST(s.async_wait_ms AS BIGINT) AS VARCHAR), ' ms before ', s.service, ' consumed it')
         ORDER BY s.async_wait_ms + s.duration_ms DESC) AS summary,
  first_value(concat('stream=', n.stream, ' consumer=', n.consumer, ' pending=', CAST(n.pending AS VARCHAR),
         ' ack_pending=', CAST(n.ack_pending AS VARCHAR), ' backlog_trend=', CAST(n.backlog_trend AS VARCHAR),
         ' redelivered=', CAST(n.redelivered AS VARCHAR), ' alarm=', CAST(n.alarm AS VARCHAR))
         ORDER BY s.async_wait_ms + s.duration_ms DESC) AS evidence,
  first_value(s.span_id ORDER BY s.async_wait_ms + s.duration_ms DESC) AS culprit_span_id,
  max(s.async_wait_ms + s.duration_ms) AS explained_ms
FROM nats_consumer n JOIN spans s ON s.trace_id = n.trace_id AND s.span_id = n.span_id
WHERE n.role = 'consume' AND s.async_wait_ms IS NOT NULL AND (n.alarm OR n.pending >= 1)
GROUP BY n.trace_id"#,
        )]
    }

    capabilities!(metrics, state, trouble);
}

impl KeepsMetrics for Nats {
    fn keep(&self, o: &Offer<'_>) -> Option<Kept> {
        if o.kind != PointKind::Number || !o.metric.starts_with("nats.consumer.") {
            return None;
        }
        let stream = find(o.resource, &["nats.stream.name"]).and_then(attr_s)?;
        let consumer = find(o.resource, &["nats.consumer.name"]).and_then(attr_s)?;
        let account = find(o.resource, &["nats.account.name"]).and_then(attr_s);
        Some(Kept {
            key: Key::new("nats")
                .with("nats_stream", Some(stream))
                .with("nats_consumer", Some(consumer)),
            drop: JOIN_ATTRS,
            add: vec![("nats.account.name".into(), account.unwrap_or_default())],
        })
    }

    fn dims(&self) -> &'static [&'static str] {
        &["nats_stream", "nats_consumer"]
    }
}

impl ShowsState for Nats {
    fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        let rows = view.map(|v| consumers(v.store)).unwrap_or_default();
        Ok(vec![CONSUMERS.batch(&rows)?])
    }

    fn api(&self, path: &str, view: &View<'_>) -> Option<serde_json::Value> {
        (path == "nats").then(|| json(&consumers(view.store)))
    }

    fn page(&self) -> Option<PageTable> {
        Some(PageTable {
            path: "nats",
            title: "NATS JetStream consumers",
            empty: "None reported (nats receiver).",
            columns: &const {
                [
                    PageColumn::new("stream", "Stream", "text"),
                    PageColumn::new("consumer", "Consumer", "text"),
                    PageColumn::new("backlog", "Backlog", "num"),
                    PageColumn::new("pending", "Not delivered", "num"),
                    PageColumn::new("redelivered", "Redelivered", "num"),
                    PageColumn::new("alarm", "Alarm", "flag"),
                ]
            },
        })
    }
}

impl ShowsTrouble for Nats {
    fn trouble_keys(&self) -> &'static [&'static str] {
        &["messaging.destination.name"]
    }

    fn in_trouble(&self, asked: &Asked<'_, '_>) -> bool {
        let Asked { store, values, .. } = *asked;
        let subjects = values("messaging.destination.name");
        if subjects.is_empty() {
            return false;
        }
        let series = store
            .series
            .matching(|s| s.key.get("nats_consumer").is_some());
        known(&series).iter().any(|k| {
            k.series.iter().any(|x| {
                x.name == "nats.consumer.backlog_alarm"
                    && x.points.back().is_some_and(|p| p.1 >= 1.0)
            }) && subjects.iter().any(|subj| k.reaches(subj))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trouble::Trouble;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    };
    use opentelemetry_proto::tonic::resource::v1::Resource;

    #[test]
    fn subjects_match_as_nats_defines_wildcards() {
        for (p, s, yes) in [
            ("orders.>", "orders.created", true),
            ("orders.>", "orders.created.eu", true),
            ("orders.>", "orders", false),
            ("orders.*", "orders.created", true),
            ("orders.*", "orders.created.eu", false),
            ("*.created", "orders.created", true),
            ("orders.created", "orders.created", true),
            ("orders.created", "orders.paid", false),
            (">", "a.b.c", true),
        ] {
            assert_eq!(subject_matches(p, s), yes, "{p} ~ {s}");
        }
    }

    fn series(name: &str, consumer: &str, filter: &str, points: &[(u64, f64)]) -> Series {
        let mut s = Series::new(
            name,
            Key::new("nats")
                .with("nats_stream", Some("ORDERS".into()))
                .with("nats_consumer", Some(consumer.into())),
        );
        s.attrs = vec![
            (FILTERS.into(), filter.into()),
            (SUBJECTS.into(), "orders.>".into()),
        ];
        s.points = points.iter().copied().collect();
        s
    }

    /// The receiver's points of one consumer: its backlog alarm.
    fn alarm(consumer: &str, filter: &str, on: bool, t: u64) -> Vec<ResourceMetrics> {
        let kv = |k: &str, v: &str| KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        };
        vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: vec![
                    kv("nats.stream.name", "ORDERS"),
                    kv("nats.consumer.name", consumer),
                    kv("nats.account.name", "$G"),
                ],
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "nats.consumer.backlog_alarm".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint {
                            attributes: vec![kv(SUBJECTS, "orders.>"), kv(FILTERS, filter)],
                            time_unix_nano: t,
                            value: Some(number_data_point::Value::AsInt(i64::from(on))),
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

    #[test]
    fn a_trace_is_in_trouble_when_its_subject_reaches_a_consumer_in_alarm() {
        use crate::correlate::store::Limits;
        let st = Store::new(Limits {
            window_ns: 600_000_000_000,
            max_log_records: 10,
            max_log_bytes: usize::MAX,
            max_analysed: 10,
            max_series: 100,
            max_points: 8,
            max_routes: 10,
            max_events: 10,
            baseline_window_ns: 3_600_000_000_000,
            baseline_min_samples: 20,
            baseline_max_operations: 10,
        });
        let nats = Nats::new(1_000_000_000);
        let now = 1_000_000_000_000;
        let take = |rms: Vec<ResourceMetrics>, t| st.series.add(&st, &rms, t, &|o| nats.keep(o));
        take(alarm("billing", "orders.created", true, now), now);
        take(alarm("refunds", "orders.refunded", false, now), now);
        let tr = Trouble {
            statuses: vec![],
            route_error_ratio: 1.0,
            cpu_busy: 1.0,
            iowait: 1.0,
            memory_used: 1.0,
        };
        let troubled = |subject: &'static str| {
            let values = move |k: &str| -> Vec<&str> {
                if k == "messaging.destination.name" {
                    vec![subject]
                } else {
                    Vec::new()
                }
            };
            nats.in_trouble(&Asked {
                store: &st,
                trace_id: &[1; 16],
                values: &values,
                trouble: &tr,
            })
        };
        assert!(troubled("orders.created"), "billing is in alarm");
        assert!(!troubled("orders.refunded"), "refunds is not");
        assert!(!troubled("payments.created"), "no consumer");
        // The alarm goes off: no longer.
        take(alarm("billing", "orders.created", false, now + 1), now + 1);
        assert!(!troubled("orders.created"));
    }

    #[test]
    fn a_subject_reaches_the_consumers_whose_stream_and_filter_match() {
        let all = [
            series(
                "nats.consumer.pending",
                "billing",
                "orders.created",
                &[(10, 4.0)],
            ),
            series("nats.consumer.pending", "audit", "", &[(10, 0.0)]),
            series(
                "nats.consumer.pending",
                "refunds",
                "orders.refunded",
                &[(10, 1.0)],
            ),
        ];
        let k = known(&all);
        let reached = |subj: &str| -> Vec<&str> {
            k.iter()
                .filter(|k| k.reaches(subj))
                .map(|k| k.consumer)
                .collect()
        };
        assert_eq!(reached("orders.created"), vec!["audit", "billing"]);
        assert_eq!(reached("orders.refunded"), vec!["audit", "refunds"]);
        assert!(reached("payments.created").is_empty());
        let row = consumer_row(&k[1], (0, 20));
        assert_eq!((row.consumer.as_str(), row.pending), ("billing", Some(4.0)));
        assert_eq!(
            consumer_row(&k[1], (11, 20)).time_ns,
            0,
            "outside the interval"
        );
    }
}

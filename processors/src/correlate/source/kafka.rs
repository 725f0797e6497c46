//! The Kafka source: consumer-group lag and Burrow-style status (the
//! `kafka_lag` receiver, or the Collector's `kafkametrics`) joined to the
//! spans that produce to and consume from a topic.
//!
//! - series: points with a `topic` (`messaging.destination.name`) or a
//!   consumer group (`group`, `messaging.consumer.group.name`);
//! - spans: `messaging.system = kafka`, and messaging spans no other source
//!   claims (older conventions without `messaging.system`);
//! - rules' table `kafka_lag` (topic the trace touches): `trace_id, topic, consumer_group, lag,
//!   lag_trend, lag_seconds, status, alarm, retry_storm, produce_rate, time_ms, growing,
//!   lagging`; a consumer span joins the lag sampled while its message waited;
//! - alerts' table `kafka_groups` (consumer group): `consumer_group, status, status_name, lag,
//!   lag_seconds, alarm`;
//! - page: `GET /api/kafka`, the consumer groups as last seen;
//! - trouble: a lag alarm, a retry storm or a partition status of WARN or
//!   worse on a topic the trace touches;
//! - a topic the trace touches with no Kafka series while others have is a
//!   join miss (`join="kafka"`).

use causeway_core::config::{ConfigError, Duration, Validate};
use datafusion::arrow::datatypes::SchemaRef;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

use super::{
    json, mine, row_time, wait_window, Asked, Join, PageColumn, PageTable, Source, Tick, View,
    JOIN_ATTRS,
};
use crate::correlate::model::cause::{CONSUMER_LAG, RETRY_STORM};
use crate::correlate::model::series::{find, machine, s, Kept, Offer, PointKind, ROUTE_KEYS};
use crate::correlate::model::table::{boolf, f64f, i64f, schema, utf8, Cols, Table, V};
use crate::correlate::model::{Joined, Key, Rule, Series, SpanRow, TraceRow};
use crate::correlate::store::Store;

/// `processors.correlate.consumer_lag`: when plain consumer-group lag (the
/// Collector's `kafka.consumer_group.lag` / `lag_sum`) counts as lag.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConsumerLagConfig {
    /// Lag in messages at or above which the group lags (the default is
    /// the low end of the 5,000–10,000 operators alarm at).
    #[serde(default = "lag_threshold")]
    pub lag_threshold: f64,
    /// Growth in messages, point after point over the join interval, at
    /// which the group lags whatever its level.
    #[serde(default = "lag_growth")]
    pub lag_growth: f64,
    /// How often the lag is sampled: kafkametrics' `collection_interval`
    /// or kafka_lag's `interval`. A consumer's wait joins the
    /// lag sampled within this of it.
    #[serde(default = "lag_sample_interval")]
    pub sample_interval: Duration,
}

impl Validate for ConsumerLagConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.lag_threshold <= 0.0 {
            e.push(ConfigError::new("lag_threshold", "must be more than 0"));
        }
        if self.sample_interval.get().is_zero() {
            e.push(ConfigError::new("sample_interval", "must be more than 0"));
        }
        e
    }
}

impl Default for ConsumerLagConfig {
    fn default() -> Self {
        ConsumerLagConfig {
            lag_threshold: lag_threshold(),
            lag_growth: lag_growth(),
            sample_interval: lag_sample_interval(),
        }
    }
}

fn lag_threshold() -> f64 {
    5000.0
}
fn lag_sample_interval() -> Duration {
    Duration::secs(60)
}
fn lag_growth() -> f64 {
    1000.0
}

/// The Kafka source.
pub struct Kafka {
    cfg: ConsumerLagConfig,
}

impl Kafka {
    /// With `correlate.consumer_lag`.
    pub fn new(cfg: &ConsumerLagConfig) -> Self {
        Kafka { cfg: cfg.clone() }
    }
}

/// Kafka state of a topic (and group) a trace touches.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct KafkaRow {
    /// Topic.
    pub topic: String,
    /// Consumer group ("" when the trace does not name one).
    pub group: String,
    /// Lag (messages), largest in the join interval.
    pub lag: Option<f64>,
    /// How the lag moved over the join interval (messages; > 0: growing).
    pub lag_trend: Option<f64>,
    /// Time lag (s), largest.
    pub lag_seconds: Option<f64>,
    /// Burrow group status code, worst.
    pub status: Option<i64>,
    /// Lag alarm on.
    pub alarm: bool,
    /// Retry storm on the topic.
    pub retry_storm: bool,
    /// Produce rate (messages/s).
    pub produce_rate: Option<f64>,
    /// The lag rose point after point by at least `lag_growth` in the join interval.
    pub growing: bool,
    /// The lag is at or above `lag_threshold`, or growing.
    pub lagging: bool,
    /// The times of the points used (ns), for the evidence.
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
}

fn kafka_row(
    series: &[Series],
    (topic, group): (&str, &str),
    (from, to): (u64, u64),
    p: &ConsumerLagConfig,
) -> KafkaRow {
    let mut row = KafkaRow {
        topic: topic.to_string(),
        group: group.to_string(),
        ..Default::default()
    };
    let mut bump = |t: u64| row_time(&mut row.time_ns, t);
    let mut lag = None;
    let mut trend: Option<f64> = None;
    let mut lag_s = None;
    let mut status = None;
    let mut alarm = false;
    let mut storm = false;
    let mut rate = None;
    let mut groups: BTreeSet<&str> = BTreeSet::new();
    let mut rising = false;
    for s in series.iter().filter(|s| s.key.get("topic") == Some(topic)) {
        let group_ok = group.is_empty()
            || s.key.get("consumer_group").is_none()
            || s.key.get("consumer_group") == Some(group);
        if !group_ok {
            continue;
        }
        let Some((t, v)) = s.max_in(from, to) else {
            continue;
        };
        match s.name.as_str() {
            "kafka.consumer_group.lag_sum" | "kafka.consumer_group.lag" => {
                lag = Some(lag.map_or(v, |x: f64| x.max(v)));
                // Trend: how the lag moved over the join interval (last − first point).
                let pts: Vec<f64> = s
                    .points
                    .iter()
                    .filter(|(t, _)| *t >= from && *t <= to)
                    .map(|x| x.1)
                    .collect();
                if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
                    trend = Some(trend.unwrap_or(0.0) + (last - first));
                    // Growing: at least three points, never coming down, by `lag_growth` in all.
                    rising |= pts.len() >= 3
                        && pts.windows(2).all(|w| w[1] >= w[0])
                        && last - first >= p.lag_growth;
                }
                if let Some(g) = s.key.get("consumer_group") {
                    groups.insert(g);
                }
            }
            "kafka.consumer_group.lag_seconds" => lag_s = Some(lag_s.map_or(v, |x: f64| x.max(v))),
            "kafka.consumer_group.partition_status" => {
                status = Some(status.map_or(v as i64, |x: i64| x.max(v as i64)));
            }
            "kafka.consumer_group.lag_alarm" => alarm |= v >= 1.0,
            "kafka.topic.retry_storm" => storm |= v >= 1.0,
            "kafka.topic.produce_rate" => rate = Some(rate.map_or(v, |x: f64| x.max(v))),
            _ => continue,
        }
        bump(t);
    }
    // Group status series carry only the group (no topic): joined by group.
    row.lag = lag;
    row.lag_trend = trend;
    row.lag_seconds = lag_s;
    row.status = status;
    row.alarm = alarm;
    row.retry_storm = storm;
    row.produce_rate = rate;
    row.growing = rising;
    row.lagging = rising || lag.is_some_and(|l| l >= p.lag_threshold);
    // The group from the metrics when the spans do not name it (old messaging conventions).
    if row.group.is_empty() && groups.len() == 1 {
        row.group = groups.into_iter().next().unwrap_or_default().to_string();
    }
    row
}

fn kafka_lag_schema() -> SchemaRef {
    schema(vec![
        utf8("trace_id"),
        utf8("topic"),
        utf8("consumer_group"),
        f64f("lag"),
        f64f("lag_trend"),
        f64f("lag_seconds"),
        i64f("status"),
        boolf("alarm"),
        boolf("retry_storm"),
        f64f("produce_rate"),
        f64f("time_ms"),
        boolf("growing"),
        boolf("lagging"),
    ])
}

fn groups_schema() -> SchemaRef {
    schema(vec![
        utf8("consumer_group"),
        i64f("status"),
        utf8("status_name"),
        f64f("lag"),
        f64f("lag_seconds"),
        boolf("alarm"),
    ])
}

/// A Kafka consumer group as last seen (the alerts' `kafka_groups`, the page's `/api/kafka`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GroupState {
    /// Consumer group.
    pub consumer_group: String,
    /// Burrow status code.
    pub status: Option<i64>,
    /// Its name.
    pub status_name: Option<String>,
    /// Lag summed over the group's topics.
    pub lag: Option<f64>,
    /// Time lag (s), largest.
    pub lag_seconds: Option<f64>,
    /// Lag alarm on.
    pub alarm: bool,
    #[serde(skip)]
    at: u64,
}

/// The consumer groups as last seen, from the latest points.
pub fn groups(store: &Store) -> Vec<GroupState> {
    let mut groups: BTreeMap<String, GroupState> = BTreeMap::new();
    for (name, key, attrs, t, v) in store.series.latest_points() {
        let Some(group) = key.get("consumer_group") else {
            continue;
        };
        let attr = |k: &str| attrs.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let g = groups
            .entry(group.to_string())
            .or_insert_with(|| GroupState {
                consumer_group: group.to_string(),
                ..Default::default()
            });
        match name.as_str() {
            "kafka.consumer_group.status" if g.status.is_none() || t >= g.at => {
                g.status = Some(v as i64);
                g.status_name = attr("status").cloned();
                g.at = t;
            }
            "kafka.consumer_group.lag_sum" => g.lag = Some(g.lag.unwrap_or(0.0) + v),
            "kafka.consumer_group.lag_seconds" => {
                g.lag_seconds = Some(g.lag_seconds.map_or(v, |x| x.max(v)));
            }
            "kafka.consumer_group.lag_alarm" => g.alarm |= v >= 1.0,
            _ => {}
        }
    }
    groups.into_values().collect()
}

impl Source for Kafka {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn keep(&self, o: &Offer<'_>) -> Option<Kept> {
        if o.kind != PointKind::Number {
            return None;
        }
        let topic = find(o.attrs, &["topic", "messaging.destination.name"]).and_then(s);
        let group = find(
            o.attrs,
            &[
                "group",
                "messaging.consumer.group.name",
                "messaging.kafka.consumer.group",
            ],
        )
        .and_then(s);
        if topic.is_none() && group.is_none() {
            return None;
        }
        Some(Kept {
            key: Key::new("kafka")
                .with("topic", topic)
                .with("consumer_group", group)
                .with("host", machine(o.resource, o.metric))
                .with("route_id", find(o.attrs, &ROUTE_KEYS).and_then(s)),
            drop: JOIN_ATTRS,
            add: Vec::new(),
        })
    }

    fn dims(&self) -> &'static [&'static str] {
        &["topic", "consumer_group", "host", "route_id"]
    }

    fn claims(&self, s: &SpanRow) -> bool {
        s.messaging_system
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("kafka"))
    }

    fn tables(&self) -> Vec<(&'static str, SchemaRef)> {
        vec![("kafka_lag", kafka_lag_schema())]
    }

    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        // One pass over the series for all traces of the tick.
        let topics: BTreeSet<&str> = traces
            .iter()
            .flat_map(|t| t.spans.iter().filter(|s| mine(s, "kafka")))
            .filter_map(|s| s.destination.as_deref())
            .collect();
        let series = if topics.is_empty() {
            Vec::new()
        } else {
            tick.store
                .series
                .matching(|s| s.key.get("topic").is_some_and(|t| topics.contains(t)))
        };
        let any = !topics.is_empty() && tick.store.series.any_with("topic");
        let sch = kafka_lag_schema();
        let mut c = Cols::new(&sch, 0);
        let mut misses = 0;
        for t in traces.iter_mut() {
            let interval = tick.interval(t);
            let mut touched: BTreeSet<(String, String)> = BTreeSet::new();
            for s in t.spans.iter().filter(|s| mine(s, "kafka")) {
                if let Some(topic) = &s.destination {
                    touched.insert((topic.clone(), s.consumer_group.clone().unwrap_or_default()));
                }
            }
            for (topic, group) in touched {
                let waits: Vec<(u64, u64)> = t
                    .spans
                    .iter()
                    .filter(|s| s.destination.as_deref() == Some(topic.as_str()))
                    .filter_map(|s| {
                        wait_window(t, s, self.cfg.sample_interval.get().as_nanos() as u64)
                    })
                    .collect();
                let window = match (
                    waits.iter().map(|w| w.0).min(),
                    waits.iter().map(|w| w.1).max(),
                ) {
                    (Some(a), Some(b)) => (a, b),
                    _ => interval,
                };
                let k = kafka_row(&series, (&topic, &group), window, &self.cfg);
                if k.time_ns == 0 {
                    misses += u64::from(any);
                    continue;
                }
                c.row([
                    V::S(Some(t.trace_id.as_str())),
                    V::S(Some(k.topic.as_str())),
                    V::S(Some(k.group.as_str()).filter(|g| !g.is_empty())),
                    V::F(k.lag),
                    V::F(k.lag_trend),
                    V::F(k.lag_seconds),
                    V::I(k.status),
                    V::B(Some(k.alarm)),
                    V::B(Some(k.retry_storm)),
                    V::F(k.produce_rate),
                    V::F(Some(k.time_ns as f64 / 1e6)),
                    V::B(Some(k.growing)),
                    V::B(Some(k.lagging)),
                ]);
                t.joined.push(Joined::Metric("kafka", json(&k)));
            }
        }
        Ok(Join {
            tables: vec![("kafka_lag", sch.clone(), c.finish(sch)?)],
            misses,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r(
                "consumer_lag",
                &CONSUMER_LAG,
                r#"
SELECT k.trace_id, 1.0 AS confidence,
  concat('consumer group ', coalesce(max(k.consumer_group), '?'), ' lags on ', max(k.topic), ': ',
         CAST(CAST(max(k.lag) AS BIGINT) AS VARCHAR), ' messages',
         CASE WHEN bool_or(k.growing) THEN concat(', up ', CAST(CAST(max(k.lag_trend) AS BIGINT) AS VARCHAR), ' in the window') ELSE '' END,
         '; the message waited ', CAST(CAST(max(s.async_wait_ms) AS BIGINT) AS VARCHAR), ' ms before ', max(s.service), ' consumed it') AS summary,
  concat('lag=', CAST(max(k.lag) AS VARCHAR), ' lag_trend=', CAST(max(k.lag_trend) AS VARCHAR), ' lag_seconds=', CAST(max(k.lag_seconds) AS VARCHAR), ' status=', CAST(max(k.status) AS VARCHAR)) AS evidence,
  max(s.span_id) AS culprit_span_id,
  max(s.async_wait_ms + s.duration_ms) AS explained_ms
FROM kafka_lag k JOIN spans s ON s.trace_id = k.trace_id AND s.destination = k.topic AND s.async_wait_ms IS NOT NULL
WHERE (k.lagging OR k.alarm OR k.status IN (2, 3, 4, 5) OR k.lag_seconds >= 10) AND NOT k.retry_storm
GROUP BY k.trace_id"#,
            ),
            r(
                "retry_storm_topic",
                &RETRY_STORM,
                r#"
SELECT k.trace_id, 1.0 AS confidence,
  concat('retry storm on ', max(k.topic), ': ', CAST(CAST(max(k.produce_rate) AS BIGINT) AS VARCHAR), ' messages/s') AS summary,
  max(s.span_id) AS culprit_span_id,
  coalesce(max(s.async_wait_ms) + max(s.duration_ms), 0.0) AS explained_ms
FROM kafka_lag k JOIN spans s ON s.trace_id = k.trace_id AND s.destination = k.topic AND s.kind = 'consumer'
WHERE k.retry_storm
GROUP BY k.trace_id"#,
            ),
        ]
    }

    fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        let groups = view.map(|v| groups(v.store)).unwrap_or_default();
        let sch = groups_schema();
        let mut c = Cols::new(&sch, groups.len());
        for g in &groups {
            c.row([
                V::S(Some(g.consumer_group.as_str())),
                V::I(g.status),
                V::S(g.status_name.as_deref()),
                V::F(g.lag),
                V::F(g.lag_seconds),
                V::B(Some(g.alarm)),
            ]);
        }
        Ok(vec![("kafka_groups", sch.clone(), c.finish(sch)?)])
    }

    fn api(&self, path: &str, view: &View<'_>) -> Option<serde_json::Value> {
        (path == "kafka").then(|| json(&groups(view.store)))
    }

    fn page(&self) -> Option<PageTable> {
        Some(PageTable {
            path: "kafka",
            title: "Kafka consumer groups",
            empty: "None reported (kafka_lag receiver).",
            columns: &const {
                [
                    PageColumn::new("consumer_group", "Consumer group", "text"),
                    PageColumn::new("status_name", "Burrow status", "status"),
                    PageColumn::new("lag", "Lag", "num"),
                    PageColumn::new("lag_seconds", "Lag (s)", "num"),
                    PageColumn::new("alarm", "Alarm", "flag"),
                ]
            },
        })
    }

    fn trouble_keys(&self) -> &'static [&'static str] {
        &["messaging.destination.name", "messaging.destination"]
    }

    fn in_trouble(&self, asked: &Asked<'_, '_>) -> bool {
        let Asked { store, values, .. } = *asked;
        let topics: Vec<&str> = self.trouble_keys().iter().flat_map(|k| values(k)).collect();
        if topics.is_empty() {
            return false;
        }
        let last = |s: &Series| s.points.back().map(|p| p.1);
        !store
            .series
            .matching(|s| {
                s.key.get("topic").is_some_and(|t| topics.contains(&t))
                    && match s.name.as_str() {
                        "kafka.consumer_group.lag_alarm" | "kafka.topic.retry_storm" => {
                            last(s).is_some_and(|v| v >= 1.0)
                        }
                        "kafka.consumer_group.partition_status" => {
                            last(s).is_some_and(|v| v >= 2.0)
                        }
                        _ => false,
                    }
            })
            .is_empty()
    }
}

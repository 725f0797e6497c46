//! The Kafka source: consumer-group lag and Burrow-style status (the
//! `kafka_lag` receiver, or the Collector's `kafkametrics`) joined to the
//! spans that produce to and consume from a topic.
//!
//! - series: points with a `topic` (`messaging.destination.name`) or a
//!   consumer group (`group`, `messaging.consumer.group.name`);
//! - spans: `messaging.system = kafka`, and messaging spans no other source
//!   claims (older conventions without `messaging.system`);
//! - rules' table `kafka_lag` (topic the trace touches, declared in
//!   [`KAFKA_LAG`]); a consumer span joins the lag sampled while its message
//!   waited;
//! - alerts' table `kafka_groups` (consumer group; [`GROUPS`]);
//! - page: `GET /api/kafka`, the consumer groups as last seen;
//! - trouble: a lag alarm, a retry storm or a partition status of WARN or
//!   worse on a topic the trace touches;
//! - a topic the trace touches with no Kafka series while others have is a
//!   join miss (`join="kafka"`).

use causeway_core::config::{ConfigError, Duration, Validate};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

use super::capabilities;
use super::{
    json, mine, row_time, wait_window, Asked, Join, PageColumn, PageTable, Source, Tick, View,
    JOIN_ATTRS,
};
use super::{KeepsMetrics, ShowsState, ShowsTrouble};
use crate::correlate::model::cause::{CONSUMER_LAG, RETRY_STORM};
use crate::correlate::model::series::{find, machine, s, Kept, Offer, PointKind, ROUTE_KEYS};
use crate::correlate::model::table::{About, Column, Declared, Purpose, Table, Traced, V};
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

/// The rules' table of topics the trace's spans touch.
static KAFKA_LAG: Declared<Traced<KafkaRow>> = Declared {
    name: "kafka_lag",
    doc: "A Kafka topic (and consumer group) a span of the trace touches, by its lag series; \
          a consumer span joins the lag sampled while its message waited: one row per topic \
          and group.",
    purpose: Purpose::Rules,
    columns: &[
        Column::<Traced<KafkaRow>>::text("trace_id", |r, _| V::S(Some(r.trace_id.as_str())))
            .doc("The trace."),
        Column::<Traced<KafkaRow>>::text("topic", |r, _| V::S(Some(r.row.topic.as_str())))
            .doc("The topic."),
        Column::<Traced<KafkaRow>>::text("consumer_group", |r, _| {
            V::S(Some(r.row.group.as_str()).filter(|g| !g.is_empty()))
        })
        .doc("The consumer group (null when the spans and the series name none)."),
        Column::<Traced<KafkaRow>>::float("lag", |r, _| V::F(r.row.lag))
            .doc("Lag (messages), largest in the join interval."),
        Column::<Traced<KafkaRow>>::float("lag_trend", |r, _| V::F(r.row.lag_trend))
            .doc("How the lag moved over the interval (messages; > 0: growing)."),
        Column::<Traced<KafkaRow>>::float("lag_seconds", |r, _| V::F(r.row.lag_seconds))
            .doc("Time lag (s), largest."),
        Column::<Traced<KafkaRow>>::int("status", |r, _| V::I(r.row.status))
            .doc("Burrow group status, worst: 1 OK, 2 WARN, 3 ERR, 4 STOP, 5 STALL, 6 REWIND."),
        Column::<Traced<KafkaRow>>::bool("alarm", |r, _| V::B(Some(r.row.alarm)))
            .doc("The lag alarm is on."),
        Column::<Traced<KafkaRow>>::bool("retry_storm", |r, _| V::B(Some(r.row.retry_storm)))
            .doc("A retry storm is on the topic."),
        Column::<Traced<KafkaRow>>::float("produce_rate", |r, _| V::F(r.row.produce_rate))
            .doc("Messages produced per second."),
        Column::<Traced<KafkaRow>>::float("time_ms", |r, _| V::F(Some(r.row.time_ns as f64 / 1e6)))
            .doc("The latest time of the points used (ms since the epoch)."),
        Column::<Traced<KafkaRow>>::bool("growing", |r, _| V::B(Some(r.row.growing)))
            .doc("The lag rose point after point by at least `consumer_lag.lag_growth`."),
        Column::<Traced<KafkaRow>>::bool("lagging", |r, _| V::B(Some(r.row.lagging)))
            .doc("The lag is at or above `consumer_lag.lag_threshold`, or growing."),
    ],
};

/// The alerts' table of consumer groups as last seen.
static GROUPS: Declared<GroupState> = Declared {
    name: "kafka_groups",
    doc: "A Kafka consumer group as last seen: one row per group.",
    purpose: Purpose::Alerts,
    columns: &[
        Column::<GroupState>::text("consumer_group", |g, _| {
            V::S(Some(g.consumer_group.as_str()))
        })
        .doc("The consumer group."),
        Column::<GroupState>::int("status", |g, _| V::I(g.status)).doc("Burrow status code."),
        Column::<GroupState>::text("status_name", |g, _| V::S(g.status_name.as_deref()))
            .doc("Its name (`OK`, `WARN`, `ERR`, `STOP`, `STALL`, `REWIND`)."),
        Column::<GroupState>::float("lag", |g, _| V::F(g.lag))
            .doc("Lag summed over the group's topics."),
        Column::<GroupState>::float("lag_seconds", |g, _| V::F(g.lag_seconds))
            .doc("Time lag (s), largest."),
        Column::<GroupState>::bool("alarm", |g, _| V::B(Some(g.alarm))).doc("The lag alarm is on."),
    ],
};

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

    fn claims(&self, s: &SpanRow) -> bool {
        s.messaging_system
            .as_deref()
            .is_some_and(|m| m.eq_ignore_ascii_case("kafka"))
    }

    fn tables(&self) -> Vec<About> {
        vec![KAFKA_LAG.about(), GROUPS.about()]
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
        let mut rows = Vec::new();
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
                t.joined.push(Joined::Metric("kafka", json(&k)));
                let trace_id = t.trace_id.clone();
                rows.push(Traced { trace_id, row: k });
            }
        }
        Ok(Join {
            tables: vec![KAFKA_LAG.batch(&rows)?],
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

    capabilities!(metrics, state, trouble);
}

impl KeepsMetrics for Kafka {
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
}

impl ShowsState for Kafka {
    fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        let groups = view.map(|v| groups(v.store)).unwrap_or_default();
        Ok(vec![GROUPS.batch(&groups)?])
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
}

impl ShowsTrouble for Kafka {
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

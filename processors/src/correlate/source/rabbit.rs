//! RabbitMQ queues joined to the spans that publish to and consume from them.
//!
//! The `rabbitmq` receiver writes each queue's series on a resource with
//! `rabbitmq.queue.name` and `rabbitmq.vhost.name` (kept in the correlation
//! state under the key dimension `queue`, the vhost as an attribute), and
//! each exchange → queue binding as `rabbitmq.queue.binding`.
//!
//! A span with `messaging.system = rabbitmq` names where its message went or
//! came from in one of two ways:
//! - the messaging conventions since 1.24: `messaging.destination.name` =
//!   `{exchange}:{routing key}` on a publish and
//!   `{exchange}:{routing key}:{queue}` on a receive or process (empty parts
//!   left out, `amq.default` for the default exchange without a key), and
//!   `messaging.rabbitmq.destination.routing_key`;
//! - the older ones, still written by the Node.js `amqplib` instrumentation
//!   (0.50): `messaging.destination` = the exchange ("" for the default one),
//!   `messaging.rabbitmq.routing_key`, and on the consumer side the queue only
//!   in the span name, `{queue} process`.
//!
//! A named queue is taken as is; a publish to the default exchange goes to
//! the queue named by its routing key; a publish to a named exchange goes to
//! the queues bound to it whose binding key matches the routing key: equal for
//! `direct`, by `*`/`#` words for `topic`, every binding for `fanout` and
//! `headers` (header arguments are not read). Exchange-to-exchange bindings
//! are not followed. A span does not carry the vhost: a queue name found in
//! several vhosts joins all of them.
//!
//! - spans: `messaging.system = rabbitmq`;
//! - rules' table `rabbitmq_queue` (the queues the trace touches) and
//!   alerts' table `rabbitmq_queues` (the queues as last collected),
//!   declared in [`QUEUE`] and [`QUEUES`];
//! - page: `GET /api/queues`, the queues as last collected;
//! - trouble: a queue in alarm (backlog, stop or stall, retry storm) the
//!   trace's destinations or routing keys may reach;
//! - a RabbitMQ span that reaches no known queue while queues are known is
//!   a join miss (`join="rabbitmq"`).

use std::collections::{BTreeMap, BTreeSet};

use super::capabilities;
use super::{
    json, wait_window, Asked, Join, PageColumn, PageTable, Source, Tick, View, JOIN_ATTRS,
};
use super::{KeepsMetrics, ShowsState, ShowsTrouble};
use crate::correlate::model::cause::{CONSUMER_LAG, RETRY_STORM};
use crate::correlate::model::series::{find, s as attr_s, Kept, Offer, PointKind};
use crate::correlate::model::table::{s, About, Column, Declared, Purpose, Table, Traced, V};
use crate::correlate::model::trace::SpanKind;
use crate::correlate::model::{Hex16, Joined, Key, Rule, Series, SpanRow, TraceRow};
use crate::correlate::store::Store;

/// The binding series the receiver writes.
pub const BINDING: &str = "rabbitmq.queue.binding";
/// The vhost attribute of a queue series.
pub const VHOST: &str = "rabbitmq.vhost.name";

/// Whether a span is a RabbitMQ one.
pub fn is_rabbit(s: &SpanRow) -> bool {
    s.messaging_system
        .as_deref()
        .is_some_and(|m| m.eq_ignore_ascii_case("rabbitmq"))
}

/// A binding of an exchange to a queue.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Bound {
    vhost: String,
    exchange: String,
    kind: String,
    key: String,
    queue: String,
}

/// The queues and bindings the correlation state knows.
#[derive(Debug, Default)]
pub struct Index {
    /// (vhost, queue).
    queues: BTreeSet<(String, String)>,
    bindings: Vec<Bound>,
}

impl Index {
    /// From the queue series of the correlation state.
    pub fn new<'a>(series: impl IntoIterator<Item = &'a Series>) -> Self {
        let mut ix = Index::default();
        let mut bindings = BTreeSet::new();
        for s in series {
            let Some(q) = s.key.get("queue") else {
                continue;
            };
            let vhost = s.attr(VHOST).unwrap_or("/").to_string();
            if s.name == BINDING {
                bindings.insert(Bound {
                    vhost: vhost.clone(),
                    exchange: s.attr("rabbitmq.exchange.name").unwrap_or("").to_string(),
                    kind: s.attr("rabbitmq.exchange.type").unwrap_or("").to_string(),
                    key: s
                        .attr("rabbitmq.binding.routing_key")
                        .unwrap_or("")
                        .to_string(),
                    queue: q.to_string(),
                });
            }
            ix.queues.insert((vhost, q.to_string()));
        }
        ix.bindings = bindings.into_iter().collect();
        ix
    }

    /// No queue known.
    pub fn is_empty(&self) -> bool {
        self.queues.is_empty()
    }

    fn named(&self, q: &str) -> Vec<(String, String)> {
        self.queues
            .iter()
            .filter(|(_, n)| n == q)
            .cloned()
            .collect()
    }

    fn is_exchange(&self, x: &str) -> bool {
        self.bindings.iter().any(|b| b.exchange == x)
    }

    /// The queues bound to `exchange` whose binding matches `key`.
    fn bound(&self, exchange: &str, key: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .bindings
            .iter()
            .filter(|b| b.exchange == exchange && matches(b, key))
            .map(|b| (b.vhost.clone(), b.queue.clone()))
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The queues (vhost, name) a RabbitMQ span's message went to (publish)
    /// or came from (receive, process).
    pub fn resolve(&self, s: &SpanRow) -> Vec<(String, String)> {
        let rk = s.routing_key.as_deref().filter(|k| !k.is_empty());
        let consumer = consumer_side(s);
        let dest = s.destination.as_deref().unwrap_or("");
        let (mut exchange, mut key, mut queue): (Option<&str>, Option<&str>, Option<&str>) =
            (None, rk, None);
        let parts: Vec<&str> = dest.splitn(3, ':').collect();
        match parts.as_slice() {
            [x, k, q] => {
                exchange = Some(x);
                key = key.or(Some(k));
                queue = Some(q);
            }
            // `{exchange}:{key}`, `{key}:{queue}` (default exchange) or
            // `{exchange}:{queue}` (no key): the queue when one is named.
            [a, b] if consumer => {
                if !self.named(b).is_empty() {
                    queue = Some(b);
                } else {
                    exchange = Some(a);
                    if Some(*a) != rk {
                        key = key.or(Some(b));
                    }
                }
            }
            [x, k] => {
                exchange = Some(x);
                key = key.or(Some(k));
            }
            [d] if d.is_empty() || *d == "amq.default" || Some(*d) == rk => exchange = Some(""),
            [d] if consumer && !self.is_exchange(d) && !self.named(d).is_empty() => queue = Some(d),
            [d] => exchange = Some(d),
            _ => {}
        }
        if queue.is_none() && consumer {
            // `{queue} process` (amqplib), `{queue} receive`.
            queue = ["process", "receive", "deliver", "consume"]
                .iter()
                .find_map(|w| {
                    s.name
                        .strip_suffix(w)
                        .and_then(|q| q.strip_suffix(' '))
                        .filter(|q| !self.named(q).is_empty())
                });
        }
        if let Some(q) = queue.filter(|q| !q.is_empty()) {
            return self.named(q);
        }
        match (exchange, key) {
            (Some("") | None, Some(k)) => self.named(k),
            (Some(x), k) if !x.is_empty() => self.bound(x, k.unwrap_or("")),
            _ => Vec::new(),
        }
    }

    /// Whether a trace with these destinations and routing keys (gathered
    /// from all its spans, not paired) may touch `queue`: named by a
    /// destination (or its last part), by a routing key through the default
    /// exchange, or bound to a destination's exchange with a matching key.
    /// For the `correlated` sampling policy, which sees attribute values only.
    pub fn may_touch(
        &self,
        (vhost, queue): (&str, &str),
        destinations: &[&str],
        routing_keys: &[&str],
    ) -> bool {
        let named = |d: &str| d == queue || d.rsplit(':').next() == Some(queue);
        if destinations.iter().any(|d| named(d)) || routing_keys.contains(&queue) {
            return true;
        }
        self.bindings
            .iter()
            .filter(|b| b.vhost == vhost && b.queue == queue)
            .any(|b| {
                // `{exchange}:{key}:{queue}` names its queue (checked above).
                destinations
                    .iter()
                    .filter(|d| d.matches(':').count() < 2)
                    .any(|d| {
                        let mut parts = d.splitn(2, ':');
                        let x = parts.next().unwrap_or("");
                        let k = parts.next();
                        x == b.exchange
                            && (k.is_some_and(|k| matches(b, k))
                                || routing_keys.iter().any(|k| matches(b, k))
                                || (k.is_none() && routing_keys.is_empty() && matches(b, "")))
                    })
            })
    }
}

fn consumer_side(s: &SpanRow) -> bool {
    s.kind == SpanKind::Consumer
        || matches!(
            s.messaging_operation.as_deref(),
            Some("receive" | "process" | "deliver")
        )
        || (s.kind != SpanKind::Producer
            && ["process", "receive", "deliver", "consume"]
                .iter()
                .any(|w| s.name.to_ascii_lowercase().contains(w)))
}

/// Whether a message with routing key `key` published to the binding's
/// exchange goes to its queue.
fn matches(b: &Bound, key: &str) -> bool {
    match b.kind.as_str() {
        "fanout" | "headers" => true,
        "topic" => topic_matches(&b.key, key),
        "direct" => b.key == key,
        // Unknown (a plugin's): exact, or as a pattern when it is one.
        _ => b.key == key || topic_matches(&b.key, key),
    }
}

/// AMQP topic matching: words split by `.`, `*` is exactly one word, `#`
/// zero or more.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    fn go(p: &[&str], k: &[&str]) -> bool {
        match p.split_first() {
            None => k.is_empty(),
            Some((&"#", rest)) => (0..=k.len()).any(|i| go(rest, &k[i..])),
            Some((w, rest)) => match k.split_first() {
                Some((kw, krest)) => (*w == "*" || w == kw) && go(rest, krest),
                None => false,
            },
        }
    }
    go(&words(pattern), &words(key))
}

/// The words of a key or pattern: "" is no word at all, not one empty word.
fn words(x: &str) -> Vec<&str> {
    if x.is_empty() {
        Vec::new()
    } else {
        x.split('.').collect()
    }
}

/// A queue a trace publishes to or consumes from, by its own series.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QueueRow {
    /// Queue name.
    pub queue: String,
    /// Its vhost.
    pub vhost: String,
    /// The span that publishes to it or consumes from it.
    pub span_id: String,
    /// `publish` or `consume`.
    pub role: &'static str,
    /// Depth (ready + unacknowledged), largest in the join interval.
    pub depth: Option<f64>,
    /// How the depth moved over the join interval (last − first).
    pub depth_trend: Option<f64>,
    /// Ready messages, largest.
    pub ready: Option<f64>,
    /// Unacknowledged messages, largest.
    pub unacked: Option<f64>,
    /// Consumers, at the latest collection in the join interval.
    pub consumers: Option<f64>,
    /// Backlog age (s), largest.
    pub backlog_age_s: Option<f64>,
    /// Burrow-like status code, worst (1 OK, 2 WARN, 4 STOP, 5 STALL).
    pub status: Option<i64>,
    /// Backlog alarm on.
    pub alarm: bool,
    /// Retry storm on the queue.
    pub retry_storm: bool,
    /// Publish rate (messages/s), largest.
    pub publish_rate: Option<f64>,
    /// Delivery rate (messages/s), at the latest collection.
    pub deliver_rate: Option<f64>,
    /// The latest time of the points used (ns).
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
}

/// The row of queue (`vhost`, `queue`) over `[from, to]` (ns).
pub fn queue_row(series: &[Series], (vhost, queue): (&str, &str), from: u64, to: u64) -> QueueRow {
    let mut row = QueueRow {
        queue: queue.to_string(),
        vhost: vhost.to_string(),
        ..Default::default()
    };
    let max = |a: Option<f64>, b: f64| Some(a.map_or(b, |x| x.max(b)));
    // The consumers and the delivery rate as last seen in the interval.
    let latest = |slot: &mut Option<(u64, f64)>, t: u64, v: f64| {
        if slot.is_none_or(|(at, _)| t >= at) {
            *slot = Some((t, v));
        }
    };
    let (mut consumers, mut deliver) = (None, None);
    // Depth per collection: ready + unacknowledged at the same time.
    let mut depth: BTreeMap<u64, f64> = BTreeMap::new();
    for s in series
        .iter()
        .filter(|s| s.key.get("queue") == Some(queue) && s.attr(VHOST).unwrap_or("/") == vhost)
    {
        for &(t, v) in s.points.iter().filter(|(t, _)| *t >= from && *t <= to) {
            match s.name.as_str() {
                "rabbitmq.message.current" => {
                    *depth.entry(t).or_default() += v;
                    if s.attr("state") == Some("ready") {
                        row.ready = max(row.ready, v);
                    } else {
                        row.unacked = max(row.unacked, v);
                    }
                }
                "rabbitmq.consumer.count" => latest(&mut consumers, t, v),
                "rabbitmq.queue.backlog_age" => row.backlog_age_s = max(row.backlog_age_s, v),
                "rabbitmq.queue.status" => {
                    row.status = Some(row.status.map_or(v as i64, |x| x.max(v as i64)));
                }
                "rabbitmq.queue.backlog_alarm" => row.alarm |= v >= 1.0,
                "rabbitmq.queue.retry_storm" => row.retry_storm |= v >= 1.0,
                "rabbitmq.queue.publish_rate" => row.publish_rate = max(row.publish_rate, v),
                "rabbitmq.queue.deliver_rate" => latest(&mut deliver, t, v),
                _ => continue,
            }
            row.time_ns = row.time_ns.max(t);
        }
    }
    row.consumers = consumers.map(|x| x.1);
    row.deliver_rate = deliver.map(|x| x.1);
    row.depth = depth.values().copied().reduce(f64::max);
    if let (Some(first), Some(last)) = (depth.values().next(), depth.values().next_back()) {
        row.depth_trend = Some(last - first);
    }
    row
}

/// One row per RabbitMQ queue and role (publish, consume) the trace touches,
/// over the span that waited on it longest .
fn queue_rows(
    t: &TraceRow,
    index: &Index,
    series: &[Series],
    (from, to): (u64, u64),
    sample_ns: u64,
) -> (Vec<QueueRow>, u64) {
    let mut best: BTreeMap<((String, String), &'static str), usize> = BTreeMap::new();
    let mut missed = 0;
    for (i, s) in t.spans.iter().enumerate().filter(|(_, s)| is_rabbit(s)) {
        let role = if s.kind == SpanKind::Producer
            || s.async_wait_ms.is_none() && s.kind != SpanKind::Consumer
        {
            "publish"
        } else {
            "consume"
        };
        let found = index.resolve(s);
        if found.is_empty() {
            missed = 1;
        }
        let weight = |x: &SpanRow| x.async_wait_ms.unwrap_or(0.0) + x.duration_ms;
        for q in found {
            let e = best.entry((q, role)).or_insert(i);
            if weight(&t.spans[*e]) < weight(s) {
                *e = i;
            }
        }
    }
    let rows = best
        .into_iter()
        .filter_map(|(((vhost, queue), role), i)| {
            let s = &t.spans[i];
            // A consumer: the queue while its message waited (as for Kafka lag).
            let window = wait_window(t, s, sample_ns).unwrap_or((from, to));
            let mut r = queue_row(series, (&vhost, &queue), window.0, window.1);
            (r.time_ns > 0).then(|| {
                r.span_id = Hex16::of(s.span_id).as_str().to_string();
                r.role = role;
                r
            })
        })
        .collect();
    (rows, missed)
}

/// A RabbitMQ queue as last collected (the alerts' `rabbitmq_queues`, the page's `/api/queues`).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct QueueState {
    /// Queue.
    pub queue: String,
    /// Its vhost.
    pub vhost: String,
    /// Burrow-like status code.
    pub status: Option<i64>,
    /// Its name.
    pub status_name: Option<String>,
    /// Ready + unacknowledged.
    pub depth: Option<f64>,
    /// Ready.
    pub ready: Option<f64>,
    /// Unacknowledged.
    pub unacked: Option<f64>,
    /// Consumers.
    pub consumers: Option<f64>,
    /// Backlog age (s).
    pub backlog_age_s: Option<f64>,
    /// Backlog alarm on.
    pub alarm: bool,
    /// Retry storm on.
    pub retry_storm: bool,
    /// Messages published per second.
    pub publish_rate: Option<f64>,
    /// Messages delivered per second.
    pub deliver_rate: Option<f64>,
    /// Latest collection (ms since the epoch).
    pub time_ms: f64,
    #[serde(skip)]
    status_at: u64,
}

/// The queues as last collected, from the latest points.
pub fn queues(store: &Store) -> Vec<QueueState> {
    let mut queues: BTreeMap<(String, String), QueueState> = BTreeMap::new();
    for (name, key, attrs, t, v) in store.series.latest_points() {
        let Some(queue) = key.get("queue") else {
            continue;
        };
        let attr = |k: &str| attrs.iter().find(|(key, _)| key == k).map(|(_, v)| v);
        let vhost = attr(VHOST).cloned().unwrap_or_default();
        let q = queues
            .entry((vhost.clone(), queue.to_string()))
            .or_insert_with(|| QueueState {
                queue: queue.to_string(),
                vhost,
                ..Default::default()
            });
        q.time_ms = q.time_ms.max(t as f64 / 1e6);
        let v = Some(v);
        match (name.as_str(), attr("state").map(String::as_str)) {
            // The status series is keyed by its status name too: the latest wins.
            ("rabbitmq.queue.status", _) if q.status.is_none() || t >= q.status_at => {
                q.status = v.map(|v| v as i64);
                q.status_name = attr("status").cloned();
                q.status_at = t;
            }
            ("rabbitmq.message.current", Some("ready")) => q.ready = v,
            ("rabbitmq.message.current", _) => q.unacked = v,
            ("rabbitmq.consumer.count", _) => q.consumers = v,
            ("rabbitmq.queue.backlog_age", _) => q.backlog_age_s = v,
            ("rabbitmq.queue.backlog_alarm", _) => q.alarm = v >= Some(1.0),
            ("rabbitmq.queue.retry_storm", _) => q.retry_storm = v >= Some(1.0),
            ("rabbitmq.queue.publish_rate", _) => q.publish_rate = v,
            ("rabbitmq.queue.deliver_rate", _) => q.deliver_rate = v,
            _ => {}
        }
    }
    for q in queues.values_mut() {
        q.depth = match (q.ready, q.unacked) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0.0) + b.unwrap_or(0.0)),
        };
    }
    queues.into_values().collect()
}

/// The RabbitMQ source.
pub struct Rabbit {
    sample_ns: u64,
}

impl Rabbit {
    /// A consumer's wait joins the queue sampled within `sample_ns` of it.
    pub fn new(sample_ns: u64) -> Self {
        Rabbit { sample_ns }
    }
}

/// `processors.correlate.rabbitmq`: how often the `rabbitmq` receiver collects.
pub type RabbitmqConfig = super::SampleInterval;

/// The rules' table of queues the trace's spans touch.
static QUEUE: Declared<Traced<QueueRow>> = Declared {
    name: "rabbitmq_queue",
    doc: "A RabbitMQ queue a span of the trace publishes to or consumes from, by the queue's own \
          series over the join interval: one row per span and queue.",
    purpose: Purpose::Rules,
    columns: &[
        Column::<Traced<QueueRow>>::text("trace_id", |r, _| s(&r.trace_id)).doc("The trace."),
        Column::<Traced<QueueRow>>::text("queue", |r, _| s(&r.row.queue)).doc("The queue's name."),
        Column::<Traced<QueueRow>>::text("vhost", |r, _| s(&r.row.vhost)).doc("Its vhost."),
        Column::<Traced<QueueRow>>::text("span_id", |r, _| s(&r.row.span_id))
            .doc("The span that publishes to it or consumes from it."),
        Column::<Traced<QueueRow>>::text("role", |r, _| s(r.row.role)).doc("`publish` or `consume`."),
        Column::<Traced<QueueRow>>::float("depth", |r, _| V::F(r.row.depth))
            .doc("Ready + unacknowledged messages, largest in the interval."),
        Column::<Traced<QueueRow>>::float("depth_trend", |r, _| V::F(r.row.depth_trend))
            .doc("How the depth moved over the interval (last − first)."),
        Column::<Traced<QueueRow>>::float("ready", |r, _| V::F(r.row.ready)).doc("Ready messages, largest."),
        Column::<Traced<QueueRow>>::float("unacked", |r, _| V::F(r.row.unacked))
            .doc("Unacknowledged messages, largest."),
        Column::<Traced<QueueRow>>::float("consumers", |r, _| V::F(r.row.consumers))
            .doc("Consumers at the latest collection in the interval."),
        Column::<Traced<QueueRow>>::float("backlog_age_s", |r, _| V::F(r.row.backlog_age_s))
            .doc("Age of the oldest message (s), largest."),
        Column::<Traced<QueueRow>>::int("status", |r, _| V::I(r.row.status))
            .doc("Burrow-like status, worst: 1 OK, 2 WARN (grows), 4 STOP (no consumer), 5 STALL (consumers, no delivery)."),
        Column::<Traced<QueueRow>>::bool("alarm", |r, _| V::B(Some(r.row.alarm))).doc("The backlog alarm is on."),
        Column::<Traced<QueueRow>>::bool("retry_storm", |r, _| V::B(Some(r.row.retry_storm)))
            .doc("A retry storm is on the queue."),
        Column::<Traced<QueueRow>>::float("publish_rate", |r, _| V::F(r.row.publish_rate))
            .doc("Messages published per second, largest."),
        Column::<Traced<QueueRow>>::float("deliver_rate", |r, _| V::F(r.row.deliver_rate))
            .doc("Messages delivered per second, at the latest collection."),
        Column::<Traced<QueueRow>>::float("time_ms", |r, _| V::F(Some(r.row.time_ns as f64 / 1e6)))
            .doc("The latest time of the points used (ms since the epoch)."),
    ],
};

/// The alerts' table of queues as last collected.
static QUEUES: Declared<QueueState> = Declared {
    name: "rabbitmq_queues",
    doc: "A RabbitMQ queue as last collected: one row per queue.",
    purpose: Purpose::Alerts,
    columns: &[
        Column::<QueueState>::text("queue", |q, _| s(&q.queue)).doc("The queue's name."),
        Column::<QueueState>::text("vhost", |q, _| s(&q.vhost)).doc("Its vhost."),
        Column::<QueueState>::int("status", |q, _| V::I(q.status))
            .doc("Burrow-like status: 1 OK, 2 WARN, 4 STOP, 5 STALL."),
        Column::<QueueState>::text("status_name", |q, _| V::S(q.status_name.as_deref()))
            .doc("The status's name."),
        Column::<QueueState>::float("depth", |q, _| V::F(q.depth))
            .doc("Ready + unacknowledged messages."),
        Column::<QueueState>::float("ready", |q, _| V::F(q.ready)).doc("Ready messages."),
        Column::<QueueState>::float("unacked", |q, _| V::F(q.unacked))
            .doc("Unacknowledged messages."),
        Column::<QueueState>::float("consumers", |q, _| V::F(q.consumers)).doc("Consumers."),
        Column::<QueueState>::float("backlog_age_s", |q, _| V::F(q.backlog_age_s))
            .doc("Age of the oldest message (s)."),
        Column::<QueueState>::bool("alarm", |q, _| V::B(Some(q.alarm)))
            .doc("The backlog alarm is on."),
        Column::<QueueState>::bool("retry_storm", |q, _| V::B(Some(q.retry_storm)))
            .doc("A retry storm is on the queue."),
        Column::<QueueState>::float("publish_rate", |q, _| V::F(q.publish_rate))
            .doc("Messages published per second."),
        Column::<QueueState>::float("deliver_rate", |q, _| V::F(q.deliver_rate))
            .doc("Messages delivered per second."),
        Column::<QueueState>::float("time_ms", |q, _| V::F(Some(q.time_ms)))
            .doc("The latest collection (ms since the epoch)."),
    ],
};

impl Source for Rabbit {
    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn claims(&self, s: &SpanRow) -> bool {
        is_rabbit(s)
    }

    fn tables(&self) -> Vec<About> {
        vec![QUEUE.about(), QUEUES.about()]
    }

    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        let mut rows = Vec::new();
        let mut misses = 0;
        // The queue series, only when a trace of the tick has a RabbitMQ span.
        if traces.iter().any(|t| t.spans.iter().any(is_rabbit)) {
            let series = tick.store.series.matching(|s| s.key.get("queue").is_some());
            let index = Index::new(&series);
            if !index.is_empty() {
                for t in traces.iter_mut() {
                    let (found, missed) =
                        queue_rows(t, &index, &series, tick.interval(t), self.sample_ns);
                    misses += missed;
                    for row in found {
                        t.joined.push(Joined::Metric("queue", json(&row)));
                        let trace_id = t.trace_id.clone();
                        rows.push(Traced { trace_id, row });
                    }
                }
            }
        }
        Ok(Join {
            tables: vec![QUEUE.batch(&rows)?],
            misses,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r(
                "queue_backlog",
                &CONSUMER_LAG,
                r#"
SELECT trace_id, 1.0 AS confidence,
  first_value(summary ORDER BY explained_ms DESC) AS summary,
  first_value(evidence ORDER BY explained_ms DESC) AS evidence,
  first_value(culprit ORDER BY explained_ms DESC) AS culprit_span_id,
  max(explained_ms) AS explained_ms,
  bool_or(explains) AS explains_failure
FROM (
  SELECT q.trace_id,
    concat('RabbitMQ queue ', q.queue, CASE WHEN q.vhost = '/' THEN '' ELSE concat(' (vhost ', q.vhost, ')') END, ' ',
           CASE q.status WHEN 4 THEN 'has no consumer' WHEN 5 THEN 'stalled: consumers but no delivery' WHEN 2 THEN 'grows' ELSE 'is backlogged' END,
           ': ', CAST(CAST(coalesce(q.depth, 0) AS BIGINT) AS VARCHAR), ' messages waiting',
           CASE WHEN q.backlog_age_s IS NULL THEN '' ELSE concat(', the oldest for ', CAST(CAST(q.backlog_age_s AS BIGINT) AS VARCHAR), ' s') END,
           CASE WHEN s.async_wait_ms IS NOT NULL
                THEN concat('; the message waited ', CAST(CAST(s.async_wait_ms AS BIGINT) AS VARCHAR), ' ms before ', s.service, ' consumed it')
                ELSE concat('; ', coalesce(p.service, s.service), ' published to it and waited ', CAST(CAST(greatest(least(p.end_ms - s.end_ms, p.self_ms), 0.0) AS BIGINT) AS VARCHAR), ' ms') END) AS summary,
    concat('queue=', q.queue, ' vhost=', q.vhost, ' depth=', CAST(q.depth AS VARCHAR), ' depth_trend=', CAST(q.depth_trend AS VARCHAR),
           ' consumers=', CAST(q.consumers AS VARCHAR), ' status=', CAST(q.status AS VARCHAR), ' backlog_age_s=', CAST(q.backlog_age_s AS VARCHAR),
           ' deliver_rate=', CAST(q.deliver_rate AS VARCHAR)) AS evidence,
    CASE WHEN s.async_wait_ms IS NOT NULL OR p.span_id IS NULL THEN s.span_id ELSE p.span_id END AS culprit,
    CASE WHEN s.async_wait_ms IS NOT NULL THEN s.async_wait_ms + s.duration_ms
         ELSE greatest(coalesce(least(p.end_ms - s.end_ms, p.self_ms), 0.0), 0.0) END AS explained_ms,
    -- The request failed waiting on a message that nobody could take
    -- (no consumer, or stalled): the backlog is why it failed.
    t.failed AND q.status IN (4, 5) AND s.async_wait_ms IS NULL
      AND coalesce(p.end_ms - s.end_ms, 0.0) >= 0.5 * t.duration_ms AS explains
  FROM rabbitmq_queue q JOIN spans s ON s.trace_id = q.trace_id AND s.span_id = q.span_id
  JOIN traces t ON t.trace_id = q.trace_id
  LEFT JOIN spans p ON p.trace_id = s.trace_id AND p.span_id = s.parent_id
  WHERE (q.status IN (2, 4, 5) OR q.alarm) AND NOT q.retry_storm
) x
GROUP BY trace_id"#,
            ),
            r(
                "retry_storm_queue",
                &RETRY_STORM,
                r#"
SELECT q.trace_id, 1.0 AS confidence,
  concat('retry storm on RabbitMQ queue ', max(q.queue), ': ', CAST(CAST(max(q.publish_rate) AS BIGINT) AS VARCHAR), ' messages/s') AS summary,
  max(s.span_id) AS culprit_span_id,
  coalesce(max(s.async_wait_ms) + max(s.duration_ms), 0.0) AS explained_ms
FROM rabbitmq_queue q JOIN spans s ON s.trace_id = q.trace_id AND s.span_id = q.span_id
WHERE q.retry_storm
GROUP BY q.trace_id"#,
            ),
        ]
    }

    capabilities!(metrics, state, trouble);
}

impl KeepsMetrics for Rabbit {
    fn keep(&self, o: &Offer<'_>) -> Option<Kept> {
        if o.kind != PointKind::Number || !o.metric.starts_with("rabbitmq.") {
            return None;
        }
        let queue = find(o.resource, &["rabbitmq.queue.name"]).and_then(attr_s)?;
        let vhost = find(o.resource, &[VHOST]).and_then(attr_s);
        Some(Kept {
            key: Key::new("rabbitmq").with("queue", Some(queue)),
            drop: JOIN_ATTRS,
            add: vec![(VHOST.to_string(), vhost.unwrap_or_else(|| "/".into()))],
        })
    }

    fn dims(&self) -> &'static [&'static str] {
        &["queue"]
    }
}

impl ShowsState for Rabbit {
    fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        let queues = view.map(|v| queues(v.store)).unwrap_or_default();
        Ok(vec![QUEUES.batch(&queues)?])
    }

    fn api(&self, path: &str, view: &View<'_>) -> Option<serde_json::Value> {
        (path == "queues").then(|| json(&queues(view.store)))
    }

    fn page(&self) -> Option<PageTable> {
        Some(PageTable {
            path: "queues",
            title: "RabbitMQ queues",
            empty: "None reported (rabbitmq receiver).",
            columns: &const {
                [
                    PageColumn::new("queue", "Queue", "text"),
                    PageColumn::new("vhost", "Vhost", "text"),
                    PageColumn::new("status_name", "Status", "status"),
                    PageColumn::new("depth", "Depth", "num"),
                    PageColumn::new("consumers", "Consumers", "num"),
                    PageColumn::new("backlog_age_s", "Oldest (s)", "num"),
                ]
            },
        })
    }
}

impl ShowsTrouble for Rabbit {
    fn trouble_keys(&self) -> &'static [&'static str] {
        &[
            "messaging.destination.name",
            "messaging.destination",
            "messaging.rabbitmq.destination.routing_key",
            "messaging.rabbitmq.routing_key",
        ]
    }

    fn in_trouble(&self, asked: &Asked<'_, '_>) -> bool {
        let Asked { store, values, .. } = *asked;
        let topics: Vec<&str> = ["messaging.destination.name", "messaging.destination"]
            .iter()
            .flat_map(|k| values(k))
            .collect();
        let routing_keys: Vec<&str> = [
            "messaging.rabbitmq.destination.routing_key",
            "messaging.rabbitmq.routing_key",
        ]
        .iter()
        .flat_map(|k| values(k))
        .collect();
        if topics.is_empty() && routing_keys.is_empty() {
            return false;
        }
        let last = |s: &Series| s.points.back().map(|p| p.1);
        // Queues in alarm (a backlog, a stop or stall, a retry storm) that
        // the trace's destinations or routing keys may reach.
        let series = store.series.matching(|s| s.key.get("queue").is_some());
        let troubled: BTreeSet<(&str, &str)> = series
            .iter()
            .filter(|s| match s.name.as_str() {
                "rabbitmq.queue.backlog_alarm" | "rabbitmq.queue.retry_storm" => {
                    last(s).is_some_and(|v| v >= 1.0)
                }
                "rabbitmq.queue.status" => last(s).is_some_and(|v| v >= 2.0),
                _ => false,
            })
            .filter_map(|s| Some((s.attr(VHOST).unwrap_or("/"), s.key.get("queue")?)))
            .collect();
        if troubled.is_empty() {
            return false;
        }
        let ix = Index::new(series.iter().filter(|s| {
            s.name == BINDING
                && s.key
                    .get("queue")
                    .is_some_and(|q| troubled.iter().any(|t| t.1 == q))
        }));
        troubled
            .iter()
            .any(|q| ix.may_touch(*q, &topics, &routing_keys))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_patterns_match_as_amqp_defines_them() {
        for (p, k, yes) in [
            ("order.*", "order.created", true),
            ("order.*", "order.created.eu", false),
            ("order.#", "order.created.eu", true),
            ("order.#", "order", true),
            ("#", "", true),
            ("#", "a.b", true),
            ("*.created", "order.created", true),
            ("*", "", false),
            ("a.#.z", "a.z", true),
            ("a.#.z", "a.b.c.z", true),
            ("a.#.z", "a.b.c", false),
            ("order.created", "order.created", true),
            ("", "", true),
            ("", "x", false),
        ] {
            assert_eq!(topic_matches(p, k), yes, "{p} ~ {k}");
        }
    }

    fn series(name: &str, queue: &str, attrs: &[(&str, &str)]) -> Series {
        let mut s = Series::new(name, Key::new("rabbitmq").with("queue", Some(queue.into())));
        s.attrs = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        s.attrs.push((VHOST.into(), "/".into()));
        s.attrs.sort();
        s
    }

    use crate::correlate::model::attributes::SpanAttrs;

    fn span(kind: SpanKind, name: &str, dest: Option<&str>, rk: Option<&str>) -> SpanRow {
        SpanRow {
            kind,
            name: name.into(),
            attrs: SpanAttrs {
                messaging_system: Some("rabbitmq".into()),
                destination: dest.map(String::from),
                routing_key: rk.map(String::from),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn an_internal_span_that_says_it_processes_a_message_is_the_consumer_side() {
        let mut s = span(SpanKind::Internal, "handle", Some("orders"), None);
        assert!(!consumer_side(&s), "neither its kind nor its name says so");
        s.messaging_operation = Some("process".into());
        assert!(consumer_side(&s));
        s.messaging_operation = Some("send".into());
        assert!(!consumer_side(&s));
    }

    #[test]
    fn spans_of_both_conventions_find_their_queues() {
        let bind = |q, x, t, k| {
            series(
                BINDING,
                q,
                &[
                    ("rabbitmq.exchange.name", x),
                    ("rabbitmq.exchange.type", t),
                    ("rabbitmq.binding.routing_key", k),
                ],
            )
        };
        let ix = Index::new(&[
            bind("orders.created", "orders", "topic", "order.*"),
            bind("orders.audit", "orders", "topic", "#"),
            bind("mail", "notify", "direct", "mail"),
            bind("sms", "notify", "direct", "sms"),
            bind("fan.a", "fan", "fanout", ""),
            series("rabbitmq.consumer.count", "tasks", &[]),
        ]);
        let q = |v: &[&str]| -> Vec<(String, String)> {
            v.iter().map(|q| ("/".to_string(), q.to_string())).collect()
        };
        // amqplib 0.50 (old conventions): exchange + routing key on a publish.
        let s = span(
            SpanKind::Producer,
            "publish orders",
            Some("orders"),
            Some("order.created"),
        );
        assert_eq!(ix.resolve(&s), q(&["orders.audit", "orders.created"]));
        let s = span(
            SpanKind::Producer,
            "publish notify",
            Some("notify"),
            Some("sms"),
        );
        assert_eq!(ix.resolve(&s), q(&["sms"]));
        // The default exchange: the queue named by the key.
        let s = span(
            SpanKind::Producer,
            "publish <default>",
            Some(""),
            Some("tasks"),
        );
        assert_eq!(ix.resolve(&s), q(&["tasks"]));
        // amqplib's consumer: the queue only in the span name.
        let s = span(
            SpanKind::Consumer,
            "orders.created process",
            Some("orders"),
            Some("order.created"),
        );
        assert_eq!(ix.resolve(&s), q(&["orders.created"]));
        // Conventions since 1.24.
        let s = span(
            SpanKind::Producer,
            "publish orders:order.paid",
            Some("orders:order.paid"),
            None,
        );
        assert_eq!(ix.resolve(&s), q(&["orders.audit", "orders.created"]));
        let s = span(
            SpanKind::Consumer,
            "process orders:order.paid:orders.created",
            Some("orders:order.paid:orders.created"),
            Some("order.paid"),
        );
        assert_eq!(ix.resolve(&s), q(&["orders.created"]));
        let s = span(
            SpanKind::Consumer,
            "process tasks:tasks",
            Some("tasks:tasks"),
            Some("tasks"),
        );
        assert_eq!(ix.resolve(&s), q(&["tasks"]));
        let s = span(
            SpanKind::Producer,
            "publish amq.default",
            Some("amq.default"),
            None,
        );
        assert!(ix.resolve(&s).is_empty(), "no key: nowhere to go");
        let s = span(
            SpanKind::Producer,
            "publish fan",
            Some("fan"),
            Some("anything"),
        );
        assert_eq!(ix.resolve(&s), q(&["fan.a"]));
        // Unknown exchange or queue: nothing.
        let s = span(
            SpanKind::Producer,
            "publish x",
            Some("elsewhere"),
            Some("order.created"),
        );
        assert!(ix.resolve(&s).is_empty());
        // The sampling policy's loose view: values of the whole trace.
        assert!(ix.may_touch(("/", "orders.created"), &["orders"], &["order.created"]));
        assert!(!ix.may_touch(("/", "orders.created"), &["orders"], &["order.x.y"]));
        assert!(ix.may_touch(("/", "tasks"), &[""], &["tasks"]));
        assert!(!ix.may_touch(("/", "mail"), &["notify"], &["sms"]));
    }

    #[test]
    fn a_queue_row_sums_depth_per_collection_and_keeps_the_worst() {
        let mut ready = series("rabbitmq.message.current", "q", &[("state", "ready")]);
        let mut unacked = series(
            "rabbitmq.message.current",
            "q",
            &[("state", "unacknowledged")],
        );
        let mut status = series("rabbitmq.queue.status", "q", &[("status", "STOP")]);
        let mut consumers = series("rabbitmq.consumer.count", "q", &[]);
        for (i, t) in [10u64, 20, 30].iter().enumerate() {
            ready.points.push_back((*t, 100.0 * (i as f64 + 1.0)));
            unacked.points.push_back((*t, 5.0));
            status
                .points
                .push_back((*t, if i == 2 { 4.0 } else { 1.0 }));
            consumers.points.push_back((*t, 1.0 - i as f64 / 2.0));
        }
        let other = series("rabbitmq.queue.status", "other", &[]);
        let r = queue_row(
            &[ready, unacked, status, consumers, other],
            ("/", "q"),
            15,
            30,
        );
        assert_eq!(r.depth, Some(305.0));
        assert_eq!(r.depth_trend, Some(100.0));
        assert_eq!((r.ready, r.unacked), (Some(300.0), Some(5.0)));
        assert_eq!(r.status, Some(4));
        assert_eq!(r.consumers, Some(0.0), "as last seen");
        assert_eq!(r.time_ns, 30);
        let r = queue_row(&[], ("/", "q"), 0, 100);
        assert_eq!(r.time_ns, 0, "nothing joined");
    }
}

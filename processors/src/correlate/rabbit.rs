//! RabbitMQ queues joined to the spans that publish to and consume from them.
//!
//! The `rabbitmq` receiver writes each queue's series on a resource with
//! `rabbitmq.queue.name` and `rabbitmq.vhost.name` (kept in the correlation
//! state under [`super::store::Dims::queue`], the vhost as an attribute), and
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

use std::collections::{BTreeMap, BTreeSet};

use super::features::SpanRow;
use super::store::Series;

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
            let Some(q) = s.dims.queue.as_deref() else {
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
    s.kind == "consumer"
        || (s.kind != "producer"
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
        .filter(|s| s.dims.queue.as_deref() == Some(queue) && s.attr(VHOST).unwrap_or("/") == vhost)
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
        let mut s = Series::new(
            name,
            super::super::store::Dims {
                queue: Some(queue.into()),
                ..Default::default()
            },
        );
        s.attrs = attrs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        s.attrs.push((VHOST.into(), "/".into()));
        s.attrs.sort();
        s
    }

    fn span(kind: &'static str, name: &str, dest: Option<&str>, rk: Option<&str>) -> SpanRow {
        SpanRow {
            kind,
            name: name.into(),
            messaging_system: Some("rabbitmq".into()),
            destination: dest.map(String::from),
            routing_key: rk.map(String::from),
            ..Default::default()
        }
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
            "producer",
            "publish orders",
            Some("orders"),
            Some("order.created"),
        );
        assert_eq!(ix.resolve(&s), q(&["orders.audit", "orders.created"]));
        let s = span("producer", "publish notify", Some("notify"), Some("sms"));
        assert_eq!(ix.resolve(&s), q(&["sms"]));
        // The default exchange: the queue named by the key.
        let s = span("producer", "publish <default>", Some(""), Some("tasks"));
        assert_eq!(ix.resolve(&s), q(&["tasks"]));
        // amqplib's consumer: the queue only in the span name.
        let s = span(
            "consumer",
            "orders.created process",
            Some("orders"),
            Some("order.created"),
        );
        assert_eq!(ix.resolve(&s), q(&["orders.created"]));
        // Conventions since 1.24.
        let s = span(
            "producer",
            "publish orders:order.paid",
            Some("orders:order.paid"),
            None,
        );
        assert_eq!(ix.resolve(&s), q(&["orders.audit", "orders.created"]));
        let s = span(
            "consumer",
            "process orders:order.paid:orders.created",
            Some("orders:order.paid:orders.created"),
            Some("order.paid"),
        );
        assert_eq!(ix.resolve(&s), q(&["orders.created"]));
        let s = span(
            "consumer",
            "process tasks:tasks",
            Some("tasks:tasks"),
            Some("tasks"),
        );
        assert_eq!(ix.resolve(&s), q(&["tasks"]));
        let s = span("producer", "publish amq.default", Some("amq.default"), None);
        assert!(ix.resolve(&s).is_empty(), "no key: nowhere to go");
        let s = span("producer", "publish fan", Some("fan"), Some("anything"));
        assert_eq!(ix.resolve(&s), q(&["fan.a"]));
        // Unknown exchange or queue: nothing.
        let s = span(
            "producer",
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

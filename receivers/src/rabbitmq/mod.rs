//! `rabbitmq` receiver: queue backlog from the RabbitMQ management HTTP API.
//!
//! Every `collection_interval` it reads `GET /api/queues` (only the columns
//! it uses) and writes, per queue, on a resource with
//! `rabbitmq.queue.name`, `rabbitmq.vhost.name` and `rabbitmq.node.name`,
//! the OpenTelemetry Collector rabbitmqreceiver's metrics (so dashboards
//! carry over):
//! - `rabbitmq.consumer.count` and `rabbitmq.message.current{state=ready|unacknowledged}`
//!   (non-monotonic sums);
//! - `rabbitmq.message.published`, `.delivered`, `.acknowledged`, `.dropped` (monotonic
//!   sums of `message_stats.publish`, `deliver_get`, `ack`, `drop_unroutable`; a
//!   counter the broker has not reported yet is 0, as the API documents);
//!
//! and what the Kafka side has and the Collector lacks:
//! - `rabbitmq.queue.backlog_age` (s): now − `head_message_timestamp` when
//!   the broker exposes it, else depth ÷ delivery rate;
//! - `rabbitmq.queue.status{status}`: Burrow-like, over the last `window`
//!   collections — STOP (4): a backlog and no consumer; STALL (5): consumers
//!   and a backlog but no delivery; WARN (2): the depth never empty and never
//!   down across the window, and higher at its end; OK (1) otherwise;
//! - `rabbitmq.queue.backlog_alarm`: depth ≥ `backlog_threshold`, or rising
//!   without a decrease for `growth_window`;
//! - `rabbitmq.queue.retry_storm`: a queue matching `retry_queues` published
//!   to faster than `retry_rate_threshold`;
//! - `rabbitmq.queue.publish_rate`, `.deliver_rate` (messages/s, the broker's own).
//!
//! The API down, slow, refusing the credentials or answering something
//! malformed or too big is counted in
//! `causeway_rabbitmq_errors_total{receiver,reason}` and logged once per
//! reason until a collection succeeds again; the next collection tries again.

pub mod config;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Registry;
use causeway_core::topology::Output;
use causeway_core::{BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;
use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

use crate::http_fetch::{self, Failure};
use crate::metric_builder::{kv, Builder, Kind, Value};
use config::{Filter, RabbitmqConfig};

causeway_core::metrics! {
    /// Failed collections, by reason.
    pub Errors: counter = "causeway_rabbitmq_errors_total";
}

/// The queue columns asked for (the API answers only these).
const QUEUES: &str = "/api/queues?disable_stats=false&columns=name,vhost,node,type,messages,messages_ready,messages_unacknowledged,\
consumers,head_message_timestamp,message_stats.publish,message_stats.publish_details.rate,\
message_stats.deliver_get,message_stats.deliver_get_details.rate,message_stats.ack,\
message_stats.drop_unroutable";

/// Registers the `rabbitmq` receiver.
#[derive(Debug)]
pub struct RabbitmqFactory;

#[async_trait]
impl ReceiverFactory for RabbitmqFactory {
    fn kind(&self) -> &'static str {
        "rabbitmq"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Metrics)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<RabbitmqConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<RabbitmqConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: RabbitmqConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let client = http_fetch::client(&cfg.tls)?;
        Ok(Box::new(Rabbitmq {
            id: ctx.id.to_string(),
            vhosts: cfg.vhosts.compile()?,
            queues: cfg.queues.compile()?,
            retry: regex::Regex::new(&format!("^(?:{})$", cfg.retry_queues))?,
            cfg,
            client,
            limiter: causeway_core::memory::MemoryLimiter::shared(&ctx.shared),
            telemetry: ctx.telemetry,
        }))
    }
}

struct Rabbitmq {
    id: String,
    cfg: RabbitmqConfig,
    client: reqwest::Client,
    vhosts: Filter,
    queues: Filter,
    retry: regex::Regex,
    /// `service.memory_limiter`: every answer is admitted before it is kept.
    limiter: Option<std::sync::Arc<causeway_core::memory::MemoryLimiter>>,
    telemetry: Registry,
}

/// One queue as the API describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Queue {
    /// Name.
    pub name: String,
    /// Virtual host.
    pub vhost: String,
    /// Node it lives on.
    pub node: String,
    /// `messages` (ready + unacknowledged).
    pub messages: f64,
    /// `messages_ready`.
    pub ready: f64,
    /// `messages_unacknowledged`.
    pub unacked: f64,
    /// `consumers`.
    pub consumers: f64,
    /// `head_message_timestamp` (s since the epoch), when the broker exposes it.
    pub head_timestamp: Option<f64>,
    /// `message_stats.publish`.
    pub published: f64,
    /// `message_stats.deliver_get`.
    pub delivered: f64,
    /// `message_stats.ack`.
    pub acknowledged: f64,
    /// `message_stats.drop_unroutable`.
    pub dropped: f64,
    /// `message_stats.publish_details.rate`.
    pub publish_rate: Option<f64>,
    /// `message_stats.deliver_get_details.rate`.
    pub deliver_rate: Option<f64>,
}

/// Parse `GET /api/queues`: a JSON array of queues (a key the broker has
/// not reported is 0, as its documentation says to read it).
///
/// The answer is read one queue at a time (an answer of 64 MiB is never
/// one JSON tree in memory).
pub fn parse_queues(body: &[u8]) -> Result<Vec<Queue>, String> {
    parse_queues_where(body, |_| true)
}

/// [`parse_queues`], keeping only the queues `keep` wants (those the
/// filters leave out are dropped as they are read).
pub fn parse_queues_where(
    body: &[u8],
    keep: impl Fn(&Queue) -> bool,
) -> Result<Vec<Queue>, String> {
    let mut out = Vec::new();
    http_fetch::each_in_array(
        body,
        "a JSON array of queues (is the endpoint the management API?)",
        |i, q| {
            let num = |k: &str| q.get(k).and_then(serde_json::Value::as_f64);
            let stat = |k: &str| {
                q["message_stats"]
                    .get(k)
                    .and_then(serde_json::Value::as_f64)
            };
            let rate = |k: &str| q["message_stats"][k]["rate"].as_f64();
            let name = q["name"]
                .as_str()
                .ok_or_else(|| format!("queue {i}: no name"))?;
            let q = Queue {
                name: name.to_string(),
                vhost: q["vhost"].as_str().unwrap_or("/").to_string(),
                node: q["node"].as_str().unwrap_or("").to_string(),
                messages: num("messages").unwrap_or(0.0),
                ready: num("messages_ready").unwrap_or(0.0),
                unacked: num("messages_unacknowledged").unwrap_or(0.0),
                consumers: num("consumers").unwrap_or(0.0),
                // Seconds since the epoch (the AMQP `timestamp` property).
                head_timestamp: num("head_message_timestamp"),
                published: stat("publish").unwrap_or(0.0),
                delivered: stat("deliver_get").unwrap_or(0.0),
                acknowledged: stat("ack").unwrap_or(0.0),
                dropped: stat("drop_unroutable").unwrap_or(0.0),
                publish_rate: rate("publish_details"),
                deliver_rate: rate("deliver_get_details"),
            };
            if keep(&q) {
                out.push(q);
            }
            Ok(())
        },
    )?;
    Ok(out)
}

/// Burrow-like status codes, as `kafka_lag` writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing wrong.
    Ok = 1,
    /// The depth never empty and never down across the window, and higher at its end.
    Warn = 2,
    /// A backlog and no consumer.
    Stop = 4,
    /// Consumers and a backlog, but nothing delivered.
    Stall = 5,
}

impl Status {
    /// Its name.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Stop => "STOP",
            Status::Stall => "STALL",
        }
    }
}

/// What a queue looked like over the last collections.
#[derive(Debug, Default)]
pub struct History {
    /// (time s, depth, delivered counter), oldest first.
    points: VecDeque<(f64, f64, f64)>,
    /// Since when the depth has risen without a decrease (s).
    rising_since: Option<f64>,
}

impl History {
    /// Record a collection at `t` (s) and judge the queue over the last
    /// `window` collections, kept at least `stats_s` long (the broker's
    /// statistics interval: its counters and depths move no more often).
    pub fn judge(&mut self, t: f64, q: &Queue, window: usize, stats_s: f64) -> Status {
        let depth = q.messages;
        match self.points.back() {
            Some(&(_, prev, _)) if depth < prev => self.rising_since = None,
            Some(&(pt, prev, _)) if depth > prev => {
                self.rising_since.get_or_insert(pt);
            }
            _ => {}
        }
        if depth == 0.0 {
            self.rising_since = None;
        }
        self.points.push_back((t, depth, q.delivered));
        while self.points.len() > window && self.points.get(1).is_some_and(|p| t - p.0 >= stats_s) {
            self.points.pop_front();
        }
        if depth == 0.0 {
            return Status::Ok;
        }
        if q.consumers == 0.0 {
            return Status::Stop;
        }
        let (first, last) = match (self.points.front(), self.points.back()) {
            (Some(f), Some(l)) if self.points.len() >= 2 => (*f, *l),
            _ => return Status::Ok,
        };
        // A backlog the whole window long, and nothing delivered across it:
        // a window shorter than the broker's statistics interval cannot
        // tell (its delivery counter may not have moved yet).
        if last.0 - first.0 >= stats_s && self.points.iter().all(|p| p.1 > 0.0) && last.2 <= first.2
        {
            return Status::Stall;
        }
        // As Burrow judges lag: never empty across the window (an empty
        // queue at any point means the consumers caught up) and never
        // going down, and higher at the end.
        let rising = self.points.len() >= 3
            && self.points.iter().all(|p| p.1 > 0.0)
            && self
                .points
                .iter()
                .zip(self.points.iter().skip(1))
                .all(|(a, b)| b.1 >= a.1)
            && last.1 > first.1;
        if rising {
            Status::Warn
        } else {
            Status::Ok
        }
    }

    /// Whether the depth has risen without a decrease for `window_s` by `t`.
    pub fn rising_for(&self, t: f64, window_s: f64) -> bool {
        self.rising_since.is_some_and(|s| t - s >= window_s)
    }
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Rabbitmq {
    /// `GET {endpoint}{path}`, bounded by `timeout` and `body_size_limit`.
    async fn fetch(&self, path: &str) -> Result<http_fetch::Body, Failure> {
        let url = format!("{}{path}", self.cfg.endpoint.trim_end_matches('/'));
        let password = self
            .cfg
            .password()
            .map_err(|e| Failure::new("credentials", e))?;
        let timeout = self.cfg.timeout.get();
        let req = self
            .client
            .get(url)
            .basic_auth(&self.cfg.username, Some(password));
        let resp = http_fetch::send(req, timeout).await?;
        match resp.status().as_u16() {
            200..=299 => {}
            401 | 403 => {
                return Err(Failure::new(
                    "unauthorized",
                    format!(
                    "answered {} (the user needs the `monitoring` tag and access to the vhosts)",
                    resp.status()
                ),
                ))
            }
            _ => {
                return Err(Failure::new(
                    "http_status",
                    format!("answered {}", resp.status()),
                ))
            }
        }
        http_fetch::body(
            resp,
            timeout,
            self.cfg.body_size_limit.0 as usize,
            self.limiter.as_deref().map(|l| (l, self.id.as_str())),
        )
        .await
    }

    /// The exchange → queue bindings, with their exchanges' types.
    async fn bindings(&self) -> Result<Vec<Binding>, Failure> {
        let parse = |detail| Failure {
            reason: "parse",
            detail,
        };
        let b = self.fetch(BINDINGS).await?;
        let e = self.fetch(EXCHANGES).await?;
        parse_bindings(&b, &e).map_err(parse)
    }
}

/// The binding columns asked for.
const BINDINGS: &str =
    "/api/bindings?columns=source,vhost,destination,destination_type,routing_key";
/// The exchange columns asked for.
const EXCHANGES: &str = "/api/exchanges?columns=name,vhost,type";

/// An exchange → queue binding.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Binding {
    /// Virtual host.
    pub vhost: String,
    /// Source exchange.
    pub exchange: String,
    /// Its type (`direct`, `topic`, `fanout`, `headers`, or a plugin's; "" when unknown).
    pub exchange_type: String,
    /// Binding key.
    pub key: String,
    /// Destination queue.
    pub queue: String,
}

/// Parse `GET /api/bindings` and `GET /api/exchanges`: the bindings from a
/// named exchange to a queue (the default exchange's implicit bindings and
/// exchange-to-exchange bindings are left out), each with its exchange's type.
pub fn parse_bindings(bindings: &[u8], exchanges: &[u8]) -> Result<Vec<Binding>, String> {
    let mut types: HashMap<(String, String), String> = HashMap::new();
    http_fetch::each_in_array(exchanges, "a JSON array of exchanges", |_, x| {
        if let (Some(v), Some(n), Some(t)) =
            (x["vhost"].as_str(), x["name"].as_str(), x["type"].as_str())
        {
            types.insert((v.to_string(), n.to_string()), t.to_string());
        }
        Ok(())
    })
    .map_err(|e| format!("/api/exchanges: {e}"))?;
    let mut out = Vec::new();
    http_fetch::each_in_array(bindings, "a JSON array of bindings", |i, b| {
        let (Some(source), Some(dest)) = (b["source"].as_str(), b["destination"].as_str()) else {
            return Err(format!("binding {i}: no source or destination"));
        };
        if source.is_empty() || b["destination_type"].as_str() != Some("queue") {
            return Ok(());
        }
        let vhost = b["vhost"].as_str().unwrap_or("/").to_string();
        out.push(Binding {
            exchange_type: types
                .get(&(vhost.clone(), source.to_string()))
                .cloned()
                .unwrap_or_default(),
            vhost,
            exchange: source.to_string(),
            key: b["routing_key"].as_str().unwrap_or("").to_string(),
            queue: dest.to_string(),
        });
        Ok(())
    })
    .map_err(|e| format!("/api/bindings: {e}"))?;
    Ok(out)
}

/// The metrics of one collection of `queues` at `t` (s), one resource per
/// queue, judged against their `history` (queues gone are forgotten).
/// `filters`: vhosts, queues, retry queues.
pub fn collect(
    cfg: &RabbitmqConfig,
    (vhosts, queues_filter, retry): (&Filter, &Filter, &regex::Regex),
    queues: &[Queue],
    bindings: &[Binding],
    history: &mut HashMap<(String, String), History>,
    t: f64,
    start_ns: u64,
) -> Vec<ResourceMetrics> {
    let time_ns = (t * 1e9) as u64;
    let mut bound: HashMap<(&str, &str), Vec<&Binding>> = HashMap::new();
    for b in bindings {
        bound
            .entry((b.vhost.as_str(), b.queue.as_str()))
            .or_default()
            .push(b);
    }
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for q in queues
        .iter()
        .filter(|q| vhosts.matches(&q.vhost) && queues_filter.matches(&q.name))
    {
        let key = (q.vhost.clone(), q.name.clone());
        seen.insert(key.clone());
        let h = history.entry(key).or_default();
        let status = h.judge(t, q, cfg.window, cfg.stats_interval.get().as_secs_f64());
        let alarm = q.messages >= cfg.backlog_threshold
            || h.rising_for(t, cfg.growth_window.get().as_secs_f64());
        let storm = retry.is_match(&q.name)
            && q.publish_rate
                .is_some_and(|r| r >= cfg.retry_rate_threshold);
        let mut b = Builder::new(time_ns, start_ns);
        counts(&mut b, q);
        judged(&mut b, q, t, status, alarm, storm);
        for x in bound
            .get(&(q.vhost.as_str(), q.name.as_str()))
            .into_iter()
            .flatten()
        {
            b.gauge(
                "rabbitmq.queue.binding",
                "1",
                "1 per binding of an exchange to the queue: a message published to the exchange with a matching routing key goes to the queue.",
                vec![
                    kv("rabbitmq.exchange.name", &x.exchange),
                    kv("rabbitmq.exchange.type", &x.exchange_type),
                    kv("rabbitmq.binding.routing_key", &x.key),
                ],
                Value::Int(1),
            );
        }
        out.push(b.finish(
            vec![
                kv("rabbitmq.queue.name", &q.name),
                kv("rabbitmq.vhost.name", &q.vhost),
                kv("rabbitmq.node.name", &q.node),
                kv("messaging.system", "rabbitmq"),
            ],
            "causeway.rabbitmq",
        ));
    }
    // Queues deleted (or filtered out): forget them.
    history.retain(|k, _| seen.contains(k));
    out
}

/// A queue's consumers and messages as the broker counts them (the
/// Collector's rabbitmq receiver's names).
fn counts(b: &mut Builder, q: &Queue) {
    let msgs = "{messages}";
    let sum = Kind::Sum { monotonic: false };
    let counter = Kind::Sum { monotonic: true };
    b.point(
        "rabbitmq.consumer.count",
        sum,
        "{consumers}",
        "The number of consumers currently reading from the queue.",
        vec![],
        Value::Int(q.consumers as i64),
    );
    for (state, v) in [("ready", q.ready), ("unacknowledged", q.unacked)] {
        b.point(
            "rabbitmq.message.current",
            sum,
            msgs,
            "The total number of messages currently in the queue.",
            vec![kv("state", state)],
            Value::Int(v as i64),
        );
    }
    b.point(
        "rabbitmq.message.published",
        counter,
        msgs,
        "The number of messages published to a queue.",
        vec![],
        Value::Int(q.published as i64),
    );
    b.point(
        "rabbitmq.message.delivered",
        counter,
        msgs,
        "The number of messages delivered to consumers.",
        vec![],
        Value::Int(q.delivered as i64),
    );
    b.point(
        "rabbitmq.message.acknowledged",
        counter,
        msgs,
        "The number of messages acknowledged by consumers.",
        vec![],
        Value::Int(q.acknowledged as i64),
    );
    b.point(
        "rabbitmq.message.dropped",
        counter,
        msgs,
        "The number of messages dropped as unroutable.",
        vec![],
        Value::Int(q.dropped as i64),
    );
}

/// What causeway judges of a queue: the backlog's age, its status, the
/// alarm and the retry storm, and the broker's rates.
fn judged(b: &mut Builder, q: &Queue, t: f64, status: Status, alarm: bool, storm: bool) {
    let age = match (q.head_timestamp, q.deliver_rate) {
        _ if q.messages == 0.0 => Some(0.0),
        (Some(ts), _) if ts > 0.0 => Some((t - ts).max(0.0)),
        (_, Some(r)) if r > 0.0 => Some(q.messages / r),
        _ => None,
    };
    if let Some(a) = age {
        b.gauge("rabbitmq.queue.backlog_age", "s", "How long the oldest message has waited: now − head_message_timestamp, else depth ÷ delivery rate.", vec![], Value::Double(a));
    }
    b.gauge("rabbitmq.queue.status", "1", "Burrow-like status of the queue: 1 OK, 2 WARN (depth rising), 4 STOP (backlog, no consumer), 5 STALL (consumers, backlog, no delivery).", vec![kv("status", status.name())], Value::Int(status as i64));
    b.gauge(
        "rabbitmq.queue.backlog_alarm",
        "1",
        "1 when the depth is at or above backlog_threshold or has risen for growth_window.",
        vec![],
        Value::Int(i64::from(alarm)),
    );
    b.gauge(
        "rabbitmq.queue.retry_storm",
        "1",
        "1 when a retry or dead-letter queue is published to faster than retry_rate_threshold.",
        vec![],
        Value::Int(i64::from(storm)),
    );
    if let Some(r) = q.publish_rate {
        b.gauge(
            "rabbitmq.queue.publish_rate",
            "{messages}/s",
            "Messages published per second (the broker's rate).",
            vec![],
            Value::Double(r),
        );
    }
    if let Some(r) = q.deliver_rate {
        b.gauge(
            "rabbitmq.queue.deliver_rate",
            "{messages}/s",
            "Messages delivered per second (the broker's rate).",
            vec![],
            Value::Double(r),
        );
    }
}

#[async_trait]
impl Receiver for Rabbitmq {
    async fn run(
        self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let start_ns = (now_s() * 1e9) as u64;
        let mut history: HashMap<(String, String), History> = HashMap::new();
        let mut failures = crate::polling::Failures::new(
            &self.telemetry,
            Errors,
            (&self.id, &self.cfg.endpoint),
            "RabbitMQ collection",
            "The management API answers again.",
        );
        let mut bindings: Vec<Binding> = Vec::new();
        let mut tick = crate::polling::rounds(self.cfg.collection_interval.get());
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            let got = match self.fetch(QUEUES).await {
                Ok(body) => parse_queues_where(&body, |q| {
                    self.vhosts.matches(&q.vhost) && self.queues.matches(&q.name)
                })
                .map_err(|detail| Failure {
                    reason: "parse",
                    detail,
                }),
                Err(f) => Err(f),
            };
            match got {
                Ok(queues) => {
                    // The bindings of the last collection that read them stay
                    // when a later one cannot (counted and logged as any failure).
                    let mut all = true;
                    if self.cfg.bindings {
                        match self.bindings().await {
                            Ok(b) => bindings = b,
                            Err(f) => {
                                failures.failed(&f);
                                all = false;
                            }
                        }
                    }
                    if all {
                        failures.succeeded();
                    }
                    let rms = collect(
                        &self.cfg,
                        (&self.vhosts, &self.queues, &self.retry),
                        &queues,
                        &bindings,
                        &mut history,
                        now_s(),
                        start_ns,
                    );
                    if !crate::polling::send_metrics(&out, rms, &shutdown).await {
                        return Ok(());
                    }
                }
                Err(f) => failures.failed(&f),
            }
        }
    }
}

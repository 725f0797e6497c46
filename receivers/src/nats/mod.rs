//! `nats` receiver: JetStream consumer backlog from a NATS server's
//! monitoring endpoint.
//!
//! Every `collection_interval` it reads
//! `GET /jsz?accounts=true&streams=true&consumers=true&config=true` and
//! writes, per consumer, on a resource with `nats.account.name`,
//! `nats.stream.name`, `nats.consumer.name` and `messaging.system = nats`:
//! - `nats.consumer.pending`: messages of the stream matching the
//!   consumer's filter not yet delivered to it (`num_pending`);
//! - `nats.consumer.ack_pending`: delivered and not yet acknowledged
//!   (`num_ack_pending`);
//! - `nats.consumer.backlog`: the two together, what the consumer has yet
//!   to finish;
//! - `nats.consumer.redelivered`: messages delivered more than once and
//!   not yet acknowledged (`num_redelivered`);
//! - `nats.consumer.waiting`: pull requests waiting (`num_waiting`);
//! - `nats.consumer.delivered`: messages delivered (`delivered.consumer_seq`, a counter);
//! - `nats.consumer.backlog_alarm`: 1 when the backlog is at or above
//!   `backlog_threshold` or has risen without a decrease for `growth_window`;
//!
//! each point with `nats.stream.subjects` (the stream's subjects, comma
//! separated) and `nats.consumer.filter_subject` (its filter subjects,
//! comma separated; empty: all), so that the `correlate` processor finds
//! the consumers a message published to a subject reaches.
//!
//! The endpoint down, slow, answering an error, garbage or more than
//! `body_size_limit` is counted in `causeway_nats_errors_total{receiver,reason}`
//! and logged once per reason until a collection succeeds again.

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
use std::collections::{HashMap, HashSet};
use std::time::{SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

use crate::http_fetch::{self, Failure};
use crate::metric_builder::{kv, Builder, Kind, Value};
use config::{Filter, NatsConfig};

causeway_core::metrics! {
    /// Failed collections, by reason.
    pub Errors: counter = "causeway_nats_errors_total";
}

/// What is asked of the monitoring endpoint.
const JSZ: &str = "/jsz?accounts=true&streams=true&consumers=true&config=true";

/// Registers the `nats` receiver.
#[derive(Debug)]
pub struct NatsFactory;

#[async_trait]
impl ReceiverFactory for NatsFactory {
    fn kind(&self) -> &'static str {
        "nats"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Metrics)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<NatsConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<NatsConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: NatsConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let client = http_fetch::client(&cfg.tls)?;
        Ok(Box::new(Nats {
            id: ctx.id.to_string(),
            streams: cfg.streams.compile()?,
            consumers: cfg.consumers.compile()?,
            cfg,
            client,
            limiter: causeway_core::memory::MemoryLimiter::shared(&ctx.shared),
            telemetry: ctx.telemetry,
        }))
    }
}

struct Nats {
    id: String,
    cfg: NatsConfig,
    client: reqwest::Client,
    streams: Filter,
    consumers: Filter,
    /// `service.memory_limiter`: every answer is admitted before it is kept.
    limiter: Option<std::sync::Arc<causeway_core::memory::MemoryLimiter>>,
    telemetry: Registry,
}

/// One JetStream consumer as `/jsz` describes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Consumer {
    /// Account.
    pub account: String,
    /// Stream.
    pub stream: String,
    /// The stream's subjects.
    pub subjects: Vec<String>,
    /// Consumer name (its durable name for a durable one).
    pub name: String,
    /// Its filter subjects (none: every subject of the stream).
    pub filters: Vec<String>,
    /// `num_pending`.
    pub pending: f64,
    /// `num_ack_pending`.
    pub ack_pending: f64,
    /// `num_redelivered`.
    pub redelivered: f64,
    /// `num_waiting`.
    pub waiting: f64,
    /// `delivered.consumer_seq`.
    pub delivered: f64,
}

impl Consumer {
    /// Not yet delivered plus delivered and not acknowledged.
    pub fn backlog(&self) -> f64 {
        self.pending + self.ack_pending
    }
}

/// Parse a `/jsz?accounts=true&streams=true&consumers=true&config=true`
/// answer: every consumer of every stream of every account.
pub fn parse_jsz(body: &[u8]) -> Result<Vec<Consumer>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let o = v
        .as_object()
        .ok_or("not a JSON object (is the endpoint a NATS server's monitoring port?)")?;
    if o.get("server_id").is_none() {
        return Err("no server_id: not a /jsz answer (is JetStream enabled?)".into());
    }
    let mut out = Vec::new();
    let strs = |x: &serde_json::Value| -> Vec<String> {
        x.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    for acc in o
        .get("account_details")
        .and_then(|a| a.as_array())
        .into_iter()
        .flatten()
    {
        let account = acc["name"].as_str().unwrap_or("").to_string();
        for st in acc["stream_detail"].as_array().into_iter().flatten() {
            let Some(stream) = st["name"].as_str() else {
                return Err(format!("account {account:?}: a stream without a name"));
            };
            let subjects = strs(&st["config"]["subjects"]);
            for c in st["consumer_detail"].as_array().into_iter().flatten() {
                let Some(name) = c["name"].as_str() else {
                    return Err(format!("stream {stream:?}: a consumer without a name"));
                };
                let cfg = &c["config"];
                let mut filters = strs(&cfg["filter_subjects"]);
                if let Some(f) = cfg["filter_subject"].as_str().filter(|f| !f.is_empty()) {
                    filters.push(f.to_string());
                }
                let num = |k: &str| c[k].as_f64().unwrap_or(0.0);
                out.push(Consumer {
                    account: account.clone(),
                    stream: stream.to_string(),
                    subjects: subjects.clone(),
                    name: name.to_string(),
                    filters,
                    pending: num("num_pending"),
                    ack_pending: num("num_ack_pending"),
                    redelivered: num("num_redelivered"),
                    waiting: num("num_waiting"),
                    delivered: c["delivered"]["consumer_seq"].as_f64().unwrap_or(0.0),
                });
            }
        }
    }
    Ok(out)
}

/// How a consumer's backlog moved: since when it has risen without a decrease.
#[derive(Debug, Default)]
pub struct Rising {
    last: Option<f64>,
    since: Option<f64>,
}

impl Rising {
    /// Record the backlog at `t` (s); whether it has risen for `window_s`.
    pub fn record(&mut self, t: f64, backlog: f64, window_s: f64) -> bool {
        match self.last {
            Some(prev) if backlog < prev || backlog == 0.0 => self.since = None,
            Some(prev) if backlog > prev => {
                self.since.get_or_insert(t);
            }
            _ => {}
        }
        self.last = Some(backlog);
        self.since.is_some_and(|s| t - s >= window_s)
    }
}

/// The metrics of one collection at `t` (s): one resource per consumer the
/// filters keep (consumers gone are forgotten).
pub fn collect(
    cfg: &NatsConfig,
    (streams, consumers_filter): (&Filter, &Filter),
    consumers: &[Consumer],
    rising: &mut HashMap<(String, String, String), Rising>,
    t: f64,
    start_ns: u64,
) -> Vec<ResourceMetrics> {
    let time_ns = (t * 1e9) as u64;
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for c in consumers
        .iter()
        .filter(|c| streams.matches(&c.stream) && consumers_filter.matches(&c.name))
    {
        let key = (c.account.clone(), c.stream.clone(), c.name.clone());
        seen.insert(key.clone());
        let grown = rising.entry(key).or_default().record(
            t,
            c.backlog(),
            cfg.growth_window.get().as_secs_f64(),
        );
        let alarm = c.backlog() >= cfg.backlog_threshold || grown;
        let attrs = || {
            vec![
                kv("nats.stream.subjects", &c.subjects.join(",")),
                kv("nats.consumer.filter_subject", &c.filters.join(",")),
            ]
        };
        let mut b = Builder::new(time_ns, start_ns);
        let msgs = "{messages}";
        for (name, description, v) in [
            (
                "nats.consumer.pending",
                "Messages of the stream matching the consumer's filter not yet delivered to it.",
                c.pending,
            ),
            (
                "nats.consumer.ack_pending",
                "Messages delivered to the consumer and not yet acknowledged.",
                c.ack_pending,
            ),
            (
                "nats.consumer.backlog",
                "Messages the consumer has yet to finish: pending plus ack pending.",
                c.backlog(),
            ),
            (
                "nats.consumer.redelivered",
                "Messages delivered more than once and not yet acknowledged.",
                c.redelivered,
            ),
            (
                "nats.consumer.waiting",
                "Pull requests waiting for messages.",
                c.waiting,
            ),
        ] {
            b.gauge(name, msgs, description, attrs(), Value::Int(v as i64));
        }
        b.point(
            "nats.consumer.delivered",
            Kind::Sum { monotonic: true },
            msgs,
            "Messages delivered to the consumer.",
            attrs(),
            Value::Int(c.delivered as i64),
        );
        b.gauge(
            "nats.consumer.backlog_alarm",
            "1",
            "1 when the backlog is at or above backlog_threshold or has risen for growth_window.",
            attrs(),
            Value::Int(i64::from(alarm)),
        );
        out.push(b.finish(
            vec![
                kv("nats.account.name", &c.account),
                kv("nats.stream.name", &c.stream),
                kv("nats.consumer.name", &c.name),
                kv("messaging.system", "nats"),
            ],
            "causeway.nats",
        ));
    }
    rising.retain(|k, _| seen.contains(k));
    out
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

impl Nats {
    /// `GET {endpoint}/jsz…`, bounded by `timeout` and `body_size_limit`.
    async fn fetch(&self) -> Result<Vec<Consumer>, Failure> {
        let url = format!("{}{JSZ}", self.cfg.endpoint.trim_end_matches('/'));
        let timeout = self.cfg.timeout.get();
        let resp = http_fetch::send(self.client.get(url), timeout).await?;
        if !resp.status().is_success() {
            return Err(Failure::new(
                "http_status",
                format!("answered {}", resp.status()),
            ));
        }
        let body = http_fetch::body(
            resp,
            timeout,
            self.cfg.body_size_limit.0 as usize,
            self.limiter.as_deref().map(|l| (l, self.id.as_str())),
        )
        .await?;
        parse_jsz(&body).map_err(|d| Failure::new("parse", d))
    }
}

#[async_trait]
impl Receiver for Nats {
    async fn run(
        self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let start_ns = (now_s() * 1e9) as u64;
        let mut rising = HashMap::new();
        let mut failures = crate::polling::Failures::new(
            &self.telemetry,
            Errors,
            (&self.id, &self.cfg.endpoint),
            "NATS collection",
            "The monitoring endpoint answers again.",
        );
        let mut tick = crate::polling::rounds(self.cfg.collection_interval.get());
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            match self.fetch().await {
                Ok(consumers) => {
                    failures.succeeded();
                    let rms = collect(
                        &self.cfg,
                        (&self.streams, &self.consumers),
                        &consumers,
                        &mut rising,
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

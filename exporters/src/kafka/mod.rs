//! The `kafka` exporter: OTLP requests written to Kafka topics, the first
//! tier of a scaled-out layout (see README "Scaling out").
//!
//! With `partition_traces_by_id` / `partition_logs_by_trace_id`, a batch is
//! split by trace id on the wire ([`causeway_core::partition`], nothing is
//! decoded), each trace is assigned a partition number by FNV-1a of its hex
//! id (Sarama's hash partitioner, the Collector's), and the traces of one
//! partition leave in one message (cut at `max_message_bytes`). The spans
//! topic and the logs topic then put a trace's spans and its log records on
//! the same partition number, so one consumer of both gets both
//! (co-partitioning: the two topics must have the same partition count; the
//! exporter refuses to write when they do not).
//!
//! A batch counts as delivered only when the broker acknowledged every one
//! of its messages (`required_acks`); otherwise the whole batch is retried
//! by the exporter helper (at least once: a message that did get through is
//! written again).

pub mod config;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError};
use causeway_core::partition::{split, split_by, Key};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::ClientConfig;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use config::{KafkaEncoding, KafkaExporterConfig};

pub use causeway_core::kafka::{signal_name, SIGNAL_HEADER};

/// How long a topic's partition count is trusted before it is read again.
const METADATA_TTL: Duration = Duration::from_secs(30);

/// Factory of the `kafka` exporter.
pub struct KafkaExporterFactory;

#[async_trait]
impl ExporterFactory for KafkaExporterFactory {
    fn kind(&self) -> &'static str {
        "kafka"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::ALL
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<KafkaExporterConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<KafkaExporterConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: KafkaExporterConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let delivery = cfg.delivery();
        Ok(BuiltExporter {
            exporter: std::sync::Arc::new(KafkaExporter::new(cfg, &ctx.id.to_string())?),
            delivery,
        })
    }
}

/// The exporter.
pub struct KafkaExporter {
    id: String,
    cfg: KafkaExporterConfig,
    producer: FutureProducer,
    /// Partition counts by topic, and when they were read.
    partitions: Mutex<HashMap<String, (u32, Instant)>>,
}

/// One Kafka message to write.
struct Message {
    partition: Option<i32>,
    key: Option<String>,
    payload: Vec<u8>,
}

fn retryable(e: impl Into<BoxError>) -> ExportError {
    ExportError::Retryable {
        source: e.into(),
        retry_after: None,
    }
}

fn permanent(e: impl Into<BoxError>) -> ExportError {
    ExportError::Permanent { source: e.into() }
}

impl KafkaExporter {
    /// Build the producer (it connects lazily).
    pub fn new(cfg: KafkaExporterConfig, id: &str) -> Result<Self, BoxError> {
        let mut c = ClientConfig::new();
        for (k, v) in &cfg.settings {
            c.set(k, v);
        }
        c.set("bootstrap.servers", cfg.brokers.join(","))
            .set("client.id", &cfg.client_id)
            .set("compression.type", &cfg.producer.compression)
            // librdkafka's own limit sits above ours: a message is cut
            // below max_message_bytes, the protocol framing goes on top.
            .set(
                "message.max.bytes",
                (cfg.producer.max_message_bytes + 64 * 1024).to_string(),
            )
            .set("acks", cfg.producer.required_acks.to_string())
            .set(
                "linger.ms",
                cfg.producer.linger.get().as_millis().to_string(),
            )
            .set(
                "message.timeout.ms",
                cfg.timeout.get().as_millis().max(1).to_string(),
            );
        let producer: FutureProducer = c
            .create()
            .map_err(|e| format!("kafka exporter {id}: cannot create the producer: {e}"))?;
        Ok(KafkaExporter {
            id: id.to_string(),
            cfg,
            producer,
            partitions: Mutex::new(HashMap::new()),
        })
    }

    fn keyed(&self, signal: Signal) -> bool {
        match signal {
            Signal::Traces => self.cfg.partition_traces_by_id,
            Signal::Logs => self.cfg.partition_logs_by_trace_id,
            Signal::Metrics => self.cfg.partition_metrics_by_resource_attributes,
            // Not accepted (the factory's signals): never keyed.
            Signal::Profiles => false,
        }
    }

    /// The partition count of `topic` (cached for [`METADATA_TTL`]).
    async fn partition_count(&self, topic: &str) -> Result<u32, ExportError> {
        if let Ok(m) = self.partitions.lock() {
            if let Some((n, at)) = m.get(topic) {
                if at.elapsed() < METADATA_TTL {
                    return Ok(*n);
                }
            }
        }
        let client = self.producer.clone();
        let t = topic.to_string();
        let timeout = self.cfg.timeout.get();
        let md = tokio::task::spawn_blocking(move || {
            client.client().fetch_metadata(Some(&t), timeout).map(|md| {
                md.topics()
                    .iter()
                    .find(|x| x.name() == t)
                    .map(|x| (x.partitions().len() as u32, x.error()))
            })
        })
        .await
        .map_err(|e| retryable(format!("metadata task: {e}")))?
        .map_err(|e| retryable(format!("reading the partitions of topic {topic}: {e}")))?;
        let n = match md {
            Some((n, None)) if n > 0 => n,
            Some((_, Some(err))) => {
                return Err(retryable(format!(
                    "topic {topic}: {:?} (create it with the same partition count as the other signals' topics)",
                    RDKafkaErrorCode::from(err)
                )))
            }
            _ => return Err(retryable(format!("topic {topic} has no partitions"))),
        };
        if let Ok(mut m) = self.partitions.lock() {
            m.insert(topic.to_string(), (n, Instant::now()));
        }
        Ok(n)
    }

    /// The messages of `batch`: one per partition when keyed (cut at
    /// `max_message_bytes`), else the whole request.
    async fn messages(&self, batch: &Batch, topic: &str) -> Result<Vec<Message>, ExportError> {
        let signal = batch.signal();
        if !self.keyed(signal) {
            return Ok(vec![Message {
                partition: None,
                key: None,
                payload: batch.to_encoded().to_vec(),
            }]);
        }
        let n = self.partition_count(topic).await?;
        let max = self.cfg.producer.max_message_bytes;
        // Per partition: the open message and the one key it holds (if only one).
        let mut open: Vec<Open> = (0..n).map(|_| Open::default()).collect();
        let mut out = Vec::new();
        let bad = |e: causeway_core::wire::WireError| {
            permanent(format!("a {signal:?} request cannot be split by key: {e}"))
        };
        for part in batch.encoded_parts() {
            let parts = split_by(signal, &part, |k| k.partition(n) as usize).map_err(bad)?;
            for (p, piece) in parts.into_iter().enumerate() {
                if piece.items == 0 {
                    continue;
                }
                if piece.bytes.len() <= max {
                    open[p].add(p, piece.bytes, piece.key, max, &mut out);
                } else {
                    // Too big for one message: cut between keys.
                    for (key, bytes, _) in split(signal, &piece.bytes).map_err(bad)? {
                        open[p].add(p, bytes, Some(key), max, &mut out);
                    }
                }
            }
        }
        for (p, o) in open.into_iter().enumerate() {
            o.close(p, &mut out);
        }
        Ok(out)
    }
}

/// A partition's message being filled, and its key while every piece in
/// it has that same one.
#[derive(Default)]
struct Open {
    payload: Vec<u8>,
    key: Option<Key>,
}

impl Open {
    /// Append `bytes` (of `key`, if one), first closing the message if it
    /// would grow past `max`.
    fn add(
        &mut self,
        p: usize,
        bytes: Vec<u8>,
        key: Option<Key>,
        max: usize,
        out: &mut Vec<Message>,
    ) {
        if !self.payload.is_empty() && self.payload.len() + bytes.len() > max {
            std::mem::take(self).close(p, out);
        }
        if self.payload.is_empty() {
            self.key = key;
            self.payload = bytes;
        } else {
            if self.key != key {
                self.key = None;
            }
            self.payload.extend_from_slice(&bytes);
        }
    }

    fn close(self, p: usize, out: &mut Vec<Message>) {
        if self.payload.is_empty() {
            return;
        }
        out.push(Message {
            partition: Some(p as i32),
            key: self.key.map(|k| k.hex()),
            payload: self.payload,
        });
    }
}

fn to_json(signal: Signal, proto: &[u8]) -> Result<Vec<u8>, ExportError> {
    use opentelemetry_proto::tonic::collector::{
        logs::v1::ExportLogsServiceRequest, metrics::v1::ExportMetricsServiceRequest,
        trace::v1::ExportTraceServiceRequest,
    };
    use prost::Message as _;
    let bad = |e: String| permanent(format!("encoding otlp_json: {e}"));
    match signal {
        Signal::Traces => serde_json::to_vec(
            &ExportTraceServiceRequest::decode(proto).map_err(|e| bad(e.to_string()))?,
        ),
        Signal::Logs => serde_json::to_vec(
            &ExportLogsServiceRequest::decode(proto).map_err(|e| bad(e.to_string()))?,
        ),
        Signal::Metrics => serde_json::to_vec(
            &ExportMetricsServiceRequest::decode(proto).map_err(|e| bad(e.to_string()))?,
        ),
        Signal::Profiles => return Err(bad("profiles are not sent to Kafka".into())),
    }
    .map_err(|e| bad(e.to_string()))
}

#[async_trait]
impl Exporter for KafkaExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let signal = batch.signal();
        let topic = self.cfg.topic_of(signal);
        let mut messages = self.messages(batch, &topic).await?;
        if self.cfg.encoding == KafkaEncoding::OtlpJson {
            for m in &mut messages {
                m.payload = to_json(signal, &m.payload)?;
            }
        }
        let max = self.cfg.producer.max_message_bytes;
        if let Some(m) = messages.iter().find(|m| m.payload.len() > max) {
            return Err(permanent(format!(
                "a message of {} bytes for topic {topic} exceeds producer.max_message_bytes ({max}){}",
                m.payload.len(),
                if self.keyed(signal) {
                    " although it holds one key: one trace (or resource) is larger than a message may be"
                } else {
                    "; enable partition_*_by_* to split batches by key, or raise the limit"
                }
            )));
        }
        let headers = OwnedHeaders::new().insert(Header {
            key: SIGNAL_HEADER,
            value: Some(signal_name(signal)),
        });
        let timeout = self.cfg.timeout.get();
        let sends = messages.iter().map(|m| {
            let mut r = FutureRecord::<str, [u8]>::to(&topic)
                .payload(m.payload.as_slice())
                .headers(headers.clone());
            if let Some(p) = m.partition {
                r = r.partition(p);
            }
            if let Some(k) = &m.key {
                r = r.key(k.as_str());
            }
            self.producer.send(r, timeout)
        });
        let results = futures::future::join_all(sends).await;
        let mut first_err = None;
        for r in results {
            if let Err((e, _)) = r {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            None => Ok(Delivered::default()),
            Some(e) => {
                tracing::warn!(exporter = %self.id, topic = %topic, error = %e, "The broker did not acknowledge a message; the batch is retried.");
                // The invalidated partition count is read again next time.
                if let Ok(mut m) = self.partitions.lock() {
                    m.remove(&topic);
                }
                Err(match e {
                    KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge)
                    | KafkaError::MessageProduction(RDKafkaErrorCode::InvalidMessage) => {
                        permanent(format!("topic {topic}: {e}"))
                    }
                    e => retryable(format!("topic {topic}: {e}")),
                })
            }
        }
    }

    async fn shutdown(&self) -> Result<(), BoxError> {
        let p = self.producer.clone();
        tokio::task::spawn_blocking(move || p.flush(Duration::from_secs(10)))
            .await
            .map_err(|e| format!("flush task: {e}"))?
            .map_err(|e| format!("kafka exporter {}: flush: {e}", self.id))?;
        Ok(())
    }
}

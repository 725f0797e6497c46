//! Configuration of the `kafka` exporter, in the shape of the Collector's
//! kafkaexporter.

use causeway_core::config::{ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

pub use causeway_core::kafka::{Encoding as KafkaEncoding, SignalTopic};

/// `producer`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProducerConfig {
    /// Compression of message batches: `none`, `gzip`, `snappy`, `lz4`, `zstd`.
    #[serde(default = "none")]
    pub compression: String,
    /// Largest message, in bytes (the broker's default).
    /// Batches are split by key below it; a single trace above it is refused.
    #[serde(default = "max_message_bytes")]
    pub max_message_bytes: usize,
    /// Acknowledgements the broker must collect before a message counts as
    /// written: `-1` (all in-sync replicas), `1` (the leader; default, as
    /// the Collector) or `0` (none: loss is possible and not seen).
    #[serde(default = "one")]
    pub required_acks: i32,
    /// Time librdkafka waits to fill a message batch.
    #[serde(default = "linger")]
    pub linger: Duration,
}

impl Default for ProducerConfig {
    fn default() -> Self {
        ProducerConfig {
            compression: none(),
            max_message_bytes: max_message_bytes(),
            required_acks: one(),
            linger: linger(),
        }
    }
}

fn none() -> String {
    "none".into()
}
fn max_message_bytes() -> usize {
    1_000_000
}
fn one() -> i32 {
    1
}
fn linger() -> Duration {
    Duration::millis(5)
}

causeway_core::exporter_config! {
    /// `exporters.kafka`.
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct KafkaExporterConfig {
        /// Bootstrap brokers, `host:port`.
        pub brokers: Vec<String>,
        /// One topic for every signal (each message then says its signal in the
        /// `causeway.signal` header); per-signal topics below win over it.
        pub topic: Option<String>,
        /// Spans' topic.
        #[serde(default)]
        pub traces: SignalTopic,
        /// Log records' topic.
        #[serde(default)]
        pub logs: SignalTopic,
        /// Metrics' topic.
        #[serde(default)]
        pub metrics: SignalTopic,
        /// `otlp_proto` or `otlp_json`.
        #[serde(default)]
        pub encoding: KafkaEncoding,
        /// Spans keyed by trace id (32 hex characters): every span of a trace
        /// lands on one partition (as the Collector; a tier that
        /// samples behind Kafka needs it true).
        #[serde(default)]
        pub partition_traces_by_id: bool,
        /// Log records keyed by trace id, on the partition number its spans
        /// take; records without one by their resource.
        #[serde(default)]
        pub partition_logs_by_trace_id: bool,
        /// Metrics keyed by their resource.
        #[serde(default)]
        pub partition_metrics_by_resource_attributes: bool,
        /// The client id the broker sees.
        #[serde(default = "client_id")]
        pub client_id: String,
        /// Producer settings.
        #[serde(default)]
        pub producer: ProducerConfig,
        /// librdkafka properties passed through as they are (TLS and SASL:
        /// `security.protocol`, `sasl.mechanism`, `sasl.username`,
        /// `sasl.password`, `ssl.ca.location`, ...). Values are never logged.
        #[serde(default)]
        pub settings: IndexMap<String, String>,
    }
    timeout_default = "timeout"
}

fn client_id() -> String {
    "causeway".into()
}
fn timeout() -> Duration {
    Duration::secs(10)
}

impl KafkaExporterConfig {
    /// The topics.
    pub fn topics(&self) -> causeway_core::kafka::Topics<'_> {
        causeway_core::kafka::Topics {
            all: &self.topic,
            traces: &self.traces,
            logs: &self.logs,
            metrics: &self.metrics,
        }
    }

    /// The topic of `signal`.
    pub fn topic_of(&self, signal: causeway_core::Signal) -> String {
        self.topics().of(signal)
    }
}

/// librdkafka properties causeway sets itself.
pub(crate) const OWN_SETTINGS: [&str; 6] = [
    "bootstrap.servers",
    "client.id",
    "compression.type",
    "message.max.bytes",
    "acks",
    "linger.ms",
];

impl Validate for KafkaExporterConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = self.delivery_errors();
        e.extend(self.topics().errors(&self.brokers));
        if !["none", "gzip", "snappy", "lz4", "zstd"].contains(&self.producer.compression.as_str())
        {
            e.push(ConfigError::new(
                "producer.compression",
                format!(
                    "{:?}: use none, gzip, snappy, lz4 or zstd",
                    self.producer.compression
                ),
            ));
        }
        if ![-1, 0, 1].contains(&self.producer.required_acks) {
            e.push(ConfigError::new(
                "producer.required_acks",
                format!(
                    "{}: use -1 (all in-sync replicas), 1 (leader) or 0 (none)",
                    self.producer.required_acks
                ),
            ));
        }
        if self.producer.max_message_bytes < 1024 {
            e.push(ConfigError::new(
                "producer.max_message_bytes",
                "must be at least 1024",
            ));
        }
        for k in self.settings.keys() {
            if OWN_SETTINGS.contains(&k.as_str()) {
                e.push(ConfigError::new(
                    format!("settings.{k}"),
                    "set by causeway from the exporter's own keys (brokers, client_id, producer); use those",
                ));
            }
        }
        e
    }
}

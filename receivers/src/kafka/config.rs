//! Configuration of the `kafka` receiver, in the shape of the Collector's
//! kafkareceiver.

use causeway_core::config::{ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

pub use causeway_core::kafka::{Encoding as KafkaEncoding, SignalTopic};

/// Where a group without a committed offset starts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum InitialOffset {
    /// New messages only (as the Collector).
    #[default]
    Latest,
    /// The oldest message kept.
    Earliest,
}

/// How partitions are shared among the group's members.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum RebalanceStrategy {
    /// Kafka's range assignor: partition N of every subscribed
    /// topic goes to the same member when the topics have the same
    /// partition count, so a trace's spans and its log records meet.
    #[default]
    Range,
    /// Round robin over all partitions of all topics (no co-partitioning:
    /// only for a receiver of one topic).
    Roundrobin,
}

/// `receivers.kafka`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaReceiverConfig {
    /// Bootstrap brokers, `host:port`.
    pub brokers: Vec<String>,
    /// One topic for every signal: each message's `causeway.signal` header
    /// says which (messages without it are taken as the signal of the
    /// pipeline, when the receiver feeds only one). Per-signal topics win.
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
    /// The consumer group. Instances of one tier share
    /// it; a receiver that every instance must read whole (metrics for the
    /// join) needs one group per instance, e.g. `causeway-${env:HOSTNAME}`.
    #[serde(default = "group_id")]
    pub group_id: String,
    /// The client id the broker sees.
    #[serde(default = "client_id")]
    pub client_id: String,
    /// Static membership (`group.instance.id`, as the Collector's key): a
    /// member that restarts within `session.timeout.ms` gets its partitions
    /// back without a rebalance of the group, so a rolling restart moves
    /// nothing. Unique per instance, e.g. `${env:POD_NAME}`; unset:
    /// dynamic membership.
    #[serde(default)]
    pub group_instance_id: Option<String>,
    /// `latest` or `earliest`: where a group without a committed offset starts.
    #[serde(default)]
    pub initial_offset: InitialOffset,
    /// `range` (default; keeps the spans and logs topics co-partitioned) or `roundrobin`.
    #[serde(default)]
    pub group_rebalance_strategy: RebalanceStrategy,
    /// How often the offsets that became safe are committed.
    #[serde(default = "commit_interval")]
    pub commit_interval: Duration,
    /// Messages read and not yet safe (delivered, on disk, or decided by
    /// tail sampling) at most; reading pauses above it.
    #[serde(default = "max_in_flight")]
    pub max_in_flight_messages: usize,
    /// librdkafka properties passed through as they are (TLS and SASL,
    /// `session.timeout.ms`, ...). Values are never logged.
    #[serde(default)]
    pub settings: IndexMap<String, String>,
}

fn group_id() -> String {
    "causeway".into()
}
fn client_id() -> String {
    "causeway".into()
}
fn commit_interval() -> Duration {
    Duration::secs(1)
}
fn max_in_flight() -> usize {
    100_000
}

/// librdkafka properties causeway sets itself.
const OWN_SETTINGS: [&str; 7] = [
    "bootstrap.servers",
    "group.id",
    "group.instance.id",
    "client.id",
    "enable.auto.commit",
    "auto.offset.reset",
    "partition.assignment.strategy",
];

impl KafkaReceiverConfig {
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

impl Validate for KafkaReceiverConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = self.topics().errors(&self.brokers);
        if self.group_id.trim().is_empty() {
            e.push(ConfigError::new("group_id", "must not be empty"));
        }
        if self.commit_interval.get().is_zero() {
            e.push(ConfigError::new("commit_interval", "must be above zero"));
        }
        if self.max_in_flight_messages == 0 {
            e.push(ConfigError::new(
                "max_in_flight_messages",
                "must be at least 1",
            ));
        }
        for k in self.settings.keys() {
            if OWN_SETTINGS.contains(&k.as_str()) {
                e.push(ConfigError::new(
                    format!("settings.{k}"),
                    "set by causeway from the receiver's own keys (brokers, group_id, group_instance_id, client_id, initial_offset, group_rebalance_strategy); use those",
                ));
            }
        }
        e
    }
}

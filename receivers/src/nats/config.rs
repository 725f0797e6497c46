//! Configuration of the `nats` receiver.

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use causeway_core::tls::ClientTls;
use serde::Deserialize;

pub use crate::kafka_lag::config::{Filter, Match};

/// `receivers.nats`: the monitoring endpoint of a NATS server with JetStream.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsConfig {
    /// The server's monitoring endpoint (`-m`/`http_port`; default
    /// `http://localhost:8222`).
    #[serde(default = "endpoint")]
    pub endpoint: String,
    /// Streams to read (regexes over the whole name; default all).
    #[serde(default)]
    pub streams: Match,
    /// Consumers to read (regexes over the whole name; default all).
    #[serde(default)]
    pub consumers: Match,
    /// TLS to an `https` endpoint (default: the system's roots).
    #[serde(default)]
    pub tls: ClientTls,
    /// How often `/jsz` is read (default 10s).
    #[serde(default = "interval")]
    pub collection_interval: Duration,
    /// How long a request may take (default 10s).
    #[serde(default = "timeout")]
    pub timeout: Duration,
    /// The largest answer read (default 64MiB; a bigger one is an error, counted).
    #[serde(default = "body_limit")]
    pub body_size_limit: ByteSize,
    /// Backlog (messages not yet delivered plus those delivered and not
    /// acknowledged) at or above which a consumer's backlog alarm fires
    /// (default 5000, as for Kafka lag and RabbitMQ depth).
    #[serde(default = "backlog_threshold")]
    pub backlog_threshold: f64,
    /// A backlog rising without a decrease for this long fires the alarm too (default 5m).
    #[serde(default = "growth_window")]
    pub growth_window: Duration,
}

fn endpoint() -> String {
    "http://localhost:8222".into()
}
fn interval() -> Duration {
    Duration::secs(10)
}
fn timeout() -> Duration {
    Duration::secs(10)
}
fn body_limit() -> ByteSize {
    ByteSize(64 << 20)
}
fn backlog_threshold() -> f64 {
    5000.0
}
fn growth_window() -> Duration {
    Duration::secs(300)
}

impl Validate for NatsConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if !(self.endpoint.starts_with("http://") || self.endpoint.starts_with("https://")) {
            e.push(ConfigError::new(
                "endpoint",
                format!(
                    "{:?}: an http:// or https:// URL of the server's monitoring endpoint",
                    self.endpoint
                ),
            ));
        }
        e.extend(self.streams.errors("streams"));
        e.extend(self.consumers.errors("consumers"));
        e.extend(self.tls.errors("tls"));
        if self.collection_interval.get() < std::time::Duration::from_millis(100) {
            e.push(ConfigError::new(
                "collection_interval",
                "must be at least 100ms",
            ));
        }
        if self.timeout.get().is_zero() {
            e.push(ConfigError::new("timeout", "must be more than 0"));
        }
        if self.backlog_threshold < 0.0 {
            e.push(ConfigError::new(
                "backlog_threshold",
                "must not be negative",
            ));
        }
        e
    }
}

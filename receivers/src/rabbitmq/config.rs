//! Configuration of the `rabbitmq` receiver.

use causeway_core::config::{ConfigError, Validate};
use causeway_core::tls::Secret;
use serde::Deserialize;

pub use crate::kafka_lag::config::{Filter, Match};

crate::polling::poll_config! {
    /// `receivers.rabbitmq`: the management HTTP API of a RabbitMQ node or cluster.
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct RabbitmqConfig {
        /// The management API (default `http://localhost:15672`, the Collector's).
        #[serde(default = "endpoint")]
        pub endpoint: String,
        /// A user with the `monitoring` tag.
        pub username: String,
        /// Its password (redacted), or `password_file`.
        #[serde(default)]
        pub password: Option<Secret>,
        /// A file holding the password (read at every collection, so a rotated
        /// secret is picked up).
        #[serde(default)]
        pub password_file: Option<std::path::PathBuf>,
        /// Virtual hosts to read (regexes over the whole name).
        #[serde(default)]
        pub vhosts: Match,
        /// Queues to read (regexes over the whole name).
        #[serde(default)]
        pub queues: Match,
        /// Collections in the status evaluation window (6: one minute at 10s).
        #[serde(default = "window")]
        pub window: usize,
        /// How often the broker refreshes the queues' counters and depths
        /// (RabbitMQ's `collect_statistics_interval`): the
        /// window is kept at least this long, since a counter that did not
        /// move over less says nothing of deliveries.
        #[serde(default = "stats_interval")]
        pub stats_interval: causeway_core::config::Duration,
        /// Queues that carry retries or dead letters (regex over the whole name).
        #[serde(default = "retry_queues")]
        pub retry_queues: String,
        /// Publish rate (messages/s) above which a retry queue is in a retry storm.
        #[serde(default = "retry_rate")]
        pub retry_rate_threshold: f64,
        /// Also read `GET /api/bindings` and `GET /api/exchanges` at every
        /// collection and write each exchange → queue binding as
        /// `rabbitmq.queue.binding`, so that a trace publishing to an exchange
        /// finds the queues its message went to.
        #[serde(default = "yes")]
        pub bindings: bool,
    }
}

fn yes() -> bool {
    true
}

fn endpoint() -> String {
    "http://localhost:15672".into()
}
fn window() -> usize {
    6
}
fn stats_interval() -> causeway_core::config::Duration {
    causeway_core::config::Duration::secs(5)
}
fn retry_queues() -> String {
    r"(?i).*[.\-_](retry|dlq|dlx|dead[.\-_]?letter)(s)?([.\-_].*)?".into()
}
fn retry_rate() -> f64 {
    200.0
}

impl RabbitmqConfig {
    /// The password now (the file is read each time).
    pub fn password(&self) -> Result<String, String> {
        match (&self.password, &self.password_file) {
            (_, Some(f)) => std::fs::read_to_string(f)
                .map(|s| s.trim_end().to_string())
                .map_err(|e| format!("{}: {e}", f.display())),
            (Some(p), None) => Ok(p.expose().to_string()),
            (None, None) => Ok(String::new()),
        }
    }
}

impl Validate for RabbitmqConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        e.extend(crate::http_fetch::endpoint_error(
            &self.endpoint,
            "the management API",
        ));
        if self.username.trim().is_empty() {
            e.push(ConfigError::new("username", "must not be empty"));
        }
        if self.password.is_some() && self.password_file.is_some() {
            e.push(ConfigError::new(
                "password_file",
                "set password or password_file, not both",
            ));
        }
        if let Err(m) = self.password() {
            e.push(ConfigError::new("password_file", m));
        }
        e.extend(self.vhosts.errors("vhosts"));
        e.extend(self.queues.errors("queues"));
        if let Err(x) = regex::Regex::new(&self.retry_queues) {
            e.push(ConfigError::new(
                "retry_queues",
                format!("invalid regex: {x}"),
            ));
        }
        if self.window < 2 {
            e.push(ConfigError::new("window", "must be at least 2"));
        }
        e.extend(self.poll_errors());
        e
    }
}

//! Configuration of the `nats` receiver.

use causeway_core::config::{ConfigError, Validate};
use serde::Deserialize;

pub use crate::kafka_lag::config::{Filter, Match};

crate::polling::poll_config! {
    /// `receivers.nats`: the monitoring endpoint of a NATS server with JetStream.
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct NatsConfig {
        /// The server's monitoring endpoint (`-m`/`http_port`; default
        /// `http://localhost:8222`).
        #[serde(default = "endpoint")]
        pub endpoint: String,
        /// Streams to read (regexes over the whole name).
        #[serde(default)]
        pub streams: Match,
        /// Consumers to read (regexes over the whole name).
        #[serde(default)]
        pub consumers: Match,
    }
}

fn endpoint() -> String {
    "http://localhost:8222".into()
}

impl Validate for NatsConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        e.extend(crate::http_fetch::endpoint_error(
            &self.endpoint,
            "the server's monitoring endpoint",
        ));
        e.extend(self.streams.errors("streams"));
        e.extend(self.consumers.errors("consumers"));
        e.extend(self.poll_errors());
        e
    }
}

//! What the `kafka` exporter and receiver share: topics per signal, the
//! message encoding, and the header that names a message's signal.

use crate::config::ConfigError;
use crate::model::Signal;
use serde::Deserialize;

/// The header that names a message's signal (`traces`, `logs`, `metrics`).
pub const SIGNAL_HEADER: &str = "causeway.signal";

/// How messages are encoded.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// An `Export*ServiceRequest` in protobuf.
    #[default]
    OtlpProto,
    /// The same request in OTLP/JSON.
    OtlpJson,
}

/// One signal's topic.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalTopic {
    /// The topic (defaults: `otlp_spans`, `otlp_logs`, `otlp_metrics`, or `topic`).
    pub topic: Option<String>,
}

/// The topics of a component: one for all signals and one per signal.
#[derive(Debug, Clone, Copy)]
pub struct Topics<'a> {
    /// `topic`.
    pub all: &'a Option<String>,
    /// `traces.topic`, `logs.topic`, `metrics.topic`.
    pub traces: &'a SignalTopic,
    /// See `traces`.
    pub logs: &'a SignalTopic,
    /// See `traces`.
    pub metrics: &'a SignalTopic,
}

impl Topics<'_> {
    /// The topic of `signal`: its own, else `topic`, else the Collector's
    /// default (`otlp_spans`, `otlp_logs`, `otlp_metrics`).
    pub fn of(&self, signal: Signal) -> String {
        let (own, default) = match signal {
            Signal::Traces => (&self.traces.topic, "otlp_spans"),
            Signal::Logs => (&self.logs.topic, "otlp_logs"),
            Signal::Metrics => (&self.metrics.topic, "otlp_metrics"),
            // Kafka carries no profiles (its components do not accept
            // them); the Collector's name, should one ever be sent.
            Signal::Profiles => return self.all.clone().unwrap_or_else(|| "otlp_profiles".into()),
        };
        own.clone()
            .or_else(|| self.all.clone())
            .unwrap_or_else(|| default.to_string())
    }

    /// Empty topic names and an empty broker list, with their paths.
    pub fn errors(&self, brokers: &[String]) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if brokers.is_empty() || brokers.iter().any(|b| b.trim().is_empty()) {
            e.push(ConfigError::new(
                "brokers",
                "list at least one broker, as host:port",
            ));
        }
        for (key, t) in [
            ("topic", self.all),
            ("traces.topic", &self.traces.topic),
            ("logs.topic", &self.logs.topic),
            ("metrics.topic", &self.metrics.topic),
        ] {
            if t.as_deref().is_some_and(|t| t.trim().is_empty()) {
                e.push(ConfigError::new(key, "must not be empty"));
            }
        }
        e
    }
}

/// The name of a signal in the [`SIGNAL_HEADER`].
pub fn signal_name(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "traces",
        Signal::Logs => "logs",
        Signal::Metrics => "metrics",
        Signal::Profiles => "profiles",
    }
}

/// The signal a [`SIGNAL_HEADER`] value names.
pub fn signal_of(name: &str) -> Option<Signal> {
    match name {
        "traces" => Some(Signal::Traces),
        "logs" => Some(Signal::Logs),
        "metrics" => Some(Signal::Metrics),
        _ => None,
    }
}

//! Configuration of the `loki` exporter.

use causeway_core::config::{ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

/// Body encoding.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum LokiEncoding {
    /// Snappy-compressed `logproto.PushRequest` (Loki's default).
    #[default]
    Protobuf,
    /// `{"streams":[…]}`, optionally gzipped.
    Json,
}

/// Which attributes become stream labels.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelsConfig {
    /// Resource attribute → label name; setting the map replaces the default.
    #[serde(default = "default_resource_labels")]
    pub resource: IndexMap<String, String>,
    /// Record attribute → label name; setting the map replaces the default.
    #[serde(default = "default_record_labels")]
    pub attributes: IndexMap<String, String>,
    /// Add `level` from the record's severity.
    #[serde(default = "yes")]
    pub level: bool,
}

impl Default for LabelsConfig {
    fn default() -> Self {
        LabelsConfig {
            resource: default_resource_labels(),
            attributes: default_record_labels(),
            level: true,
        }
    }
}

fn yes() -> bool {
    true
}
fn default_resource_labels() -> IndexMap<String, String> {
    IndexMap::from([("service.name".to_string(), "service_name".to_string())])
}
fn default_record_labels() -> IndexMap<String, String> {
    IndexMap::from([("route_id".to_string(), "route_id".to_string())])
}

causeway_core::exporter_config! {
    /// `exporters.loki`.
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct LokiConfig {
        /// The push URL, e.g. `http://loki:3100/loki/api/v1/push` (a bare `http://host:3100` gets the path appended).
        pub endpoint: String,
        /// `protobuf` (snappy) or `json`.
        #[serde(default)]
        pub encoding: LokiEncoding,
        /// For `json`: `gzip` or `none`.
        #[serde(default)]
        pub compression: Option<String>,
        /// Tenant, sent as `X-Scope-OrgID`.
        #[serde(default)]
        pub tenant_id: Option<String>,
        /// Stream labels.
        #[serde(default)]
        pub labels: LabelsConfig,
        /// A label with more distinct values than this becomes structured metadata.
        #[serde(default = "max_values")]
        pub max_label_values: usize,
    }
    timeout_default = "timeout", http
}

fn max_values() -> usize {
    1000
}
fn timeout() -> Duration {
    Duration::secs(5)
}

fn valid_label(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Validate for LokiConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = self.delivery_errors();
        e.extend(crate::http_util::endpoint_errors(&self.endpoint, &self.tls));
        if let Some(c) = &self.compression {
            if c != "gzip" && c != "none" {
                e.push(ConfigError::new("compression", "must be gzip or none"));
            }
            if self.encoding == LokiEncoding::Protobuf && c == "gzip" {
                e.push(ConfigError::new(
                    "compression",
                    "protobuf bodies are always snappy; gzip applies to json",
                ));
            }
        }
        for (section, map) in [
            ("labels.resource", &self.labels.resource),
            ("labels.attributes", &self.labels.attributes),
        ] {
            for (k, v) in map {
                if !valid_label(v) {
                    e.push(ConfigError::new(
                        format!("{section}.{k}"),
                        format!("{v:?} is not a valid Loki label name"),
                    ));
                }
            }
        }
        if self.max_label_values == 0 {
            e.push(ConfigError::new("max_label_values", "must be at least 1"));
        }
        e
    }
}

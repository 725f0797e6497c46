//! Configuration of the `health_check` extension: the Collector's keys.

use causeway_core::config::{ConfigError, Duration, Validate};
use serde::Deserialize;

/// `extensions.health_check`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HealthCheckConfig {
    /// Where to listen (default `localhost:13133`, as in the Collector).
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// Serve over TLS (`cert_file`, `key_file`, optional `client_ca_file`).
    #[serde(default)]
    pub tls: Option<causeway_core::tls::ServerTls>,
    /// The path answering.
    #[serde(default = "default_path")]
    pub path: String,
    /// Fixed bodies instead of the JSON status.
    #[serde(default)]
    pub response_body: Option<ResponseBody>,
    /// Accepted for compatibility and not used: the Collector's own is
    /// documented as broken. The status follows the pipelines' lifecycle.
    #[serde(default)]
    pub check_collector_pipeline: Option<CheckPipeline>,
}

impl Default for HealthCheckConfig {
    fn default() -> Self {
        HealthCheckConfig {
            endpoint: default_endpoint(),
            tls: None,
            path: default_path(),
            response_body: None,
            check_collector_pipeline: None,
        }
    }
}

fn default_endpoint() -> String {
    "localhost:13133".into()
}
fn default_path() -> String {
    "/".into()
}

/// `response_body`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseBody {
    /// Body while healthy (200).
    #[serde(default)]
    pub healthy: String,
    /// Body while not (503).
    #[serde(default)]
    pub unhealthy: String,
}

/// `check_collector_pipeline` (accepted, not used).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckPipeline {
    /// Whether it is on.
    #[serde(default)]
    pub enabled: bool,
    /// The Collector's check interval.
    #[serde(default)]
    pub interval: Option<Duration>,
    /// The Collector's failure threshold.
    #[serde(default)]
    pub exporter_failure_threshold: Option<u64>,
}

impl Validate for HealthCheckConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.endpoint.trim().is_empty() {
            e.push(ConfigError::new("endpoint", "must not be empty"));
        }
        if !self.path.starts_with('/') {
            e.push(ConfigError::new(
                "path",
                format!("must start with `/` (got {:?})", self.path),
            ));
        }
        if let Some(t) = &self.tls {
            e.extend(t.errors("tls"));
        }
        e
    }
}

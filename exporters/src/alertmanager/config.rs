//! Configuration of the `alertmanager` and `webhook` exporters.

use causeway_core::config::{
    delivery_errors, ConfigError, Duration, QueueConfig, RetryConfig, Validate,
};
use indexmap::IndexMap;
use serde::Deserialize;

/// `exporters.alertmanager` and `exporters.webhook`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertHttpConfig {
    /// For `alertmanager`: its base URL (`http://alertmanager:9093`; `/api/v2/alerts` is
    /// appended unless the URL already ends with it). For `webhook`: the full URL to POST to.
    pub endpoint: String,
    /// Extra headers (e.g. `Authorization`).
    #[serde(default)]
    pub headers: IndexMap<String, causeway_core::tls::Secret>,
    /// Per-attempt timeout (default 5s).
    #[serde(default = "timeout")]
    pub timeout: Duration,
    /// Retries (429, 5xx and connection failures).
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
    /// The sending queue.
    #[serde(default)]
    pub sending_queue: QueueConfig,
    /// TLS for https endpoints: `ca_file`, and `cert_file`/`key_file` for mTLS.
    #[serde(default)]
    pub tls: causeway_core::tls::ClientTls,
}

fn timeout() -> Duration {
    Duration::secs(5)
}

impl Validate for AlertHttpConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = delivery_errors(&self.retry_on_failure, &self.sending_queue, self.timeout);
        e.extend(crate::http_util::endpoint_errors(&self.endpoint, &self.tls));
        if reqwest::Url::parse(&self.endpoint).is_err() {
            e.push(ConfigError::new("endpoint", "is not a valid URL"));
        }
        for k in self.headers.keys() {
            if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err() {
                e.push(ConfigError::new(
                    format!("headers.{k}"),
                    "is not a valid header name",
                ));
            }
        }
        e
    }
}

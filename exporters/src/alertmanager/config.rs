//! Configuration of the `alertmanager` and `webhook` exporters.

use causeway_core::config::{ConfigError, Duration, Validate};
use serde::Deserialize;

causeway_core::exporter_config! {
    /// `exporters.alertmanager` and `exporters.webhook`.
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct AlertHttpConfig {
        /// For `alertmanager`: its base URL (`http://alertmanager:9093`; `/api/v2/alerts` is
        /// appended unless the URL already ends with it). For `webhook`: the full URL to POST to.
        pub endpoint: String,
    }
    timeout_default = "timeout", http
}

fn timeout() -> Duration {
    Duration::secs(5)
}

impl Validate for AlertHttpConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = self.delivery_errors();
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

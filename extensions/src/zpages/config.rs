//! Configuration of the `zpages` extension: the Collector's keys.

use causeway_core::config::{ConfigError, Validate};
use serde::Deserialize;

/// `extensions.zpages`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ZPagesConfig {
    /// Where to listen (default `localhost:55679`, as in the Collector).
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// Serve over TLS.
    #[serde(default)]
    pub tls: Option<causeway_core::tls::ServerTls>,
    /// Require a bearer token or a user and password on every page
    /// (`bearer_token` or `bearer_token_file`, or `basic: {username,
    /// password | password_file}`). Beyond loopback, `tls` and `auth` are
    /// both required unless `service.insecure_expose`. A causeway key.
    #[serde(default)]
    pub auth: Option<causeway_core::tls::ServerAuth>,
    /// The Collector's `/debug/expvarz` switch; accepted, the page lists
    /// causeway's own metrics either way.
    #[serde(default)]
    pub expvar: Option<Expvar>,
}

/// `expvar`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Expvar {
    /// Whether it is on.
    #[serde(default)]
    pub enabled: bool,
}

impl Default for ZPagesConfig {
    fn default() -> Self {
        ZPagesConfig {
            endpoint: default_endpoint(),
            tls: None,
            auth: None,
            expvar: None,
        }
    }
}

fn default_endpoint() -> String {
    "localhost:55679".into()
}

impl Validate for ZPagesConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.endpoint.trim().is_empty() {
            e.push(ConfigError::new("endpoint", "must not be empty"));
        }
        if let Some(t) = &self.tls {
            e.extend(t.errors("tls"));
        }
        if let Some(a) = &self.auth {
            e.extend(a.errors("auth"));
        }
        e
    }
}

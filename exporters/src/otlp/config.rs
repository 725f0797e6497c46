//! Configuration of the `otlp` (gRPC) and `otlphttp` exporters, in the
//! Collector's shape.

use causeway_core::config::{
    delivery_errors, ConfigError, Duration, QueueConfig, RetryConfig, Validate,
};
use indexmap::IndexMap;
use serde::Deserialize;

/// `compression`: `gzip`, `zstd`, `snappy` or `none`.
pub use causeway_core::compress::Codec as Compression;

/// `tls`: the client side of TLS (CA bundle, client certificate, `insecure` for plaintext).
pub use causeway_core::tls::ClientTls as TlsConfig;

/// Declares an OTLP exporter's config: after its own fields (ending with a
/// comma), the keys both OTLP exporters have — `compression`, `headers`,
/// `tls`, `auth` — and the delivery keys every exporter has.
macro_rules! otlp_config {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($body:tt)* }) => {
        causeway_core::exporter_config! {
            $(#[$m])*
            $vis struct $name {
                $($body)*
                /// `gzip`, `zstd`, `snappy` or `none` (levels: see BENCHMARKS.md).
                #[serde(default)]
                pub compression: Compression,
                /// Headers sent with every request (gRPC metadata for `otlp`).
                #[serde(default)]
                pub headers: IndexMap<String, causeway_core::tls::Secret>,
                /// Transport security: `ca_file` (and `cert_file`/`key_file` for mTLS) for
                /// https endpoints; `insecure: true` for plaintext `host:port`.
                #[serde(default)]
                pub tls: TlsConfig,
                /// `authenticator`: a `bearertokenauth` or `basicauth` extension whose
                /// header every request carries.
                #[serde(default)]
                pub auth: Option<causeway_core::auth::AuthRef>,
            }
            timeout_default = "default_timeout"
        }
    };
}

otlp_config! {
    /// `exporters.otlp` (OTLP/gRPC).
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct OtlpGrpcConfig {
        /// `host:port` or `http://host:port` of the OTLP/gRPC server (e.g. Jaeger's collector on 4317).
        pub endpoint: String,
    }
}

/// `encoding` of `otlphttp`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum HttpEncoding {
    /// `application/x-protobuf`.
    #[default]
    Proto,
    /// `application/json`.
    Json,
}

otlp_config! {
    /// `exporters.otlphttp` (OTLP/HTTP).
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct OtlpHttpConfig {
        /// Base URL; `/v1/traces`, `/v1/logs`, `/v1/metrics`,
        /// `/v1development/profiles` are appended.
        pub endpoint: Option<String>,
        /// Full URL for traces (overrides `endpoint`).
        pub traces_endpoint: Option<String>,
        /// Full URL for logs (overrides `endpoint`).
        pub logs_endpoint: Option<String>,
        /// Full URL for metrics (overrides `endpoint`).
        pub metrics_endpoint: Option<String>,
        /// Full URL for profiles (overrides `endpoint`).
        pub profiles_endpoint: Option<String>,
        /// `proto` or `json`.
        #[serde(default)]
        pub encoding: HttpEncoding,
    }
}

fn default_timeout() -> Duration {
    Duration::secs(5)
}

fn check_common(
    endpoints: &[(&str, &str)],
    retry: &RetryConfig,
    queue: &QueueConfig,
    timeout: Duration,
    tls: &TlsConfig,
) -> Vec<ConfigError> {
    let mut e = delivery_errors(retry, queue, timeout);
    for (key, ep) in endpoints {
        if ep.trim().is_empty() {
            e.push(ConfigError::new(*key, "must not be empty"));
        } else if ep.contains("://") && !ep.starts_with("http://") && !ep.starts_with("https://") {
            e.push(ConfigError::new(
                *key,
                format!("{ep:?}: use http://, https:// or host:port"),
            ));
        }
    }
    e.extend(tls.errors("tls"));
    e
}

impl Validate for OtlpGrpcConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = check_common(
            &[("endpoint", &self.endpoint)],
            &self.retry_on_failure,
            &self.sending_queue,
            self.timeout,
            &self.tls,
        );
        if super::grpc_uri(&self.endpoint).is_err() {
            e.push(ConfigError::new(
                "endpoint",
                format!(
                    "invalid endpoint {:?}: expected host:port or http://host:port",
                    self.endpoint
                ),
            ));
        }
        e
    }
}

impl Validate for OtlpHttpConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut eps = Vec::new();
        for (k, v) in [
            ("endpoint", &self.endpoint),
            ("traces_endpoint", &self.traces_endpoint),
            ("logs_endpoint", &self.logs_endpoint),
            ("metrics_endpoint", &self.metrics_endpoint),
            ("profiles_endpoint", &self.profiles_endpoint),
        ] {
            if let Some(v) = v {
                eps.push((k, v.as_str()));
            }
        }
        let mut e = check_common(
            &eps,
            &self.retry_on_failure,
            &self.sending_queue,
            self.timeout,
            &self.tls,
        );
        // As the Collector: a per-signal endpoint suffices for the signals
        // the exporter is used with (checked against the pipelines by
        // `cannot_export`).
        if eps.is_empty() {
            e.push(ConfigError::new(
                "endpoint",
                "set `endpoint`, or the traces_endpoint, logs_endpoint, metrics_endpoint or profiles_endpoint of each signal the exporter sends",
            ));
        }
        for (k, v) in eps {
            if !v.starts_with("http://") && !v.starts_with("https://") {
                e.push(ConfigError::new(
                    k,
                    format!("{v:?} must be a URL starting with http://"),
                ));
            }
        }
        e
    }
}

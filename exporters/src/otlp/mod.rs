//! The `otlp` (gRPC) and `otlphttp` exporters: how traces reach Jaeger
//! (whose collector takes OTLP on 4317/4318), or another causeway.
//!
//! Batches that were never decoded leave as they arrived: the encoded parts
//! are written one after the other into the request. Answers are classified
//! as the OTLP specification says: only retryable codes are retried (with
//! the server's retry hint when given), partial successes are counted and
//! never resent.

pub mod config;
pub(crate) mod grpc;
mod http;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, BuiltExporter, ExporterFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::{BoxError, Signal, SignalSet};

use config::{OtlpGrpcConfig, OtlpHttpConfig};

/// The client authenticator an exporter's `auth` names, from its extension.
fn authenticator(
    ctx: &BuildContext,
    auth: &Option<causeway_core::auth::AuthRef>,
) -> Result<Option<std::sync::Arc<dyn causeway_core::auth::ClientAuth>>, BoxError> {
    Ok(auth.as_ref().map(|a| a.resolve(&ctx.shared)).transpose()?)
}

/// Factory of the `otlp` exporter (OTLP/gRPC).
pub struct OtlpGrpcExporterFactory;

#[async_trait]
impl ExporterFactory for OtlpGrpcExporterFactory {
    fn kind(&self) -> &'static str {
        "otlp"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<OtlpGrpcConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<OtlpGrpcConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: OtlpGrpcConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let auth = authenticator(&ctx, &cfg.auth)?;
        let exporter = grpc::GrpcExporter::new(&cfg, auth)?;
        Ok(BuiltExporter {
            exporter: std::sync::Arc::new(exporter),
            delivery: cfg.delivery(),
        })
    }
}

/// Factory of the `otlphttp` exporter (OTLP/HTTP).
pub struct OtlpHttpExporterFactory;

#[async_trait]
impl ExporterFactory for OtlpHttpExporterFactory {
    fn kind(&self) -> &'static str {
        "otlphttp"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<OtlpHttpConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<OtlpHttpConfig>(cfg).map(|_| ())
    }
    fn cannot_export(&self, cfg: &serde_yaml::Value, signal: Signal) -> Option<String> {
        // A section that does not decode is reported by `validate`.
        let cfg = decode::<OtlpHttpConfig>(cfg).ok()?;
        let (own, key) = match signal {
            Signal::Traces => (&cfg.traces_endpoint, "traces_endpoint"),
            Signal::Logs => (&cfg.logs_endpoint, "logs_endpoint"),
            Signal::Metrics => (&cfg.metrics_endpoint, "metrics_endpoint"),
            Signal::Profiles => {
                if cfg.encoding == config::HttpEncoding::Json {
                    return Some(
                        "profiles are sent as protobuf only: set `encoding: proto`".into(),
                    );
                }
                (&cfg.profiles_endpoint, "profiles_endpoint")
            }
        };
        (cfg.endpoint.is_none() && own.is_none())
            .then(|| format!("it has no URL for them: set `endpoint` or `{key}`"))
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: OtlpHttpConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let auth = authenticator(&ctx, &cfg.auth)?;
        let exporter = http::HttpExporter::new(&cfg, auth)?;
        Ok(BuiltExporter {
            exporter: std::sync::Arc::new(exporter),
            delivery: cfg.delivery(),
        })
    }
}

/// The URI of a gRPC endpoint written `host:port` or `http://host:port`.
pub(crate) fn grpc_uri(endpoint: &str) -> Result<::http::Uri, String> {
    let with_scheme = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    let uri: ::http::Uri = with_scheme.parse().map_err(|e| format!("{e}"))?;
    if uri.host().is_none() {
        return Err("no host".into());
    }
    Ok(uri)
}

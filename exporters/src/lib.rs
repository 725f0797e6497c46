//! causeway exporters.

pub mod alertmanager;
pub mod debug;
pub mod file;
mod http_util;
pub mod loki;
pub mod otlp;
pub mod victoriametrics;
pub mod webhook;

use causeway_core::registry::Registry;

/// The error type of the exporters crate.
#[derive(Debug, thiserror::Error)]
pub enum ExporterError {
    /// The endpoint is not a usable URL.
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    Endpoint {
        /// The configured endpoint.
        endpoint: String,
        /// Why.
        reason: String,
    },
    /// A file could not be opened, written or rotated.
    #[error("file {path}: {source}")]
    File {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The data could not be encoded.
    #[error("encode: {0}")]
    Encode(String),
    /// The server answered with an error.
    #[error("{endpoint}: {status}: {message}")]
    Server {
        /// Where.
        endpoint: String,
        /// HTTP status or gRPC code.
        status: String,
        /// Its message.
        message: String,
    },
    /// The request did not reach the server.
    #[error("{endpoint}: {message}")]
    Transport {
        /// Where.
        endpoint: String,
        /// What happened.
        message: String,
    },
}

/// Register every exporter of this crate.
pub fn register(registry: &mut Registry) {
    registry.add_exporter(otlp::OtlpGrpcExporterFactory);
    registry.add_exporter(otlp::OtlpHttpExporterFactory);
    registry.add_exporter(file::FileExporterFactory);
    registry.add_exporter(debug::DebugExporterFactory);
    registry.add_exporter(loki::LokiExporterFactory);
    registry.add_exporter(victoriametrics::VictoriaMetricsExporterFactory);
    registry.add_exporter(alertmanager::AlertmanagerExporterFactory);
    registry.add_exporter(webhook::WebhookExporterFactory);
}

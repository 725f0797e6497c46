//! causeway exporters.

pub mod alertmanager;
pub mod debug;
pub mod file;
mod http_util;
pub mod kafka;
pub mod loadbalancing;
pub mod loki;
pub mod nop;
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
    registry.add_exporter(kafka::KafkaExporterFactory);
    registry.add_exporter(nop::NopExporterFactory);
    registry.add_exporter(loadbalancing::LoadBalancingExporterFactory);
    // Collector exporters this build lacks, and what to use instead.
    use causeway_core::registry::Kind::Exporter;
    registry.add_instead(Exporter, "prometheusremotewrite", "use `victoriametrics`: Prometheus remote write (snappy protobuf) to VictoriaMetrics, Prometheus, Mimir or Thanos, with the same metric names");
    registry.add_instead(Exporter, "prometheus", "causeway does not serve pipeline metrics for scraping: push them with `victoriametrics` (remote write)");
    registry.add_instead(
        Exporter,
        "logging",
        "the Collector renamed it `debug`; use `debug`",
    );
    registry.add_instead(Exporter, "otlp_http", "causeway calls it `otlphttp`");
    registry.add_instead(
        Exporter,
        "jaeger",
        "Jaeger takes OTLP: use `otlp` to its port 4317 (the Collector removed this exporter too)",
    );
    registry.add_instead(
        Exporter,
        "zipkin",
        "send OTLP with `otlp` or `otlphttp` (Zipkin-format export is not built in)",
    );
}

/// What the exporters' tests share.
#[cfg(test)]
pub(crate) mod testing {
    /// Serve `app` on a free port of 127.0.0.1; its base URL.
    pub(crate) async fn serve(app: axum::Router) -> String {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(l, app).await });
        format!("http://{addr}")
    }
}

#[cfg(test)]
mod secret_tests {
    use causeway_core::config::decode;

    /// `headers:` carry `Authorization` tokens: every exporter's config
    /// prints them as `<redacted>` (configs are logged at debug).
    #[test]
    fn header_values_never_print() {
        let token = "Bearer s3cr3t-in-a-header";
        let yaml = |extra: &str| -> serde_yaml::Value {
            serde_yaml::from_str(&format!(
                "endpoint: http://127.0.0.1:1\nheaders: {{ Authorization: \"{token}\" }}\n{extra}"
            ))
            .expect("yaml")
        };
        let printed = [
            format!(
                "{:?}",
                decode::<crate::otlp::config::OtlpGrpcConfig>(&yaml("tls: { insecure: true }"))
                    .expect("otlp")
            ),
            format!(
                "{:?}",
                decode::<crate::otlp::config::OtlpHttpConfig>(&yaml("")).expect("otlphttp")
            ),
            format!(
                "{:?}",
                decode::<crate::loki::config::LokiConfig>(&yaml("")).expect("loki")
            ),
            format!(
                "{:?}",
                decode::<crate::victoriametrics::VictoriaMetricsConfig>(&yaml("")).expect("vm")
            ),
            format!(
                "{:?}",
                decode::<crate::alertmanager::config::AlertHttpConfig>(&yaml(""))
                    .expect("alertmanager")
            ),
        ];
        for p in printed {
            assert!(!p.contains("s3cr3t"), "{p}");
            assert!(p.contains("<redacted>"), "{p}");
        }
    }
}

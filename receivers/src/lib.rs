//! causeway receivers.

pub mod fuzzing;
pub mod gateway_log;
pub mod hostmetrics;
pub mod http_fetch;
pub mod kafka;
pub mod kafka_lag;
pub mod metric_builder;
pub mod nats;
pub mod otlp;
pub mod polling;
pub mod pprof;
pub mod prometheus;
pub mod rabbitmq;

use causeway_core::registry::Registry;

/// The error type of the receivers crate.
#[derive(Debug, thiserror::Error)]
pub enum ReceiverError {
    /// A listener could not be bound.
    #[error("{protocol} listener on {endpoint}: {source}")]
    Bind {
        /// `grpc` or `http`.
        protocol: &'static str,
        /// The configured endpoint.
        endpoint: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A Kafka request failed.
    #[error("kafka {op}: {message}")]
    Kafka {
        /// What was being done (`metadata`, `list groups`, ...).
        op: &'static str,
        /// librdkafka's reason.
        message: String,
    },
    /// A server stopped with an error.
    #[error("{protocol} server: {message}")]
    Serve {
        /// `grpc` or `http`.
        protocol: &'static str,
        /// What happened.
        message: String,
    },
}

/// Register every receiver of this crate.
pub fn register(registry: &mut Registry) {
    registry.add_receiver(otlp::OtlpReceiverFactory);
    registry.add_receiver(gateway_log::GatewayLogFactory);
    registry.add_receiver(kafka_lag::KafkaLagFactory);
    registry.add_receiver(kafka::KafkaReceiverFactory);
    registry.add_receiver(hostmetrics::HostMetricsFactory);
    registry.add_receiver(prometheus::PrometheusReceiverFactory);
    registry.add_receiver(rabbitmq::RabbitmqFactory);
    registry.add_receiver(nats::NatsFactory);
    registry.add_receiver(pprof::PprofFactory);
    // Collector receivers this build lacks, and what to use instead.
    use causeway_core::registry::Kind::Receiver;
    registry.add_instead(Receiver, "kafkametrics", "use `kafka_lag`: consumer-group lag per partition with a Burrow-style status, from the same brokers");
    registry.add_instead(Receiver, "filelog", "use `gateway_log` to tail access logs (JSON, Envoy and NGINX formats) across rotation and restarts");
    let otlp =
        "point the application's OpenTelemetry SDK (OTLP exporter) at the `otlp` receiver instead";
    registry.add_instead(Receiver, "jaeger", otlp);
    registry.add_instead(Receiver, "zipkin", otlp);
    registry.add_instead(Receiver, "opencensus", otlp);
    registry.add_instead(
        Receiver,
        "otlpjsonfile",
        "send OTLP/JSON to the `otlp` receiver's HTTP endpoint (Content-Type: application/json)",
    );
}

//! causeway receivers.

pub mod fuzzing;
pub mod gateway_log;
pub mod hostmetrics;
pub mod kafka;
pub mod kafka_lag;
pub mod metric_builder;
pub mod otlp;

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
}

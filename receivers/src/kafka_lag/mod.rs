//! Kafka consumer lag: the analysis the `kafka_lag` receiver runs on the
//! offsets it samples from a cluster.
//!
//! This module holds the broker-independent part: per-partition time lag
//! (interpolated on a timeline of high-water marks, as kafka-lag-exporter
//! does), Burrow's sliding-window status, the lag alarm, retry-storm
//! detection, and the conversion of a sampled cluster snapshot to OTLP
//! metrics named as the Collector's kafkametricsreceiver names them. The
//! broker client (rdkafka) and the receiver's scrape loop build on it.

pub mod analysis;
pub mod metrics;

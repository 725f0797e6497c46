//! Building OTLP metrics point by point, grouped by metric name (shared by
//! the receivers that produce metrics: `kafka_lag`, `hostmetrics`).

use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::BTreeMap;

pub use causeway_core::model::{int_attribute as kv_int, text_attribute as kv};

/// A point's value.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    /// `asInt`.
    Int(i64),
    /// `asDouble`.
    Double(f64),
}

/// The kind of a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A gauge.
    Gauge,
    /// A cumulative sum; `monotonic` for counters.
    Sum {
        /// Only goes up.
        monotonic: bool,
    },
}

struct Entry {
    unit: &'static str,
    description: &'static str,
    kind: Kind,
    points: Vec<NumberDataPoint>,
}

/// Points of one collection, all at one time.
pub struct Builder {
    time_ns: u64,
    start_ns: u64,
    metrics: BTreeMap<&'static str, Entry>,
}

impl Builder {
    /// Points at `time_ns`; cumulative sums start at `start_ns`.
    pub fn new(time_ns: u64, start_ns: u64) -> Self {
        Builder {
            time_ns,
            start_ns,
            metrics: BTreeMap::new(),
        }
    }

    /// Add a point.
    pub fn point(
        &mut self,
        name: &'static str,
        kind: Kind,
        unit: &'static str,
        description: &'static str,
        attributes: Vec<KeyValue>,
        value: Value,
    ) {
        let value = match value {
            Value::Int(i) => number_data_point::Value::AsInt(i),
            Value::Double(d) => number_data_point::Value::AsDouble(d),
        };
        let start = if matches!(kind, Kind::Sum { .. }) {
            self.start_ns
        } else {
            0
        };
        self.metrics
            .entry(name)
            .or_insert(Entry {
                unit,
                description,
                kind,
                points: Vec::new(),
            })
            .points
            .push(NumberDataPoint {
                attributes,
                start_time_unix_nano: start,
                time_unix_nano: self.time_ns,
                value: Some(value),
                ..Default::default()
            });
    }

    /// A gauge point.
    pub fn gauge(
        &mut self,
        name: &'static str,
        unit: &'static str,
        description: &'static str,
        attributes: Vec<KeyValue>,
        value: Value,
    ) {
        self.point(name, Kind::Gauge, unit, description, attributes, value);
    }

    /// The metrics under one resource and scope.
    pub fn finish(self, resource: Vec<KeyValue>, scope: &str) -> ResourceMetrics {
        let metrics = self
            .metrics
            .into_iter()
            .map(|(name, e)| Metric {
                name: name.into(),
                unit: e.unit.into(),
                description: e.description.into(),
                data: Some(match e.kind {
                    Kind::Gauge => metric::Data::Gauge(Gauge {
                        data_points: e.points,
                    }),
                    Kind::Sum { monotonic } => metric::Data::Sum(Sum {
                        data_points: e.points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: monotonic,
                    }),
                }),
                ..Default::default()
            })
            .collect();
        ResourceMetrics {
            resource: Some(Resource {
                attributes: resource,
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: scope.into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }
    }
}

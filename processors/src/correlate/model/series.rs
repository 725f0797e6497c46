//! Metric series as the correlation state keeps them, under the key their
//! evidence source gave them, and the attribute readers sources share.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use std::collections::VecDeque;

/// What joins a metric series to traces: the evidence source that keeps
/// it and its join dimensions (`topic`, `host`, `queue`, ...), as that
/// source named them. The state knows no source: it keeps what it is
/// handed under the key it is handed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The source's name.
    pub source: &'static str,
    dims: Vec<(&'static str, String)>,
}

impl Key {
    /// A key of `source` with no dimension yet.
    pub fn new(source: &'static str) -> Self {
        Key {
            source,
            dims: Vec::new(),
        }
    }
    /// With the dimension `name` set to `value`, when there is one.
    pub fn with(mut self, name: &'static str, value: Option<String>) -> Self {
        if let Some(v) = value {
            self.dims.retain(|(n, _)| *n != name);
            self.dims.push((name, v));
        }
        self
    }
    /// A dimension.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.dims
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
    /// Whether it has no dimension.
    pub fn is_empty(&self) -> bool {
        self.dims.is_empty()
    }
}

/// A metric series.
#[derive(Debug, Clone)]
pub struct Series {
    /// Metric name.
    pub name: String,
    /// Its source and join dimensions.
    pub key: Key,
    /// Other attributes (`cpu.mode`, `status`, `device`, ...), sorted.
    pub attrs: Vec<(String, String)>,
    /// (time ns, value), oldest first.
    pub points: VecDeque<(u64, f64)>,
    /// When it was last updated (ns).
    pub updated: u64,
}

impl Series {
    /// An empty series.
    pub fn new(name: &str, key: Key) -> Self {
        Series {
            name: name.to_string(),
            key,
            attrs: Vec::new(),
            points: VecDeque::new(),
            updated: 0,
        }
    }

    /// An attribute.
    pub fn attr(&self, k: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    }

    /// The largest value with a time in `[from, to]`, and its time.
    pub fn max_in(&self, from: u64, to: u64) -> Option<(u64, f64)> {
        self.points
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .copied()
            .fold(None, |acc: Option<(u64, f64)>, p| match acc {
                Some(a) if a.1 >= p.1 => Some(a),
                _ => Some(p),
            })
    }

    /// Rate per second between the first and last points in `[from, to]` (counters).
    pub fn rate_in(&self, from: u64, to: u64) -> Option<f64> {
        let mut it = self.points.iter().filter(|(t, _)| *t >= from && *t <= to);
        let first = it.next()?;
        let last = it.next_back()?;
        let dt = (last.0.saturating_sub(first.0)) as f64 / 1e9;
        (dt > 0.0).then(|| (last.1 - first.1).max(0.0) / dt)
    }
}

/// The latest point of a series: name, key, other attributes, time (ns), value.
pub type LatestPoint = (String, Key, Vec<(String, String)>, u64, f64);

/// An attribute value as text (numbers and booleans printed).
pub fn s(v: &Option<AnyValue>) -> Option<String> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(x) => Some(x.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::DoubleValue(d) => Some(d.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

/// An attribute value as a number.
pub fn num(v: &Option<AnyValue>) -> Option<f64> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::IntValue(i) => Some(*i as f64),
        any_value::Value::DoubleValue(d) => Some(*d),
        any_value::Value::StringValue(x) => x.parse().ok(),
        _ => None,
    }
}

/// The value of the first of `keys` present in `attrs`.
pub fn find<'a>(attrs: &'a [KeyValue], keys: &[&str]) -> Option<&'a Option<AnyValue>> {
    keys.iter()
        .find_map(|k| attrs.iter().find(|kv| kv.key == *k).map(|kv| &kv.value))
}

/// Resource attributes that name the machine a resource ran on, in order of
/// preference, for the join with host metrics. `k8s.node.name` comes first:
/// a pod enriched by a k8sattributes-style processor names its node, which
/// is what node-level metrics carry; `host.name` inside a pod is the pod's
/// name. Without any of them, `k8s.pod.name` and `service.instance.id` still
/// join metrics reported per pod or per instance.
pub const HOST_KEYS: [&str; 5] = [
    "k8s.node.name",
    "host.name",
    "host.id",
    "k8s.pod.name",
    "service.instance.id",
];

/// The host a resource ran on (see [`HOST_KEYS`]).
pub fn host_key(resource_attrs: &[KeyValue]) -> Option<String> {
    HOST_KEYS.iter().find_map(|k| {
        find(resource_attrs, &[k])
            .and_then(s)
            .filter(|v| !v.is_empty())
    })
}

/// Route keys, in order of preference.
pub const ROUTE_KEYS: [&str; 3] = ["route_id", "http.route", "gateway.route_id"];

/// What kind of metric point is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointKind {
    /// A gauge's or a sum's point.
    Number,
    /// A histogram's point (kept as its `_sum` and `_count`).
    Histogram,
    /// A summary's point (kept as a point per quantile).
    Summary,
}

/// A metric point offered to the evidence sources.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// The metric's name.
    pub metric: &'a str,
    /// What kind of point it is.
    pub kind: PointKind,
    /// Its resource's attributes.
    pub resource: &'a [KeyValue],
    /// Its own attributes.
    pub attrs: &'a [KeyValue],
}

/// How a source keeps a point it takes.
#[derive(Debug, Clone)]
pub struct Kept {
    /// The series' key.
    pub key: Key,
    /// Attributes not kept on the series (those the key holds).
    pub drop: &'static [&'static str],
    /// Attributes added to the series (from the resource, say).
    pub add: Vec<(String, String)>,
}

/// The machine a metric point describes, for the join with host metrics:
/// its resource's host (see [`HOST_KEYS`]), unless only
/// `service.instance.id` names it and the metric is not a `system.*` one
/// (a scraped target's instance is not a machine).
pub fn machine(resource: &[KeyValue], metric: &str) -> Option<String> {
    let host = host_key(resource)?;
    let instance_only = HOST_KEYS[..HOST_KEYS.len() - 1].iter().all(|k| {
        find(resource, &[k])
            .and_then(s)
            .is_none_or(|v| v.is_empty())
    });
    (!instance_only || metric.starts_with("system.")).then_some(host)
}

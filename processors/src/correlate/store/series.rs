//! Metric series, each under the key the evidence source that keeps it gave
//! it: at most `max_series` (the least recently updated leave first) of at
//! most `max_points` points, within the window.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, ResourceMetrics, Sum,
};
use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use super::{lock, Limits, Store};
use crate::correlate::model::series::{s, Kept, Offer, PointKind};
use crate::correlate::model::{LatestPoint, Series};

/// Who keeps a metric point, and under which key: the evidence sources,
/// asked in turn (`None`: no source keeps it; it passes on untouched).
pub type Classify<'a> = &'a dyn Fn(&Offer<'_>) -> Option<Kept>;

/// Metric name, key, other attributes.
type SeriesKey = (String, crate::correlate::model::Key, Vec<(String, String)>);

/// The series, in bounded memory.
pub struct SeriesSet {
    window_ns: u64,
    max_series: usize,
    max_points: usize,
    series: Mutex<HashMap<SeriesKey, Series>>,
}

impl SeriesSet {
    /// An empty set of the store's limits.
    pub fn new(limits: &Limits) -> Self {
        SeriesSet {
            window_ns: limits.window_ns,
            max_series: limits.max_series,
            max_points: limits.max_points,
            series: Mutex::new(HashMap::new()),
        }
    }

    /// Series matching `pick`, cloned.
    pub fn matching(&self, mut pick: impl FnMut(&Series) -> bool) -> Vec<Series> {
        lock(&self.series)
            .values()
            .filter(|s| pick(s))
            .cloned()
            .collect()
    }

    /// The latest point of every metric series: (name, dims, attributes, time ns, value).
    pub fn latest_points(&self) -> Vec<LatestPoint> {
        lock(&self.series)
            .values()
            .filter_map(|s| {
                let (t, v) = *s.points.back()?;
                Some((s.name.clone(), s.key.clone(), s.attrs.clone(), t, v))
            })
            .collect()
    }

    /// Whether any series has the dimension `dim` (a join on it that finds
    /// nothing then counts as a miss).
    pub fn any_with(&self, dim: &str) -> bool {
        lock(&self.series)
            .values()
            .any(|s| s.key.get(dim).is_some())
    }

    /// Series held.
    pub fn len(&self) -> usize {
        lock(&self.series).len()
    }

    /// Whether no series is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Take in the metric points a source keeps (`classify`), each under
    /// the key it gives. Histograms are kept as their `_sum` and `_count`,
    /// summaries as a point per quantile, when a source keeps them.
    pub fn add(
        &self,
        store: &Store,
        resource_metrics: &[ResourceMetrics],
        now_ns: u64,
        classify: Classify<'_>,
    ) {
        store.tick(now_ns);
        let mut g = lock(&self.series);
        for rm in resource_metrics {
            let resource = rm
                .resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or(&[]);
            for m in rm.scope_metrics.iter().flat_map(|sm| &sm.metrics) {
                let classify = |kind: PointKind, attrs: &[KeyValue]| {
                    classify(&Offer {
                        metric: &m.name,
                        kind,
                        resource,
                        attrs,
                    })
                };
                self.add_metric(&mut g, m, &classify, now_ns);
            }
        }
        let horizon = now_ns.saturating_sub(self.window_ns);
        g.retain(|_, s| s.updated >= horizon);
        if g.len() > self.max_series {
            let mut ages: Vec<u64> = g.values().map(|s| s.updated).collect();
            ages.sort_unstable();
            let cut = ages[g.len() - self.max_series];
            g.retain(|_, s| s.updated > cut);
        }
    }

    /// One metric's points the source keeps. A histogram: its sum and
    /// count, for a mean over an interval. A summary (redis_exporter's
    /// latency percentiles): each quantile as a point.
    fn add_metric(
        &self,
        g: &mut HashMap<SeriesKey, Series>,
        m: &Metric,
        classify: &dyn Fn(PointKind, &[KeyValue]) -> Option<Kept>,
        now_ns: u64,
    ) {
        let number = |p: &opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| match p.value {
            Some(number_data_point::Value::AsDouble(d)) => Some(d),
            Some(number_data_point::Value::AsInt(i)) => Some(i as f64),
            None => None,
        };
        match &m.data {
            Some(metric::Data::Gauge(Gauge { data_points }))
            | Some(metric::Data::Sum(Sum { data_points, .. })) => {
                for p in data_points {
                    if let (Some(v), Some(k)) =
                        (number(p), classify(PointKind::Number, &p.attributes))
                    {
                        let point = (p.time_unix_nano, v, p.flags);
                        self.keep(g, &m.name, &p.attributes, k, point, now_ns);
                    }
                }
            }
            Some(metric::Data::Histogram(x)) => {
                for p in &x.data_points {
                    let Some(k) = classify(PointKind::Histogram, &p.attributes) else {
                        continue;
                    };
                    let t = p.time_unix_nano;
                    let sum = format!("{}_sum", m.name);
                    let count = format!("{}_count", m.name);
                    self.keep(
                        g,
                        &sum,
                        &p.attributes,
                        k.clone(),
                        (t, p.sum.unwrap_or(0.0), p.flags),
                        now_ns,
                    );
                    self.keep(
                        g,
                        &count,
                        &p.attributes,
                        k,
                        (t, p.count as f64, p.flags),
                        now_ns,
                    );
                }
            }
            Some(metric::Data::Summary(x)) => {
                for p in &x.data_points {
                    let Some(k) = classify(PointKind::Summary, &p.attributes) else {
                        continue;
                    };
                    for q in &p.quantile_values {
                        let mut a = p.attributes.clone();
                        a.push(KeyValue {
                            key: "quantile".into(),
                            value: Some(AnyValue {
                                value: Some(any_value::Value::StringValue(format!(
                                    "{}",
                                    q.quantile
                                ))),
                            }),
                            ..Default::default()
                        });
                        self.keep(
                            g,
                            &m.name,
                            &a,
                            k.clone(),
                            (p.time_unix_nano, q.value, p.flags),
                            now_ns,
                        );
                    }
                }
            }
            _ => {}
        }
    }

    /// Add a point to the series of `name` under what `kept` says.
    fn keep(
        &self,
        g: &mut HashMap<SeriesKey, Series>,
        name: &str,
        attrs: &[KeyValue],
        kept: Kept,
        (time, v, flags): (u64, f64, u32),
        now_ns: u64,
    ) {
        // A staleness marker (no recorded value) is not a value.
        if flags & 1 != 0 || v.is_nan() || kept.key.is_empty() {
            return;
        }
        let mut attrs: Vec<(String, String)> = attrs
            .iter()
            .filter(|kv| !kept.drop.contains(&kv.key.as_str()))
            .filter_map(|kv| s(&kv.value).map(|v| (kv.key.clone(), v)))
            .collect();
        attrs.extend(kept.add);
        attrs.sort();
        let t = if time > 0 { time } else { now_ns };
        let key = (name.to_string(), kept.key, attrs);
        let max_points = self.max_points;
        let series = g
            .entry(key)
            .or_insert_with_key(|(name, key, attrs)| Series {
                name: name.clone(),
                key: key.clone(),
                attrs: attrs.clone(),
                points: VecDeque::new(),
                updated: now_ns,
            });
        series.points.push_back((t, v));
        series.updated = now_ns;
        while series.points.len() > max_points {
            series.points.pop_front();
        }
    }
}

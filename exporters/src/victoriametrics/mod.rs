//! The `victoriametrics` exporter: Prometheus remote write 1.0 to
//! `/api/v1/write`, snappy (default) or zstd (VictoriaMetrics' own variant).
//!
//! OTel → Prometheus as the OpenTelemetry compatibility spec describes and
//! Prometheus' OTLP translator implements ([`prom_name`], [`sanitize`]):
//! unit suffixes (`_seconds`, `_bytes`, …), `_total` for monotonic sums,
//! `_ratio` for gauges with unit `1`, histograms as `_bucket{le}` /
//! `_sum` / `_count`, summaries as `{quantile}` / `_sum` / `_count`, delta
//! temporality accumulated into cumulative series, resource attributes to
//! `job` / `instance` plus one `target_info` series. Labels are sorted and
//! unique; samples are ordered per series. 5xx and 429 are retried; other
//! answers are never resent.

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError, Duration, Validate};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, HistogramDataPoint, Metric, Sum,
};
use prost::Message;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::ExporterError;

/// Prometheus remote-write 1.0 messages.
pub mod proto {
    /// `prometheus.WriteRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        /// Series.
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }
    /// `prometheus.TimeSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        /// Labels, sorted by name.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        /// Samples, in time order.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
        /// Exemplars: a trace that contributed to the value.
        #[prost(message, repeated, tag = "3")]
        pub exemplars: Vec<Exemplar>,
    }
    /// `prometheus.Exemplar`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Exemplar {
        /// `trace_id`, `span_id` and the exemplar's filtered attributes.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        /// The measurement.
        #[prost(double, tag = "2")]
        pub value: f64,
        /// Milliseconds since the epoch.
        #[prost(int64, tag = "3")]
        pub timestamp: i64,
    }
    /// `prometheus.Label`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        /// Name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Value.
        #[prost(string, tag = "2")]
        pub value: String,
    }
    /// `prometheus.Sample`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        /// Value.
        #[prost(double, tag = "1")]
        pub value: f64,
        /// Milliseconds since the epoch.
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

/// `compression`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RwCompression {
    /// Prometheus remote write (snappy block).
    #[default]
    Snappy,
    /// VictoriaMetrics remote write protocol (zstd).
    Zstd,
}

causeway_core::exporter_config! {
    /// `exporters.victoriametrics`.
    #[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
    #[serde(deny_unknown_fields)]
    pub struct VictoriaMetricsConfig {
        /// The write URL, e.g. `http://victoriametrics:8428/api/v1/write` (a bare host gets the path appended).
        pub endpoint: String,
        /// `snappy` or `zstd`.
        #[serde(default)]
        pub compression: RwCompression,
        /// Add unit suffixes to names.
        #[serde(default = "yes")]
        pub add_unit_suffixes: bool,
        /// Send exemplars (a histogram's on the bucket its value falls in, a
        /// counter's on the counter), as Prometheus' OTLP translator does
        /// (Prometheus keeps them with `--enable-feature=exemplar-storage`).
        #[serde(default = "yes")]
        pub send_exemplars: bool,
        /// Send a `target_info` series with the resource attributes.
        #[serde(default = "yes")]
        pub target_info: bool,
    }
    timeout_default = "timeout", http
}

fn yes() -> bool {
    true
}
fn timeout() -> Duration {
    Duration::secs(5)
}

impl Validate for VictoriaMetricsConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = self.delivery_errors();
        e.extend(crate::http_util::endpoint_errors(&self.endpoint, &self.tls));
        e
    }
}

/// Factory of the `victoriametrics` exporter.
pub struct VictoriaMetricsExporterFactory;

#[async_trait]
impl ExporterFactory for VictoriaMetricsExporterFactory {
    fn kind(&self) -> &'static str {
        "victoriametrics"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Metrics)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<VictoriaMetricsConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<VictoriaMetricsConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        _ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: VictoriaMetricsConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let delivery = cfg.delivery();
        Ok(BuiltExporter {
            exporter: std::sync::Arc::new(VictoriaMetricsExporter::new(cfg)?),
            delivery,
        })
    }
}

/// The exporter.
pub struct VictoriaMetricsExporter {
    cfg: VictoriaMetricsConfig,
    url: String,
    client: reqwest::Client,
    /// Running totals of delta series, by series key.
    totals: Mutex<HashMap<String, f64>>,
    /// `compression: zstd`: 0 not asked yet, 1 the server speaks the
    /// VictoriaMetrics protocol, 2 it does not (snappy).
    vm_proto: AtomicU8,
    /// The server answered 400/415 to zstd.
    refused_zstd: AtomicBool,
}

/// Prometheus' staleness marker: a series that stopped (not a number a
/// query would ever return).
pub const STALE_NAN: f64 = f64::from_bits(0x7ff0_0000_0000_0002);

/// A point flagged `FLAG_NO_RECORDED_VALUE`: its series stopped (the
/// Collector's receivers set it when a target disappears). Sent as
/// [`STALE_NAN`], as the Collector's prometheusremotewrite exporter does.
fn no_recorded_value(flags: u32) -> bool {
    flags & 1 == 1
}

/// A Prometheus label name from an OTel attribute key, as Prometheus'
/// OTLP translator writes it (`otlptranslator.LabelNamer`, UTF-8 not
/// allowed): every run of characters outside `[a-zA-Z0-9]` becomes one
/// `_`, a reserved `__name__`-style key keeps its double underscores, and a
/// key starting with a digit gets `key_` in front.
pub fn sanitize(name: &str) -> String {
    let reserved = name.len() >= 4 && name.starts_with("__") && name.ends_with("__");
    let inner = if reserved {
        &name[2..name.len() - 2]
    } else {
        name
    };
    let mut out = String::with_capacity(name.len() + 4);
    if reserved {
        out.push_str("__");
    }
    let mut prev_underscore = false;
    for c in inner.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
            prev_underscore = false;
        } else if !prev_underscore {
            out.push('_');
            prev_underscore = true;
        }
    }
    if reserved {
        out.push_str("__");
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "key_");
    }
    out
}

/// The Prometheus word of a UCUM unit (the translator's `unitMap`); other
/// units stand for themselves. `1` has no word: it is no unit.
fn unit_word(unit: &str) -> &str {
    match unit {
        "d" => "days",
        "h" => "hours",
        "min" => "minutes",
        "s" => "seconds",
        "ms" => "milliseconds",
        "us" => "microseconds",
        "ns" => "nanoseconds",
        "By" => "bytes",
        "KiBy" => "kibibytes",
        "MiBy" => "mebibytes",
        "GiBy" => "gibibytes",
        "TiBy" => "tibibytes",
        "KBy" => "kilobytes",
        "MBy" => "megabytes",
        "GBy" => "gigabytes",
        "TBy" => "terabytes",
        "m" => "meters",
        "V" => "volts",
        "A" => "amperes",
        "J" => "joules",
        "W" => "watts",
        "g" => "grams",
        "Cel" => "celsius",
        "Hz" => "hertz",
        "1" => "",
        "%" => "percent",
        other => other,
    }
}

/// The word of the unit after `/` (the translator's `perUnitMap`).
fn per_unit_word(unit: &str) -> &str {
    match unit {
        "s" => "second",
        "m" => "minute",
        "h" => "hour",
        "d" => "day",
        "w" => "week",
        "mo" => "month",
        "y" => "year",
        other => other,
    }
}

/// A character a metric name keeps (the rest split it into words).
fn metric_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == ':'
}

/// A unit suffix made legal: characters outside `[a-zA-Z0-9:]` become
/// `_`, runs of `_` one, and a leading `_` goes.
fn clean_unit(unit: &str) -> String {
    let mut out = String::with_capacity(unit.len());
    for c in unit.chars() {
        let c = if metric_char(c) { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    match out.strip_prefix('_') {
        Some(rest) => rest.to_string(),
        None => out,
    }
}

/// The main and the per-unit suffix of a UCUM unit: `By/s` → (`bytes`,
/// `per_second`). Annotations (`{requests}`) are no unit.
fn unit_suffixes(unit: &str) -> (String, String) {
    let mut parts = unit.splitn(2, '/');
    let main = parts.next().unwrap_or("").trim();
    let main = if main.is_empty() || main.contains(['{', '}']) {
        String::new()
    } else {
        clean_unit(unit_word(main))
    };
    let per = match parts.next().map(str::trim) {
        Some(p) if !p.is_empty() && !p.contains(['{', '}']) => {
            clean_unit(&format!("per_{}", per_unit_word(p)))
        }
        _ => String::new(),
    };
    (main, per)
}

/// The Prometheus name of an OTel metric, rule for rule as Prometheus' OTLP
/// translator builds it with suffixes and without UTF-8
/// (`otlptranslator.MetricNamer`, which the Collector's
/// `prometheusremotewrite` exporter and Prometheus' OTLP endpoint share):
/// the name split into words at every character outside `[a-zA-Z0-9:]`;
/// the unit's word (`s` → `seconds`, `By/s` → `bytes` + `per_second`,
/// annotations such as `{requests}` dropped) appended unless the name
/// already has that word; `total` moved to the end of a monotonic sum;
/// `ratio` to the end of a gauge with unit `1` (a counter with unit `1`
/// gets no suffix for it); words joined by `_`; `_` in front of a leading
/// digit. With `add_units` false the unit is left out (`_total` stays).
pub fn prom_name(
    name: &str,
    unit: &str,
    monotonic_sum: bool,
    gauge: bool,
    add_units: bool,
) -> String {
    let mut words: Vec<String> = name
        .split(|c: char| !metric_char(c))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect();
    if add_units {
        let (mut main, mut per) = unit_suffixes(unit);
        if words.contains(&main) {
            main.clear();
        }
        if per == "per_" {
            per.clear();
        } else {
            per = per.trim_end_matches('_').to_string();
            if words.contains(&per) {
                per.clear();
            }
        }
        if !per.is_empty() {
            main = main.trim_end_matches('_').to_string();
        }
        for s in [main, per] {
            if !s.is_empty() {
                words.push(s);
            }
        }
    }
    if monotonic_sum {
        words.retain(|w| w != "total");
        words.push("total".into());
    }
    if add_units && gauge && unit == "1" {
        words.retain(|w| w != "ratio");
        words.push("ratio".into());
    }
    let mut n = words.join("_");
    if n.starts_with(|c: char| c.is_ascii_digit()) {
        n.insert(0, '_');
    }
    n
}

/// Attributes as labels. Keys that sanitize to the same label (`a.b` and
/// `a_b`) share it, their values joined by `;` in the order of the original
/// keys, as the Prometheus translator does, instead of one silently
/// replacing the other.
fn add_labels<'a>(l: &mut BTreeMap<String, String>, attrs: impl Iterator<Item = &'a KeyValue>) {
    let mut attrs: Vec<&KeyValue> = attrs.collect();
    attrs.sort_by(|a, b| a.key.cmp(&b.key));
    let mut from_attrs: BTreeMap<String, String> = BTreeMap::new();
    for kv in attrs {
        let value = attr_str(&kv.value);
        match from_attrs.entry(sanitize(&kv.key)) {
            std::collections::btree_map::Entry::Occupied(mut o) => {
                let v = o.get_mut();
                v.push(';');
                v.push_str(&value);
            }
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(value);
            }
        }
    }
    l.extend(from_attrs);
}

fn attr_str(v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(other) => serde_json::to_string(other).unwrap_or_default(),
        None => String::new(),
    }
}

/// Series under construction: sorted labels → samples and exemplars.
#[derive(Default)]
struct Series(BTreeMap<Vec<(String, String)>, SeriesData>);

/// A series' samples and exemplars.
type SeriesData = (Vec<proto::Sample>, Vec<proto::Exemplar>);

fn series_key(
    name: &str,
    base: &BTreeMap<String, String>,
    extra: &[(&str, String)],
) -> Vec<(String, String)> {
    let mut labels = base.clone();
    for (k, v) in extra {
        labels.insert((*k).to_string(), v.clone());
    }
    labels.insert("__name__".into(), name.to_string());
    labels.into_iter().collect()
}

impl Series {
    fn push(
        &mut self,
        name: &str,
        base: &BTreeMap<String, String>,
        extra: &[(&str, String)],
        value: f64,
        ts_ms: i64,
    ) {
        self.0
            .entry(series_key(name, base, extra))
            .or_default()
            .0
            .push(proto::Sample {
                value,
                timestamp: ts_ms,
            });
    }

    fn exemplar(
        &mut self,
        name: &str,
        base: &BTreeMap<String, String>,
        extra: &[(&str, String)],
        e: proto::Exemplar,
    ) {
        self.0
            .entry(series_key(name, base, extra))
            .or_default()
            .1
            .push(e);
    }
}

/// Prometheus refuses exemplars whose labels are longer than this (runes,
/// names and values together).
const EXEMPLAR_LABELS_MAX: usize = 128;

/// An OTLP exemplar as Prometheus' translator writes it: `trace_id` and
/// `span_id` in hex, then the filtered attributes while they fit.
fn exemplar(e: &opentelemetry_proto::tonic::metrics::v1::Exemplar) -> Option<proto::Exemplar> {
    use opentelemetry_proto::tonic::metrics::v1::exemplar::Value as V;
    let value = match e.value? {
        V::AsDouble(d) => d,
        V::AsInt(i) => i as f64,
    };
    let mut labels = Vec::new();
    let mut room = EXEMPLAR_LABELS_MAX;
    let mut add = |name: String, value: String| {
        let n = name.chars().count() + value.chars().count();
        if n <= room {
            room -= n;
            labels.push(proto::Label { name, value });
        }
    };
    if !e.trace_id.is_empty() {
        add("trace_id".into(), hex::encode(&e.trace_id));
    }
    if !e.span_id.is_empty() {
        add("span_id".into(), hex::encode(&e.span_id));
    }
    let mut attrs: Vec<_> = e.filtered_attributes.iter().collect();
    attrs.sort_by(|a, b| a.key.cmp(&b.key));
    for kv in attrs {
        add(sanitize(&kv.key), attr_str(&kv.value));
    }
    Some(proto::Exemplar {
        labels,
        value,
        timestamp: ms(e.time_unix_nano),
    })
}

fn ms(ns: u64) -> i64 {
    (ns / 1_000_000) as i64
}

impl VictoriaMetricsExporter {
    /// A new exporter.
    pub fn new(cfg: VictoriaMetricsConfig) -> Result<Self, ExporterError> {
        let url = if cfg.endpoint.contains("/api/v1/write") || cfg.endpoint.contains("/prometheus/")
        {
            cfg.endpoint.clone()
        } else {
            format!("{}/api/v1/write", cfg.endpoint.trim_end_matches('/'))
        };
        let client = crate::http_util::client(
            &cfg.endpoint,
            &cfg.tls,
            crate::http_util::Within::Connect(cfg.timeout.get()),
        )?;
        Ok(VictoriaMetricsExporter {
            cfg,
            url,
            client,
            totals: Mutex::new(HashMap::new()),
            vm_proto: AtomicU8::new(0),
            refused_zstd: AtomicBool::new(false),
        })
    }

    /// Accumulate a delta value into its running total.
    fn cumulative(&self, key: String, delta: f64) -> f64 {
        let mut t = match self.totals.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let v = t.entry(key).or_insert(0.0);
        *v += delta;
        *v
    }

    /// The remote-write request for a batch of metrics.
    pub fn write_request(
        &self,
        batch: &Batch,
    ) -> Result<proto::WriteRequest, causeway_core::CoreError> {
        let req = batch.to_metrics_request()?;
        let mut series = Series::default();
        for rm in &req.resource_metrics {
            let res: &[KeyValue] = rm
                .resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or(&[]);
            let get = |k: &str| {
                res.iter()
                    .find(|kv| kv.key == k)
                    .map(|kv| attr_str(&kv.value))
            };
            let job = match (get("service.namespace"), get("service.name")) {
                (Some(ns), Some(n)) => Some(format!("{ns}/{n}")),
                (None, Some(n)) => Some(n),
                _ => None,
            };
            let instance = get("service.instance.id");
            let mut base = Base::default();
            if let Some(j) = &job {
                base.labels.insert("job".to_string(), j.clone());
            }
            if let Some(i) = &instance {
                base.labels.insert("instance".to_string(), i.clone());
            }
            for m in rm.scope_metrics.iter().flat_map(|sm| &sm.metrics) {
                self.add_metric(m, &mut base, &mut series);
            }
            if self.cfg.target_info && (job.is_some() || instance.is_some()) {
                let mut l = base.labels.clone();
                add_labels(
                    &mut l,
                    res.iter().filter(|kv| {
                        !matches!(
                            kv.key.as_str(),
                            "service.name" | "service.namespace" | "service.instance.id"
                        )
                    }),
                );
                series.push("target_info", &l, &[], 1.0, base.latest_ms);
            }
        }
        Ok(proto::WriteRequest {
            timeseries: series
                .0
                .into_iter()
                .map(|(labels, (mut samples, exemplars))| {
                    samples.sort_by_key(|s| s.timestamp);
                    proto::TimeSeries {
                        labels: labels
                            .into_iter()
                            .map(|(name, value)| proto::Label { name, value })
                            .collect(),
                        samples,
                        exemplars,
                    }
                })
                .collect(),
        })
    }

    /// One metric's series.
    fn add_metric(&self, m: &Metric, base: &mut Base, series: &mut Series) {
        let Some(data) = &m.data else { return };
        let add_units = self.cfg.add_unit_suffixes;
        match data {
            metric::Data::Gauge(g) => {
                let name = prom_name(&m.name, &m.unit, false, true, add_units);
                for p in &g.data_points {
                    let v = match p.value {
                        _ if no_recorded_value(p.flags) => STALE_NAN,
                        Some(number_data_point::Value::AsDouble(d)) => d,
                        Some(number_data_point::Value::AsInt(i)) => i as f64,
                        None => continue,
                    };
                    let ts = base.seen(p.time_unix_nano);
                    series.push(&name, &base.labels_of(&p.attributes), &[], v, ts);
                }
            }
            metric::Data::Sum(s) => {
                // An up-down counter is no gauge: unit `1` gives it no `_ratio`.
                let name = prom_name(&m.name, &m.unit, s.is_monotonic, false, add_units);
                self.sum(&name, s, base, series);
            }
            metric::Data::Histogram(h) => {
                let name = prom_name(&m.name, &m.unit, false, false, add_units);
                for p in &h.data_points {
                    self.histogram_point(&name, h.aggregation_temporality, p, base, series);
                }
            }
            metric::Data::Summary(s) => {
                let name = prom_name(&m.name, &m.unit, false, false, add_units);
                for p in &s.data_points {
                    let l = base.labels_of(&p.attributes);
                    let ts = base.seen(p.time_unix_nano);
                    for q in &p.quantile_values {
                        let quantile = [("quantile", q.quantile.to_string())];
                        series.push(&name, &l, &quantile, q.value, ts);
                    }
                    series.push(&format!("{name}_sum"), &l, &[], p.sum, ts);
                    series.push(&format!("{name}_count"), &l, &[], p.count as f64, ts);
                }
            }
            metric::Data::ExponentialHistogram(_) => {
                tracing::debug!(metric = %m.name, "Exponential histograms are not sent by remote write 1.0; skipped.");
            }
        }
    }

    /// A sum's series: a delta's points accumulated into running totals.
    fn sum(&self, name: &str, s: &Sum, base: &mut Base, series: &mut Series) {
        let delta = s.aggregation_temporality == AggregationTemporality::Delta as i32;
        for p in &s.data_points {
            let stale = no_recorded_value(p.flags);
            let v = match p.value {
                _ if stale => STALE_NAN,
                Some(number_data_point::Value::AsDouble(d)) => d,
                Some(number_data_point::Value::AsInt(i)) => i as f64,
                None => continue,
            };
            let l = base.labels_of(&p.attributes);
            let v = if delta && !stale {
                self.cumulative(key_of(name, &l, ""), v)
            } else {
                v
            };
            let ts = base.seen(p.time_unix_nano);
            series.push(name, &l, &[], v, ts);
            if s.is_monotonic && self.cfg.send_exemplars {
                for e in p.exemplars.iter().filter_map(exemplar) {
                    series.exemplar(name, &l, &[], e);
                }
            }
        }
    }

    /// A histogram point's series: cumulative buckets by `le`, each
    /// exemplar on the bucket its value falls in, `_sum` and `_count`; a
    /// delta's accumulated.
    fn histogram_point(
        &self,
        name: &str,
        temporality: i32,
        p: &HistogramDataPoint,
        base: &mut Base,
        series: &mut Series,
    ) {
        let delta = temporality == AggregationTemporality::Delta as i32;
        let l = base.labels_of(&p.attributes);
        let ts = base.seen(p.time_unix_nano);
        let acc = |extra: &str, v: f64| {
            if delta {
                self.cumulative(key_of(name, &l, extra), v)
            } else {
                v
            }
        };
        let bucket = format!("{name}_bucket");
        let mut cum = 0u64;
        for (i, c) in p.bucket_counts.iter().enumerate() {
            cum += c;
            let le = p
                .explicit_bounds
                .get(i)
                .map(|b| b.to_string())
                .unwrap_or_else(|| "+Inf".into());
            let v = acc(&le, cum as f64);
            series.push(&bucket, &l, &[("le", le)], v, ts);
        }
        if p.bucket_counts.is_empty() {
            let v = acc("+Inf", p.count as f64);
            series.push(&bucket, &l, &[("le", "+Inf".into())], v, ts);
        }
        if self.cfg.send_exemplars {
            for e in p.exemplars.iter().filter_map(exemplar) {
                let le = p
                    .explicit_bounds
                    .iter()
                    .find(|b| e.value <= **b)
                    .map(|b| b.to_string())
                    .unwrap_or_else(|| "+Inf".into());
                series.exemplar(&bucket, &l, &[("le", le)], e);
            }
        }
        if let Some(sum) = p.sum {
            let v = acc("_sum", sum);
            series.push(&format!("{name}_sum"), &l, &[], v, ts);
        }
        let v = acc("_count", p.count as f64);
        series.push(&format!("{name}_count"), &l, &[], v, ts);
    }
}

/// One resource's labels (`job`, `instance`) and the latest time of its
/// points (`target_info`'s).
#[derive(Default)]
struct Base {
    labels: BTreeMap<String, String>,
    latest_ms: i64,
}

impl Base {
    /// The resource's labels with a point's attributes.
    fn labels_of(&self, attrs: &[KeyValue]) -> BTreeMap<String, String> {
        let mut l = self.labels.clone();
        add_labels(&mut l, attrs.iter());
        l
    }

    /// A point's time (ms), remembered as the latest if it is.
    fn seen(&mut self, time_unix_nano: u64) -> i64 {
        let t = ms(time_unix_nano);
        self.latest_ms = self.latest_ms.max(t);
        t
    }
}

/// The running total's key of a delta series (name, labels, and the
/// bucket's or part's suffix).
fn key_of(name: &str, l: &BTreeMap<String, String>, extra: &str) -> String {
    format!("{name}{l:?}{extra}")
}

#[async_trait]
impl Exporter for VictoriaMetricsExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let permanent = |e: ExporterError| ExportError::Permanent {
            source: Box::new(e),
        };
        let req = self
            .write_request(batch)
            .map_err(|e| permanent(ExporterError::Encode(e.to_string())))?;
        if req.timeseries.is_empty() {
            return Ok(Delivered::default());
        }
        let raw = req.encode_to_vec();
        let zstd = self.cfg.compression == RwCompression::Zstd && self.speaks_vm_protocol().await;
        let r = self.send(&raw, zstd).await;
        match r {
            // A server that does not take zstd after all (a proxy in front, a
            // downgrade): the same request in snappy, and snappy from now on.
            Err(ExportError::Permanent { .. })
                if zstd && self.refused_zstd.load(Ordering::Relaxed) =>
            {
                self.send(&raw, false).await
            }
            r => r,
        }
    }
}

impl VictoriaMetricsExporter {
    /// Whether the server speaks the VictoriaMetrics remote write protocol
    /// (zstd), asked once as vmagent does: `GET <url>?get_vm_proto_version=1`
    /// answers `1` (VictoriaMetrics ≥ 1.82); anything else (Prometheus, an
    /// older VictoriaMetrics: `snappy: corrupt input` on zstd) means snappy.
    async fn speaks_vm_protocol(&self) -> bool {
        match self.vm_proto.load(Ordering::Relaxed) {
            1 => return true,
            2 => return false,
            _ => {}
        }
        let sep = if self.url.contains('?') { '&' } else { '?' };
        let mut r = self
            .client
            .get(format!("{}{sep}get_vm_proto_version=1", self.url));
        for (k, v) in &self.cfg.headers {
            r = r.header(k.as_str(), v.expose());
        }
        let answer = match r.timeout(self.cfg.timeout.get()).send().await {
            Ok(resp) if resp.status().is_success() => resp.text().await.ok(),
            Ok(_) => None,
            // Unreachable now: ask again with the next batch (snappy meanwhile).
            Err(_) => return false,
        };
        let yes = answer
            .and_then(|t| t.trim().parse::<u32>().ok())
            .is_some_and(|v| v >= 1);
        if !yes {
            tracing::warn!(endpoint = %self.url, "compression: zstd asked, but the server does not speak the VictoriaMetrics remote write protocol (get_vm_proto_version); sending snappy.");
        }
        self.vm_proto
            .store(if yes { 1 } else { 2 }, Ordering::Relaxed);
        yes
    }

    async fn send(&self, raw: &[u8], zstd: bool) -> Result<Delivered, ExportError> {
        let permanent = |e: ExporterError| ExportError::Permanent {
            source: Box::new(e),
        };
        let (body, encoding) = match zstd {
            false => (
                snap::raw::Encoder::new()
                    .compress_vec(raw)
                    .map_err(|e| permanent(ExporterError::Encode(e.to_string())))?,
                "snappy",
            ),
            true => (
                zstd::bulk::compress(raw, 0)
                    .map_err(|e| permanent(ExporterError::Encode(e.to_string())))?,
                "zstd",
            ),
        };
        let mut r = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/x-protobuf")
            .header(reqwest::header::CONTENT_ENCODING, encoding)
            .header("X-Prometheus-Remote-Write-Version", "0.1.0");
        for (k, v) in &self.cfg.headers {
            r = r.header(k.as_str(), v.expose());
        }
        let answer = crate::http_util::send(r.body(body), &self.url).await?;
        if answer.status.is_success() {
            return Ok(Delivered::default());
        }
        if zstd && matches!(answer.status.as_u16(), 400 | 415) {
            // As vmagent: a 400 or 415 to zstd means the server cannot read it.
            tracing::warn!(endpoint = %self.url, status = %answer.status, "The server refused zstd; sending snappy from now on.");
            self.vm_proto.store(2, Ordering::Relaxed);
            self.refused_zstd.store(true, Ordering::Relaxed);
        }
        Err(answer.error(&self.url, &[]))
    }
}

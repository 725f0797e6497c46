//! The `loki` exporter: Grafana Loki's push API (`/loki/api/v1/push`), as
//! snappy-compressed protobuf (default) or JSON (optionally gzip).
//!
//! - Stream labels come from a small configured set of resource and record
//!   attributes (default `service_name`, `route_id`, `level`). A label that
//!   exceeds `max_label_values` distinct values is moved to structured
//!   metadata from then on, and counted, so one bad label cannot explode the
//!   stream count.
//! - `trace_id`, `span_id` and every other attribute go to structured
//!   metadata, so `{service_name="gw"} | trace_id="…"` finds a trace's logs.
//! - Timestamps are nanoseconds, ordered and unique per stream (equal
//!   timestamps are nudged by 1 ns).
//! - 429 and 5xx are retried with backoff. A 400 is never resent: Loki has
//!   accepted the valid entries; the rejected ones are logged and counted.

pub mod config;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Registry;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use prost::Message;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::sync::Mutex;

use crate::ExporterError;
use config::{LokiConfig, LokiEncoding};

/// Labels moved to structured metadata by the cardinality guard.
pub const LABELS_DEMOTED: &str = "causeway_loki_labels_demoted_total";

/// `logproto` messages of Loki's push API.
pub mod proto {
    /// `logproto.PushRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PushRequest {
        /// Streams.
        #[prost(message, repeated, tag = "1")]
        pub streams: Vec<StreamAdapter>,
    }
    /// `logproto.StreamAdapter`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct StreamAdapter {
        /// `{name="value", …}`.
        #[prost(string, tag = "1")]
        pub labels: String,
        /// Entries.
        #[prost(message, repeated, tag = "2")]
        pub entries: Vec<EntryAdapter>,
        /// Unused by clients.
        #[prost(uint64, tag = "3")]
        pub hash: u64,
    }
    /// `logproto.EntryAdapter`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct EntryAdapter {
        /// Timestamp.
        #[prost(message, optional, tag = "1")]
        pub timestamp: Option<Timestamp>,
        /// The line.
        #[prost(string, tag = "2")]
        pub line: String,
        /// Structured metadata.
        #[prost(message, repeated, tag = "3")]
        pub structured_metadata: Vec<LabelPairAdapter>,
    }
    /// `logproto.LabelPairAdapter`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct LabelPairAdapter {
        /// Name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Value.
        #[prost(string, tag = "2")]
        pub value: String,
    }
    /// `google.protobuf.Timestamp`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Timestamp {
        /// Seconds.
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        /// Nanoseconds.
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }
}

/// Factory of the `loki` exporter.
pub struct LokiExporterFactory;

#[async_trait]
impl ExporterFactory for LokiExporterFactory {
    fn kind(&self) -> &'static str {
        "loki"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Logs)
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<LokiConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: LokiConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let delivery = cfg.delivery();
        Ok(BuiltExporter {
            exporter: std::sync::Arc::new(LokiExporter::new(
                cfg,
                &ctx.id.to_string(),
                ctx.telemetry.clone(),
            )?),
            delivery,
        })
    }
}

#[derive(Default)]
struct Guard {
    values: HashMap<String, HashSet<String>>,
    demoted: HashSet<String>,
}

#[derive(Default)]
struct LastTs {
    by_stream: HashMap<String, u64>,
    order: VecDeque<String>,
}

/// Streams by label string: their labels and entries.
pub type Streams = BTreeMap<String, (BTreeMap<String, String>, Vec<Entry>)>;

/// One entry before encoding.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Nanoseconds since the epoch.
    pub ts: u64,
    /// The line.
    pub line: String,
    /// Structured metadata.
    pub meta: Vec<(String, String)>,
}

/// The exporter.
pub struct LokiExporter {
    cfg: LokiConfig,
    url: String,
    client: reqwest::Client,
    id: String,
    telemetry: Registry,
    guard: Mutex<Guard>,
    last: Mutex<LastTs>,
}

fn any_to_string(v: &AnyValue) -> String {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::BytesValue(b)) => hex::encode(b),
        Some(other) => serde_json::to_string(other).unwrap_or_default(),
        None => String::new(),
    }
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
}

/// The `level` label of a record.
fn level(severity_text: &str, severity_number: i32) -> String {
    if !severity_text.is_empty() {
        return severity_text.to_ascii_lowercase();
    }
    match severity_number {
        1..=4 => "trace",
        5..=8 => "debug",
        9..=12 => "info",
        13..=16 => "warn",
        17..=20 => "error",
        21..=24 => "fatal",
        _ => "unknown",
    }
    .into()
}

/// `{a="x", b="y"}` with Loki's escaping, names sorted.
pub fn label_string(labels: &BTreeMap<String, String>) -> String {
    write_labels(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())))
}

/// [`label_string`] of labels already in name order, written in one buffer.
fn write_labels<'a>(labels: impl Iterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::with_capacity(64);
    out.push('{');
    for (i, (k, v)) in labels.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(k);
        out.push_str("=\"");
        for c in v.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push('}');
    out
}

/// Set `label` to `value` in a small name-ordered list (a later value wins).
fn set_label(labels: &mut Vec<(String, String)>, label: &str, value: String) {
    match labels.binary_search_by(|(k, _)| k.as_str().cmp(label)) {
        Ok(i) => labels[i].1 = value,
        Err(i) => labels.insert(i, (label.to_string(), value)),
    }
}

impl LokiExporter {
    /// A new exporter.
    pub fn new(cfg: LokiConfig, id: &str, telemetry: Registry) -> Result<Self, ExporterError> {
        let url = if cfg
            .endpoint
            .trim_end_matches('/')
            .ends_with("/loki/api/v1/push")
        {
            cfg.endpoint.clone()
        } else {
            format!("{}/loki/api/v1/push", cfg.endpoint.trim_end_matches('/'))
        };
        let client = crate::http_util::client(
            &cfg.endpoint,
            &cfg.tls,
            crate::http_util::Within::Connect(cfg.timeout.get()),
        )?;
        Ok(LokiExporter {
            cfg,
            url,
            client,
            id: id.to_string(),
            telemetry,
            guard: Mutex::new(Guard::default()),
            last: Mutex::new(LastTs::default()),
        })
    }

    /// Group a batch's records into streams (label string → labels, entries),
    /// applying the cardinality guard and making timestamps unique per stream.
    pub fn streams(&self, batch: &Batch) -> Result<Streams, causeway_core::CoreError> {
        let req = batch.to_logs_request()?;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut out: Streams = BTreeMap::new();
        let mut guard = match self.guard.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for rl in &req.resource_logs {
            let res_attrs: &[KeyValue] = rl
                .resource
                .as_ref()
                .map(|r| r.attributes.as_slice())
                .unwrap_or(&[]);
            // Labels from the resource: once for all its records.
            let resource_candidates: Vec<(&str, String)> = self
                .cfg
                .labels
                .resource
                .iter()
                .filter_map(|(attr_key, label)| {
                    attr(res_attrs, attr_key).map(|v| (label.as_str(), any_to_string(v)))
                })
                .collect();
            for sl in &rl.scope_logs {
                for r in &sl.log_records {
                    let mut labels: Vec<(String, String)> = Vec::new();
                    let mut meta = Vec::new();
                    let mut used: Vec<&str> = Vec::new();
                    let mut candidates: Vec<(&str, String)> = resource_candidates.clone();
                    for (attr_key, label) in &self.cfg.labels.attributes {
                        if let Some(v) = attr(&r.attributes, attr_key) {
                            candidates.push((label.as_str(), any_to_string(v)));
                            used.push(attr_key.as_str());
                        }
                    }
                    let level_label = self
                        .cfg
                        .labels
                        .level
                        .then(|| level(&r.severity_text, r.severity_number));
                    if let Some(l) = level_label {
                        candidates.push(("level", l));
                    }
                    for (label, value) in candidates {
                        if guard.demoted.contains(label) {
                            meta.push((label.to_string(), value));
                            continue;
                        }
                        let seen = match guard.values.get_mut(label) {
                            Some(seen) => seen,
                            None => guard.values.entry(label.to_string()).or_default(),
                        };
                        if !seen.contains(&value) {
                            if seen.len() >= self.cfg.max_label_values {
                                guard.demoted.insert(label.to_string());
                                guard.values.remove(label);
                                self.telemetry
                                    .counter(LABELS_DEMOTED, "Loki labels moved to structured metadata by the cardinality guard.", &[("component", &self.id), ("label", label)])
                                    .add(1);
                                tracing::warn!(exporter = %self.id, label = %label, max = self.cfg.max_label_values, "Label has too many values; sending it as structured metadata from now on.");
                                meta.push((label.to_string(), value));
                                continue;
                            }
                            seen.insert(value.clone());
                        }
                        set_label(&mut labels, label, value);
                    }
                    if !r.trace_id.is_empty() {
                        meta.push(("trace_id".into(), hex::encode(&r.trace_id)));
                    }
                    if !r.span_id.is_empty() {
                        meta.push(("span_id".into(), hex::encode(&r.span_id)));
                    }
                    for kv in &r.attributes {
                        if used.contains(&kv.key.as_str()) {
                            continue;
                        }
                        if let Some(v) = &kv.value {
                            meta.push((kv.key.replace('.', "_"), any_to_string(v)));
                        }
                    }
                    let ts = [r.time_unix_nano, r.observed_time_unix_nano, now]
                        .into_iter()
                        .find(|t| *t > 0)
                        .unwrap_or(now);
                    let line = r.body.as_ref().map(any_to_string).unwrap_or_default();
                    let key = write_labels(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                    out.entry(key)
                        .or_insert_with(|| (labels.into_iter().collect(), Vec::new()))
                        .1
                        .push(Entry { ts, line, meta });
                }
            }
        }
        drop(guard);
        let mut last = match self.last.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        for (key, (_, entries)) in out.iter_mut() {
            entries.sort_by_key(|e| e.ts);
            let mut prev = last.by_stream.get(key).copied().unwrap_or(0);
            for e in entries.iter_mut() {
                if e.ts <= prev && prev - e.ts < 1_000 {
                    // Equal (or within 1µs behind, from a nudge): keep them unique and ordered.
                    e.ts = prev + 1;
                }
                prev = prev.max(e.ts);
            }
            if last.by_stream.insert(key.clone(), prev).is_none() {
                last.order.push_back(key.clone());
                while last.order.len() > 100_000 {
                    if let Some(old) = last.order.pop_front() {
                        last.by_stream.remove(&old);
                    }
                }
            }
        }
        Ok(out)
    }

    /// The encoded request body and its `Content-Encoding`.
    pub fn body(&self, streams: Streams) -> Result<(Vec<u8>, Option<&'static str>), ExporterError> {
        match self.cfg.encoding {
            LokiEncoding::Protobuf => {
                let req = proto::PushRequest {
                    streams: streams
                        .into_iter()
                        .map(|(labels, (_, entries))| proto::StreamAdapter {
                            labels,
                            entries: entries
                                .into_iter()
                                .map(|e| proto::EntryAdapter {
                                    timestamp: Some(proto::Timestamp {
                                        seconds: (e.ts / 1_000_000_000) as i64,
                                        nanos: (e.ts % 1_000_000_000) as i32,
                                    }),
                                    line: e.line,
                                    structured_metadata: e
                                        .meta
                                        .into_iter()
                                        .map(|(name, value)| proto::LabelPairAdapter {
                                            name,
                                            value,
                                        })
                                        .collect(),
                                })
                                .collect(),
                            hash: 0,
                        })
                        .collect(),
                };
                let raw = req.encode_to_vec();
                let compressed = snap::raw::Encoder::new()
                    .compress_vec(&raw)
                    .map_err(|e| ExporterError::Encode(e.to_string()))?;
                Ok((compressed, Some("snappy")))
            }
            LokiEncoding::Json => {
                let streams: Vec<serde_json::Value> = streams
                    .into_values()
                    .map(|(labels, entries)| {
                        let values: Vec<serde_json::Value> = entries
                            .into_iter()
                            .map(|e| {
                                let meta: serde_json::Map<String, serde_json::Value> = e
                                    .meta
                                    .into_iter()
                                    .map(|(k, v)| (k, serde_json::Value::String(v)))
                                    .collect();
                                serde_json::json!([e.ts.to_string(), e.line, meta])
                            })
                            .collect();
                        serde_json::json!({"stream": labels, "values": values})
                    })
                    .collect();
                let raw = serde_json::to_vec(&serde_json::json!({ "streams": streams }))
                    .map_err(|e| ExporterError::Encode(e.to_string()))?;
                if self.cfg.compression.as_deref() == Some("gzip") {
                    let mut enc =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    enc.write_all(&raw)
                        .map_err(|e| ExporterError::Encode(e.to_string()))?;
                    Ok((
                        enc.finish()
                            .map_err(|e| ExporterError::Encode(e.to_string()))?,
                        Some("gzip"),
                    ))
                } else {
                    Ok((raw, None))
                }
            }
        }
    }
}

/// "total ignored: 2 out of 4" in a Loki 400 body: how many entries it rejected.
fn ignored(body: &str) -> Option<u64> {
    let i = body.find("total ignored: ")?;
    body[i + "total ignored: ".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[async_trait]
impl Exporter for LokiExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let permanent = |e: ExporterError| ExportError::Permanent {
            source: Box::new(e),
        };
        let streams = self
            .streams(batch)
            .map_err(|e| permanent(ExporterError::Encode(e.to_string())))?;
        if streams.is_empty() {
            return Ok(Delivered::default());
        }
        let (body, encoding) = self.body(streams).map_err(permanent)?;
        let content_type = match self.cfg.encoding {
            LokiEncoding::Protobuf => "application/x-protobuf",
            LokiEncoding::Json => "application/json",
        };
        let mut req = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, content_type);
        if let Some(enc) = encoding {
            req = req.header(reqwest::header::CONTENT_ENCODING, enc);
        }
        if let Some(t) = &self.cfg.tenant_id {
            req = req.header("X-Scope-OrgID", t);
        }
        for (k, v) in &self.cfg.headers {
            req = req.header(k.as_str(), v.expose());
        }
        let answer = crate::http_util::send(req.body(body), &self.url).await?;
        if answer.status.is_success() {
            return Ok(Delivered::default());
        }
        if answer.status.as_u16() == 400 {
            if let Some(n) = ignored(&answer.text) {
                // Loki kept the valid entries: never resend the batch.
                let reason = answer.server_error(&self.url);
                tracing::warn!(exporter = %self.id, rejected = n, %reason, "Loki rejected some entries; the rest were accepted.");
                return Ok(Delivered { rejected: n });
            }
        }
        Err(answer.error(&self.url, &[]))
    }
}

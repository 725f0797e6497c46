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
use bytes::Bytes;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Registry;
use causeway_core::wire::{
    len_field_size, put_len_prefix, put_varint, varint_len, Field, Fields, Value, WireError,
};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use prost::Message;
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::io::Write;
use std::sync::Mutex;

use crate::ExporterError;
use config::{LokiConfig, LokiEncoding};

causeway_core::metrics! {
    /// Loki labels moved to structured metadata by the cardinality guard.
    pub LabelsDemoted: counter = "causeway_loki_labels_demoted_total";
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
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<LokiConfig>()
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

/// Maps hashed with foldhash (per-process random seeds): SipHash was a
/// tenth of the exporter's time.
type Hasher = foldhash::fast::RandomState;

#[derive(Default)]
struct Guard {
    values: HashMap<String, HashSet<String, Hasher>, Hasher>,
    demoted: HashSet<String, Hasher>,
}

#[derive(Default)]
struct LastTs {
    by_stream: HashMap<String, u64, Hasher>,
    order: VecDeque<String>,
}

/// Streams by label string: their labels and entries.
pub type Streams<'a> = BTreeMap<String, (BTreeMap<String, String>, Vec<Entry<'a>>)>;

/// One entry before encoding (its strings borrowed from the batch where
/// they can be).
#[derive(Debug, Clone, PartialEq)]
pub struct Entry<'a> {
    /// Nanoseconds since the epoch.
    pub ts: u64,
    /// The line.
    pub line: Cow<'a, str>,
    /// Structured metadata.
    pub meta: Vec<(Cow<'a, str>, Cow<'a, str>)>,
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

/// An attribute as encoded: its key, and its `AnyValue`'s payload (none
/// when the `KeyValue` has no value).
#[derive(Debug, Clone, Copy)]
struct Attr<'a> {
    key: &'a str,
    value: Option<&'a [u8]>,
}

/// The value of the first attribute named `key` (as `attr` of a decoded
/// record finds it).
fn find<'a>(attrs: &[Attr<'a>], key: &str) -> Option<&'a [u8]> {
    attrs.iter().find(|a| a.key == key).and_then(|a| a.value)
}

/// A string field (checked UTF-8 by the receiver: the check here is the
/// fast one, the lossy copy only for what was never checked).
fn utf8(b: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}

/// Bytes (an id) in lowercase hex.
fn hex_string(b: &[u8]) -> String {
    let mut out = vec![0u8; b.len() * 2];
    match hex::encode_to_slice(b, &mut out) {
        Ok(()) => String::from_utf8(out).unwrap_or_default(),
        Err(_) => hex::encode(b),
    }
}

/// The payloads of the length-delimited fields numbered `want`.
fn fields_of(buf: &[u8], want: u32) -> impl Iterator<Item = Result<&[u8], WireError>> {
    Fields::new(buf).filter_map(move |f| match f {
        Ok(f) if f.number == want => f.value.bytes().map(Ok),
        Ok(_) => None,
        Err(e) => Some(Err(e)),
    })
}

/// A `KeyValue` payload (the last of a repeated field wins, as in a decoder).
fn key_value(kv: &[u8]) -> Result<Attr<'_>, WireError> {
    let mut a = Attr {
        key: "",
        value: None,
    };
    for f in Fields::new(kv) {
        match f? {
            Field {
                number: 1,
                value: Value::Bytes(k),
                ..
            } => {
                a.key = std::str::from_utf8(k).map_err(|_| WireError {
                    offset: 0,
                    reason: "an attribute key is not UTF-8",
                })?
            }
            Field {
                number: 2,
                value: Value::Bytes(v),
                ..
            } => a.value = Some(v),
            _ => {}
        }
    }
    Ok(a)
}

/// An `AnyValue` payload as the line or a label's value: a string as it is
/// (borrowed), a number or a boolean as Rust writes it, bytes in hex, an
/// array or a key-value list as JSON; empty when unset.
fn any_str(v: &[u8]) -> Result<Cow<'_, str>, WireError> {
    let mut out = Cow::Borrowed("");
    for f in Fields::new(v) {
        let f = f?;
        out = match (f.number, f.value) {
            (1, Value::Bytes(s)) => utf8(s),
            (2, Value::Varint(b)) => Cow::Borrowed(if b != 0 { "true" } else { "false" }),
            (3, Value::Varint(i)) => Cow::Owned((i as i64).to_string()),
            (4, Value::Fixed64(d)) => Cow::Owned(f64::from_bits(d).to_string()),
            (7, Value::Bytes(b)) => Cow::Owned(hex_string(b)),
            // An array or a key-value list: written as its JSON.
            (5 | 6, Value::Bytes(_)) => {
                let any = AnyValue::decode(v).map_err(|_| WireError {
                    offset: 0,
                    reason: "an array or key-value list does not decode",
                })?;
                Cow::Owned(any_to_string(&any))
            }
            _ => continue,
        };
    }
    Ok(out)
}

/// What a log record gives an entry (its attributes read into a buffer).
struct Record<'a> {
    time: u64,
    observed_time: u64,
    severity_number: i32,
    severity_text: &'a str,
    body: Option<&'a [u8]>,
    trace_id: &'a [u8],
    span_id: &'a [u8],
}

impl<'a> Record<'a> {
    /// A `LogRecord` payload; its attributes into `attrs`.
    fn read(r: &'a [u8], attrs: &mut Vec<Attr<'a>>) -> Result<Self, WireError> {
        attrs.clear();
        let mut rec = Record {
            time: 0,
            observed_time: 0,
            severity_number: 0,
            severity_text: "",
            body: None,
            trace_id: &[],
            span_id: &[],
        };
        for f in Fields::new(r) {
            let f = f?;
            match (f.number, f.value) {
                (1, Value::Fixed64(t)) => rec.time = t,
                (11, Value::Fixed64(t)) => rec.observed_time = t,
                (2, Value::Varint(n)) => rec.severity_number = n as i32,
                (3, Value::Bytes(t)) => {
                    rec.severity_text = std::str::from_utf8(t).unwrap_or_default()
                }
                (5, Value::Bytes(b)) => rec.body = Some(b),
                (6, Value::Bytes(kv)) => attrs.push(key_value(kv)?),
                (9, Value::Bytes(t)) => rec.trace_id = t,
                (10, Value::Bytes(s)) => rec.span_id = s,
                _ => {}
            }
        }
        Ok(rec)
    }
}

/// `logproto.PushRequest` of the streams, written directly.
fn push_request(streams: &Streams<'_>) -> Vec<u8> {
    // Empty strings are left out, as a protobuf encoder leaves them.
    fn str_len(s: &str) -> usize {
        if s.is_empty() {
            0
        } else {
            len_field_size(s.len())
        }
    }
    fn pair_len(name: &str, value: &str) -> usize {
        str_len(name) + str_len(value)
    }
    fn timestamp_len(ts: u64) -> usize {
        let (secs, nanos) = (ts / 1_000_000_000, ts % 1_000_000_000);
        (if secs > 0 { 1 + varint_len(secs) } else { 0 })
            + if nanos > 0 { 1 + varint_len(nanos) } else { 0 }
    }
    fn entry_len(e: &Entry<'_>) -> usize {
        len_field_size(timestamp_len(e.ts))
            + str_len(&e.line)
            + e.meta
                .iter()
                .map(|(k, v)| len_field_size(pair_len(k, v)))
                .sum::<usize>()
    }
    fn stream_len(labels: &str, entries: &[Entry<'_>]) -> usize {
        str_len(labels)
            + entries
                .iter()
                .map(|e| len_field_size(entry_len(e)))
                .sum::<usize>()
    }
    fn put_str(out: &mut Vec<u8>, field: u32, s: &str) {
        if !s.is_empty() {
            put_len_prefix(out, field, s.len());
            out.extend_from_slice(s.as_bytes());
        }
    }
    let total: usize = streams
        .iter()
        .map(|(labels, (_, entries))| len_field_size(stream_len(labels, entries)))
        .sum();
    let mut out = Vec::with_capacity(total);
    for (labels, (_, entries)) in streams {
        // PushRequest.streams = 1
        put_len_prefix(&mut out, 1, stream_len(labels, entries));
        // StreamAdapter.labels = 1, entries = 2
        put_str(&mut out, 1, labels);
        for e in entries {
            put_len_prefix(&mut out, 2, entry_len(e));
            // EntryAdapter.timestamp = 1 {seconds = 1, nanos = 2}
            let (secs, nanos) = (e.ts / 1_000_000_000, e.ts % 1_000_000_000);
            put_len_prefix(&mut out, 1, timestamp_len(e.ts));
            if secs > 0 {
                out.push(0x08);
                put_varint(&mut out, secs);
            }
            if nanos > 0 {
                out.push(0x10);
                put_varint(&mut out, nanos);
            }
            // EntryAdapter.line = 2
            put_str(&mut out, 2, &e.line);
            // EntryAdapter.structured_metadata = 3 {name = 1, value = 2}
            for (k, v) in &e.meta {
                put_len_prefix(&mut out, 3, pair_len(k, v));
                put_str(&mut out, 1, k);
                put_str(&mut out, 2, v);
            }
        }
    }
    out
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

    /// Group the records of a batch's encoded parts
    /// ([`Batch::encoded_parts`]) into streams (label string → labels,
    /// entries), applying the cardinality guard and making timestamps unique
    /// per stream. The records are read where they lie: lines, metadata
    /// names and string values borrow from `parts` (a name with a dot, a
    /// number or bytes are written out).
    pub fn streams<'a>(&self, parts: &'a [Bytes]) -> Result<Streams<'a>, WireError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut out: Streams<'a> = BTreeMap::new();
        let mut guard = match self.guard.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut res_attrs: Vec<Attr<'a>> = Vec::new();
        let mut attrs: Vec<Attr<'a>> = Vec::new();
        for part in parts {
            // ExportLogsServiceRequest.resource_logs = 1
            for rl in fields_of(part, 1) {
                let rl = rl?;
                res_attrs.clear();
                let mut scopes = Vec::new();
                for f in Fields::new(rl) {
                    let f = f?;
                    match (f.number, f.value) {
                        // ResourceLogs.resource = 1, Resource.attributes = 1
                        (1, Value::Bytes(r)) => {
                            res_attrs.clear();
                            for kv in fields_of(r, 1) {
                                res_attrs.push(key_value(kv?)?);
                            }
                        }
                        // ResourceLogs.scope_logs = 2
                        (2, Value::Bytes(sl)) => scopes.push(sl),
                        _ => {}
                    }
                }
                // Labels from the resource: once for all its records.
                let resource_candidates: Vec<(&str, Cow<'a, str>)> = self
                    .cfg
                    .labels
                    .resource
                    .iter()
                    .filter_map(|(attr_key, label)| {
                        find(&res_attrs, attr_key).map(|v| Ok((label.as_str(), any_str(v)?)))
                    })
                    .collect::<Result<_, WireError>>()?;
                for sl in scopes {
                    // ScopeLogs.log_records = 2
                    for r in fields_of(sl, 2) {
                        let r = Record::read(r?, &mut attrs)?;
                        let mut labels: Vec<(String, String)> = Vec::new();
                        let mut meta: Vec<(Cow<'a, str>, Cow<'a, str>)> = Vec::new();
                        let mut used: Vec<&str> = Vec::new();
                        let mut candidates = resource_candidates.clone();
                        for (attr_key, label) in &self.cfg.labels.attributes {
                            if let Some(v) = find(&attrs, attr_key) {
                                candidates.push((label.as_str(), any_str(v)?));
                                used.push(attr_key.as_str());
                            }
                        }
                        if self.cfg.labels.level {
                            candidates
                                .push(("level", level(r.severity_text, r.severity_number).into()));
                        }
                        self.guarded(&mut guard, candidates, &mut labels, &mut meta);
                        if !r.trace_id.is_empty() {
                            meta.push(("trace_id".into(), hex_string(r.trace_id).into()));
                        }
                        if !r.span_id.is_empty() {
                            meta.push(("span_id".into(), hex_string(r.span_id).into()));
                        }
                        for a in &attrs {
                            if used.contains(&a.key) {
                                continue;
                            }
                            if let Some(v) = a.value {
                                let name = if a.key.contains('.') {
                                    Cow::Owned(a.key.replace('.', "_"))
                                } else {
                                    Cow::Borrowed(a.key)
                                };
                                meta.push((name, any_str(v)?));
                            }
                        }
                        let ts = [r.time, r.observed_time, now]
                            .into_iter()
                            .find(|t| *t > 0)
                            .unwrap_or(now);
                        let line = match r.body {
                            Some(b) => any_str(b)?,
                            None => Cow::Borrowed(""),
                        };
                        let key =
                            write_labels(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
                        out.entry(key)
                            .or_insert_with(|| (labels.into_iter().collect(), Vec::new()))
                            .1
                            .push(Entry { ts, line, meta });
                    }
                }
            }
        }
        drop(guard);
        self.make_unique(&mut out);
        Ok(out)
    }

    /// The labels of a record from its candidates, through the cardinality
    /// guard: a label past `max_label_values` values is demoted to
    /// structured metadata from then on.
    fn guarded<'a>(
        &self,
        guard: &mut Guard,
        candidates: Vec<(&str, Cow<'a, str>)>,
        labels: &mut Vec<(String, String)>,
        meta: &mut Vec<(Cow<'a, str>, Cow<'a, str>)>,
    ) {
        for (label, value) in candidates {
            if guard.demoted.contains(label) {
                meta.push((Cow::Owned(label.to_string()), value));
                continue;
            }
            let seen = match guard.values.get_mut(label) {
                Some(seen) => seen,
                None => guard.values.entry(label.to_string()).or_default(),
            };
            if !seen.contains(value.as_ref()) {
                if seen.len() >= self.cfg.max_label_values {
                    guard.demoted.insert(label.to_string());
                    guard.values.remove(label);
                    self.telemetry
                        .counter(LabelsDemoted, &[("component", &self.id), ("label", label)])
                        .add(1);
                    tracing::warn!(exporter = %self.id, label = %label, max = self.cfg.max_label_values, "Label has too many values; sending it as structured metadata from now on.");
                    meta.push((Cow::Owned(label.to_string()), value));
                    continue;
                }
                seen.insert(value.to_string());
            }
            set_label(labels, label, value.into_owned());
        }
    }

    /// Each stream's entries in order with timestamps unique (and after
    /// the last one sent on the stream).
    fn make_unique(&self, out: &mut Streams<'_>) {
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
    }

    /// The encoded request body and its `Content-Encoding`.
    pub fn body(
        &self,
        streams: Streams<'_>,
    ) -> Result<(Vec<u8>, Option<&'static str>), ExporterError> {
        match self.cfg.encoding {
            LokiEncoding::Protobuf => {
                let raw = push_request(&streams);
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
                                    .map(|(k, v)| {
                                        (k.into_owned(), serde_json::Value::String(v.into_owned()))
                                    })
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
        let parts = batch.encoded_parts();
        let streams = self
            .streams(&parts)
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

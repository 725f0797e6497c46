//! Splitting an encoded export request by key without decoding it: by trace
//! id (spans, and log records that carry one) or by resource (log records
//! without a trace id, metrics). Used by exporters that shard a tier
//! (Kafka partitions, a load-balancing ring): every span of a trace, and
//! every log record of that trace, must reach the same place.
//!
//! Only the framing is walked. Items are copied as they were encoded, under
//! copies of their resource and scope wrappers (every field but the item
//! list is kept: resource, scope, `schema_url`).

use crate::signal::Signal;
use crate::wire::{len_field_size, put_len_prefix, Fields, WireError};

/// What an item is keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Key {
    /// The item's 16-byte trace id.
    Trace([u8; 16]),
    /// A hash of the item's resource message (items without a trace id).
    Resource(u64),
}

impl Key {
    /// The message key the Collector's Kafka exporter writes for this key:
    /// the trace id as 32 lowercase hex characters; a resource as 16.
    pub fn hex(&self) -> String {
        match self {
            Key::Trace(id) => hex32(id),
            Key::Resource(h) => format!("{h:016x}"),
        }
    }

    /// The partition of `partitions` this key goes to: FNV-1a (32 bits) of
    /// [`Key::hex`], as Sarama's default hash partitioner computes it (the
    /// one the Collector's Kafka exporter used), so that producers of both
    /// kinds put a trace on the same partition.
    pub fn partition(&self, partitions: u32) -> u32 {
        if partitions <= 1 {
            return 0;
        }
        let mut h: u32 = 0x811c_9dc5;
        let mut feed = |b: u8| {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        };
        const HEX: &[u8; 16] = b"0123456789abcdef";
        match self {
            Key::Trace(id) => id.iter().for_each(|b| {
                feed(HEX[usize::from(b >> 4)]);
                feed(HEX[usize::from(b & 15)]);
            }),
            Key::Resource(r) => r.to_be_bytes().iter().for_each(|b| {
                feed(HEX[usize::from(b >> 4)]);
                feed(HEX[usize::from(b & 15)]);
            }),
        }
        // Sarama: int32(sum) % n, negated when negative.
        let p = (h as i32) % (partitions as i32);
        p.unsigned_abs()
    }
}

fn hex32(id: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(32);
    for b in id {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 15)]));
    }
    s
}

/// One item, where it was found, and its key.
struct Item<'a> {
    key: Key,
    resource: u32,
    scope: u32,
    raw: &'a [u8],
}

/// The wrappers of one resource: its fields other than the scope list.
struct Wrapper<'a> {
    other: Vec<&'a [u8]>,
}

/// Field numbers of the three levels: (item list in scope, trace id in item).
fn layout(signal: Signal) -> Option<(u32, u32)> {
    match signal {
        // ScopeSpans.spans = 2; Span.trace_id = 1.
        Signal::Traces => Some((2, 1)),
        // ScopeLogs.log_records = 2; LogRecord.trace_id = 9.
        Signal::Logs => Some((2, 9)),
        Signal::Metrics | Signal::Profiles => None,
    }
}

fn hash(b: &[u8]) -> u64 {
    // FNV-1a 64: stable across processes and versions (a partition must not
    // depend on which instance computed it).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in b {
        h ^= u64::from(*x);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// One part of a split request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Part {
    /// An encoded request of the same signal (empty when no item went here).
    pub bytes: Vec<u8>,
    /// Items it holds.
    pub items: usize,
    /// The key of its items, when they all have the same one.
    pub key: Option<Key>,
    mixed: bool,
}

impl Part {
    fn note(&mut self, key: Key) {
        match self.key {
            None if !self.mixed => self.key = Some(key),
            Some(k) if k != key => {
                self.key = None;
                self.mixed = true;
            }
            _ => {}
        }
    }
}

/// Split one encoded `Export*ServiceRequest` into buckets: `bucket_of`
/// gives each item's bucket from its key (spans by trace id; log records by
/// trace id when they carry a valid one, else by their resource; metrics by
/// resource, a resource's metrics never split). Part `i` holds bucket `i`'s
/// items in the order they arrived, under copies of their wrappers; the
/// result has one part per bucket up to the highest used. The cost is one
/// walk of the framing, a counting sort and one copy of each item: made for
/// sharding a batch over Kafka partitions or backends.
pub fn split_by(
    signal: Signal,
    buf: &[u8],
    bucket_of: impl FnMut(&Key) -> usize,
) -> Result<Vec<Part>, WireError> {
    split_with(signal, buf, By::TraceId, bucket_of)
}

/// What items are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum By {
    /// Spans and log records by trace id (records without one, and
    /// metrics, by resource).
    TraceId,
    /// Everything by its resource's `service.name` (a hash of it, in
    /// [`Key::Resource`]; resources without one share the hash of "").
    Service,
}

/// [`split_by`], keyed as `by` says.
pub fn split_with(
    signal: Signal,
    buf: &[u8],
    by: By,
    mut bucket_of: impl FnMut(&Key) -> usize,
) -> Result<Vec<Part>, WireError> {
    let (items, wrappers, scopes) = walk(signal, buf, by)?;
    // Buckets, memoized for runs of one key (a trace's spans are usually together).
    let mut buckets: Vec<u32> = Vec::with_capacity(items.len());
    let mut last: Option<(Key, u32)> = None;
    let mut n = 0usize;
    for it in &items {
        let b = match last {
            Some((k, b)) if k == it.key => b,
            _ => {
                let b = bucket_of(&it.key) as u32;
                last = Some((it.key, b));
                b
            }
        };
        n = n.max(b as usize + 1);
        buckets.push(b);
    }
    // Counting sort: stable, so each bucket keeps arrival order.
    let mut start = vec![0u32; n + 1];
    for &b in &buckets {
        start[b as usize + 1] += 1;
    }
    for i in 0..n {
        start[i + 1] += start[i];
    }
    let mut order = vec![0u32; items.len()];
    let mut at = start.clone();
    for (i, &b) in buckets.iter().enumerate() {
        order[at[b as usize] as usize] = i as u32;
        at[b as usize] += 1;
    }
    let mut parts = vec![Part::default(); n];
    for (b, part) in parts.iter_mut().enumerate() {
        let group = &order[start[b] as usize..start[b + 1] as usize];
        if group.is_empty() {
            continue;
        }
        for &i in group {
            part.note(items[i as usize].key);
        }
        part.items = group.len();
        part.bytes = encode(group, &items, &wrappers, &scopes);
    }
    // Items counted: a resource without scopes (or a resource of metrics)
    // is one item here; callers that count spans use the wire scan.
    Ok(parts)
}

/// Split one encoded `Export*ServiceRequest` by key: for each key (in order
/// of first appearance), an encoded request with that key's items, and how
/// many items it holds. See [`split_by`].
pub fn split(signal: Signal, buf: &[u8]) -> Result<Vec<(Key, Vec<u8>, usize)>, WireError> {
    let mut index: std::collections::HashMap<Key, usize, foldhash::fast::FixedState> =
        std::collections::HashMap::default();
    let parts = split_by(signal, buf, |k| {
        let n = index.len();
        *index.entry(*k).or_insert(n)
    })?;
    Ok(parts
        .into_iter()
        .filter_map(|p| Some((p.key?, p.bytes, p.items)))
        .collect())
}

/// Split one encoded request into parts of at most `max` items, in arrival
/// order (the batch processor's `send_batch_max_size`). Spans and log
/// records are items; metrics are split between resources only (a
/// resource's metrics are never split), so a part may hold more data points.
pub fn chunks(signal: Signal, buf: &[u8], max: usize) -> Result<Vec<Part>, WireError> {
    let (items, wrappers, scopes) = walk(signal, buf, By::TraceId)?;
    let order: Vec<u32> = (0..items.len() as u32).collect();
    Ok(order
        .chunks(max.max(1))
        .map(|group| {
            let mut part = Part::default();
            for &i in group {
                part.note(items[i as usize].key);
            }
            part.items = group.len();
            part.bytes = encode(group, &items, &wrappers, &scopes);
            part
        })
        .collect())
}

type Walked<'a> = (Vec<Item<'a>>, Vec<Wrapper<'a>>, Vec<Wrapper<'a>>);

/// Every item with its key and where it was, and the wrappers' other fields.
fn walk(signal: Signal, buf: &[u8], by: By) -> Result<Walked<'_>, WireError> {
    let mut wrappers: Vec<Wrapper<'_>> = Vec::new();
    let mut scopes: Vec<Wrapper<'_>> = Vec::new();
    let mut items: Vec<Item<'_>> = Vec::new();
    for f in Fields::new(buf) {
        let f = f?;
        let Some(res) = f.value.bytes().filter(|_| f.number == 1) else {
            continue;
        };
        let r = wrappers.len() as u32;
        let first_item = items.len();
        let mut other = Vec::new();
        let mut resource_bytes: &[u8] = &[];
        let mut had_scope = false;
        for g in Fields::new(res) {
            let g = g?;
            if g.number == 1 {
                resource_bytes = g.value.bytes().unwrap_or(&[]);
            }
            match (layout(signal), g.number, g.value.bytes()) {
                (Some((item_field, trace_field)), 2, Some(scope)) => {
                    had_scope = true;
                    let s = scopes.len() as u32;
                    let mut s_other = Vec::new();
                    for h in Fields::new(scope) {
                        let h = h?;
                        match h.value.bytes() {
                            Some(item) if h.number == item_field => {
                                let key = trace_id(item, trace_field)?
                                    .map(Key::Trace)
                                    .unwrap_or(Key::Resource(0));
                                items.push(Item {
                                    key,
                                    resource: r,
                                    scope: s,
                                    raw: h.raw,
                                });
                            }
                            _ => s_other.push(h.raw),
                        }
                    }
                    scopes.push(Wrapper { other: s_other });
                }
                _ => other.push(g.raw),
            }
        }
        // Items without a trace id (and metrics, whole) go by their resource.
        let rkey = match by {
            By::TraceId => Key::Resource(hash(resource_bytes)),
            By::Service => Key::Resource(hash(service_name(resource_bytes)?.unwrap_or(&[]))),
        };
        for it in &mut items[first_item..] {
            if by == By::Service || it.key == Key::Resource(0) {
                it.key = rkey;
            }
        }
        if layout(signal).is_none() || !had_scope {
            // Metrics, or a resource without scopes: the whole resource
            // message is one item under its resource key.
            items.push(Item {
                key: rkey,
                resource: u32::MAX,
                scope: u32::MAX,
                raw: f.raw,
            });
            other.clear();
        }
        wrappers.push(Wrapper { other });
    }
    Ok((items, wrappers, scopes))
}

/// The items of one group, re-wrapped: consecutive items of one scope share
/// one scope wrapper, of one resource one resource wrapper.
fn encode(
    group: &[u32],
    items: &[Item<'_>],
    wrappers: &[Wrapper<'_>],
    scopes: &[Wrapper<'_>],
) -> Vec<u8> {
    let sum = |v: &[&[u8]]| v.iter().map(|b| b.len()).sum::<usize>();
    // Exact size: items, wrappers' other fields and prefixes (computed below).
    let mut out = Vec::with_capacity(
        group
            .iter()
            .map(|&i| items[i as usize].raw.len())
            .sum::<usize>()
            + 64,
    );
    let scope_run = |s: usize, b: usize| -> (usize, usize) {
        let scope = items[group[s] as usize].scope;
        let mut e = s;
        let mut len = sum(&scopes[scope as usize].other);
        while e < b && items[group[e] as usize].scope == scope {
            len += items[group[e] as usize].raw.len();
            e += 1;
        }
        (e, len)
    };
    let mut a = 0;
    while a < group.len() {
        let first = &items[group[a] as usize];
        if first.resource == u32::MAX {
            out.extend_from_slice(first.raw);
            a += 1;
            continue;
        }
        // The run of this resource.
        let mut b = a;
        while b < group.len() && items[group[b] as usize].resource == first.resource {
            b += 1;
        }
        let res = &wrappers[first.resource as usize];
        let mut res_len = sum(&res.other);
        let mut s = a;
        while s < b {
            let (e, len) = scope_run(s, b);
            res_len += len_field_size(len);
            s = e;
        }
        put_len_prefix(&mut out, 1, res_len);
        for o in &res.other {
            out.extend_from_slice(o);
        }
        let mut s = a;
        while s < b {
            let (e, len) = scope_run(s, b);
            put_len_prefix(&mut out, 2, len);
            let scope = items[group[s] as usize].scope as usize;
            for o in &scopes[scope].other {
                out.extend_from_slice(o);
            }
            for k in &group[s..e] {
                out.extend_from_slice(items[*k as usize].raw);
            }
            s = e;
        }
        a = b;
    }
    out
}

/// The string value of the `service.name` attribute of a `Resource`.
fn service_name(resource: &[u8]) -> Result<Option<&[u8]>, WireError> {
    for f in Fields::new(resource) {
        let f = f?;
        let Some(kv) = f.value.bytes().filter(|_| f.number == 1) else {
            continue;
        };
        let (mut key, mut value) = (None, None);
        for g in Fields::new(kv) {
            let g = g?;
            match g.number {
                1 => key = g.value.bytes(),
                2 => value = g.value.bytes(),
                _ => {}
            }
        }
        if key == Some(b"service.name".as_slice()) {
            for h in Fields::new(value.unwrap_or(&[])) {
                let h = h?;
                if h.number == 1 {
                    return Ok(h.value.bytes());
                }
            }
        }
    }
    Ok(None)
}

/// The item's trace id when it is 16 bytes and not all zeros.
fn trace_id(item: &[u8], field: u32) -> Result<Option<[u8; 16]>, WireError> {
    for f in Fields::new(item) {
        let f = f?;
        if f.number == field {
            return Ok(f
                .value
                .bytes()
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .filter(|id| id.iter().any(|&x| x != 0)));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::metrics::v1::{Metric, ResourceMetrics, ScopeMetrics};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    fn resource(name: &str) -> Option<Resource> {
        Some(Resource {
            attributes: vec![crate::model::text_attribute("service.name", name)],
            ..Default::default()
        })
    }

    fn span(trace: u8, id: u8) -> Span {
        Span {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            name: format!("s{trace}-{id}"),
            ..Default::default()
        }
    }

    #[test]
    fn spans_split_by_trace_keep_their_resource_scope_and_order() {
        let req = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: resource("a"),
                    scope_spans: vec![
                        ScopeSpans {
                            scope: Some(InstrumentationScope {
                                name: "s1".into(),
                                ..Default::default()
                            }),
                            spans: vec![span(1, 1), span(2, 2), span(1, 3)],
                            schema_url: "u1".into(),
                        },
                        ScopeSpans {
                            spans: vec![span(2, 4)],
                            ..Default::default()
                        },
                    ],
                    schema_url: "r".into(),
                },
                ResourceSpans {
                    resource: resource("b"),
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(1, 5)],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        let parts = split(Signal::Traces, &req.encode_to_vec()).expect("split");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].0, Key::Trace([1; 16]));
        assert_eq!(parts[0].2, 3);
        let one = ExportTraceServiceRequest::decode(parts[0].1.as_slice()).expect("decodes");
        let want_one = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: resource("a"),
                    scope_spans: vec![ScopeSpans {
                        scope: Some(InstrumentationScope {
                            name: "s1".into(),
                            ..Default::default()
                        }),
                        spans: vec![span(1, 1), span(1, 3)],
                        schema_url: "u1".into(),
                    }],
                    schema_url: "r".into(),
                },
                ResourceSpans {
                    resource: resource("b"),
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(1, 5)],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        assert_eq!(one, want_one);
        let two = ExportTraceServiceRequest::decode(parts[1].1.as_slice()).expect("decodes");
        assert_eq!(two.resource_spans.len(), 1);
        let spans: Vec<_> = two.resource_spans[0]
            .scope_spans
            .iter()
            .flat_map(|s| s.spans.iter().map(|x| x.name.clone()))
            .collect();
        assert_eq!(spans, ["s2-2", "s2-4"]);
        assert_eq!(two.resource_spans[0].scope_spans.len(), 2);
        assert_eq!(two.resource_spans[0].scope_spans[0].schema_url, "u1");
    }

    #[test]
    fn logs_without_trace_id_go_by_resource_and_metrics_by_resource() {
        let log = |t: Option<u8>, body: &str| LogRecord {
            trace_id: t.map(|t| vec![t; 16]).unwrap_or_default(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(body.into())),
            }),
            ..Default::default()
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![
                ResourceLogs {
                    resource: resource("gw"),
                    scope_logs: vec![ScopeLogs {
                        log_records: vec![log(Some(7), "a"), log(None, "b"), log(None, "c")],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceLogs {
                    resource: resource("other"),
                    scope_logs: vec![ScopeLogs {
                        log_records: vec![log(None, "d"), log(Some(7), "e")],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        let parts = split(Signal::Logs, &req.encode_to_vec()).expect("split");
        let keys: Vec<_> = parts.iter().map(|p| (p.0, p.2)).collect();
        assert_eq!(keys.len(), 3, "{keys:?}");
        assert_eq!(keys[0], (Key::Trace([7; 16]), 2));
        assert!(matches!(keys[1], (Key::Resource(_), 2)));
        assert!(matches!(keys[2], (Key::Resource(_), 1)));
        assert_ne!(keys[1].0, keys[2].0);
        // The same resource always hashes alike.
        let again = split(Signal::Logs, &req.encode_to_vec()).expect("split");
        assert_eq!(again[1].0, keys[1].0);

        let m = ExportMetricsServiceRequest {
            resource_metrics: vec![
                ResourceMetrics {
                    resource: resource("x"),
                    scope_metrics: vec![ScopeMetrics {
                        metrics: vec![Metric {
                            name: "m".into(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceMetrics {
                    resource: resource("y"),
                    ..Default::default()
                },
            ],
        };
        let bytes = m.encode_to_vec();
        let parts = split(Signal::Metrics, &bytes).expect("split");
        assert_eq!(parts.len(), 2);
        let back = ExportMetricsServiceRequest::decode(parts[0].1.as_slice()).expect("decodes");
        assert_eq!(back.resource_metrics, vec![m.resource_metrics[0].clone()]);
    }

    #[test]
    fn chunks_cap_items_and_split_metrics_between_resources_only() {
        use opentelemetry_proto::tonic::metrics::v1::{metric, Gauge, NumberDataPoint};
        let m = |name: &str, points: usize| ResourceMetrics {
            resource: resource(name),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: name.into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![NumberDataPoint::default(); points],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        };
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![m("a", 3), m("b", 1), m("c", 2)],
        };
        let batch = crate::model::Batch::from_metrics(req.resource_metrics.clone());
        assert_eq!(batch.items(), 6);
        let parts = batch.split_max(2).expect("split");
        // Whole resources, two a part: (a, b) then (c).
        let points: Vec<usize> = parts.iter().map(crate::model::Batch::items).collect();
        assert_eq!(points, vec![4, 2]);
        let back = parts[1].to_metrics_request().expect("decodes");
        assert_eq!(back.resource_metrics, vec![req.resource_metrics[2].clone()]);

        let spans = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: resource("s"),
                scope_spans: vec![ScopeSpans {
                    spans: (1..=5).map(|i| span(1, i)).collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let parts = chunks(Signal::Traces, &spans.encode_to_vec(), 2).expect("chunks");
        assert_eq!(
            parts.iter().map(|p| p.items).collect::<Vec<_>>(),
            vec![2, 2, 1]
        );
        let last = ExportTraceServiceRequest::decode(parts[2].bytes.as_slice()).expect("decodes");
        assert_eq!(last.resource_spans[0].resource, resource("s"));
        assert_eq!(
            last.resource_spans[0].scope_spans[0].spans,
            vec![span(1, 5)]
        );
    }

    #[test]
    fn partitions_match_saramas_fnv1a_hash_partitioner() {
        // FNV-1a 32 over the hex key, computed here from its definition.
        let key = Key::Trace([0xab; 16]);
        assert_eq!(key.hex(), "ab".repeat(16));
        let mut h: u32 = 2166136261;
        for b in key.hex().bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(16777619);
        }
        let want = ((h as i32) % 12).unsigned_abs();
        assert_eq!(key.partition(12), want);
        assert_eq!(key.partition(1), 0);
        // Spread: 10,000 ids over 12 partitions, none empty or above twice its share.
        let mut counts = [0u32; 12];
        for i in 0..10_000u32 {
            let mut id = [0u8; 16];
            id[..4].copy_from_slice(&i.to_be_bytes());
            id[8..12].copy_from_slice(&i.wrapping_mul(2654435761).to_be_bytes());
            counts[Key::Trace(id).partition(12) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 400 && c < 1700), "{counts:?}");
    }

    #[test]
    fn by_service_keeps_each_service_together_whatever_the_traces() {
        let req = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: resource("a"),
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(1, 1), span(2, 2)],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceSpans {
                    resource: resource("b"),
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(1, 3)],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceSpans {
                    resource: resource("a"),
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(3, 4)],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        let mut index = std::collections::HashMap::new();
        let parts = split_with(Signal::Traces, &req.encode_to_vec(), By::Service, |k| {
            let n = index.len();
            *index.entry(*k).or_insert(n)
        })
        .expect("split");
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].items, 3, "service a: spans 1, 2 and 4");
        assert_eq!(parts[1].items, 1);
        assert_eq!(parts[0].key, Some(Key::Resource(hash(b"a"))));
    }

    #[test]
    fn malformed_input_is_an_error() {
        assert!(split(Signal::Traces, &[0x0a, 0x05, 0x01]).is_err());
    }
}

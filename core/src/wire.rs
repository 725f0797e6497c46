//! A protobuf walker for OTLP export requests that counts items and checks
//! their framing without allocating or decoding.
//!
//! Decoding a span with prost costs microseconds; walking its fields costs
//! nanoseconds. Receivers use [`scan`] so that a request that is only
//! forwarded is never decoded, while malformed framing is still refused at
//! the door and invalid ids are found.

use crate::signal::Signal;

/// Malformed protobuf framing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed protobuf at byte {offset}: {reason}")]
pub struct WireError {
    /// Offset into the message where the problem was found.
    pub offset: usize,
    /// What is wrong.
    pub reason: &'static str,
}

/// What [`scan`] found in a request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ScanResult {
    /// Spans, log records or data points.
    pub items: usize,
    /// Items whose trace or span id has a wrong length or is all zeros
    /// (spans), or has a wrong length (log records, where ids are optional).
    pub invalid_ids: usize,
}

/// A field: its number and, for length-delimited fields, its payload and offset.
type RawField<'a> = (u32, Option<(&'a [u8], usize)>);

/// A varint of one byte at `pos` (most keys and lengths), stepping over
/// it; none when the byte is absent or the varint is longer.
#[inline(always)]
fn one_byte_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let b = *buf.get(*pos)?;
    (b < 0x80).then(|| {
        *pos += 1;
        u64::from(b)
    })
}

/// A varint at `pos`, stepping over it; why it is none otherwise (cut
/// short, longer than 10 bytes, or over 64 bits: decoders refuse a 10th
/// byte above 1).
#[inline(always)]
fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, &'static str> {
    match one_byte_varint(buf, pos) {
        Some(v) => Ok(v),
        None => varint_slow(buf, pos),
    }
}

#[cold]
fn varint_slow(buf: &[u8], pos: &mut usize) -> Result<u64, &'static str> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let Some(&b) = buf.get(*pos) else {
            return Err("truncated varint");
        };
        *pos += 1;
        if i == 9 && b > 1 {
            return Err("varint overflows 64 bits");
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(value);
        }
    }
    Err("varint longer than 10 bytes")
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    base: usize,
    /// Wire type of the field last returned by `next`.
    wire: u8,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], base: usize) -> Self {
        Reader {
            buf,
            pos: 0,
            base,
            wire: 0,
        }
    }

    #[cold]
    fn err(&self, reason: &'static str) -> WireError {
        WireError {
            offset: self.base + self.pos,
            reason,
        }
    }

    #[inline(always)]
    fn varint(&mut self) -> Result<u64, WireError> {
        varint(self.buf, &mut self.pos).map_err(|reason| self.err(reason))
    }

    /// The next field: (number, wire type, payload for length-delimited fields).
    #[inline(always)]
    fn next(&mut self) -> Result<Option<RawField<'a>>, WireError> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        if key > u64::from(u32::MAX) {
            return Err(self.err("field key out of range"));
        }
        let field = (key >> 3) as u32;
        if field == 0 {
            return Err(self.err("field number 0"));
        }
        self.wire = (key & 7) as u8;
        match key & 7 {
            0 => {
                self.varint()?;
                Ok(Some((field, None)))
            }
            1 => self.skip(8).map(|_| Some((field, None))),
            5 => self.skip(4).map(|_| Some((field, None))),
            2 => {
                let len = self.varint()?;
                let len = usize::try_from(len).map_err(|_| self.err("length overflows"))?;
                let start = self.pos;
                self.skip(len)?;
                Ok(Some((
                    field,
                    Some((&self.buf[start..start + len], self.base + start)),
                )))
            }
            _ => Err(self.err("unsupported wire type (groups are not allowed in OTLP)")),
        }
    }

    #[inline(always)]
    fn skip(&mut self, n: usize) -> Result<(), WireError> {
        if self.buf.len() - self.pos < n {
            return Err(self.err("field runs past the end of its message"));
        }
        self.pos += n;
        Ok(())
    }
}

fn id_ok(id: Option<&[u8]>, len: usize, optional: bool) -> bool {
    match id {
        None => optional,
        Some([]) => optional,
        Some(b) => b.len() == len && b.iter().any(|&x| x != 0),
    }
}

/// Count the items of an encoded `Export{Trace,Logs,Metrics}ServiceRequest`
/// and their invalid ids, and check it against the schema
/// ([`check_strings`]), in one walk.
pub fn scan(signal: Signal, buf: &[u8]) -> Result<ScanResult, WireError> {
    if signal == Signal::Profiles {
        return scan_profiles(buf);
    }
    check(signal, buf)
}

/// Count the samples of an encoded `ExportProfilesServiceRequest` and check
/// it whole: profiles are decoded at the door (they are few and large, and
/// their samples index a dictionary, which a walk cannot check), every
/// index into the dictionary must point into its table (0, "unset", always
/// may), and a stack may hold at most [`MAX_STACK_DEPTH`] frames.
fn scan_profiles(buf: &[u8]) -> Result<ScanResult, WireError> {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use prost::Message;
    let bad = |reason| WireError { offset: 0, reason };
    let req = ExportProfilesServiceRequest::decode(buf)
        .map_err(|_| bad("not a valid ExportProfilesServiceRequest"))?;
    let d = req.dictionary.unwrap_or_default();
    let within = |i: i32, len: usize| i == 0 || usize::try_from(i).is_ok_and(|i| i < len);
    let all = |v: &[i32], len: usize| v.iter().all(|&i| within(i, len));
    let strings = d.string_table.len();
    for st in &d.stack_table {
        if st.location_indices.len() > MAX_STACK_DEPTH {
            return Err(bad("a stack deeper than 4096 frames"));
        }
        if !all(&st.location_indices, d.location_table.len()) {
            return Err(bad("a stack points past the location table"));
        }
    }
    for l in &d.location_table {
        if !within(l.mapping_index, d.mapping_table.len())
            || !all(&l.attribute_indices, d.attribute_table.len())
            || !l
                .lines
                .iter()
                .all(|x| within(x.function_index, d.function_table.len()))
        {
            return Err(bad("a location points past the dictionary"));
        }
    }
    for f in &d.function_table {
        if ![f.name_strindex, f.system_name_strindex, f.filename_strindex]
            .iter()
            .all(|&i| within(i, strings))
        {
            return Err(bad("a function points past the string table"));
        }
    }
    for m in &d.mapping_table {
        if !within(m.filename_strindex, strings)
            || !all(&m.attribute_indices, d.attribute_table.len())
        {
            return Err(bad("a mapping points past the dictionary"));
        }
    }
    for a in &d.attribute_table {
        if !within(a.key_strindex, strings) || !within(a.unit_strindex, strings) {
            return Err(bad("an attribute points past the string table"));
        }
    }
    let mut res = ScanResult::default();
    for p in req
        .resource_profiles
        .iter()
        .flat_map(|r| &r.scope_profiles)
        .flat_map(|s| &s.profiles)
    {
        let types = p.sample_type.iter().chain(p.period_type.iter());
        if !types
            .into_iter()
            .all(|t| within(t.type_strindex, strings) && within(t.unit_strindex, strings))
            || !all(&p.attribute_indices, d.attribute_table.len())
        {
            return Err(bad("a profile points past the dictionary"));
        }
        for sm in &p.samples {
            if !within(sm.stack_index, d.stack_table.len())
                || !within(sm.link_index, d.link_table.len())
                || !all(&sm.attribute_indices, d.attribute_table.len())
            {
                return Err(bad("a sample points past the dictionary"));
            }
            // Values and timestamps MUST pair up (one total spread over
            // the timestamps is an older draft's shape, still read).
            let (v, t) = (sm.values.len(), sm.timestamps_unix_nano.len());
            if v > 1 && t > 0 && v != t {
                return Err(bad("a sample's values and timestamps differ in number"));
            }
        }
        res.items += p.samples.len();
    }
    // A link with a malformed id joins no span: it is no reason to refuse
    // the samples (`invalid_ids` stays 0).
    Ok(res)
}

/// The deepest stack a profile may hold: a deeper one is refused (Go's
/// runtime cuts stacks at 128 frames in pprof, async-profiler at 2048 by
/// default).
pub const MAX_STACK_DEPTH: usize = 4096;

/// Messages of the OTLP schema whose string fields [`check_strings`] validates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum M {
    Request(Signal),
    ResourceItems(Signal),
    ScopeItems(Signal),
    Resource,
    Scope,
    KeyValue,
    AnyValue,
    ArrayValue,
    KvList,
    Span,
    Event,
    Link,
    Status,
    LogRecord,
    Metric,
    /// Gauge, Sum, Histogram, ExponentialHistogram, Summary: field 1 holds points.
    Points(u8),
    NumberPoint,
    HistogramPoint,
    ExpHistogramPoint,
    SummaryPoint,
    Buckets,
    Quantile,
    Exemplar,
    EntityRef,
}

/// What a field of a message is: how it must be encoded for a full
/// decode (prost) to accept it.
enum F {
    Str,
    Msg(M),
    Bytes,
    Varint,
    I64,
    I32,
    /// Repeated fixed64/double: packed (a multiple of 8 bytes) or not.
    PackedI64,
    /// Repeated varint: packed (valid varints) or not.
    PackedVarint,
    /// Not in the schema: skipped by decoders, any wire type.
    Unknown,
}

/// The schema of opentelemetry-proto 0.33 (OTLP 1.7), as prost decodes it.
fn field_kind(m: M, n: u32) -> F {
    use F::*;
    match (m, n) {
        (M::Request(s), 1) => Msg(M::ResourceItems(s)),
        (M::ResourceItems(_), 1) => Msg(M::Resource),
        (M::ResourceItems(s), 2) => Msg(M::ScopeItems(s)),
        (M::ResourceItems(_) | M::ScopeItems(_), 3) => Str,
        (M::ScopeItems(_), 1) => Msg(M::Scope),
        (M::ScopeItems(Signal::Traces), 2) => Msg(M::Span),
        (M::ScopeItems(Signal::Logs), 2) => Msg(M::LogRecord),
        (M::ScopeItems(Signal::Metrics), 2) => Msg(M::Metric),
        (M::Resource, 1) => Msg(M::KeyValue),
        (M::Resource, 2) => Varint,
        (M::Resource, 3) => Msg(M::EntityRef),
        (M::EntityRef, 1..=4) => Str,
        (M::Scope, 1 | 2) => Str,
        (M::Scope, 3) => Msg(M::KeyValue),
        (M::Scope, 4) => Varint,
        (M::KeyValue, 1) => Str,
        (M::KeyValue, 2) => Msg(M::AnyValue),
        (M::KeyValue, 3) => Varint,
        (M::AnyValue, 1) => Str,
        (M::AnyValue, 2 | 3) => Varint,
        (M::AnyValue, 4) => I64,
        (M::AnyValue, 5) => Msg(M::ArrayValue),
        (M::AnyValue, 6) => Msg(M::KvList),
        (M::AnyValue, 7) => Bytes,
        (M::AnyValue, 8) => Varint,
        (M::ArrayValue, 1) => Msg(M::AnyValue),
        (M::KvList, 1) => Msg(M::KeyValue),
        (M::Span, 1 | 2 | 4) => Bytes,
        (M::Span, 3 | 5) => Str,
        (M::Span, 6 | 10 | 12 | 14) => Varint,
        (M::Span, 7 | 8) => I64,
        (M::Span, 9) => Msg(M::KeyValue),
        (M::Span, 11) => Msg(M::Event),
        (M::Span, 13) => Msg(M::Link),
        (M::Span, 15) => Msg(M::Status),
        (M::Span, 16) => I32,
        (M::Event, 1) => I64,
        (M::Event, 2) => Str,
        (M::Event, 3) => Msg(M::KeyValue),
        (M::Event, 4) => Varint,
        (M::Link, 1 | 2) => Bytes,
        (M::Link, 3) => Str,
        (M::Link, 4) => Msg(M::KeyValue),
        (M::Link, 5) => Varint,
        (M::Link, 6) => I32,
        (M::Status, 2) => Str,
        (M::Status, 3) => Varint,
        (M::LogRecord, 1 | 11) => I64,
        (M::LogRecord, 2 | 7) => Varint,
        (M::LogRecord, 3 | 12) => Str,
        (M::LogRecord, 5) => Msg(M::AnyValue),
        (M::LogRecord, 6) => Msg(M::KeyValue),
        (M::LogRecord, 8) => I32,
        (M::LogRecord, 9 | 10) => Bytes,
        (M::Metric, 1..=3) => Str,
        (M::Metric, 5 | 7) => Msg(M::Points(0)),
        (M::Metric, 9) => Msg(M::Points(1)),
        (M::Metric, 10) => Msg(M::Points(2)),
        (M::Metric, 11) => Msg(M::Points(3)),
        (M::Metric, 12) => Msg(M::KeyValue),
        (M::Points(0), 1) => Msg(M::NumberPoint),
        (M::Points(1), 1) => Msg(M::HistogramPoint),
        (M::Points(2), 1) => Msg(M::ExpHistogramPoint),
        (M::Points(_), 1) => Msg(M::SummaryPoint),
        (M::Points(_), 2 | 3) => Varint,
        (M::NumberPoint, 7)
        | (M::HistogramPoint, 9)
        | (M::ExpHistogramPoint, 1)
        | (M::SummaryPoint, 7) => Msg(M::KeyValue),
        (M::NumberPoint, 5) | (M::HistogramPoint, 8) | (M::ExpHistogramPoint, 11) => {
            Msg(M::Exemplar)
        }
        (M::NumberPoint, 2..=4 | 6) => I64,
        (M::NumberPoint, 8) => Varint,
        (M::HistogramPoint, 2..=5 | 11 | 12) => I64,
        (M::HistogramPoint, 6 | 7) => PackedI64,
        (M::HistogramPoint, 10) => Varint,
        (M::ExpHistogramPoint, 2..=5 | 7 | 12..=14) => I64,
        (M::ExpHistogramPoint, 6 | 10) => Varint,
        (M::ExpHistogramPoint, 8 | 9) => Msg(M::Buckets),
        (M::Buckets, 1) => Varint,
        (M::Buckets, 2) => PackedVarint,
        (M::SummaryPoint, 2..=5) => I64,
        (M::SummaryPoint, 6) => Msg(M::Quantile),
        (M::SummaryPoint, 8) => Varint,
        (M::Quantile, 1 | 2) => I64,
        (M::Exemplar, 2 | 3 | 6) => I64,
        (M::Exemplar, 4 | 5) => Bytes,
        (M::Exemplar, 7) => Msg(M::KeyValue),
        _ => Unknown,
    }
}

fn too_deep(offset: usize) -> WireError {
    WireError {
        offset,
        reason: "messages nest deeper than 64 levels",
    }
}

fn wrong_wire(offset: usize) -> WireError {
    WireError {
        offset,
        reason: "a field has the wrong wire type for its schema",
    }
}

/// Whether `p` is UTF-8. Telemetry's strings are nearly all ASCII and
/// short (keys, routes, addresses): the word-at-a-time ASCII check, inlined,
/// settles them; `from_utf8`'s byte-wise path for short inputs cost a
/// quarter of a forwarding gateway's CPU (BENCHMARKS.md, issue #48).
#[inline]
fn is_utf8(p: &[u8]) -> bool {
    p.is_ascii() || std::str::from_utf8(p).is_ok()
}

fn utf8(p: &[u8], offset: usize) -> Result<(), WireError> {
    if is_utf8(p) {
        Ok(())
    } else {
        Err(WireError {
            offset,
            reason: "a string field is not valid UTF-8",
        })
    }
}

/// A reader of the message `b` at `off`, `depth` levels down (refused
/// past [`MAX_DEPTH`]).
#[inline]
fn nested(b: &[u8], off: usize, depth: usize) -> Result<Reader<'_>, WireError> {
    if depth > MAX_DEPTH {
        return Err(too_deep(off));
    }
    Ok(Reader::new(b, off))
}

/// `KeyValue` (key, value, key_strindex), as [`field_kind`] describes it.
fn check_kv(b: &[u8], off: usize, depth: usize) -> Result<(), WireError> {
    let mut r = nested(b, off, depth)?;
    while let Some((n, payload)) = r.next()? {
        match (n, r.wire, payload) {
            (1, 2, Some((p, po))) => utf8(p, po)?,
            (2, 2, Some((p, po))) => check_any(p, po, depth + 1)?,
            (3, 0, _) => {}
            (1..=3, _, x) => return Err(wrong_wire(x.map_or(off, |x| x.1))),
            _ => {}
        }
    }
    Ok(())
}

/// `AnyValue` and the arrays and lists inside it.
fn check_any(b: &[u8], off: usize, depth: usize) -> Result<(), WireError> {
    let mut r = nested(b, off, depth)?;
    while let Some((n, payload)) = r.next()? {
        match (n, r.wire, payload) {
            (1, 2, Some((p, po))) => utf8(p, po)?,
            (2 | 3 | 8, 0, _) | (4, 1, _) | (7, 2, _) => {}
            (5 | 6, 2, Some((p, po))) => {
                // ArrayValue.values (AnyValue) / KeyValueList.values (KeyValue).
                if depth + 1 > MAX_DEPTH {
                    return Err(too_deep(po));
                }
                let mut inner = Reader::new(p, po);
                while let Some((m, item)) = inner.next()? {
                    match (m, inner.wire, item) {
                        (1, 2, Some((q, qo))) if n == 5 => check_any(q, qo, depth + 2)?,
                        (1, 2, Some((q, qo))) => check_kv(q, qo, depth + 2)?,
                        (1, _, x) => return Err(wrong_wire(x.map_or(po, |x| x.1))),
                        _ => {}
                    }
                }
            }
            (1..=8, _, x) => return Err(wrong_wire(x.map_or(off, |x| x.1))),
            _ => {}
        }
    }
    Ok(())
}

fn packed_varints(mut p: &[u8]) -> bool {
    while !p.is_empty() {
        match p.iter().take(10).position(|b| b & 0x80 == 0) {
            Some(i) => p = &p[i + 1..],
            None => return false,
        }
    }
    true
}

/// Attributes one resource, scope, span, event, link, log record or data
/// point may carry (the OTel SDKs' default limit is 128).
pub const MAX_ATTRIBUTES: usize = 10_000;

/// How deep messages may nest (an OTLP request needs about 10 levels; more
/// is nested `AnyValue` arrays and lists).
pub const MAX_DEPTH: usize = 64;

/// Check an encoded request against the OTLP schema as a full decode
/// would, without decoding: every known field has its wire type, string
/// fields are UTF-8, packed fields are whole, and messages nest at most
/// [`MAX_DEPTH`] deep. What passes decodes.
pub fn check_strings(signal: Signal, buf: &[u8]) -> Result<(), WireError> {
    check(signal, buf).map(drop)
}

/// [`check_strings`], counting the items and their invalid ids on the way
/// (one walk of the request: a second walk for the counts was a fifth of
/// the receiver's check).
fn check(signal: Signal, buf: &[u8]) -> Result<ScanResult, WireError> {
    let mut res = ScanResult::default();
    // An explicit stack: hostile nesting cannot exhaust the thread's stack.
    let mut stack: Vec<(M, &[u8], usize, usize)> = vec![(M::Request(signal), buf, 0, 1)];
    while let Some((m, b, off, depth)) = stack.pop() {
        let mut r = Reader::new(b, off);
        let mut attributes = 0usize;
        // A span's or a log record's ids: (trace id, span id) fields.
        let id_fields = match m {
            M::Span => Some((1, 2)),
            M::LogRecord => Some((9, 10)),
            _ => None,
        };
        let (mut trace_id, mut span_id) = (None, None);
        while let Some((n, payload)) = r.next()? {
            let wire = r.wire;
            let kind = field_kind(m, n);
            if let (Some((t, sp)), Some((p, _))) = (id_fields, payload) {
                if n == t {
                    trace_id = Some(p);
                } else if n == sp {
                    span_id = Some(p);
                }
            }
            let ok = match (&kind, wire, payload) {
                (F::Unknown, _, _) => true,
                (F::Varint | F::PackedVarint, 0, _) => true,
                (F::I64 | F::PackedI64, 1, _) => true,
                (F::I32, 5, _) => true,
                (F::Str | F::Msg(_) | F::Bytes, 2, _) => true,
                (F::PackedI64, 2, Some((p, _))) => p.len() % 8 == 0,
                (F::PackedVarint, 2, Some((p, _))) => packed_varints(p),
                _ => false,
            };
            if !ok {
                return Err(WireError {
                    offset: payload.map_or(off, |x| x.1),
                    reason: "a field has the wrong wire type for its schema",
                });
            }
            let Some((p, poff)) = payload else { continue };
            match kind {
                F::Str if !is_utf8(p) => {
                    return Err(WireError {
                        offset: poff,
                        reason: "a string field is not valid UTF-8",
                    });
                }
                // Attributes are most of a request: checked by a direct walk.
                F::Msg(M::KeyValue) => {
                    attributes += 1;
                    if attributes > MAX_ATTRIBUTES {
                        return Err(WireError {
                            offset: poff,
                            reason: "more than 10000 attributes on one item",
                        });
                    }
                    check_kv(p, poff, depth + 1)?
                }
                F::Msg(M::AnyValue) => check_any(p, poff, depth + 1)?,
                F::Msg(inner) => {
                    // A data point of a metric's gauge, sum, histogram, ...
                    if matches!(m, M::Points(_)) && n == 1 {
                        res.items += 1;
                    }
                    if depth >= MAX_DEPTH {
                        return Err(WireError {
                            offset: poff,
                            reason: "messages nest deeper than 64 levels",
                        });
                    }
                    stack.push((inner, p, poff, depth + 1));
                }
                _ => {}
            }
        }
        match m {
            M::Span => {
                res.items += 1;
                if !id_ok(trace_id, 16, false) || !id_ok(span_id, 8, false) {
                    res.invalid_ids += 1;
                }
            }
            M::LogRecord => {
                res.items += 1;
                if !id_ok(trace_id, 16, true) || !id_ok(span_id, 8, true) {
                    res.invalid_ids += 1;
                }
            }
            _ => {}
        }
    }
    Ok(res)
}

#[cfg(test)]
mod profile_tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use opentelemetry_proto::tonic::profiles::v1development::{
        Profile, ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack,
    };
    use prost::Message;

    fn request(stack: Vec<i32>, stack_index: i32) -> Vec<u8> {
        ExportProfilesServiceRequest {
            resource_profiles: vec![ResourceProfiles {
                scope_profiles: vec![ScopeProfiles {
                    profiles: vec![Profile {
                        samples: vec![
                            Sample {
                                stack_index,
                                values: vec![1],
                                ..Default::default()
                            },
                            Sample::default(),
                        ],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
            dictionary: Some(ProfilesDictionary {
                location_table: vec![Default::default(); 3],
                stack_table: vec![
                    Stack::default(),
                    Stack {
                        location_indices: stack,
                    },
                ],
                string_table: vec![String::new()],
                ..Default::default()
            }),
        }
        .encode_to_vec()
    }

    #[test]
    fn a_profiles_request_counts_its_samples_and_refuses_what_points_nowhere() {
        let ok = scan(Signal::Profiles, &request(vec![1, 2], 1)).unwrap();
        assert_eq!(ok.items, 2);
        let e = scan(Signal::Profiles, &request(vec![1, 2], 2)).unwrap_err();
        assert_eq!(e.reason, "a sample points past the dictionary");
        let e = scan(Signal::Profiles, &request(vec![1, 3], 1)).unwrap_err();
        assert_eq!(e.reason, "a stack points past the location table");
        // A million frames: refused whole, at once.
        let e = scan(Signal::Profiles, &request(vec![1; 1_000_000], 1)).unwrap_err();
        assert_eq!(e.reason, "a stack deeper than 4096 frames");
        let e = scan(Signal::Profiles, b"\x0a\xff").unwrap_err();
        assert_eq!(e.reason, "not a valid ExportProfilesServiceRequest");
        // Three values for two timestamps: which value is whose is unknown.
        let mut req = ExportProfilesServiceRequest::decode(&request(vec![1], 1)[..]).unwrap();
        let sm = &mut req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0];
        sm.values = vec![1, 2, 3];
        sm.timestamps_unix_nano = vec![10, 20];
        let e = scan(Signal::Profiles, &req.encode_to_vec()).unwrap_err();
        assert_eq!(
            e.reason,
            "a sample's values and timestamps differ in number"
        );
        // As many values as timestamps, none, or one total: taken.
        for values in [vec![1, 2], vec![], vec![3]] {
            let sm = &mut req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0];
            sm.values = values;
            assert!(scan(Signal::Profiles, &req.encode_to_vec()).is_ok());
        }
    }

    #[test]
    fn a_profiles_batch_is_never_merged_nor_split() {
        let one =
            || crate::model::Batch::from_encoded(Signal::Profiles, request(vec![1], 1).into(), 2);
        let mut a = one();
        assert!(matches!(
            a.append(one()),
            Err(crate::error::CoreError::Unmergeable(Signal::Profiles))
        ));
        assert_eq!(one().split_max(1).unwrap().len(), 1);
        let req = one().to_profiles_request().unwrap().unwrap();
        assert_eq!(
            req.resource_profiles[0].scope_profiles[0].profiles[0]
                .samples
                .len(),
            2
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
        ScopeMetrics,
    };
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    fn span(trace: Vec<u8>, id: Vec<u8>) -> Span {
        Span {
            trace_id: trace,
            span_id: id,
            name: "x".into(),
            ..Default::default()
        }
    }

    #[test]
    fn invalid_utf8_anywhere_and_deep_nesting_are_refused() {
        use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, ArrayValue, KeyValue};
        let ok = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(vec![1; 16], vec![2; 8]); 200],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let buf = ok.encode_to_vec();
        assert_eq!(scan(Signal::Traces, &buf).expect("valid").items, 200);
        // The span name "x" (0x78) made invalid in place: 0xff.
        let mut bad = buf.clone();
        let at = bad.iter().rposition(|&b| b == b'x').expect("a name");
        bad[at] = 0xff;
        let e = scan(Signal::Traces, &bad).expect_err("invalid UTF-8");
        assert_eq!(e.reason, "a string field is not valid UTF-8");
        // Bytes fields may hold anything: an id of 0xff bytes is fine.
        let mut ids = ok.clone();
        ids.resource_spans[0].scope_spans[0].spans[0].trace_id = vec![0xff; 16];
        assert!(scan(Signal::Traces, &ids.encode_to_vec()).is_ok());
        // An attribute value nested 100 arrays deep.
        let mut v = AnyValue {
            value: Some(any_value::Value::StringValue("deep".into())),
        };
        for _ in 0..100 {
            v = AnyValue {
                value: Some(any_value::Value::ArrayValue(ArrayValue { values: vec![v] })),
            };
        }
        let mut deep = ok.clone();
        deep.resource_spans[0].scope_spans[0].spans[0].attributes = vec![KeyValue {
            key: "k".into(),
            value: Some(v),
            ..Default::default()
        }];
        let e = scan(Signal::Traces, &deep.encode_to_vec()).expect_err("too deep");
        assert_eq!(e.reason, "messages nest deeper than 64 levels");
        // 10,001 attributes on one span.
        let mut wide = ok.clone();
        wide.resource_spans[0].scope_spans[0].spans[0].attributes = (0..=MAX_ATTRIBUTES)
            .map(|i| KeyValue {
                key: format!("k{i}"),
                ..Default::default()
            })
            .collect();
        let e = scan(Signal::Traces, &wide.encode_to_vec()).expect_err("too many");
        assert_eq!(e.reason, "more than 10000 attributes on one item");
    }

    #[test]
    fn counts_spans_and_invalid_ids() {
        let req = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(vec![1; 16], vec![2; 8]), span(vec![1; 16], vec![0; 8])],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
                ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(vec![1; 15], vec![2; 8])],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        let buf = req.encode_to_vec();
        let r = scan(Signal::Traces, &buf).expect("valid");
        assert_eq!(r.items, 3);
        assert_eq!(r.invalid_ids, 2);
    }

    #[test]
    fn counts_log_records_whose_ids_are_optional() {
        use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
        use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
        let rec = |trace_id: Vec<u8>, span_id: Vec<u8>| LogRecord {
            trace_id,
            span_id,
            ..Default::default()
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![
                        rec(vec![], vec![]),          // no ids: valid
                        rec(vec![1; 16], vec![2; 8]), // valid
                        rec(vec![1; 15], vec![]),     // a short trace id
                        rec(vec![1; 16], vec![0; 8]), // an all-zero span id
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let r = scan(Signal::Logs, &req.encode_to_vec()).expect("valid");
        assert_eq!((r.items, r.invalid_ids), (4, 2));
    }

    #[test]
    fn counts_data_points() {
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![
                        Metric {
                            name: "g".into(),
                            data: Some(metric::Data::Gauge(Gauge {
                                data_points: vec![NumberDataPoint::default(); 3],
                            })),
                            ..Default::default()
                        },
                        Metric {
                            name: "h".into(),
                            data: Some(metric::Data::Histogram(Histogram {
                                data_points: vec![HistogramDataPoint::default(); 2],
                                aggregation_temporality: 2,
                            })),
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let r = scan(Signal::Metrics, &req.encode_to_vec()).expect("valid");
        assert_eq!(r.items, 5);
    }

    #[test]
    fn rejects_truncated_and_garbage() {
        let req = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(vec![1; 16], vec![2; 8])],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let buf = req.encode_to_vec();
        for cut in 1..buf.len() {
            // Every strict prefix either fails or yields fewer items; none panics.
            if let Ok(r) = scan(Signal::Traces, &buf[..cut]) {
                assert!(r.items <= 1);
            }
        }
        assert!(scan(Signal::Traces, &[0x0b, 0xff, 0xff]).is_err());
        assert!(scan(Signal::Traces, &[0x0a, 0x7f]).is_err());
    }

    #[test]
    fn concatenated_requests_scan_as_one() {
        let one = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(vec![1; 16], vec![2; 8])],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec();
        let mut two = one.clone();
        two.extend_from_slice(&one);
        assert_eq!(scan(Signal::Traces, &two).expect("valid").items, 2);
        let decoded = ExportTraceServiceRequest::decode(two.as_slice()).expect("decodes");
        assert_eq!(decoded.resource_spans.len(), 2);
    }
}

/// A field read by [`Fields`].
#[derive(Debug, Clone, Copy)]
pub struct Field<'a> {
    /// Field number.
    pub number: u32,
    /// The value.
    pub value: Value<'a>,
    /// The whole field as encoded: key, length prefix and payload.
    pub raw: &'a [u8],
}

/// A field's value.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1.
    Fixed64(u64),
    /// Wire type 5.
    Fixed32(u32),
    /// Wire type 2.
    Bytes(&'a [u8]),
}

impl<'a> Value<'a> {
    /// The payload of a length-delimited field.
    pub fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// An iterator over the fields of one message, checking framing. It stops
/// with `Some(Err)` at the first malformed field.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> Fields<'a> {
    /// Iterate the fields of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Fields {
            buf,
            pos: 0,
            failed: false,
        }
    }

    #[inline(always)]
    fn varint(&mut self) -> Result<u64, WireError> {
        varint(self.buf, &mut self.pos).map_err(|reason| self.err(reason))
    }

    #[cold]
    fn err(&self, reason: &'static str) -> WireError {
        WireError {
            offset: self.pos,
            reason,
        }
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.buf.len() - self.pos < n {
            return Err(self.err("field runs past the end of its message"));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    #[inline(always)]
    fn read(&mut self) -> Result<Field<'a>, WireError> {
        let start = self.pos;
        let key = self.varint()?;
        let number = (key >> 3) as u32;
        if number == 0 {
            return Err(self.err("field number 0"));
        }
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => {
                let b = self.take(8)?;
                Value::Fixed64(u64::from_le_bytes([
                    b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7],
                ]))
            }
            5 => {
                let b = self.take(4)?;
                Value::Fixed32(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            }
            2 => {
                let len =
                    usize::try_from(self.varint()?).map_err(|_| self.err("length overflows"))?;
                Value::Bytes(self.take(len)?)
            }
            _ => return Err(self.err("unsupported wire type (groups are not allowed in OTLP)")),
        };
        Ok(Field {
            number,
            value,
            raw: &self.buf[start..self.pos],
        })
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<Field<'a>, WireError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let r = self.read();
        self.failed = r.is_err();
        Some(r)
    }
}

/// Append a varint.
pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// The encoded size of a varint.
pub fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// Append the key and length prefix of a length-delimited field.
pub fn put_len_prefix(out: &mut Vec<u8>, field: u32, len: usize) {
    put_varint(out, (u64::from(field) << 3) | 2);
    put_varint(out, len as u64);
}

/// The size of a length-delimited field with a payload of `len` bytes (field numbers below 16).
pub fn len_field_size(len: usize) -> usize {
    1 + varint_len(len as u64) + len
}

#[cfg(test)]
mod field_tests {
    use super::*;

    #[test]
    fn varint_sizes_and_fields_round_trip() {
        for v in [0u64, 1, 127, 128, 16383, 16384, u64::MAX] {
            let mut b = vec![];
            put_varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
        let mut msg = vec![];
        put_len_prefix(&mut msg, 2, 3);
        msg.extend_from_slice(b"abc");
        msg.extend_from_slice(&[0x08, 0x96, 0x01]); // field 1 varint 150
        let fields: Vec<Field<'_>> = Fields::new(&msg).collect::<Result<_, _>>().expect("valid");
        assert_eq!(fields[0].number, 2);
        assert_eq!(fields[0].value.bytes(), Some(&b"abc"[..]));
        assert_eq!(fields[0].raw.len(), 5);
        assert!(matches!(fields[1].value, Value::Varint(150)));
        assert!(Fields::new(&[0x0a, 0x05, 0x01])
            .next()
            .expect("one")
            .is_err());
    }
}

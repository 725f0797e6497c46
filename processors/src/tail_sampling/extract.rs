//! Reading spans out of encoded requests without decoding them, and writing
//! kept spans back as a request.
//!
//! Each span is kept as its own encoded bytes. Its resource and scope (every
//! field of `ResourceSpans` and `ScopeSpans` except the children) are kept
//! once per request and shared, so that kept spans can be re-wrapped exactly
//! as they arrived. Only the few fields the policies read are extracted.

use bytes::Bytes;
use causeway_core::wire::{self, Field, Fields, Value, WireError};
use std::collections::HashMap;
use std::sync::Arc;

/// An attribute value the policies can read.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    /// String.
    Str(Box<str>),
    /// Integer.
    Int(i64),
    /// Double.
    Double(f64),
    /// Boolean.
    Bool(bool),
}

/// The attribute keys the policies read, numbered; and the topology's
/// shared state, for policies that read other components' state.
#[derive(Debug, Default, Clone)]
pub struct Keys {
    /// Shared state of the topology.
    pub shared: causeway_core::shared::Shared,
    index: HashMap<Vec<u8>, u16, foldhash::fast::RandomState>,
    /// Bit `len % 64` is set when a key of that length is wanted: most
    /// attribute keys of a span are rejected without hashing them.
    lengths: u64,
    names: Vec<String>,
    /// `tracestate` list-member keys the policies read, with their numbers.
    trace_state: Vec<(Vec<u8>, u16)>,
    /// The attributes naming a trace's route, when a policy reads routes.
    route: Option<Vec<String>>,
}

impl Keys {
    /// The number of `key`, adding it if new.
    pub fn add(&mut self, key: &str) -> u16 {
        if let Some(i) = self.index.get(key.as_bytes()) {
            return *i;
        }
        let i = self.names.len() as u16;
        self.index.insert(key.as_bytes().to_vec(), i);
        self.lengths |= 1 << (key.len() % 64);
        self.names.push(key.to_string());
        i
    }

    /// Name the route attributes (the first policy to name them wins).
    pub fn set_route_attributes(&mut self, attributes: &[String]) {
        if self.route.is_none() {
            self.route = Some(attributes.to_vec());
        }
    }

    /// The route attributes a policy named, if any.
    pub fn route_attributes(&self) -> Option<&[String]> {
        self.route.as_deref()
    }

    /// The number of the `tracestate` member `key`, adding it if new. Its
    /// value is read as a string attribute of that number.
    pub fn add_trace_state(&mut self, key: &str) -> u16 {
        if let Some((_, i)) = self.trace_state.iter().find(|(k, _)| k == key.as_bytes()) {
            return *i;
        }
        let i = self.names.len() as u16;
        self.names.push(format!("tracestate:{key}"));
        self.trace_state.push((key.as_bytes().to_vec(), i));
        i
    }

    /// The members of interest of a W3C `tracestate` header value; none when
    /// it does not parse (a member without `=`), as the Collector skips it.
    pub(crate) fn trace_state<'a>(&self, ts: &'a [u8], out: &mut Vec<(u16, AttrRef<'a>)>) {
        let start = out.len();
        for member in ts.split(|b| *b == b',') {
            let member = member.trim_ascii();
            if member.is_empty() {
                continue;
            }
            let Some(eq) = member.iter().position(|b| *b == b'=') else {
                out.truncate(start);
                return;
            };
            let (k, v) = (&member[..eq], &member[eq + 1..]);
            if let Some((_, i)) = self.trace_state.iter().find(|(key, _)| key == k) {
                out.push((*i, AttrRef::Str(v)));
            }
        }
    }

    #[inline]
    fn get(&self, key: &[u8]) -> Option<u16> {
        if self.lengths & (1 << (key.len() % 64)) == 0 {
            return None;
        }
        self.index.get(key).copied()
    }
}

/// The resource and scope of a run of spans, as encoded.
#[derive(Debug)]
pub struct Group {
    /// Every field of the `ResourceSpans` except `scope_spans`.
    pub resource_part: Bytes,
    /// Every field of the `ScopeSpans` except `spans`.
    pub scope_part: Bytes,
    /// Resource attributes the policies read.
    pub resource_attrs: Vec<(u16, AttrValue)>,
}

/// An attribute value as it sits in the request (strings not copied).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AttrRef<'a> {
    /// String, as encoded (validated UTF-8 by the receiver).
    Str(&'a [u8]),
    /// Integer.
    Int(i64),
    /// Double.
    Double(f64),
    /// Boolean.
    Bool(bool),
}

impl AttrRef<'_> {
    /// An owned copy.
    pub fn owned(self) -> AttrValue {
        match self {
            AttrRef::Str(b) => AttrValue::Str(String::from_utf8_lossy(b).into()),
            AttrRef::Int(i) => AttrValue::Int(i),
            AttrRef::Double(d) => AttrValue::Double(d),
            AttrRef::Bool(b) => AttrValue::Bool(b),
        }
    }
}

impl AttrValue {
    /// Whether this is the value `r` refers to.
    pub fn is(&self, r: &AttrRef<'_>) -> bool {
        match (self, r) {
            (AttrValue::Str(a), AttrRef::Str(b)) => a.as_bytes() == *b,
            (AttrValue::Int(a), AttrRef::Int(b)) => a == b,
            (AttrValue::Double(a), AttrRef::Double(b)) => a == b,
            (AttrValue::Bool(a), AttrRef::Bool(b)) => a == b,
            _ => false,
        }
    }
}

/// What the policies need of a span.
#[derive(Debug)]
pub struct SpanInfo<'a> {
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Whether the span has no parent.
    pub is_root: bool,
    /// Span name.
    pub name: &'a [u8],
    /// Start, ns since epoch.
    pub start: u64,
    /// End, ns since epoch.
    pub end: u64,
    /// Status code: 0 unset, 1 ok, 2 error.
    pub status: u64,
    /// Attributes the policies read.
    pub attrs: &'a [(u16, AttrRef<'a>)],
    /// The span, as encoded (without its field key and length).
    pub raw: &'a [u8],
}

fn any_value(buf: &[u8]) -> Result<Option<AttrRef<'_>>, WireError> {
    let Some(f) = Fields::new(buf).next() else {
        return Ok(None);
    };
    let f = f?;
    Ok(match (f.number, f.value) {
        (1, Value::Bytes(b)) => Some(AttrRef::Str(b)),
        (2, Value::Varint(v)) => Some(AttrRef::Bool(v != 0)),
        (3, Value::Varint(v)) => Some(AttrRef::Int(v as i64)),
        (4, Value::Fixed64(v)) => Some(AttrRef::Double(f64::from_bits(v))),
        _ => None,
    })
}

/// Read the attributes of interest from a `KeyValue` field payload.
fn key_value<'a>(
    buf: &'a [u8],
    keys: &Keys,
    out: &mut Vec<(u16, AttrRef<'a>)>,
) -> Result<(), WireError> {
    // Encoders write the key first, and most keys are not wanted: such an
    // attribute is passed over without a walk (as the walk below would, at
    // its first key).
    if let [0x0a, len, rest @ ..] = buf {
        let len = usize::from(*len);
        if len < 0x80 && rest.len() >= len && keys.get(&rest[..len]).is_none() {
            return Ok(());
        }
    }
    let mut key = None;
    let mut value = None;
    for f in Fields::new(buf) {
        let f = f?;
        match (f.number, f.value) {
            (1, Value::Bytes(k)) => match keys.get(k) {
                Some(i) => key = Some(i),
                None => return Ok(()),
            },
            (2, Value::Bytes(v)) => value = Some(v),
            _ => {}
        }
    }
    if let (Some(k), Some(v)) = (key, value) {
        if let Some(v) = any_value(v)? {
            out.push((k, v));
        }
    }
    Ok(())
}

/// Every field of `buf` except the `children` (which [`children`] walks).
fn part_without(buf: &[u8], children: u32) -> Result<Bytes, WireError> {
    let mut part = Vec::new();
    for f in Fields::new(buf) {
        let f = f?;
        if f.number != children {
            part.extend_from_slice(f.raw);
        }
    }
    Ok(Bytes::from(part))
}

/// The payloads of the `number` fields of `buf` (already walked by [`part_without`]).
fn children(buf: &[u8], number: u32) -> impl Iterator<Item = &[u8]> {
    Fields::new(buf)
        .filter_map(move |f| f.ok().filter(|f| f.number == number))
        .filter_map(|f| f.value.bytes())
}

/// Walk an encoded `ExportTraceServiceRequest`, calling `f` for every span.
pub fn for_each_span(
    buf: &[u8],
    keys: &Keys,
    mut f: impl FnMut(&Arc<Group>, SpanInfo<'_>),
) -> Result<(), WireError> {
    // One buffer for every span's attributes of interest.
    let mut attrs: Vec<(u16, AttrRef<'_>)> = Vec::new();
    for rs in Fields::new(buf) {
        let rs = rs?;
        let Some(rs_buf) = (rs.number == 1).then(|| rs.value.bytes()).flatten() else {
            continue;
        };
        let resource_part = part_without(rs_buf, 2)?;
        let mut resource_refs = Vec::new();
        for rf in Fields::new(&resource_part) {
            let rf = rf?;
            if let (1, Value::Bytes(res)) = (rf.number, rf.value) {
                for a in Fields::new(res) {
                    let a = a?;
                    if let (1, Value::Bytes(kv)) = (a.number, a.value) {
                        key_value(kv, keys, &mut resource_refs)?;
                    }
                }
            }
        }
        let resource_attrs: Vec<(u16, AttrValue)> =
            resource_refs.iter().map(|(k, v)| (*k, v.owned())).collect();
        for ss_buf in children(rs_buf, 2) {
            let scope_part = part_without(ss_buf, 2)?;
            let group = Arc::new(Group {
                resource_part: resource_part.clone(),
                scope_part,
                resource_attrs: resource_attrs.clone(),
            });
            for raw in children(ss_buf, 2) {
                attrs.clear();
                let mut info = SpanInfo {
                    trace_id: [0; 16],
                    is_root: true,
                    name: &[],
                    start: 0,
                    end: 0,
                    status: 0,
                    attrs: &[],
                    raw,
                };
                for field in Fields::new(raw) {
                    let field = field?;
                    match (field.number, field.value) {
                        (1, Value::Bytes(t)) if t.len() == 16 => info.trace_id.copy_from_slice(t),
                        (3, Value::Bytes(ts)) if !keys.trace_state.is_empty() => {
                            keys.trace_state(ts, &mut attrs)
                        }
                        (4, Value::Bytes(p)) => info.is_root = p.is_empty(),
                        (5, Value::Bytes(n)) => info.name = n,
                        (7, Value::Fixed64(t)) => info.start = t,
                        (8, Value::Fixed64(t)) => info.end = t,
                        (9, Value::Bytes(kv)) => key_value(kv, keys, &mut attrs)?,
                        (15, Value::Bytes(st)) => {
                            for s in Fields::new(st) {
                                if let Ok(Field {
                                    number: 3,
                                    value: Value::Varint(c),
                                    ..
                                }) = s
                                {
                                    info.status = c;
                                }
                            }
                        }
                        _ => {}
                    }
                }
                info.attrs = &attrs;
                f(&group, info);
            }
        }
    }
    Ok(())
}

/// A span held for a decision.
#[derive(Debug)]
pub struct Held {
    /// The span's encoded bytes.
    pub raw: Box<[u8]>,
    /// Its resource and scope.
    pub group: Arc<Group>,
}

/// A group and its spans with their extra bytes.
type GroupSpans<'a> = (&'a Arc<Group>, Vec<(&'a [u8], &'a [u8])>);

/// Write spans back as an encoded `ExportTraceServiceRequest`, appending
/// `extra` (encoded span fields, e.g. an attribute) to every span. Spans
/// sharing a group are written under one `ResourceSpans`/`ScopeSpans`.
pub fn encode<'a>(spans: impl IntoIterator<Item = (&'a Held, &'a [u8])>, out: &mut Vec<u8>) {
    // Group by the group's address, keeping first-seen order.
    let mut order: Vec<*const Group> = Vec::new();
    let mut by_group: HashMap<*const Group, GroupSpans<'_>> = HashMap::new();
    for (h, extra) in spans {
        let key = Arc::as_ptr(&h.group);
        by_group
            .entry(key)
            .or_insert_with(|| {
                order.push(key);
                (&h.group, Vec::new())
            })
            .1
            .push((&h.raw, extra));
    }
    for key in order {
        let Some((group, spans)) = by_group.get(&key) else {
            continue;
        };
        let spans_len: usize = spans
            .iter()
            .map(|(r, e)| wire::len_field_size(r.len() + e.len()))
            .sum();
        let scope_len = group.scope_part.len() + spans_len;
        let resource_len = group.resource_part.len() + wire::len_field_size(scope_len);
        wire::put_len_prefix(out, 1, resource_len);
        out.extend_from_slice(&group.resource_part);
        wire::put_len_prefix(out, 2, scope_len);
        out.extend_from_slice(&group.scope_part);
        for (raw, extra) in spans {
            wire::put_len_prefix(out, 2, raw.len() + extra.len());
            out.extend_from_slice(raw);
            out.extend_from_slice(extra);
        }
    }
}

/// An encoded span attribute field (`attributes`, field 9) with a string value.
pub fn string_attribute(key: &str, value: &str) -> Vec<u8> {
    let mut any = Vec::new();
    wire::put_len_prefix(&mut any, 1, value.len());
    any.extend_from_slice(value.as_bytes());
    attribute(key, &any)
}

/// An encoded span attribute field with a double value.
pub fn double_attribute(key: &str, value: f64) -> Vec<u8> {
    let mut any = vec![0x21]; // field 4, fixed64
    any.extend_from_slice(&value.to_bits().to_le_bytes());
    attribute(key, &any)
}

fn attribute(key: &str, any: &[u8]) -> Vec<u8> {
    let mut kv = Vec::new();
    wire::put_len_prefix(&mut kv, 1, key.len());
    kv.extend_from_slice(key.as_bytes());
    wire::put_len_prefix(&mut kv, 2, any.len());
    kv.extend_from_slice(any);
    let mut out = Vec::new();
    wire::put_len_prefix(&mut out, 9, kv.len());
    out.extend_from_slice(&kv);
    out
}

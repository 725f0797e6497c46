//! Parsers for gateway access-log lines: JSON, Envoy JSON, NGINX (combined
//! text or JSON `log_format`) and named-capture regexes, all producing the
//! same canonical fields, then an OTLP log record.

use causeway_core::wire;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

/// The fields the receiver understands, whatever a format calls them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Canon {
    /// Trace id (hex).
    TraceId,
    /// Span id (hex).
    SpanId,
    /// W3C `traceparent`.
    Traceparent,
    /// B3 trace id.
    B3TraceId,
    /// Request id (used as trace id when it is 32 hex digits or a UUID).
    RequestId,
    /// The gateway's route id.
    RouteId,
    /// HTTP status.
    Status,
    /// Duration in milliseconds.
    DurationMs,
    /// Duration in seconds (NGINX `$request_time`).
    RequestTime,
    /// Upstream time in seconds (NGINX `$upstream_response_time`).
    UpstreamTime,
    /// Upstream time in milliseconds (Envoy `x-envoy-upstream-service-time`).
    UpstreamMs,
    /// Rate-limit rule that applied.
    RateLimitRule,
    /// Circuit-breaker state.
    CircuitState,
    /// Envoy response flags.
    ResponseFlags,
    /// HTTP method.
    Method,
    /// URL path.
    Path,
    /// Upstream host.
    Upstream,
    /// Client address.
    ClientIp,
    /// Timestamp.
    Timestamp,
}

impl Canon {
    /// The name used in `fields:` config.
    pub fn name(self) -> &'static str {
        match self {
            Canon::TraceId => "trace_id",
            Canon::SpanId => "span_id",
            Canon::Traceparent => "traceparent",
            Canon::B3TraceId => "b3_trace_id",
            Canon::RequestId => "request_id",
            Canon::RouteId => "route_id",
            Canon::Status => "status_code",
            Canon::DurationMs => "duration_ms",
            Canon::RequestTime => "request_time",
            Canon::UpstreamTime => "upstream_response_time",
            Canon::UpstreamMs => "upstream_service_time_ms",
            Canon::RateLimitRule => "rate_limit_rule",
            Canon::CircuitState => "circuit_state",
            Canon::ResponseFlags => "response_flags",
            Canon::Method => "method",
            Canon::Path => "path",
            Canon::Upstream => "upstream",
            Canon::ClientIp => "client_ip",
            Canon::Timestamp => "timestamp",
        }
    }

    /// Every canonical field.
    pub const ALL: [Canon; 19] = [
        Canon::TraceId,
        Canon::SpanId,
        Canon::Traceparent,
        Canon::B3TraceId,
        Canon::RequestId,
        Canon::RouteId,
        Canon::Status,
        Canon::DurationMs,
        Canon::RequestTime,
        Canon::UpstreamTime,
        Canon::UpstreamMs,
        Canon::RateLimitRule,
        Canon::CircuitState,
        Canon::ResponseFlags,
        Canon::Method,
        Canon::Path,
        Canon::Upstream,
        Canon::ClientIp,
        Canon::Timestamp,
    ];

    /// From its config name.
    pub fn from_name(s: &str) -> Option<Canon> {
        Canon::ALL.into_iter().find(|c| c.name() == s)
    }

    /// Key names gateways commonly use, in priority order (JSON, Envoy and NGINX JSON).
    fn defaults(self) -> &'static [&'static str] {
        match self {
            Canon::TraceId => &["trace_id", "traceId", "trace.id", "traceID"],
            Canon::SpanId => &["span_id", "spanId", "span.id"],
            Canon::Traceparent => &["traceparent", "http_traceparent"],
            Canon::B3TraceId => &["x_b3_traceid", "x-b3-traceid", "http_x_b3_traceid"],
            Canon::RequestId => &[
                "x_request_id",
                "x-request-id",
                "request_id",
                "http_x_request_id",
            ],
            Canon::RouteId => &["route_id", "routeId", "route_name", "route"],
            Canon::Status => &["status_code", "response_code", "status"],
            Canon::DurationMs => &["duration_ms", "latency_ms", "duration"],
            Canon::RequestTime => &["request_time"],
            Canon::UpstreamTime => &["upstream_response_time"],
            Canon::UpstreamMs => &["x-envoy-upstream-service-time", "upstream_service_time_ms"],
            Canon::RateLimitRule => &["rate_limit_rule"],
            Canon::CircuitState => &["circuit_state"],
            Canon::ResponseFlags => &["response_flags"],
            Canon::Method => &["method", "request_method", "http_method"],
            Canon::Path => &["path", "request_uri", "uri", "url", "x-envoy-origin-path"],
            Canon::Upstream => &["upstream", "upstream_host", "upstream_addr"],
            Canon::ClientIp => &[
                "client_ip",
                "remote_addr",
                "downstream_remote_address",
                "client_address",
            ],
            Canon::Timestamp => &[
                "timestamp",
                "time",
                "@timestamp",
                "ts",
                "start_time",
                "time_iso8601",
                "time_local",
            ],
        }
    }
}

/// Why a line could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError(pub String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The canonical fields found in a line.
#[derive(Debug, Default)]
pub struct Fields<'a> {
    values: Vec<(Canon, Val<'a>)>,
}

/// A value as it appeared.
#[derive(Debug, Clone)]
pub enum Val<'a> {
    /// Text.
    Str(Cow<'a, str>),
    /// Number.
    Num(f64),
}

impl<'a> Val<'a> {
    fn as_str(&self) -> Cow<'_, str> {
        match self {
            Val::Str(s) => Cow::Borrowed(s.as_ref()),
            Val::Num(n) if n.fract() == 0.0 && n.abs() < 1e15 => {
                Cow::Owned(format!("{}", *n as i64))
            }
            Val::Num(n) => Cow::Owned(n.to_string()),
        }
    }
    fn as_f64(&self) -> Option<f64> {
        match self {
            Val::Num(n) => Some(*n),
            // Google Cloud writes durations as "0.123456s".
            Val::Str(s) => {
                let s = s.trim();
                s.parse()
                    .ok()
                    .or_else(|| s.strip_suffix('s').and_then(|x| x.parse().ok()))
            }
        }
    }

    /// A sum of times written "0.012, 0.340 : 0.001" (NGINX, one per
    /// upstream tried); a single number as it is.
    fn sum_f64(&self) -> Option<f64> {
        if let Some(n) = self.as_f64() {
            return Some(n);
        }
        let s = self.as_str();
        let parts: Vec<f64> = s
            .split([',', ':'])
            .filter_map(|x| x.trim().parse::<f64>().ok())
            .collect();
        (!parts.is_empty()).then(|| parts.iter().sum())
    }
}

impl<'a> Fields<'a> {
    fn set(&mut self, c: Canon, v: Val<'a>) {
        if let Val::Str(s) = &v {
            // Envoy and NGINX write "-" for "no value".
            if s.is_empty() || s == "-" {
                return;
            }
        }
        if !self.values.iter().any(|(k, _)| *k == c) {
            self.values.push((c, v));
        }
    }

    /// The value of a canonical field.
    pub fn get(&self, c: Canon) -> Option<&Val<'a>> {
        self.values.iter().find(|(k, _)| *k == c).map(|(_, v)| v)
    }

    fn str(&self, c: Canon) -> Option<Cow<'_, str>> {
        self.get(c).map(Val::as_str)
    }
}

/// A line format.
pub enum Format {
    /// ingress-nginx: its default text `log-format-upstream`, or a JSON
    /// `log-format-upstream` with its variable names.
    IngressNginx(KeyMap, regex::Regex),
    /// One JSON object a line; keys mapped by priority.
    Json(KeyMap),
    /// Envoy's JSON access log.
    Envoy(KeyMap),
    /// NGINX `combined` (+ `$request_time $upstream_response_time`), or a JSON `log_format`.
    Nginx(KeyMap),
    /// Named captures, named after the canonical fields.
    Regex(regex::Regex),
    /// AWS Application Load Balancer: the regex of its log, and the three
    /// processing times added up.
    AwsAlb(regex::Regex),
}

/// One key of a preset: the field it holds, and the factor that brings a
/// number to the field's unit (Traefik's nanoseconds to milliseconds: 1e-6).
pub type PresetKey = (Canon, &'static str, f64);

/// JSON key (a dotted path for nested objects: `response.status`) →
/// (canonical field, priority, scale).
pub struct KeyMap {
    keys: HashMap<String, (Canon, u8, f64)>,
    /// Every proper prefix of a dotted key: the objects worth entering.
    prefixes: std::collections::HashSet<String>,
}

impl KeyMap {
    /// The default key names, with `overrides` (canonical name → key) taking precedence.
    pub fn new(overrides: &[(Canon, String)]) -> KeyMap {
        KeyMap::with_preset(&[], overrides)
    }

    /// A gateway's own key names first, then the defaults; `overrides`
    /// (canonical name → key) before both.
    pub fn with_preset(preset: &[PresetKey], overrides: &[(Canon, String)]) -> KeyMap {
        let mut m = HashMap::new();
        for (i, (c, k, scale)) in preset.iter().enumerate() {
            m.entry((*k).to_string())
                .or_insert((*c, (i + 1).min(99) as u8, *scale));
        }
        for c in Canon::ALL {
            for (i, k) in c.defaults().iter().enumerate() {
                m.entry((*k).to_string()).or_insert((c, 100 + i as u8, 1.0));
            }
        }
        for (c, k) in overrides {
            m.insert(k.clone(), (*c, 0, 1.0));
        }
        let mut prefixes = std::collections::HashSet::new();
        for k in m.keys() {
            let mut at = 0;
            while let Some(i) = k[at..].find('.') {
                prefixes.insert(k[..at + i].to_string());
                at += i + 1;
            }
        }
        KeyMap { keys: m, prefixes }
    }
}

/// A JSON string or key, borrowed when it has no escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

type Found<'a> = Vec<(Canon, u8, f64, &'a RawValue)>;

/// The entries of a JSON object whose keys (or dotted paths, under
/// `prefix`) are in the key map.
struct Object<'a, 'm> {
    keys: &'m KeyMap,
    prefix: String,
    found: Found<'a>,
}

impl<'de, 'm> serde::de::DeserializeSeed<'de> for Object<'de, 'm> {
    type Value = Found<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, 'm> Visitor<'de> for Object<'de, 'm> {
    type Value = Found<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        while let Some(k) = map.next_key::<Text<'de>>()? {
            let v: &'de RawValue = map.next_value()?;
            let path: Cow<'_, str> = if self.prefix.is_empty() {
                Cow::Borrowed(k.0.as_ref())
            } else {
                Cow::Owned(format!("{}.{}", self.prefix, k.0))
            };
            // An object under a key that is also a field name (Kong's
            // `route`) is entered: an object is never a field's value.
            if v.get().starts_with('{') && self.keys.prefixes.contains(path.as_ref()) {
                use serde::de::DeserializeSeed;
                let mut de = serde_json::Deserializer::from_str(v.get());
                let inner = Object {
                    keys: self.keys,
                    prefix: path.into_owned(),
                    found: std::mem::take(&mut self.found),
                }
                .deserialize(&mut de)
                .map_err(serde::de::Error::custom)?;
                self.found = inner;
            } else if let Some((c, prio, scale)) = self.keys.keys.get(path.as_ref()) {
                self.found.push((*c, *prio, *scale, v));
            }
        }
        Ok(self.found)
    }
}

fn json_val(raw: &RawValue) -> Option<Val<'_>> {
    let s = raw.get();
    match s.as_bytes().first()? {
        b'"' => serde_json::from_str::<Text<'_>>(s)
            .ok()
            .map(|t| Val::Str(t.0)),
        b'-' | b'0'..=b'9' => s.parse().ok().map(Val::Num),
        _ => None, // null, booleans, objects and arrays carry nothing we read
    }
}

fn parse_json<'a>(line: &'a str, keys: &KeyMap) -> Result<Fields<'a>, ParseError> {
    use serde::de::DeserializeSeed;
    let mut de = serde_json::Deserializer::from_str(line);
    let mut found = Object {
        keys,
        prefix: String::new(),
        found: Vec::new(),
    }
    .deserialize(&mut de)
    .map_err(|e| ParseError(format!("invalid JSON: {e}")))?;
    de.end()
        .map_err(|e| ParseError(format!("invalid JSON: {e}")))?;
    found.sort_by_key(|(c, p, _, _)| (*c, *p));
    let mut f = Fields::default();
    for (c, _, scale, raw) in found {
        match json_val(raw) {
            Some(v) if scale != 1.0 => {
                if let Some(n) = v.as_f64() {
                    f.set(c, Val::Num(n * scale));
                }
            }
            Some(v) => f.set(c, v),
            None => {}
        }
    }
    Ok(f)
}

/// `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" [$request_time [$upstream_response_time]]`
fn parse_nginx_combined(line: &str) -> Result<Fields<'_>, ParseError> {
    let bad = |what: &str| ParseError(format!("not an NGINX combined line: {what}"));
    let (remote, rest) = line
        .split_once(' ')
        .ok_or_else(|| bad("no remote address"))?;
    let open = rest.find('[').ok_or_else(|| bad("no [time_local]"))?;
    let close = rest[open..]
        .find(']')
        .ok_or_else(|| bad("unterminated [time_local]"))?
        + open;
    let time = &rest[open + 1..close];
    let rest = rest[close + 1..].trim_start();
    let (request, rest) = quoted(rest).ok_or_else(|| bad("no \"request\""))?;
    let mut it = rest.split_whitespace();
    let status = it.next().ok_or_else(|| bad("no status"))?;
    let status: f64 = status.parse().map_err(|_| bad("status is not a number"))?;
    let _bytes = it.next().ok_or_else(|| bad("no body_bytes_sent"))?;
    let rest = rest.trim_start();
    let rest = rest.split_once(' ').map(|x| x.1).unwrap_or("").trim_start();
    let rest = rest.split_once(' ').map(|x| x.1).unwrap_or("").trim_start();
    let (_referer, rest) = quoted(rest).ok_or_else(|| bad("no \"http_referer\""))?;
    let (_agent, rest) = quoted(rest.trim_start()).ok_or_else(|| bad("no \"http_user_agent\""))?;
    let mut f = Fields::default();
    f.set(Canon::ClientIp, Val::Str(Cow::Borrowed(remote)));
    f.set(Canon::Timestamp, Val::Str(Cow::Borrowed(time)));
    let mut parts = request.splitn(3, ' ');
    if let Some(m) = parts.next() {
        f.set(Canon::Method, Val::Str(Cow::Borrowed(m)));
    }
    if let Some(p) = parts.next() {
        f.set(
            Canon::Path,
            Val::Str(Cow::Borrowed(p.split('?').next().unwrap_or(p))),
        );
    }
    f.set(Canon::Status, Val::Num(status));
    let rest = rest.trim();
    if !rest.is_empty() {
        let (rt, ut) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        f.set(Canon::RequestTime, Val::Str(Cow::Borrowed(rt)));
        // "0.012, 0.340" when NGINX tried several upstreams: the total is their sum.
        let times: Vec<f64> = ut
            .split(',')
            .filter_map(|x| x.trim().parse::<f64>().ok())
            .collect();
        if !times.is_empty() {
            f.set(Canon::UpstreamTime, Val::Num(times.iter().sum()));
        }
    }
    Ok(f)
}

/// A `"…"` field (with `\"` escapes) and what follows it.
fn quoted(s: &str) -> Option<(&str, &str)> {
    let s = s.strip_prefix('"')?;
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return Some((&s[..i], &s[i + 1..])),
            _ => i += 1,
        }
    }
    None
}

impl Format {
    /// Parse one line.
    pub fn parse<'a>(&self, line: &'a str) -> Result<Fields<'a>, ParseError> {
        match self {
            Format::Json(k) | Format::Envoy(k) => parse_json(line, k),
            Format::IngressNginx(k, re) => {
                if line.trim_start().starts_with('{') {
                    parse_json(line, k)
                } else {
                    regex_fields(re, line)
                }
            }
            Format::Nginx(k) => {
                if line.trim_start().starts_with('{') {
                    parse_json(line, k)
                } else {
                    parse_nginx_combined(line)
                }
            }
            Format::Regex(re) => regex_fields(re, line),
            Format::AwsAlb(re) => {
                let caps = re
                    .captures(line)
                    .ok_or_else(|| ParseError("not an AWS ALB access log line".into()))?;
                let mut f = regex_fields(re, line)?;
                // -1 when the load balancer could not send the request on (or
                // the target closed the connection): that part is not counted.
                let time = |n: &str| {
                    caps.name(n)
                        .and_then(|m| m.as_str().parse::<f64>().ok())
                        .filter(|t| *t >= 0.0)
                };
                let (req, target, resp) = (time("rpt"), time("tpt"), time("spt"));
                if req.is_some() || target.is_some() || resp.is_some() {
                    f.set(
                        Canon::RequestTime,
                        Val::Num(req.unwrap_or(0.0) + target.unwrap_or(0.0) + resp.unwrap_or(0.0)),
                    );
                }
                if let Some(t) = target {
                    f.set(Canon::UpstreamTime, Val::Num(t));
                }
                Ok(f)
            }
        }
    }
}

/// The named captures of `re` on `line` that are canonical field names.
fn regex_fields<'a>(re: &regex::Regex, line: &'a str) -> Result<Fields<'a>, ParseError> {
    let caps = re
        .captures(line)
        .ok_or_else(|| ParseError("line does not match the regex".into()))?;
    let mut f = Fields::default();
    for name in re.capture_names().flatten() {
        if let (Some(c), Some(m)) = (Canon::from_name(name), caps.name(name)) {
            f.set(c, Val::Str(Cow::Borrowed(m.as_str())));
        }
    }
    Ok(f)
}

/// Nanoseconds since the epoch from RFC 3339, NGINX `time_local`, or epoch s/ms/µs/ns.
pub fn parse_time(v: &Val<'_>) -> Option<u64> {
    // Integers are scaled exactly; floats (seconds with a fraction) approximately.
    if let Ok(n) = v.as_str().trim().parse::<u64>() {
        return match n {
            0 => None,
            n if n < 100_000_000_000 => n.checked_mul(1_000_000_000),
            n if n < 100_000_000_000_000 => n.checked_mul(1_000_000),
            n if n < 100_000_000_000_000_000 => n.checked_mul(1_000),
            n => Some(n),
        };
    }
    if let Some(n) = v.as_f64() {
        if n <= 0.0 {
            return None;
        }
        let ns = if n < 1e11 {
            n * 1e9
        } else if n < 1e14 {
            n * 1e6
        } else if n < 1e17 {
            n * 1e3
        } else {
            n
        };
        return Some(ns as u64);
    }
    let s = v.as_str();
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return u64::try_from(t.timestamp_nanos_opt()?).ok();
    }
    if let Ok(t) = chrono::DateTime::parse_from_str(s, "%d/%b/%Y:%H:%M:%S %z") {
        return u64::try_from(t.timestamp_nanos_opt()?).ok();
    }
    None
}

fn hex_id<const N: usize>(s: &str) -> Option<[u8; N]> {
    let s = s.trim();
    let clean: String = if s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4 {
        s.chars().filter(|c| *c != '-').collect()
    } else {
        s.to_string()
    };
    let padded = if clean.len() < 2 * N && clean.len() >= N {
        format!("{clean:0>width$}", width = 2 * N)
    } else {
        clean
    };
    if padded.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(&padded, &mut out).ok()?;
    out.iter().any(|b| *b != 0).then_some(out)
}

/// A trace id written as hex, a UUID, AWS X-Ray's `Root=1-5759e988-bd862e3fe1be46a994272793`
/// (the W3C id the OpenTelemetry X-Ray propagator maps it to: its two hex
/// parts joined), or Google Cloud's `projects/<p>/traces/<hex>`.
fn trace_id_text(s: &str) -> Option<[u8; 16]> {
    let s = s.trim();
    if let Some(i) = s.find("Root=") {
        let root = s[i + 5..].split(';').next().unwrap_or("");
        let hex: String = root.strip_prefix("1-").unwrap_or(root).replace('-', "");
        return hex_id::<16>(&hex);
    }
    if let Some(x) = s.strip_prefix("1-").filter(|x| x.len() == 33) {
        return hex_id::<16>(&x.replace('-', ""));
    }
    if let Some(i) = s.rfind("/traces/") {
        return hex_id::<16>(&s[i + 8..]);
    }
    hex_id::<16>(s)
}

/// Trace and span id from the trace fields, in priority order.
fn trace_context(f: &Fields<'_>) -> (Option<[u8; 16]>, Option<[u8; 8]>) {
    let mut trace = f.str(Canon::TraceId).and_then(|s| trace_id_text(&s));
    let mut span = f.str(Canon::SpanId).and_then(|s| hex_id::<8>(&s));
    if let Some(tp) = f.str(Canon::Traceparent) {
        let parts: Vec<&str> = tp.trim().split('-').collect();
        if parts.len() == 4 {
            trace = trace.or_else(|| hex_id::<16>(parts[1]));
            span = span.or_else(|| hex_id::<8>(parts[2]));
        }
    }
    trace = trace
        .or_else(|| f.str(Canon::B3TraceId).and_then(|s| hex_id::<16>(&s)))
        .or_else(|| f.str(Canon::RequestId).and_then(|s| hex_id::<16>(&s)));
    (trace, span)
}

/// Appends protobuf fields to a message buffer.
struct Enc<'b>(&'b mut Vec<u8>);

impl Enc<'_> {
    fn string(&mut self, field: u32, s: &str) {
        wire::put_len_prefix(self.0, field, s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    fn bytes(&mut self, field: u32, b: &[u8]) {
        wire::put_len_prefix(self.0, field, b.len());
        self.0.extend_from_slice(b);
    }
    fn fixed64(&mut self, field: u32, v: u64) {
        wire::put_varint(self.0, (u64::from(field) << 3) | 1);
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn varint(&mut self, field: u32, v: u64) {
        wire::put_varint(self.0, u64::from(field) << 3);
        wire::put_varint(self.0, v);
    }
    /// `attributes` (field 6): a KeyValue with a string, int or double AnyValue.
    fn attr(&mut self, key: &str, v: AttrVal<'_>) {
        let any_len = match v {
            AttrVal::Str(s) => wire::len_field_size(s.len()),
            AttrVal::Int(i) => 1 + wire::varint_len(i as u64),
            AttrVal::F64(_) => 9,
        };
        let kv_len = wire::len_field_size(key.len()) + wire::len_field_size(any_len);
        wire::put_len_prefix(self.0, 6, kv_len);
        self.string(1, key);
        wire::put_len_prefix(self.0, 2, any_len);
        match v {
            AttrVal::Str(s) => self.string(1, s),
            AttrVal::Int(i) => self.varint(3, i as u64),
            AttrVal::F64(d) => self.fixed64(4, d.to_bits()),
        }
    }
}

#[derive(Clone, Copy)]
enum AttrVal<'a> {
    Str(&'a str),
    Int(i64),
    F64(f64),
}

/// Append the encoded OTLP `LogRecord` of a parsed line to `out` (the
/// message's fields, without a key or length). `observed_ns` is when it was read.
///
/// Encoding directly, rather than building prost structs and encoding them
/// later, avoids a dozen allocations a line.
pub fn encode_record(line: &str, f: &Fields<'_>, observed_ns: u64, out: &mut Vec<u8>) {
    let (trace, span) = trace_context(f);
    let status = f.get(Canon::Status).and_then(Val::as_f64).map(|s| s as i64);
    let (severity_number, severity_text) = match status {
        Some(s) if s >= 500 => (17, "ERROR"),
        Some(s) if s >= 400 => (13, "WARN"),
        _ => (9, "INFO"),
    };
    let mut e = Enc(out);
    if let Some(t) = f.get(Canon::Timestamp).and_then(parse_time) {
        e.fixed64(1, t);
    }
    e.varint(2, severity_number);
    e.string(3, severity_text);
    wire::put_len_prefix(e.0, 5, wire::len_field_size(line.len()));
    e.string(1, line);
    if let Some(s) = status {
        e.attr("http.response.status_code", AttrVal::Int(s));
    }
    if let Some(r) = f.str(Canon::RouteId) {
        e.attr("route_id", AttrVal::Str(&r));
        e.attr("http.route", AttrVal::Str(&r));
    }
    if let Some(p) = f.str(Canon::Path) {
        // Some gateways log the full URL or the path with its query.
        let p = match p.find("://") {
            Some(i) => p[i + 3..].find('/').map_or("/", |j| &p[i + 3 + j..]),
            None => &p,
        };
        e.attr("url.path", AttrVal::Str(p.split('?').next().unwrap_or(p)));
    }
    for (c, key) in [
        (Canon::Method, "http.request.method"),
        (Canon::Upstream, "server.address"),
        (Canon::ClientIp, "client.address"),
        (Canon::RateLimitRule, "gateway.rate_limit_rule"),
        (Canon::CircuitState, "gateway.circuit_state"),
        (Canon::ResponseFlags, "gateway.response_flags"),
    ] {
        if let Some(v) = f.str(c) {
            e.attr(key, AttrVal::Str(&v));
        }
    }
    let duration_s = f
        .get(Canon::DurationMs)
        .and_then(Val::as_f64)
        .map(|ms| ms / 1000.0)
        .or_else(|| f.get(Canon::RequestTime).and_then(Val::as_f64))
        .or_else(|| f.get(Canon::UpstreamTime).and_then(Val::sum_f64))
        .or_else(|| {
            f.get(Canon::UpstreamMs)
                .and_then(Val::as_f64)
                .map(|ms| ms / 1000.0)
        });
    if let Some(d) = duration_s {
        e.attr("http.server.request.duration", AttrVal::F64(d));
    }
    let upstream_s = f
        .get(Canon::UpstreamTime)
        .and_then(Val::sum_f64)
        .or_else(|| {
            f.get(Canon::UpstreamMs)
                .and_then(Val::as_f64)
                .map(|ms| ms / 1000.0)
        });
    if let Some(u) = upstream_s {
        e.attr("gateway.upstream.duration", AttrVal::F64(u));
    }
    if let Some(t) = trace {
        e.bytes(9, &t);
    }
    if let Some(sp) = span {
        e.bytes(10, &sp);
    }
    e.fixed64(11, observed_ns);
}

/// The record of a line as prost types (tests and tools; the receiver encodes directly).
pub fn to_record(line: &str, f: &Fields<'_>, observed_ns: u64) -> LogRecord {
    use prost::Message;
    let mut buf = Vec::new();
    encode_record(line, f, observed_ns, &mut buf);
    LogRecord::decode(buf.as_slice()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::any_value;

    fn attr<'a>(r: &'a LogRecord, k: &str) -> Option<&'a any_value::Value> {
        r.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.as_ref())
            .and_then(|v| v.value.as_ref())
    }

    fn s(v: &str) -> Option<any_value::Value> {
        Some(any_value::Value::StringValue(v.into()))
    }

    fn rec(format: &Format, line: &str) -> LogRecord {
        let f = format.parse(line).expect("parses");
        to_record(line, &f, 1)
    }

    #[test]
    fn issue_example_json_line() {
        let line = r#"{"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","route_id":"user-service-v2","rate_limit_rule":"qps-100-per-ip","circuit_state":"HALF_OPEN","status_code":429}"#;
        let r = rec(&Format::Json(KeyMap::new(&[])), line);
        assert_eq!(hex::encode(&r.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(attr(&r, "route_id").cloned(), s("user-service-v2"));
        assert_eq!(
            attr(&r, "gateway.rate_limit_rule").cloned(),
            s("qps-100-per-ip")
        );
        assert_eq!(attr(&r, "gateway.circuit_state").cloned(), s("HALF_OPEN"));
        assert_eq!(
            attr(&r, "http.response.status_code").cloned(),
            Some(any_value::Value::IntValue(429))
        );
        assert_eq!((r.severity_number, r.severity_text.as_str()), (13, "WARN"));
        assert_eq!(r.body.and_then(|b| b.value), s(line));
    }

    #[test]
    fn json_with_field_overrides_timestamps_and_durations() {
        let keys = KeyMap::new(&[
            (Canon::TraceId, "tid".into()),
            (Canon::DurationMs, "took".into()),
        ]);
        let line = r#"{"tid":"0af7651916cd43dd8448eb211c80319c","trace_id":"ignored","took":"250","timestamp":"2026-11-29T10:00:00.5+01:00","status":503,"method":"POST","path":"/payment/charge","upstream":"payments:8080","client_ip":"10.0.0.7"}"#;
        let r = rec(&Format::Json(keys), line);
        assert_eq!(hex::encode(&r.trace_id), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(
            attr(&r, "http.server.request.duration").cloned(),
            Some(any_value::Value::DoubleValue(0.25))
        );
        assert_eq!(r.time_unix_nano, 1_795_942_800_500_000_000);
        assert_eq!(r.severity_number, 17);
        assert_eq!(attr(&r, "http.request.method").cloned(), s("POST"));
        assert_eq!(attr(&r, "url.path").cloned(), s("/payment/charge"));
        assert_eq!(attr(&r, "server.address").cloned(), s("payments:8080"));
        assert_eq!(attr(&r, "client.address").cloned(), s("10.0.0.7"));
        for (ts, ns) in [
            ("1764410400", 1_764_410_400_000_000_000u64),
            ("1764410400123", 1_764_410_400_123_000_000),
        ] {
            let line = format!(r#"{{"ts":{ts}}}"#);
            assert_eq!(
                rec(&Format::Json(KeyMap::new(&[])), &line).time_unix_nano,
                ns
            );
        }
    }

    #[test]
    fn envoy_default_json_with_response_flags_and_trace_context() {
        // Envoy's documented default format fields, as a JSON access log (json_format).
        let line = r#"{"start_time":"2026-11-29T10:00:01.123Z","method":"GET","path":"/orders/42","protocol":"HTTP/1.1","response_code":503,"response_flags":"UO","bytes_received":0,"bytes_sent":81,"duration":3,"upstream_service_time":"-","x_forwarded_for":"-","user_agent":"curl/8.5.0","request_id":"5f2f2a6e-4d8e-4b4a-9d8a-2c1a0f6b9e11","authority":"orders","upstream_host":"-","upstream_cluster":"orders-v1","route_name":"orders-route","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#;
        let r = rec(&Format::Envoy(KeyMap::new(&[])), line);
        assert_eq!(
            hex::encode(&r.trace_id),
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "traceparent wins over x-request-id"
        );
        assert_eq!(hex::encode(&r.span_id), "00f067aa0ba902b7");
        assert_eq!(attr(&r, "gateway.response_flags").cloned(), s("UO"));
        assert_eq!(attr(&r, "route_id").cloned(), s("orders-route"));
        assert_eq!(attr(&r, "server.address"), None, "\"-\" is no value");
        assert_eq!(
            attr(&r, "http.server.request.duration").cloned(),
            Some(any_value::Value::DoubleValue(0.003))
        );
        assert_eq!(r.severity_number, 17);
        // x-b3-traceid (64-bit) and x-request-id (UUID) as fallbacks.
        let r = rec(
            &Format::Envoy(KeyMap::new(&[])),
            r#"{"response_code":429,"response_flags":"RL","x-b3-traceid":"a3ce929d0e0e4736"}"#,
        );
        assert_eq!(hex::encode(&r.trace_id), "0000000000000000a3ce929d0e0e4736");
        let r = rec(
            &Format::Envoy(KeyMap::new(&[])),
            r#"{"response_code":504,"response_flags":"UT","x-request-id":"5f2f2a6e-4d8e-4b4a-9d8a-2c1a0f6b9e11"}"#,
        );
        assert_eq!(hex::encode(&r.trace_id), "5f2f2a6e4d8e4b4a9d8a2c1a0f6b9e11");
    }

    #[test]
    fn nginx_combined_with_request_and_upstream_time() {
        let line = r#"10.1.2.3 - - [29/Nov/2026:10:00:00 +0000] "GET /api/v1/orders?id=7 HTTP/1.1" 502 157 "-" "Mozilla/5.0 (X11; Linux) \"quoted\"" 1.250 0.900, 0.340"#;
        let r = rec(&Format::Nginx(KeyMap::new(&[])), line);
        assert_eq!(attr(&r, "client.address").cloned(), s("10.1.2.3"));
        assert_eq!(attr(&r, "http.request.method").cloned(), s("GET"));
        assert_eq!(attr(&r, "url.path").cloned(), s("/api/v1/orders"));
        assert_eq!(
            attr(&r, "http.response.status_code").cloned(),
            Some(any_value::Value::IntValue(502))
        );
        assert_eq!(
            attr(&r, "http.server.request.duration").cloned(),
            Some(any_value::Value::DoubleValue(1.25))
        );
        match attr(&r, "gateway.upstream.duration") {
            Some(any_value::Value::DoubleValue(d)) => assert!((d - 1.24).abs() < 1e-9),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.time_unix_nano, 1_795_946_400_000_000_000);
        // Plain combined, without the timing fields.
        let r = rec(
            &Format::Nginx(KeyMap::new(&[])),
            r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08""#,
        );
        assert_eq!(r.time_unix_nano, 971_211_336_000_000_000);
        assert_eq!(r.severity_number, 9);
        // NGINX JSON log_format.
        let r = rec(
            &Format::Nginx(KeyMap::new(&[])),
            r#"{"time_iso8601":"2026-11-29T10:00:00+00:00","remote_addr":"10.0.0.1","request_method":"GET","request_uri":"/x","status":"404","request_time":"0.010","upstream_addr":"10.0.0.9:80","http_traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}"#,
        );
        assert_eq!(
            attr(&r, "http.response.status_code").cloned(),
            Some(any_value::Value::IntValue(404))
        );
        assert_eq!(attr(&r, "server.address").cloned(), s("10.0.0.9:80"));
        assert_eq!(hex::encode(&r.trace_id), "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn regex_named_captures() {
        let re = regex::Regex::new(r"^(?P<timestamp>\S+) (?P<route_id>\S+) (?P<status_code>\d+) (?P<duration_ms>\d+)ms trace=(?P<trace_id>[0-9a-f]+)$").expect("re");
        let r = rec(
            &Format::Regex(re),
            "2026-11-29T10:00:00Z checkout 500 1200ms trace=4bf92f3577b34da6a3ce929d0e0e4736",
        );
        assert_eq!(attr(&r, "route_id").cloned(), s("checkout"));
        assert_eq!(
            attr(&r, "http.server.request.duration").cloned(),
            Some(any_value::Value::DoubleValue(1.2))
        );
        assert_eq!(r.severity_number, 17);
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        let j = Format::Json(KeyMap::new(&[]));
        assert!(j.parse("{\"trace_id\": ").is_err());
        assert!(j.parse("not json").is_err());
        assert!(j.parse("[1,2]").is_err());
        assert!(j.parse("{} trailing").is_err());
        let n = Format::Nginx(KeyMap::new(&[]));
        assert!(n.parse("garbage").is_err());
        assert!(n.parse("1.2.3.4 - - [x] \"GET").is_err());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2000, ..Default::default() })]
        #[test]
        fn parsers_never_panic(line in ".{0,300}") {
            let formats = [
                Format::Json(KeyMap::new(&[])),
                Format::Envoy(KeyMap::new(&[])),
                Format::Nginx(KeyMap::new(&[])),
            ];
            for f in &formats {
                if let Ok(fields) = f.parse(&line) {
                    let _ = to_record(&line, &fields, 0);
                }
            }
        }

        #[test]
        fn json_like_lines_never_panic(
            status in proptest::option::of(-1000i64..100_000),
            ts in proptest::option::of(proptest::prelude::any::<i64>()),
            tid in "[0-9a-fA-F-]{0,40}",
            route in "\\PC{0,20}",
            dur in proptest::option::of(proptest::prelude::any::<f64>()),
        ) {
            let mut obj = serde_json::Map::new();
            if let Some(s) = status { obj.insert("status_code".into(), s.into()); }
            if let Some(t) = ts { obj.insert("timestamp".into(), t.into()); }
            if let Some(d) = dur.filter(|d| d.is_finite()) { obj.insert("duration_ms".into(), d.into()); }
            obj.insert("trace_id".into(), tid.into());
            obj.insert("traceparent".into(), "00-zz-yy-01".into());
            obj.insert("route_id".into(), route.into());
            let line = serde_json::Value::Object(obj).to_string();
            let f = Format::Json(KeyMap::new(&[])).parse(&line).expect("valid JSON parses");
            let _ = to_record(&line, &f, 0);
        }
    }
}

#[cfg(test)]
mod scan_tests {
    use super::*;
    use causeway_core::{wire, Batch, Signal};
    use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};

    #[test]
    fn records_scan_as_valid_otlp() {
        let line = r#"{"trace_id":"00000000000000000000000000000001","status_code":200}"#;
        let f = Format::Json(KeyMap::new(&[])).parse(line).expect("parse");
        let r = to_record(line, &f, 5);
        let b = Batch::from_logs(vec![ResourceLogs {
            resource: Some(Default::default()),
            scope_logs: vec![ScopeLogs {
                scope: Some(
                    opentelemetry_proto::tonic::common::v1::InstrumentationScope {
                        name: "causeway.gateway_log".into(),
                        version: "0.1.0".into(),
                        ..Default::default()
                    },
                ),
                log_records: vec![r],
                ..Default::default()
            }],
            ..Default::default()
        }]);
        let enc = b.to_encoded();
        let s = wire::scan(Signal::Logs, &enc).expect("scans");
        assert_eq!(s.items, 1);
        assert_eq!(s.invalid_ids, 0);
    }
}

//! The span attributes the analysis and the rules read, each declared once
//! in [`span_attribute_list!`] below: its doc, its field of [`SpanAttrs`]
//! (and so of every `SpanRow`), its type, how its
//! value is read and the keys it is read from (the first present wins: the
//! current semantic-convention name, then the older ones). The list makes
//! the field and the reading here, and the `spans` column in
//! the columns module (`SPAN_ATTRIBUTES`); a new attribute for a rule is one
//! line in it. What the analysis derives
//! from spans (self time, retries, waits, the exception event) stays in
//! `SpanRow`.

use std::collections::HashMap;
use std::sync::OnceLock;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

use super::series::{s as text, ROUTE_KEYS};

/// Declares the span attributes' fields and their reading: for each, its
/// doc, its field and type, how it is read (`(conv) keys`, then optionally
/// `or (conv) keys` when none of the first keys is present); the column's
/// type and cell are for the columns module.
macro_rules! span_attrs {
    ($(
        $(#[doc = $doc:literal])+
        $field:ident: $ty:ty = $col:ident ($conv:path) $keys:expr
            $(, or ($conv2:path) $keys2:expr)?
            $(, column $get:expr)?;
    )*) => {
        /// The attributes of a span the analysis and the rules read as they
        /// are (see the module's doc).
        #[derive(Debug, Clone, Default)]
        pub struct SpanAttrs {
            $( $(#[doc = $doc])+ pub $field: Option<$ty>, )*
        }

        impl SpanAttrs {
            /// A span's attributes, each from the first of its keys present.
            pub fn read(a: &[KeyValue]) -> Self {
                let mut found = Found::of(a);
                SpanAttrs {
                    $( $field: {
                        let first = found.next(&$keys);
                        $( let fallback = found.next(&$keys2); )?
                        first.and_then($conv)
                            $( .or_else(|| fallback.and_then($conv2)) )?
                    }, )*
                }
            }
        }

        /// Every attribute's key lists, in the order [`SpanAttrs::read`]
        /// reads them (an attribute's own keys, then its fallback's).
        const LISTS: &[&[&str]] = &[ $( &$keys, $( &$keys2, )? )* ];

        /// Each attribute's column and the keys it is read from, in order.
        pub static KEYS: &[(&str, &[&str])] = &[
            $( (stringify!($field), &concat_keys!($keys $(, $keys2)?)), )*
        ];
    };
}

/// The keys of an attribute, its fallback's after its own.
macro_rules! concat_keys {
    ($keys:expr) => {
        $keys
    };
    ($keys:expr, $keys2:expr) => {
        KeysOf::<{ $keys.len() + $keys2.len() }>::join(&$keys, &$keys2)
    };
}

/// Two key lists as one, in a constant.
struct KeysOf<const N: usize>;

impl<const N: usize> KeysOf<N> {
    const fn join(a: &[&'static str], b: &[&'static str]) -> [&'static str; N] {
        let mut out = [""; N];
        let mut i = 0;
        while i < a.len() {
            out[i] = a[i];
            i += 1;
        }
        while i < N {
            out[i] = b[i - a.len()];
            i += 1;
        }
        out
    }
}

/// The span attributes: each line is one attribute (see [`span_attrs!`]
/// for its form). `$m` is the macro that makes something of the list: the
/// fields and their reading here, the columns in the columns module.
macro_rules! span_attribute_list {
    ($m:ident) => {
        $m! {
    /// `http.response.status_code` (or the older `http.status_code`).
    http_status: i64 = int(int) ["http.response.status_code", "http.status_code"];
    /// The route on the span itself (`spans` falls back to the trace's).
    route: String = text(text) ROUTE_KEYS,
        column |t, i| V::S(t.spans[i].attrs.route.as_deref().or(t.route.as_deref()));
    /// `db.system.name` (or the older `db.system`).
    db_system: String = text(text) ["db.system", "db.system.name"];
    /// `db.operation.name` (or `db.operation`), else the first word of the
    /// (masked) statement stock instrumentations give: `GET ?`.
    db_operation: String = text(text) ["db.operation.name", "db.operation"],
        or (first_word) ["db.query.text", "db.statement"];
    /// The table a database call touched (`db.collection.name`, or
    /// `db.sql.table` before semconv 1.25).
    db_collection: String = text(text) ["db.collection.name", "db.sql.table"];
    /// `messaging.system`.
    messaging_system: String = text(text) ["messaging.system"];
    /// `messaging.operation.type` (or the older `messaging.operation`): `receive`, `process`, `send`…
    messaging_operation: String = text(text) ["messaging.operation.type", "messaging.operation"];
    /// `messaging.destination.name` (or the older `messaging.destination`,
    /// `messaging.kafka.destination`).
    destination: String = text(text) [
        "messaging.destination.name",
        "messaging.destination",
        "messaging.kafka.destination",
    ];
    /// `messaging.consumer.group.name` (or `messaging.kafka.consumer.group`).
    consumer_group: String = text(text) [
        "messaging.consumer.group.name",
        "messaging.kafka.consumer.group",
    ];
    /// `messaging.rabbitmq.destination.routing_key` (or the older
    /// `messaging.rabbitmq.routing_key`).
    routing_key: String = text(text) [
        "messaging.rabbitmq.destination.routing_key",
        "messaging.rabbitmq.routing_key",
    ];
    /// `server.address` (or `net.peer.name`, `peer.service`, `net.sock.peer.addr`).
    server_address: String = text(text) [
        "server.address",
        "net.peer.name",
        "peer.service",
        "net.sock.peer.addr",
    ];
    /// `server.port` (or `net.peer.port`).
    server_port: i64 = int(int) ["server.port", "net.peer.port"];
    /// `peer.service`: the callee's name as the caller configured it.
    peer_service: String = text(text) ["peer.service"];
    /// `error.type`.
    error_type: String = text(text) ["error.type"];
    /// `http.request.resend_count`.
    resend_count: i64 = int(int) ["http.request.resend_count"];
    /// `rpc.system` (`grpc`, ...; or `rpc.system.name`).
    rpc_system: String = text(text) ["rpc.system", "rpc.system.name"];
    /// `rpc.service`.
    rpc_service: String = text(text) ["rpc.service"];
    /// `rpc.method`.
    rpc_method: String = text(text) ["rpc.method"];
    /// The gRPC status by name (`DEADLINE_EXCEEDED`, `UNAVAILABLE`, ...):
    /// `rpc.grpc.status_code` (its number or, as some SDKs write it, its
    /// name) or the stable conventions' `rpc.response.status_code`.
    grpc_status: &'static str = text(grpc_status) ["rpc.grpc.status_code", "rpc.response.status_code"];
    /// `cache.hit` (`db.cache.hit`), or `cache.result` = hit/miss.
    cache_hit: bool = bool(hit) ["cache.hit", "db.cache.hit", "cache.result"];
    /// `code.namespace`: the type whose method the span is.
    code_namespace: String = text(text) ["code.namespace"];
    /// `code.function.name` (or `code.function`): the method.
    code_function: String = text(text) ["code.function.name", "code.function"];
    /// The thread that ran the span (`thread.name`; the Java agent's, by
    /// default), whose profile samples are the span's where a profiler
    /// names threads.
    thread_name: String = text(text) ["thread.name"];
    /// `gen_ai.request.model` (or `gen_ai.response.model`).
    gen_ai_model: String = text(text) ["gen_ai.request.model", "gen_ai.response.model"];
    /// `gen_ai.usage.input_tokens` (or the older `gen_ai.usage.prompt_tokens`).
    input_tokens: i64 = int(int) ["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"];
    /// `gen_ai.usage.output_tokens` (or `gen_ai.usage.completion_tokens`).
    output_tokens: i64 = int(int) [
        "gen_ai.usage.output_tokens",
        "gen_ai.usage.completion_tokens",
    ];
    /// `gen_ai.usage.cache_read.input_tokens`: the input tokens the server
    /// took from its prompt cache (the OpenAI instrumentation writes it for
    /// the Responses API, not for chat completions).
    cache_read_tokens: i64 = int(int) ["gen_ai.usage.cache_read.input_tokens"];
    /// vLLM's `gen_ai.latency.time_in_queue` (ms).
    gen_ai_queue_ms: f64 = float(seconds_ms) ["gen_ai.latency.time_in_queue"];
    /// vLLM's `gen_ai.latency.time_to_first_token`, or the conventions'
    /// `gen_ai.response.time_to_first_chunk` a streaming client measured (ms).
    gen_ai_ttft_ms: f64 = float(seconds_ms) [
        "gen_ai.latency.time_to_first_token",
        "gen_ai.response.time_to_first_chunk",
    ];
    /// vLLM's `gen_ai.latency.time_in_model_prefill` (ms).
    gen_ai_prefill_ms: f64 = float(seconds_ms) ["gen_ai.latency.time_in_model_prefill"];
    /// vLLM's `gen_ai.latency.time_in_model_decode` (ms).
    gen_ai_decode_ms: f64 = float(seconds_ms) ["gen_ai.latency.time_in_model_decode"];
        }
    };
}
pub(crate) use span_attribute_list;

span_attribute_list!(span_attrs);

/// Each key of [`LISTS`]: the lists it is in, and its rank in each.
type Index = HashMap<&'static str, Vec<(u16, u16)>, foldhash::fast::FixedState>;

fn index() -> &'static Index {
    static INDEX: OnceLock<Index> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut m = Index::default();
        for (list, keys) in LISTS.iter().enumerate() {
            for (rank, k) in keys.iter().enumerate() {
                m.entry(*k).or_default().push((list as u16, rank as u16));
            }
        }
        m
    })
}

/// A span's attributes found in one pass over them (a key looked up once,
/// not each key list scanning them all): for each key list, the value of
/// its first key present (the first of a key given twice).
struct Found<'a> {
    best: [Option<(u16, &'a Option<AnyValue>)>; LISTS.len()],
    /// The list [`Found::next`] gives.
    next: usize,
}

impl<'a> Found<'a> {
    fn of(attrs: &'a [KeyValue]) -> Self {
        let index = index();
        let mut best = [None; LISTS.len()];
        for kv in attrs {
            let Some(lists) = index.get(kv.key.as_str()) else {
                continue;
            };
            for &(list, rank) in lists {
                let b = &mut best[usize::from(list)];
                if b.is_none_or(|(r, _)| rank < r) {
                    *b = Some((rank, &kv.value));
                }
            }
        }
        Found { best, next: 0 }
    }

    /// The value of the next key list (`keys`, as the attribute reads it).
    fn next(&mut self, keys: &[&str]) -> Option<&'a Option<AnyValue>> {
        debug_assert_eq!(LISTS.get(self.next).copied(), Some(keys));
        let v = self.best.get(self.next).copied().flatten().map(|(_, v)| v);
        self.next += 1;
        v
    }
}

/// An integer (a float truncated, a number in text parsed).
fn int(v: &Option<AnyValue>) -> Option<i64> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::IntValue(i) => Some(*i),
        any_value::Value::DoubleValue(d) => Some(*d as i64),
        any_value::Value::StringValue(x) => x.parse().ok(),
        _ => None,
    }
}

/// A statement's first word, upper-cased (`get ?` → `GET`).
fn first_word(v: &Option<AnyValue>) -> Option<String> {
    text(v)?
        .split_whitespace()
        .next()
        .map(str::to_ascii_uppercase)
}

/// A cache answer: a boolean, or `true`/`hit` in text (`cache.result`).
fn hit(v: &Option<AnyValue>) -> Option<bool> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::BoolValue(b) => Some(*b),
        any_value::Value::StringValue(x) => Some(x == "true" || x == "hit"),
        _ => None,
    }
}

/// The gRPC status codes by number (grpc/doc/statuscodes.md).
const GRPC_CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];

/// A gRPC status as its name: from its number (`4`), or its name in any
/// case (`DEADLINE_EXCEEDED`, `DeadlineExceeded`, `deadline_exceeded`).
fn grpc_status(v: &Option<AnyValue>) -> Option<&'static str> {
    if let Some(n) = int(v) {
        return usize::try_from(n)
            .ok()
            .and_then(|i| GRPC_CODES.get(i))
            .copied();
    }
    let text = text(v)?;
    let squash = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_')
            .flat_map(char::to_uppercase)
            .collect()
    };
    let want = squash(&text);
    GRPC_CODES.iter().copied().find(|c| squash(c) == want)
}

/// A duration in float seconds (vLLM's `gen_ai.latency.*`), in ms.
fn seconds_ms(v: &Option<AnyValue>) -> Option<f64> {
    let s = match v.as_ref()?.value.as_ref()? {
        any_value::Value::DoubleValue(d) => *d,
        any_value::Value::IntValue(i) => *i as f64,
        any_value::Value::StringValue(x) => x.parse().ok()?,
        _ => return None,
    };
    (s.is_finite() && s >= 0.0).then_some(s * 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(k: &str, v: any_value::Value) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue { value: Some(v) }),
            ..Default::default()
        }
    }

    #[test]
    fn an_attribute_is_read_by_its_first_present_key_then_its_fallback() {
        use any_value::Value::{IntValue, StringValue};
        let a = SpanAttrs::read(&[
            kv("http.status_code", StringValue("503".into())),
            kv("http.response.status_code", IntValue(504)),
            kv("db.statement", StringValue("get ?".into())),
            kv(
                "rpc.grpc.status_code",
                StringValue("DeadlineExceeded".into()),
            ),
        ]);
        assert_eq!(a.http_status, Some(504));
        assert_eq!(a.db_operation.as_deref(), Some("GET"));
        assert_eq!(a.grpc_status, Some("DEADLINE_EXCEEDED"));
        assert_eq!(a.route, None);
        let named = SpanAttrs::read(&[
            kv("db.operation", StringValue("SELECT".into())),
            kv("db.statement", StringValue("get ?".into())),
        ]);
        assert_eq!(named.db_operation.as_deref(), Some("SELECT"));
        // A key of two attributes gives both; a key given twice, its first
        // value; an own key whose value does not read, the fallback.
        let shared = SpanAttrs::read(&[
            kv("peer.service", StringValue("pricing".into())),
            kv("net.sock.peer.addr", StringValue("10.0.0.9".into())),
            kv("server.port", IntValue(8080)),
            kv("server.port", IntValue(9090)),
            kv("db.operation.name", any_value::Value::BytesValue(vec![1])),
            kv("db.query.text", StringValue("update t".into())),
        ]);
        assert_eq!(shared.server_address.as_deref(), Some("pricing"));
        assert_eq!(shared.peer_service.as_deref(), Some("pricing"));
        assert_eq!(shared.server_port, Some(8080));
        assert_eq!(shared.db_operation.as_deref(), Some("UPDATE"));
    }
}

//! A kept trace as evidence: its spans with the critical path and self
//! times, its culprit, and what the correlation state knows of it (logs,
//! route statistics, Kafka lag of the topics it touches, pressure of the
//! hosts it ran on). Rows of the tables the rules query.

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::trace::v1::{
    span::SpanKind, status::StatusCode, ResourceSpans, Span,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::baseline::Baselines;
use super::critical::{critical_path, root, Node};
use super::rabbit::is_rabbit;
use super::shape;
use super::store::{
    find as attr, host_key, s as attr_str, LogEvidence, RouteStats, Series, Store, ROUTE_KEYS,
};

/// Where a span is in the batch: (resource_spans, scope_spans, span) indexes.
pub type SpanRef = (usize, usize, usize);

/// One span, as a row.
#[derive(Debug, Clone, Default)]
pub struct SpanRow {
    /// Where it is.
    pub at: SpanRef,
    /// Span id (8 bytes, big-endian; 0 when absent or malformed).
    pub span_id: u64,
    /// Parent id (0 for a root).
    pub parent_id: u64,
    /// `service.name` (shared by the spans of a resource).
    pub service: std::sync::Arc<str>,
    /// `host.name` (shared by the spans of a resource).
    pub host: std::sync::Arc<str>,
    /// Span name.
    pub name: String,
    /// server, client, producer, consumer, internal.
    pub kind: &'static str,
    /// Start relative to the trace's start (ms).
    pub start_ms: f64,
    /// End relative to the trace's start (ms).
    pub end_ms: f64,
    /// Duration (ms).
    pub duration_ms: f64,
    /// Self time on the critical path (ms).
    pub self_ms: f64,
    /// On the critical path.
    pub critical: bool,
    /// unset, ok, error.
    pub status: &'static str,
    /// Status message.
    pub status_message: String,
    /// `http.response.status_code` (or the older `http.status_code`).
    pub http_status: Option<i64>,
    /// Route on the span itself (the `spans` table falls back to the trace's).
    pub route: Option<String>,
    /// `db.system` (`db.system.name`).
    pub db_system: Option<String>,
    /// `db.operation.name` (or `db.operation`).
    pub db_operation: Option<String>,
    /// `messaging.system`.
    pub messaging_system: Option<String>,
    /// `messaging.destination.name`.
    pub destination: Option<String>,
    /// `messaging.consumer.group.name` (or `messaging.kafka.consumer.group`).
    pub consumer_group: Option<String>,
    /// `messaging.rabbitmq.destination.routing_key` (or the older
    /// `messaging.rabbitmq.routing_key`).
    pub routing_key: Option<String>,
    /// `server.address` (or `net.peer.name`).
    pub server_address: Option<String>,
    /// `server.port` (or `net.peer.port`).
    pub server_port: Option<i64>,
    /// `gen_ai.request.model` (or `gen_ai.response.model`).
    pub gen_ai_model: Option<String>,
    /// `gen_ai.usage.input_tokens` (or the older `gen_ai.usage.prompt_tokens`).
    pub input_tokens: Option<i64>,
    /// `gen_ai.usage.output_tokens` (or `gen_ai.usage.completion_tokens`).
    pub output_tokens: Option<i64>,
    /// vLLM's `gen_ai.latency.time_in_queue` (ms).
    pub gen_ai_queue_ms: Option<f64>,
    /// vLLM's `gen_ai.latency.time_to_first_token` (ms).
    pub gen_ai_ttft_ms: Option<f64>,
    /// vLLM's `gen_ai.latency.time_in_model_prefill` (ms).
    pub gen_ai_prefill_ms: Option<f64>,
    /// vLLM's `gen_ai.latency.time_in_model_decode` (ms).
    pub gen_ai_decode_ms: Option<f64>,
    /// The model's normal prompt length (median input tokens), once known.
    pub prompt_baseline: Option<f64>,
    /// `error.type`.
    pub error_type: Option<String>,
    /// `exception.type` of an `exception` event.
    pub exception_type: Option<String>,
    /// `exception.message` of an `exception` event.
    pub exception_message: Option<String>,
    /// `http.request.resend_count`.
    pub resend_count: Option<i64>,
    /// `cache.hit` (`db.cache.hit`), or `cache.result` = hit/miss.
    pub cache_hit: Option<bool>,
    /// Time from the span's start to its first child's start (ms), when it has children.
    pub wait_ms: Option<f64>,
    /// Critical-path time of the span and its descendants (ms).
    pub path_ms: f64,
    /// The cache miss was inferred from the layout (read, fallback, write).
    pub cache_inferred: bool,
    /// A client span marked ERROR for a 4xx answer (the server's answer, not an error origin).
    pub client_error: bool,
    /// Attempt number (1-based) when the span is one attempt of a retried call.
    pub attempt: Option<i64>,
    /// Attempts of the call it belongs to.
    pub attempts: Option<i64>,
    /// Failed attempts of that call.
    pub failed_attempts: Option<i64>,
    /// From the first attempt's start to the last attempt's end (ms).
    pub retry_window_ms: Option<f64>,
    /// What the failed attempts answered most often (a status or an error type).
    pub retry_trigger: Option<String>,
    /// A failed attempt whose call succeeded on a later attempt.
    pub recovered: bool,
    /// For a client span: how long its server child waited to start (ms).
    pub queue_ms: Option<f64>,
    /// For a consumer span: how long the message waited after it was produced (ms).
    pub async_wait_ms: Option<f64>,
    /// The operation's normal self time (ms; its baseline quantile), once known.
    pub baseline_ms: Option<f64>,
    /// Self time beyond the baseline (ms), once known.
    pub excess_ms: Option<f64>,
    /// Index of the parent in the trace's spans, after the repairs (orphans
    /// attached, cycles cut), when it has one.
    pub parent: Option<usize>,
    /// Parent links up to the root (0 for a root or a span not under one).
    pub depth: usize,
}

/// One kept trace.
#[derive(Debug, Clone, Default)]
pub struct TraceRow {
    /// Raw id.
    pub id: [u8; 16],
    /// Hex id.
    pub trace_id: String,
    /// Start (ns since epoch).
    pub start_ns: u64,
    /// End (ns since epoch).
    pub end_ns: u64,
    /// Root to last end (ms).
    pub duration_ms: f64,
    /// Index of the root span in `spans`.
    pub root: usize,
    /// Spans.
    pub spans: Vec<SpanRow>,
    /// Index of the culprit (largest self time on the critical path, or the error origin).
    pub culprit: usize,
    /// Index of the error origin, if a span failed.
    pub error_origin: Option<usize>,
    /// Route: the gateway's `route_id` when a gateway log joins, else the
    /// entry span's route (mapped by `route_map`), never a downstream template.
    pub route: Option<String>,
    /// The entry span: the first server span from the root down.
    pub entry: usize,
    /// Start (ms since the epoch), to place log records on the trace.
    pub start_unix_ms: f64,
    /// The request failed: the gateway's last answer was 5xx or 429, or the
    /// root or entry span failed.
    pub failed: bool,
    /// The final status: the gateway's last answer, else the entry/root span's.
    pub final_status: Option<i64>,
    /// Log records of the trace (shared with the correlation state).
    pub logs: Vec<std::sync::Arc<LogEvidence>>,
    /// Route statistics of its route.
    pub route_stats: Option<(String, RouteStats)>,
    /// Kafka state of the topics it touches.
    pub kafka: Vec<KafkaRow>,
    /// Pressure of the hosts its spans ran on.
    pub hosts: Vec<HostRow>,
    /// The servers it called, by their own metrics.
    pub deps: Vec<super::deps::DepRow>,
    /// The RabbitMQ queues it published to or consumed from.
    pub queues: Vec<super::rabbit::QueueRow>,
    /// Spans that arrived after the trace was analysed, with the remembered
    /// producer span their message came from (not in the batch: its
    /// `at` is [`NOT_IN_BATCH`]).
    pub continuation: bool,
}

/// The "service" under which prompt lengths (input tokens per model) are
/// kept in the baselines.
pub const PROMPT_BASELINE: &str = "\u{0}gen_ai.prompt_tokens";

/// The `at` of a span row that is not in the batch being analysed.
pub const NOT_IN_BATCH: SpanRef = (usize::MAX, 0, 0);

/// Kafka state of a topic (and group) a trace touches.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct KafkaRow {
    /// Topic.
    pub topic: String,
    /// Consumer group ("" when the trace does not name one).
    pub group: String,
    /// Lag (messages), largest in the join interval.
    pub lag: Option<f64>,
    /// How the lag moved over the join interval (messages; > 0: growing).
    pub lag_trend: Option<f64>,
    /// Time lag (s), largest.
    pub lag_seconds: Option<f64>,
    /// Burrow group status code, worst.
    pub status: Option<i64>,
    /// Lag alarm on.
    pub alarm: bool,
    /// Retry storm on the topic.
    pub retry_storm: bool,
    /// Produce rate (messages/s).
    pub produce_rate: Option<f64>,
    /// The lag rose point after point by at least `lag_growth` in the join interval.
    pub growing: bool,
    /// The lag is at or above `lag_threshold`, or growing.
    pub lagging: bool,
    /// The times of the points used (ns), for the evidence.
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
}

/// Pressure of a host a trace ran on.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HostRow {
    /// `host.name`.
    pub host: String,
    /// Whether the culprit span ran there.
    pub culprit: bool,
    /// 1 − idle utilization.
    pub cpu_busy: Option<f64>,
    /// iowait utilization.
    pub iowait: Option<f64>,
    /// Memory used fraction.
    pub mem_used: Option<f64>,
    /// MemAvailable / total.
    pub mem_available_ratio: Option<f64>,
    /// Busiest disk's busy fraction.
    pub disk_util: Option<f64>,
    /// PSI some avg10 (%).
    pub psi_cpu: Option<f64>,
    /// PSI some avg10 (%).
    pub psi_memory: Option<f64>,
    /// PSI some avg10 (%).
    pub psi_io: Option<f64>,
    /// Busiest GPU's utilization (0..1; DCGM `DCGM_FI_DEV_GPU_UTIL` ÷ 100).
    pub gpu_util: Option<f64>,
    /// Fullest GPU's framebuffer memory used (0..1; `FB_USED ÷ (FB_USED + FB_FREE)`).
    pub gpu_mem_used: Option<f64>,
    /// Time of the latest point used (ns).
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
}

fn any_int(v: &Option<AnyValue>) -> Option<i64> {
    match v.as_ref()?.value.as_ref()? {
        any_value::Value::IntValue(i) => Some(*i),
        any_value::Value::DoubleValue(d) => Some(*d as i64),
        any_value::Value::StringValue(x) => x.parse().ok(),
        _ => None,
    }
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

fn kind_name(k: i32) -> &'static str {
    match SpanKind::try_from(k) {
        Ok(SpanKind::Server) => "server",
        Ok(SpanKind::Client) => "client",
        Ok(SpanKind::Producer) => "producer",
        Ok(SpanKind::Consumer) => "consumer",
        _ => "internal",
    }
}

fn span_row(
    at: SpanRef,
    span: &Span,
    service: &std::sync::Arc<str>,
    host: &std::sync::Arc<str>,
) -> SpanRow {
    let a = &span.attributes;
    let status = match span.status.as_ref().map(|s| StatusCode::try_from(s.code)) {
        Some(Ok(StatusCode::Error)) => "error",
        Some(Ok(StatusCode::Ok)) => "ok",
        _ => "unset",
    };
    let exception = span.events.iter().find(|e| e.name == "exception");
    let cache_hit =
        match attr(a, &["cache.hit", "db.cache.hit"]).and_then(|v| v.as_ref()?.value.as_ref()) {
            Some(any_value::Value::BoolValue(b)) => Some(*b),
            Some(any_value::Value::StringValue(x)) => Some(x == "true" || x == "hit"),
            _ => attr(a, &["cache.result"])
                .and_then(attr_str)
                .map(|x| x == "hit"),
        };
    SpanRow {
        at,
        span_id: id64(&span.span_id),
        parent_id: id64(&span.parent_span_id),
        service: service.clone(),
        host: host.clone(),
        name: span.name.clone(),
        kind: kind_name(span.kind),
        status,
        status_message: span
            .status
            .as_ref()
            .map(|s| s.message.clone())
            .unwrap_or_default(),
        http_status: attr(a, &["http.response.status_code", "http.status_code"]).and_then(any_int),
        route: attr(a, &ROUTE_KEYS).and_then(attr_str),
        db_system: attr(a, &["db.system", "db.system.name"]).and_then(attr_str),
        db_operation: attr(a, &["db.operation.name", "db.operation"])
            .and_then(attr_str)
            .or_else(|| {
                // Stock instrumentations often give only the (masked) statement: `GET ?`.
                attr(a, &["db.query.text", "db.statement"])
                    .and_then(attr_str)
                    .and_then(|q| q.split_whitespace().next().map(str::to_ascii_uppercase))
            }),
        messaging_system: attr(a, &["messaging.system"]).and_then(attr_str),
        destination: attr(
            a,
            &[
                "messaging.destination.name",
                "messaging.destination",
                "messaging.kafka.destination",
            ],
        )
        .and_then(attr_str),
        consumer_group: attr(
            a,
            &[
                "messaging.consumer.group.name",
                "messaging.kafka.consumer.group",
            ],
        )
        .and_then(attr_str),
        routing_key: attr(
            a,
            &[
                "messaging.rabbitmq.destination.routing_key",
                "messaging.rabbitmq.routing_key",
            ],
        )
        .and_then(attr_str),
        server_address: attr(
            a,
            &[
                "server.address",
                "net.peer.name",
                "peer.service",
                "net.sock.peer.addr",
            ],
        )
        .and_then(attr_str),
        error_type: attr(a, &["error.type"]).and_then(attr_str),
        exception_type: exception
            .and_then(|e| attr(&e.attributes, &["exception.type"]).and_then(attr_str)),
        exception_message: exception
            .and_then(|e| attr(&e.attributes, &["exception.message"]).and_then(attr_str)),
        resend_count: attr(a, &["http.request.resend_count"]).and_then(any_int),
        server_port: attr(a, &["server.port", "net.peer.port"]).and_then(any_int),
        gen_ai_model: attr(a, &["gen_ai.request.model", "gen_ai.response.model"])
            .and_then(attr_str),
        input_tokens: attr(
            a,
            &["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"],
        )
        .and_then(any_int),
        output_tokens: attr(
            a,
            &[
                "gen_ai.usage.output_tokens",
                "gen_ai.usage.completion_tokens",
            ],
        )
        .and_then(any_int),
        gen_ai_queue_ms: attr(a, &["gen_ai.latency.time_in_queue"]).and_then(seconds_ms),
        gen_ai_ttft_ms: attr(a, &["gen_ai.latency.time_to_first_token"]).and_then(seconds_ms),
        gen_ai_prefill_ms: attr(a, &["gen_ai.latency.time_in_model_prefill"]).and_then(seconds_ms),
        gen_ai_decode_ms: attr(a, &["gen_ai.latency.time_in_model_decode"]).and_then(seconds_ms),
        cache_hit,
        ..Default::default()
    }
}

/// A span id as a number (0 when it is not 8 bytes).
pub fn id64(b: &[u8]) -> u64 {
    <[u8; 8]>::try_from(b).map_or(0, u64::from_be_bytes)
}

/// A span id as 16 hex digits, without allocating ("" for 0, the absent id).
#[derive(Clone, Copy)]
pub struct Hex16([u8; 16], bool);

impl Hex16 {
    /// The hex text of an id.
    pub fn of(id: u64) -> Self {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut b = [0u8; 16];
        for (i, x) in b.iter_mut().enumerate() {
            *x = DIGITS[((id >> (60 - 4 * i)) & 0xf) as usize];
        }
        Hex16(b, id != 0)
    }
    /// As text.
    pub fn as_str(&self) -> &str {
        if self.1 {
            // Only ASCII hex digits are ever written.
            std::str::from_utf8(&self.0).unwrap_or("")
        } else {
            ""
        }
    }
}

/// Parse a hex span id as written by [`Hex16`].
pub fn parse_hex16(s: &str) -> Option<u64> {
    (s.len() == 16).then(|| u64::from_str_radix(s, 16).ok())?
}

/// A fast hasher for ids that are random already (trace and span ids).
type IdMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// Group the spans of a batch by trace and compute each trace's critical
/// path, self times, culprit and error origin.
pub fn traces(
    batch: &[ResourceSpans],
    baselines: Option<&Baselines>,
    route_map: &RouteMap,
) -> Vec<TraceRow> {
    // Pass 1: each span's trace (by first appearance), without moving rows.
    let mut trace_of: IdMap<[u8; 16], u32> = IdMap::default();
    let mut order: Vec<([u8; 16], u32)> = Vec::new(); // id, span count
    let mut refs: Vec<(u32, SpanRef)> = Vec::new();
    let mut resources: Vec<(std::sync::Arc<str>, std::sync::Arc<str>)> =
        Vec::with_capacity(batch.len());
    for (ri, rs) in batch.iter().enumerate() {
        let ra = rs
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let service: std::sync::Arc<str> = attr(ra, &["service.name"])
            .and_then(attr_str)
            .unwrap_or_default()
            .into();
        let host: std::sync::Arc<str> = host_key(ra).unwrap_or_default().into();
        resources.push((service, host));
        for (si, ss) in rs.scope_spans.iter().enumerate() {
            for (pi, span) in ss.spans.iter().enumerate() {
                let Ok(id) = <[u8; 16]>::try_from(span.trace_id.as_slice()) else {
                    continue;
                };
                let t = *trace_of.entry(id).or_insert_with(|| {
                    order.push((id, 0));
                    (order.len() - 1) as u32
                });
                order[t as usize].1 += 1;
                refs.push((t, (ri, si, pi)));
            }
        }
    }
    // Pass 2: the spans of each trace, contiguous (a counting sort, stable).
    let mut first = Vec::with_capacity(order.len() + 1);
    let mut acc = 0usize;
    for (_, n) in &order {
        first.push(acc);
        acc += *n as usize;
    }
    first.push(acc);
    let mut fill = first.clone();
    let mut grouped: Vec<SpanRef> = vec![(0, 0, 0); refs.len()];
    for (t, at) in refs {
        grouped[fill[t as usize]] = at;
        fill[t as usize] += 1;
    }
    let mut out = Vec::with_capacity(order.len());
    let mut index: IdMap<u64, usize> = IdMap::default();
    for (ti, (id, _)) in order.into_iter().enumerate() {
        let ats = &grouped[first[ti]..first[ti + 1]];
        let span_at = |&(ri, si, pi): &SpanRef| &batch[ri].scope_spans[si].spans[pi];
        index.clear();
        for (i, at) in ats.iter().enumerate() {
            index.insert(id64(&span_at(at).span_id), i);
        }
        let mut spans: Vec<SpanRow> = Vec::with_capacity(ats.len());
        let mut nodes: Vec<Node> = Vec::with_capacity(ats.len());
        for (i, at) in ats.iter().enumerate() {
            let span = span_at(at);
            let (service, host) = &resources[at.0];
            let row = span_row(*at, span, service, host);
            nodes.push(Node {
                start: span.start_time_unix_nano,
                end: span.end_time_unix_nano.max(span.start_time_unix_nano),
                parent: (row.parent_id != 0)
                    .then(|| index.get(&row.parent_id).copied())
                    .flatten()
                    .filter(|p| *p != i),
            });
            spans.push(row);
        }
        // A parent cycle in bad data: break it where it closes, so every span
        // reaches a root and nothing below loops.
        break_cycles(&mut nodes);
        shape::attach_orphans(&mut nodes, &mut spans);
        shape::adopt_contained(&mut nodes, &mut spans);
        let kids = shape::children(&nodes);
        shape::fix_skew(&mut nodes, &spans, &kids);
        // The root: a span with no parent id at all, else one whose parent is missing.
        let true_roots: Vec<Node> = nodes
            .iter()
            .zip(&spans)
            .map(|(n, r)| Node {
                parent: if r.parent_id == 0 {
                    n.parent
                } else {
                    n.parent.or(Some(usize::MAX))
                },
                ..*n
            })
            .collect();
        let Some(root_i) = root(&true_roots).or_else(|| root(&nodes)) else {
            continue;
        };
        let (_, self_ns) = critical_path(&nodes, root_i);
        let start_ns = nodes.iter().map(|n| n.start).min().unwrap_or(0);
        let end_ns = nodes.iter().map(|n| n.end).max().unwrap_or(start_ns);
        let ms = |ns: u64| ns as f64 / 1e6;
        let mut first_child: Vec<Option<u64>> = vec![None; nodes.len()];
        for n in &nodes {
            if let Some(p) = n.parent {
                first_child[p] = Some(first_child[p].map_or(n.start, |s| s.min(n.start)));
            }
        }
        for (i, row) in spans.iter_mut().enumerate() {
            let n = nodes[i];
            row.start_ms = ms(n.start.saturating_sub(start_ns));
            row.end_ms = ms(n.end.saturating_sub(start_ns));
            row.duration_ms = ms(n.end - n.start);
            row.self_ms = ms(self_ns[i]);
            row.critical = self_ns[i] > 0;
            row.wait_ms = first_child[i].map(|c| ms(c.saturating_sub(n.start)));
        }
        shape::infer(&mut spans, &nodes, &kids);
        // Critical time of each subtree, bottom-up; depths top-down.
        let order = shape::top_down(&nodes, &kids);
        for &i in &order {
            spans[i].parent = nodes[i].parent;
            spans[i].depth = nodes[i].parent.map_or(0, |p| spans[p].depth + 1);
        }
        for &i in order.iter().rev() {
            spans[i].path_ms += spans[i].self_ms;
            if let Some(p) = nodes[i].parent {
                let add = spans[i].path_ms;
                spans[p].path_ms += add;
            }
        }
        // Where errors began: a failed span none of whose children failed.
        // Client 4xx answers and attempts a later retry recovered from are not.
        let mut has_error_child = vec![false; nodes.len()];
        for i in 0..nodes.len() {
            if spans[i].status == "error" && !spans[i].client_error && !spans[i].recovered {
                let mut p = nodes[i].parent;
                let mut steps = 0;
                while let Some(x) = p {
                    if has_error_child[x] || steps > nodes.len() {
                        break;
                    }
                    has_error_child[x] = true;
                    p = nodes[x].parent;
                    steps += 1;
                }
            }
        }
        let error_origin = (0..spans.len())
            .filter(|&i| {
                spans[i].status == "error"
                    && !spans[i].client_error
                    && !spans[i].recovered
                    && !has_error_child[i]
            })
            .max_by(|&a, &b| spans[a].end_ms.total_cmp(&spans[b].end_ms));
        // How much each critical span deviates: its duration beyond `factor`
        // × its operation's median, counted only as far as its own self time
        // (a parent of a slow call deviates too, but the time is not its
        // own); all of its self time before a baseline exists.
        if let Some(b) = baselines {
            for r in spans.iter_mut().filter(|r| r.critical) {
                if let Some(normal) = b.normal(&r.service, &r.name) {
                    r.baseline_ms = Some(normal);
                    r.excess_ms = Some((r.duration_ms - b.factor * normal).max(0.0).min(r.self_ms));
                }
            }
        }
        if let Some(b) = baselines {
            for r in spans.iter_mut().filter(|r| r.input_tokens.is_some()) {
                let model = r.gen_ai_model.as_deref().unwrap_or("");
                r.prompt_baseline = b.normal(PROMPT_BASELINE, model);
            }
        }
        let deviation = |r: &SpanRow| r.excess_ms.unwrap_or(r.self_ms);
        let largest = (0..spans.len())
            .filter(|&i| spans[i].critical)
            .max_by(|&a, &b| deviation(&spans[a]).total_cmp(&deviation(&spans[b])))
            .unwrap_or(root_i);
        // The error origin, unless it barely took time and something else took
        // most of it (a timed-out call: the callee that was slow is the culprit).
        let culprit = error_origin
            .filter(|&e| spans[e].self_ms >= deviation(&spans[largest]) * 0.5)
            .unwrap_or(largest);
        // The entry: the root when it is a server span, else the first server
        // span below it (a client or load generator may be the root).
        let entry = order
            .iter()
            .copied()
            .filter(|&i| spans[i].kind == "server")
            .min_by(|&a, &b| {
                spans[a]
                    .depth
                    .cmp(&spans[b].depth)
                    .then(nodes[a].start.cmp(&nodes[b].start))
            })
            .unwrap_or(root_i);
        let route = spans[entry].route.clone().map(|r| route_map.map(&r));
        let status_of = |r: &SpanRow| r.http_status;
        let final_status = status_of(&spans[entry]).or(status_of(&spans[root_i]));
        let failed = [root_i, entry].iter().any(|&i| {
            (spans[i].status == "error" && !spans[i].recovered && !spans[i].client_error)
                || spans[i].http_status.is_some_and(|s| s >= 500 || s == 429)
        });
        out.push(TraceRow {
            id,
            trace_id: hex::encode(id),
            start_ns,
            end_ns,
            duration_ms: ms(end_ns - start_ns),
            start_unix_ms: ms(start_ns),
            root: root_i,
            entry,
            spans,
            culprit,
            error_origin,
            route,
            failed,
            final_status,
            ..Default::default()
        });
    }
    out
}

/// Cut the parent link that closes each cycle of parent ids.
fn break_cycles(nodes: &mut [Node]) {
    // 0 unvisited, 1 on the current chain, 2 done.
    let mut state = vec![0u8; nodes.len()];
    for s in 0..nodes.len() {
        let mut chain: Vec<usize> = Vec::new();
        let mut i = s;
        loop {
            match state[i] {
                2 => break,
                1 => {
                    // `i` is on the chain: the link into it from the chain's last closes a cycle.
                    if let Some(&last) = chain.last() {
                        nodes[last].parent = None;
                    }
                    break;
                }
                _ => {}
            }
            state[i] = 1;
            chain.push(i);
            match nodes[i].parent {
                Some(p) if p < nodes.len() => i = p,
                _ => break,
            }
        }
        for c in chain {
            state[c] = 2;
        }
    }
}

/// Maps a service's route template to the gateway's route id, for sites
/// whose gateway route ids and service routes differ.
#[derive(Debug, Clone, Default)]
pub struct RouteMap {
    /// Configured: service route → route id.
    pub fixed: HashMap<String, String>,
}

impl RouteMap {
    /// The route id of a route.
    pub fn map(&self, route: &str) -> String {
        self.fixed
            .get(route)
            .cloned()
            .unwrap_or_else(|| route.to_string())
    }
}

/// What the join needs besides the state.
#[derive(Debug, Clone)]
pub struct JoinParams {
    /// Metric points this long before a trace's start join it (ns).
    pub lookback_ns: u64,
    /// Metric points this long after a trace's end join it (ns).
    pub lookahead_ns: u64,
    /// Consumer lag (messages) at or above which a group lags.
    pub lag_threshold: f64,
    /// Growth of the lag (messages) over the join interval, rising point
    /// after point, at which a group lags.
    pub lag_growth: f64,
    /// How often the lag is sampled (ns): the lag joined to a consumer's wait
    /// is the lag sampled within this of it.
    pub lag_sample_ns: u64,
    /// How often dependencies are scraped (ns): a client span joins their
    /// points within this of it.
    pub dep_sample_ns: u64,
    /// Configured address → job or instance (`dependencies.addresses`).
    pub dep_addresses: HashMap<String, String>,
}

impl Default for JoinParams {
    /// The `correlate` config's defaults.
    fn default() -> Self {
        JoinParams {
            lookback_ns: 120_000_000_000,
            lookahead_ns: 60_000_000_000,
            lag_threshold: 5000.0,
            lag_growth: 1000.0,
            lag_sample_ns: 60_000_000_000,
            dep_sample_ns: 15_000_000_000,
            dep_addresses: HashMap::new(),
        }
    }
}

/// What a join found nothing for (for the self-metrics).
#[derive(Debug, Clone, Copy, Default)]
pub struct JoinMisses {
    /// Traces whose hosts have no pressure metrics while other hosts have.
    pub host: u64,
    /// Topics a trace touches with no Kafka metrics while other topics have.
    pub kafka: u64,
    /// Traces with a RabbitMQ span that reaches no known queue while queues are known.
    pub queue: u64,
}

/// Join each trace with the correlation state.
pub fn join(traces: &mut [TraceRow], store: &Store, p: &JoinParams, now_ns: u64) -> JoinMisses {
    let mut misses = JoinMisses::default();
    // A route's statistics are the same for every trace of the tick: computed once.
    let mut stats: HashMap<String, Option<RouteStats>> = HashMap::new();
    for t in traces.iter_mut() {
        t.logs = store.logs_of(&t.id);
        // The gateway's own route id is the route; the service route it maps
        // to is learned, so a trace whose gateway log is missing still gets it.
        let entry_route = t.route.clone();
        let gateway = t
            .logs
            .iter()
            .filter(|l| l.gateway)
            .max_by_key(|l| l.time_ns);
        if let Some(g) = gateway {
            if let Some(st) = g.status {
                t.final_status = Some(st);
                t.failed |= st >= 500 || st == 429;
            }
        }
        let gw_route = t
            .logs
            .iter()
            .filter(|l| l.gateway)
            .find_map(|l| l.route.clone());
        t.route = match (gw_route, entry_route) {
            (Some(gw), Some(entry)) => {
                store.learn_route(&entry, &gw);
                Some(gw)
            }
            (Some(gw), None) => Some(gw),
            (None, Some(entry)) => Some(store.learned_route(&entry).unwrap_or(entry)),
            (None, None) => None,
        };
        if let Some(route) = &t.route {
            let st = stats
                .entry(route.clone())
                .or_insert_with(|| store.route_stats(route, now_ns));
            t.route_stats = st.clone().map(|s| (route.clone(), s));
        }
    }
    // One pass over the series for all traces of the tick.
    let topics: BTreeSet<&str> = traces
        .iter()
        .flat_map(|t| t.spans.iter().filter(|s| !is_rabbit(s)))
        .filter_map(|s| s.destination.as_deref())
        .collect();
    let hosts: BTreeSet<&str> = traces
        .iter()
        .flat_map(|t| t.spans.iter().map(|s| &*s.host))
        .filter(|h| !h.is_empty())
        .collect();
    let kafka_series =
        store.series_where(|s| s.dims.topic.as_deref().is_some_and(|t| topics.contains(t)));
    let host_series =
        store.series_where(|s| s.dims.host.as_deref().is_some_and(|h| hosts.contains(h)));
    let (any_host_metrics, any_kafka_metrics) = store.has_series();
    let dep_series = store.series_where(|s| s.dims.job.is_some());
    // RabbitMQ: the queue series, only when a trace of the tick has a RabbitMQ span.
    let rabbit_series = if traces.iter().any(|t| t.spans.iter().any(is_rabbit)) {
        store.series_where(|s| s.dims.queue.is_some())
    } else {
        Vec::new()
    };
    let queues = super::rabbit::Index::new(&rabbit_series);
    let dependencies = super::deps::dependencies(&dep_series, &p.dep_addresses);
    for t in traces.iter_mut() {
        let from = t.start_ns.saturating_sub(p.lookback_ns);
        let to = t.end_ns.saturating_add(p.lookahead_ns);
        let mut touched: BTreeSet<(String, String)> = BTreeSet::new();
        for s in t.spans.iter().filter(|s| !is_rabbit(s)) {
            if let Some(topic) = &s.destination {
                touched.insert((topic.clone(), s.consumer_group.clone().unwrap_or_default()));
            }
        }
        for (topic, group) in touched {
            let waits: Vec<(u64, u64)> = t
                .spans
                .iter()
                .filter(|s| s.destination.as_deref() == Some(topic.as_str()))
                .filter_map(|s| wait_window(t, s, p))
                .collect();
            let (from, to) = match (
                waits.iter().map(|w| w.0).min(),
                waits.iter().map(|w| w.1).max(),
            ) {
                (Some(a), Some(b)) => (a, b),
                _ => (from, to),
            };
            let row = kafka_row(&kafka_series, &topic, &group, from, to, p);
            if row.time_ns > 0 {
                t.kafka.push(row);
            } else if any_kafka_metrics {
                misses.kafka += 1;
            }
        }
        let culprit_host = t.spans[t.culprit].host.clone();
        let span_hosts: BTreeSet<&str> = t
            .spans
            .iter()
            .map(|s| &*s.host)
            .filter(|h| !h.is_empty())
            .collect();
        let mut joined = false;
        for h in span_hosts {
            let mut row = host_row(&host_series, h, from, to);
            if row.time_ns > 0 {
                row.culprit = *h == *culprit_host;
                t.hosts.push(row);
                joined = true;
            }
        }
        if !joined && any_host_metrics {
            misses.host += 1;
        }
        t.deps = dependency_rows(t, &dependencies, p);
        if !queues.is_empty() {
            let (q, missed) = queue_rows(t, &queues, &rabbit_series, (from, to), p);
            t.queues = q;
            misses.queue += missed;
        }
    }
    misses
}

/// For a consumer span, the interval (ns) whose lag or backlog explains its
/// message's wait: from as long before it was produced to as long after it
/// was consumed (a backlog builds and drains over about that time), widened
/// to the sampling interval of the lag (a sample may not fall inside a short
/// wait), not a pause minutes before or after. `None` for a span that did
/// not wait on a message.
fn wait_window(t: &TraceRow, s: &SpanRow, p: &JoinParams) -> Option<(u64, u64)> {
    let wait = s.async_wait_ms?;
    let consumed = t.start_ns + (s.start_ms * 1e6) as u64;
    let span = ((wait * 1e6) as u64).max(p.lag_sample_ns);
    Some((
        consumed.saturating_sub(2 * span),
        consumed.saturating_add(span),
    ))
}

/// One row per RabbitMQ queue and role (publish, consume) the trace touches,
/// over the span that waited on it longest (see [`super::rabbit`]).
fn queue_rows(
    t: &TraceRow,
    index: &super::rabbit::Index,
    series: &[Series],
    (from, to): (u64, u64),
    p: &JoinParams,
) -> (Vec<super::rabbit::QueueRow>, u64) {
    let mut best: BTreeMap<((String, String), &'static str), usize> = BTreeMap::new();
    let mut missed = 0;
    for (i, s) in t.spans.iter().enumerate().filter(|(_, s)| is_rabbit(s)) {
        let role = if s.kind == "producer" || s.async_wait_ms.is_none() && s.kind != "consumer" {
            "publish"
        } else {
            "consume"
        };
        let found = index.resolve(s);
        if found.is_empty() {
            missed = 1;
        }
        let weight = |x: &SpanRow| x.async_wait_ms.unwrap_or(0.0) + x.duration_ms;
        for q in found {
            let e = best.entry((q, role)).or_insert(i);
            if weight(&t.spans[*e]) < weight(s) {
                *e = i;
            }
        }
    }
    let rows = best
        .into_iter()
        .filter_map(|(((vhost, queue), role), i)| {
            let s = &t.spans[i];
            // A consumer: the queue while its message waited (as for Kafka lag).
            let window = wait_window(t, s, p).unwrap_or((from, to));
            let mut r = super::rabbit::queue_row(series, (&vhost, &queue), window.0, window.1);
            (r.time_ns > 0).then(|| {
                r.span_id = Hex16::of(s.span_id).as_str().to_string();
                r.role = role;
                r
            })
        })
        .collect();
    (rows, missed)
}

/// One row per server the trace called (see [`super::deps`]).
fn dependency_rows(
    t: &TraceRow,
    dependencies: &[super::deps::Dependency<'_>],
    p: &JoinParams,
) -> Vec<super::deps::DepRow> {
    use super::deps::{calls, envoy_clusters, norm, row};
    if dependencies.is_empty() {
        return Vec::new();
    }
    // (dependency, cluster) → the longest span to it.
    let mut longest: BTreeMap<(usize, Option<String>), usize> = BTreeMap::new();
    for (i, s) in t.spans.iter().enumerate() {
        let Some(host) = s.server_address.as_deref() else {
            continue;
        };
        let addr = match s.server_port {
            Some(port) => norm(&format!("{host}:{port}")),
            None => norm(host),
        };
        let bare = norm(host);
        for (di, d) in dependencies.iter().enumerate() {
            let keys: Vec<Option<String>> = if d.system == "envoy" {
                envoy_clusters(d, &bare).into_iter().map(Some).collect()
            } else if calls(d, &addr, s.db_system.as_deref()) {
                vec![None]
            } else {
                Vec::new()
            };
            for k in keys {
                let e = longest.entry((di, k)).or_insert(i);
                if t.spans[*e].duration_ms < s.duration_ms {
                    *e = i;
                }
            }
        }
    }
    longest
        .into_iter()
        .filter_map(|((di, cluster), i)| {
            let s = &t.spans[i];
            let start = t.start_ns + (s.start_ms * 1e6) as u64;
            let end = t.start_ns + (s.end_ms * 1e6) as u64;
            let mut r = row(
                &dependencies[di],
                cluster.as_deref(),
                s.db_operation.as_deref(),
                (start, end),
                p.dep_sample_ns,
            );
            (r.time_ns > 0).then(|| {
                r.span_id = Hex16::of(s.span_id).as_str().to_string();
                r.address = match s.server_port {
                    Some(port) => format!("{}:{port}", s.server_address.as_deref().unwrap_or("")),
                    None => s.server_address.clone().unwrap_or_default(),
                };
                r
            })
        })
        .collect()
}

fn kafka_row(
    series: &[Series],
    topic: &str,
    group: &str,
    from: u64,
    to: u64,
    p: &JoinParams,
) -> KafkaRow {
    let mut row = KafkaRow {
        topic: topic.to_string(),
        group: group.to_string(),
        ..Default::default()
    };
    let mut bump = |t: u64| row_time(&mut row.time_ns, t);
    let mut lag = None;
    let mut trend: Option<f64> = None;
    let mut lag_s = None;
    let mut status = None;
    let mut alarm = false;
    let mut storm = false;
    let mut rate = None;
    let mut groups: BTreeSet<&str> = BTreeSet::new();
    let mut rising = false;
    for s in series
        .iter()
        .filter(|s| s.dims.topic.as_deref() == Some(topic))
    {
        let group_ok =
            group.is_empty() || s.dims.group.is_none() || s.dims.group.as_deref() == Some(group);
        if !group_ok {
            continue;
        }
        let Some((t, v)) = s.max_in(from, to) else {
            continue;
        };
        match s.name.as_str() {
            "kafka.consumer_group.lag_sum" | "kafka.consumer_group.lag" => {
                lag = Some(lag.map_or(v, |x: f64| x.max(v)));
                // Trend: how the lag moved over the join interval (last − first point).
                let pts: Vec<f64> = s
                    .points
                    .iter()
                    .filter(|(t, _)| *t >= from && *t <= to)
                    .map(|x| x.1)
                    .collect();
                if let (Some(first), Some(last)) = (pts.first(), pts.last()) {
                    trend = Some(trend.unwrap_or(0.0) + (last - first));
                    // Growing: at least three points, never coming down, by `lag_growth` in all.
                    rising |= pts.len() >= 3
                        && pts.windows(2).all(|w| w[1] >= w[0])
                        && last - first >= p.lag_growth;
                }
                if let Some(g) = s.dims.group.as_deref() {
                    groups.insert(g);
                }
            }
            "kafka.consumer_group.lag_seconds" => lag_s = Some(lag_s.map_or(v, |x: f64| x.max(v))),
            "kafka.consumer_group.partition_status" => {
                status = Some(status.map_or(v as i64, |x: i64| x.max(v as i64)));
            }
            "kafka.consumer_group.lag_alarm" => alarm |= v >= 1.0,
            "kafka.topic.retry_storm" => storm |= v >= 1.0,
            "kafka.topic.produce_rate" => rate = Some(rate.map_or(v, |x: f64| x.max(v))),
            _ => continue,
        }
        bump(t);
    }
    // Group status series carry only the group (no topic): joined by group.
    row.lag = lag;
    row.lag_trend = trend;
    row.lag_seconds = lag_s;
    row.status = status;
    row.alarm = alarm;
    row.retry_storm = storm;
    row.produce_rate = rate;
    row.growing = rising;
    row.lagging = rising || lag.is_some_and(|l| l >= p.lag_threshold);
    // The group from the metrics when the spans do not name it (old messaging conventions).
    if row.group.is_empty() && groups.len() == 1 {
        row.group = groups.into_iter().next().unwrap_or_default().to_string();
    }
    row
}

fn row_time(slot: &mut u64, t: u64) {
    *slot = (*slot).max(t);
}

fn host_row(series: &[Series], host: &str, from: u64, to: u64) -> HostRow {
    let mut row = HostRow {
        host: host.to_string(),
        ..Default::default()
    };
    let max = |a: Option<f64>, b: f64| Some(a.map_or(b, |x| x.max(b)));
    let min = |a: Option<f64>, b: f64| Some(a.map_or(b, |x| x.min(b)));
    let mut mem_total = None;
    let mut mem_avail = None;
    let mut fb: BTreeMap<String, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for s in series
        .iter()
        .filter(|s| s.dims.host.as_deref() == Some(host))
    {
        let mode = s
            .attr("cpu.mode")
            .or_else(|| s.attr("state"))
            .or_else(|| s.attr("system.memory.state"));
        let pick = match s.name.as_str() {
            "system.cpu.utilization" if mode == Some("idle") => {
                // The least idle in the interval: the busiest moment.
                s.points
                    .iter()
                    .filter(|(t, _)| *t >= from && *t <= to)
                    .fold(None, |acc: Option<(u64, f64)>, p| match acc {
                        Some(a) if a.1 <= p.1 => Some(a),
                        _ => Some(*p),
                    })
                    .map(|(t, v)| {
                        row.cpu_busy = max(row.cpu_busy, 1.0 - v);
                        t
                    })
            }
            "system.cpu.utilization" if mode == Some("iowait") || mode == Some("wait") => {
                s.max_in(from, to).map(|(t, v)| {
                    row.iowait = max(row.iowait, v);
                    t
                })
            }
            "system.memory.utilization" if mode == Some("used") => {
                s.max_in(from, to).map(|(t, v)| {
                    row.mem_used = max(row.mem_used, v);
                    t
                })
            }
            "system.linux.memory.available" => s
                .points
                .iter()
                .filter(|(t, _)| *t >= from && *t <= to)
                .map(|p| p.1)
                .reduce(f64::min)
                .map(|v| {
                    mem_avail = min(mem_avail, v);
                    s.points.back().map_or(0, |p| p.0)
                }),
            "system.memory.usage" => s.max_in(from, to).map(|(t, v)| {
                mem_total = Some(mem_total.unwrap_or(0.0) + v);
                t
            }),
            "system.disk.utilization" => s.max_in(from, to).map(|(t, v)| {
                row.disk_util = max(row.disk_util, v);
                t
            }),
            "system.disk.io_time" => s.rate_in(from, to).map(|v| {
                row.disk_util = max(row.disk_util, v.min(1.0));
                s.points.back().map_or(0, |p| p.0)
            }),
            "DCGM_FI_DEV_GPU_UTIL" => s.max_in(from, to).map(|(t, v)| {
                row.gpu_util = max(row.gpu_util, v / 100.0);
                t
            }),
            "DCGM_FI_DEV_FB_USED" | "DCGM_FI_DEV_FB_FREE" => s.max_in(from, to).map(|(t, v)| {
                let gpu = s.attr("gpu").or_else(|| s.attr("UUID")).unwrap_or("");
                let e = fb.entry(gpu.to_string()).or_default();
                if s.name == "DCGM_FI_DEV_FB_USED" {
                    e.0 = Some(v);
                } else {
                    e.1 = Some(v);
                }
                t
            }),
            "system.linux.pressure" => s.max_in(from, to).map(|(t, v)| {
                match s.attr("resource") {
                    Some("cpu") => row.psi_cpu = max(row.psi_cpu, v),
                    Some("memory") => row.psi_memory = max(row.psi_memory, v),
                    Some("io") => row.psi_io = max(row.psi_io, v),
                    _ => {}
                }
                t
            }),
            _ => None,
        };
        if let Some(t) = pick {
            row_time(&mut row.time_ns, t);
        }
    }
    for (used, free) in fb.values() {
        if let (Some(u), Some(f)) = (used, free) {
            if u + f > 0.0 {
                row.gpu_mem_used = max(row.gpu_mem_used, u / (u + f));
            }
        }
    }
    if let (Some(a), Some(total)) = (mem_avail, mem_total) {
        if total > 0.0 {
            row.mem_available_ratio = Some(a / total);
        }
    }
    row
}

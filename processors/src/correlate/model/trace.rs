//! A kept trace as the analysis sees it: its spans as rows (critical path,
//! self times, the inferences of the layout), and what the evidence
//! sources joined to it.

use std::sync::Arc;

use super::attributes::SpanAttrs;
use super::log::{LogEvidence, Parts};

/// Where a span is in the batch: (resource_spans, scope_spans, span) indexes.
pub type SpanRef = (usize, usize, usize);

/// A span's kind, as OTLP says it (an unspecified kind is `internal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SpanKind {
    /// Internal work (and a kind left unspecified).
    #[default]
    Internal,
    /// Serves a request.
    Server,
    /// Makes a request.
    Client,
    /// Sends a message.
    Producer,
    /// Takes a message.
    Consumer,
}

impl SpanKind {
    /// Its name in the `spans` table, the page and the annotations.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanKind::Internal => "internal",
            SpanKind::Server => "server",
            SpanKind::Client => "client",
            SpanKind::Producer => "producer",
            SpanKind::Consumer => "consumer",
        }
    }
}

impl std::fmt::Display for SpanKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A span's status, as OTLP says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SpanStatus {
    /// Left unset.
    #[default]
    Unset,
    /// Marked OK.
    Ok,
    /// Marked ERROR.
    Error,
}

impl SpanStatus {
    /// Its name in the `spans` table, the page and the evidence.
    pub fn as_str(self) -> &'static str {
        match self {
            SpanStatus::Unset => "unset",
            SpanStatus::Ok => "ok",
            SpanStatus::Error => "error",
        }
    }
}

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
    pub service: Arc<str>,
    /// `host.name` (shared by the spans of a resource).
    pub host: Arc<str>,
    /// Span name.
    pub name: String,
    /// The operation's identity, for baselines: kind and the first present
    /// of the route (`http.route`, `url.template`), the RPC (`rpc.service`
    /// and `rpc.method`), the query (`db.system`, `db.operation.name`,
    /// `db.collection.name`, or `db.query.summary`), a GenAI call's name
    /// (`{operation} {model}`), the destination and kind of a message, the
    /// address a client called; else the name.
    pub op: String,
    /// Its kind.
    pub kind: SpanKind,
    /// The attributes read as they are (`attributes::SpanAttrs`; a
    /// `SpanRow` derefs to them: `span.http_status`).
    pub attrs: SpanAttrs,
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
    /// Its status.
    pub status: SpanStatus,
    /// Status message.
    pub status_message: String,
    /// For a client (or producer) span: the service that answered it, from
    /// its server child in the trace, else `peer.service`, else its address
    /// mapped to the service seen serving it (see `analysis::peers`).
    pub callee: Option<Arc<str>>,
    /// The model's normal prompt length (median input tokens), once known.
    pub prompt_baseline: Option<f64>,
    /// `exception.type` of an `exception` event.
    pub exception_type: Option<String>,
    /// `exception.message` of an `exception` event.
    pub exception_message: Option<String>,
    /// Time from the span's start to its first child's start (ms), when it has children.
    pub wait_ms: Option<f64>,
    /// Critical-path time of the span and its descendants (ms).
    pub path_ms: f64,
    /// The cache miss was inferred from the layout (read, fallback, write).
    pub cache_inferred: bool,
    /// A wait for a pooled connection, recognised by its instrumentation
    /// (Go's `http.getconn`, Node's `pg-pool.connect` and
    /// `generic-pool.acquire`, a span with `db.client.connection.*` attributes),
    /// not by a word in its name.
    pub pool_wait: bool,
    /// A client span marked ERROR for a 4xx answer (the server's answer, not an error origin).
    pub client_error: bool,
    /// A refusal by the service itself (see `analysis::refusal`): it failed
    /// fast with nothing under it after its calls to this target failed.
    pub refused_target: Option<Arc<str>>,
    /// Attempt number (1-based) when the span is one attempt of a retried call.
    pub attempt: Option<i64>,
    /// Attempts of the call it belongs to.
    pub attempts: Option<i64>,
    /// Failed attempts of that call.
    pub failed_attempts: Option<i64>,
    /// From the first attempt's start to the last attempt's end (ms).
    pub retry_window_ms: Option<f64>,
    /// The mean time between one attempt's end and the next one's start
    /// (ms): the client's backoff.
    pub retry_gap_ms: Option<f64>,
    /// What the failed attempts answered most often (a status or an error type).
    pub retry_trigger: Option<String>,
    /// A failed attempt whose call succeeded on a later attempt.
    pub recovered: bool,
    /// For a retry (a later attempt): the most retries its target received
    /// in one second around it, from every trace seen (`analysis::retries`).
    pub target_retries_per_s: Option<f64>,
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
    /// The evidence source that claims it (a messaging span's broker), if any.
    pub claimed: Option<&'static str>,
}

impl std::ops::Deref for SpanRow {
    type Target = SpanAttrs;
    fn deref(&self) -> &SpanAttrs {
        &self.attrs
    }
}

impl std::ops::DerefMut for SpanRow {
    fn deref_mut(&mut self) -> &mut SpanAttrs {
        &mut self.attrs
    }
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
    pub logs: Vec<Arc<LogEvidence>>,
    /// What sources keep of the trace for their own columns (the
    /// gateway's hop of each record), as their log join found it.
    pub parts: Parts,
    /// What the evidence sources joined to it, as its evidence shows it.
    pub joined: Vec<Joined>,
    /// Calls a proxy on the path forwarded, as a source's log join found
    /// them (a gateway's access-log line): the span that sent the call
    /// through the proxy and the upstream address the proxy sent it to.
    /// `Peers` learns each address as the service of the server span that
    /// answered below that span.
    pub proxied: Vec<(u64, Arc<str>)>,
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

/// One piece of evidence a source joined to a trace, as the trace's
/// `rca.evidence` shows it.
#[derive(Debug, Clone)]
pub enum Joined {
    /// A row of the `metrics` list, tagged with its `kind`.
    Metric(&'static str, serde_json::Value),
    /// A field of its own (`route_stats`), shared by the traces it joins.
    Field(&'static str, Arc<serde_json::Value>),
    /// What a source knows of one span (by index; `code`): shown as the
    /// field of that name, and as `rca.{name}.{key}` for each of its plain
    /// values, when the span is the verdict's culprit.
    Span(usize, &'static str, Arc<SpanFacts>),
}

/// What a source knows of one span: its values (an object; each plain one
/// becomes `rca.{name}.{key}` on the culprit), and parts written as JSON
/// when first shown (a flame graph), which only the culprit's
/// `rca.evidence` shows: never built for a span that is not the culprit,
/// into values, copied or walked again.
#[derive(Debug, Clone, Default)]
pub struct SpanFacts {
    /// The values.
    pub values: serde_json::Value,
    /// The parts written when shown, by key.
    pub written: Vec<(&'static str, Arc<dyn Written>)>,
}

/// A part of a span's facts written as JSON when it is first shown, then
/// kept (a source's flame graph of the span's samples).
pub trait Written: std::fmt::Debug + Send + Sync {
    /// The part as JSON (`None`: nothing to show).
    fn json(&self) -> Option<&serde_json::value::RawValue>;
}

impl std::ops::Deref for SpanFacts {
    type Target = serde_json::Value;
    fn deref(&self) -> &serde_json::Value {
        &self.values
    }
}

impl serde::Serialize for SpanFacts {
    /// One object: the values' fields, then the written parts'.
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        for (k, v) in self.values.as_object().into_iter().flatten() {
            m.serialize_entry(k, v)?;
        }
        for (k, w) in &self.written {
            if let Some(v) = w.json() {
                m.serialize_entry(k, v)?;
            }
        }
        m.end()
    }
}

impl TraceRow {
    /// The `metrics` rows of one kind joined to it.
    pub fn joined_metrics<'a>(
        &'a self,
        kind: &'a str,
    ) -> impl Iterator<Item = &'a serde_json::Value> {
        self.joined.iter().filter_map(move |j| match j {
            Joined::Metric(k, v) if *k == kind => Some(v),
            _ => None,
        })
    }
}

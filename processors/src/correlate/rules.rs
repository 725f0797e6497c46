//! The rule engine: root-cause rules, SQL over Arrow tables of the joined
//! evidence, run with DataFusion once per batch of kept traces (one
//! decision tick). The engine knows the core tables (the trace and its
//! logs) and is handed the sources' tables and rules.
//!
//! Tables: the core ones, `traces` (one row per trace), `spans` (one row
//! per span) and `logs` (one row per log record of the trace), declared in
//! `super::model::columns` and `super::model::attributes`, and each evidence
//! source's, declared in its file under `super::source`. [`reference`]
//! lists them all, with their columns, for the README.
//!
//! A rule returns `trace_id, confidence, summary` and optionally
//! `culprit_span_id`, `culprit_service` (the service at fault when the span
//! does not name it: an upstream address, a gateway, a dependency),
//! `culprit_kind` (service, callee, dependency, limiter, host, consumer,
//! gateway; by default the cause's), `evidence` (text or JSON), `explained_ms` (the
//! critical-path time it accounts for; by default the critical time of the
//! culprit span's subtree) and `explains_failure` (it says why the request
//! failed). The verdict ranks findings by what they explain (see
//! `super::analysis::verdict`).

use causeway_core::config::{ConfigError, Duration, Validate};
use datafusion::arrow::array::{Array, Float64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::datasource::{MemTable, TableType};
use datafusion::execution::{SessionState, TaskContext};
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{
    reset_plan_states, Boundedness, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::memory::MemoryStream;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use datafusion::prelude::{SessionConfig, SessionContext};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::Arc;

use super::analysis::verdict::dependency_name;
use super::model::cause::{
    Cause, CulpritKind, Face, CIRCUIT_OPEN, CONSUMER_LAG, DB_CONNECTION_SATURATION, LONG_PROMPT,
    RATE_LIMITED, RETRY_STORM, TLS_HANDSHAKE, UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE,
};
use super::model::columns::{
    fill_span_attributes, fill_spans, fill_traces, LOG_COLUMNS, SPAN_ATTRIBUTES, SPAN_COLUMNS,
    TRACE_COLUMNS,
};
use super::model::table::{schema_of, Cols, Table, Ty};
use super::model::SpanRow;
use super::model::{Finding, Rule, TraceRow};
use super::source::Sources;
use crate::correlate::model::trace::SpanKind;
use std::sync::LazyLock;

/// Time waiting before work began: a callee's accept queue, a pool or lock
/// of the service's own.
pub static QUEUEING: Cause = Cause::new("queueing", queue_kind);

fn queue_kind(c: &SpanRow) -> CulpritKind {
    if c.queue_ms.is_some() {
        CulpritKind::Callee
    } else {
        CulpritKind::Service
    }
}

/// An error with no mechanism found: it names the span where it began.
pub static ERROR: Cause = Cause::new("error", error_kind)
    .fallback()
    .status_only_at_response()
    .face(Face::Error);

/// A span slower than its baseline, no mechanism found: it names the span.
pub static SLOW_DEPENDENCY: Cause = Cause::new("slow_dependency", slow_kind).fallback().waits();

/// An error answered by a callee that left no span of its own (an HTTP
/// 5xx on the client span, nothing traced below) is the callee's; any
/// other error is the service's where it began.
fn error_kind(c: &SpanRow) -> CulpritKind {
    if c.kind == SpanKind::Client && c.http_status.is_some_and(|s| s >= 500) {
        CulpritKind::Callee
    } else {
        CulpritKind::Service
    }
}

fn slow_kind(c: &SpanRow) -> CulpritKind {
    if dependency_name(c).is_some() {
        CulpritKind::Dependency
    } else if c.kind == SpanKind::Client {
        CulpritKind::Callee
    } else {
        CulpritKind::Service
    }
}

/// A root-cause rule: SQL over the joined evidence.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The rule's name, written to `rca.rule`. A user rule named like a
    /// built-in rule replaces it.
    pub name: String,
    /// The cause it concludes: one of the vocabulary, or a new cause.
    pub cause: String,
    /// A SELECT over the tables `traces`, `spans`, `logs` and those of the
    /// evidence sources (`route_stats`, `kafka_lag`, `rabbitmq_queue`, `host`, `dependency`,
    /// `nats_consumer`), returning one row per trace it explains with
    /// the columns `trace_id`, `confidence` (0..1) and `summary`, and
    /// optionally `culprit_span_id` and `evidence`.
    pub sql: String,
}

/// `processors.correlate.retry_storm`: when retries are a storm. The
/// diagnosis guides' storm is retries in aggregate: many requests retrying
/// into one target at a rate that multiplies its load (more than 200
/// retries a second on one target). One request's retries, however many
/// and however fast, are its client handling a transient failure: the
/// cause is what the attempts met, and the retries are its evidence.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryStormConfig {
    /// Retries a second into one target, counted over every trace the
    /// daemon sees (kept or not), from which the requests retrying into it
    /// are caught in a `retry_storm`.
    #[serde(default = "storm_rate")]
    pub min_rate: f64,
    /// Removed: one request's retries are never a storm by themselves
    /// (see `min_rate`). Reported as an error when set.
    #[serde(default)]
    #[schemars(skip)]
    pub min_retries: Option<serde_yaml::Value>,
    /// Removed, as `min_retries`.
    #[serde(default)]
    #[schemars(skip)]
    pub min_attempts: Option<serde_yaml::Value>,
    /// Removed, as `min_retries`.
    #[serde(default)]
    #[schemars(skip)]
    pub max_interval: Option<serde_yaml::Value>,
}

impl Validate for RetryStormConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if !(self.min_rate.is_finite() && self.min_rate > 0.0) {
            e.push(ConfigError::new("min_rate", "must be a number above 0"));
        }
        for (key, set) in [
            ("min_retries", self.min_retries.is_some()),
            ("min_attempts", self.min_attempts.is_some()),
            ("max_interval", self.max_interval.is_some()),
        ] {
            if set {
                e.push(ConfigError::new(
                    key,
                    "was removed: one request's retries are evidence on what they met, never a storm by themselves; a storm is retries in aggregate into one target, set by `min_rate` (retries a second)",
                ));
            }
        }
        e
    }
}

impl Default for RetryStormConfig {
    fn default() -> Self {
        RetryStormConfig {
            min_rate: storm_rate(),
            min_retries: None,
            min_attempts: None,
            max_interval: None,
        }
    }
}

/// The guides' storm: over 200 retries a second on one target.
fn storm_rate() -> f64 {
    200.0
}

/// Columns every rule must return.
pub const REQUIRED_COLUMNS: [&str; 3] = ["trace_id", "confidence", "summary"];

/// The built-in rules over the trace alone (its spans and their layout).
/// Each is data: name, cause, SQL. The sources bring their own.
pub fn builtin() -> Vec<Rule> {
    builtin_with(&RetryStormConfig::default(), Duration::millis(500))
}

/// The built-in rules, with the retry-storm thresholds and the least wait
/// of a message that is lag by itself, from the config.
pub fn builtin_with(storm: &RetryStormConfig, min_message_wait: Duration) -> Vec<Rule> {
    [
        answers(),
        refusals(),
        phases(),
        waits(storm, min_message_wait),
        fallbacks(),
    ]
    .concat()
}

/// What a callee answered: a limit, a timeout, unavailable.
fn answers() -> Vec<Rule> {
    let r = Rule::builtin;
    vec![
        r(
            "client_429",
            &RATE_LIMITED,
            r#"
SELECT s.trace_id, 1.0 AS confidence,
  concat(max(s.service), ' was rate-limited by ', coalesce(max(a.service), max(g.service), max(s.callee), max(s.server_address), max(s.rpc_service), 'its upstream'), ': ',
         CAST(count(*) AS VARCHAR), ' calls answered ', CASE WHEN bool_or(s.http_status = 429) THEN '429' ELSE 'RESOURCE_EXHAUSTED' END) AS summary,
  max(s.span_id) AS culprit_span_id,
  -- The limiter: a traced server that answered the 429, or the gateway
  -- whose line answered this very call (its traceparent is the call's
  -- span); else the call's callee or address stands in.
  coalesce(max(a.service), max(g.service)) AS culprit_service,
  CASE WHEN bool_or(t.failed) AND bool_or(NOT s.recovered) THEN max(t.duration_ms)
       ELSE coalesce(max(s.retry_window_ms), sum(s.duration_ms)) END AS explained_ms,
  bool_or(t.failed) AND bool_or(NOT s.recovered) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
  LEFT JOIN spans a ON a.trace_id = s.trace_id AND a.parent_id = s.span_id AND a.kind = 'server'
    AND (a.http_status = 429 OR a.grpc_status = 'RESOURCE_EXHAUSTED')
  LEFT JOIN logs g ON g.trace_id = s.trace_id AND g.span_id = s.span_id AND g.gateway AND g.status = 429
WHERE (s.http_status = 429 OR s.grpc_status = 'RESOURCE_EXHAUSTED') AND s.kind = 'client'
GROUP BY s.trace_id"#,
        ),
        r(
            "client_timeout",
            &UPSTREAM_TIMEOUT,
            r#"
SELECT s.trace_id, 1.0 AS confidence,
  concat(max(s.service), ' timed out calling ', coalesce(max(s.callee), max(s.server_address), max(s.name)), ' after ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  first_value(s.span_id ORDER BY s.duration_ms DESC) AS culprit_span_id,
  -- Retried timeouts hold the retries' window (the attempts and the
  -- waits between them).
  CASE WHEN bool_or(t.failed) AND bool_or(NOT s.recovered) THEN max(t.duration_ms)
       ELSE coalesce(max(s.retry_window_ms), max(s.duration_ms)) END AS explained_ms,
  bool_or(t.failed) AND bool_or(NOT s.recovered) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.kind IN ('client', 'internal')
  AND (lower(coalesce(s.error_type, '')) LIKE '%timeout%' OR lower(coalesce(s.exception_type, '')) LIKE '%timeout%'
       OR lower(coalesce(s.error_type, '')) LIKE '%deadline%' OR lower(coalesce(s.exception_message, '')) LIKE '%timed out%'
       OR s.http_status = 504 OR s.grpc_status = 'DEADLINE_EXCEEDED'
       OR lower(coalesce(s.exception_message, '')) LIKE 'deadline_exceeded%'
       -- Go's http.Client and context: "context deadline exceeded",
       -- "(Client.Timeout exceeded while awaiting headers)".
       OR lower(coalesce(s.exception_message, s.status_message, '')) LIKE '%deadline exceeded%'
       OR lower(coalesce(s.exception_message, s.status_message, '')) LIKE '%timeout exceeded%'
       -- An attempt the client itself cancelled and then retried: its
       -- own deadline passed (Go's "net/http: request canceled" when
       -- http.Client's Timeout fires), not its caller's.
       OR (s.attempts >= 2 AND s.kind = 'client'
           AND lower(coalesce(s.exception_message, s.status_message, '')) LIKE '%request canceled%'))
GROUP BY s.trace_id"#,
        ),
        r(
            "client_unavailable",
            &UPSTREAM_UNAVAILABLE,
            r#"
SELECT s.trace_id, 1.0 AS confidence,
  concat(first_value(s.service ORDER BY s.start_ms DESC), ' could not reach ',
         first_value(coalesce(s.callee, s.server_address, s.name) ORDER BY s.start_ms DESC), ': ',
         coalesce(max(s.error_type), max(s.exception_type), max(s.grpc_status), CAST(max(s.http_status) AS VARCHAR), max(s.retry_trigger))) AS summary,
  -- The innermost of nested calls that failed so (it began last): the
  -- one that met the callee, the outer ones passed its answer on.
  first_value(s.span_id ORDER BY s.start_ms DESC) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) AND bool_or(NOT s.recovered) AND max(s.attempts) IS NULL THEN max(t.duration_ms)
       ELSE coalesce(max(s.retry_window_ms), sum(s.duration_ms)) END AS explained_ms,
  bool_or(t.failed) AND bool_or(NOT s.recovered) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.kind = 'client' AND (s.http_status IN (502, 503)
   OR lower(coalesce(s.error_type, '')) LIKE '%refused%' OR lower(coalesce(s.exception_type, '')) LIKE '%connect%'
   OR lower(coalesce(s.exception_message, '')) LIKE '%econnrefused%'
   -- grpc-go's dial failure, in the span's status only
   OR lower(s.status_message) LIKE '%connection refused%'
   OR lower(coalesce(s.error_type, '')) LIKE '%unavailable%' OR s.grpc_status = 'UNAVAILABLE'
   OR lower(coalesce(s.exception_message, '')) LIKE 'unavailable%'
   -- the connection closed under the call: the server went away
   OR lower(coalesce(s.exception_message, '')) LIKE '%channel closed%'
   OR lower(coalesce(s.exception_message, '')) LIKE '%connection reset%'
   OR lower(coalesce(s.exception_message, '')) LIKE '%econnreset%'
   -- the attempts answered under one client span (urllib3's Retry, Envoy's retries)
   OR (s.attempt IS NULL AND s.retry_trigger IN ('502', '503')))
GROUP BY s.trace_id"#,
        ),
    ]
}

/// A client-side or server-side refusal: an open breaker, a database out
/// of connections.
fn refusals() -> Vec<Rule> {
    let r = Rule::builtin;
    vec![
        r(
            "client_circuit_open",
            &CIRCUIT_OPEN,
            r#"
WITH b AS (
  SELECT s.trace_id, s.span_id, s.service, s.start_ms, s.duration_ms,
    coalesce(s.exception_type, s.error_type, s.status_message) AS what,
    -- resilience4j names its breaker: "CircuitBreaker 'x' is OPEN and does not permit further calls"
    CASE WHEN coalesce(s.exception_message, s.status_message, '') LIKE '%CircuitBreaker ''%''%'
         THEN regexp_replace(coalesce(s.exception_message, s.status_message, ''), '^.*CircuitBreaker ''([^'']+)''.*$', '\1') END AS breaker
  FROM spans s
  WHERE lower(coalesce(s.exception_type, '')) LIKE '%callnotpermitted%'
     OR lower(coalesce(s.exception_type, '')) LIKE '%brokencircuit%'
     OR lower(coalesce(s.exception_type, '')) LIKE '%circuitbreakeropen%'
     OR regexp_like(lower(concat(coalesce(s.exception_message, ''), ' ', coalesce(s.error_type, ''), ' ', coalesce(s.status_message, ''))),
                    'breaker is open|short-circuited')
)
SELECT b.trace_id, 1.0 AS confidence,
  concat(max(b.service), '''s circuit breaker ', coalesce(concat('''', max(b.breaker), ''' '), ''),
         'is open: the call failed fast without reaching ', coalesce(max(b.breaker), 'its upstream'), ' (', max(b.what), ')') AS summary,
  first_value(b.span_id ORDER BY b.start_ms DESC) AS culprit_span_id,
  -- The breaker's name, which resilience4j's instances take from the
  -- backend they guard: the service at fault.
  max(b.breaker) AS culprit_service,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(b.duration_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM b JOIN traces t ON t.trace_id = b.trace_id
GROUP BY b.trace_id"#,
        ),
        r(
            "client_refusal",
            &CIRCUIT_OPEN,
            r#"
SELECT s.trace_id, 0.9 AS confidence,
  concat(max(s.service), ' refused its own call to ', max(s.refused_target),
         ' without reaching it, after its recent calls there failed: an open circuit breaker (',
         coalesce(max(s.exception_type), max(s.error_type), nullif(max(s.status_message), ''), max(s.name)), ')') AS summary,
  first_value(s.span_id ORDER BY s.start_ms DESC) AS culprit_span_id,
  max(s.refused_target) AS culprit_service,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.duration_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.refused_target IS NOT NULL
GROUP BY s.trace_id"#,
        ),
        r(
            "db_refused",
            &DB_CONNECTION_SATURATION,
            r#"
SELECT s.trace_id, 1.0 AS confidence,
  concat(max(s.service), ' could not connect to ', max(s.system), ': every connection slot was taken (', max(s.said), ')') AS summary,
  first_value(s.span_id ORDER BY s.start_ms DESC) AS culprit_span_id,
  max(s.system) AS culprit_service,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.duration_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM (
  -- The server's own refusal, as its driver reports it: PostgreSQL's
  -- SQLSTATE 53300, MySQL's error 1040.
  SELECT x.trace_id, x.span_id, x.service, x.start_ms, x.duration_ms,
    coalesce(x.exception_message, x.status_message, x.error_type) AS said,
    CASE WHEN regexp_like(lower(concat(coalesce(x.exception_message, ''), ' ', coalesce(x.status_message, ''))),
                          'too many clients already|remaining connection slots are reserved')
           OR x.error_type = '53300' THEN 'postgresql'
         WHEN lower(concat(coalesce(x.exception_message, ''), ' ', coalesce(x.status_message, ''))) LIKE '%too many connections%' THEN 'mysql'
    END AS system
  FROM spans x
) s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.system IS NOT NULL
GROUP BY s.trace_id"#,
        ),
    ]
}

/// Where a call's own time went: its TLS handshake, its prompt.
fn phases() -> Vec<Rule> {
    let r = Rule::builtin;
    vec![
        r(
            "tls_handshake",
            &TLS_HANDSHAKE,
            r#"
SELECT s.trace_id, 1.0 AS confidence,
  concat('TLS handshake with ', coalesce(max(s.server_address), max(c.callee), max(c.server_address), max(p.callee), max(p.server_address), 'the upstream'), ' took ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms of ', CAST(CAST(max(t.duration_ms) AS BIGINT) AS VARCHAR),
         ' ms (', max(s.service), ')') AS summary,
  max(s.span_id) AS culprit_span_id,
  max(s.duration_ms) AS explained_ms
FROM spans s JOIN traces t ON s.trace_id = t.trace_id
  -- otelhttptrace's phases hang under http.getconn, under the call: name its peer.
  LEFT JOIN spans p ON p.trace_id = s.trace_id AND p.span_id = s.parent_id
  LEFT JOIN spans c ON c.trace_id = s.trace_id AND c.span_id = p.parent_id
WHERE s.name IN ('http.tls', 'tls.handshake', 'tls_handshake', 'TLS handshake', 'tls.connect')
GROUP BY s.trace_id"#,
        ),
        r(
            "long_prompt",
            &LONG_PROMPT,
            r#"
SELECT s.trace_id, 1.0 AS confidence,
  concat('a prompt of ', CAST(max(s.input_tokens) AS VARCHAR), ' tokens to ', coalesce(max(s.gen_ai_model), max(s.service)),
         CASE WHEN max(s.prompt_baseline) IS NULL THEN ' (over 8192)'
              ELSE concat(' (', CAST(CAST(max(s.input_tokens) / max(s.prompt_baseline) AS BIGINT) AS VARCHAR), 'x its usual ',
                          CAST(CAST(max(s.prompt_baseline) AS BIGINT) AS VARCHAR), ')') END,
         ': prefill took ', CAST(CAST(max(s.gen_ai_prefill_ms) AS BIGINT) AS VARCHAR), ' ms of ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  first_value(s.span_id ORDER BY s.gen_ai_prefill_ms DESC) AS culprit_span_id,
  max(s.gen_ai_prefill_ms) AS explained_ms
FROM spans s
WHERE s.gen_ai_prefill_ms >= 100 AND s.gen_ai_prefill_ms >= 0.5 * s.duration_ms
  AND ((s.prompt_baseline IS NOT NULL AND s.input_tokens >= 4 * s.prompt_baseline)
       OR (s.prompt_baseline IS NULL AND s.input_tokens > 8192))
GROUP BY s.trace_id"#,
        ),
    ]
}

/// Time spent waiting: retries, a message's wait, a queue.
fn waits(storm: &RetryStormConfig, min_message_wait: Duration) -> Vec<Rule> {
    let min_wait_ms = min_message_wait.get().as_secs_f64() * 1000.0;
    let r = Rule::builtin;
    vec![
        r(
            "retry_storm",
            &RETRY_STORM,
            &format!(
                r#"
SELECT s.trace_id, 1.0 AS confidence,
  concat(coalesce(max(s.callee), max(s.server_address), max(s.rpc_service), max(s.name)), ' took ',
         CAST(CAST(max(s.target_retries_per_s) AS BIGINT) AS VARCHAR), ' retries a second (a retry storm); ',
         max(s.service), ' retried it ', CAST(coalesce(max(s.attempts) - 1, count(*)) AS VARCHAR), ' times in this request',
         CASE WHEN max(s.retry_window_ms) IS NULL THEN '' ELSE concat(' over ', CAST(CAST(max(s.retry_window_ms) AS BIGINT) AS VARCHAR), ' ms') END,
         CASE WHEN max(s.retry_trigger) IS NULL THEN '' ELSE concat(', ', CAST(max(s.failed_attempts) AS VARCHAR), ' attempts failed with ', max(s.retry_trigger)) END) AS summary,
  first_value(s.span_id ORDER BY s.start_ms) AS culprit_span_id,
  coalesce(max(s.retry_window_ms), sum(s.duration_ms)) AS explained_ms,
  bool_or(t.failed) AND bool_or(NOT s.recovered) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.target_retries_per_s >= {rate:.1}
GROUP BY s.trace_id"#,
                rate = storm.min_rate
            ),
        ),
        r(
            "message_wait",
            &CONSUMER_LAG,
            &format!(
                r#"
SELECT s.trace_id, 1.0 AS confidence,
  first_value(concat('the message to ', coalesce(s.destination, 'its destination'), ' waited ',
         CAST(CAST(s.async_wait_ms AS BIGINT) AS VARCHAR), ' ms before ', s.service, ' consumed it',
         CASE WHEN s.consumer_group IS NULL THEN '' ELSE concat(' (group ', s.consumer_group, ')') END,
         '; no lag or backlog sample showed it') ORDER BY s.async_wait_ms DESC) AS summary,
  first_value(s.span_id ORDER BY s.async_wait_ms DESC) AS culprit_span_id,
  max(s.async_wait_ms) AS explained_ms
FROM spans s
WHERE s.async_wait_ms IS NOT NULL AND s.async_wait_ms >= {min_wait_ms:.1}
GROUP BY s.trace_id"#
            ),
        ),
        r(
            "queueing",
            &QUEUEING,
            r#"
SELECT s.trace_id, 0.8 AS confidence,
  first_value(concat('the request from ', s.service, ' to ', coalesce(s.callee, s.server_address, s.name), ' waited ',
         CAST(CAST(s.queue_ms AS BIGINT) AS VARCHAR),
         ' ms before the server began it (accept queue or worker pool)') ORDER BY s.queue_ms DESC) AS summary,
  first_value(s.span_id ORDER BY s.queue_ms DESC) AS culprit_span_id,
  'callee' AS culprit_kind,
  max(s.queue_ms) AS explained_ms
FROM spans s WHERE s.queue_ms IS NOT NULL AND s.critical
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 1.0 AS confidence,
  concat(max(s.service), ' waited ', CAST(CAST(max(s.self_ms) AS BIGINT) AS VARCHAR), ' ms in ', max(s.name),
         ' (a connection pool)') AS summary,
  first_value(s.span_id ORDER BY s.self_ms DESC) AS culprit_span_id,
  'service' AS culprit_kind,
  max(s.self_ms) AS explained_ms
FROM spans s
WHERE s.critical AND s.kind <> 'server' AND s.pool_wait
GROUP BY s.trace_id"#,
        ),
    ]
}

/// What names a span when no mechanism is found.
fn fallbacks() -> Vec<Rule> {
    let r = Rule::builtin;
    vec![
        r(
            "error",
            &ERROR,
            r#"
SELECT t.trace_id, 1.0 AS confidence,
  concat('error in ', coalesce(t.error_service, t.culprit_service), ': ',
         coalesce(s.exception_type, s.error_type, nullif(s.status_message, ''), s.name)) AS summary,
  t.error_span_id AS culprit_span_id,
  CASE WHEN t.failed THEN t.duration_ms ELSE s.path_ms END AS explained_ms,
  t.failed AS explains_failure
FROM traces t JOIN spans s ON s.trace_id = t.trace_id AND s.span_id = t.error_span_id
WHERE t.error"#,
        ),
        r(
            "slow_dependency",
            &SLOW_DEPENDENCY,
            r#"
SELECT t.trace_id, CASE WHEN t.culprit_excess_ms IS NULL THEN 0.4 ELSE 0.6 END AS confidence,
  concat(t.culprit_service, ' ', t.culprit_name, ' took ', CAST(CAST(t.culprit_self_ms AS BIGINT) AS VARCHAR), ' ms of ',
         CAST(CAST(t.duration_ms AS BIGINT) AS VARCHAR), ' ms on the critical path',
         CASE WHEN t.culprit_baseline_ms IS NULL THEN ' (no baseline yet)'
              ELSE concat(' (normally ', CAST(CAST(t.culprit_baseline_ms AS BIGINT) AS VARCHAR), ' ms)') END) AS summary,
  coalesce(t.culprit_excess_ms, t.culprit_self_ms) AS explained_ms
FROM traces t
WHERE (t.culprit_kind = 'client' OR t.culprit_db_system IS NOT NULL OR t.culprit_service <> t.entry_service)
  AND (t.culprit_excess_ms IS NOT NULL OR t.culprit_self_ms >= 0.5 * t.duration_ms)"#,
        ),
    ]
}

/// The rules to run: built-ins (unless disabled), user rules replacing built-ins by name.
pub fn assemble(builtin: Vec<Rule>, builtin_rules: bool, user: &[RuleConfig]) -> Vec<Rule> {
    let mut rules: Vec<Rule> = if builtin_rules { builtin } else { Vec::new() };
    for u in user {
        rules.retain(|r| r.name != u.name);
        rules.push(Rule {
            name: u.name.clone(),
            cause: u.cause.clone(),
            sql: u.sql.clone(),
            user: true,
            described: None,
        });
    }
    rules
}

/// `traces`, from its declared columns (made once).
static TRACES_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(TRACE_COLUMNS));

/// `spans`: its declared columns, then the declared span attributes' (made once).
static SPANS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| {
    let mut fields: Vec<_> = SPAN_COLUMNS.iter().map(|c| c.field()).collect();
    fields.extend(SPAN_ATTRIBUTES.iter().map(|c| c.field()));
    Arc::new(datafusion::arrow::datatypes::Schema::new(fields))
});

/// The reference of the tables the rules read (the correlate README's
/// "Evidence tables"): the core tables' columns by name and type, then
/// every source's tables with what each column holds, all from their
/// declarations.
pub fn reference(sources: &Sources) -> String {
    let list = |cols: Vec<(&str, Ty)>| -> String {
        let cols: Vec<String> = cols
            .iter()
            .map(|(n, t)| format!("`{n}` {}", t.name()))
            .collect();
        cols.join(", ")
    };
    let spans = SPAN_COLUMNS
        .iter()
        .map(|c| (c.name, c.ty))
        .chain(SPAN_ATTRIBUTES.iter().map(|c| (c.name, c.ty)));
    let mut out = String::from("### The core tables\n\n");
    out += &format!(
        "- `traces` (one row per trace): {}\n",
        list(TRACE_COLUMNS.iter().map(|c| (c.name, c.ty)).collect())
    );
    out += &format!("- `spans` (one row per span): {}\n", list(spans.collect()));
    out += &format!(
        "- `logs` (one row per log record of the trace): {}, then the sources' columns below\n\n",
        list(LOG_COLUMNS.iter().map(|c| (c.name, c.ty)).collect())
    );
    out + &sources.reference()
}

/// The core tables' schemas, from their declared columns.
pub fn schemas() -> Vec<(&'static str, SchemaRef)> {
    vec![
        ("traces", TRACES_SCHEMA.clone()),
        ("spans", SPANS_SCHEMA.clone()),
    ]
}

/// The core tables of a tick's traces, from their declared columns.
pub fn tables(traces: &[TraceRow]) -> Result<Vec<Table>, String> {
    let each = |n: fn(&TraceRow) -> usize| -> Vec<(&TraceRow, usize)> {
        traces
            .iter()
            .flat_map(|t| (0..n(t)).map(move |i| (t, i)))
            .collect()
    };
    let rows = each(|_| 1);
    let mut c = Cols::new(&TRACES_SCHEMA, rows.len());
    fill_traces(&mut c, &rows);
    let traces_t = (
        "traces",
        TRACES_SCHEMA.clone(),
        c.finish(TRACES_SCHEMA.clone())?,
    );
    let rows = each(|t| t.spans.len());
    let mut c = Cols::new(&SPANS_SCHEMA, rows.len());
    fill_spans(&mut c, &rows);
    fill_span_attributes(&mut c, SPAN_COLUMNS.len(), &rows);
    let spans_t = (
        "spans",
        SPANS_SCHEMA.clone(),
        c.finish(SPANS_SCHEMA.clone())?,
    );
    Ok(vec![traces_t, spans_t])
}

/// A session over these tables.
pub fn context(tables: Vec<Table>) -> Result<SessionContext, String> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    for (name, schema, batch) in tables {
        let t = MemTable::try_new(schema, vec![vec![batch]]).map_err(|e| e.to_string())?;
        ctx.register_table(name, Arc::new(t))
            .map_err(|e| e.to_string())?;
    }
    Ok(ctx)
}

/// Check a rule's SQL against the core tables and `extra` (the sources',
/// empty): it must parse, name existing tables and columns, and return the
/// required columns.
pub fn check_sql(sql: &str, extra: &[(&'static str, SchemaRef)]) -> Result<(), String> {
    let mut tables = tables(&[])?;
    tables.extend(
        extra
            .iter()
            .map(|(n, s)| (*n, s.clone(), RecordBatch::new_empty(s.clone()))),
    );
    let ctx = context(tables)?;
    let df = futures::executor::block_on(ctx.sql(sql)).map_err(|e| first_line(&e.to_string()))?;
    let cols: Vec<String> = df
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect();
    for need in REQUIRED_COLUMNS {
        if !cols.iter().any(|c| c == need) {
            return Err(format!(
                "the query must return a `{need}` column (it returns: {})",
                cols.join(", ")
            ));
        }
    }
    Ok(())
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).to_string()
}

fn str_column(b: &RecordBatch, name: &str) -> Option<StringArray> {
    let col = b.column_by_name(name)?;
    let casted = datafusion::arrow::compute::cast(col, &DataType::Utf8).ok()?;
    casted.as_any().downcast_ref::<StringArray>().cloned()
}

fn cell_str(a: &StringArray, row: usize) -> Option<String> {
    (!a.is_null(row)).then(|| a.value(row).to_string())
}

fn f64_column(b: &RecordBatch, name: &str) -> Option<Float64Array> {
    let col = b.column_by_name(name)?;
    let casted = datafusion::arrow::compute::cast(col, &DataType::Float64).ok()?;
    casted.as_any().downcast_ref::<Float64Array>().cloned()
}

/// The rows of a table of the current evaluation.
type Rows = Arc<std::sync::RwLock<Option<RecordBatch>>>;

fn current(rows: &Rows, schema: &SchemaRef) -> RecordBatch {
    let g = match rows.read() {
        Ok(g) => g.clone(),
        Err(p) => p.into_inner().clone(),
    };
    g.unwrap_or_else(|| RecordBatch::new_empty(schema.clone()))
}

/// A table whose rows are swapped in before each evaluation, so that a
/// rule's plans, made once, read the current rows.
#[derive(Debug)]
struct Slot {
    schema: SchemaRef,
    rows: Rows,
}

#[async_trait::async_trait]
impl TableProvider for Slot {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Base
    }
    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(SlotExec::new(
            self.schema.clone(),
            self.rows.clone(),
            projection.cloned(),
        )?))
    }
}

/// The scan of a [`Slot`]: its physical plan is made once; each evaluation
/// resets the rule's plan (`reset_plan_states`, as DataFusion re-runs a
/// recursive query's plan over its changing work table), which takes the
/// rows the slot holds then. It states no statistics, so no plan made
/// once depends on the rows of the tick it was made in.
#[derive(Debug)]
struct SlotExec {
    table: SchemaRef,
    rows: Rows,
    projection: Option<Vec<usize>>,
    /// The rows of this evaluation, taken at the reset.
    taken: Option<RecordBatch>,
    props: Arc<PlanProperties>,
}

impl SlotExec {
    fn new(
        table: SchemaRef,
        rows: Rows,
        projection: Option<Vec<usize>>,
    ) -> datafusion::error::Result<Self> {
        let schema = match &projection {
            Some(p) => Arc::new(table.project(p)?),
            None => table.clone(),
        };
        Ok(SlotExec {
            table,
            rows,
            projection,
            taken: None,
            props: Arc::new(PlanProperties::new(
                EquivalenceProperties::new(schema),
                Partitioning::UnknownPartitioning(1),
                EmissionType::Incremental,
                Boundedness::Bounded,
            )),
        })
    }
}

impl DisplayAs for SlotExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SlotExec: projection={:?}", self.projection)
    }
}

impl ExecutionPlan for SlotExec {
    fn name(&self) -> &str {
        "SlotExec"
    }
    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }
    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }
    fn replace_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
        _options: ReplaceChildrenOptions,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> datafusion::error::Result<TreeNodeRecursion>,
    ) -> datafusion::error::Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
    }
    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }
    fn reset_state(self: Arc<Self>) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        Ok(Arc::new(SlotExec {
            table: self.table.clone(),
            rows: self.rows.clone(),
            projection: self.projection.clone(),
            taken: Some(current(&self.rows, &self.table)),
            props: self.props.clone(),
        }))
    }
    fn execute(
        &self,
        _partition: usize,
        _context: Arc<TaskContext>,
    ) -> datafusion::error::Result<SendableRecordBatchStream> {
        let rows = match &self.taken {
            Some(r) => r.clone(),
            None => current(&self.rows, &self.table),
        };
        let rows = match &self.projection {
            Some(p) => rows.project(p)?,
            None => rows,
        };
        let schema = self.props.eq_properties.schema().clone();
        Ok(Box::pin(MemoryStream::try_new(vec![rows], schema, None)?))
    }
}

/// The root-cause rules, planned once. The first evaluation of a rule
/// parses, analyses and optimizes its SQL against the tables' schemas and
/// makes its physical plan; later ones swap the rows in and reset the plan,
/// which takes them (see [`SlotExec`]). Planning was most of a tick's cost:
/// DataFusion's logical optimizer alone took 11% of the gateway pipeline's
/// CPU when every tick planned every rule from its text, and the physical
/// planning of ~30 rules most of what remained (BENCHMARKS.md).
pub struct Planner {
    ctx: SessionContext,
    slots: Vec<(&'static str, Arc<Slot>)>,
    /// Optimized plans by SQL text.
    plans: HashMap<String, Arc<LogicalPlan>>,
    /// Physical plans by SQL text (none kept when `physical_once` is off).
    physical: HashMap<String, Arc<dyn ExecutionPlan>>,
    physical_once: bool,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("plans", &self.plans.len())
            .finish()
    }
}

/// SQL whose plan depends on when it is planned (constant folding would
/// freeze `now()` at the first evaluation): planned every time.
fn volatile(sql: &str) -> bool {
    let l = sql.to_ascii_lowercase();
    ["now(", "current_", "random(", "uuid("]
        .iter()
        .any(|f| l.contains(f))
}

impl Planner {
    /// The core tables and `extra` (the sources') registered, nothing planned yet.
    pub fn new(extra: &[(&'static str, SchemaRef)]) -> Self {
        Self::with_physical_once(extra, true)
    }

    /// Like [`Planner::new`]; with `physical_once` off, the physical plans
    /// are made at every evaluation (as before; for the benchmark's before
    /// and after).
    pub fn with_physical_once(extra: &[(&'static str, SchemaRef)], physical_once: bool) -> Self {
        // Dynamic filters (a hash join's build side filtering its probe
        // side) live in the plan between executions: a plan run again must
        // not carry them.
        let config = SessionConfig::new()
            .with_target_partitions(1)
            .set_bool("datafusion.optimizer.enable_dynamic_filter_pushdown", false);
        let ctx = SessionContext::new_with_config(config);
        let mut slots = Vec::new();
        for (name, schema) in schemas().into_iter().chain(extra.iter().cloned()) {
            let slot = Arc::new(Slot {
                schema,
                rows: Arc::new(std::sync::RwLock::new(None)),
            });
            // A name registered twice keeps its first table.
            if ctx.register_table(name, slot.clone()).is_ok() {
                slots.push((name, slot));
            }
        }
        Planner {
            ctx,
            slots,
            plans: HashMap::new(),
            physical: HashMap::new(),
            physical_once,
        }
    }

    fn fill(&self, tables: Vec<Table>) {
        for (name, _, batch) in tables {
            if let Some((_, slot)) = self.slots.iter().find(|(n, _)| *n == name) {
                match slot.rows.write() {
                    Ok(mut g) => *g = Some(batch),
                    Err(p) => *p.into_inner() = Some(batch),
                }
            }
        }
    }

    fn clear(&self) {
        for (_, slot) in &self.slots {
            match slot.rows.write() {
                Ok(mut g) => *g = None,
                Err(p) => *p.into_inner() = None,
            }
        }
    }

    async fn plan(
        &mut self,
        state: &SessionState,
        sql: &str,
    ) -> datafusion::error::Result<Arc<LogicalPlan>> {
        if let Some(p) = self.plans.get(sql) {
            return Ok(p.clone());
        }
        let plan = Arc::new(state.optimize(&state.create_logical_plan(sql).await?)?);
        if !volatile(sql) {
            self.plans.insert(sql.to_string(), plan.clone());
        }
        Ok(plan)
    }

    /// The rule's physical plan for this evaluation, reading the rows the
    /// slots hold now: made once and reset, or made now.
    async fn physical(
        &mut self,
        state: &SessionState,
        sql: &str,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let made = match self.physical.get(sql) {
            Some(p) => p.clone(),
            None => {
                let logical = self.plan(state, sql).await?;
                let p = state
                    .query_planner()
                    .create_physical_plan(&logical, state)
                    .await?;
                if self.physical_once && !volatile(sql) {
                    self.physical.insert(sql.to_string(), p.clone());
                }
                p
            }
        };
        reset_plan_states(made)
    }

    /// Plan every rule now, before any trace (at startup): the first
    /// traces analysed then do not wait while ~30 rules are parsed,
    /// optimized and planned. The plans read no rows until they run (see
    /// [`SlotExec`]), so planning them over empty tables changes nothing. A
    /// rule that fails to plan here fails again, and is reported, when it
    /// is first evaluated; one whose plan depends on the time is planned at
    /// every evaluation.
    pub async fn prepare(&mut self, rules: &[Rule]) {
        let state = self.ctx.state();
        for rule in rules {
            if self.physical_once && !self.physical.contains_key(&rule.sql) {
                if let Err(e) = self.physical(&state, &rule.sql).await {
                    tracing::debug!(rule = %rule.name, error = %e, "A rule did not plan at startup; it is reported when first evaluated.");
                }
            }
        }
    }

    /// Rules whose physical plan is made and kept.
    pub fn planned(&self) -> usize {
        self.physical.len()
    }

    /// Run every rule over the traces and the sources' tables of them
    /// (`joined`); findings per trace id, and the errors of rules that failed.
    pub async fn evaluate(
        &mut self,
        rules: &[Rule],
        traces: &[TraceRow],
        joined: Vec<Table>,
    ) -> (HashMap<String, Vec<Finding>>, Vec<(String, String)>) {
        let mut findings: HashMap<String, Vec<Finding>> = HashMap::new();
        let mut errors = Vec::new();
        if traces.is_empty() {
            return (findings, errors);
        }
        match tables(traces) {
            Ok(t) => {
                self.fill(t);
                self.fill(joined);
            }
            Err(e) => {
                errors.push(("*".to_string(), e));
                return (findings, errors);
            }
        }
        let state = self.ctx.state();
        // Each rule's plan takes the rows the slots hold here, in order; the
        // queries then run concurrently: on the daemon's multi-threaded
        // runtime a tick's queries spread over the cores.
        let mut runs = Vec::with_capacity(rules.len());
        // One task context for all of them (making one copies the session's
        // configuration).
        let task_ctx = state.task_ctx();
        for rule in rules {
            let physical = self.physical(&state, &rule.sql).await;
            let task = task_ctx.clone();
            runs.push(tokio::spawn(async move {
                datafusion::physical_plan::collect(physical?, task).await
            }));
        }
        self.clear();
        collect_findings(rules, runs, &mut findings, &mut errors).await;
        (findings, errors)
    }
}

type Run = tokio::task::JoinHandle<datafusion::error::Result<Vec<RecordBatch>>>;

async fn collect_findings(
    rules: &[Rule],
    runs: Vec<Run>,
    findings: &mut HashMap<String, Vec<Finding>>,
    errors: &mut Vec<(String, String)>,
) {
    for (rule, run) in rules.iter().zip(runs) {
        let batches = match run.await {
            Ok(r) => r,
            Err(e) => {
                errors.push((rule.name.clone(), format!("the rule's task failed: {e}")));
                continue;
            }
        };
        let batches = match batches {
            Ok(b) => b,
            Err(e) => {
                errors.push((rule.name.clone(), first_line(&e.to_string())));
                continue;
            }
        };
        for b in &batches {
            // Each column cast once per batch, not once per row.
            let strs = |name: &str| str_column(b, name);
            let Some(ids) = strs("trace_id") else {
                continue;
            };
            let (summaries, culprits, evidence) =
                (strs("summary"), strs("culprit_span_id"), strs("evidence"));
            let (services, kinds) = (strs("culprit_service"), strs("culprit_kind"));
            let at = strs("at_span_id");
            let confidences = f64_column(b, "confidence");
            let explained = f64_column(b, "explained_ms");
            let failure = strs("explains_failure");
            for row in 0..b.num_rows() {
                let Some(trace_id) = cell_str(&ids, row) else {
                    continue;
                };
                let confidence = confidences
                    .as_ref()
                    .filter(|c| !c.is_null(row))
                    .map_or(0.5, |c| c.value(row))
                    .clamp(0.0, 1.0);
                let opt = |c: &Option<StringArray>| c.as_ref().and_then(|c| cell_str(c, row));
                findings.entry(trace_id).or_default().push(Finding {
                    rule: rule.name.clone(),
                    cause: rule.cause.clone(),
                    confidence,
                    summary: opt(&summaries).unwrap_or_else(|| rule.cause.clone()),
                    culprit_span_id: opt(&culprits),
                    culprit_service: opt(&services),
                    culprit_kind: opt(&kinds),
                    evidence: opt(&evidence),
                    at_span_id: opt(&at),
                    user: rule.user,
                    explained_ms: explained
                        .as_ref()
                        .filter(|c| !c.is_null(row))
                        .map_or(f64::NAN, |c| c.value(row)),
                    explains_failure: opt(&failure).is_some_and(|v| v == "true"),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sql_that_reads_the_clock_is_planned_every_time() {
        assert!(volatile(
            "SELECT trace_id FROM traces WHERE start_unix_ms > NOW() - 1"
        ));
        assert!(volatile("select current_timestamp"));
        assert!(!volatile(
            "SELECT trace_id, 0.9 AS confidence, 'x' AS summary FROM traces"
        ));
    }

    fn sources() -> crate::correlate::source::Sources {
        let cfg: crate::correlate::config::CorrelateConfig = serde_yaml::from_str("{}").unwrap();
        crate::correlate::registry::sources(&cfg)
    }

    #[test]
    fn every_builtin_rule_plans_against_the_tables() {
        let sources = sources();
        let tables = sources.tables();
        for r in builtin().into_iter().chain(sources.rules()) {
            if let Err(e) = check_sql(&r.sql, &tables) {
                panic!("built-in rule {} does not plan: {e}", r.name);
            }
        }
    }

    #[test]
    fn bad_rules_are_rejected_with_a_reason() {
        let e = check_sql("SELECT trace_id FROM nosuch", &[]).expect_err("unknown table");
        assert!(e.contains("nosuch"), "{e}");
        let e = check_sql("SELECT trace_id, 0.5 AS confidence FROM spans", &[])
            .expect_err("no summary");
        assert!(e.contains("summary"), "{e}");
        let e = check_sql("SELEC x", &[]).expect_err("syntax");
        assert!(!e.is_empty());
        let e = check_sql(
            "SELECT trace_id, 1.0 AS confidence, 'x' AS summary FROM spans WHERE nope > 1",
            &[],
        )
        .expect_err("column");
        assert!(e.contains("nope"), "{e}");
    }
}

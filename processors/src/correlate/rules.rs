//! Root-cause rules: SQL over Arrow tables of the joined evidence, run with
//! DataFusion once per batch of kept traces (one decision tick).
//!
//! Tables (one row per …):
//! - `traces` (trace): `trace_id, duration_ms, route, root_span_id, root_service, root_name, error,
//!   culprit_span_id, culprit_service, culprit_name, culprit_kind, culprit_self_ms,
//!   culprit_share, culprit_host, culprit_db_system, error_span_id, error_service,
//!   start_unix_ms, failed, final_status, culprit_excess_ms, culprit_baseline_ms,
//!   culprit_path_ms, entry_span_id, entry_service`
//! - `spans` (span): `trace_id, span_id, parent_id, service, host, name, kind, start_ms,
//!   end_ms, duration_ms, self_ms, share, critical, status, status_message, http_status,
//!   route, db_system, db_operation, messaging_system, destination, consumer_group,
//!   routing_key, server_address, error_type, exception_type, exception_message, resend_count,
//!   cache_hit, wait_ms, path_ms, cache_inferred, client_error, attempt, attempts,
//!   failed_attempts, retry_window_ms, retry_trigger, recovered, queue_ms, async_wait_ms,
//!   baseline_ms, excess_ms, server_port, gen_ai_model, input_tokens, output_tokens,
//!   gen_ai_queue_ms, gen_ai_ttft_ms, gen_ai_prefill_ms, gen_ai_decode_ms, prompt_baseline`
//!   (see `super::shape` for the inferred ones)
//! - `logs` (log record of the trace): `trace_id, time_ms, gateway, service, route,
//!   status, rate_limit_rule, circuit_state, response_flags, upstream, duration_ms,
//!   severity, error_type, body`
//! - `route_stats` (trace with a known route): `trace_id, route, requests, s4xx, s5xx,
//!   s429, s503, s504, not_closed, top_rule, circuit_state, circuit_changes, p50_ms, p99_ms`
//! - `kafka_lag` (topic the trace touches): `trace_id, topic, consumer_group, lag, lag_trend,
//!   lag_seconds, status, alarm, retry_storm, produce_rate, time_ms, growing, lagging`
//! - `rabbitmq_queue` (RabbitMQ queue and role the trace touches; see `super::rabbit`):
//!   `trace_id, queue, vhost, span_id, role, depth, depth_trend, ready, unacked, consumers,
//!   backlog_age_s, status, alarm, retry_storm, publish_rate, deliver_rate, time_ms`
//! - `host` (host the trace ran on): `trace_id, host, culprit, cpu_busy, iowait, mem_used,
//!   mem_available_ratio, disk_util, psi_cpu, psi_memory, psi_io, time_ms, gpu_util, gpu_mem_used`
//! - `dependency` (server the trace called, by its own metrics; see `super::deps`):
//!   `trace_id, span_id, system, address, job, instance, envoy_cluster, time_ms, up, hits, misses,
//!   miss_ratio, connected_clients, blocked_clients, command_p99_us, locks_exclusive, locks_by_mode, connections,
//!   max_connections, max_tx_duration_s, connections_active, connections_waiting,
//!   pending_overflow, cx_overflow, connect_fail, rq_timeout, ssl_errors, breaker_open,
//!   connect_ms, requests_waiting, requests_running, kv_cache_usage, preemptions, queue_time_s,
//!   ttft_s, request_duration_s, queue_ms_per_request, gpu_util, gpu_mem_used`
//!
//! A rule returns `trace_id, confidence, summary` and optionally
//! `culprit_span_id`, `evidence` (text or JSON), `explained_ms` (the
//! critical-path time it accounts for; by default the critical time of the
//! culprit span's subtree) and `explains_failure` (it says why the request
//! failed). The verdict ranks findings by what they explain (see
//! `super::verdict`).

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanBuilder, Float64Array, Float64Builder, Int64Builder, RecordBatch,
    StringArray, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::datasource::{MemTable, TableType};
use datafusion::execution::SessionState;
use datafusion::logical_expr::{Expr, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use std::collections::HashMap;
use std::sync::Arc;

use super::config::{RuleConfig, REQUIRED_COLUMNS};
use super::features::{Hex16, TraceRow};

/// A rule ready to run.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Name (`rca.rule`).
    pub name: String,
    /// Cause.
    pub cause: String,
    /// SQL.
    pub sql: String,
    /// A user rule (wins ties against built-ins).
    pub user: bool,
}

/// What a rule concluded for a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Rule name.
    pub rule: String,
    /// Cause.
    pub cause: String,
    /// 0..1.
    pub confidence: f64,
    /// One sentence.
    pub summary: String,
    /// Culprit span the rule named.
    pub culprit_span_id: Option<String>,
    /// Extra evidence the rule returned.
    pub evidence: Option<String>,
    /// From a user rule.
    pub user: bool,
    /// The critical-path time (ms) the finding accounts for.
    pub explained_ms: f64,
    /// It explains why the request failed (not only why it was slow).
    pub explains_failure: bool,
}

/// The built-in rules. Each is data: name, cause, SQL.
pub fn builtin() -> Vec<Rule> {
    let r = |name: &str, cause: &str, sql: &str| Rule {
        name: name.into(),
        cause: cause.into(),
        sql: sql.into(),
        user: false,
    };
    vec![
        r(
            "gateway_429",
            "rate_limited",
            r#"
SELECT l.trace_id, 0.95 AS confidence,
  concat('route ', coalesce(max(l.route), '?'), ' rate-limited by ', coalesce(max(l.rate_limit_rule), 'a rate limit'), ': ',
         CAST(sum(CASE WHEN l.status = 429 THEN 1 ELSE 0 END) AS VARCHAR), ' of ', CAST(count(*) AS VARCHAR),
         ' gateway attempts answered 429') AS summary,
  concat('rate_limit_rule=', coalesce(max(l.rate_limit_rule), '')) AS evidence,
  max(t.root_span_id) AS culprit_span_id,
  CASE WHEN max(t.final_status) = 429 THEN max(t.duration_ms)
       ELSE least(max(t.duration_ms), greatest(0.0, max(CASE WHEN l.status = 429 THEN l.time_ms END) - max(t.start_unix_ms))) END AS explained_ms,
  coalesce(max(t.final_status) = 429, false) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id WHERE l.gateway
GROUP BY l.trace_id
HAVING sum(CASE WHEN l.status = 429 THEN 1 ELSE 0 END) > 0"#,
        ),
        r(
            "client_429",
            "rate_limited",
            r#"
SELECT s.trace_id, 0.88 AS confidence,
  concat(max(s.service), ' was rate-limited by ', coalesce(max(s.server_address), 'its upstream'), ': ',
         CAST(count(*) AS VARCHAR), ' calls answered 429') AS summary,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) AND bool_or(NOT s.recovered) THEN max(t.duration_ms)
       ELSE coalesce(max(s.retry_window_ms), sum(s.duration_ms)) END AS explained_ms,
  bool_or(t.failed) AND bool_or(NOT s.recovered) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.http_status = 429 AND s.kind = 'client'
GROUP BY s.trace_id"#,
        ),
        r(
            "gateway_circuit_open",
            "circuit_open",
            r#"
SELECT l.trace_id, 0.96 AS confidence,
  concat('circuit breaker ', coalesce(max(upper(l.circuit_state)), 'OPEN'), ' for ', coalesce(max(l.upstream), 'the upstream'),
         ' on route ', coalesce(max(l.route), '?'), ': ',
         CAST(sum(CASE WHEN l.status = 503 THEN 1 ELSE 0 END) AS VARCHAR), ' of ', CAST(count(*) AS VARCHAR),
         ' gateway attempts answered 503 without reaching it') AS summary,
  concat('circuit_state=', coalesce(max(l.circuit_state), ''), ' response_flags=', coalesce(max(l.response_flags), '')) AS evidence,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE coalesce(sum(l.duration_ms), 0.0) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id WHERE l.gateway
GROUP BY l.trace_id
HAVING sum(CASE WHEN upper(l.circuit_state) IN ('OPEN', 'HALF_OPEN', 'HALF-OPEN') OR l.response_flags LIKE '%UO%' THEN 1 ELSE 0 END) > 0"#,
        ),
        r(
            "gateway_504",
            "upstream_timeout",
            r#"
SELECT l.trace_id, 0.93 AS confidence,
  concat('upstream ', coalesce(max(l.upstream), '?'), ' timed out on route ', coalesce(max(l.route), '?'), ': ',
         CAST(sum(CASE WHEN l.status = 504 OR l.response_flags LIKE '%UT%' THEN 1 ELSE 0 END) AS VARCHAR), ' of ',
         CAST(count(*) AS VARCHAR), ' gateway attempts answered 504 after ',
         CAST(CAST(max(l.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  CASE WHEN max(t.final_status) = 504 THEN max(t.duration_ms) ELSE coalesce(max(l.duration_ms), 0.0) END AS explained_ms,
  coalesce(max(t.final_status) = 504, false) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id WHERE l.gateway
GROUP BY l.trace_id
HAVING sum(CASE WHEN l.status = 504 OR l.response_flags LIKE '%UT%' THEN 1 ELSE 0 END) > 0"#,
        ),
        r(
            "client_timeout",
            "upstream_timeout",
            r#"
SELECT s.trace_id, 0.88 AS confidence,
  concat(max(s.service), ' timed out calling ', coalesce(max(s.server_address), max(s.name)), ' after ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  first_value(s.span_id ORDER BY s.duration_ms DESC) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) AND bool_or(NOT s.recovered) THEN max(t.duration_ms) ELSE max(s.duration_ms) END AS explained_ms,
  bool_or(t.failed) AND bool_or(NOT s.recovered) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.kind IN ('client', 'internal')
  AND (lower(coalesce(s.error_type, '')) LIKE '%timeout%' OR lower(coalesce(s.exception_type, '')) LIKE '%timeout%'
       OR lower(coalesce(s.error_type, '')) LIKE '%deadline%' OR lower(coalesce(s.exception_message, '')) LIKE '%timed out%'
       OR s.http_status = 504)
GROUP BY s.trace_id"#,
        ),
        r(
            "gateway_503",
            "upstream_unavailable",
            r#"
SELECT l.trace_id, 0.9 AS confidence,
  concat('upstream ', coalesce(max(l.upstream), '?'), ' unavailable on route ', coalesce(max(l.route), '?'), ': ',
         CAST(sum(CASE WHEN l.status IN (502, 503) THEN 1 ELSE 0 END) AS VARCHAR), ' of ', CAST(count(*) AS VARCHAR),
         ' gateway attempts answered ', CAST(max(l.status) AS VARCHAR),
         CASE WHEN max(l.response_flags) IS NULL THEN '' ELSE concat(' (', max(l.response_flags), ')') END) AS summary,
  CASE WHEN max(t.final_status) IN (502, 503) THEN max(t.duration_ms) ELSE coalesce(sum(l.duration_ms), 0.0) END AS explained_ms,
  coalesce(max(t.final_status) IN (502, 503), false) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id WHERE l.gateway
GROUP BY l.trace_id
HAVING sum(CASE WHEN (l.status IN (502, 503) OR l.response_flags LIKE '%UF%' OR l.response_flags LIKE '%UH%')
                 AND coalesce(upper(l.circuit_state), 'CLOSED') = 'CLOSED' THEN 1 ELSE 0 END) > 0"#,
        ),
        r(
            "client_unavailable",
            "upstream_unavailable",
            r#"
SELECT s.trace_id, 0.84 AS confidence,
  concat(max(s.service), ' could not reach ', coalesce(max(s.server_address), max(s.name)), ': ',
         coalesce(max(s.error_type), max(s.exception_type), CAST(max(s.http_status) AS VARCHAR))) AS summary,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) AND bool_or(NOT s.recovered) AND max(s.attempts) IS NULL THEN max(t.duration_ms)
       ELSE sum(s.duration_ms) END AS explained_ms,
  bool_or(t.failed) AND bool_or(NOT s.recovered) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.kind = 'client' AND (s.http_status IN (502, 503)
   OR lower(coalesce(s.error_type, '')) LIKE '%refused%' OR lower(coalesce(s.exception_type, '')) LIKE '%connect%'
   OR lower(coalesce(s.exception_message, '')) LIKE '%econnrefused%'
   OR lower(coalesce(s.error_type, '')) LIKE '%unavailable%')
GROUP BY s.trace_id"#,
        ),
        r(
            "tls_handshake",
            "tls_handshake",
            r#"
SELECT s.trace_id, 0.9 AS confidence,
  concat('TLS handshake with ', coalesce(max(s.server_address), 'the upstream'), ' took ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms of ', CAST(CAST(max(t.duration_ms) AS BIGINT) AS VARCHAR),
         ' ms (', max(s.service), ')') AS summary,
  max(s.span_id) AS culprit_span_id,
  max(s.duration_ms) AS explained_ms
FROM spans s JOIN traces t ON s.trace_id = t.trace_id
WHERE s.name IN ('http.tls', 'tls.handshake', 'tls_handshake', 'TLS handshake', 'tls.connect')
GROUP BY s.trace_id"#,
        ),
        r(
            "cache_miss_fallback",
            "cache_miss_fallback",
            r#"
SELECT d.trace_id, CASE WHEN max(r.miss_ratio) >= 0.5 THEN 0.93 ELSE 0.88 END AS confidence,
  concat('cache miss in ', max(c.service), ' (', coalesce(max(c.db_system), 'cache'),
         CASE WHEN bool_or(c.cache_inferred) THEN ' GET, then a fallback read, then SET' ELSE '' END,
         ') fell back to ', coalesce(max(d.db_system), max(d.server_address), max(d.name)), ' ', coalesce(max(d.db_operation), ''), ' taking ',
         CAST(CAST(max(d.duration_ms) AS BIGINT) AS VARCHAR), ' ms',
         CASE WHEN max(r.miss_ratio) IS NULL THEN ''
              ELSE concat('; ', max(r.system), ' ', max(r.address), ' missed ', CAST(CAST(round(max(r.miss_ratio) * 100) AS BIGINT) AS VARCHAR),
                          '% of lookups meanwhile (', CAST(CAST(max(r.misses) AS BIGINT) AS VARCHAR), ' misses, ',
                          CAST(CAST(max(r.hits) AS BIGINT) AS VARCHAR), ' hits, redis_keyspace_*_total)') END) AS summary,
  CASE WHEN max(r.miss_ratio) IS NULL THEN NULL
       ELSE concat('miss_ratio=', CAST(max(r.miss_ratio) AS VARCHAR), ' misses=', CAST(max(r.misses) AS VARCHAR),
                   ' hits=', CAST(max(r.hits) AS VARCHAR), ' instance=', max(r.instance)) END AS evidence,
  first_value(d.span_id ORDER BY d.path_ms DESC) AS culprit_span_id,
  max(d.path_ms) AS explained_ms
FROM spans c JOIN spans d ON c.trace_id = d.trace_id AND c.parent_id = d.parent_id
  LEFT JOIN dependency r ON r.trace_id = c.trace_id AND r.system = 'redis' AND r.miss_ratio IS NOT NULL
WHERE c.cache_hit = false AND d.start_ms >= c.end_ms - 1.0 AND d.span_id <> c.span_id
  AND (d.db_system IS NULL OR lower(d.db_system) NOT IN ('redis', 'memcached', 'valkey'))
GROUP BY d.trace_id"#,
        ),
        r(
            "db_lock",
            "db_lock_contention",
            r#"
SELECT s.trace_id, 0.9 AS confidence,
  concat(max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on PostgreSQL ', max(r.address),
         ' while ', CAST(CAST(max(r.locks_exclusive) AS BIGINT) AS VARCHAR), ' exclusive lock(s) were held (pg_locks_count ',
         coalesce(max(r.locks_by_mode), ''), ')',
         CASE WHEN max(r.max_tx_duration_s) IS NULL THEN ''
              ELSE concat('; longest transaction ', CAST(round(max(r.max_tx_duration_s) * 10) / 10 AS VARCHAR), ' s') END) AS summary,
  concat('pg_locks_count ', coalesce(max(r.locks_by_mode), ''), ' max_tx_duration_s=',
         coalesce(CAST(max(r.max_tx_duration_s) AS VARCHAR), ''), ' instance=', max(r.instance)) AS evidence,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'postgresql' AND r.locks_exclusive >= 1 AND s.duration_ms >= 50
GROUP BY s.trace_id"#,
        ),
        r(
            "db_connections",
            "db_connection_saturation",
            r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('PostgreSQL ', max(r.address), ' had ', CAST(CAST(max(r.connections) AS BIGINT) AS VARCHAR), ' of ',
         CAST(CAST(max(r.max_connections) AS BIGINT) AS VARCHAR), ' connections in use while ', max(s.service), ' waited ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it') AS summary,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'postgresql' AND r.max_connections > 0 AND r.connections >= 0.9 * r.max_connections AND s.duration_ms >= 50
GROUP BY s.trace_id"#,
        ),
        r(
            "envoy_overflow",
            "circuit_open",
            r#"
SELECT s.trace_id, 0.92 AS confidence,
  concat('Envoy''s circuit breaker for ', max(r.envoy_cluster), ' was at capacity when ', max(s.service), ' called ',
         coalesce(max(s.server_address), max(s.name)), ': ', CAST(CAST(coalesce(max(r.pending_overflow), 0) AS BIGINT) AS VARCHAR),
         ' requests overflowed its pending queue (upstream_rq_pending_overflow) and ',
         CAST(CAST(coalesce(max(r.cx_overflow), 0) AS BIGINT) AS VARCHAR), ' its connection limit (upstream_cx_overflow) meanwhile') AS summary,
  concat('upstream_rq_pending_overflow=', coalesce(CAST(max(r.pending_overflow) AS VARCHAR), ''), ' upstream_cx_overflow=',
         coalesce(CAST(max(r.cx_overflow) AS VARCHAR), ''), ' circuit_breakers_open=', coalesce(CAST(max(r.breaker_open) AS VARCHAR), '')) AS evidence,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.path_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND (r.pending_overflow > 0 OR r.cx_overflow > 0 OR r.breaker_open >= 1)
  AND (s.status = 'error' OR s.http_status = 503)
GROUP BY s.trace_id"#,
        ),
        r(
            "envoy_connect_fail",
            "upstream_unavailable",
            r#"
SELECT s.trace_id, 0.86 AS confidence,
  concat('Envoy could not connect to ', max(r.envoy_cluster), ' when ', max(s.service), ' called it: ',
         CAST(CAST(max(r.connect_fail) AS BIGINT) AS VARCHAR), ' connection failures meanwhile (upstream_cx_connect_fail)') AS summary,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE max(s.path_ms) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND r.connect_fail > 0 AND coalesce(r.pending_overflow, 0) = 0 AND coalesce(r.cx_overflow, 0) = 0
  AND coalesce(r.ssl_errors, 0) = 0 AND (s.status = 'error' OR s.http_status IN (502, 503))
GROUP BY s.trace_id"#,
        ),
        r(
            "envoy_tls",
            "tls_handshake",
            r#"
SELECT s.trace_id, 0.88 AS confidence,
  concat('TLS to ', max(r.envoy_cluster), ' through Envoy: ',
         CASE WHEN max(r.ssl_errors) > 0 THEN concat(CAST(CAST(max(r.ssl_errors) AS BIGINT) AS VARCHAR), ' handshake errors (ssl.connection_error, ssl.fail_verify_*)')
              ELSE concat('connections took ', CAST(CAST(max(r.connect_ms) AS BIGINT) AS VARCHAR), ' ms to set up (upstream_cx_connect_ms)') END,
         ' when ', max(s.service), ' called it') AS summary,
  max(s.span_id) AS culprit_span_id,
  CASE WHEN bool_or(t.failed) AND max(r.ssl_errors) > 0 THEN max(t.duration_ms)
       ELSE least(max(s.path_ms), coalesce(max(r.connect_ms), max(s.path_ms))) END AS explained_ms,
  bool_or(t.failed) AND coalesce(max(r.ssl_errors), 0) > 0 AS explains_failure
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id JOIN traces t ON t.trace_id = s.trace_id
WHERE r.system = 'envoy' AND ((r.ssl_errors > 0 AND (s.status = 'error' OR s.http_status IN (502, 503)))
                              OR (r.connect_ms >= 200 AND s.duration_ms >= r.connect_ms))
GROUP BY s.trace_id"#,
        ),
        r(
            "inference_queue",
            "inference_queueing",
            r#"
SELECT s.trace_id, 0.9 AS confidence,
  concat(coalesce(max(s.gen_ai_model), max(s.service)), ' request waited ', CAST(CAST(max(s.gen_ai_queue_ms) AS BIGINT) AS VARCHAR),
         ' ms of ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms in the queue of ', max(s.service), ' before it was scheduled',
         CASE WHEN max(r.requests_waiting) IS NULL THEN ''
              ELSE concat(' (vllm:num_requests_waiting ', CAST(CAST(max(r.requests_waiting) AS BIGINT) AS VARCHAR),
                          ', num_requests_running ', coalesce(CAST(CAST(max(r.requests_running) AS BIGINT) AS VARCHAR), '?'), ')') END) AS summary,
  first_value(s.span_id ORDER BY s.gen_ai_queue_ms DESC) AS culprit_span_id,
  max(s.gen_ai_queue_ms) AS explained_ms
FROM spans s LEFT JOIN dependency r ON r.trace_id = s.trace_id AND r.system = 'vllm'
WHERE s.gen_ai_queue_ms >= 100 AND s.gen_ai_queue_ms >= 0.3 * s.duration_ms
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 0.84 AS confidence,
  concat(max(r.system), ' ', max(r.address), ' queued requests for ',
         CAST(CAST(max(coalesce(r.queue_ms_per_request, r.queue_time_s * 1000)) AS BIGINT) AS VARCHAR),
         ' ms on average while ', max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it (',
         CASE WHEN max(r.system) = 'triton' THEN 'nv_inference_queue_duration_us / nv_inference_request_success'
              ELSE 'vllm:request_queue_time_seconds' END, ')') AS summary,
  max(s.span_id) AS culprit_span_id,
  least(max(s.path_ms), max(coalesce(r.queue_ms_per_request, r.queue_time_s * 1000))) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system IN ('vllm', 'triton') AND coalesce(r.queue_ms_per_request, r.queue_time_s * 1000) >= 100
GROUP BY s.trace_id"#,
        ),
        r(
            "kv_cache",
            "kv_cache_pressure",
            r#"
SELECT s.trace_id, 0.88 AS confidence,
  concat('vLLM ', max(r.address), ' KV cache ', CAST(CAST(round(max(r.kv_cache_usage) * 100) AS BIGINT) AS VARCHAR), '% full',
         CASE WHEN max(r.preemptions) > 0 THEN concat(', ', CAST(CAST(max(r.preemptions) AS BIGINT) AS VARCHAR), ' requests preempted') ELSE '' END,
         ' (vllm:kv_cache_usage_perc, vllm:num_preemptions_total) while ', max(s.service), ' waited ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms for ', coalesce(max(s.gen_ai_model), 'the model')) AS summary,
  concat('kv_cache_usage=', coalesce(CAST(max(r.kv_cache_usage) AS VARCHAR), ''), ' preemptions=', coalesce(CAST(max(r.preemptions) AS VARCHAR), '')) AS evidence,
  max(s.span_id) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'vllm' AND (r.kv_cache_usage >= 0.95 OR r.preemptions > 0)
GROUP BY s.trace_id"#,
        ),
        r(
            "long_prompt",
            "long_prompt",
            r#"
SELECT s.trace_id, 0.86 AS confidence,
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
        r(
            "gpu_busy",
            "gpu_saturation",
            r#"
SELECT s.trace_id, 0.84 AS confidence,
  concat('GPU of ', max(h.host), ' ', CAST(CAST(round(max(h.gpu_util) * 100) AS BIGINT) AS VARCHAR),
         '% busy (DCGM_FI_DEV_GPU_UTIL) while ', max(s.service), ' ran ', coalesce(max(s.gen_ai_model), max(s.name)), ' for ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM spans s JOIN host h ON h.trace_id = s.trace_id AND h.host = s.host
WHERE (s.gen_ai_prefill_ms IS NOT NULL OR s.gen_ai_model IS NOT NULL) AND h.gpu_util >= 0.95
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 0.84 AS confidence,
  concat('GPU behind triton ', max(r.address), ' ', CAST(CAST(round(max(r.gpu_util) * 100) AS BIGINT) AS VARCHAR),
         '% busy (nv_gpu_utilization) while ', max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it') AS summary,
  max(s.span_id) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'triton' AND r.gpu_util >= 0.95
GROUP BY s.trace_id"#,
        ),
        r(
            "gpu_memory",
            "gpu_memory_pressure",
            r#"
SELECT s.trace_id, 0.85 AS confidence,
  concat('GPU memory of ', max(h.host), ' ', CAST(CAST(round(max(h.gpu_mem_used) * 100) AS BIGINT) AS VARCHAR),
         '% used (DCGM_FI_DEV_FB_USED of FB_USED + FB_FREE) while ', max(s.service), ' ran ', coalesce(max(s.gen_ai_model), max(s.name)), ' for ',
         CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  first_value(s.span_id ORDER BY s.path_ms DESC) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM spans s JOIN host h ON h.trace_id = s.trace_id AND h.host = s.host
WHERE (s.gen_ai_prefill_ms IS NOT NULL OR s.gen_ai_model IS NOT NULL) AND h.gpu_mem_used >= 0.95
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 0.85 AS confidence,
  concat('GPU memory behind triton ', max(r.address), ' ', CAST(CAST(round(max(r.gpu_mem_used) * 100) AS BIGINT) AS VARCHAR),
         '% used (nv_gpu_memory_used_bytes of total) while ', max(s.service), ' waited ', CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms on it') AS summary,
  max(s.span_id) AS culprit_span_id,
  max(s.path_ms) AS explained_ms
FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
WHERE r.system = 'triton' AND r.gpu_mem_used >= 0.95
GROUP BY s.trace_id"#,
        ),
        r(
            "tokenizer_cpu",
            "tokenizer_cpu",
            r#"
SELECT s.trace_id, 0.86 AS confidence,
  concat(max(s.service), ' spent ', CAST(CAST(max(s.self_ms) AS BIGINT) AS VARCHAR), ' ms in ', max(s.name), ' on ', max(h.host),
         ', its CPU ', CAST(CAST(round(max(h.cpu_busy) * 100) AS BIGINT) AS VARCHAR), '% busy') AS summary,
  first_value(s.span_id ORDER BY s.self_ms DESC) AS culprit_span_id,
  max(s.self_ms) AS explained_ms
FROM spans s JOIN host h ON h.trace_id = s.trace_id AND h.host = s.host
WHERE s.critical AND regexp_like(lower(s.name), '(tokeni[sz]|detokeni[sz]|preprocess|pre-process|pre_process)')
  AND (h.cpu_busy >= 0.85 OR h.psi_cpu >= 40)
GROUP BY s.trace_id"#,
        ),
        r(
            "consumer_lag",
            "consumer_lag",
            r#"
SELECT k.trace_id, 0.86 AS confidence,
  concat('consumer group ', coalesce(max(k.consumer_group), '?'), ' lags on ', max(k.topic), ': ',
         CAST(CAST(max(k.lag) AS BIGINT) AS VARCHAR), ' messages',
         CASE WHEN bool_or(k.growing) THEN concat(', up ', CAST(CAST(max(k.lag_trend) AS BIGINT) AS VARCHAR), ' in the window') ELSE '' END,
         '; the message waited ', CAST(CAST(max(s.async_wait_ms) AS BIGINT) AS VARCHAR), ' ms before ', max(s.service), ' consumed it') AS summary,
  concat('lag=', CAST(max(k.lag) AS VARCHAR), ' lag_trend=', CAST(max(k.lag_trend) AS VARCHAR), ' lag_seconds=', CAST(max(k.lag_seconds) AS VARCHAR), ' status=', CAST(max(k.status) AS VARCHAR)) AS evidence,
  max(s.span_id) AS culprit_span_id,
  max(s.async_wait_ms + s.duration_ms) AS explained_ms
FROM kafka_lag k JOIN spans s ON s.trace_id = k.trace_id AND s.destination = k.topic AND s.async_wait_ms IS NOT NULL
WHERE (k.lagging OR k.alarm OR k.status IN (2, 3, 4, 5) OR k.lag_seconds >= 10) AND NOT k.retry_storm
GROUP BY k.trace_id"#,
        ),
        r(
            "queue_backlog",
            "consumer_lag",
            r#"
SELECT trace_id, 0.86 AS confidence,
  first_value(summary ORDER BY explained_ms DESC) AS summary,
  first_value(evidence ORDER BY explained_ms DESC) AS evidence,
  first_value(culprit ORDER BY explained_ms DESC) AS culprit_span_id,
  max(explained_ms) AS explained_ms,
  bool_or(explains) AS explains_failure
FROM (
  SELECT q.trace_id,
    concat('RabbitMQ queue ', q.queue, CASE WHEN q.vhost = '/' THEN '' ELSE concat(' (vhost ', q.vhost, ')') END, ' ',
           CASE q.status WHEN 4 THEN 'has no consumer' WHEN 5 THEN 'stalled: consumers but no delivery' WHEN 2 THEN 'grows' ELSE 'is backlogged' END,
           ': ', CAST(CAST(coalesce(q.depth, 0) AS BIGINT) AS VARCHAR), ' messages waiting',
           CASE WHEN q.backlog_age_s IS NULL THEN '' ELSE concat(', the oldest for ', CAST(CAST(q.backlog_age_s AS BIGINT) AS VARCHAR), ' s') END,
           CASE WHEN s.async_wait_ms IS NOT NULL
                THEN concat('; the message waited ', CAST(CAST(s.async_wait_ms AS BIGINT) AS VARCHAR), ' ms before ', s.service, ' consumed it')
                ELSE concat('; ', coalesce(p.service, s.service), ' published to it and waited ', CAST(CAST(greatest(least(p.end_ms - s.end_ms, p.self_ms), 0.0) AS BIGINT) AS VARCHAR), ' ms') END) AS summary,
    concat('queue=', q.queue, ' vhost=', q.vhost, ' depth=', CAST(q.depth AS VARCHAR), ' depth_trend=', CAST(q.depth_trend AS VARCHAR),
           ' consumers=', CAST(q.consumers AS VARCHAR), ' status=', CAST(q.status AS VARCHAR), ' backlog_age_s=', CAST(q.backlog_age_s AS VARCHAR),
           ' deliver_rate=', CAST(q.deliver_rate AS VARCHAR)) AS evidence,
    CASE WHEN s.async_wait_ms IS NOT NULL OR p.span_id IS NULL THEN s.span_id ELSE p.span_id END AS culprit,
    CASE WHEN s.async_wait_ms IS NOT NULL THEN s.async_wait_ms + s.duration_ms
         ELSE greatest(coalesce(least(p.end_ms - s.end_ms, p.self_ms), 0.0), 0.0) END AS explained_ms,
    -- The request failed waiting on a message that nobody could take
    -- (no consumer, or stalled): the backlog is why it failed.
    t.failed AND q.status IN (4, 5) AND s.async_wait_ms IS NULL
      AND coalesce(p.end_ms - s.end_ms, 0.0) >= 0.5 * t.duration_ms AS explains
  FROM rabbitmq_queue q JOIN spans s ON s.trace_id = q.trace_id AND s.span_id = q.span_id
  JOIN traces t ON t.trace_id = q.trace_id
  LEFT JOIN spans p ON p.trace_id = s.trace_id AND p.span_id = s.parent_id
  WHERE (q.status IN (2, 4, 5) OR q.alarm) AND NOT q.retry_storm
) x
GROUP BY trace_id"#,
        ),
        r(
            "retry_storm_queue",
            "retry_storm",
            r#"
SELECT q.trace_id, 0.87 AS confidence,
  concat('retry storm on RabbitMQ queue ', max(q.queue), ': ', CAST(CAST(max(q.publish_rate) AS BIGINT) AS VARCHAR), ' messages/s') AS summary,
  max(s.span_id) AS culprit_span_id,
  coalesce(max(s.async_wait_ms) + max(s.duration_ms), 0.0) AS explained_ms
FROM rabbitmq_queue q JOIN spans s ON s.trace_id = q.trace_id AND s.span_id = q.span_id
WHERE q.retry_storm
GROUP BY q.trace_id"#,
        ),
        r(
            "retry_storm_topic",
            "retry_storm",
            r#"
SELECT k.trace_id, 0.87 AS confidence,
  concat('retry storm on ', max(k.topic), ': ', CAST(CAST(max(k.produce_rate) AS BIGINT) AS VARCHAR), ' messages/s') AS summary,
  max(s.span_id) AS culprit_span_id,
  coalesce(max(s.async_wait_ms) + max(s.duration_ms), 0.0) AS explained_ms
FROM kafka_lag k JOIN spans s ON s.trace_id = k.trace_id AND s.destination = k.topic AND s.kind = 'consumer'
WHERE k.retry_storm
GROUP BY k.trace_id"#,
        ),
        r(
            "client_retries",
            "retry_storm",
            r#"
SELECT s.trace_id, 0.92 AS confidence,
  concat(max(s.service), ' retried ', coalesce(max(s.server_address), max(s.name)), ': ',
         CAST(coalesce(max(s.attempts), max(s.resend_count) + 1) AS VARCHAR), ' attempts in ',
         CAST(CAST(coalesce(max(s.retry_window_ms), max(s.duration_ms)) AS BIGINT) AS VARCHAR), ' ms',
         CASE WHEN max(s.retry_trigger) IS NULL THEN '' ELSE concat(', ', CAST(max(s.failed_attempts) AS VARCHAR), ' failed with ', max(s.retry_trigger)) END) AS summary,
  first_value(s.span_id ORDER BY CASE WHEN s.kind = 'client' THEN 0 ELSE 1 END, s.start_ms) AS culprit_span_id,
  max(s.retry_window_ms) AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM spans s JOIN traces t ON t.trace_id = s.trace_id
WHERE s.attempts >= 3 OR s.resend_count >= 2
GROUP BY s.trace_id"#,
        ),
        r(
            "host_cpu",
            "host_cpu_saturation",
            r#"
SELECT h.trace_id, 0.82 AS confidence,
  concat('host ', max(h.host), ' CPU saturated (', CAST(CAST(max(h.cpu_busy) * 100 AS BIGINT) AS VARCHAR), '% busy) while ',
         max(t.culprit_service), ' ran ', max(t.culprit_name)) AS summary,
  coalesce(max(t.culprit_excess_ms), max(t.culprit_self_ms)) AS explained_ms
FROM host h JOIN traces t ON h.trace_id = t.trace_id
WHERE h.culprit AND (h.cpu_busy >= 0.9 OR h.psi_cpu >= 40)
GROUP BY h.trace_id"#,
        ),
        r(
            "host_iowait",
            "host_io_wait",
            r#"
SELECT h.trace_id, 0.82 AS confidence,
  concat('host ', max(h.host), ' waiting on disk IO (iowait ', CAST(CAST(coalesce(max(h.iowait), 0) * 100 AS BIGINT) AS VARCHAR),
         '%, disk busy ', CAST(CAST(coalesce(max(h.disk_util), 0) * 100 AS BIGINT) AS VARCHAR), '%) while ',
         max(t.culprit_service), ' ran ', max(t.culprit_name)) AS summary,
  coalesce(max(t.culprit_excess_ms), max(t.culprit_self_ms)) AS explained_ms
FROM host h JOIN traces t ON h.trace_id = t.trace_id
WHERE h.culprit AND (h.iowait >= 0.2 OR h.disk_util >= 0.9 OR h.psi_io >= 30)
GROUP BY h.trace_id"#,
        ),
        r(
            "host_memory",
            "host_memory_pressure",
            r#"
SELECT h.trace_id, 0.82 AS confidence,
  concat('host ', max(h.host), ' under memory pressure (',
         CAST(CAST(coalesce(max(h.mem_used), 1 - min(h.mem_available_ratio)) * 100 AS BIGINT) AS VARCHAR), '% used) while ',
         max(t.culprit_service), ' ran ', max(t.culprit_name)) AS summary,
  coalesce(max(t.culprit_excess_ms), max(t.culprit_self_ms)) AS explained_ms
FROM host h JOIN traces t ON h.trace_id = t.trace_id
WHERE h.culprit AND (h.mem_used >= 0.95 OR h.mem_available_ratio <= 0.05 OR h.psi_memory >= 20)
GROUP BY h.trace_id"#,
        ),
        r(
            "queueing",
            "queueing",
            r#"
SELECT s.trace_id, 0.8 AS confidence,
  concat('the request from ', max(s.service), ' to ', coalesce(max(s.server_address), max(s.name)), ' waited ',
         CAST(CAST(max(s.queue_ms) AS BIGINT) AS VARCHAR),
         ' ms before the server began it (accept queue or worker pool)') AS summary,
  first_value(s.span_id ORDER BY s.queue_ms DESC) AS culprit_span_id,
  max(s.queue_ms) AS explained_ms
FROM spans s WHERE s.queue_ms IS NOT NULL AND s.critical
GROUP BY s.trace_id
UNION ALL
SELECT s.trace_id, 0.8 AS confidence,
  concat(max(s.service), ' waited ', CAST(CAST(max(s.self_ms) AS BIGINT) AS VARCHAR), ' ms in ', max(s.name),
         ' (pool, lock or queue)') AS summary,
  first_value(s.span_id ORDER BY s.self_ms DESC) AS culprit_span_id,
  max(s.self_ms) AS explained_ms
FROM spans s
WHERE s.critical AND s.kind <> 'server'
  AND (s.name = 'http.getconn'
       OR regexp_like(lower(s.name), '(^|[^a-z])(pool|acquire|lock|locks|queue|wait|semaphore)([^a-z]|$)'))
GROUP BY s.trace_id"#,
        ),
        r(
            "error",
            "error",
            r#"
SELECT t.trace_id, 0.7 AS confidence,
  concat('error in ', coalesce(t.error_service, t.culprit_service), ': ',
         coalesce(s.exception_type, s.error_type, nullif(s.status_message, ''), s.name)) AS summary,
  t.error_span_id AS culprit_span_id,
  CASE WHEN t.failed AND s.attempts IS NULL THEN t.duration_ms ELSE s.path_ms END AS explained_ms,
  t.failed AND s.attempts IS NULL AS explains_failure
FROM traces t JOIN spans s ON s.trace_id = t.trace_id AND s.span_id = t.error_span_id
WHERE t.error"#,
        ),
        r(
            "slow_dependency",
            "slow_dependency",
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
pub fn assemble(builtin_rules: bool, user: &[RuleConfig]) -> Vec<Rule> {
    let mut rules: Vec<Rule> = if builtin_rules { builtin() } else { Vec::new() };
    for u in user {
        rules.retain(|r| r.name != u.name);
        rules.push(Rule {
            name: u.name.clone(),
            cause: u.cause.clone(),
            sql: u.sql.clone(),
            user: true,
        });
    }
    rules
}

pub(crate) fn utf8(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}
pub(crate) fn f64f(name: &str) -> Field {
    Field::new(name, DataType::Float64, true)
}
pub(crate) fn i64f(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}
pub(crate) fn boolf(name: &str) -> Field {
    Field::new(name, DataType::Boolean, true)
}

pub(crate) fn schema(fields: Vec<Field>) -> SchemaRef {
    Arc::new(Schema::new(fields))
}

/// The measured columns of a dependency row (see [`super::deps::DepRow`]),
/// shared by the rules' `dependency` table and the alerts' `dependencies`.
pub(crate) fn dep_fields() -> Vec<Field> {
    let mut v: Vec<Field> = [
        "up",
        "hits",
        "misses",
        "miss_ratio",
        "connected_clients",
        "blocked_clients",
        "command_p99_us",
        "locks_exclusive",
    ]
    .iter()
    .map(|n| f64f(n))
    .collect();
    v.push(utf8("locks_by_mode"));
    v.extend(
        [
            "connections",
            "max_connections",
            "max_tx_duration_s",
            "connections_active",
            "connections_waiting",
            "pending_overflow",
            "cx_overflow",
            "connect_fail",
            "rq_timeout",
            "ssl_errors",
            "breaker_open",
            "connect_ms",
            "requests_waiting",
            "requests_running",
            "kv_cache_usage",
            "preemptions",
            "queue_time_s",
            "ttft_s",
            "request_duration_s",
            "queue_ms_per_request",
            "gpu_util",
            "gpu_mem_used",
        ]
        .iter()
        .map(|n| f64f(n)),
    );
    v
}

/// The cells of [`dep_fields`].
pub(crate) fn dep_values(d: &super::deps::DepRow) -> [V<'_>; 31] {
    [
        V::F(d.up),
        V::F(d.hits),
        V::F(d.misses),
        V::F(d.miss_ratio),
        V::F(d.connected_clients),
        V::F(d.blocked_clients),
        V::F(d.command_p99_us),
        V::F(d.locks_exclusive),
        so(&d.locks_by_mode),
        V::F(d.connections),
        V::F(d.max_connections),
        V::F(d.max_tx_duration_s),
        V::F(d.connections_active),
        V::F(d.connections_waiting),
        V::F(d.pending_overflow),
        V::F(d.cx_overflow),
        V::F(d.connect_fail),
        V::F(d.rq_timeout),
        V::F(d.ssl_errors),
        V::F(d.breaker_open),
        V::F(d.connect_ms),
        V::F(d.requests_waiting),
        V::F(d.requests_running),
        V::F(d.kv_cache_usage),
        V::F(d.preemptions),
        V::F(d.queue_time_s),
        V::F(d.ttft_s),
        V::F(d.request_duration_s),
        V::F(d.queue_ms_per_request),
        V::F(d.gpu_util),
        V::F(d.gpu_mem_used),
    ]
}

/// The schemas of the tables.
pub fn schemas() -> Vec<(&'static str, SchemaRef)> {
    vec![
        (
            "traces",
            schema(vec![
                utf8("trace_id"),
                f64f("duration_ms"),
                utf8("route"),
                utf8("root_span_id"),
                utf8("root_service"),
                utf8("root_name"),
                boolf("error"),
                utf8("culprit_span_id"),
                utf8("culprit_service"),
                utf8("culprit_name"),
                utf8("culprit_kind"),
                f64f("culprit_self_ms"),
                f64f("culprit_share"),
                utf8("culprit_host"),
                utf8("culprit_db_system"),
                utf8("error_span_id"),
                utf8("error_service"),
                f64f("start_unix_ms"),
                boolf("failed"),
                i64f("final_status"),
                f64f("culprit_excess_ms"),
                f64f("culprit_baseline_ms"),
                f64f("culprit_path_ms"),
                utf8("entry_span_id"),
                utf8("entry_service"),
            ]),
        ),
        (
            "spans",
            schema(vec![
                utf8("trace_id"),
                utf8("span_id"),
                utf8("parent_id"),
                utf8("service"),
                utf8("host"),
                utf8("name"),
                utf8("kind"),
                f64f("start_ms"),
                f64f("end_ms"),
                f64f("duration_ms"),
                f64f("self_ms"),
                f64f("share"),
                boolf("critical"),
                utf8("status"),
                utf8("status_message"),
                i64f("http_status"),
                utf8("route"),
                utf8("db_system"),
                utf8("db_operation"),
                utf8("messaging_system"),
                utf8("destination"),
                utf8("consumer_group"),
                utf8("routing_key"),
                utf8("server_address"),
                utf8("error_type"),
                utf8("exception_type"),
                utf8("exception_message"),
                i64f("resend_count"),
                boolf("cache_hit"),
                f64f("wait_ms"),
                f64f("path_ms"),
                boolf("cache_inferred"),
                boolf("client_error"),
                i64f("attempt"),
                i64f("attempts"),
                i64f("failed_attempts"),
                f64f("retry_window_ms"),
                utf8("retry_trigger"),
                boolf("recovered"),
                f64f("queue_ms"),
                f64f("async_wait_ms"),
                f64f("baseline_ms"),
                f64f("excess_ms"),
                i64f("server_port"),
                utf8("gen_ai_model"),
                i64f("input_tokens"),
                i64f("output_tokens"),
                f64f("gen_ai_queue_ms"),
                f64f("gen_ai_ttft_ms"),
                f64f("gen_ai_prefill_ms"),
                f64f("gen_ai_decode_ms"),
                f64f("prompt_baseline"),
            ]),
        ),
        (
            "logs",
            schema(vec![
                utf8("trace_id"),
                f64f("time_ms"),
                boolf("gateway"),
                utf8("service"),
                utf8("route"),
                i64f("status"),
                utf8("rate_limit_rule"),
                utf8("circuit_state"),
                utf8("response_flags"),
                utf8("upstream"),
                f64f("duration_ms"),
                i64f("severity"),
                utf8("error_type"),
                utf8("body"),
            ]),
        ),
        (
            "route_stats",
            schema(vec![
                utf8("trace_id"),
                utf8("route"),
                i64f("requests"),
                i64f("s4xx"),
                i64f("s5xx"),
                i64f("s429"),
                i64f("s503"),
                i64f("s504"),
                i64f("not_closed"),
                utf8("top_rule"),
                utf8("circuit_state"),
                i64f("circuit_changes"),
                f64f("p50_ms"),
                f64f("p99_ms"),
            ]),
        ),
        (
            "kafka_lag",
            schema(vec![
                utf8("trace_id"),
                utf8("topic"),
                utf8("consumer_group"),
                f64f("lag"),
                f64f("lag_trend"),
                f64f("lag_seconds"),
                i64f("status"),
                boolf("alarm"),
                boolf("retry_storm"),
                f64f("produce_rate"),
                f64f("time_ms"),
                boolf("growing"),
                boolf("lagging"),
            ]),
        ),
        (
            "rabbitmq_queue",
            schema(vec![
                utf8("trace_id"),
                utf8("queue"),
                utf8("vhost"),
                utf8("span_id"),
                utf8("role"),
                f64f("depth"),
                f64f("depth_trend"),
                f64f("ready"),
                f64f("unacked"),
                f64f("consumers"),
                f64f("backlog_age_s"),
                i64f("status"),
                boolf("alarm"),
                boolf("retry_storm"),
                f64f("publish_rate"),
                f64f("deliver_rate"),
                f64f("time_ms"),
            ]),
        ),
        (
            "host",
            schema(vec![
                utf8("trace_id"),
                utf8("host"),
                boolf("culprit"),
                f64f("cpu_busy"),
                f64f("iowait"),
                f64f("mem_used"),
                f64f("mem_available_ratio"),
                f64f("disk_util"),
                f64f("psi_cpu"),
                f64f("psi_memory"),
                f64f("psi_io"),
                f64f("time_ms"),
                f64f("gpu_util"),
                f64f("gpu_mem_used"),
            ]),
        ),
        (
            "dependency",
            schema(
                [
                    utf8("trace_id"),
                    utf8("span_id"),
                    utf8("system"),
                    utf8("address"),
                    utf8("job"),
                    utf8("instance"),
                    utf8("envoy_cluster"),
                    f64f("time_ms"),
                ]
                .into_iter()
                .chain(dep_fields())
                .collect(),
            ),
        ),
    ]
}

/// Column builders, one Arrow builder per column; cells are borrowed, so a
/// row costs no allocation of its own.
pub(crate) struct Cols {
    cols: Vec<Col>,
}

pub(crate) enum Col {
    S(StringBuilder),
    F(Float64Builder),
    I(Int64Builder),
    B(BooleanBuilder),
}

/// A cell.
pub(crate) enum V<'a> {
    S(Option<&'a str>),
    F(Option<f64>),
    I(Option<i64>),
    B(Option<bool>),
}

impl Cols {
    /// Builders sized for `rows` rows (no regrowth while filling).
    pub(crate) fn new(schema: &Schema, rows: usize) -> Self {
        Cols {
            cols: schema
                .fields()
                .iter()
                .map(|f| match f.data_type() {
                    DataType::Float64 => Col::F(Float64Builder::with_capacity(rows)),
                    DataType::Int64 => Col::I(Int64Builder::with_capacity(rows)),
                    DataType::Boolean => Col::B(BooleanBuilder::with_capacity(rows)),
                    _ => Col::S(StringBuilder::with_capacity(rows, rows * 16)),
                })
                .collect(),
        }
    }
    pub(crate) fn row<'a>(&mut self, cells: impl IntoIterator<Item = V<'a>>) {
        for (c, v) in self.cols.iter_mut().zip(cells) {
            match (c, v) {
                (Col::S(x), V::S(v)) => x.append_option(v),
                (Col::F(x), V::F(v)) => x.append_option(v),
                (Col::I(x), V::I(v)) => x.append_option(v),
                (Col::B(x), V::B(v)) => x.append_option(v),
                (Col::S(x), _) => x.append_null(),
                (Col::F(x), _) => x.append_null(),
                (Col::I(x), _) => x.append_null(),
                (Col::B(x), _) => x.append_null(),
            }
        }
    }
    pub(crate) fn finish(self, schema: SchemaRef) -> Result<RecordBatch, String> {
        let arrays: Vec<ArrayRef> = self
            .cols
            .into_iter()
            .map(|c| -> ArrayRef {
                match c {
                    Col::S(mut b) => Arc::new(b.finish()),
                    Col::F(mut b) => Arc::new(b.finish()),
                    Col::I(mut b) => Arc::new(b.finish()),
                    Col::B(mut b) => Arc::new(b.finish()),
                }
            })
            .collect();
        RecordBatch::try_new(schema, arrays).map_err(|e| e.to_string())
    }
}

pub(crate) fn s(x: &str) -> V<'_> {
    V::S(Some(x))
}
pub(crate) fn so(x: &Option<String>) -> V<'_> {
    V::S(x.as_deref())
}

/// The tables of a tick's traces.
pub fn tables(traces: &[TraceRow]) -> Result<Vec<(&'static str, SchemaRef, RecordBatch)>, String> {
    let mut out = Vec::new();
    for (name, schema) in schemas() {
        let rows = match name {
            "spans" => traces.iter().map(|t| t.spans.len()).sum(),
            "logs" => traces.iter().map(|t| t.logs.len()).sum(),
            "kafka_lag" => traces.iter().map(|t| t.kafka.len()).sum(),
            "host" => traces.iter().map(|t| t.hosts.len()).sum(),
            "dependency" => traces.iter().map(|t| t.deps.len()).sum(),
            "rabbitmq_queue" => traces.iter().map(|t| t.queues.len()).sum(),
            _ => traces.len(),
        };
        let mut c = Cols::new(&schema, rows);
        match name {
            "traces" => {
                for t in traces {
                    let cu = &t.spans[t.culprit];
                    let root = &t.spans[t.root];
                    let err = t.error_origin.map(|e| &t.spans[e]);
                    let (root_id, cu_id) = (Hex16::of(root.span_id), Hex16::of(cu.span_id));
                    let err_id = err.map(|e| Hex16::of(e.span_id));
                    let entry = &t.spans[t.entry];
                    let entry_id = Hex16::of(entry.span_id);
                    c.row([
                        s(&t.trace_id),
                        V::F(Some(t.duration_ms)),
                        so(&t.route),
                        s(root_id.as_str()),
                        s(&root.service),
                        s(&root.name),
                        V::B(Some(t.error_origin.is_some())),
                        s(cu_id.as_str()),
                        s(&cu.service),
                        s(&cu.name),
                        s(cu.kind),
                        V::F(Some(cu.self_ms)),
                        V::F(Some(if t.duration_ms > 0.0 {
                            cu.self_ms / t.duration_ms
                        } else {
                            0.0
                        })),
                        s(&cu.host),
                        so(&cu.db_system),
                        V::S(err_id.as_ref().map(Hex16::as_str)),
                        V::S(err.map(|e| &*e.service)),
                        V::F(Some(t.start_unix_ms)),
                        V::B(Some(t.failed)),
                        V::I(t.final_status),
                        V::F(cu.excess_ms),
                        V::F(cu.baseline_ms),
                        V::F(Some(cu.path_ms)),
                        s(entry_id.as_str()),
                        s(&entry.service),
                    ]);
                }
            }
            "spans" => {
                for t in traces {
                    for sp in &t.spans {
                        let (id, parent) = (Hex16::of(sp.span_id), Hex16::of(sp.parent_id));
                        c.row([
                            s(&t.trace_id),
                            s(id.as_str()),
                            s(parent.as_str()),
                            s(&sp.service),
                            s(&sp.host),
                            s(&sp.name),
                            s(sp.kind),
                            V::F(Some(sp.start_ms)),
                            V::F(Some(sp.end_ms)),
                            V::F(Some(sp.duration_ms)),
                            V::F(Some(sp.self_ms)),
                            V::F(Some(if t.duration_ms > 0.0 {
                                sp.self_ms / t.duration_ms
                            } else {
                                0.0
                            })),
                            V::B(Some(sp.critical)),
                            s(sp.status),
                            s(&sp.status_message),
                            V::I(sp.http_status),
                            V::S(sp.route.as_deref().or(t.route.as_deref())),
                            so(&sp.db_system),
                            so(&sp.db_operation),
                            so(&sp.messaging_system),
                            so(&sp.destination),
                            so(&sp.consumer_group),
                            so(&sp.routing_key),
                            so(&sp.server_address),
                            so(&sp.error_type),
                            so(&sp.exception_type),
                            so(&sp.exception_message),
                            V::I(sp.resend_count),
                            V::B(sp.cache_hit),
                            V::F(sp.wait_ms),
                            V::F(Some(sp.path_ms)),
                            V::B(Some(sp.cache_inferred)),
                            V::B(Some(sp.client_error)),
                            V::I(sp.attempt),
                            V::I(sp.attempts),
                            V::I(sp.failed_attempts),
                            V::F(sp.retry_window_ms),
                            so(&sp.retry_trigger),
                            V::B(Some(sp.recovered)),
                            V::F(sp.queue_ms),
                            V::F(sp.async_wait_ms),
                            V::F(sp.baseline_ms),
                            V::F(sp.excess_ms),
                            V::I(sp.server_port),
                            so(&sp.gen_ai_model),
                            V::I(sp.input_tokens),
                            V::I(sp.output_tokens),
                            V::F(sp.gen_ai_queue_ms),
                            V::F(sp.gen_ai_ttft_ms),
                            V::F(sp.gen_ai_prefill_ms),
                            V::F(sp.gen_ai_decode_ms),
                            V::F(sp.prompt_baseline),
                        ]);
                    }
                }
            }
            "logs" => {
                for t in traces {
                    for l in &t.logs {
                        c.row([
                            s(&t.trace_id),
                            V::F(Some(l.time_ns as f64 / 1e6)),
                            V::B(Some(l.gateway)),
                            s(&l.service),
                            so(&l.route),
                            V::I(l.status),
                            so(&l.rate_limit_rule),
                            so(&l.circuit_state),
                            so(&l.response_flags),
                            so(&l.upstream),
                            V::F(l.duration_ms),
                            V::I(Some(i64::from(l.severity))),
                            so(&l.error_type),
                            s(&l.body),
                        ]);
                    }
                }
            }
            "route_stats" => {
                for t in traces {
                    if let Some((route, st)) = &t.route_stats {
                        let i = |x: u64| V::I(Some(i64::try_from(x).unwrap_or(i64::MAX)));
                        c.row([
                            s(&t.trace_id),
                            s(route),
                            i(st.requests),
                            i(st.s4xx),
                            i(st.s5xx),
                            i(st.s429),
                            i(st.s503),
                            i(st.s504),
                            i(st.not_closed),
                            so(&st.top_rule),
                            so(&st.circuit_state),
                            i(st.circuit_changes),
                            V::F(st.p50_ms),
                            V::F(st.p99_ms),
                        ]);
                    }
                }
            }
            "kafka_lag" => {
                for t in traces {
                    for k in &t.kafka {
                        c.row([
                            s(&t.trace_id),
                            s(&k.topic),
                            V::S(Some(k.group.as_str()).filter(|g| !g.is_empty())),
                            V::F(k.lag),
                            V::F(k.lag_trend),
                            V::F(k.lag_seconds),
                            V::I(k.status),
                            V::B(Some(k.alarm)),
                            V::B(Some(k.retry_storm)),
                            V::F(k.produce_rate),
                            V::F(Some(k.time_ns as f64 / 1e6)),
                            V::B(Some(k.growing)),
                            V::B(Some(k.lagging)),
                        ]);
                    }
                }
            }
            "rabbitmq_queue" => {
                for t in traces {
                    for q in &t.queues {
                        c.row([
                            s(&t.trace_id),
                            s(&q.queue),
                            s(&q.vhost),
                            s(&q.span_id),
                            s(q.role),
                            V::F(q.depth),
                            V::F(q.depth_trend),
                            V::F(q.ready),
                            V::F(q.unacked),
                            V::F(q.consumers),
                            V::F(q.backlog_age_s),
                            V::I(q.status),
                            V::B(Some(q.alarm)),
                            V::B(Some(q.retry_storm)),
                            V::F(q.publish_rate),
                            V::F(q.deliver_rate),
                            V::F(Some(q.time_ns as f64 / 1e6)),
                        ]);
                    }
                }
            }
            "dependency" => {
                for t in traces {
                    for d in &t.deps {
                        c.row(
                            [
                                s(&t.trace_id),
                                s(&d.span_id),
                                s(d.system),
                                s(&d.address),
                                s(&d.job),
                                s(&d.instance),
                                so(&d.cluster),
                                V::F(Some(d.time_ns as f64 / 1e6)),
                            ]
                            .into_iter()
                            .chain(dep_values(d)),
                        );
                    }
                }
            }
            _ => {
                for t in traces {
                    for h in &t.hosts {
                        c.row([
                            s(&t.trace_id),
                            s(&h.host),
                            V::B(Some(h.culprit)),
                            V::F(h.cpu_busy),
                            V::F(h.iowait),
                            V::F(h.mem_used),
                            V::F(h.mem_available_ratio),
                            V::F(h.disk_util),
                            V::F(h.psi_cpu),
                            V::F(h.psi_memory),
                            V::F(h.psi_io),
                            V::F(Some(h.time_ns as f64 / 1e6)),
                            V::F(h.gpu_util),
                            V::F(h.gpu_mem_used),
                        ]);
                    }
                }
            }
        }
        let batch = c.finish(schema.clone())?;
        out.push((name, schema, batch));
    }
    Ok(out)
}

pub(crate) fn context(
    tables: Vec<(&'static str, SchemaRef, RecordBatch)>,
) -> Result<SessionContext, String> {
    let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
    for (name, schema, batch) in tables {
        let t = MemTable::try_new(schema, vec![vec![batch]]).map_err(|e| e.to_string())?;
        ctx.register_table(name, Arc::new(t))
            .map_err(|e| e.to_string())?;
    }
    Ok(ctx)
}

/// Check a rule's SQL against the tables (empty): it must parse, name
/// existing tables and columns, and return the required columns.
pub fn check_sql(sql: &str) -> Result<(), String> {
    let tables = tables(&[])?;
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

/// A table whose rows are swapped in before each evaluation, so that a
/// rule's plan, made once, reads the current rows.
#[derive(Debug)]
struct Slot {
    schema: SchemaRef,
    rows: std::sync::RwLock<Option<RecordBatch>>,
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
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::error::Result<Arc<dyn ExecutionPlan>> {
        let rows = match self.rows.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        };
        let rows = rows.unwrap_or_else(|| RecordBatch::new_empty(self.schema.clone()));
        MemTable::try_new(self.schema.clone(), vec![vec![rows]])?
            .scan(state, projection, filters, limit)
            .await
    }
}

/// The root-cause rules, planned once. The first evaluation of a rule
/// parses, analyses and optimizes its SQL against the tables' schemas;
/// later ones swap the rows in and make only the physical plan (which reads
/// them). Planning was most of a tick's cost: DataFusion's logical optimizer
/// alone took 11% of the gateway pipeline's CPU when every tick planned
/// every rule from its text (BENCHMARKS.md).
pub struct Planner {
    ctx: SessionContext,
    slots: Vec<(&'static str, Arc<Slot>)>,
    /// Optimized plans by SQL text.
    plans: HashMap<String, Arc<LogicalPlan>>,
}

impl std::fmt::Debug for Planner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Planner")
            .field("plans", &self.plans.len())
            .finish()
    }
}

impl Default for Planner {
    fn default() -> Self {
        Self::new()
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
    /// Tables registered, nothing planned yet.
    pub fn new() -> Self {
        let ctx = SessionContext::new_with_config(SessionConfig::new().with_target_partitions(1));
        let mut slots = Vec::new();
        for (name, schema) in schemas() {
            let slot = Arc::new(Slot {
                schema,
                rows: std::sync::RwLock::new(None),
            });
            // Names are fixed and distinct: registration cannot fail.
            if ctx.register_table(name, slot.clone()).is_ok() {
                slots.push((name, slot));
            }
        }
        Planner {
            ctx,
            slots,
            plans: HashMap::new(),
        }
    }

    fn fill(&self, tables: Vec<(&'static str, SchemaRef, RecordBatch)>) {
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

    /// Run every rule over the traces; findings per trace id, and the errors of rules that failed.
    pub async fn evaluate(
        &mut self,
        rules: &[Rule],
        traces: &[TraceRow],
    ) -> (HashMap<String, Vec<Finding>>, Vec<(String, String)>) {
        let mut findings: HashMap<String, Vec<Finding>> = HashMap::new();
        let mut errors = Vec::new();
        if traces.is_empty() {
            return (findings, errors);
        }
        match tables(traces) {
            Ok(t) => self.fill(t),
            Err(e) => {
                errors.push(("*".to_string(), e));
                return (findings, errors);
            }
        }
        let state = self.ctx.state();
        // Physical plans are made here, in order, while the rows are in the
        // slots (each plan takes its own reference to them); the queries then
        // run concurrently: on the daemon's multi-threaded runtime a tick's
        // queries spread over the cores.
        let mut runs = Vec::with_capacity(rules.len());
        for rule in rules {
            let physical = match self.plan(&state, &rule.sql).await {
                Ok(plan) => {
                    state
                        .query_planner()
                        .create_physical_plan(&plan, &state)
                        .await
                }
                Err(e) => Err(e),
            };
            let task = state.task_ctx();
            runs.push(tokio::spawn(async move {
                datafusion::physical_plan::collect(physical?, task).await
            }));
        }
        self.clear();
        collect_findings(rules, runs, &mut findings, &mut errors).await;
        (findings, errors)
    }
}

/// Run every rule over the traces with a planner of their own (tests, one-off checks).
pub async fn evaluate(
    rules: &[Rule],
    traces: &[TraceRow],
) -> (HashMap<String, Vec<Finding>>, Vec<(String, String)>) {
    Planner::new().evaluate(rules, traces).await
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
                    evidence: opt(&evidence),
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

    #[test]
    fn every_builtin_rule_plans_against_the_tables() {
        for r in builtin() {
            if let Err(e) = check_sql(&r.sql) {
                panic!("built-in rule {} does not plan: {e}", r.name);
            }
        }
    }

    #[test]
    fn bad_rules_are_rejected_with_a_reason() {
        let e = check_sql("SELECT trace_id FROM nosuch").expect_err("unknown table");
        assert!(e.contains("nosuch"), "{e}");
        let e = check_sql("SELECT trace_id, 0.5 AS confidence FROM spans").expect_err("no summary");
        assert!(e.contains("summary"), "{e}");
        let e = check_sql("SELEC x").expect_err("syntax");
        assert!(!e.is_empty());
        let e = check_sql(
            "SELECT trace_id, 1.0 AS confidence, 'x' AS summary FROM spans WHERE nope > 1",
        )
        .expect_err("column");
        assert!(e.contains("nope"), "{e}");
    }
}

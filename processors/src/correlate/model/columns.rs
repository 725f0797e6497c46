//! The core tables' columns, each declared once: its name, its type and
//! how its cell is read from a trace. `rules::schemas` and `rules::tables`
//! both derive from these lists. A new span attribute a rule reads is a
//! field of [`SpanRow`](super::trace::SpanRow) and one line here.

use super::table::{s, so, Column, V};
use super::trace::{Hex16, SpanRow, TraceRow};

type C = Column<TraceRow>;

fn culprit(t: &TraceRow) -> &SpanRow {
    &t.spans[t.culprit]
}

fn share(t: &TraceRow, self_ms: f64) -> V<'static> {
    V::F(Some(if t.duration_ms > 0.0 {
        self_ms / t.duration_ms
    } else {
        0.0
    }))
}

/// `traces`: one row per trace (the index is unused).
pub static TRACE_COLUMNS: &[C] = &[
    C::text("trace_id", |t, _| s(&t.trace_id)),
    C::float("duration_ms", |t, _| V::F(Some(t.duration_ms))),
    C::text("route", |t, _| so(&t.route)),
    C::text("root_span_id", |t, _| {
        V::Id(Hex16::of(t.spans[t.root].span_id))
    }),
    C::text("root_service", |t, _| s(&t.spans[t.root].service)),
    C::text("root_name", |t, _| s(&t.spans[t.root].name)),
    C::bool("error", |t, _| V::B(Some(t.error_origin.is_some()))),
    C::text("culprit_span_id", |t, _| {
        V::Id(Hex16::of(culprit(t).span_id))
    }),
    C::text("culprit_service", |t, _| s(&culprit(t).service)),
    C::text("culprit_name", |t, _| s(&culprit(t).name)),
    C::text("culprit_kind", |t, _| s(culprit(t).kind)),
    C::float("culprit_self_ms", |t, _| V::F(Some(culprit(t).self_ms))),
    C::float("culprit_share", |t, _| share(t, culprit(t).self_ms)),
    C::text("culprit_host", |t, _| s(&culprit(t).host)),
    C::text("culprit_db_system", |t, _| so(&culprit(t).db_system)),
    C::text("error_span_id", |t, _| match t.error_origin {
        Some(e) => V::Id(Hex16::of(t.spans[e].span_id)),
        None => V::S(None),
    }),
    C::text("error_service", |t, _| {
        V::S(t.error_origin.map(|e| &*t.spans[e].service))
    }),
    C::float("start_unix_ms", |t, _| V::F(Some(t.start_unix_ms))),
    C::bool("failed", |t, _| V::B(Some(t.failed))),
    C::int("final_status", |t, _| V::I(t.final_status)),
    C::float("culprit_excess_ms", |t, _| V::F(culprit(t).excess_ms)),
    C::float("culprit_baseline_ms", |t, _| V::F(culprit(t).baseline_ms)),
    C::float("culprit_path_ms", |t, _| V::F(Some(culprit(t).path_ms))),
    C::text("entry_span_id", |t, _| {
        V::Id(Hex16::of(t.spans[t.entry].span_id))
    }),
    C::text("entry_service", |t, _| s(&t.spans[t.entry].service)),
];

/// `spans`: one row per span (the index is the span's).
pub static SPAN_COLUMNS: &[C] = &[
    C::text("trace_id", |t, _| s(&t.trace_id)),
    C::text("span_id", |t, i| V::Id(Hex16::of(t.spans[i].span_id))),
    C::text("parent_id", |t, i| V::Id(Hex16::of(t.spans[i].parent_id))),
    C::text("service", |t, i| s(&t.spans[i].service)),
    C::text("host", |t, i| s(&t.spans[i].host)),
    C::text("name", |t, i| s(&t.spans[i].name)),
    C::text("kind", |t, i| s(t.spans[i].kind)),
    C::float("start_ms", |t, i| V::F(Some(t.spans[i].start_ms))),
    C::float("end_ms", |t, i| V::F(Some(t.spans[i].end_ms))),
    C::float("duration_ms", |t, i| V::F(Some(t.spans[i].duration_ms))),
    C::float("self_ms", |t, i| V::F(Some(t.spans[i].self_ms))),
    C::float("share", |t, i| share(t, t.spans[i].self_ms)),
    C::bool("critical", |t, i| V::B(Some(t.spans[i].critical))),
    C::text("status", |t, i| s(t.spans[i].status)),
    C::text("status_message", |t, i| s(&t.spans[i].status_message)),
    C::int("http_status", |t, i| V::I(t.spans[i].http_status)),
    C::text("route", |t, i| {
        V::S(t.spans[i].route.as_deref().or(t.route.as_deref()))
    }),
    C::text("db_system", |t, i| so(&t.spans[i].db_system)),
    C::text("db_operation", |t, i| so(&t.spans[i].db_operation)),
    C::text("messaging_system", |t, i| so(&t.spans[i].messaging_system)),
    C::text("destination", |t, i| so(&t.spans[i].destination)),
    C::text("consumer_group", |t, i| so(&t.spans[i].consumer_group)),
    C::text("routing_key", |t, i| so(&t.spans[i].routing_key)),
    C::text("server_address", |t, i| so(&t.spans[i].server_address)),
    C::text("peer_service", |t, i| so(&t.spans[i].peer_service)),
    C::text("callee", |t, i| V::S(t.spans[i].callee.as_deref())),
    C::text("error_type", |t, i| so(&t.spans[i].error_type)),
    C::text("exception_type", |t, i| so(&t.spans[i].exception_type)),
    C::text(
        "exception_message",
        |t, i| so(&t.spans[i].exception_message),
    ),
    C::int("resend_count", |t, i| V::I(t.spans[i].resend_count)),
    C::text("rpc_system", |t, i| so(&t.spans[i].rpc_system)),
    C::text("rpc_service", |t, i| so(&t.spans[i].rpc_service)),
    C::text("rpc_method", |t, i| so(&t.spans[i].rpc_method)),
    C::text("grpc_status", |t, i| V::S(t.spans[i].grpc_status)),
    C::bool("cache_hit", |t, i| V::B(t.spans[i].cache_hit)),
    C::float("wait_ms", |t, i| V::F(t.spans[i].wait_ms)),
    C::float("path_ms", |t, i| V::F(Some(t.spans[i].path_ms))),
    C::bool("cache_inferred", |t, i| {
        V::B(Some(t.spans[i].cache_inferred))
    }),
    C::bool("pool_wait", |t, i| V::B(Some(t.spans[i].pool_wait))),
    C::bool("client_error", |t, i| V::B(Some(t.spans[i].client_error))),
    C::int("attempt", |t, i| V::I(t.spans[i].attempt)),
    C::int("attempts", |t, i| V::I(t.spans[i].attempts)),
    C::int("failed_attempts", |t, i| V::I(t.spans[i].failed_attempts)),
    C::float("retry_window_ms", |t, i| V::F(t.spans[i].retry_window_ms)),
    C::float("retry_gap_ms", |t, i| V::F(t.spans[i].retry_gap_ms)),
    C::text("retry_trigger", |t, i| so(&t.spans[i].retry_trigger)),
    C::bool("recovered", |t, i| V::B(Some(t.spans[i].recovered))),
    C::float("queue_ms", |t, i| V::F(t.spans[i].queue_ms)),
    C::float("async_wait_ms", |t, i| V::F(t.spans[i].async_wait_ms)),
    C::float("baseline_ms", |t, i| V::F(t.spans[i].baseline_ms)),
    C::float("excess_ms", |t, i| V::F(t.spans[i].excess_ms)),
    C::int("server_port", |t, i| V::I(t.spans[i].server_port)),
    C::text("gen_ai_model", |t, i| so(&t.spans[i].gen_ai_model)),
    C::int("input_tokens", |t, i| V::I(t.spans[i].input_tokens)),
    C::int("output_tokens", |t, i| V::I(t.spans[i].output_tokens)),
    C::float("gen_ai_queue_ms", |t, i| V::F(t.spans[i].gen_ai_queue_ms)),
    C::float("gen_ai_ttft_ms", |t, i| V::F(t.spans[i].gen_ai_ttft_ms)),
    C::float("gen_ai_prefill_ms", |t, i| {
        V::F(t.spans[i].gen_ai_prefill_ms)
    }),
    C::float("gen_ai_decode_ms", |t, i| V::F(t.spans[i].gen_ai_decode_ms)),
    C::float("prompt_baseline", |t, i| V::F(t.spans[i].prompt_baseline)),
];

/// `logs`: one row per log record joined to a trace (the index is the record's).
pub static LOG_COLUMNS: &[C] = &[
    C::text("trace_id", |t, _| s(&t.trace_id)),
    C::float("time_ms", |t, i| V::F(Some(t.logs[i].time_ns as f64 / 1e6))),
    C::bool("gateway", |t, i| V::B(Some(t.logs[i].gateway))),
    C::int("hop", |t, i| V::I(t.log_hops.get(i).copied().flatten())),
    C::text("service", |t, i| s(&t.logs[i].service)),
    C::text("route", |t, i| so(&t.logs[i].route)),
    C::int("status", |t, i| V::I(t.logs[i].status)),
    C::text("rate_limit_rule", |t, i| so(&t.logs[i].rate_limit_rule)),
    C::text("circuit_state", |t, i| so(&t.logs[i].circuit_state)),
    C::text("response_flags", |t, i| so(&t.logs[i].response_flags)),
    C::text("upstream", |t, i| so(&t.logs[i].upstream)),
    C::float("duration_ms", |t, i| V::F(t.logs[i].duration_ms)),
    C::int("severity", |t, i| V::I(Some(i64::from(t.logs[i].severity)))),
    C::text("error_type", |t, i| so(&t.logs[i].error_type)),
    C::text("body", |t, i| s(&t.logs[i].body)),
    C::text("span_id", |t, i| so(&t.logs[i].span_id)),
];

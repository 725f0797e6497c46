//! The LLM inference family: vLLM's queue, running requests, KV cache and
//! preemptions; the OpenTelemetry GenAI server metrics (time to first
//! token, request duration; pushed over OTLP or scraped); NVIDIA Triton's
//! queue time per request and GPU use.

use std::collections::BTreeMap;

use super::{add, maxed, mean, DepRow, Family, Points, Window};
use crate::correlate::model::cause::{self, Cause};
use crate::correlate::model::table::{Column, V};
use crate::correlate::model::Rule;

/// Requests waited in the inference server's queue.
pub static INFERENCE_QUEUEING: Cause = Cause::new("inference_queueing", cause::dependency);

/// The server's KV cache was full: requests were preempted or waited.
pub static KV_CACHE_PRESSURE: Cause = Cause::new("kv_cache_pressure", cause::dependency);

/// vLLM, Triton and the GenAI server metrics.
#[derive(Debug, Default)]
pub struct Llm;

/// An inference server's measurements.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LlmRow {
    /// `vllm:num_requests_waiting`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_waiting: Option<f64>,
    /// `vllm:num_requests_running`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_running: Option<f64>,
    /// `vllm:kv_cache_usage_perc` (or the older `gpu_cache_usage_perc`), 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_cache_usage: Option<f64>,
    /// `vllm:num_preemptions_total` (increase).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// `vllm:request_queue_time_seconds`: the mean over the interval (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_time_s: Option<f64>,
    /// `vllm:time_to_first_token_seconds` (or the GenAI convention's `gen_ai.server.time_to_first_token`): the mean over the interval (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttft_s: Option<f64>,
    /// `gen_ai.server.request.duration`: the mean over the interval (s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_duration_s: Option<f64>,
    /// Triton: queue µs ÷ successful requests over the interval, in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_ms_per_request: Option<f64>,
    /// Triton `nv_gpu_utilization` (0..1): the largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_util: Option<f64>,
    /// Triton `nv_gpu_memory_used_bytes ÷ nv_gpu_memory_total_bytes`: the largest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_mem_used: Option<f64>,
}

/// The columns LlmRow adds to the `dependency` and `dependencies` tables.
static LLM: &[Column<LlmRow>] = &[
    Column::float("requests_waiting", |r, _| V::F(r.requests_waiting)),
    Column::float("requests_running", |r, _| V::F(r.requests_running)),
    Column::float("kv_cache_usage", |r, _| V::F(r.kv_cache_usage)),
    Column::float("preemptions", |r, _| V::F(r.preemptions)),
    Column::float("queue_time_s", |r, _| V::F(r.queue_time_s)),
    Column::float("ttft_s", |r, _| V::F(r.ttft_s)),
    Column::float("request_duration_s", |r, _| V::F(r.request_duration_s)),
    Column::float("queue_ms_per_request", |r, _| V::F(r.queue_ms_per_request)),
    Column::float("gpu_util", |r, _| V::F(r.gpu_util)),
    Column::float("gpu_mem_used", |r, _| V::F(r.gpu_mem_used)),
];

impl Family for Llm {
    type Row = LlmRow;

    fn name(&self) -> &'static str {
        "llm"
    }

    fn columns(&self) -> &'static [Column<LlmRow>] {
        LLM
    }

    fn system(&self, base: &str) -> Option<&'static str> {
        Some(match base {
            "vllm:num_requests_waiting"
            | "vllm:num_requests_running"
            | "vllm:kv_cache_usage_perc"
            | "vllm:gpu_cache_usage_perc"
            | "vllm:num_preemptions"
            | "vllm:request_queue_time_seconds"
            | "vllm:time_to_first_token_seconds" => "vllm",
            // OpenTelemetry GenAI server metrics, pushed over OTLP or scraped.
            "gen_ai.server.time_to_first_token"
            | "gen_ai.server.request.duration"
            | "gen_ai_server_time_to_first_token_seconds"
            | "gen_ai_server_request_duration_seconds" => "genai",
            "nv_inference_queue_duration_us"
            | "nv_inference_request_success"
            | "nv_gpu_utilization"
            | "nv_gpu_memory_used_bytes"
            | "nv_gpu_memory_total_bytes" => "triton",
            _ => return None,
        })
    }

    fn histograms(&self) -> &'static [&'static str] {
        &[
            "vllm:request_queue_time_seconds",
            "vllm:time_to_first_token_seconds",
            "gen_ai.server.time_to_first_token",
            "gen_ai.server.request.duration",
            "gen_ai_server_time_to_first_token_seconds",
            "gen_ai_server_request_duration_seconds",
        ]
    }

    fn fill(&self, r: &mut DepRow<LlmRow>, points: &[Points<'_>], w: &Window) {
        let (mut triton_queue, mut triton_ok) = (None, None);
        let (mut mem_used, mut mem_total): (BTreeMap<String, f64>, BTreeMap<String, f64>) =
            Default::default();
        for p in points {
            let name = p.name();
            match name {
                "vllm:num_requests_waiting" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.requests_waiting, v)),
                "vllm:num_requests_running" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.requests_running, v)),
                "vllm:kv_cache_usage_perc" | "vllm:gpu_cache_usage_perc" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.kv_cache_usage, v)),
                "vllm:num_preemptions" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut r.m.preemptions, v)),
                "nv_inference_queue_duration_us" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut triton_queue, v)),
                "nv_inference_request_success" => p
                    .increase()
                    .into_iter()
                    .for_each(|v| add(&mut triton_ok, v)),
                "nv_gpu_utilization" => p
                    .inside(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.gpu_util, v)),
                "nv_gpu_memory_used_bytes" | "nv_gpu_memory_total_bytes" => {
                    let gpu = p.series.attr("gpu_uuid").unwrap_or("").to_string();
                    if let Some(v) = p.inside(w) {
                        if name == "nv_gpu_memory_used_bytes" {
                            mem_used.insert(gpu, v);
                        } else {
                            mem_total.insert(gpu, v);
                        }
                    }
                }
                _ => {}
            }
        }
        r.m.queue_time_s = mean(points, "vllm:request_queue_time_seconds");
        r.m.ttft_s = mean(points, "vllm:time_to_first_token_seconds")
            .or_else(|| mean(points, "gen_ai.server.time_to_first_token"))
            .or_else(|| mean(points, "gen_ai_server_time_to_first_token_seconds"));
        r.m.request_duration_s = mean(points, "gen_ai.server.request.duration")
            .or_else(|| mean(points, "gen_ai_server_request_duration_seconds"));
        if let (Some(q), Some(n)) = (triton_queue, triton_ok) {
            if n > 0.0 {
                r.m.queue_ms_per_request = Some(q / n / 1000.0);
            }
        }
        for (gpu, used) in &mem_used {
            if let Some(total) = mem_total.get(gpu).filter(|t| **t > 0.0) {
                maxed(&mut r.m.gpu_mem_used, used / total);
            }
        }
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r(
                "inference_queue",
                &INFERENCE_QUEUEING,
                r#"
SELECT s.trace_id, 0.8 AS confidence,
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
SELECT s.trace_id, 0.8 AS confidence,
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
                &KV_CACHE_PRESSURE,
                r#"
SELECT s.trace_id, 0.8 AS confidence,
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
        ]
    }
}

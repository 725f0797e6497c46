//! The LLM inference family: vLLM's queue, running requests, KV cache and
//! preemptions; the OpenTelemetry GenAI server metrics (time to first
//! token, request duration; pushed over OTLP or scraped); NVIDIA Triton's
//! queue time per request and GPU use; llama.cpp's `llama-server`
//! (`--metrics`): its deferred and processing requests, and from its
//! counters the time per prompt token and per generated token and the share
//! of prompt tokens its cache served, over the span. llama.cpp writes no
//! spans: a call's wait, prefill and decode are read from the client's
//! GenAI span (its input, cached and output tokens, its time to first
//! chunk when the instrumentation writes it) against those rates.

use std::collections::BTreeMap;

use super::redis::CACHE_MISS_FALLBACK;
use super::{add, bracket, increase, maxed, mean, DepRow, Family, Points, Window};
use crate::correlate::model::cause::{self, Cause, LONG_PROMPT};
use crate::correlate::model::table::{Column, V};
use crate::correlate::model::Rule;

/// Requests waited in the inference server's queue.
pub static INFERENCE_QUEUEING: Cause = Cause::new("inference_queueing", cause::dependency);

/// The server's KV cache was full: requests were preempted or waited.
pub static KV_CACHE_PRESSURE: Cause = Cause::new("kv_cache_pressure", cause::dependency);

/// A call to llama.cpp with its parts estimated. Its output tokens at the
/// server's ms per generated token are its decode; the rest of its time
/// (its time to first chunk when the client measured it) came before its
/// first token. When the server ran one request at a time around it, none
/// waited for a slot: that time was its prefill, of no more prompt tokens
/// than the server processed between the scrapes around it nor than that
/// time could prefill at the fastest rate the server showed meanwhile (a
/// quick call next to a neighbour's long prefill recomputed little). When
/// it ran requests side by side or deferred some (many alike around it),
/// its uncached tokens are its input less the server's cached share, at
/// the server's ms per prompt token its prefill, and what is left a wait
/// for a slot. A client's `cache_read_tokens` says the uncached tokens.
const LLAMA_CALLS: &str = r#"
SELECT u.*, u.before_ms - u.prefill_ms AS wait_ms
FROM (
  SELECT e.*,
    CASE WHEN e.side_by_side THEN least(e.raw_uncached * e.prompt_ms_per_token, e.before_ms) ELSE e.before_ms END AS prefill_ms,
    CASE WHEN e.side_by_side OR e.cache_read_tokens IS NOT NULL THEN e.raw_uncached
         ELSE CAST(least(e.raw_uncached, floor(e.before_ms / coalesce(e.prompt_ms_per_token_min, e.prompt_ms_per_token))) AS BIGINT) END AS uncached
  FROM (
    SELECT c.*,
      CASE WHEN c.cache_read_tokens IS NOT NULL THEN greatest(c.input_tokens - c.cache_read_tokens, 0)
           WHEN c.side_by_side THEN CAST(round(c.input_tokens * (1.0 - coalesce(c.prompt_cached_ratio, 0.0))) AS BIGINT)
           ELSE least(c.input_tokens, CAST(round(coalesce(c.prompt_tokens_processed, c.input_tokens)) AS BIGINT)) END AS raw_uncached
    FROM (
      SELECT s.trace_id, s.span_id, s.service, s.gen_ai_model, s.duration_ms, s.path_ms, s.input_tokens, s.prompt_baseline,
        s.cache_read_tokens, coalesce(s.output_tokens, 0) AS output_tokens, s.gen_ai_ttft_ms AS ttft_ms, r.address,
        CASE WHEN r.job = '' THEN r.address ELSE r.job END AS server, r.requests_waiting, r.requests_running,
        r.prompt_ms_per_token, r.prompt_ms_per_token_min, r.decode_ms_per_token, r.prompt_cached_ratio, r.prompt_tokens_processed,
        coalesce(s.output_tokens, 0) * r.decode_ms_per_token AS decode_ms,
        coalesce(s.gen_ai_ttft_ms, greatest(s.duration_ms - coalesce(s.output_tokens, 0) * r.decode_ms_per_token, 0)) AS before_ms,
        coalesce(r.requests_running, 0) >= 2 OR coalesce(r.requests_waiting, 0) > 0 AS side_by_side
      FROM dependency r JOIN spans s ON s.trace_id = r.trace_id AND s.span_id = r.span_id
      WHERE r.system = 'llamacpp' AND s.input_tokens IS NOT NULL
        AND r.prompt_ms_per_token > 0 AND r.decode_ms_per_token IS NOT NULL
    ) c
  ) e
) u"#;

/// Where a llama.cpp call's time went, with the numbers: wait, prefill
/// (uncached of all prompt tokens), decode (tokens, ms each).
const LLAMA_PARTS: &str = r#"concat(
  CASE WHEN ttft_ms IS NULL THEN '' ELSE concat('first token after ', CAST(CAST(round(ttft_ms) AS BIGINT) AS VARCHAR), ' ms; ') END,
  'waited ~', CAST(CAST(round(greatest(wait_ms, 0)) AS BIGINT) AS VARCHAR), ' ms, prefill ~', CAST(CAST(round(prefill_ms) AS BIGINT) AS VARCHAR),
  ' ms (~', CAST(uncached AS VARCHAR), ' of ', CAST(input_tokens AS VARCHAR), ' prompt tokens not cached), decode ~',
  CAST(CAST(round(decode_ms) AS BIGINT) AS VARCHAR), ' ms (', CAST(output_tokens AS VARCHAR), ' tokens, ',
  CAST(round(decode_ms_per_token * 100) / 100 AS VARCHAR), ' ms each)')"#;

/// The numbers behind a llama.cpp verdict, for `rca.evidence`.
const LLAMA_EVIDENCE: &str = r#"concat('wait_ms=', CAST(round(wait_ms) AS VARCHAR), ' prefill_ms=', CAST(round(prefill_ms) AS VARCHAR),
  ' decode_ms=', CAST(round(decode_ms) AS VARCHAR), ' input_tokens=', CAST(input_tokens AS VARCHAR),
  ' uncached_tokens=', CAST(uncached AS VARCHAR), ' output_tokens=', CAST(output_tokens AS VARCHAR),
  ' prompt_ms_per_token=', CAST(prompt_ms_per_token AS VARCHAR), ' decode_ms_per_token=', CAST(decode_ms_per_token AS VARCHAR),
  ' prompt_cached_ratio=', coalesce(CAST(prompt_cached_ratio AS VARCHAR), ''),
  ' requests_deferred=', coalesce(CAST(requests_waiting AS VARCHAR), ''), ' server=', server)"#;

/// A prompt long against the model's usual (or over 8K tokens before the
/// usual is known).
const LONG: &str = "((prompt_baseline IS NOT NULL AND input_tokens >= 4 * prompt_baseline) OR (prompt_baseline IS NULL AND input_tokens > 8192))";

/// vLLM, Triton, llama.cpp and the GenAI server metrics.
#[derive(Debug, Default)]
pub struct Llm;

/// An inference server's measurements.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct LlmRow {
    /// `vllm:num_requests_waiting`, llama.cpp's `llamacpp:requests_deferred`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requests_waiting: Option<f64>,
    /// `vllm:num_requests_running`, llama.cpp's `llamacpp:requests_processing`.
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
    /// llama.cpp: ms per prompt token it processed (not cached) over the
    /// window (`llamacpp:prompt_seconds_total ÷ prompt_tokens_total`);
    /// the server's lifetime mean when it processed none meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_ms_per_token: Option<f64>,
    /// llama.cpp: the fastest ms per prompt token between any two scrapes
    /// around the span (prefill per token varies with the context: a long
    /// prompt's tokens cost more).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_ms_per_token_min: Option<f64>,
    /// llama.cpp: ms per generated token over the window
    /// (`llamacpp:tokens_predicted_seconds_total ÷ tokens_predicted_total`;
    /// the lifetime mean likewise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_ms_per_token: Option<f64>,
    /// llama.cpp: the share of prompt tokens its cache served over the window
    /// (`prompt_tokens_cached_total` of it and `prompt_tokens_total`), 0..1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_cached_ratio: Option<f64>,
    /// llama.cpp: the prompt tokens it processed (not cached) between the
    /// scrapes around the span (`llamacpp:prompt_tokens_total`): at most
    /// this many of the span's own prompt were not cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_processed: Option<f64>,
}

/// The columns LlmRow adds to the `dependency` and `dependencies` tables.
static LLM: &[Column<LlmRow>] = &[
    Column::<LlmRow>::float("requests_waiting", |r, _| V::F(r.requests_waiting))
    .doc("`vllm:num_requests_waiting`, llama.cpp's `llamacpp:requests_deferred`."),
    Column::<LlmRow>::float("requests_running", |r, _| V::F(r.requests_running))
    .doc("`vllm:num_requests_running`, llama.cpp's `llamacpp:requests_processing`."),
    Column::<LlmRow>::float("kv_cache_usage", |r, _| V::F(r.kv_cache_usage))
    .doc("`vllm:kv_cache_usage_perc` (or the older `gpu_cache_usage_perc`), 0..1."),
    Column::<LlmRow>::float("preemptions", |r, _| V::F(r.preemptions))
    .doc("`vllm:num_preemptions_total` (increase)."),
    Column::<LlmRow>::float("queue_time_s", |r, _| V::F(r.queue_time_s))
    .doc("`vllm:request_queue_time_seconds`: the mean over the interval (s)."),
    Column::<LlmRow>::float("ttft_s", |r, _| V::F(r.ttft_s))
    .doc("`vllm:time_to_first_token_seconds` (or the GenAI convention's `gen_ai.server.time_to_first_token`): the mean over the interval (s)."),
    Column::<LlmRow>::float("request_duration_s", |r, _| V::F(r.request_duration_s))
    .doc("`gen_ai.server.request.duration`: the mean over the interval (s)."),
    Column::<LlmRow>::float("queue_ms_per_request", |r, _| V::F(r.queue_ms_per_request))
    .doc("Triton: queue µs ÷ successful requests over the interval, in ms."),
    Column::<LlmRow>::float("gpu_util", |r, _| V::F(r.gpu_util))
    .doc("Triton `nv_gpu_utilization` (0..1): the largest."),
    Column::<LlmRow>::float("gpu_mem_used", |r, _| V::F(r.gpu_mem_used))
    .doc("Triton `nv_gpu_memory_used_bytes ÷ nv_gpu_memory_total_bytes`: the largest."),
    Column::<LlmRow>::float("prompt_ms_per_token", |r, _| V::F(r.prompt_ms_per_token))
    .doc("llama.cpp: ms per prompt token it processed (not cached) over the window (`llamacpp:prompt_seconds_total ÷ prompt_tokens_total`); the server's lifetime mean when it processed none meanwhile."),
    Column::<LlmRow>::float("prompt_ms_per_token_min", |r, _| {
        V::F(r.prompt_ms_per_token_min)
    })
    .doc("llama.cpp: the fastest ms per prompt token between any two scrapes around the span (prefill per token varies with the context: a long prompt's tokens cost more)."),
    Column::<LlmRow>::float("decode_ms_per_token", |r, _| V::F(r.decode_ms_per_token))
    .doc("llama.cpp: ms per generated token over the window (`llamacpp:tokens_predicted_seconds_total ÷ tokens_predicted_total`; the lifetime mean likewise)."),
    Column::<LlmRow>::float("prompt_cached_ratio", |r, _| V::F(r.prompt_cached_ratio))
    .doc("llama.cpp: the share of prompt tokens its cache served over the window (`prompt_tokens_cached_total` of it and `prompt_tokens_total`), 0..1."),
    Column::<LlmRow>::float("prompt_tokens_processed", |r, _| {
        V::F(r.prompt_tokens_processed)
    })
    .doc("llama.cpp: the prompt tokens it processed (not cached) between the scrapes around the span (`llamacpp:prompt_tokens_total`): at most this many of the span's own prompt were not cached."),
];

/// One llama.cpp counter around a span.
#[derive(Default)]
struct Counter {
    /// Its increase between the scrapes around the span.
    increase: Option<f64>,
    /// Its latest value (the server's lifetime total).
    latest: Option<f64>,
    /// Its points over the widened window.
    points: Vec<(u64, f64)>,
}

/// The fastest ms per unit of `time` over `count` between two consecutive
/// scrapes that both have (a counter reset skipped).
fn fastest(time: &[(u64, f64)], count: &[(u64, f64)]) -> Option<f64> {
    let at = |pts: &[(u64, f64)], t: u64| pts.iter().find(|p| p.0 == t).map(|p| p.1);
    time.windows(2)
        .filter_map(|w| {
            let (dt, dn) = (w[1].1 - w[0].1, at(count, w[1].0)? - at(count, w[0].0)?);
            (dt >= 0.0 && dn > 0.0).then(|| dt * 1000.0 / dn)
        })
        .reduce(f64::min)
}

/// llama.cpp's rates from its counters: over the window where it did work
/// of that kind meanwhile, else its lifetime means (the latest values).
fn llama_rates(m: &mut LlmRow, c: &BTreeMap<&str, Counter>) {
    let get = |k: &str| c.get(k).map_or((None, None), |x| (x.increase, x.latest));
    let per = |time: &str, count: &str| {
        let ((dt, t), (dn, n)) = (get(time), get(count));
        match (dt, dn) {
            (Some(dt), Some(dn)) if dn > 0.0 => Some(dt * 1000.0 / dn),
            _ => match (t, n) {
                (Some(t), Some(n)) if n > 0.0 => Some(t * 1000.0 / n),
                _ => None,
            },
        }
    };
    m.prompt_ms_per_token = per("llamacpp:prompt_seconds", "llamacpp:prompt_tokens");
    if let (Some(t), Some(n)) = (
        c.get("llamacpp:prompt_seconds"),
        c.get("llamacpp:prompt_tokens"),
    ) {
        m.prompt_ms_per_token_min = fastest(&t.points, &n.points);
    }
    m.decode_ms_per_token = per(
        "llamacpp:tokens_predicted_seconds",
        "llamacpp:tokens_predicted",
    );
    m.prompt_tokens_processed = get("llamacpp:prompt_tokens").0;
    if let (Some(cached), Some(done)) = (
        get("llamacpp:prompt_tokens_cached").0,
        get("llamacpp:prompt_tokens").0,
    ) {
        if cached + done > 0.0 {
            m.prompt_cached_ratio = Some(cached / (cached + done));
        }
    }
}

/// The `inference_queue` rule.
const INFERENCE_QUEUE_SQL: &str = r#"
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
GROUP BY s.trace_id"#;

/// The `kv_cache` rule.
const KV_CACHE_SQL: &str = r#"
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
GROUP BY s.trace_id"#;

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
            "llamacpp:prompt_tokens"
            | "llamacpp:prompt_tokens_cached"
            | "llamacpp:prompt_seconds"
            | "llamacpp:tokens_predicted"
            | "llamacpp:tokens_predicted_seconds"
            | "llamacpp:requests_processing"
            | "llamacpp:requests_deferred" => "llamacpp",
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
        // llama.cpp's counters, by base name.
        let mut llama: BTreeMap<&str, Counter> = BTreeMap::new();
        let (mut mem_used, mut mem_total): (BTreeMap<String, f64>, BTreeMap<String, f64>) =
            Default::default();
        for p in points {
            let name = p.name();
            match name {
                "llamacpp:prompt_tokens"
                | "llamacpp:prompt_tokens_cached"
                | "llamacpp:prompt_seconds"
                | "llamacpp:tokens_predicted"
                | "llamacpp:tokens_predicted_seconds" => {
                    // Between the scrapes around the span itself, not the
                    // widened window: the fewest other requests.
                    let e = llama.entry(name).or_default();
                    if let Some(v) = increase(&bracket(p.series, w.start, w.end)) {
                        add(&mut e.increase, v);
                    }
                    if let Some(&(_, v)) = p.pts.last() {
                        e.latest = Some(v);
                    }
                    e.points.clone_from(&p.pts);
                }
                // Over the call itself: a burst that began as it ended
                // did not wait beside it.
                "vllm:num_requests_waiting" | "llamacpp:requests_deferred" => p
                    .during(w)
                    .into_iter()
                    .for_each(|v| maxed(&mut r.m.requests_waiting, v)),
                "vllm:num_requests_running" | "llamacpp:requests_processing" => p
                    .during(w)
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
        if !llama.is_empty() {
            llama_rates(&mut r.m, &llama);
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
            r("inference_queue", &INFERENCE_QUEUEING, INFERENCE_QUEUE_SQL),
            r("kv_cache", &KV_CACHE_PRESSURE, KV_CACHE_SQL),
            r(
                "llama_slot_wait",
                &INFERENCE_QUEUEING,
                &format!(
                    r#"
SELECT trace_id, 0.8 AS confidence,
  first_value(concat(coalesce(gen_ai_model, service), ' request to llama.cpp ', server, ' waited ~', CAST(CAST(round(wait_ms) AS BIGINT) AS VARCHAR),
         ' ms of ', CAST(CAST(round(duration_ms) AS BIGINT) AS VARCHAR), ' ms for a slot',
         CASE WHEN requests_waiting > 0 THEN concat(' (llamacpp:requests_deferred ', CAST(CAST(requests_waiting AS BIGINT) AS VARCHAR),
                                                   ', requests_processing ', coalesce(CAST(CAST(requests_running AS BIGINT) AS VARCHAR), '?'), ')')
              ELSE '' END, ': ', {LLAMA_PARTS}) ORDER BY wait_ms DESC) AS summary,
  first_value({LLAMA_EVIDENCE} ORDER BY wait_ms DESC) AS evidence,
  first_value(span_id ORDER BY wait_ms DESC) AS culprit_span_id,
  first_value(server ORDER BY wait_ms DESC) AS culprit_service,
  max(wait_ms) AS explained_ms
FROM ({LLAMA_CALLS}) c
WHERE wait_ms >= 100 AND wait_ms >= 0.3 * duration_ms
GROUP BY trace_id"#
                ),
            ),
            r(
                "llama_long_prompt",
                &LONG_PROMPT,
                &format!(
                    r#"
SELECT trace_id, 1.0 AS confidence,
  first_value(concat('a prompt of ', CAST(input_tokens AS VARCHAR), ' tokens to ', coalesce(gen_ai_model, server),
         CASE WHEN prompt_baseline IS NULL THEN ' (over 8192)'
              ELSE concat(' (', CAST(CAST(input_tokens / prompt_baseline AS BIGINT) AS VARCHAR), 'x its usual ',
                          CAST(CAST(prompt_baseline AS BIGINT) AS VARCHAR), ')') END,
         ': prefill took ~', CAST(CAST(round(prefill_ms) AS BIGINT) AS VARCHAR), ' ms of ', CAST(CAST(round(duration_ms) AS BIGINT) AS VARCHAR),
         ' ms on llama.cpp ', server, ' (', {LLAMA_PARTS}, ')') ORDER BY prefill_ms DESC) AS summary,
  first_value({LLAMA_EVIDENCE} ORDER BY prefill_ms DESC) AS evidence,
  first_value(span_id ORDER BY prefill_ms DESC) AS culprit_span_id,
  max(prefill_ms) AS explained_ms
FROM ({LLAMA_CALLS}) c
WHERE prefill_ms >= 100 AND prefill_ms >= 0.5 * duration_ms AND {LONG}
GROUP BY trace_id"#
                ),
            ),
            r(
                "llama_prompt_cache_miss",
                &CACHE_MISS_FALLBACK,
                &format!(
                    r#"
SELECT trace_id, 0.8 AS confidence,
  first_value(concat('the prompt cache of llama.cpp ', server, ' served ', CAST(input_tokens - uncached AS VARCHAR), ' of ', CAST(input_tokens AS VARCHAR),
         ' prompt tokens', CASE WHEN prompt_cached_ratio IS NULL THEN ''
              ELSE concat(' (', CAST(CAST(round(prompt_cached_ratio * 100) AS BIGINT) AS VARCHAR),
                          '% of all prompt tokens meanwhile, llamacpp:prompt_tokens_cached_total)') END,
         ': the prefill recomputed them in ~', CAST(CAST(round(prefill_ms) AS BIGINT) AS VARCHAR), ' ms of ',
         CAST(CAST(round(duration_ms) AS BIGINT) AS VARCHAR), ' ms (', {LLAMA_PARTS}, ')') ORDER BY prefill_ms DESC) AS summary,
  first_value({LLAMA_EVIDENCE} ORDER BY prefill_ms DESC) AS evidence,
  first_value(span_id ORDER BY prefill_ms DESC) AS culprit_span_id,
  first_value(server ORDER BY prefill_ms DESC) AS culprit_service,
  max(prefill_ms) AS explained_ms
FROM ({LLAMA_CALLS}) c
WHERE prefill_ms >= 100 AND prefill_ms >= 0.5 * duration_ms AND uncached >= 0.5 * input_tokens AND NOT {LONG}
GROUP BY trace_id"#
                ),
            ),
        ]
    }
}

//! LLM-serving causes from the inference servers' own metrics and spans.
//!
//! No GPU or inference server runs on these machines, so the servers here
//! serve exposition text shaped exactly as their sources write it, and the
//! spans are shaped as vLLM's tracing writes them; the daemon scrapes the
//! servers with the `prometheus` receiver and receives the spans over OTLP
//! from the OpenTelemetry SDK, as in production:
//! - vLLM v0.11.0: `vllm/v1/metrics/loggers.py` (gauges
//!   `vllm:num_requests_running|waiting`, `vllm:kv_cache_usage_perc`, counter
//!   `vllm:num_preemptions` written by prometheus_client as `_total` with
//!   `_created`, histogram `vllm:request_queue_time_seconds`; labels
//!   `model_name`, `engine`) and `vllm/tracing.py` `SpanAttributes` (one
//!   `llm_request` SERVER span with `gen_ai.latency.time_in_queue`,
//!   `time_to_first_token`, `time_in_model_prefill`, `time_in_model_decode`
//!   in float seconds and `gen_ai.usage.prompt_tokens|completion_tokens`);
//! - Triton r24.08: `docs/user_guide/metrics.md` (`nv_inference_request_success`,
//!   `nv_inference_queue_duration_us` counters without `_total`;
//!   `nv_gpu_utilization` 0..1, `nv_gpu_memory_used|total_bytes`);
//! - dcgm-exporter 3.3.5: `etc/default-counters.csv` (`DCGM_FI_DEV_GPU_UTIL` %,
//!   `DCGM_FI_DEV_FB_USED|FREE` MiB; labels `gpu`, `UUID`, `device`,
//!   `modelName`, `Hostname`);
//! - GenAI semantic conventions: the caller's CLIENT span `chat {model}` with
//!   `gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`,
//!   `server.address`, `server.port`.
//!
//! Each cause must fire on its evidence and stay silent on healthy values.
#![allow(clippy::unwrap_used)]

mod common;

use axum::routing::get;
use causeway_scenarios::send::read_annotated;
use common::*;
use opentelemetry::trace::{
    Span as _, SpanKind, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// vLLM's `/metrics`: waiting, running, KV usage; preemptions grow by
/// `preempt_step` per scrape; queue time observations as given.
fn vllm_text(waiting: f64, running: f64, kv: f64, preemptions: u64, queue_s: (u64, f64)) -> String {
    let l = format!("engine=\"0\",model_name=\"{MODEL}\"");
    format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{{{l}}} {running}\n\
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
# TYPE vllm:num_requests_waiting gauge\n\
vllm:num_requests_waiting{{{l}}} {waiting}\n\
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
# TYPE vllm:kv_cache_usage_perc gauge\n\
vllm:kv_cache_usage_perc{{{l}}} {kv}\n\
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.\n\
# TYPE vllm:num_preemptions_total counter\n\
vllm:num_preemptions_total{{{l}}} {preemptions}.0\n\
# HELP vllm:num_preemptions_created Cumulative number of preemption from the engine.\n\
# TYPE vllm:num_preemptions_created gauge\n\
vllm:num_preemptions_created{{{l}}} 1.7640e+09\n\
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.\n\
# TYPE vllm:request_queue_time_seconds histogram\n\
vllm:request_queue_time_seconds_bucket{{{l},le=\"0.3\"}} 0.0\n\
vllm:request_queue_time_seconds_bucket{{{l},le=\"5.0\"}} {n}.0\n\
vllm:request_queue_time_seconds_bucket{{{l},le=\"+Inf\"}} {n}.0\n\
vllm:request_queue_time_seconds_count{{{l}}} {n}.0\n\
vllm:request_queue_time_seconds_sum{{{l}}} {sum}\n",
        n = queue_s.0,
        sum = queue_s.1,
    )
}

fn triton_text(success: u64, queue_us: u64) -> String {
    format!(
        "# HELP nv_inference_request_success Number of successful inference requests, all batch sizes\n\
# TYPE nv_inference_request_success counter\n\
nv_inference_request_success{{model=\"bert-rerank\",version=\"1\"}} {success}\n\
# HELP nv_inference_queue_duration_us Cumulative inference queuing duration in microseconds (includes cached requests)\n\
# TYPE nv_inference_queue_duration_us counter\n\
nv_inference_queue_duration_us{{model=\"bert-rerank\",version=\"1\"}} {queue_us}\n\
# HELP nv_gpu_utilization GPU utilization rate [0.0 - 1.0)\n\
# TYPE nv_gpu_utilization gauge\n\
nv_gpu_utilization{{gpu_uuid=\"GPU-7f1c2e0a-58a4-4b8e-9c3d-2a1f0e6b9d11\"}} 0.42\n\
# HELP nv_gpu_memory_total_bytes GPU total memory, in bytes\n\
# TYPE nv_gpu_memory_total_bytes gauge\n\
nv_gpu_memory_total_bytes{{gpu_uuid=\"GPU-7f1c2e0a-58a4-4b8e-9c3d-2a1f0e6b9d11\"}} 85899345920\n\
# HELP nv_gpu_memory_used_bytes GPU used memory, in bytes\n\
# TYPE nv_gpu_memory_used_bytes gauge\n\
nv_gpu_memory_used_bytes{{gpu_uuid=\"GPU-7f1c2e0a-58a4-4b8e-9c3d-2a1f0e6b9d11\"}} 34359738368\n"
    )
}

fn dcgm_text(host: &str, util: u32, fb_used: u32, fb_free: u32) -> String {
    let l = format!(
        "gpu=\"0\",UUID=\"GPU-0b5e4a7c-{host}\",device=\"nvidia0\",modelName=\"NVIDIA A100-SXM4-80GB\",Hostname=\"{host}\",DCGM_FI_DRIVER_VERSION=\"535.161.08\""
    );
    format!(
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n\
# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n\
DCGM_FI_DEV_GPU_UTIL{{{l}}} {util}\n\
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).\n\
# TYPE DCGM_FI_DEV_FB_FREE gauge\n\
DCGM_FI_DEV_FB_FREE{{{l}}} {fb_free}\n\
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n\
# TYPE DCGM_FI_DEV_FB_USED gauge\n\
DCGM_FI_DEV_FB_USED{{{l}}} {fb_used}\n"
    )
}

/// An exposition server whose body is computed per scrape (`n` = scrapes so far).
fn exposition(body: impl Fn(u64) -> String + Send + Sync + 'static) -> String {
    let n = Arc::new(AtomicU64::new(0));
    let body = Arc::new(body);
    let app = axum::Router::new().route(
        "/metrics",
        get(move || {
            let i = n.fetch_add(1, Ordering::SeqCst);
            let b = body(i);
            async move {
                (
                    [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
                    b,
                )
            }
        }),
    );
    serve_in_thread(app)
        .trim_start_matches("http://")
        .to_string()
}

fn provider(otlp: &str, service: &str, host: &str) -> SdkTracerProvider {
    causeway_core::tls::install_crypto_provider();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(format!("http://{otlp}/v1/traces"))
        .build()
        .unwrap();
    SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .with_resource(
            Resource::builder_empty()
                .with_attributes([
                    KeyValue::new("service.name", service.to_string()),
                    KeyValue::new("host.name", host.to_string()),
                ])
                .build(),
        )
        .build()
}

struct Llm {
    queue_s: f64,
    prefill_s: f64,
    decode_s: f64,
    prompt_tokens: i64,
}

/// The assistant calls an inference server at `port`: its `chat` CLIENT
/// span and, below it, vLLM's `llm_request` SERVER span (when `llm`).
/// Ends now; returns the trace id.
fn chat(
    app: &SdkTracer,
    server: Option<&SdkTracer>,
    port: u16,
    total_ms: u64,
    llm: Option<Llm>,
) -> String {
    let end = SystemTime::now();
    let start = end - Duration::from_millis(total_ms);
    let mut root = app
        .span_builder("POST /v1/assist")
        .with_kind(SpanKind::Server)
        .with_start_time(start)
        .with_attributes(vec![KeyValue::new("http.route", "/v1/assist")])
        .start(app);
    let cx = Context::current().with_remote_span_context(root.span_context().clone());
    let mut client = app
        .span_builder(format!("chat {MODEL}"))
        .with_kind(SpanKind::Client)
        .with_start_time(start + Duration::from_millis(2))
        .with_attributes(vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", "openai"),
            KeyValue::new("gen_ai.request.model", MODEL),
            KeyValue::new("server.address", "127.0.0.1"),
            KeyValue::new("server.port", i64::from(port)),
        ])
        .start_with_context(app, &cx);
    if let (Some(server), Some(l)) = (server, &llm) {
        let cx = Context::current().with_remote_span_context(client.span_context().clone());
        let s_start = start + Duration::from_millis(4);
        let e2e = l.queue_s + l.prefill_s + l.decode_s;
        let mut s = server
            .span_builder("llm_request")
            .with_kind(SpanKind::Server)
            .with_start_time(s_start)
            .with_attributes(vec![
                KeyValue::new("gen_ai.response.model", MODEL),
                KeyValue::new("gen_ai.request.id", "cmpl-5c3a"),
                KeyValue::new("gen_ai.request.max_tokens", 1024),
                KeyValue::new("gen_ai.usage.prompt_tokens", l.prompt_tokens),
                KeyValue::new("gen_ai.usage.completion_tokens", 380),
                KeyValue::new("gen_ai.latency.time_in_queue", l.queue_s),
                KeyValue::new(
                    "gen_ai.latency.time_to_first_token",
                    l.queue_s + l.prefill_s,
                ),
                KeyValue::new("gen_ai.latency.time_in_model_prefill", l.prefill_s),
                KeyValue::new("gen_ai.latency.time_in_model_decode", l.decode_s),
                KeyValue::new(
                    "gen_ai.latency.time_in_model_inference",
                    l.prefill_s + l.decode_s,
                ),
                KeyValue::new("gen_ai.latency.e2e", e2e),
            ])
            .start_with_context(server, &cx);
        s.end_with_timestamp(s_start + Duration::from_secs_f64(e2e));
    }
    client.set_attribute(KeyValue::new(
        "gen_ai.usage.input_tokens",
        llm.as_ref().map_or(600, |l| l.prompt_tokens),
    ));
    client.end_with_timestamp(end - Duration::from_millis(2));
    let id = root.span_context().trace_id().to_string();
    root.end_with_timestamp(end);
    id
}

/// A request whose `tokenize` step ran on `host` before the model call.
fn tokenized(app: &SdkTracer) -> String {
    let end = SystemTime::now();
    let start = end - Duration::from_millis(2600);
    let mut root = app
        .span_builder("POST /v1/embed")
        .with_kind(SpanKind::Server)
        .with_start_time(start)
        .start(app);
    let cx = Context::current().with_remote_span_context(root.span_context().clone());
    let mut t = app
        .span_builder("tokenize")
        .with_kind(SpanKind::Internal)
        .with_start_time(start + Duration::from_millis(5))
        .start_with_context(app, &cx);
    t.end_with_timestamp(start + Duration::from_millis(2205));
    let mut c = app
        .span_builder("embeddings bge-large")
        .with_kind(SpanKind::Client)
        .with_start_time(start + Duration::from_millis(2210))
        .with_attributes(vec![KeyValue::new("gen_ai.operation.name", "embeddings")])
        .start_with_context(app, &cx);
    c.end_with_timestamp(end - Duration::from_millis(5));
    let id = root.span_context().trace_id().to_string();
    root.end_with_timestamp(end);
    id
}

/// hostmetrics' `system.cpu.utilization{state}` for `host` (idle share), now.
fn cpu(otlp: &str, host: &str, idle: f64) {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let point = |state: &str, v: f64| {
        serde_json::json!({"timeUnixNano": now.to_string(), "asDouble": v,
            "attributes": [{"key": "state", "value": {"stringValue": state}}]})
    };
    let body = serde_json::json!({"resourceMetrics": [{
        "resource": {"attributes": [{"key": "host.name", "value": {"stringValue": host}}]},
        "scopeMetrics": [{"scope": {"name": "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/hostmetricsreceiver/internal/scraper/cpuscraper"},
            "metrics": [{"name": "system.cpu.utilization", "unit": "1",
                "gauge": {"dataPoints": [point("idle", idle), point("user", 1.0 - idle)]}}]}]}]});
    post_metrics(otlp, &body);
}

/// The GenAI semantic conventions' server histograms, as an inference
/// server's OpenTelemetry SDK pushes them (cumulative; `server.address` and
/// `server.port` on the points): `gen_ai.server.time_to_first_token` and
/// `gen_ai.server.request.duration`, `ago_ms` before now.
fn genai_metrics(otlp: &str, port: u16, ago_ms: u64, ttft: (u64, f64), duration: (u64, f64)) {
    let t = (SystemTime::now() - Duration::from_millis(ago_ms))
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let hist = |name: &str, (count, sum): (u64, f64)| {
        serde_json::json!({"name": name, "unit": "s", "histogram": {"aggregationTemporality": 2,
            "dataPoints": [{"startTimeUnixNano": "1764650000000000000", "timeUnixNano": t.to_string(),
                "count": count.to_string(), "sum": sum, "bucketCounts": ["0", count.to_string()], "explicitBounds": [0.01],
                "attributes": [
                    {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
                    {"key": "gen_ai.provider.name", "value": {"stringValue": "huggingface"}},
                    {"key": "gen_ai.request.model", "value": {"stringValue": MODEL}},
                    {"key": "server.address", "value": {"stringValue": "127.0.0.1"}},
                    {"key": "server.port", "value": {"intValue": port.to_string()}}]}]}})
    };
    let body = serde_json::json!({"resourceMetrics": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "tgi"}}]},
        "scopeMetrics": [{"scope": {"name": "tgi"}, "metrics": [
            hist("gen_ai.server.time_to_first_token", ttft),
            hist("gen_ai.server.request.duration", duration)]}]}]});
    post_metrics(otlp, &body);
}

/// OTLP/JSON metrics posted to the daemon's OTLP/HTTP receiver at `otlp`.
fn post_metrics(otlp: &str, body: &serde_json::Value) {
    let r = http_client()
        .post(format!("http://{otlp}/v1/metrics"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

#[test]
fn inference_server_causes_fire_on_their_evidence_and_stay_silent_on_healthy_values() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // vLLM A: a long queue. vLLM B: KV cache full, preempting. vLLM C: healthy.
    let vllm_a = exposition(|i| vllm_text(14.0, 8.0, 0.41, 3, (40 + i, 90.0 + 2.2 * i as f64)));
    let vllm_b =
        exposition(|i| vllm_text(0.0, 6.0, 0.98, 10 + 2 * i, (40 + i, 2.0 + 0.01 * i as f64)));
    let vllm_c = exposition(|i| vllm_text(0.0, 3.0, 0.31, 2, (40 + i, 2.0 + 0.01 * i as f64)));
    // Triton: every request queued 1.5 s; a healthy Triton: 2 ms.
    let triton = exposition(|i| triton_text(100 + i, 150_000_000 + 1_500_000 * i));
    let triton_ok = exposition(|i| triton_text(100 + i, 200_000 + 2_000 * i));
    // DCGM on the three GPU nodes: healthy, saturated, out of memory.
    let dcgm1 = exposition(|_| dcgm_text("gpu-node-1", 35, 30_000, 51_000));
    let dcgm2 = exposition(|_| dcgm_text("gpu-node-2", 99, 30_000, 51_000));
    let dcgm3 = exposition(|_| dcgm_text("gpu-node-3", 61, 80_500, 500));
    let otlp = format!("127.0.0.1:{}", free_port());
    let job = |name: &str, target: &str| {
        format!("        - job_name: {name}\n          static_configs: [{{ targets: [\"{target}\"] }}]\n")
    };
    let jobs = [
        job("vllm-a", &vllm_a),
        job("vllm-b", &vllm_b),
        job("vllm-c", &vllm_c),
        job("triton", &triton),
        job("triton-ok", &triton_ok),
        job("dcgm1", &dcgm1),
        job("dcgm2", &dcgm2),
        job("dcgm3", &dcgm3),
    ]
    .concat();
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "{otlp}" }}
  prometheus:
    config:
      global: {{ scrape_interval: 250ms, scrape_timeout: 200ms }}
      scrape_configs:
{jobs}
processors:
  tail_sampling:
    decision_wait: 1500ms
    policies: [{{ name: all, type: always_sample }}]
  correlate:
    dependencies: {{ sample_interval: 1s }}
    baseline: {{ min_samples: 5 }}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  file/metrics: {{ path: "{{dir}}/metrics.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    metrics: {{ receivers: [prometheus, otlp], processors: [correlate], exporters: [file/metrics] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    );
    let _daemon = Daemon::start(d, "llm", &config);
    // Every server scraped a few times before the first request ends.
    wait_for(Duration::from_secs(20), "every job scraped", || {
        let lines = read_jsonl(&d.join("metrics.jsonl"));
        [
            "vllm-a",
            "vllm-b",
            "vllm-c",
            "triton",
            "triton-ok",
            "dcgm1",
            "dcgm2",
            "dcgm3",
        ]
        .iter()
        .all(|j| metrics_of_service(&lines, j).len() >= 3 * 3)
    });
    let port = |a: &str| a.rsplit(':').next().unwrap().parse::<u16>().unwrap();
    let app = provider(&otlp, "assistant", "app-1");
    let gpu = |n: u8| provider(&otlp, "vllm", &format!("gpu-node-{n}"));
    let (g1, g2, g3) = (gpu(1), gpu(2), gpu(3));
    let (at, t1, t2, t3) = (
        app.tracer("assistant"),
        g1.tracer("vllm"),
        g2.tracer("vllm"),
        g3.tracer("vllm"),
    );
    let healthy = || Llm {
        queue_s: 0.01,
        prefill_s: 0.09,
        decode_s: 0.28,
        prompt_tokens: 600,
    };
    let mut want: Vec<(String, &str, Vec<&str>)> = Vec::new(); // trace, cause (or "!" + cause set it must avoid), summary parts
                                                               // Healthy requests first: the model's prompt baseline (min_samples 5).
    let mut healthy_ids = Vec::new();
    for _ in 0..8 {
        healthy_ids.push(chat(&at, Some(&t1), port(&vllm_c), 400, Some(healthy())));
    }
    let path = d.join("traces.jsonl");
    wait_for(
        Duration::from_secs(20),
        "the healthy requests analysed",
        || {
            let a = read_annotated(&path);
            healthy_ids
                .iter()
                .all(|id| a.get(id).is_some_and(|x| x.root.contains_key("rca.cause")))
        },
    );
    // A queue: most of the time before scheduling.
    let id = chat(
        &at,
        Some(&t1),
        port(&vllm_a),
        3000,
        Some(Llm {
            queue_s: 2.3,
            prefill_s: 0.2,
            decode_s: 0.45,
            prompt_tokens: 640,
        }),
    );
    want.push((
        id,
        "inference_queueing",
        vec!["waited 2300 ms", "vllm:num_requests_waiting 14"],
    ));
    // KV cache full and preempting: decode drags.
    let id = chat(
        &at,
        Some(&t1),
        port(&vllm_b),
        3000,
        Some(Llm {
            queue_s: 0.04,
            prefill_s: 0.3,
            decode_s: 2.6,
            prompt_tokens: 610,
        }),
    );
    want.push((
        id,
        "kv_cache_pressure",
        vec!["KV cache 98% full", "requests preempted"],
    ));
    // A prompt 20x the usual, prefill-dominated, on the healthy server.
    let id = chat(
        &at,
        Some(&t1),
        port(&vllm_c),
        3000,
        Some(Llm {
            queue_s: 0.02,
            prefill_s: 2.45,
            decode_s: 0.5,
            prompt_tokens: 12_800,
        }),
    );
    want.push((
        id,
        "long_prompt",
        vec!["12800 tokens", "x its usual", "prefill took 2450 ms"],
    ));
    // Slow decode on a saturated GPU, and on a GPU out of memory (healthy vLLM metrics).
    let slow = || Llm {
        queue_s: 0.02,
        prefill_s: 0.3,
        decode_s: 2.6,
        prompt_tokens: 590,
    };
    let id = chat(&at, Some(&t2), port(&vllm_c), 3000, Some(slow()));
    want.push((id, "gpu_saturation", vec!["gpu-node-2", "99% busy"]));
    let id = chat(&at, Some(&t3), port(&vllm_c), 3000, Some(slow()));
    want.push((id, "gpu_memory_pressure", vec!["gpu-node-3", "99% used"]));
    // Triton queueing, from its counters alone (no server span).
    let id = chat(&at, None, port(&triton), 3000, None);
    want.push((
        id,
        "inference_queueing",
        vec![
            "triton",
            "1500 ms on average",
            "nv_inference_queue_duration_us",
        ],
    ));
    // The same slow call on healthy Triton, and slow decode on the healthy vLLM and GPU: no inference cause.
    let quiet_triton = chat(&at, None, port(&triton_ok), 3000, None);
    let quiet_vllm = chat(&at, Some(&t1), port(&vllm_c), 3000, Some(slow()));
    // A server that pushes the GenAI conventions' metrics, and a call to it:
    // over the call, 10 requests with 25 s of time to first token and 30 s in all.
    let tgi = free_port();
    genai_metrics(&otlp, tgi, 2000, (10, 5.0), (20, 12.0));
    genai_metrics(&otlp, tgi, 500, (20, 30.0), (30, 42.0));
    let tgi_trace = chat(&at, None, tgi, 3000, None);
    // Tokenizing on a busy CPU, and on an idle one.
    let busy = provider(&otlp, "assistant", "cpu-node-3");
    let idle = provider(&otlp, "assistant", "cpu-node-4");
    cpu(&otlp, "cpu-node-3", 0.03);
    cpu(&otlp, "cpu-node-4", 0.71);
    let id = tokenized(&busy.tracer("assistant"));
    want.push((
        id,
        "tokenizer_cpu",
        vec!["2200 ms in tokenize", "cpu-node-3", "97% busy"],
    ));
    let quiet_tokenizer = tokenized(&idle.tracer("assistant"));
    cpu(&otlp, "cpu-node-3", 0.03);
    cpu(&otlp, "cpu-node-4", 0.71);
    for p in [app, g1, g2, g3, busy, idle] {
        p.shutdown().unwrap();
    }

    let quiet = [
        quiet_triton.clone(),
        quiet_vllm.clone(),
        quiet_tokenizer.clone(),
    ];
    wait_for(Duration::from_secs(30), "every trace analysed", || {
        let a = read_annotated(&path);
        want.iter()
            .map(|w| &w.0)
            .chain(quiet.iter())
            .chain(healthy_ids.iter())
            .chain(std::iter::once(&tgi_trace))
            .all(|id| a.get(id).is_some_and(|x| x.root.contains_key("rca.cause")))
    });
    let got = read_annotated(&path);
    for (id, cause, parts) in &want {
        let a = &got[id].root;
        eprintln!("{cause}: {}", a["rca.summary"]);
        assert_eq!(a["rca.cause"], *cause, "{id}: {}", a["rca.summary"]);
        for p in parts {
            assert!(
                a["rca.summary"].contains(p),
                "{cause}: {p:?} not in {:?}",
                a["rca.summary"]
            );
        }
    }
    let llm_causes = [
        "inference_queueing",
        "kv_cache_pressure",
        "long_prompt",
        "gpu_saturation",
        "gpu_memory_pressure",
        "tokenizer_cpu",
    ];
    for id in quiet.iter().chain(healthy_ids.iter()) {
        let a = &got[id].root;
        eprintln!("healthy: {}: {}", a["rca.cause"], a["rca.summary"]);
        assert!(
            !llm_causes.contains(&a["rca.cause"].as_str()),
            "healthy {id} given {}: {}",
            a["rca.cause"],
            a["rca.summary"]
        );
        let alts = a.get("rca.alternatives").cloned().unwrap_or_default();
        assert!(
            !llm_causes.iter().any(|c| alts.contains(c)),
            "healthy {id} has an inference cause among its alternatives: {alts}"
        );
    }
    // The GenAI metrics joined by the server on their points.
    let ev: serde_json::Value =
        serde_json::from_str(&got[&tgi_trace].root["rca.evidence"]).unwrap();
    let dep = ev["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["kind"] == "dependency" && m["system"] == "genai")
        .unwrap_or_else(|| panic!("no GenAI server in {ev}"));
    assert_eq!(dep["ttft_s"], 2.5, "{dep}");
    assert_eq!(dep["request_duration_s"], 3.0, "{dep}");
    assert_eq!(dep["job"], "tgi");
    // The evidence carries the servers' numbers with their times.
    let ev: serde_json::Value =
        serde_json::from_str(&got[&want[0].0].root["rca.evidence"]).unwrap();
    let dep = ev["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["kind"] == "dependency")
        .unwrap_or_else(|| panic!("no dependency in {ev}"));
    assert_eq!(dep["system"], "vllm");
    assert_eq!(dep["job"], "vllm-a");
    assert_eq!(dep["requests_waiting"], 14.0);
    assert!(dep["time_unix_nano"].as_u64().unwrap() > 0);
}

/// Envoy's admin `/stats/prometheus` (v1.31; tag extraction turns
/// `cluster.<name>.` into `envoy_cluster_name`, counters carry no `_total`)
/// for four Istio outbound clusters: `ratings` overflowing its circuit
/// breaker, `payments` failing to connect, `inventory` failing TLS, and
/// `catalog` healthy. `n` = scrapes so far.
fn envoy_text(n: u64) -> String {
    // (pending overflows, connect failures, TLS errors, breaker open) of a cluster.
    type Counts = (u64, u64, u64, u64);
    let clusters = [
        ("ratings", (2 * n, 0, 0, u64::from(n > 0))),
        ("payments", (0, 3 * n, 0, 0)),
        ("inventory", (0, 0, 2 * n, 0)),
        ("catalog", (0, 0, 0, 0)),
    ];
    let mut out = String::new();
    let metric = |out: &mut String, name: &str, kind: &str, v: &dyn Fn(Counts) -> u64| {
        out.push_str(&format!("# TYPE {name} {kind}\n"));
        for (c, x) in clusters {
            out.push_str(&format!(
                "{name}{{envoy_cluster_name=\"outbound|9080||{c}.default.svc.cluster.local\"}} {}\n",
                v(x)
            ));
        }
    };
    metric(
        &mut out,
        "envoy_cluster_upstream_rq_pending_overflow",
        "counter",
        &|x| x.0,
    );
    metric(
        &mut out,
        "envoy_cluster_upstream_cx_overflow",
        "counter",
        &|_| 0,
    );
    metric(
        &mut out,
        "envoy_cluster_upstream_cx_connect_fail",
        "counter",
        &|x| x.1,
    );
    metric(
        &mut out,
        "envoy_cluster_ssl_connection_error",
        "counter",
        &|x| x.2,
    );
    metric(&mut out, "envoy_cluster_ssl_handshake", "counter", &|_| {
        10 * n
    });
    metric(
        &mut out,
        "envoy_cluster_circuit_breakers_default_rq_pending_open",
        "gauge",
        &|x| x.3,
    );
    metric(
        &mut out,
        "envoy_cluster_upstream_rq_timeout",
        "counter",
        &|_| 0,
    );
    out.push_str("# TYPE envoy_cluster_upstream_cx_connect_ms histogram\n");
    for (c, _) in clusters {
        let l = format!("envoy_cluster_name=\"outbound|9080||{c}.default.svc.cluster.local\"");
        out.push_str(&format!(
            "envoy_cluster_upstream_cx_connect_ms_bucket{{{l},le=\"1\"}} {n}\n\
envoy_cluster_upstream_cx_connect_ms_bucket{{{l},le=\"+Inf\"}} {n}\n\
envoy_cluster_upstream_cx_connect_ms_sum{{{l}}} {}\n\
envoy_cluster_upstream_cx_connect_ms_count{{{l}}} {n}\n",
            n / 2
        ));
    }
    out
}

/// `reviews` calls `host` through its sidecar and gets `status`.
fn through_envoy(t: &SdkTracer, host: &str, status: i64, ms: u64) -> String {
    let end = SystemTime::now();
    let start = end - Duration::from_millis(ms);
    let mut root = t
        .span_builder("GET /reviews/{id}")
        .with_kind(SpanKind::Server)
        .with_start_time(start)
        .with_attributes(vec![KeyValue::new("http.route", "/reviews/{id}")])
        .start(t);
    let cx = Context::current().with_remote_span_context(root.span_context().clone());
    let mut c = t
        .span_builder("GET")
        .with_kind(SpanKind::Client)
        .with_start_time(start + Duration::from_millis(2))
        .with_attributes(vec![
            KeyValue::new("http.request.method", "GET"),
            KeyValue::new(
                "server.address",
                format!("{host}.default.svc.cluster.local"),
            ),
            KeyValue::new("server.port", 9080),
            KeyValue::new("http.response.status_code", status),
        ])
        .start_with_context(t, &cx);
    if status >= 500 {
        c.set_status(opentelemetry::trace::Status::error(format!("{status}")));
        root.set_attribute(KeyValue::new("http.response.status_code", status));
        root.set_status(opentelemetry::trace::Status::error(format!("{status}")));
    }
    c.end_with_timestamp(end - Duration::from_millis(2));
    let id = root.span_context().trace_id().to_string();
    root.end_with_timestamp(end);
    id
}

#[test]
fn envoy_sidecar_numbers_name_circuit_breaking_connect_failures_and_tls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let envoy = exposition(envoy_text);
    let otlp = format!("127.0.0.1:{}", free_port());
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "{otlp}" }}
  prometheus:
    config:
      scrape_configs:
        - job_name: envoy-sidecar
          scrape_interval: 250ms
          scrape_timeout: 200ms
          metrics_path: /metrics
          static_configs: [{{ targets: ["{envoy}"] }}]
processors:
  tail_sampling:
    decision_wait: 1500ms
    policies: [{{ name: all, type: always_sample }}]
  correlate:
    dependencies: {{ sample_interval: 1s }}
    alerts:
      interval: 500ms
      window: 2s
      rules:
        - alert: EnvoyPendingOverflow
          expr: |
            SELECT job, envoy_cluster, pending_overflow AS value FROM dependencies
            WHERE system = 'envoy' AND pending_overflow > 0
          for: 0s
        - alert: ScrapedSeriesSeen
          expr: SELECT job, instance, labels, value FROM metrics WHERE name = 'envoy_cluster_upstream_cx_connect_fail' AND value > 0
          for: 0s
{tail}"#,
        tail = causeway_scenarios::config::analysed("otlp", "otlp", "prometheus")
    );
    let _daemon = Daemon::start(d, "envoy", &config);
    wait_for(Duration::from_secs(20), "the sidecar scraped", || {
        metrics_of_service(&read_jsonl(&d.join("metrics.jsonl")), "envoy-sidecar").len() >= 9 * 4
    });
    // Alert rules see the scraped servers: only the overflowing cluster fires,
    // and the connect failures through the `metrics` table with job and instance.
    wait_for(Duration::from_secs(20), "the alerts fire", || {
        let labels = alert_labels(&d.join("logs.jsonl"));
        let firing = |name: &str| {
            labels
                .iter()
                .filter(|l| l.contains(&format!("\"alertname\":\"{name}\"")))
                .cloned()
                .collect::<Vec<_>>()
        };
        let overflow = firing("EnvoyPendingOverflow");
        let seen = firing("ScrapedSeriesSeen");
        !overflow.is_empty()
            && overflow
                .iter()
                .all(|l| l.contains("ratings.default") && l.contains("envoy-sidecar"))
            && seen
                .iter()
                .any(|l| l.contains("payments.default") && l.contains("\"instance\":\"127.0.0.1:"))
    });
    let p = provider(&otlp, "reviews", "reviews-7d9f");
    let t = p.tracer("reviews");
    let cases = [
        (
            through_envoy(&t, "ratings", 503, 300),
            Some("circuit_open"),
            "upstream_rq_pending_overflow",
        ),
        (
            through_envoy(&t, "payments", 503, 300),
            Some("upstream_unavailable"),
            "upstream_cx_connect_fail",
        ),
        (
            through_envoy(&t, "inventory", 503, 300),
            Some("tls_handshake"),
            "ssl.connection_error",
        ),
        // Healthy sidecar numbers: a slow answer is no Envoy cause.
        (through_envoy(&t, "catalog", 200, 900), None, ""),
    ];
    p.shutdown().unwrap();
    let path = d.join("traces.jsonl");
    wait_for(Duration::from_secs(30), "every trace analysed", || {
        let a = read_annotated(&path);
        cases.iter().all(|c| {
            a.get(&c.0)
                .is_some_and(|x| x.root.contains_key("rca.cause"))
        })
    });
    let got = read_annotated(&path);
    for (id, cause, cites) in &cases {
        let a = &got[id].root;
        eprintln!("{cause:?}: {} {}", a["rca.cause"], a["rca.summary"]);
        match cause {
            Some(c) => {
                assert_eq!(a["rca.cause"], *c, "{}", a["rca.summary"]);
                assert!(a["rca.summary"].contains(cites), "{}", a["rca.summary"]);
                assert!(a["rca.rule"].starts_with("envoy_"), "{}", a["rca.rule"]);
            }
            None => {
                assert!(!a["rca.rule"].starts_with("envoy_"), "{}", a["rca.summary"]);
                let alts = a.get("rca.alternatives").cloned().unwrap_or_default();
                assert!(
                    !["circuit_open", "tls_handshake", "upstream_unavailable"]
                        .iter()
                        .any(|c| alts.contains(c) || a["rca.cause"] == *c),
                    "healthy: {} ({alts})",
                    a["rca.cause"]
                );
            }
        }
    }
}

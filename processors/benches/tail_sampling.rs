//! Tail sampling's hot paths: taking in a request of 500 spans (the wire
//! walk that extracts trace id, parent, times, status and the attributes a
//! policy reads, and the copy of each span into its trace), and deciding
//! the traces when their `decision_wait` is over (policies, then the kept
//! spans re-encoded into the outgoing batch).

/// The daemon's allocator, so that the numbers are those of the binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use bytes::Bytes;
use causeway_core::component::Processor;
use causeway_core::config::decode;
use causeway_core::telemetry::Registry;
use causeway_core::{Batch, Signal};
use causeway_processors::tail_sampling::config::TailSamplingConfig;
use causeway_processors::tail_sampling::TailSampling;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use std::time::Duration;
use tokio::time::Instant;

const CONFIG: &str = r#"
decision_wait: 5s
num_traces: 1000000
policies:
  - {name: errors, type: status_code, status_code: {status_codes: [ERROR]}}
  - {name: slow, type: latency, latency: {threshold_ms: 1000}}
  - {name: baseline, type: probabilistic, probabilistic: {sampling_percentage: 1}}
"#;

/// Request `r`: 100 traces of 5 spans with 10 attributes each; one span in
/// 1,000 is an error.
fn request(r: u64) -> Bytes {
    let kv = |k: &str, v: any_value::Value| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    };
    let s = |v: &str| any_value::Value::StringValue(v.into());
    let spans = (0..500u64)
        .map(|i| {
            let id = r * 500 + i + 1;
            let trace = id / 5;
            let start = 1_764_000_000_000_000_000 + id * 1000;
            Span {
                trace_id: [trace.to_be_bytes(), (!trace).to_be_bytes()].concat(),
                span_id: id.to_be_bytes().to_vec(),
                parent_span_id: if id.is_multiple_of(5) {
                    vec![]
                } else {
                    (id - 1).to_be_bytes().to_vec()
                },
                name: "GET /orders".into(),
                kind: 2,
                start_time_unix_nano: start,
                end_time_unix_nano: start + 20_000_000,
                attributes: vec![
                    kv("http.request.method", s("GET")),
                    kv("http.route", s("/api/v1/orders/{id}")),
                    kv("http.response.status_code", any_value::Value::IntValue(200)),
                    kv("url.path", s("/api/v1/orders/1")),
                    kv("server.address", s("orders")),
                    kv("server.port", any_value::Value::IntValue(8080)),
                    kv("client.address", s("10.1.2.3")),
                    kv("user_agent.original", s("lg/1")),
                    kv("route_id", s("orders-v2")),
                    kv("net.proto", s("1.1")),
                ],
                status: Some(Status {
                    code: if id.is_multiple_of(1000) {
                        status::StatusCode::Error as i32
                    } else {
                        0
                    },
                    message: String::new(),
                }),
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("orders"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
    .into()
}

fn processor() -> TailSampling {
    let cfg: TailSamplingConfig =
        decode(&serde_yaml::from_str(CONFIG).expect("yaml")).expect("config");
    TailSampling::new(cfg, "tail_sampling", &Registry::new()).expect("build")
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let reqs: Vec<Bytes> = (0..32).map(request).collect();
    let mut g = c.benchmark_group("tail_sampling_500_spans");
    g.throughput(Throughput::Elements(500));
    // Taking in a request: extract + hold (no decision yet).
    g.bench_function("extract_and_hold", |b| {
        let mut p = processor();
        let mut out = Vec::new();
        let mut i = 0u64;
        b.iter(|| {
            // New trace ids every time: the request number is part of them.
            let req = request(1_000 + i);
            i += 1;
            rt.block_on(p.process(Batch::from_encoded(Signal::Traces, req, 500), &mut out))
        });
    });
    // Deciding: 32 requests (16,000 spans, 3,200 traces) held, then one
    // tick after their decision_wait decides them all.
    g.throughput(Throughput::Elements(32 * 500));
    g.bench_function("decide_16000_spans", |b| {
        b.iter_batched(
            || {
                let mut p = processor();
                let mut out = Vec::new();
                for r in &reqs {
                    rt.block_on(p.process(
                        Batch::from_encoded(Signal::Traces, r.clone(), 500),
                        &mut out,
                    ))
                    .expect("process");
                }
                p
            },
            |mut p| {
                let mut out = Vec::new();
                rt.block_on(p.on_tick(Instant::now() + Duration::from_secs(60), &mut out))
                    .map(|_| out.iter().map(Batch::items).sum::<usize>())
            },
            BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

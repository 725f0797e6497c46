//! Hot paths of forwarding: what the receiver does per request (walk vs
//! decode) and what batching costs.

use bytes::Bytes;
use causeway_core::{wire, Batch, Signal};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
use std::hint::black_box;

fn request(n: usize) -> Bytes {
    let kv = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    };
    let spans = (0..n as u64)
        .map(|i| Span {
            trace_id: [i.to_be_bytes(), (!i).to_be_bytes()].concat(),
            span_id: (i + 1).to_be_bytes().to_vec(),
            parent_span_id: i.to_be_bytes().to_vec(),
            name: "GET /orders".into(),
            kind: 2,
            start_time_unix_nano: 1_764_000_000_000_000_000 + i,
            end_time_unix_nano: 1_764_000_000_020_000_000 + i,
            attributes: (0..10)
                .map(|a| kv(&format!("attr.{a}"), "value-abcdef"))
                .collect(),
            ..Default::default()
        })
        .collect();
    Bytes::from(
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
        .encode_to_vec(),
    )
}

fn bench(c: &mut Criterion) {
    let req = request(500);
    let mut g = c.benchmark_group("receive_500_spans");
    g.throughput(Throughput::Elements(500));
    g.bench_function("wire_scan", |b| {
        b.iter(|| wire::scan(Signal::Traces, black_box(&req)).map(|s| s.items))
    });
    g.bench_function("prost_decode", |b| {
        b.iter(|| {
            ExportTraceServiceRequest::decode(black_box(req.clone()))
                .map(|r| r.resource_spans.len())
        })
    });
    g.bench_function("prost_decode_encode", |b| {
        b.iter(|| {
            ExportTraceServiceRequest::decode(black_box(req.clone()))
                .map(|r| r.encode_to_vec().len())
        })
    });
    g.finish();

    let mut g = c.benchmark_group("batch_16x500_spans");
    g.throughput(Throughput::Elements(16 * 500));
    g.bench_function("append_encoded_and_concat", |b| {
        b.iter(|| {
            let mut batch = Batch::from_encoded(Signal::Traces, req.clone(), 500);
            for _ in 0..15 {
                batch
                    .append(Batch::from_encoded(Signal::Traces, req.clone(), 500))
                    .expect("same signal");
            }
            batch.to_encoded().len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

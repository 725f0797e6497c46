//! Hot paths of forwarding: what the receiver does per request (walk vs
//! decode) and what batching costs.

/// The daemon's allocator, so that the numbers are those of the binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use bytes::Bytes;
use causeway_core::{wire, Batch, Signal};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
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
    causeway_core::model::traces_request(spans)
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

/// `n` spans as an SDK would send them: random ids, 10 attributes with
/// varying values (ids in paths, client addresses), varying times.
fn realistic(n: usize) -> Bytes {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let kv = |k: &str, v: any_value::Value| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    };
    let s = |v: String| any_value::Value::StringValue(v);
    let spans = (0..n)
        .map(|_| {
            let (t, u, id, d) = (rnd(), rnd(), rnd(), rnd() % 50_000_000);
            let order = rnd() % 100_000;
            let start = 1_764_000_000_000_000_000 + rnd() % 1_000_000_000_000;
            Span {
                trace_id: [t.to_be_bytes(), u.to_be_bytes()].concat(),
                span_id: id.to_be_bytes().to_vec(),
                parent_span_id: rnd().to_be_bytes().to_vec(),
                name: "GET /api/v1/orders/{id}".into(),
                kind: 2,
                start_time_unix_nano: start,
                end_time_unix_nano: start + d,
                attributes: vec![
                    kv("http.request.method", s("GET".into())),
                    kv("http.route", s("/api/v1/orders/{id}".into())),
                    kv("http.response.status_code", any_value::Value::IntValue(200)),
                    kv("url.path", s(format!("/api/v1/orders/{order}"))),
                    kv("server.address", s("orders.shop.svc".into())),
                    kv("server.port", any_value::Value::IntValue(8080)),
                    kv(
                        "client.address",
                        s(format!("10.{}.{}.{}", rnd() % 4, rnd() % 256, rnd() % 256)),
                    ),
                    kv("user_agent.original", s("okhttp/4.12.0".into())),
                    kv("route_id", s("orders-v2".into())),
                    kv("network.protocol.version", s("1.1".into())),
                ],
                ..Default::default()
            }
        })
        .collect();
    causeway_core::model::traces_request(spans)
}

/// What a batch of 8,192 realistic spans costs to compress and inflate,
/// per codec and level (the levels causeway uses are gzip 1 and zstd 1).
fn compression(c: &mut Criterion) {
    use causeway_core::compress::{Codec, Transport};
    use std::io::Write;
    let batch = realistic(8192);
    let parts = [batch.clone()];
    let mut g = c.benchmark_group("compress_8192_spans");
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.sample_size(20);
    for level in [1u32, 6] {
        let out = {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
            e.write_all(&batch)
                .and_then(|_| e.finish())
                .map(|v| v.len())
                .unwrap_or(0)
        };
        eprintln!("gzip level {level}: {} -> {out} bytes", batch.len());
        g.bench_function(format!("gzip_level_{level}"), |b| {
            b.iter(|| {
                let mut e = flate2::write::GzEncoder::new(
                    Vec::with_capacity(batch.len() / 4),
                    flate2::Compression::new(level),
                );
                e.write_all(black_box(&batch))
                    .and_then(|_| e.finish())
                    .map(|v| v.len())
            })
        });
    }
    for level in [1i32, 3] {
        let out = zstd::bulk::compress(&batch, level)
            .map(|v| v.len())
            .unwrap_or(0);
        eprintln!("zstd level {level}: {} -> {out} bytes", batch.len());
        g.bench_function(format!("zstd_level_{level}"), |b| {
            b.iter(|| zstd::bulk::compress(black_box(&batch), level).map(|v| v.len()))
        });
    }
    for (codec, t, name) in [
        (Codec::Gzip, Transport::Grpc, "causeway_gzip"),
        (Codec::Zstd, Transport::Grpc, "causeway_zstd"),
        (Codec::Snappy, Transport::Http, "causeway_snappy_block"),
        (Codec::Snappy, Transport::Grpc, "causeway_snappy_framed"),
    ] {
        let out = codec.compress(t, &parts).map(|b| b.len()).unwrap_or(0);
        eprintln!("{name}: {} -> {out} bytes", batch.len());
        g.bench_function(name, |b| {
            b.iter(|| codec.compress(t, black_box(&parts)).map(|b| b.len()))
        });
    }
    g.finish();

    let mut g = c.benchmark_group("inflate_8192_spans");
    g.throughput(Throughput::Bytes(batch.len() as u64));
    g.sample_size(20);
    for (codec, t, name) in [
        (Codec::Gzip, Transport::Http, "gzip"),
        (Codec::Zstd, Transport::Http, "zstd"),
        (Codec::Snappy, Transport::Http, "snappy_block"),
        (Codec::Snappy, Transport::Grpc, "snappy_framed"),
    ] {
        let Ok(z) = codec.compress(t, &parts) else {
            continue;
        };
        g.bench_function(name, |b| {
            b.iter(|| codec.decompress(black_box(&z), 64 << 20).map(|b| b.len()))
        });
    }
    g.finish();
}

/// What keying a batch by trace id costs (the `kafka` exporter with
/// `partition_traces_by_id`): the wire split, each key's partition, and the
/// per-partition message bodies. 8,192 realistic spans, every span its own
/// trace (the worst case), and 10 spans a trace (an SDK batch).
fn partitioning(c: &mut Criterion) {
    use causeway_core::partition::split_by;
    let unique = realistic(8192);
    let mut req = ExportTraceServiceRequest::decode(unique.clone()).expect("decodes");
    for (i, sp) in req.resource_spans[0].scope_spans[0]
        .spans
        .iter_mut()
        .enumerate()
    {
        let t = (i / 10) as u64;
        sp.trace_id = [t.to_be_bytes(), (t ^ 0xabcd).to_be_bytes()].concat();
    }
    let grouped = Bytes::from(req.encode_to_vec());
    let mut g = c.benchmark_group("partition_8192_spans_by_trace_id");
    g.throughput(Throughput::Elements(8192));
    for (name, buf) in [
        ("one_span_a_trace", &unique),
        ("ten_spans_a_trace", &grouped),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| split_by(Signal::Traces, buf, |k| k.partition(12) as usize).expect("split"))
        });
    }
    g.finish();
}

criterion_group!(benches, bench, compression, partitioning);
criterion_main!(benches);

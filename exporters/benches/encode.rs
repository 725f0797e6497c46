//! Encoding throughput of the Loki and VictoriaMetrics exporters, and the
//! persistent queue's sustained throughput per fsync policy.

use causeway_core::config::decode;
use causeway_core::telemetry::{Counter, Registry};
use causeway_core::topology::{DiskQueue, Fsync, WhenFull};
use causeway_core::{Batch, Signal};
use causeway_exporters::loki::config::LokiConfig;
use causeway_exporters::loki::LokiExporter;
use causeway_exporters::victoriametrics::{VictoriaMetricsConfig, VictoriaMetricsExporter};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::hint::black_box;

use causeway_core::model::text_attribute as kv;

fn logs(n: usize) -> Batch {
    Batch::from_logs(vec![ResourceLogs {
        resource: Some(Resource {
            attributes: vec![kv("service.name", "gw")],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: (0..n)
                .map(|i| LogRecord {
                    time_unix_nano: 1_795_946_400_000_000_000 + i as u64 * 1000,
                    severity_number: 9,
                    severity_text: "INFO".into(),
                    body: Some(AnyValue {
                        value: Some(any_value::Value::StringValue(format!(
                            r#"{{"trace_id":"{i:032x}","route_id":"orders","status_code":200,"duration_ms":12,"path":"/api/v1/orders/{i}"}}"#
                        ))),
                    }),
                    attributes: vec![kv("route_id", ["orders", "payments", "users"][i % 3]), kv("http.request.method", "GET"), kv("url.path", "/api/v1/orders")],
                    trace_id: vec![7; 16],
                    span_id: vec![9; 8],
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }])
}

fn gauges(n: usize) -> Batch {
    Batch::from_metrics(vec![ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![
                kv("service.name", "checkout"),
                kv("service.instance.id", "pod-1"),
            ],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics: (0..n / 10)
                .map(|m| Metric {
                    name: format!("kafka.consumer_group.lag.{m}"),
                    unit: "{messages}".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: (0..10)
                            .map(|p| NumberDataPoint {
                                attributes: vec![
                                    kv("group", "g1"),
                                    kv("topic", "orders"),
                                    kv("partition", &p.to_string()),
                                ],
                                time_unix_nano: 1_795_946_400_000_000_000,
                                value: Some(number_data_point::Value::AsInt(p * 100)),
                                ..Default::default()
                            })
                            .collect(),
                    })),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }],
        ..Default::default()
    }])
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    // Unreachable endpoints: only the conversion and encoding are measured.
    let loki: LokiConfig =
        decode(&serde_yaml::from_str("endpoint: http://127.0.0.1:9").expect("yaml")).expect("cfg");
    let loki = LokiExporter::new(loki, "loki", Registry::new()).expect("loki");
    // As the exporter gets it from its queue: encoded.
    let batch = Batch::from_encoded(Signal::Logs, logs(1000).to_encoded(), 1000);
    let mut g = c.benchmark_group("loki_1000_records");
    g.throughput(Throughput::Elements(1000));
    g.bench_function("streams_protobuf_snappy", |b| {
        b.iter(|| {
            let parts = black_box(&batch).encoded_parts();
            let streams = loki.streams(&parts).expect("streams");
            loki.body(streams).expect("body").0.len()
        })
    });
    g.finish();

    let vm: VictoriaMetricsConfig =
        decode(&serde_yaml::from_str("endpoint: http://127.0.0.1:9").expect("yaml")).expect("cfg");
    let vm = VictoriaMetricsExporter::new(vm).expect("vm");
    let batch = gauges(10_000);
    let mut g = c.benchmark_group("victoriametrics_10000_samples");
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("write_request_snappy", |b| {
        b.iter(|| {
            use prost::Message;
            let req = vm.write_request(black_box(&batch)).expect("req");
            snap::raw::Encoder::new()
                .compress_vec(&req.encode_to_vec())
                .map(|v| v.len())
        })
    });
    g.finish();

    let payload = vec![0x42u8; 64 << 10];
    let mut g = c.benchmark_group("persistent_queue_64KiB_records");
    g.throughput(Throughput::Bytes(64 << 10));
    g.sample_size(20);
    for (name, fsync) in [
        ("fsync_never", Fsync::Never),
        ("fsync_periodic", Fsync::Periodic),
        ("fsync_always", Fsync::Always),
    ] {
        let dir = tempfile::tempdir().expect("dir");
        let (q, _) = DiskQueue::open(
            dir.path(),
            1 << 30,
            WhenFull::Block,
            fsync,
            Counter::default(),
            Counter::default(),
        )
        .expect("open");
        g.bench_function(format!("push_pop_ack_{name}"), |b| {
            b.iter(|| {
                rt.block_on(async {
                    q.push(Signal::Logs, 100, &payload).await.expect("push");
                    let r = q.pop().await.expect("pop");
                    q.ack(r.id);
                })
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

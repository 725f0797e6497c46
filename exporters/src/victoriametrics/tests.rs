//! The VictoriaMetrics exporter against an in-test server that decodes
//! Prometheus remote write (snappy and zstd) with its own message definitions.

use super::{prom_name, sanitize, VictoriaMetricsConfig, VictoriaMetricsExporter};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use causeway_core::component::{ExportError, Exporter};
use causeway_core::config::decode;
use causeway_core::Batch;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

mod wire {
    // prometheus/prompb/types.proto and remote.proto (remote write 1.0)
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct WriteRequest {
        #[prost(message, repeated, tag = "1")]
        pub timeseries: Vec<TimeSeries>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TimeSeries {
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<Label>,
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<Sample>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(double, tag = "1")]
        pub value: f64,
        #[prost(int64, tag = "2")]
        pub timestamp: i64,
    }
}

type Seen = Arc<Mutex<Vec<(HeaderMap, Bytes)>>>;

async fn server(status: StatusCode) -> (String, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    // As VictoriaMetrics ≥ 1.82: the handshake of its remote write protocol.
    let app = axum::Router::new().route(
        "/api/v1/write",
        post(move |h: HeaderMap, b: Bytes| {
            let seen = s2.clone();
            async move {
                // A server behind a proxy that cannot take zstd after all.
                if status == StatusCode::UNSUPPORTED_MEDIA_TYPE
                    && h.get("content-encoding").is_some_and(|e| e == "zstd")
                {
                    return status;
                }
                seen.lock().expect("lock").push((h, b));
                if status == StatusCode::UNSUPPORTED_MEDIA_TYPE {
                    StatusCode::NO_CONTENT
                } else {
                    status
                }
            }
        })
        .get(|| async { "1" }),
    );
    (crate::testing::serve(app).await, seen)
}

fn exporter(url: &str, extra: &str) -> VictoriaMetricsExporter {
    let cfg: VictoriaMetricsConfig =
        decode(&serde_yaml::from_str(&format!("endpoint: {url}\n{extra}")).expect("yaml"))
            .expect("valid");
    VictoriaMetricsExporter::new(cfg).expect("exporter")
}

use causeway_core::model::text_attribute as kv;

const T: u64 = 1_795_946_400_000_000_000;

fn metrics(delta_count: u64, ts: u64) -> Batch {
    let num = |v: f64, attrs: Vec<KeyValue>| NumberDataPoint {
        attributes: attrs,
        time_unix_nano: ts,
        value: Some(number_data_point::Value::AsDouble(v)),
        ..Default::default()
    };
    Batch::from_metrics(vec![ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![
                kv("service.name", "checkout"),
                kv("service.instance.id", "pod-1"),
                kv("k8s.namespace.name", "prod"),
            ],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![
                Metric {
                    name: "http.server.requests".into(),
                    unit: "{request}".into(),
                    data: Some(metric::Data::Sum(Sum {
                        data_points: vec![num(42.0, vec![kv("http.route", "/pay")])],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                },
                Metric {
                    name: "system.memory.utilization".into(),
                    unit: "1".into(),
                    data: Some(metric::Data::Gauge(Gauge {
                        data_points: vec![num(0.75, vec![kv("state", "used")])],
                    })),
                    ..Default::default()
                },
                Metric {
                    name: "http.server.request.duration".into(),
                    unit: "s".into(),
                    data: Some(metric::Data::Histogram(Histogram {
                        data_points: vec![HistogramDataPoint {
                            time_unix_nano: ts,
                            count: delta_count,
                            sum: Some(delta_count as f64 * 0.2),
                            bucket_counts: vec![delta_count / 2, delta_count - delta_count / 2, 0],
                            explicit_bounds: vec![0.1, 0.5],
                            ..Default::default()
                        }],
                        aggregation_temporality: AggregationTemporality::Delta as i32,
                    })),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    }])
}

/// series name{labels} -> (value, ts), with label order checked.
fn decode_series(body: &[u8], zstd: bool) -> BTreeMap<String, (f64, i64)> {
    let raw = if zstd {
        zstd::stream::decode_all(body).expect("zstd")
    } else {
        snap::raw::Decoder::new()
            .decompress_vec(body)
            .expect("snappy block")
    };
    let req = wire::WriteRequest::decode(raw.as_slice()).expect("WriteRequest");
    let mut out = BTreeMap::new();
    for ts in req.timeseries {
        let names: Vec<&str> = ts.labels.iter().map(|l| l.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted, "labels sorted and unique");
        let name = ts
            .labels
            .iter()
            .find(|l| l.name == "__name__")
            .expect("__name__")
            .value
            .clone();
        let rest: Vec<String> = ts
            .labels
            .iter()
            .filter(|l| l.name != "__name__")
            .map(|l| format!("{}={:?}", l.name, l.value))
            .collect();
        assert!(
            ts.samples
                .windows(2)
                .all(|w| w[0].timestamp <= w[1].timestamp),
            "samples in time order"
        );
        let s = ts.samples.last().expect("a sample");
        out.insert(
            format!("{name}{{{}}}", rest.join(",")),
            (s.value, s.timestamp),
        );
    }
    out
}

#[tokio::test]
async fn remote_write_series_names_labels_values_and_timestamps() {
    let (url, seen) = server(StatusCode::NO_CONTENT).await;
    let exp = exporter(&url, "");
    exp.export(&metrics(10, T)).await.expect("delivered");
    exp.export(&metrics(4, T + 60_000_000_000))
        .await
        .expect("delivered");
    let got = seen.lock().expect("lock").clone();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].0["content-encoding"], "snappy");
    assert_eq!(got[0].0["x-prometheus-remote-write-version"], "0.1.0");
    let first = decode_series(&got[0].1, false);
    let second = decode_series(&got[1].1, false);
    let base = "instance=\"pod-1\",job=\"checkout\"";
    let t0 = (T / 1_000_000) as i64;
    assert_eq!(
        first[&format!("http_server_requests_total{{http_route=\"/pay\",{base}}}")],
        (42.0, t0)
    );
    assert_eq!(
        first[&format!("system_memory_utilization_ratio{{{base},state=\"used\"}}")],
        (0.75, t0)
    );
    assert_eq!(
        first[&format!("http_server_request_duration_seconds_bucket{{{base},le=\"0.1\"}}")],
        (5.0, t0)
    );
    assert_eq!(
        first[&format!("http_server_request_duration_seconds_bucket{{{base},le=\"0.5\"}}")],
        (10.0, t0)
    );
    assert_eq!(
        first[&format!("http_server_request_duration_seconds_bucket{{{base},le=\"+Inf\"}}")],
        (10.0, t0)
    );
    assert_eq!(
        first[&format!("http_server_request_duration_seconds_count{{{base}}}")],
        (10.0, t0)
    );
    assert_eq!(
        first[&format!("target_info{{{base},k8s_namespace_name=\"prod\"}}")],
        (1.0, t0)
    );
    // Delta histograms become cumulative: 10 then +4.
    let t1 = t0 + 60_000;
    assert_eq!(
        second[&format!("http_server_request_duration_seconds_count{{{base}}}")],
        (14.0, t1)
    );
    assert_eq!(
        second[&format!("http_server_request_duration_seconds_bucket{{{base},le=\"0.1\"}}")],
        (7.0, t1)
    );
    let sum = second[&format!("http_server_request_duration_seconds_sum{{{base}}}")].0;
    assert!((sum - 2.8).abs() < 1e-9, "{sum}");
}

#[tokio::test]
async fn zstd_variant_and_retry_rules() {
    let (url, seen) = server(StatusCode::NO_CONTENT).await;
    let exp = exporter(&url, "compression: zstd");
    exp.export(&metrics(2, T)).await.expect("delivered");
    let got = seen.lock().expect("lock").clone();
    assert_eq!(got[0].0["content-encoding"], "zstd");
    assert!(decode_series(&got[0].1, true).contains_key(
        "target_info{instance=\"pod-1\",job=\"checkout\",k8s_namespace_name=\"prod\"}"
    ));
    // 415 to zstd: the same request again in snappy, and snappy from then on.
    let (url, seen) = server(StatusCode::UNSUPPORTED_MEDIA_TYPE).await;
    let exp = exporter(&url, "compression: zstd");
    exp.export(&metrics(2, T))
        .await
        .expect("delivered in snappy");
    exp.export(&metrics(2, T + 1))
        .await
        .expect("delivered in snappy");
    let got = seen.lock().expect("lock").clone();
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|(h, _)| h["content-encoding"] == "snappy"));
    for (status, retryable) in [
        (StatusCode::SERVICE_UNAVAILABLE, true),
        (StatusCode::TOO_MANY_REQUESTS, true),
        (StatusCode::BAD_REQUEST, false),
    ] {
        let (url, _) = server(status).await;
        match (exporter(&url, "").export(&metrics(1, T)).await, retryable) {
            (Err(ExportError::Retryable { .. }), true)
            | (Err(ExportError::Permanent { .. }), false) => {}
            (other, _) => panic!("{status}: {other:?}"),
        }
    }
}

/// How a metric reaches `prom_name`.
#[derive(Clone, Copy)]
enum Kind {
    /// A monotonic sum (a counter).
    Counter,
    /// A non-monotonic sum (an up-down counter).
    UpDown,
    Gauge,
    Histogram,
}

/// Real metric names, from the semantic conventions and the Collector's
/// receivers (hostmetrics, kafkametrics, redis, postgresql, nginx, its own
/// telemetry), with units and types as they are defined there, and the name
/// Prometheus' OTLP translator (`otlptranslator.MetricNamer`, suffixes on,
/// UTF-8 off) gives each, worked out rule by rule from its source.
const NAMES: &[(&str, &str, Kind, &str)] = &[
    // HTTP, RPC, database and messaging client/server durations.
    (
        "http.server.request.duration",
        "s",
        Kind::Histogram,
        "http_server_request_duration_seconds",
    ),
    (
        "http.client.request.duration",
        "s",
        Kind::Histogram,
        "http_client_request_duration_seconds",
    ),
    (
        "http.server.active_requests",
        "{request}",
        Kind::UpDown,
        "http_server_active_requests",
    ),
    (
        "http.server.request.body.size",
        "By",
        Kind::Histogram,
        "http_server_request_body_size_bytes",
    ),
    (
        "http.client.response.body.size",
        "By",
        Kind::Histogram,
        "http_client_response_body_size_bytes",
    ),
    (
        "http.server.duration",
        "ms",
        Kind::Histogram,
        "http_server_duration_milliseconds",
    ),
    (
        "rpc.server.duration",
        "ms",
        Kind::Histogram,
        "rpc_server_duration_milliseconds",
    ),
    (
        "rpc.client.duration",
        "ms",
        Kind::Histogram,
        "rpc_client_duration_milliseconds",
    ),
    (
        "rpc.server.requests_per_rpc",
        "{count}",
        Kind::Histogram,
        "rpc_server_requests_per_rpc",
    ),
    (
        "db.client.operation.duration",
        "s",
        Kind::Histogram,
        "db_client_operation_duration_seconds",
    ),
    (
        "db.client.connection.count",
        "{connection}",
        Kind::UpDown,
        "db_client_connection_count",
    ),
    (
        "db.client.connection.max",
        "{connection}",
        Kind::UpDown,
        "db_client_connection_max",
    ),
    (
        "messaging.client.operation.duration",
        "s",
        Kind::Histogram,
        "messaging_client_operation_duration_seconds",
    ),
    (
        "messaging.client.sent.messages",
        "{message}",
        Kind::Counter,
        "messaging_client_sent_messages_total",
    ),
    (
        "gen_ai.client.token.usage",
        "{token}",
        Kind::Histogram,
        "gen_ai_client_token_usage",
    ),
    (
        "gen_ai.server.time_to_first_token",
        "s",
        Kind::Histogram,
        "gen_ai_server_time_to_first_token_seconds",
    ),
    // Runtimes.
    (
        "jvm.memory.used",
        "By",
        Kind::UpDown,
        "jvm_memory_used_bytes",
    ),
    (
        "jvm.gc.duration",
        "s",
        Kind::Histogram,
        "jvm_gc_duration_seconds",
    ),
    (
        "jvm.thread.count",
        "{thread}",
        Kind::UpDown,
        "jvm_thread_count",
    ),
    (
        "jvm.cpu.recent_utilization",
        "1",
        Kind::Gauge,
        "jvm_cpu_recent_utilization_ratio",
    ),
    (
        "nodejs.eventloop.utilization",
        "1",
        Kind::Gauge,
        "nodejs_eventloop_utilization_ratio",
    ),
    (
        "process.cpu.time",
        "s",
        Kind::Counter,
        "process_cpu_time_seconds_total",
    ),
    (
        "process.cpu.utilization",
        "1",
        Kind::Gauge,
        "process_cpu_utilization_ratio",
    ),
    (
        "process.memory.usage",
        "By",
        Kind::UpDown,
        "process_memory_usage_bytes",
    ),
    (
        "process.open_file_descriptors",
        "{count}",
        Kind::UpDown,
        "process_open_file_descriptors",
    ),
    // hostmetrics.
    (
        "system.cpu.time",
        "s",
        Kind::Counter,
        "system_cpu_time_seconds_total",
    ),
    (
        "system.cpu.utilization",
        "1",
        Kind::Gauge,
        "system_cpu_utilization_ratio",
    ),
    (
        "system.cpu.load_average.1m",
        "{thread}",
        Kind::Gauge,
        "system_cpu_load_average_1m",
    ),
    (
        "system.cpu.load_average.15m",
        "{thread}",
        Kind::Gauge,
        "system_cpu_load_average_15m",
    ),
    (
        "system.memory.usage",
        "By",
        Kind::UpDown,
        "system_memory_usage_bytes",
    ),
    (
        "system.memory.utilization",
        "1",
        Kind::Gauge,
        "system_memory_utilization_ratio",
    ),
    (
        "system.disk.io",
        "By",
        Kind::Counter,
        "system_disk_io_bytes_total",
    ),
    (
        "system.disk.operations",
        "{operations}",
        Kind::Counter,
        "system_disk_operations_total",
    ),
    (
        "system.disk.operation_time",
        "s",
        Kind::Counter,
        "system_disk_operation_time_seconds_total",
    ),
    (
        "system.network.io",
        "By",
        Kind::Counter,
        "system_network_io_bytes_total",
    ),
    (
        "system.network.packets",
        "{packets}",
        Kind::Counter,
        "system_network_packets_total",
    ),
    (
        "system.network.errors",
        "{errors}",
        Kind::Counter,
        "system_network_errors_total",
    ),
    (
        "system.network.connections",
        "{connections}",
        Kind::UpDown,
        "system_network_connections",
    ),
    (
        "system.filesystem.usage",
        "By",
        Kind::UpDown,
        "system_filesystem_usage_bytes",
    ),
    (
        "system.filesystem.utilization",
        "1",
        Kind::Gauge,
        "system_filesystem_utilization_ratio",
    ),
    (
        "system.paging.faults",
        "{faults}",
        Kind::Counter,
        "system_paging_faults_total",
    ),
    (
        "system.processes.count",
        "{processes}",
        Kind::UpDown,
        "system_processes_count",
    ),
    (
        "system.processes.created",
        "{processes}",
        Kind::Counter,
        "system_processes_created_total",
    ),
    // kafkametrics: offsets are gauges with unit `1`, so they get `_ratio`
    // from Prometheus too (the translator's own comment names the quirk).
    ("kafka.brokers", "{brokers}", Kind::UpDown, "kafka_brokers"),
    (
        "kafka.consumer_group.lag",
        "{messages}",
        Kind::Gauge,
        "kafka_consumer_group_lag",
    ),
    (
        "kafka.consumer_group.lag_sum",
        "{messages}",
        Kind::Gauge,
        "kafka_consumer_group_lag_sum",
    ),
    (
        "kafka.consumer_group.members",
        "{members}",
        Kind::UpDown,
        "kafka_consumer_group_members",
    ),
    (
        "kafka.consumer_group.offset",
        "1",
        Kind::Gauge,
        "kafka_consumer_group_offset_ratio",
    ),
    (
        "kafka.partition.current_offset",
        "1",
        Kind::Gauge,
        "kafka_partition_current_offset_ratio",
    ),
    (
        "kafka.partition.replicas_in_sync",
        "{replicas}",
        Kind::Gauge,
        "kafka_partition_replicas_in_sync",
    ),
    (
        "kafka.topic.partitions",
        "{partitions}",
        Kind::Gauge,
        "kafka_topic_partitions",
    ),
    // Redis, PostgreSQL and NGINX receivers: a counter with unit `1` gets
    // `_total` and nothing for the unit (it was `NAME__1_total`).
    (
        "redis.keyspace.hits",
        "{hit}",
        Kind::Counter,
        "redis_keyspace_hits_total",
    ),
    (
        "redis.memory.used",
        "By",
        Kind::Gauge,
        "redis_memory_used_bytes",
    ),
    (
        "redis.clients.connected",
        "{client}",
        Kind::UpDown,
        "redis_clients_connected",
    ),
    (
        "postgresql.commits",
        "1",
        Kind::Counter,
        "postgresql_commits_total",
    ),
    (
        "postgresql.backends",
        "1",
        Kind::UpDown,
        "postgresql_backends",
    ),
    (
        "nginx.requests",
        "requests",
        Kind::Counter,
        "nginx_requests_total",
    ),
    (
        "nginx.connections_accepted",
        "connections",
        Kind::Counter,
        "nginx_connections_accepted_total",
    ),
    // The Collector's own telemetry.
    (
        "otelcol_exporter_sent_spans",
        "{spans}",
        Kind::Counter,
        "otelcol_exporter_sent_spans_total",
    ),
    (
        "otelcol_process_uptime",
        "s",
        Kind::Counter,
        "otelcol_process_uptime_seconds_total",
    ),
    (
        "otelcol_process_memory_rss",
        "By",
        Kind::Gauge,
        "otelcol_process_memory_rss_bytes",
    ),
    (
        "otelcol_exporter_queue_size",
        "{batches}",
        Kind::Gauge,
        "otelcol_exporter_queue_size",
    ),
    // The rules at their edges.
    ("requests_total", "", Kind::Counter, "requests_total"),
    (
        "http.requests.total.count",
        "",
        Kind::Counter,
        "http_requests_count_total",
    ),
    ("foo.ratio.bar", "1", Kind::Gauge, "foo_bar_ratio"),
    (
        "net.throughput",
        "By/s",
        Kind::Gauge,
        "net_throughput_bytes_per_second",
    ),
    (
        "data.rate",
        "KiBy/min",
        Kind::Gauge,
        "data_rate_kibibytes_per_min",
    ),
    (
        "throughput_per_second",
        "By/s",
        Kind::Gauge,
        "throughput_per_second_bytes_per_second",
    ),
    (
        "hw.temperature",
        "Cel",
        Kind::Gauge,
        "hw_temperature_celsius",
    ),
    ("disk.free", "%", Kind::Gauge, "disk_free_percent"),
    ("2xx.count", "", Kind::Gauge, "_2xx_count"),
    ("foo..bar__baz", "", Kind::Gauge, "foo_bar_baz"),
    ("latency.seconds", "s", Kind::Histogram, "latency_seconds"),
    (
        "system.network.io.bytes",
        "By",
        Kind::Counter,
        "system_network_io_bytes_total",
    ),
    ("custom", "widgets/{x}", Kind::Gauge, "custom_widgets"),
    ("m:cpu", "ms", Kind::Gauge, "m:cpu_milliseconds"),
    ("queue.depth", " {items} ", Kind::Gauge, "queue_depth"),
];

#[test]
fn otel_to_prometheus_names_as_the_prometheus_translator_builds_them() {
    assert!(NAMES.len() >= 50);
    let mut wrong = vec![];
    for &(name, unit, kind, want) in NAMES {
        let (counter, gauge) = match kind {
            Kind::Counter => (true, false),
            Kind::Gauge => (false, true),
            Kind::UpDown | Kind::Histogram => (false, false),
        };
        let got = prom_name(name, unit, counter, gauge, true);
        if got != want {
            wrong.push(format!("{name} [{unit}]: {got}, want {want}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Without unit suffixes, a counter still ends in `_total`.
    assert_eq!(
        prom_name("process.cpu.time", "s", true, false, false),
        "process_cpu_time_total"
    );
    assert_eq!(
        prom_name("process.cpu.utilization", "1", false, true, false),
        "process_cpu_utilization"
    );
}

#[test]
fn attribute_keys_to_prometheus_labels_as_the_prometheus_translator_builds_them() {
    for (key, want) in [
        ("http.request.method", "http_request_method"),
        ("service.instance.id", "service_instance_id"),
        ("k8s.pod.name", "k8s_pod_name"),
        ("net/peer", "net_peer"),
        ("a..b", "a_b"),
        ("2xx", "key_2xx"),
        ("__name__", "__name__"),
        ("__weird.key__", "__weird_key__"),
        ("_private", "_private"),
        (
            "messaging.kafka.consumer.group",
            "messaging_kafka_consumer_group",
        ),
    ] {
        assert_eq!(sanitize(key), want, "{key}");
    }
}

#[test]
fn attributes_that_sanitize_to_one_label_share_it_instead_of_one_replacing_the_other() {
    let batch = Batch::from_metrics(vec![ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![kv("service.name", "checkout")],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![Metric {
                name: "queue.depth".into(),
                unit: "{item}".into(),
                data: Some(metric::Data::Gauge(Gauge {
                    data_points: vec![NumberDataPoint {
                        // Out of order on purpose: the values join in the order of the keys.
                        attributes: vec![kv("a_b", "second"), kv("a.b", "first")],
                        time_unix_nano: T,
                        value: Some(number_data_point::Value::AsInt(7)),
                        ..Default::default()
                    }],
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }]);
    let req = exporter("http://127.0.0.1:9", "")
        .write_request(&batch)
        .expect("request");
    let depth = req
        .timeseries
        .iter()
        .find(|ts| ts.labels.iter().any(|l| l.value == "queue_depth"))
        .expect("queue_depth");
    let labels: Vec<(&str, &str)> = depth
        .labels
        .iter()
        .map(|l| (l.name.as_str(), l.value.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("__name__", "queue_depth"),
            ("a_b", "first;second"),
            ("job", "checkout")
        ]
    );
}

#[test]
fn exemplars_go_on_the_bucket_their_value_falls_in_and_on_counters() {
    use opentelemetry_proto::tonic::metrics::v1::{exemplar, Exemplar, Sum};
    let ex = |v: f64, trace: u8, attrs: Vec<KeyValue>| Exemplar {
        time_unix_nano: T,
        value: Some(exemplar::Value::AsDouble(v)),
        trace_id: vec![trace; 16],
        span_id: vec![trace; 8],
        filtered_attributes: attrs,
    };
    let long = "x".repeat(100);
    let batch = Batch::from_metrics(vec![ResourceMetrics {
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![
                Metric {
                    name: "http.server.request.duration".into(),
                    unit: "s".into(),
                    data: Some(metric::Data::Histogram(Histogram {
                        data_points: vec![HistogramDataPoint {
                            time_unix_nano: T,
                            count: 3,
                            sum: Some(2.4),
                            bucket_counts: vec![1, 1, 1],
                            explicit_bounds: vec![0.1, 0.5],
                            exemplars: vec![
                                ex(0.05, 1, vec![kv("http.route", "/a")]),
                                ex(0.5, 2, vec![]),
                                ex(2.0, 3, vec![kv("too.long", &long)]),
                            ],
                            ..Default::default()
                        }],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                    })),
                    ..Default::default()
                },
                Metric {
                    name: "orders".into(),
                    unit: "1".into(),
                    data: Some(metric::Data::Sum(Sum {
                        data_points: vec![NumberDataPoint {
                            time_unix_nano: T,
                            value: Some(number_data_point::Value::AsInt(7)),
                            exemplars: vec![ex(1.0, 4, vec![])],
                            ..Default::default()
                        }],
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    }]);
    let req = exporter("http://127.0.0.1:1", "")
        .write_request(&batch)
        .expect("request");
    type Labels = Vec<(String, String)>;
    let mut got: BTreeMap<String, Vec<(f64, Labels)>> = BTreeMap::new();
    for ts in &req.timeseries {
        let label = |n: &str| {
            ts.labels
                .iter()
                .find(|l| l.name == n)
                .map(|l| l.value.clone())
        };
        let key = format!(
            "{}{}",
            label("__name__").unwrap_or_default(),
            label("le")
                .map(|le| format!("{{le={le}}}"))
                .unwrap_or_default()
        );
        for e in &ts.exemplars {
            assert_eq!(e.timestamp, (T / 1_000_000) as i64);
            got.entry(key.clone()).or_default().push((
                e.value,
                e.labels
                    .iter()
                    .map(|l| (l.name.clone(), l.value.clone()))
                    .collect(),
            ));
        }
    }
    let one = |k: &str| {
        let v = &got[k];
        assert_eq!(v.len(), 1, "{k}: {v:?}");
        v[0].clone()
    };
    let (v, l) = one("http_server_request_duration_seconds_bucket{le=0.1}");
    assert_eq!(v, 0.05);
    assert_eq!(
        l,
        vec![
            ("trace_id".to_string(), "01".repeat(16)),
            ("span_id".to_string(), "01".repeat(8)),
            ("http_route".to_string(), "/a".to_string()),
        ]
    );
    // On the bound itself: that bucket (le is inclusive).
    assert_eq!(
        one("http_server_request_duration_seconds_bucket{le=0.5}").0,
        0.5
    );
    // Past the last bound: +Inf; an attribute that would pass Prometheus'
    // 128-rune limit is left out, the trace kept.
    let (v, l) = one("http_server_request_duration_seconds_bucket{le=+Inf}");
    assert_eq!(v, 2.0);
    assert_eq!(l.len(), 2, "{l:?}");
    assert_eq!(one("orders_total").1[0].1, "04".repeat(16));
    // Off: no exemplar at all.
    let req = exporter("http://127.0.0.1:1", "send_exemplars: false")
        .write_request(&batch)
        .expect("request");
    assert!(req.timeseries.iter().all(|t| t.exemplars.is_empty()));
}

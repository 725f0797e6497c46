//! The VictoriaMetrics exporter against an in-test server that decodes
//! Prometheus remote write (snappy and zstd) with its own message definitions.

use super::{prom_name, VictoriaMetricsConfig, VictoriaMetricsExporter};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use causeway_core::component::{ExportError, Exporter};
use causeway_core::config::decode;
use causeway_core::Batch;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
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
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(l, app).await });
    (format!("http://{addr}"), seen)
}

fn exporter(url: &str, extra: &str) -> VictoriaMetricsExporter {
    let cfg: VictoriaMetricsConfig =
        decode(&serde_yaml::from_str(&format!("endpoint: {url}\n{extra}")).expect("yaml"))
            .expect("valid");
    VictoriaMetricsExporter::new(cfg).expect("exporter")
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

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

#[test]
fn otel_to_prometheus_names() {
    assert_eq!(
        prom_name("http.server.duration", "ms", false, false, true),
        "http_server_duration_milliseconds"
    );
    assert_eq!(
        prom_name("kafka.consumer_group.lag", "{messages}", false, true, true),
        "kafka_consumer_group_lag"
    );
    assert_eq!(
        prom_name("system.network.io", "By", true, false, true),
        "system_network_io_bytes_total"
    );
    assert_eq!(
        prom_name("process.cpu.utilization", "1", false, true, true),
        "process_cpu_utilization_ratio"
    );
    assert_eq!(
        prom_name("net.throughput", "By/s", false, true, true),
        "net_throughput_bytes_per_second"
    );
    assert_eq!(
        prom_name("requests_total", "", true, false, true),
        "requests_total"
    );
    assert_eq!(prom_name("2xx.count", "", false, true, false), "_2xx_count");
}

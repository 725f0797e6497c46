//! The Loki exporter against an in-test server that decodes Loki's wire
//! formats (snappy `logproto.PushRequest`, JSON with gzip) with its own
//! message definitions, taken from Loki's `push.proto`.

use super::config::LokiConfig;
use super::LokiExporter;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use causeway_core::component::{ExportError, Exporter};
use causeway_core::config::decode;
use causeway_core::telemetry::Registry;
use causeway_core::Batch;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::io::Read;
use std::sync::{Arc, Mutex};

mod wire {
    // github.com/grafana/loki pkg/push/push.proto
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PushRequest {
        #[prost(message, repeated, tag = "1")]
        pub streams: Vec<Stream>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Stream {
        #[prost(string, tag = "1")]
        pub labels: String,
        #[prost(message, repeated, tag = "2")]
        pub entries: Vec<Entry>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Entry {
        #[prost(message, optional, tag = "1")]
        pub timestamp: Option<Ts>,
        #[prost(string, tag = "2")]
        pub line: String,
        #[prost(message, repeated, tag = "3")]
        pub structured_metadata: Vec<Pair>,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Pair {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(string, tag = "2")]
        pub value: String,
    }
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Ts {
        #[prost(int64, tag = "1")]
        pub seconds: i64,
        #[prost(int32, tag = "2")]
        pub nanos: i32,
    }
}

#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Bytes,
}

async fn server(status: StatusCode, reply: &'static str) -> (String, Arc<Mutex<Vec<Received>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let app = axum::Router::new().route(
        "/loki/api/v1/push",
        post(move |headers: HeaderMap, body: Bytes| {
            let seen = s2.clone();
            async move {
                seen.lock().expect("lock").push(Received { headers, body });
                (status, reply)
            }
        }),
    );
    (crate::testing::serve(app).await, seen)
}

fn exporter(url: &str, extra: &str) -> (LokiExporter, Registry) {
    let cfg: LokiConfig =
        decode(&serde_yaml::from_str(&format!("endpoint: {url}\n{extra}")).expect("yaml"))
            .expect("valid");
    let reg = Registry::new();
    (
        LokiExporter::new(cfg, "loki", reg.clone()).expect("exporter"),
        reg,
    )
}

use causeway_core::model::attribute as kv;

fn s(v: &str) -> any_value::Value {
    any_value::Value::StringValue(v.into())
}

fn record(route: &str, ts: u64, status: i64, severity: (i32, &str), body: &str) -> LogRecord {
    LogRecord {
        time_unix_nano: ts,
        severity_number: severity.0,
        severity_text: severity.1.into(),
        body: Some(AnyValue {
            value: Some(s(body)),
        }),
        attributes: vec![
            kv("route_id", s(route)),
            kv(
                "http.response.status_code",
                any_value::Value::IntValue(status),
            ),
        ],
        trace_id: vec![0xab; 16],
        span_id: vec![0xcd; 8],
        ..Default::default()
    }
}

fn batch(records: Vec<LogRecord>) -> Batch {
    Batch::from_logs(vec![ResourceLogs {
        resource: Some(Resource {
            attributes: vec![kv("service.name", s("gw"))],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: records,
            ..Default::default()
        }],
        ..Default::default()
    }])
}

fn decode_push(r: &Received) -> wire::PushRequest {
    assert_eq!(r.headers["content-type"], "application/x-protobuf");
    assert_eq!(r.headers["content-encoding"], "snappy");
    let raw = snap::raw::Decoder::new()
        .decompress_vec(&r.body)
        .expect("snappy block");
    wire::PushRequest::decode(raw.as_slice()).expect("logproto.PushRequest")
}

fn meta(e: &wire::Entry, k: &str) -> Option<String> {
    e.structured_metadata
        .iter()
        .find(|p| p.name == k)
        .map(|p| p.value.clone())
}

#[tokio::test]
async fn protobuf_streams_labels_metadata_and_unique_ordered_timestamps() {
    let (url, seen) = server(StatusCode::NO_CONTENT, "").await;
    let (exp, _) = exporter(&url, "tenant_id: team-a");
    let t = 1_795_946_400_000_000_000u64;
    let b = batch(vec![
        record("orders", t + 5, 200, (9, "INFO"), "second"),
        record("orders", t, 200, (9, "INFO"), "first"),
        record("orders", t + 5, 200, (9, "INFO"), "same timestamp"),
        record("payments", t, 503, (17, "ERROR"), "failed"),
    ]);
    exp.export(&b).await.expect("delivered");
    let got = seen.lock().expect("lock").clone();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers["x-scope-orgid"], "team-a");
    let push = decode_push(&got[0]);
    let labels: Vec<&str> = push.streams.iter().map(|s| s.labels.as_str()).collect();
    assert_eq!(
        labels,
        vec![
            r#"{level="error", route_id="payments", service_name="gw"}"#,
            r#"{level="info", route_id="orders", service_name="gw"}"#
        ]
    );
    let orders = &push.streams[1];
    let ts: Vec<u64> = orders
        .entries
        .iter()
        .map(|e| {
            let t = e.timestamp.clone().expect("ts");
            t.seconds as u64 * 1_000_000_000 + t.nanos as u64
        })
        .collect();
    assert_eq!(
        ts,
        vec![t, t + 5, t + 6],
        "ordered, and the duplicate nudged by 1 ns"
    );
    let lines: Vec<&str> = orders.entries.iter().map(|e| e.line.as_str()).collect();
    assert_eq!(lines, vec!["first", "second", "same timestamp"]);
    let e = &orders.entries[0];
    assert_eq!(
        meta(e, "trace_id").as_deref(),
        Some("abababababababababababababababab")
    );
    assert_eq!(meta(e, "span_id").as_deref(), Some("cdcdcdcdcdcdcdcd"));
    assert_eq!(meta(e, "http_response_status_code").as_deref(), Some("200"));
    assert_eq!(
        meta(e, "route_id"),
        None,
        "a label is not repeated as metadata"
    );
}

#[tokio::test]
async fn json_variant_with_gzip() {
    let (url, seen) = server(StatusCode::NO_CONTENT, "").await;
    let (exp, _) = exporter(&url, "encoding: json\ncompression: gzip");
    exp.export(&batch(vec![record(
        "orders",
        1_000_000_007,
        200,
        (13, "WARN"),
        "hello",
    )]))
    .await
    .expect("delivered");
    let got = seen.lock().expect("lock").clone();
    assert_eq!(got[0].headers["content-type"], "application/json");
    assert_eq!(got[0].headers["content-encoding"], "gzip");
    let mut text = String::new();
    flate2::read::GzDecoder::new(got[0].body.as_ref())
        .read_to_string(&mut text)
        .expect("gzip");
    let v: serde_json::Value = serde_json::from_str(&text).expect("json");
    let stream = &v["streams"][0];
    assert_eq!(
        stream["stream"],
        serde_json::json!({"level": "warn", "route_id": "orders", "service_name": "gw"})
    );
    assert_eq!(
        stream["values"][0][0], "1000000007",
        "nanoseconds as a string"
    );
    assert_eq!(stream["values"][0][1], "hello");
    assert_eq!(
        stream["values"][0][2]["trace_id"],
        "abababababababababababababababab"
    );
}

#[tokio::test]
async fn a_400_is_not_resent_and_its_rejects_are_counted() {
    let (url, seen) = server(
        StatusCode::BAD_REQUEST,
        "entry for stream '{route_id=\"orders\"}' has timestamp too old: ..., total ignored: 1 out of 3",
    )
    .await;
    let (exp, _) = exporter(&url, "");
    let b = batch(
        (0..3)
            .map(|i| record("orders", 1_000 + i, 200, (9, "INFO"), "x"))
            .collect(),
    );
    let d = exp
        .export(&b)
        .await
        .expect("partially accepted is a delivery, not a retry");
    assert_eq!(d.rejected, 1);
    assert_eq!(seen.lock().expect("lock").len(), 1);
    // A 400 without a count: permanent (the runner never resends it).
    let (url, _) = server(StatusCode::BAD_REQUEST, "error parsing labels").await;
    let (exp, _) = exporter(&url, "");
    assert!(matches!(
        exp.export(&b).await,
        Err(ExportError::Permanent { .. })
    ));
    // 429 and 5xx are retried.
    let (url, _) = server(StatusCode::TOO_MANY_REQUESTS, "rate limited").await;
    let (exp, _) = exporter(&url, "");
    assert!(matches!(
        exp.export(&b).await,
        Err(ExportError::Retryable { .. })
    ));
}

#[tokio::test]
async fn a_label_with_thousands_of_values_becomes_structured_metadata() {
    let (url, seen) = server(StatusCode::NO_CONTENT, "").await;
    let (exp, reg) = exporter(&url, "max_label_values: 100");
    let records: Vec<LogRecord> = (0..3000)
        .map(|i| record(&format!("route-{i}"), 1_000 + i, 200, (9, "INFO"), "x"))
        .collect();
    for chunk in records.chunks(500) {
        exp.export(&batch(chunk.to_vec())).await.expect("delivered");
    }
    let demoted = reg
        .counter(
            super::LabelsDemoted,
            &[("component", "loki"), ("label", "route_id")],
        )
        .get();
    assert_eq!(demoted, 1);
    let got = seen.lock().expect("lock").clone();
    let mut streams = std::collections::HashSet::new();
    let mut with_meta = 0;
    for r in &got {
        for st in decode_push(r).streams {
            for e in &st.entries {
                if meta(e, "route_id").is_some() {
                    with_meta += 1;
                }
            }
            streams.insert(st.labels);
        }
    }
    assert!(
        streams.len() <= 101,
        "streams stay bounded: {}",
        streams.len()
    );
    assert_eq!(
        with_meta, 2900,
        "after 100 values, route_id travels as structured metadata"
    );
}

#[test]
fn stream_keys_are_loki_label_sets_in_name_order_with_escapes() {
    let mut labels = Vec::new();
    super::set_label(&mut labels, "service_name", "checkout".into());
    super::set_label(&mut labels, "level", "info".into());
    super::set_label(&mut labels, "route_id", "a\"b\\c\nd".into());
    // A later value for the same label wins (attributes over the resource).
    super::set_label(&mut labels, "service_name", "payments".into());
    let key = super::write_labels(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    assert_eq!(
        key,
        r#"{level="info", route_id="a\"b\\c\nd", service_name="payments"}"#
    );
    let map: std::collections::BTreeMap<String, String> = labels.into_iter().collect();
    assert_eq!(super::label_string(&map), key);
}

/// Records are read where they lie: every kind of value is written as the
/// decoded record's was (strings as they are, numbers, hex, JSON).
#[test]
fn every_kind_of_value_reads_as_the_decoded_one() {
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValue, KeyValueList};
    let kv = |k: &str, v: any_value::Value| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    };
    let cases = [
        (Some(s("tail é")), "tail é"),
        (Some(any_value::Value::BoolValue(true)), "true"),
        (Some(any_value::Value::IntValue(-42)), "-42"),
        (Some(any_value::Value::DoubleValue(1.5)), "1.5"),
        (Some(any_value::Value::BytesValue(vec![0xab, 0x01])), "ab01"),
        (None, ""),
    ];
    for (v, want) in cases {
        let any = AnyValue { value: v };
        let enc = any.encode_to_vec();
        assert_eq!(super::any_str(&enc).expect("reads"), want);
        assert_eq!(
            super::any_to_string(&any),
            want,
            "the decoded record's text"
        );
    }
    // Arrays and key-value lists: the decoded value's JSON.
    for v in [
        any_value::Value::ArrayValue(ArrayValue {
            values: vec![AnyValue {
                value: Some(s("a")),
            }],
        }),
        any_value::Value::KvlistValue(KeyValueList {
            values: vec![kv("k", any_value::Value::IntValue(1))],
        }),
    ] {
        let any = AnyValue { value: Some(v) };
        let enc = any.encode_to_vec();
        let text = super::any_str(&enc).expect("reads");
        assert!(text.contains('a') || text.contains('k'), "{text}");
        assert_eq!(text, super::any_to_string(&any));
    }
    assert!(
        super::any_str(&[0x0a, 0x05, b'a']).is_err(),
        "a cut value is an error"
    );
}

//! Behaviour of the running daemon at its edges: OTLP/JSON equals its
//! protobuf twin, malformed and partially invalid requests, backpressure to
//! clients with retry hints, graceful shutdown, and the default pipeline.

mod common;

use bytes::Bytes;
use causeway_core::grpc::{export_path, ClientCodec};
use causeway_core::rpc::RpcStatus;
use causeway_core::Signal;
use common::*;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use std::collections::HashMap;
use std::time::Duration;
use tonic::codegen::http::uri::PathAndQuery;

use causeway_core::model::attribute as kv;

fn string(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.into())
}

/// A request of `n` spans named `{tag}-{i}`, each with its own trace.
fn traces(tag: &str, n: usize, seed: u64) -> ExportTraceServiceRequest {
    let spans = (0..n)
        .map(|i| {
            let id = seed * 10_000 + i as u64 + 1;
            let mut trace_id = vec![0xab; 8];
            trace_id.extend_from_slice(&id.to_be_bytes());
            Span {
                trace_id,
                span_id: id.to_be_bytes().to_vec(),
                name: format!("{tag}-{i}"),
                kind: span::SpanKind::Server as i32,
                start_time_unix_nano: 1_700_000_000_000_000_000,
                end_time_unix_nano: 1_700_000_000_100_000_000,
                attributes: vec![kv("http.route", string("/orders"))],
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", string("orders"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

async fn grpc_export(
    addr: &str,
    req: &ExportTraceServiceRequest,
) -> Result<ExportTraceServiceResponse, tonic::Status> {
    otlp_grpc_traces(addr, Bytes::from(req.encode_to_vec())).await
}

async fn http_post(
    url: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, HashMap<String, String>, Vec<u8>) {
    causeway_core::tls::install_crypto_provider();
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .expect("http post");
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    (status, headers, resp.bytes().await.expect("body").to_vec())
}

fn file_sink_config(extra_processors: &str, processors: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{{grpc}}" }}
      http: {{ endpoint: "127.0.0.1:{{http}}" }}
{extra_processors}
exporters:
  file: {{ path: "{{dir}}/out-{{signal}}.jsonl" }}
service:
  pipelines:
    all: {{ receivers: [otlp], processors: [{processors}], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    )
}

fn start_sink(dir: &std::path::Path, name: &str, config: &str) -> (Daemon, String, String) {
    let (g, h) = (free_port(), free_port());
    let d = Daemon::start(
        dir,
        name,
        &config
            .replace("{grpc}", &g.to_string())
            .replace("{http}", &h.to_string()),
    );
    (d, format!("127.0.0.1:{g}"), format!("127.0.0.1:{h}"))
}

const TWIN_JSON: &str = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"twin"}}]},
 "scopeSpans":[{"scope":{"name":"lib","version":"1"},
 "spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331","parentSpanId":"00f067aa0ba902b7",
  "name":"GET /twin","kind":2,"startTimeUnixNano":"1700000000000000000","endTimeUnixNano":"1700000000250000000",
  "attributes":[{"key":"http.response.status_code","value":{"intValue":"503"}},{"key":"ratio","value":{"doubleValue":0.25}},
   {"key":"tags","value":{"arrayValue":{"values":[{"stringValue":"a"}]}}}],
  "events":[{"timeUnixNano":"1700000000100000000","name":"exception","attributes":[{"key":"exception.message","value":{"stringValue":"boom"}}]}],
  "links":[{"traceId":"11111111111111111111111111111111","spanId":"2222222222222222"}],
  "status":{"code":2,"message":"bad"}, "unknownFieldIsIgnored": true}]}]}]}"#;

fn twin_proto() -> ExportTraceServiceRequest {
    let h = |s: &str| hex::decode(s).expect("hex");
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", string("twin"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "lib".into(),
                    version: "1".into(),
                    ..Default::default()
                }),
                spans: vec![Span {
                    trace_id: h("0af7651916cd43dd8448eb211c80319c"),
                    span_id: h("b7ad6b7169203331"),
                    parent_span_id: h("00f067aa0ba902b7"),
                    name: "GET /twin".into(),
                    kind: 2,
                    start_time_unix_nano: 1_700_000_000_000_000_000,
                    end_time_unix_nano: 1_700_000_000_250_000_000,
                    attributes: vec![
                        kv("http.response.status_code", any_value::Value::IntValue(503)),
                        kv("ratio", any_value::Value::DoubleValue(0.25)),
                        kv(
                            "tags",
                            any_value::Value::ArrayValue(ArrayValue {
                                values: vec![AnyValue {
                                    value: Some(string("a")),
                                }],
                            }),
                        ),
                    ],
                    events: vec![span::Event {
                        time_unix_nano: 1_700_000_000_100_000_000,
                        name: "exception".into(),
                        attributes: vec![kv("exception.message", string("boom"))],
                        ..Default::default()
                    }],
                    links: vec![span::Link {
                        trace_id: h("11111111111111111111111111111111"),
                        span_id: h("2222222222222222"),
                        ..Default::default()
                    }],
                    status: Some(Status {
                        code: 2,
                        message: "bad".into(),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn json_request_is_exported_identically_to_its_protobuf_twin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, grpc, http) = start_sink(dir.path(), "twin", &file_sink_config("", ""));
    let url = format!("http://{http}/v1/traces");
    let (s, _, body) = http_post(&url, "application/json", TWIN_JSON.as_bytes().to_vec()).await;
    assert_eq!(s, 200, "{}", String::from_utf8_lossy(&body));
    let (s, h, body) =
        http_post(&url, "application/x-protobuf", twin_proto().encode_to_vec()).await;
    assert_eq!(s, 200);
    assert_eq!(
        h.get("content-type").map(String::as_str),
        Some("application/x-protobuf")
    );
    assert_eq!(
        ExportTraceServiceResponse::decode(body.as_slice())
            .expect("response")
            .partial_success,
        None
    );
    grpc_export(&grpc, &twin_proto())
        .await
        .expect("grpc export");
    let path = dir.path().join("out-traces.jsonl");
    wait_for(Duration::from_secs(10), "three lines", || {
        read_jsonl(&path).len() == 3
    });
    assert!(d.terminate().success());
    let lines = read_jsonl(&path);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], lines[1], "JSON and protobuf over HTTP differ");
    assert_eq!(lines[1], lines[2], "HTTP and gRPC differ");
    let sp = &spans(&lines)[0].2;
    assert_eq!(sp["traceId"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(sp["parentSpanId"], "00f067aa0ba902b7");
    assert_eq!(
        attr(&sp["attributes"], "http.response.status_code").expect("attr")["intValue"],
        "503"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_and_partially_invalid_requests() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, grpc, http) = start_sink(dir.path(), "bad", &file_sink_config("", ""));
    let url = format!("http://{http}/v1/traces");

    // Malformed protobuf: 400 with a google.rpc.Status naming the problem; gRPC INVALID_ARGUMENT.
    let (s, _, body) = http_post(&url, "application/x-protobuf", vec![0x0a, 0x7f, 0x01]).await;
    assert_eq!(s, 400);
    let st = RpcStatus::decode(body.as_slice()).expect("status body");
    assert!(st.message.contains("malformed protobuf"), "{}", st.message);
    // Where: the byte offset of the problem (the length at byte 1 announces 127 bytes, 1 follows).
    let offset: usize = st
        .message
        .split("at byte ")
        .nth(1)
        .and_then(|x| x.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|x| x.parse().ok())
        .unwrap_or_else(|| panic!("no byte offset in {:?}", st.message));
    assert!(offset <= 3, "{}", st.message);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.expect("ready");
    let err = client
        .unary(
            tonic::Request::new(vec![Bytes::from_static(&[0x0a, 0x7f, 0x01])]),
            PathAndQuery::from_static(export_path(Signal::Traces)),
            ClientCodec::<ExportTraceServiceResponse>::default(),
        )
        .await
        .expect_err("must fail");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);

    // Invalid JSON: 400 with the parser's position.
    let (s, _, body) =
        http_post(&url, "application/json", b"{\"resourceSpans\": [}".to_vec()).await;
    assert_eq!(s, 400);
    let msg = String::from_utf8_lossy(&body);
    assert!(msg.contains("line 1 column"), "{msg}");

    // Unsupported content type: 415.
    let (s, _, _) = http_post(&url, "text/plain", b"hello".to_vec()).await;
    assert_eq!(s, 415);

    // A span with a 15-byte trace id next to a valid one: partial success, the valid one flows.
    let mut req = traces("partial", 2, 7);
    req.resource_spans[0].scope_spans[0].spans[0].trace_id.pop();
    let resp = grpc_export(&grpc, &req).await.expect("accepted");
    let ps = resp.partial_success.expect("partial success");
    assert_eq!(ps.rejected_spans, 1);
    assert!(
        ps.error_message.contains("trace_id must be 16 bytes"),
        "{}",
        ps.error_message
    );

    // An all-zero trace id is as invalid as a short one.
    let mut req = traces("zeros", 2, 8);
    req.resource_spans[0].scope_spans[0].spans[0].trace_id = vec![0; 16];
    let resp = grpc_export(&grpc, &req).await.expect("accepted");
    let ps = resp.partial_success.expect("partial success");
    assert_eq!(ps.rejected_spans, 1);
    assert!(
        ps.error_message.contains("not all zeros"),
        "{}",
        ps.error_message
    );

    // A log record without ids is valid.
    let logs = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    body: Some(AnyValue {
                        value: Some(string("no ids")),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let (s, _, body) = http_post(
        &format!("http://{http}/v1/logs"),
        "application/x-protobuf",
        logs.encode_to_vec(),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(
        ExportLogsServiceResponse::decode(body.as_slice())
            .expect("resp")
            .partial_success,
        None
    );

    let path = dir.path().join("out-traces.jsonl");
    wait_for(Duration::from_secs(10), "the valid span", || {
        !spans(&read_jsonl(&path)).is_empty()
    });
    assert!(
        d.metric("causeway_receiver_refused_items_total{component=\"otlp\",signal=\"traces\"}")
            .expect("metric")
            >= 3.0
    );
    assert!(d.terminate().success());
    let got = spans(&read_jsonl(&path));
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].2["name"], "partial-1");
    assert_eq!(got[1].2["name"], "zeros-1");
    assert_eq!(
        log_records(&read_jsonl(&dir.path().join("out-logs.jsonl"))).len(),
        1
    );
}

/// Every hostile input of RELIABILITY.md that reaches the OTLP receiver:
/// each is refused with its reason, the daemon stays up, and a valid
/// request sent after them flows.
#[tokio::test(flavor = "multi_thread")]
async fn hostile_requests_are_refused_with_a_reason_and_valid_data_still_flows() {
    use std::io::Write;
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, grpc, http) = start_sink(dir.path(), "hostile", &file_sink_config("", ""));
    let url = format!("http://{http}/v1/traces");
    let reason = |body: &[u8]| {
        RpcStatus::decode(body)
            .map(|s| s.message)
            .unwrap_or_else(|_| String::from_utf8_lossy(body).into_owned())
    };

    // Over max_request_body_size (20 MiB): 413 before anything is decoded.
    let (s, _, body) = http_post(&url, "application/x-protobuf", vec![0u8; 21 << 20]).await;
    assert_eq!(s, 413, "{}", reason(&body));

    // A gzip bomb: 64 KiB that inflates past 20 MiB: 413, inflation stops at the limit.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&vec![0u8; 64 << 20]).expect("gzip");
    let bomb = gz.finish().expect("gzip");
    assert!(bomb.len() < 1 << 20);
    causeway_core::tls::install_crypto_provider();
    let resp = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-protobuf")
        .header("content-encoding", "gzip")
        .body(bomb)
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status().as_u16(), 413);
    let body = resp.bytes().await.expect("body");
    assert!(
        reason(&body).contains("decompressed body exceeds"),
        "{}",
        reason(&body)
    );

    // gRPC: a message over max_recv_msg_size_mib (4 MiB) is refused.
    let mut big = traces("big", 1, 1);
    big.resource_spans[0].scope_spans[0].spans[0].name = "x".repeat(5 << 20);
    let e = grpc_export(&grpc, &big).await.expect_err("too large");
    assert!(
        matches!(
            e.code(),
            tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
        ),
        "{e:?}"
    );

    // gRPC, compressed: a zstd bomb (inflates past 4 MiB) is RESOURCE_EXHAUSTED,
    // an encoding nobody speaks is UNIMPLEMENTED and says which ones work,
    // garbage under zstd and a compressed flag without grpc-encoding are
    // errors; a valid snappy message next to them is accepted.
    {
        use causeway_core::compress::{Codec, Transport};
        use causeway_core::grpc::{export_path, unary, unary_headers, UnaryError};
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
            .expect("endpoint")
            .connect_lazy();
        let headers = unary_headers(Default::default());
        let path = export_path(causeway_core::Signal::Traces);
        let bomb = Codec::Zstd
            .compress(Transport::Grpc, &[Bytes::from(vec![0u8; 64 << 20])])
            .expect("zstd");
        assert!(bomb.len() < 1 << 20);
        match unary(&ch, path, &headers, Codec::Zstd, vec![bomb]).await {
            Err(UnaryError::Status(s)) => {
                assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
                assert!(
                    s.message().contains("decompressed message exceeds"),
                    "{s:?}"
                );
            }
            other => panic!("zstd bomb: {other:?}"),
        }
        let mut h = headers.clone();
        h.insert(
            "grpc-encoding",
            tonic::codegen::http::HeaderValue::from_static("br"),
        );
        let valid = Bytes::from(traces("snappy", 1, 9).encode_to_vec());
        match unary(&ch, path, &h, Codec::None, vec![valid.clone()]).await {
            Err(UnaryError::Status(s)) => {
                assert_eq!(s.code(), tonic::Code::Unimplemented, "{s:?}");
                assert!(s.message().contains("gzip, zstd, snappy"), "{s:?}");
            }
            other => panic!("unknown encoding: {other:?}"),
        }
        match unary(
            &ch,
            path,
            &headers,
            Codec::Zstd,
            vec![Bytes::from_static(b"not zstd")],
        )
        .await
        {
            Err(UnaryError::Status(s)) => assert_eq!(s.code(), tonic::Code::Internal, "{s:?}"),
            other => panic!("garbage: {other:?}"),
        }
        let snappy = Codec::Snappy
            .compress(Transport::Grpc, &[valid])
            .expect("snappy");
        unary(&ch, path, &headers, Codec::Snappy, vec![snappy])
            .await
            .expect("a valid snappy message is accepted");
        assert!(
            d.metric(
                "causeway_receiver_wire_bytes_total{receiver=\"otlp\",transport=\"grpc\",encoding=\"snappy\"}"
            )
            .is_some_and(|v| v > 0.0),
            "counted as snappy"
        );
    }

    // Invalid UTF-8 in a string field (the span name), found without decoding: 400.
    let mut req = traces("utf8", 1, 2);
    req.resource_spans[0].scope_spans[0].spans[0].name = "zzzz".into();
    let mut raw = req.encode_to_vec();
    let at = raw.windows(4).position(|w| w == b"zzzz").expect("name");
    raw[at] = 0xff;
    let (s, _, body) = http_post(&url, "application/x-protobuf", raw).await;
    assert_eq!(s, 400);
    assert!(
        reason(&body).contains("not valid UTF-8"),
        "{}",
        reason(&body)
    );

    // An attribute nested 100 arrays deep: 400.
    let mut v = AnyValue {
        value: Some(string("deep")),
    };
    for _ in 0..100 {
        v = AnyValue {
            value: Some(any_value::Value::ArrayValue(
                opentelemetry_proto::tonic::common::v1::ArrayValue { values: vec![v] },
            )),
        };
    }
    let mut deep = traces("deep", 1, 3);
    deep.resource_spans[0].scope_spans[0].spans[0].attributes = vec![KeyValue {
        key: "k".into(),
        value: Some(v),
        ..Default::default()
    }];
    let (s, _, body) = http_post(&url, "application/x-protobuf", deep.encode_to_vec()).await;
    assert_eq!(s, 400);
    assert!(reason(&body).contains("nest deeper"), "{}", reason(&body));

    // JSON nested past serde_json's recursion limit: 400, no stack overflow.
    let json = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{{\"attributes\":[{{\"key\":\"k\",\"value\":{}\"x\"{}}}]}}]}}]}}]}}",
        "{\"arrayValue\":{\"values\":[".repeat(5000),
        "]}}".repeat(5000)
    );
    let (s, _, body) = http_post(&url, "application/json", json.into_bytes()).await;
    assert_eq!(s, 400, "{}", reason(&body));

    // Absurd timestamps (end before start, year 2554): accepted as sent;
    // the sampler and the analysis treat end < start as no time.
    let mut odd = traces("odd", 1, 4);
    odd.resource_spans[0].scope_spans[0].spans[0].start_time_unix_nano = u64::MAX;
    odd.resource_spans[0].scope_spans[0].spans[0].end_time_unix_nano = 1;
    grpc_export(&grpc, &odd).await.expect("accepted");

    // The daemon is up and a valid request flows.
    grpc_export(&grpc, &traces("valid", 1, 5))
        .await
        .expect("accepted");
    let path = dir.path().join("out-traces.jsonl");
    wait_for(
        Duration::from_secs(10),
        "the snappy, the odd and the valid span",
        || spans(&read_jsonl(&path)).len() == 3,
    );
    assert!(d.terminate().success());
    let names: Vec<String> = spans(&read_jsonl(&path))
        .iter()
        .map(|(_, _, s)| s["name"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(names, ["snappy-0", "odd-0", "valid-0"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn backpressure_gives_retryable_refusals_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b_grpc = free_port();
    let a_config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{{grpc}}" }}
      http: {{ endpoint: "127.0.0.1:{{http}}" }}
exporters:
  otlp/down:
    endpoint: 127.0.0.1:{b_grpc}
    timeout: 1s
    retry_on_failure: {{ initial_interval: 50ms, max_interval: 200ms, max_elapsed_time: 0s }}
    sending_queue: {{ queue_size: 1, num_consumers: 1 }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [otlp/down] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    );
    let (a, a_grpc, a_http) = start_sink(dir.path(), "a", &a_config);

    // Downstream unreachable: send until the receiver refuses.
    let mut accepted = Vec::new();
    let mut refused = None;
    for i in 0..1000u64 {
        let req = traces("bp", 5, i);
        match grpc_export(&a_grpc, &req).await {
            Ok(_) => accepted.push(req),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                let detail = RpcStatus::decode(status.details()).expect("status details");
                assert!(detail.retry_delay().is_some(), "RetryInfo must be attached");
                refused = Some(req);
                break;
            }
        }
    }
    let refused = refused.expect("the receiver never refused: no backpressure");
    assert!(!accepted.is_empty());

    // HTTP clients get 503 with Retry-After while full.
    let (s, h, _) = http_post(
        &format!("http://{a_http}/v1/traces"),
        "application/x-protobuf",
        traces("bp-http", 1, 99_999).encode_to_vec(),
    )
    .await;
    assert_eq!(s, 503);
    assert!(
        h.get("retry-after")
            .is_some_and(|v| v.parse::<u64>().is_ok()),
        "{h:?}"
    );

    // Downstream comes back.
    let b_config = sink_config(b_grpc, "b-{signal}.jsonl", &["traces"]);
    let b = Daemon::start(dir.path(), "b", &b_config);
    // The client re-sends what was refused, as an OTLP client does.
    let mut resend_ok = false;
    for _ in 0..300 {
        if grpc_export(&a_grpc, &refused).await.is_ok() {
            resend_ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(resend_ok, "re-sent request never accepted after recovery");
    accepted.push(refused);

    let expected: usize = accepted.len() * 5;
    let path = dir.path().join("b-traces.jsonl");
    wait_for(Duration::from_secs(60), "every accepted span at B", || {
        spans(&read_jsonl(&path)).len() >= expected
    });
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    let mut names: Vec<String> = spans(&read_jsonl(&path))
        .iter()
        .map(|(_, _, s)| format!("{}/{}", s["name"], s["spanId"]))
        .collect();
    let n = names.len();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), n, "duplicates delivered");
    assert_eq!(n, expected, "accepted spans missing");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_flushes_everything_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The batch processor would hold these for an hour: only the shutdown flush writes them.
    let cfg = file_sink_config(
        "processors:\n  batch: { send_batch_size: 1000000, timeout: 1h }",
        "batch",
    );
    let (d, grpc, _) = start_sink(dir.path(), "shutdown", &cfg);
    for i in 0..10 {
        grpc_export(&grpc, &traces("term", 10, i))
            .await
            .expect("accepted");
    }
    let path = dir.path().join("out-traces.jsonl");
    assert!(
        spans(&read_jsonl(&path)).is_empty(),
        "batch should still hold the spans"
    );
    let status = d.terminate();
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(spans(&read_jsonl(&path)).len(), 100);
}

#[tokio::test(flavor = "multi_thread")]
async fn default_pipeline_runs_without_external_services() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (g, h, t) = (free_port(), free_port(), free_port());
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/pipeline.yaml");
    let data = dir.path().join("data");
    let d = Daemon::spawn(
        dir.path(),
        "default",
        &["--config", config],
        &[
            ("CAUSEWAY_OTLP_GRPC_ENDPOINT", format!("127.0.0.1:{g}")),
            ("CAUSEWAY_OTLP_HTTP_ENDPOINT", format!("127.0.0.1:{h}")),
            ("CAUSEWAY_TELEMETRY_ENDPOINT", format!("127.0.0.1:{t}")),
            ("CAUSEWAY_DATA_DIR", data.display().to_string()),
        ],
        format!("127.0.0.1:{t}"),
    );
    grpc_export(&format!("127.0.0.1:{g}"), &traces("default", 3, 1))
        .await
        .expect("grpc");
    let (s, _, _) = http_post(
        &format!("http://127.0.0.1:{h}/v1/traces"),
        "application/json",
        TWIN_JSON.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(s, 200);
    let path = data.join("traces.jsonl");
    wait_for(
        Duration::from_secs(10),
        "spans in the default file sink",
        || spans(&read_jsonl(&path)).len() == 4,
    );
    assert_eq!(
        d.metric("causeway_receiver_accepted_items_total{component=\"otlp\",signal=\"traces\"}"),
        Some(4.0)
    );
    wait_for(Duration::from_secs(10), "exporter counters", || {
        d.metric("causeway_exporter_sent_items_total{component=\"file\",signal=\"traces\"}")
            == Some(4.0)
    });
    let (code, _) = http_get(&d.telemetry, "/healthz").expect("healthz");
    assert_eq!(code, 200);
    assert!(d.terminate().success());
    let stdout = std::fs::read_to_string(dir.path().join("default.stdout")).expect("stdout");
    assert!(
        stdout.contains("debug: traces:"),
        "debug exporter output: {stdout}"
    );
}

/// Absurd timestamps through tail sampling and root-cause analysis in the
/// running daemon: a span that starts at 2^64-1 and one that ends before it
/// starts are accepted as sent, decided and analysed (as no time), and the
/// valid trace next to them is kept and annotated as usual.
#[tokio::test(flavor = "multi_thread")]
async fn absurd_timestamps_pass_tail_sampling_and_correlate_without_harm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = file_sink_config(
        r#"processors:
  tail_sampling:
    decision_wait: 300ms
    policies: [{ name: all, type: always_sample }]
  correlate: {}"#,
        "tail_sampling, correlate",
    );
    let (d, grpc, _) = start_sink(dir.path(), "absurd", &cfg);
    let mut req = traces("absurd", 3, 9);
    let spans_ = &mut req.resource_spans[0].scope_spans[0].spans;
    spans_[0].start_time_unix_nano = u64::MAX;
    spans_[0].end_time_unix_nano = u64::MAX;
    spans_[1].start_time_unix_nano = 1_700_000_000_500_000_000;
    spans_[1].end_time_unix_nano = 1_700_000_000_000_000_000; // ends before it starts
    grpc_export(&grpc, &req).await.expect("accepted as sent");
    let path = dir.path().join("out-traces.jsonl");
    wait_for(Duration::from_secs(20), "all three analysed", || {
        let got = spans(&read_jsonl(&path));
        got.len() == 3
            && got.iter().all(|(_, _, sp)| {
                sp["attributes"]
                    .as_array()
                    .is_some_and(|a| a.iter().any(|kv| kv["key"] == "rca.cause"))
            })
    });
    let got = spans(&read_jsonl(&path));
    let start_of = |name: &str| {
        got.iter()
            .find(|(_, _, sp)| sp["name"] == name)
            .map(|(_, _, sp)| sp["startTimeUnixNano"].clone())
    };
    assert_eq!(
        start_of("absurd-0"),
        Some(serde_json::json!(u64::MAX.to_string()))
    );
    assert!(d.terminate().success(), "no panic, a clean exit");
}

use super::config::{OtlpGrpcConfig, OtlpHttpConfig};
use super::grpc::GrpcExporter;
use super::http::HttpExporter;
use axum::http::StatusCode;
use axum::routing::post;
use bytes::Bytes;
use causeway_core::component::{ExportError, Exporter};
use causeway_core::config::decode;
use causeway_core::rpc::{code, RpcStatus};
use causeway_core::{Batch, Signal};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message;
use std::sync::{Arc, Mutex};
use std::time::Duration;

fn yaml(s: &str) -> serde_yaml::Value {
    serde_yaml::from_str(s).expect("yaml")
}

fn batch() -> Batch {
    Batch::from_encoded(Signal::Traces, Bytes::new(), 2)
}

/// An OTLP/HTTP server answering `status`, `headers` and `body`; records request bodies.
async fn server(
    status: StatusCode,
    headers: Vec<(&'static str, &'static str)>,
    body: Vec<u8>,
) -> (String, Arc<Mutex<Vec<(Option<String>, Vec<u8>)>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |h: axum::http::HeaderMap, b: Bytes| {
            let seen = s2.clone();
            let headers = headers.clone();
            let body = body.clone();
            async move {
                let enc = h
                    .get("content-encoding")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string);
                seen.lock().expect("lock").push((enc, b.to_vec()));
                let mut r = axum::response::Response::new(axum::body::Body::from(body));
                *r.status_mut() = status;
                for (k, v) in headers {
                    r.headers_mut().insert(k, v.parse().expect("header"));
                }
                r
            }
        }),
    );
    (crate::testing::serve(app).await, seen)
}

fn http_exporter(endpoint: &str, extra: &str) -> HttpExporter {
    let cfg: OtlpHttpConfig =
        decode(&yaml(&format!("endpoint: {endpoint}\n{extra}"))).expect("config");
    HttpExporter::new(&cfg, None).expect("exporter")
}

#[tokio::test]
async fn http_503_with_retry_after_is_retryable_with_the_hint() {
    let (url, seen) = server(
        StatusCode::SERVICE_UNAVAILABLE,
        vec![("retry-after", "7")],
        vec![],
    )
    .await;
    match http_exporter(&url, "").export(&batch()).await {
        Err(ExportError::Retryable { retry_after, .. }) => {
            assert_eq!(retry_after, Some(Duration::from_secs(7)))
        }
        other => panic!("expected retryable, got {other:?}"),
    }
    assert_eq!(
        seen.lock().expect("lock")[0].0.as_deref(),
        Some("gzip"),
        "gzip by default"
    );
}

#[tokio::test]
async fn http_400_is_permanent_and_carries_the_servers_message() {
    let body = RpcStatus::new(code::INVALID_ARGUMENT, "bad span", None).encode_to_vec();
    let (url, _) = server(StatusCode::BAD_REQUEST, vec![], body).await;
    match http_exporter(&url, "compression: none")
        .export(&batch())
        .await
    {
        Err(ExportError::Permanent { source }) => {
            assert!(source.to_string().contains("bad span"), "{source}")
        }
        other => panic!("expected permanent, got {other:?}"),
    }
}

#[tokio::test]
async fn http_partial_success_is_counted_not_retried() {
    let resp = ExportTraceServiceResponse {
        partial_success: Some(ExportTracePartialSuccess {
            rejected_spans: 1,
            error_message: "one bad".into(),
        }),
    };
    let (url, seen) = server(StatusCode::OK, vec![], resp.encode_to_vec()).await;
    let d = http_exporter(&url, "compression: none")
        .export(&batch())
        .await
        .expect("delivered");
    assert_eq!(d.rejected, 1);
    assert_eq!(
        seen.lock().expect("lock")[0].0,
        None,
        "no content-encoding with compression: none"
    );
}

#[tokio::test]
async fn http_connection_refused_is_retryable() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", l.local_addr().expect("addr"));
    drop(l);
    assert!(matches!(
        http_exporter(&url, "").export(&batch()).await,
        Err(ExportError::Retryable {
            retry_after: None,
            ..
        })
    ));
}

#[tokio::test]
async fn grpc_status_codes_are_classified_as_the_otlp_spec_says() {
    let cfg: OtlpGrpcConfig = decode(&yaml("endpoint: 127.0.0.1:1")).expect("config");
    let exp = GrpcExporter::new(&cfg, None).expect("exporter");
    let with_retry = |c: tonic::Code, n: i32| {
        tonic::Status::with_details(
            c,
            "x",
            Bytes::from(RpcStatus::new(n, "x", Some(Duration::from_millis(1500))).encode_to_vec()),
        )
    };
    let cases = [
        (tonic::Status::unavailable("x"), Some(None)),
        (tonic::Status::deadline_exceeded("x"), Some(None)),
        (tonic::Status::resource_exhausted("x"), None),
        (
            with_retry(tonic::Code::ResourceExhausted, code::RESOURCE_EXHAUSTED),
            Some(Some(Duration::from_millis(1500))),
        ),
        (
            with_retry(tonic::Code::Unavailable, code::UNAVAILABLE),
            Some(Some(Duration::from_millis(1500))),
        ),
        (tonic::Status::invalid_argument("x"), None),
        (tonic::Status::internal("x"), None),
        (tonic::Status::unimplemented("x"), None),
    ];
    for (status, expect) in cases {
        let code = status.code();
        match (exp.classify(status), expect) {
            (ExportError::Retryable { retry_after, .. }, Some(hint)) => {
                assert_eq!(retry_after, hint, "{code:?}")
            }
            (ExportError::Permanent { .. }, None) => {}
            (got, want) => panic!("{code:?}: got {got:?}, want retryable={}", want.is_some()),
        }
    }
}

#[test]
fn config_rejects_bad_endpoints_and_values() {
    // https without ca_file is valid: the system's roots apply, as in the Collector.
    assert!(decode::<OtlpGrpcConfig>(&yaml("endpoint: https://jaeger:4317")).is_ok());
    let errs = decode::<OtlpGrpcConfig>(&yaml(
        "endpoint: ftp://jaeger:4317\ntimeout: 0s\nsending_queue: { queue_size: 0 }",
    ))
    .expect_err("invalid");
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"endpoint"), "{errs:?}");
    assert!(paths.contains(&"timeout"), "{errs:?}");
    assert!(paths.contains(&"sending_queue.queue_size"), "{errs:?}");
}

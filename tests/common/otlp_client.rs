//! An OTLP client for the end-to-end tests: one span, over gRPC.

use std::time::Duration;

/// An export of one span, encoded.
pub fn trace_body() -> Vec<u8> {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![7; 8],
                    name: "over-tls".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
}

/// Export one span over gRPC to `localhost:port` (5 s deadlines), with
/// `tls` and the bearer `token` when given; the status on failure.
pub async fn grpc_export(
    port: u16,
    tls: Option<tonic::transport::ClientTlsConfig>,
    token: Option<&str>,
) -> Result<(), String> {
    grpc_export_within(port, tls, token, Duration::from_secs(5)).await
}

/// [`grpc_export`] with `deadline` for connecting and for the call.
pub async fn grpc_export_within(
    port: u16,
    tls: Option<tonic::transport::ClientTlsConfig>,
    token: Option<&str>,
    deadline: Duration,
) -> Result<(), String> {
    use causeway_core::grpc::{export_path, ClientCodec};
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut ep = tonic::transport::Endpoint::from_shared(format!("{scheme}://localhost:{port}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(deadline)
        .timeout(deadline);
    if let Some(t) = tls {
        ep = ep.tls_config(t).map_err(|e| e.to_string())?;
    }
    let channel = ep.connect().await.map_err(|e| format!("connect: {e:?}"))?;
    let mut client = tonic::client::Grpc::new(channel);
    client.ready().await.map_err(|e| format!("ready: {e}"))?;
    let mut req = tonic::Request::new(vec![bytes::Bytes::from(trace_body())]);
    if let Some(t) = token {
        req.metadata_mut().insert(
            "authorization",
            format!("Bearer {t}").parse().map_err(|e| format!("{e}"))?,
        );
    }
    client
        .unary::<_, opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse, _>(
            req,
            tonic::codegen::http::uri::PathAndQuery::from_static(export_path(causeway_core::Signal::Traces)),
            ClientCodec::default(),
        )
        .await
        .map(|_| ())
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

//! OTLP/HTTP: `POST /v1/{traces,logs,metrics}` with protobuf or JSON bodies,
//! and `POST /v1development/profiles` with protobuf bodies (the Collector's
//! fixed path), optionally compressed (gzip, zstd, snappy), answered in the
//! request's encoding.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use causeway_core::compress::{Codec, CompressError, Transport};
use causeway_core::rpc::{code, RpcStatus};
use causeway_core::topology::Output;
use prost::Message;
use serde::de::DeserializeOwned;
use serde::Serialize;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::body::{drain, read_body, ReadError};
use super::config::HttpConfig;
use super::grpc::{Kind, Logs, Metrics, Profiles, Traces};
use super::{ingest, Admission, Refused};
use crate::ReceiverError;
use causeway_core::telemetry::Registry;
use causeway_core::tls::Authenticator;

struct HttpState {
    out: Output,
    adm: Admission,
    max_body: usize,
    auth: Option<Authenticator>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Proto,
    Json,
}

/// Serve OTLP/HTTP on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    cfg: HttpConfig,
    out: Output,
    adm: Admission,
    telemetry: Registry,
    shutdown: CancellationToken,
) -> Result<(), ReceiverError> {
    let serve_err = |message: String| ReceiverError::Serve {
        protocol: "http",
        message,
    };
    let (tls, auth) = super::security(
        &listener,
        &adm,
        "http",
        cfg.tls.as_ref(),
        cfg.auth.as_ref(),
        &[b"h2", b"http/1.1"],
    )
    .map_err(serve_err)?;
    let receiver = adm.receiver.clone();
    let state = Arc::new(HttpState {
        out,
        adm,
        max_body: usize::try_from(cfg.max_request_body_size.0).unwrap_or(usize::MAX),
        auth,
    });
    let mut app = Router::new()
        .route(&cfg.traces_url_path, post(handle::<Traces, TraceReq>))
        .route(&cfg.logs_url_path, post(handle::<Logs, LogsReq>))
        .route(&cfg.metrics_url_path, post(handle::<Metrics, MetricsReq>));
    // Profiles only where a pipeline takes them (404 elsewhere, as the
    // Collector).
    if state.out.accepts(causeway_core::Signal::Profiles) {
        app = app.route(PROFILES_PATH, post(handle::<Profiles, ProfilesReq>));
    }
    let app = app
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state);
    let limits = cfg.connections;
    let conns = causeway_core::conn::accept(
        &format!("{receiver}/http"),
        listener,
        tls,
        limits,
        &telemetry,
        shutdown.clone(),
    );
    causeway_core::conn::serve_http(conns, app, limits, shutdown).await;
    Ok(())
}

type TraceReq = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
type LogsReq = opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
type MetricsReq = opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
type ProfilesReq =
    opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;

/// Where profiles are posted: the Collector's path, not configurable there
/// either.
pub(crate) const PROFILES_PATH: &str = "/v1development/profiles";

async fn handle<K, Req>(
    State(st): State<Arc<HttpState>>,
    headers: HeaderMap,
    body: Body,
) -> Response
where
    K: Kind,
    K::Response: Serialize,
    Req: Message + DeserializeOwned,
{
    if let Some(a) = &st.auth {
        if !a.check(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes())) {
            tracing::debug!(receiver = %st.adm.receiver, "Request refused: missing or wrong credentials.");
            // Read (and throw away) what the client is still sending, so that
            // it reads the 401 and its reason: answered with the body unread,
            // HTTP/2 resets the stream and clients (curl: exit 92) report
            // that instead. Bounded like any body, and 10 s at most.
            drain(body, st.max_body).await;
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, a.scheme())],
                format!(
                    "missing or wrong credentials: send an `Authorization: {} …` header with the credentials of the receiver's `auth`",
                    a.scheme()
                ),
            )
                .into_response();
        }
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let encoding = if content_type.starts_with("application/x-protobuf")
        || content_type.starts_with("application/protobuf")
    {
        Encoding::Proto
    } else if content_type.starts_with("application/json") && K::JSON {
        Encoding::Json
    } else if content_type.starts_with("application/json") {
        drain(body, st.max_body).await;
        return error(
            Encoding::Proto,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "{} are taken as protobuf only: use application/x-protobuf",
                K::SIGNAL
            ),
            None,
        );
    } else {
        return error(
            Encoding::Proto,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!("unsupported content type {content_type:?}: use application/x-protobuf or application/json"),
            None,
        );
    };
    // The two refusals this handler gives in several places.
    let max_body = st.max_body;
    let over_memory = |after| {
        error(
            encoding,
            StatusCode::TOO_MANY_REQUESTS,
            "memory limit reached; retry later".into(),
            Some(after),
        )
    };
    let too_large = || {
        error(
            encoding,
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("request body exceeds max_request_body_size ({max_body} bytes)"),
            None,
        )
    };
    // Over the hard memory limit: refused before the body is read.
    if let Err(Refused::Memory(after)) = st.adm.admit_unread() {
        // Not read (memory is what is short): answered at once, the
        // connection closed. A client still sending may see the close
        // before the 429; both are retried.
        return over_memory(after);
    }
    // The body is counted in the memory budget as it is read: its declared
    // length up front, then whatever arrives beyond it. So many slow
    // uploaders at once are refused (429) before their bodies fill memory,
    // not after.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
        .unwrap_or(0);
    if declared > st.max_body {
        st.out.refused(K::SIGNAL, 1);
        // Drained whole when it is at most twice the limit, so that a
        // client that is still sending reads the 413 instead of a broken
        // pipe. Anything larger is cut off at twice the limit.
        drain(body, declared.min(st.max_body.saturating_mul(2))).await;
        return too_large();
    }
    let mut reading: Vec<causeway_core::memory::Permit> = Vec::new();
    let mut reservation = match st.adm.reserve(declared) {
        Ok(r) => r,
        Err(Refused::Memory(after)) => {
            // Over the soft limit: the body is read and thrown away (a
            // client still sending then reads the 429, not a broken pipe).
            drain(body, st.max_body).await;
            return over_memory(after);
        }
        Err(_) => None,
    };
    let raw = match read_body(body, st.max_body, &mut reservation, &st.adm, &mut reading).await {
        Ok(b) => b,
        Err(ReadError::TooLarge) => {
            st.out.refused(K::SIGNAL, 1);
            return too_large();
        }
        Err(ReadError::Memory(after)) => return over_memory(after),
        Err(ReadError::Broken(e)) => {
            return error(
                encoding,
                StatusCode::BAD_REQUEST,
                format!("reading the request body failed: {e}"),
                None,
            )
        }
    };
    let content_encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    let codec = match Codec::from_encoding(content_encoding) {
        Ok(c) => c,
        Err(e) => {
            return error(
                encoding,
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                e.to_string(),
                None,
            )
        }
    };
    let raw_len = raw.len();
    // zstd frames of a protobuf body travel on as sent when nothing changes the spans.
    let sent_zstd = (codec == Codec::Zstd && encoding == Encoding::Proto).then(|| raw.clone());
    let body = match codec {
        Codec::None => raw,
        codec => match inflate(codec, &raw, st.max_body) {
            Ok(b) => b,
            Err((status, msg)) => {
                st.out.refused(K::SIGNAL, 1);
                return error(encoding, status, msg, None);
            }
        },
    };
    if let Err(after) = st.adm.inflated(
        Transport::Http,
        codec,
        raw_len,
        sent_zstd.is_some(),
        body.len(),
        &mut reading,
    ) {
        return over_memory(after);
    }
    let body = match encoding {
        Encoding::Proto => body,
        Encoding::Json => match serde_json::from_slice::<Req>(&body) {
            Ok(req) => Bytes::from(req.encode_to_vec()),
            Err(e) => {
                st.out.refused(K::SIGNAL, 1);
                return error(
                    encoding,
                    StatusCode::BAD_REQUEST,
                    format!("invalid OTLP/JSON {} request: {e}", K::SIGNAL),
                    None,
                );
            }
        },
    };
    match ingest(&st.out, &st.adm, K::SIGNAL, body, reading, sent_zstd).await {
        Ok(accepted) => {
            let resp = K::response(accepted);
            match encoding {
                Encoding::Proto => (
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/x-protobuf"),
                    )],
                    resp.encode_to_vec(),
                )
                    .into_response(),
                Encoding::Json => (
                    [(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    )],
                    serde_json::to_vec(&resp).unwrap_or_else(|_| b"{}".to_vec()),
                )
                    .into_response(),
            }
        }
        Err(Refused::Invalid(msg)) => error(encoding, StatusCode::BAD_REQUEST, msg, None),
        Err(Refused::Full(after)) => error(
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            "pipeline is full; retry later".into(),
            Some(after),
        ),
        Err(Refused::ShuttingDown) => error(
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            "receiver is shutting down".into(),
            Some(std::time::Duration::from_secs(1)),
        ),
        Err(Refused::Memory(after)) => over_memory(after),
        Err(Refused::NotDelivered) => error(
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            "accepted but not delivered: an exporter gave up; retry".into(),
            Some(std::time::Duration::from_secs(1)),
        ),
    }
}

/// Inflate at most `limit` bytes; more is a 413 (a zip bomb stops here).
pub(crate) fn inflate(
    codec: Codec,
    raw: &[u8],
    limit: usize,
) -> Result<Bytes, (StatusCode, String)> {
    codec.decompress(raw, limit).map_err(|e| match e {
        CompressError::TooLarge { .. } => (
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("decompressed body exceeds max_request_body_size ({limit} bytes)"),
        ),
        e => (StatusCode::BAD_REQUEST, format!("{e}")),
    })
}

/// An OTLP/HTTP error: a `google.rpc.Status` in the request's encoding,
/// with `Retry-After` when the client should retry.
fn error(
    encoding: Encoding,
    status: StatusCode,
    message: String,
    retry_after: Option<std::time::Duration>,
) -> Response {
    let c = match status {
        StatusCode::SERVICE_UNAVAILABLE => code::UNAVAILABLE,
        StatusCode::TOO_MANY_REQUESTS => code::RESOURCE_EXHAUSTED,
        StatusCode::BAD_REQUEST
        | StatusCode::PAYLOAD_TOO_LARGE
        | StatusCode::UNSUPPORTED_MEDIA_TYPE => code::INVALID_ARGUMENT,
        _ => code::INTERNAL,
    };
    let rpc = RpcStatus::new(c, message, retry_after);
    let mut resp = match encoding {
        Encoding::Proto => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/x-protobuf"),
            )],
            rpc.encode_to_vec(),
        )
            .into_response(),
        Encoding::Json => (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )],
            rpc.to_json().to_string(),
        )
            .into_response(),
    };
    if let Some(after) = retry_after {
        let secs = after.as_secs_f64().ceil().max(1.0) as u64;
        if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
    }
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::PAYLOAD_TOO_LARGE
    ) {
        // The body may be unread: close rather than drain it into memory.
        resp.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

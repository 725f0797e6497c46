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

use super::body::{drain, read_body, ReadError};
use super::config::HttpConfig;
use super::grpc::{Kind, Logs, Metrics, Profiles, Traces};
use super::{ingest, Admission, Refused};
use crate::ReceiverError;
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
    serving: super::Serving,
) -> Result<(), ReceiverError> {
    let serve_err = super::serve_error("http");
    let (tls, auth) = super::security(
        &listener,
        &serving.adm,
        "http",
        cfg.tls.as_ref(),
        cfg.auth.as_ref(),
        &[b"h2", b"http/1.1"],
    )
    .map_err(serve_err)?;
    let receiver = serving.adm.receiver.clone();
    let state = Arc::new(HttpState {
        out: serving.out,
        adm: serving.adm,
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
        &serving.telemetry,
        serving.shutdown.clone(),
    );
    causeway_core::conn::serve_http(conns, app, limits, serving.shutdown).await;
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
    match take::<K, Req>(&st, &headers, body).await {
        Ok(r) | Err(r) => r,
    }
}

/// A request through each step: credentials, content type, the body read
/// within the memory budget, inflated and decoded, then into the pipeline.
/// Each step answers the client itself when it refuses.
async fn take<K, Req>(st: &HttpState, headers: &HeaderMap, body: Body) -> Result<Response, Response>
where
    K: Kind,
    K::Response: Serialize,
    Req: Message + DeserializeOwned,
{
    let body = authorize(st, headers, body).await?;
    let (encoding, body) = encoding_of::<K>(st, headers, body).await?;
    let (raw, mut reading) = read::<K>(st, headers, body, encoding).await?;
    let (body, sent_zstd) = decode::<K, Req>(st, headers, encoding, raw, &mut reading)?;
    let accepted = ingest(&st.out, &st.adm, K::SIGNAL, body, reading, sent_zstd)
        .await
        .map_err(|r| refused(encoding, r))?;
    let resp = K::response(accepted);
    let (content_type, bytes) = match encoding {
        Encoding::Proto => ("application/x-protobuf", resp.encode_to_vec()),
        Encoding::Json => (
            "application/json",
            serde_json::to_vec(&resp).unwrap_or_else(|_| b"{}".to_vec()),
        ),
    };
    Ok((
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        bytes,
    )
        .into_response())
}

/// The body back when the credentials are right (or none are asked), else
/// a 401 naming the scheme.
async fn authorize(st: &HttpState, headers: &HeaderMap, body: Body) -> Result<Body, Response> {
    let Some(a) = &st.auth else { return Ok(body) };
    if a.check(headers.get(header::AUTHORIZATION).map(|v| v.as_bytes())) {
        return Ok(body);
    }
    tracing::debug!(receiver = %st.adm.receiver, "Request refused: missing or wrong credentials.");
    // Read (and throw away) what the client is still sending, so that
    // it reads the 401 and its reason: answered with the body unread,
    // HTTP/2 resets the stream and clients (curl: exit 92) report
    // that instead. Bounded like any body, and 10 s at most.
    drain(body, st.max_body).await;
    Err((
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, a.scheme())],
        format!(
            "missing or wrong credentials: send an `Authorization: {} …` header with the credentials of the receiver's `auth`",
            a.scheme()
        ),
    )
        .into_response())
}

/// The request's encoding by its content type (415 for any other; JSON
/// only for the signals that take it).
async fn encoding_of<K: Kind>(
    st: &HttpState,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Encoding, Body), Response> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    if content_type.starts_with("application/x-protobuf")
        || content_type.starts_with("application/protobuf")
    {
        return Ok((Encoding::Proto, body));
    }
    if content_type.starts_with("application/json") && K::JSON {
        return Ok((Encoding::Json, body));
    }
    let message = if content_type.starts_with("application/json") {
        drain(body, st.max_body).await;
        format!(
            "{} are taken as protobuf only: use application/x-protobuf",
            K::SIGNAL
        )
    } else {
        format!("unsupported content type {content_type:?}: use application/x-protobuf or application/json")
    };
    Err(error(
        Encoding::Proto,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        message,
        None,
    ))
}

/// 429: over the memory limit, retry after `after`.
fn over_memory(encoding: Encoding, after: std::time::Duration) -> Response {
    error(
        encoding,
        StatusCode::TOO_MANY_REQUESTS,
        "memory limit reached; retry later".into(),
        Some(after),
    )
}

/// 413: over `max_request_body_size`.
fn too_large(encoding: Encoding, max_body: usize) -> Response {
    error(
        encoding,
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body exceeds max_request_body_size ({max_body} bytes)"),
        None,
    )
}

/// The body as sent, read within `max_request_body_size` and counted in
/// the memory budget as it arrives (its permits with it).
async fn read<K: Kind>(
    st: &HttpState,
    headers: &HeaderMap,
    body: Body,
    encoding: Encoding,
) -> Result<(Bytes, Vec<causeway_core::memory::Permit>), Response> {
    // Over the hard memory limit: refused before the body is read.
    if let Err(Refused::Memory(after)) = st.adm.admit_unread() {
        // Not read (memory is what is short): answered at once, the
        // connection closed. A client still sending may see the close
        // before the 429; both are retried.
        return Err(over_memory(encoding, after));
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
        return Err(too_large(encoding, st.max_body));
    }
    let mut reading: Vec<causeway_core::memory::Permit> = Vec::new();
    let mut reservation = match st.adm.reserve(declared) {
        Ok(r) => r,
        Err(Refused::Memory(after)) => {
            // Over the soft limit: the body is read and thrown away (a
            // client still sending then reads the 429, not a broken pipe).
            drain(body, st.max_body).await;
            return Err(over_memory(encoding, after));
        }
        Err(_) => None,
    };
    match read_body(body, st.max_body, &mut reservation, &st.adm, &mut reading).await {
        Ok(b) => Ok((b, reading)),
        Err(ReadError::TooLarge) => {
            st.out.refused(K::SIGNAL, 1);
            Err(too_large(encoding, st.max_body))
        }
        Err(ReadError::Memory(after)) => Err(over_memory(encoding, after)),
        Err(ReadError::Broken(e)) => Err(error(
            encoding,
            StatusCode::BAD_REQUEST,
            format!("reading the request body failed: {e}"),
            None,
        )),
    }
}

/// The body inflated (by its `Content-Encoding`, within the limit) and as
/// protobuf, with the zstd frames as sent when they can travel on. The
/// error is the client's answer, made once for a refused request.
#[allow(clippy::result_large_err)]
fn decode<K, Req>(
    st: &HttpState,
    headers: &HeaderMap,
    encoding: Encoding,
    raw: Bytes,
    reading: &mut Vec<causeway_core::memory::Permit>,
) -> Result<(Bytes, Option<Bytes>), Response>
where
    K: Kind,
    Req: Message + DeserializeOwned,
{
    let content_encoding = headers
        .get(header::CONTENT_ENCODING)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("identity");
    let codec = Codec::from_encoding(content_encoding).map_err(|e| {
        error(
            encoding,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            e.to_string(),
            None,
        )
    })?;
    let raw_len = raw.len();
    // zstd frames of a protobuf body travel on as sent when nothing changes the spans.
    let sent_zstd = (codec == Codec::Zstd && encoding == Encoding::Proto).then(|| raw.clone());
    let body = match codec {
        Codec::None => raw,
        codec => inflate(codec, &raw, st.max_body).map_err(|(status, msg)| {
            st.out.refused(K::SIGNAL, 1);
            error(encoding, status, msg, None)
        })?,
    };
    st.adm
        .inflated(
            Transport::Http,
            codec,
            raw_len,
            sent_zstd.is_some(),
            body.len(),
            reading,
        )
        .map_err(|after| over_memory(encoding, after))?;
    let body = match encoding {
        Encoding::Proto => body,
        Encoding::Json => match serde_json::from_slice::<Req>(&body) {
            Ok(req) => Bytes::from(req.encode_to_vec()),
            Err(e) => {
                st.out.refused(K::SIGNAL, 1);
                return Err(error(
                    encoding,
                    StatusCode::BAD_REQUEST,
                    format!("invalid OTLP/JSON {} request: {e}", K::SIGNAL),
                    None,
                ));
            }
        },
    };
    Ok((body, sent_zstd))
}

/// The pipeline's refusal as the client is told it.
fn refused(encoding: Encoding, r: Refused) -> Response {
    match r {
        Refused::Invalid(msg) => error(encoding, StatusCode::BAD_REQUEST, msg, None),
        Refused::Full(after) => error(
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            "pipeline is full; retry later".into(),
            Some(after),
        ),
        Refused::ShuttingDown => error(
            encoding,
            StatusCode::SERVICE_UNAVAILABLE,
            "receiver is shutting down".into(),
            Some(std::time::Duration::from_secs(1)),
        ),
        Refused::Memory(after) => over_memory(encoding, after),
        Refused::NotDelivered => error(
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

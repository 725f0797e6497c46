//! OTLP/gRPC: one tonic service per signal with a codec that takes the
//! request as raw bytes.

use bytes::Bytes;
use causeway_core::compress::{Codec, CompressError, Transport};
use causeway_core::grpc::{export_path, frame_header, parse_unary};
use causeway_core::rpc::{code, RpcStatus};
use causeway_core::tls::Authenticator;
use causeway_core::topology::Output;
use causeway_core::Signal;
use http_body::Frame;
use http_body_util::StreamBody;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesPartialSuccess, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTracePartialSuccess, ExportTraceServiceResponse,
};
use prost::Message;
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::net::TcpListener;
use tonic::server::NamedService;
use tonic::{Code, Status};

use super::body::{read_body, ReadError};
use super::config::GrpcConfig;
use super::{ingest, Accepted, Admission, Refused};
use crate::ReceiverError;

/// A signal's response type and service name.
pub(crate) trait Kind: Send + Sync + 'static {
    const SIGNAL: Signal;
    const NAME: &'static str;
    /// Whether OTLP/HTTP takes this signal as JSON too.
    const JSON: bool = true;
    type Response: Message + Default + Send + 'static;
    fn response(a: Accepted) -> Self::Response;
}

pub(crate) struct Traces;
pub(crate) struct Logs;
pub(crate) struct Metrics;
pub(crate) struct Profiles;

impl Kind for Traces {
    const SIGNAL: Signal = Signal::Traces;
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    type Response = ExportTraceServiceResponse;
    fn response(a: Accepted) -> Self::Response {
        ExportTraceServiceResponse {
            partial_success: (a.rejected > 0).then_some(ExportTracePartialSuccess {
                rejected_spans: a.rejected,
                error_message: a.message,
            }),
        }
    }
}

impl Kind for Logs {
    const SIGNAL: Signal = Signal::Logs;
    const NAME: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
    type Response = ExportLogsServiceResponse;
    fn response(a: Accepted) -> Self::Response {
        ExportLogsServiceResponse {
            partial_success: (a.rejected > 0).then_some(ExportLogsPartialSuccess {
                rejected_log_records: a.rejected,
                error_message: a.message,
            }),
        }
    }
}

impl Kind for Metrics {
    const SIGNAL: Signal = Signal::Metrics;
    const NAME: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
    type Response = ExportMetricsServiceResponse;
    fn response(a: Accepted) -> Self::Response {
        ExportMetricsServiceResponse {
            partial_success: (a.rejected > 0).then_some(ExportMetricsPartialSuccess {
                rejected_data_points: a.rejected,
                error_message: a.message,
            }),
        }
    }
}

impl Kind for Profiles {
    const SIGNAL: Signal = Signal::Profiles;
    const NAME: &'static str =
        "opentelemetry.proto.collector.profiles.v1development.ProfilesService";
    // The JSON mapping of a profile's link ids (hex) is not what the
    // generated types read (byte arrays): protobuf only, said so.
    const JSON: bool = false;
    type Response = ExportProfilesServiceResponse;
    fn response(a: Accepted) -> Self::Response {
        ExportProfilesServiceResponse {
            partial_success: (a.rejected > 0).then_some(ExportProfilesPartialSuccess {
                rejected_profiles: a.rejected,
                error_message: a.message,
            }),
        }
    }
}

struct Shared {
    out: Output,
    adm: Admission,
    auth: Option<Authenticator>,
    max_message: usize,
}

/// The export service of one signal.
pub(crate) struct Service<K> {
    shared: Arc<Shared>,
    _kind: PhantomData<K>,
}

impl<K> Clone for Service<K> {
    fn clone(&self) -> Self {
        Service {
            shared: self.shared.clone(),
            _kind: PhantomData,
        }
    }
}

impl<K: Kind> NamedService for Service<K> {
    const NAME: &'static str = K::NAME;
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send + 'static>>;

/// One unary Export call, read and answered here rather than by tonic's
/// server so that the body is counted against the memory budget as it
/// arrives, inflated once into the buffer that becomes the request (gzip,
/// zstd or snappy, bounded by `max_recv_msg_size_mib`), and answered with
/// the same statuses as before.
async fn export<K: Kind, B>(
    shared: Arc<Shared>,
    req: http::Request<B>,
) -> Result<http::Response<tonic::body::Body>, Status>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<causeway_core::BoxError>,
{
    let (head, body) = req.into_parts();
    let codec = match head.headers.get("grpc-encoding") {
        None => Codec::None,
        Some(v) => Codec::from_encoding(v.to_str().unwrap_or("?")).map_err(|e| {
            let mut s = Status::unimplemented(e.to_string());
            s.metadata_mut().insert(
                "grpc-accept-encoding",
                tonic::metadata::MetadataValue::from_static(ACCEPT_ENCODING),
            );
            s
        })?,
    };
    let max = shared.max_message;
    let too_large = |what: &str| {
        shared.out.refused(K::SIGNAL, 1);
        Status::resource_exhausted(format!(
            "{what} exceeds max_recv_msg_size_mib ({max} bytes)"
        ))
    };
    let mut reading = Vec::new();
    let mut reservation = None;
    let raw = match read_body(
        body,
        max.saturating_add(5),
        &mut reservation,
        &shared.adm,
        &mut reading,
    )
    .await
    {
        Ok(b) => b,
        Err(ReadError::TooLarge) => return Err(too_large("message")),
        Err(ReadError::Memory(after)) => return Err(refused_status(Refused::Memory(after))),
        Err(ReadError::Broken(e)) => {
            return Err(Status::cancelled(format!(
                "reading the request failed: {e}"
            )))
        }
    };
    let (compressed, msg) = parse_unary(&raw).map_err(Status::internal)?;
    // The flag says whether this message is compressed; the header only
    // which codec a compressed one uses.
    let codec = match (compressed, codec) {
        (false, _) => Codec::None,
        (true, Codec::None) => {
            return Err(Status::internal(
                "compressed flag set but no grpc-encoding given",
            ))
        }
        (true, codec) => codec,
    };
    let wire = msg.len();
    // zstd frames travel on as sent when nothing changes the spans.
    let sent_zstd = (codec == Codec::Zstd).then(|| msg.clone());
    let msg = match codec {
        Codec::None => msg,
        codec => codec.decompress(&msg, max).map_err(|e| match e {
            CompressError::TooLarge { .. } => too_large("decompressed message"),
            e => Status::internal(e.to_string()),
        })?,
    };
    shared
        .adm
        .inflated(
            Transport::Grpc,
            codec,
            wire,
            sent_zstd.is_some(),
            msg.len(),
            &mut reading,
        )
        .map_err(|after| refused_status(Refused::Memory(after)))?;
    let accepted = ingest(&shared.out, &shared.adm, K::SIGNAL, msg, reading, sent_zstd)
        .await
        .map_err(refused_status)?;
    answer(&K::response(accepted).encode_to_vec())
}

/// The unary answer: `resp` framed, `grpc-status` 0 in the trailers.
fn answer(resp: &[u8]) -> Result<http::Response<tonic::body::Body>, Status> {
    let header = frame_header(false, resp.len())?;
    let mut data = Vec::with_capacity(5 + resp.len());
    data.extend_from_slice(&header);
    data.extend_from_slice(resp);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let frames = [
        Ok::<_, Infallible>(Frame::data(Bytes::from(data))),
        Ok(Frame::trailers(trailers)),
    ];
    let mut out = http::Response::new(tonic::body::Body::new(StreamBody::new(
        futures::stream::iter(frames),
    )));
    let h = out.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    h.insert(
        "grpc-accept-encoding",
        http::HeaderValue::from_static(ACCEPT_ENCODING),
    );
    Ok(out)
}

/// The encodings this receiver inflates.
const ACCEPT_ENCODING: &str = "gzip,zstd,snappy,identity";

/// The gRPC status for a refusal, with RetryInfo when retrying makes sense.
pub(crate) fn refused_status(r: Refused) -> Status {
    let (grpc, c, msg, retry) = match r {
        Refused::Invalid(m) => (Code::InvalidArgument, code::INVALID_ARGUMENT, m, None),
        Refused::Full(after) => (
            Code::Unavailable,
            code::UNAVAILABLE,
            "pipeline is full; retry later".to_string(),
            Some(after),
        ),
        Refused::ShuttingDown => (
            Code::Unavailable,
            code::UNAVAILABLE,
            "receiver is shutting down".to_string(),
            Some(std::time::Duration::from_secs(1)),
        ),
        Refused::Memory(after) => (
            Code::ResourceExhausted,
            code::RESOURCE_EXHAUSTED,
            "memory limit reached; retry later".to_string(),
            Some(after),
        ),
        Refused::NotDelivered => (
            Code::Unavailable,
            code::UNAVAILABLE,
            "accepted but not delivered: an exporter gave up; retry".to_string(),
            Some(std::time::Duration::from_secs(1)),
        ),
    };
    let details = RpcStatus::new(c, msg.clone(), retry).encode_to_vec();
    Status::with_details(grpc, msg, Bytes::from(details))
}

impl<K, B> tower::Service<http::Request<B>> for Service<K>
where
    K: Kind,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        if req.uri().path() != export_path(K::SIGNAL) {
            return Box::pin(async { Ok(Status::unimplemented("unknown method").into_http()) });
        }
        let shared = self.shared.clone();
        if let Some(a) = &shared.auth {
            let given = req.headers().get("authorization").map(|v| v.as_bytes());
            if !a.check(given) {
                return Box::pin(async {
                    Ok(Status::unauthenticated("missing or wrong credentials").into_http())
                });
            }
        }
        // Over the memory budget: refused before the body is read.
        if let Err(r) = shared.adm.admit(0) {
            return Box::pin(async move { Ok(refused_status(r).into_http()) });
        }
        Box::pin(async move {
            Ok(export::<K, B>(shared, req)
                .await
                .unwrap_or_else(Status::into_http))
        })
    }
}

fn service<K: Kind>(shared: &Arc<Shared>) -> Service<K> {
    Service {
        shared: shared.clone(),
        _kind: PhantomData,
    }
}

/// Serve OTLP/gRPC on `listener` until `shutdown`.
pub(crate) async fn serve(
    listener: TcpListener,
    cfg: GrpcConfig,
    serving: super::Serving,
) -> Result<(), ReceiverError> {
    let serve_err = super::serve_error("grpc");
    let (tls, auth) = super::security(
        &listener,
        &serving.adm,
        "grpc",
        cfg.tls.as_ref(),
        cfg.auth.as_ref(),
        &[b"h2"],
    )
    .map_err(serve_err)?;
    let receiver = serving.adm.receiver.clone();
    let shared = Arc::new(Shared {
        out: serving.out,
        adm: serving.adm,
        auth,
        max_message: usize::try_from(cfg.max_recv_msg_size_mib.saturating_mul(1 << 20))
            .unwrap_or(usize::MAX),
    });
    let limits = cfg.connections;
    let mut builder = tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(limits.keepalive_interval.get()))
        .http2_keepalive_timeout(Some(limits.keepalive_timeout.get()));
    if let Some(n) = cfg.max_concurrent_streams {
        builder = builder.max_concurrent_streams(n);
    }
    let router = builder
        .add_service(service::<Traces>(&shared))
        .add_service(service::<Logs>(&shared))
        .add_service(service::<Metrics>(&shared));
    // Profiles only where a pipeline takes them, as the Collector: a client
    // sending them elsewhere hears UNIMPLEMENTED, not a silent drop.
    let router = if shared.out.accepts(Signal::Profiles) {
        router.add_service(service::<Profiles>(&shared))
    } else {
        router
    };
    drop(shared);
    let conns = causeway_core::conn::accept(
        &format!("{receiver}/grpc"),
        listener,
        tls,
        limits,
        &serving.telemetry,
        serving.shutdown.clone(),
    );
    let incoming = futures::stream::unfold(conns, |mut c| async move {
        c.recv()
            .await
            .map(|(stream, _)| (Ok::<_, std::io::Error>(stream), c))
    });
    router
        .serve_with_incoming_shutdown(incoming, serving.shutdown.cancelled_owned())
        .await
        .map_err(|e| serve_err(e.to_string()))
}

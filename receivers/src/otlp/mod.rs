//! The `otlp` receiver: OTLP over gRPC and over HTTP (protobuf and JSON).
//!
//! Requests are not decoded on the hot path: the protobuf framing is walked
//! ([`causeway_core::wire::scan`]) to count items and find invalid ids, and
//! the bytes are passed on as they arrived. Only a request carrying invalid
//! ids is decoded, to drop those items and answer with a partial success.
//! When the pipelines are full the client gets a retryable answer with a
//! retry hint (gRPC UNAVAILABLE + RetryInfo, HTTP 503 + Retry-After).

mod body;
pub mod config;
mod grpc;
pub(crate) mod http;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bytes::Bytes;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::compress::{Codec, Transport};
use causeway_core::config::{decode, ConfigError};
use causeway_core::memory::{MemoryLimiter, Permit};
use causeway_core::telemetry::Counter;
use causeway_core::topology::{Output, SendError};
use causeway_core::wire;
use causeway_core::{Ack, Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::ReceiverError;
use config::OtlpReceiverConfig;

causeway_core::metrics! {
    /// Request message bytes as received, by transport and content encoding.
    pub ReceiverWireBytes: counter = "causeway_receiver_wire_bytes_total";
    /// Request message bytes after decompression, by transport and content encoding.
    pub ReceiverInflatedBytes: counter = "causeway_receiver_inflated_bytes_total";
}

/// Factory of the `otlp` receiver.
pub struct OtlpReceiverFactory;

#[async_trait]
impl ReceiverFactory for OtlpReceiverFactory {
    fn kind(&self) -> &'static str {
        "otlp"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<OtlpReceiverConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<OtlpReceiverConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: OtlpReceiverConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let bind = |protocol: &'static str, endpoint: String| async move {
            TcpListener::bind(&endpoint)
                .await
                .map_err(|source| ReceiverError::Bind {
                    protocol,
                    endpoint,
                    source,
                })
        };
        let grpc = match &cfg.protocols.grpc {
            Some(g) => Some((bind("grpc", g.endpoint.clone()).await?, g.clone())),
            None => None,
        };
        let http = match &cfg.protocols.http {
            Some(h) => Some((bind("http", h.endpoint.clone()).await?, h.clone())),
            None => None,
        };
        for (protocol, l) in [
            ("grpc", grpc.as_ref().map(|g| &g.0)),
            ("http", http.as_ref().map(|h| &h.0)),
        ] {
            if let Some(addr) = l.and_then(|l| l.local_addr().ok()) {
                tracing::info!(receiver = %ctx.id, protocol, %addr, "OTLP receiver listening.");
            }
        }
        let adm = Admission {
            acknowledgements: cfg.acknowledgements,
            limiter: ctx
                .shared
                .slot::<MemoryLimiter>(causeway_core::memory::SHARED_KEY)
                .get()
                .cloned(),
            receiver: ctx.id.to_string(),
            wire: std::sync::Arc::new(WireBytes::new(&ctx.telemetry, &ctx.id.to_string())),
        };
        Ok(Box::new(OtlpReceiver {
            grpc,
            http,
            adm,
            telemetry: ctx.telemetry.clone(),
        }))
    }
}

/// What a transport's server runs with: the pipelines, the admission of
/// requests, the telemetry, the stop.
pub(crate) struct Serving {
    pub(crate) out: Output,
    pub(crate) adm: Admission,
    pub(crate) telemetry: causeway_core::telemetry::Registry,
    pub(crate) shutdown: CancellationToken,
}

/// The error of a transport's server (`protocol`) that could not serve.
pub(crate) fn serve_error(
    protocol: &'static str,
) -> impl Fn(String) -> crate::ReceiverError + Copy {
    move |message| crate::ReceiverError::Serve { protocol, message }
}

struct OtlpReceiver {
    grpc: Option<(TcpListener, config::GrpcConfig)>,
    http: Option<(TcpListener, config::HttpConfig)>,
    adm: Admission,
    telemetry: causeway_core::telemetry::Registry,
}

#[async_trait]
impl Receiver for OtlpReceiver {
    async fn run(
        self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let mut tasks = tokio::task::JoinSet::new();
        let OtlpReceiver {
            grpc,
            http,
            adm,
            telemetry,
        } = *self;
        let serving = || Serving {
            out: out.clone(),
            adm: adm.clone(),
            telemetry: telemetry.clone(),
            shutdown: shutdown.clone(),
        };
        if let Some((listener, cfg)) = grpc {
            tasks.spawn(grpc::serve(listener, cfg, serving()));
        }
        if let Some((listener, cfg)) = http {
            tasks.spawn(http::serve(listener, cfg, serving()));
        }
        drop(out);
        let mut result: Result<(), BoxError> = Ok(());
        while let Some(r) = tasks.join_next().await {
            match r {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    // One protocol failing stops the other too: the receiver is down.
                    shutdown.cancel();
                    result = Err(Box::new(e));
                }
                Err(e) => result = Err(Box::new(e)),
            }
        }
        result
    }
}

/// What an accepted request yields: items rejected (partial success).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Accepted {
    /// Items rejected.
    pub rejected: i64,
    /// Why.
    pub message: String,
}

/// Why a request was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Malformed: do not retry (gRPC INVALID_ARGUMENT, HTTP 400).
    Invalid(String),
    /// No room: retry after the hint (gRPC UNAVAILABLE, HTTP 503).
    Full(Duration),
    /// Shutting down: retry elsewhere or later.
    ShuttingDown,
    /// Accepted, but an exporter gave up on it (with `acknowledgements`): retry.
    NotDelivered,
    /// Over the memory limiter's budget: retry after the hint (gRPC
    /// RESOURCE_EXHAUSTED with RetryInfo, HTTP 429).
    Memory(Duration),
}

/// How requests are admitted and answered.
#[derive(Debug, Clone, Default)]
pub(crate) struct Admission {
    /// Answer only once every exporter of the request's pipelines has the
    /// data on disk (a persistent queue) or delivered.
    pub(crate) acknowledgements: bool,
    /// `service.memory_limiter`, when on.
    pub(crate) limiter: Option<std::sync::Arc<MemoryLimiter>>,
    /// The receiver's id (for the limiter's counts).
    pub(crate) receiver: String,
    /// Request bytes as received and as inflated, per transport and encoding.
    pub(crate) wire: std::sync::Arc<WireBytes>,
}

/// `causeway_receiver_wire_bytes_total` and
/// `causeway_receiver_inflated_bytes_total`, by transport and encoding:
/// what compression saves on the wire and costs in memory.
#[derive(Debug, Default)]
pub(crate) struct WireBytes {
    /// [grpc, http] × [gzip, zstd, snappy, identity]: (wire, inflated).
    counters: [[(Counter, Counter); 4]; 2],
}

impl WireBytes {
    fn new(t: &causeway_core::telemetry::Registry, receiver: &str) -> Self {
        let pair = |transport: &str, encoding: &str| {
            let labels = [
                ("receiver", receiver),
                ("transport", transport),
                ("encoding", encoding),
            ];
            (
                t.counter(ReceiverWireBytes, &labels),
                t.counter(ReceiverInflatedBytes, &labels),
            )
        };
        let row = |transport: &str| {
            [
                pair(transport, "gzip"),
                pair(transport, "zstd"),
                pair(transport, "snappy"),
                pair(transport, "identity"),
            ]
        };
        WireBytes {
            counters: [row("grpc"), row("http")],
        }
    }

    /// Count one request's message: `wire` bytes received, `inflated` after
    /// decompression.
    fn count(&self, transport: Transport, codec: Codec, wire: usize, inflated: usize) {
        let t = match transport {
            Transport::Grpc => 0,
            Transport::Http => 1,
        };
        let c = match codec {
            Codec::Gzip => 0,
            Codec::Zstd => 1,
            Codec::Snappy => 2,
            Codec::None => 3,
        };
        if let Some((w, i)) = self.counters.get(t).and_then(|r| r.get(c)) {
            w.add(wire as u64);
            i.add(inflated as u64);
        }
    }
}

impl Admission {
    /// Before a body is read: refused only over the hard limit.
    pub(crate) fn admit_unread(&self) -> Result<(), Refused> {
        match &self.limiter {
            None => Ok(()),
            Some(l) => l
                .admit_unread(&self.receiver)
                .map_err(|r| Refused::Memory(r.retry_after)),
        }
    }

    /// Admit `bytes` into the memory budget (held until the permit drops).
    /// Reserve the declared length of a body about to be read.
    pub(crate) fn reserve(
        &self,
        bytes: usize,
    ) -> Result<Option<causeway_core::memory::Reservation>, Refused> {
        match &self.limiter {
            None => Ok(None),
            Some(l) => l
                .reserve(&self.receiver, bytes as u64)
                .map(Some)
                .map_err(|r| Refused::Memory(r.retry_after)),
        }
    }

    pub(crate) fn admit(&self, bytes: usize) -> Result<Option<Permit>, Refused> {
        match &self.limiter {
            None => Ok(None),
            Some(l) => l
                .admit(&self.receiver, bytes as u64)
                .map(Some)
                .map_err(|r| Refused::Memory(r.retry_after)),
        }
    }

    /// A message of `wire` bytes as received, `inflated` once decompressed
    /// with `codec`: counted, and what inflation added admitted into the
    /// memory budget (a 1 MiB gzip body can be 20 MiB), held in `reading`.
    /// When the message as received is `kept` too (zstd frames forwarded
    /// as sent), all of `inflated` is admitted beside it. Over the budget:
    /// the retry hint.
    pub(crate) fn inflated(
        &self,
        transport: Transport,
        codec: Codec,
        wire: usize,
        kept: bool,
        inflated: usize,
        reading: &mut Vec<Permit>,
    ) -> Result<(), Duration> {
        self.wire.count(transport, codec, wire, inflated);
        let more = if kept {
            inflated
        } else {
            inflated.saturating_sub(wire)
        };
        if more == 0 {
            return Ok(());
        }
        match self.admit(more) {
            Ok(p) => reading.extend(p),
            Err(Refused::Memory(after)) => return Err(after),
            Err(_) => {}
        }
        Ok(())
    }
}

/// The path shared by gRPC and HTTP: check, count, repair and send one
/// encoded `Export*ServiceRequest`.
pub(crate) async fn ingest(
    out: &Output,
    adm: &Admission,
    signal: Signal,
    body: Bytes,
    counted: Vec<Permit>,
    sent_zstd: Option<Bytes>,
) -> Result<Accepted, Refused> {
    // Counted in the memory budget until the data is exported or on disk:
    // by the permits the body was read under (HTTP counts a body as it
    // arrives, and what it inflates to), else admitted now.
    let permit: Option<Box<dyn std::any::Any + Send + Sync>> = if counted.is_empty() {
        adm.admit(body.len())?
            .map(|p| Box::new(p) as Box<dyn std::any::Any + Send + Sync>)
    } else {
        Some(Box::new(counted))
    };
    let (body, items, accepted) = check(signal, body, |n| out.refused(signal, n))?;
    if items == 0 {
        // Nothing to deliver (an empty request, or every item rejected).
        return Ok(accepted);
    }
    let mut batch = Batch::from_encoded(signal, body, items);
    if let Some(frames) = sent_zstd.filter(|_| accepted.rejected == 0) {
        // Nothing was repaired: the sender's frames are the request compressed.
        batch = batch.with_sent_zstd(frames);
    }
    if let Some(p) = permit {
        batch = batch.with_hold(std::sync::Arc::from(p));
    }
    let (batch, done) = if adm.acknowledgements {
        let (ack, done) = Ack::new();
        (batch.with_ack(ack), Some(done))
    } else {
        (batch, None)
    };
    match out.send(batch).await {
        Ok(()) => {}
        Err(SendError::Full { retry_after }) => return Err(Refused::Full(retry_after)),
        Err(SendError::Closed) => return Err(Refused::ShuttingDown),
    }
    match done {
        // Fires once every copy is on disk or delivered (true), or given up (false).
        Some(done) => match done.await {
            Ok(true) => Ok(accepted),
            _ => Err(Refused::NotDelivered),
        },
        None => Ok(accepted),
    }
}

/// Check an encoded request's framing, strings and ids; drop the items with
/// invalid ids (counted as refused). Returns the body to send, its item
/// count and the answer's partial success; `refused` counts what is refused.
pub fn check(
    signal: Signal,
    body: Bytes,
    mut refused: impl FnMut(usize),
) -> Result<(Bytes, usize, Accepted), Refused> {
    let scan = match wire::scan(signal, &body) {
        Ok(s) => s,
        Err(e) => {
            refused(1);
            return Err(Refused::Invalid(format!(
                "invalid OTLP {signal} request: {e}"
            )));
        }
    };
    let (body, items, accepted) = if scan.invalid_ids > 0 {
        let (body, kept) = drop_invalid_ids(signal, &body).map_err(|e| {
            refused(scan.items);
            Refused::Invalid(format!("invalid OTLP {signal} request: {e}"))
        })?;
        let rejected = scan.items - kept;
        refused(rejected);
        let message = format!(
            "{rejected} {} rejected: trace_id must be 16 bytes and span_id 8 bytes, not all zeros",
            signal.item_name()
        );
        tracing::warn!(%signal, rejected, "Rejected items with invalid ids.");
        (
            body,
            kept,
            Accepted {
                rejected: rejected as i64,
                message,
            },
        )
    } else {
        (body, scan.items, Accepted::default())
    };
    Ok((body, items, accepted))
}

/// A listener's TLS configuration and authenticator (files read now), and
/// a warning when it is exposed beyond loopback without TLS.
pub(crate) fn security(
    listener: &TcpListener,
    adm: &Admission,
    protocol: &'static str,
    tls: Option<&causeway_core::tls::ServerTls>,
    auth: Option<&causeway_core::tls::ServerAuth>,
    alpn: &[&[u8]],
) -> Result<
    (
        Option<std::sync::Arc<rustls::ServerConfig>>,
        Option<causeway_core::tls::Authenticator>,
    ),
    String,
> {
    let tls = tls.map(|t| t.server_config(alpn)).transpose()?;
    let auth = auth.map(|a| a.authenticator()).transpose()?.flatten();
    if let Ok(addr) = listener.local_addr() {
        causeway_core::tls::warn_if_exposed(&adm.receiver, protocol, addr, tls.is_some());
    }
    Ok((tls, auth))
}

fn valid(id: &[u8], len: usize, optional: bool) -> bool {
    (optional && id.is_empty()) || (id.len() == len && id.iter().any(|&b| b != 0))
}

/// Decode, drop the items with invalid ids, re-encode. Returns the new body and the kept count.
fn drop_invalid_ids(signal: Signal, body: &[u8]) -> Result<(Bytes, usize), prost::DecodeError> {
    let mut kept = 0;
    let bytes = match signal {
        Signal::Traces => {
            let mut req = ExportTraceServiceRequest::decode(body)?;
            for rs in &mut req.resource_spans {
                for ss in &mut rs.scope_spans {
                    ss.spans
                        .retain(|s| valid(&s.trace_id, 16, false) && valid(&s.span_id, 8, false));
                    kept += ss.spans.len();
                }
            }
            req.encode_to_vec()
        }
        Signal::Logs => {
            let mut req = ExportLogsServiceRequest::decode(body)?;
            for rl in &mut req.resource_logs {
                for sl in &mut rl.scope_logs {
                    sl.log_records
                        .retain(|l| valid(&l.trace_id, 16, true) && valid(&l.span_id, 8, true));
                    kept += sl.log_records.len();
                }
            }
            req.encode_to_vec()
        }
        Signal::Metrics => {
            let req = ExportMetricsServiceRequest::decode(body)?;
            kept = causeway_core::model::count_data_points(&req.resource_metrics);
            req.encode_to_vec()
        }
        // Profiles are never refused for their links' ids (see `wire::scan`).
        Signal::Profiles => return Ok((Bytes::copy_from_slice(body), 0)),
    };
    Ok((Bytes::from(bytes), kept))
}

//! Load generator and counting sink for whole-daemon benchmarks.
//!
//! `loadgen send` pre-encodes OTLP trace requests (10-attribute spans, 500 a
//! request by default) and sends them over OTLP/gRPC as fast as the target
//! accepts, with a fixed number of requests in flight. `loadgen sink` is an
//! OTLP/gRPC server that counts the spans it receives without decoding them.
//! Both print one JSON line of results.

use anyhow::Context as _;
use bytes::Bytes;
use causeway_core::grpc::{export_path, ClientCodec, ServerCodec};
use causeway_core::{wire, Signal};
use clap::{Parser, Subcommand};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tonic::codegen::http;
use tonic::server::{NamedService, UnaryService};

#[derive(Parser)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Send OTLP/gRPC trace exports.
    Send {
        /// host:port of the OTLP/gRPC receiver.
        #[arg(long, default_value = "127.0.0.1:4317")]
        target: String,
        /// How long to send.
        #[arg(long, default_value = "20")]
        seconds: u64,
        /// Spans per request.
        #[arg(long, default_value = "500")]
        spans: usize,
        /// Requests in flight.
        #[arg(long, default_value = "8")]
        concurrency: usize,
        /// HTTP/2 connections.
        #[arg(long, default_value = "2")]
        connections: usize,
        /// Error spans every N spans (0: none).
        #[arg(long, default_value = "0")]
        error_every: usize,
        /// Slow traces: every N-th trace's spans last 3 s (0: none).
        #[arg(long, default_value = "0")]
        slow_every: usize,
        /// Stop after this many spans were accepted (0: run for --seconds).
        #[arg(long, default_value = "0")]
        total_spans: u64,
    },
    /// Count spans received over OTLP/gRPC.
    Sink {
        /// host:port to listen on.
        #[arg(long, default_value = "127.0.0.1:5317")]
        listen: String,
        /// Exit after no data for this many seconds once data arrived.
        #[arg(long, default_value = "5")]
        idle_exit: u64,
    },
}

fn kv(k: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

/// A request of `n` spans with 10 attributes each; ids derived from `seed`.
fn request(
    seed: u64,
    n: usize,
    error_every: usize,
    slow_every: usize,
) -> ExportTraceServiceRequest {
    let s = |x: &str| any_value::Value::StringValue(x.into());
    let spans = (0..n)
        .map(|i| {
            let id = seed.wrapping_mul(1_000_003).wrapping_add(i as u64 + 1);
            let trace = id / 5; // 5 spans a trace
                                // A marker in the first 4 bytes lets the sender find and renumber trace ids.
            let mut trace_id = vec![0xC0, 0xFF, 0xEE, 0x42];
            trace_id.extend_from_slice(&(trace as u32).to_be_bytes());
            trace_id.extend_from_slice(&(trace ^ 0x5bd1_e995).to_be_bytes());
            let start = 1_764_000_000_000_000_000u64 + id * 1_000;
            let slow = slow_every > 0 && trace.is_multiple_of(slow_every as u64);
            let dur = if slow {
                3_000_000_000
            } else {
                20_000_000 + (id % 7) * 1_000_000
            };
            let err = error_every > 0 && (id as usize).is_multiple_of(error_every);
            Span {
                trace_id,
                span_id: id.to_be_bytes().to_vec(),
                parent_span_id: if id.is_multiple_of(5) {
                    vec![]
                } else {
                    (id - 1).to_be_bytes().to_vec()
                },
                name: "GET /orders".into(),
                kind: span::SpanKind::Server as i32,
                start_time_unix_nano: start,
                end_time_unix_nano: start + dur,
                attributes: vec![
                    kv("http.request.method", s("GET")),
                    kv("http.route", s("/api/v1/orders/{id}")),
                    kv(
                        "http.response.status_code",
                        any_value::Value::IntValue(if err { 500 } else { 200 }),
                    ),
                    kv("url.path", s("/api/v1/orders/1")),
                    kv("server.address", s("orders")),
                    kv("server.port", any_value::Value::IntValue(8080)),
                    kv("client.address", s("10.1.2.3")),
                    kv("user_agent.original", s("lg/1")),
                    kv("route_id", s("orders-v2")),
                    kv("net.proto", s("1.1")),
                ],
                status: Some(Status {
                    code: if err {
                        status::StatusCode::Error as i32
                    } else {
                        status::StatusCode::Unset as i32
                    },
                    message: String::new(),
                }),
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", s("orders")),
                    kv("host.name", s("node-1")),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "loadgen".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[allow(clippy::too_many_arguments)]
async fn send(
    target: String,
    seconds: u64,
    spans: usize,
    concurrency: usize,
    connections: usize,
    error_every: usize,
    slow_every: usize,
    total_spans: u64,
) -> anyhow::Result<()> {
    // 64 request templates; every send renumbers the trace ids, so each request
    // carries new traces (as real traffic does) at the cost of one copy.
    let reqs: Arc<Vec<(Bytes, Vec<usize>)>> = Arc::new(
        (0..64)
            .map(|i| {
                let b = request(i, spans, error_every, slow_every).encode_to_vec();
                let offsets = b
                    .windows(6)
                    .enumerate()
                    .filter(|(_, w)| w == &[0x0a, 0x10, 0xC0, 0xFF, 0xEE, 0x42])
                    .map(|(o, _)| o + 2)
                    .collect();
                (Bytes::from(b), offsets)
            })
            .collect(),
    );
    let seq = Arc::new(AtomicU64::new(1));
    let span_bytes = reqs[0].0.len() as f64 / spans as f64;
    let mut channels = Vec::new();
    for _ in 0..connections.max(1) {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{target}"))?
            .tcp_nodelay(true)
            .connect()
            .await
            .with_context(|| format!("connect {target}"))?;
        channels.push(ch);
    }
    let sent = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let ch = channels[t % channels.len()].clone();
        let (reqs, sent, refused, seq) = (reqs.clone(), sent.clone(), refused.clone(), seq.clone());
        tasks.push(tokio::spawn(async move {
            let mut client = tonic::client::Grpc::new(ch);
            let mut i = t;
            let mut body = Bytes::new();
            let mut resend = false;
            while Instant::now() < deadline {
                if total_spans > 0 && sent.load(Ordering::Relaxed) >= total_spans {
                    break;
                }
                if !resend {
                    let (template, offsets) = &reqs[i % reqs.len()];
                    let n = seq.fetch_add(1, Ordering::Relaxed) as u32;
                    let mut b = template.to_vec();
                    for o in offsets {
                        b[o + 4..o + 8].copy_from_slice(&n.to_be_bytes());
                    }
                    body = Bytes::from(b);
                }
                resend = false;
                i += concurrency;
                if client.ready().await.is_err() {
                    refused.fetch_add(1, Ordering::Relaxed);
                    resend = true;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                let r = client
                    .unary::<Vec<Bytes>, ExportTraceServiceResponse, _>(
                        tonic::Request::new(vec![body.clone()]),
                        http::uri::PathAndQuery::from_static(export_path(Signal::Traces)),
                        ClientCodec::default(),
                    )
                    .await;
                match r {
                    Ok(_) => {
                        sent.fetch_add(spans as u64, Ordering::Relaxed);
                    }
                    Err(_) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        resend = true; // send the refused request again
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let secs = start.elapsed().as_secs_f64();
    let n = sent.load(Ordering::Relaxed);
    println!(
        "{{\"role\":\"send\",\"spans_accepted\":{n},\"seconds\":{secs:.3},\"spans_per_sec\":{:.0},\"refused_requests\":{},\"bytes_per_span\":{span_bytes:.1},\"spans_per_request\":{spans}}}",
        n as f64 / secs,
        refused.load(Ordering::Relaxed)
    );
    Ok(())
}

/// Counts the items of one signal.
#[derive(Clone)]
struct SinkSvc<const LOGS: bool> {
    spans: Arc<AtomicU64>,
    last: Arc<AtomicU64>,
}

impl NamedService for SinkSvc<false> {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
}

impl NamedService for SinkSvc<true> {
    const NAME: &'static str = "opentelemetry.proto.collector.logs.v1.LogsService";
}

type BoxFut<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<const LOGS: bool> UnaryService<Bytes> for SinkSvc<LOGS> {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFut<tonic::Response<Self::Response>, tonic::Status>;
    fn call(&mut self, req: tonic::Request<Bytes>) -> Self::Future {
        let signal = if LOGS { Signal::Logs } else { Signal::Traces };
        let n = wire::scan(signal, req.get_ref())
            .map(|s| s.items)
            .unwrap_or(0);
        self.spans.fetch_add(n as u64, Ordering::Relaxed);
        self.last.store(now_ms(), Ordering::Relaxed);
        Box::pin(async { Ok(tonic::Response::new(ExportTraceServiceResponse::default())) })
    }
}

impl<B, const LOGS: bool> tower_service::Service<http::Request<B>> for SinkSvc<LOGS>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFut<Self::Response, Infallible>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }
    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let svc = self.clone();
        Box::pin(async move {
            let mut grpc =
                tonic::server::Grpc::new(ServerCodec::<ExportTraceServiceResponse>::default())
                    .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
                    .max_decoding_message_size(64 << 20);
            Ok(grpc.unary(svc, req).await)
        })
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

async fn sink(listen: String, idle_exit: u64) -> anyhow::Result<()> {
    let svc = SinkSvc::<false> {
        spans: Arc::new(AtomicU64::new(0)),
        last: Arc::new(AtomicU64::new(0)),
    };
    // Log records count into the same total (the response types are wire-compatible: both empty).
    let logs = SinkSvc::<true> {
        spans: svc.spans.clone(),
        last: svc.last.clone(),
    };
    let listener = tokio::net::TcpListener::bind(&listen).await?;
    let (spans, last) = (svc.spans.clone(), svc.last.clone());
    let first = Arc::new(AtomicU64::new(0));
    let stop = async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let l = last.load(Ordering::Relaxed);
            if l > 0 && first.load(Ordering::Relaxed) == 0 {
                first.store(l, Ordering::Relaxed);
            }
            if l > 0 && now_ms().saturating_sub(l) > idle_exit * 1000 {
                break;
            }
        }
    };
    tonic::transport::Server::builder()
        .add_service(svc)
        .add_service(logs)
        .serve_with_incoming_shutdown(tonic::transport::server::TcpIncoming::from(listener), stop)
        .await?;
    println!(
        "{{\"role\":\"sink\",\"spans_received\":{}}}",
        spans.load(Ordering::Relaxed)
    );
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    match cli.command {
        Cmd::Send {
            target,
            seconds,
            spans,
            concurrency,
            connections,
            error_every,
            slow_every,
            total_spans,
        } => rt.block_on(send(
            target,
            seconds,
            spans,
            concurrency,
            connections,
            error_every,
            slow_every,
            total_spans,
        )),
        Cmd::Sink { listen, idle_exit } => rt.block_on(sink(listen, idle_exit)),
    }
}

//! Load generator and counting sink for whole-daemon benchmarks.
//!
//! `loadgen send` pre-encodes OTLP trace requests (10-attribute spans, 500 a
//! request by default) and sends them over OTLP/gRPC as fast as the target
//! accepts, with a fixed number of requests in flight. `loadgen sink` is an
//! OTLP/gRPC server that counts the spans it receives without decoding them.
//! Both print one JSON line of results.

use anyhow::Context as _;
use bytes::Bytes;
use causeway_core::grpc::{export_path, ServerCodec};
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
    Send(Load),
    /// Count spans received over OTLP/gRPC.
    Sink {
        /// host:port to listen on.
        #[arg(long, default_value = "127.0.0.1:5317")]
        listen: String,
        /// Exit after no data for this many seconds once data arrived.
        #[arg(long, default_value = "5")]
        idle_exit: u64,
        /// Write, per trace set (renumbered trace ids), when a span of it
        /// was first received: `set ms` lines (decodes every request).
        #[arg(long)]
        seen_log: Option<std::path::PathBuf>,
        /// Write every trace id received, once, with `1` when a span of it
        /// is an error or lasts 1 s or more (what deterministic policies
        /// keep), else `0`: `hex flag` lines (decodes every request).
        #[arg(long)]
        kept_log: Option<std::path::PathBuf>,
        /// A backend that flaps: `UP,DOWN` seconds, answering UNAVAILABLE
        /// (retryable) while down, starting up.
        #[arg(long)]
        flap: Option<String>,
        /// Every second, write `spans log_records` received so far here.
        #[arg(long)]
        count_file: Option<std::path::PathBuf>,
    },
}

use causeway_core::model::attribute as kv;

/// splitmix64: the random-looking ids and values real SDKs produce, from a counter.
fn mix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// An error span's status, or an unset one.
fn span_status(err: bool) -> Option<Status> {
    Some(Status {
        code: if err {
            status::StatusCode::Error as i32
        } else {
            status::StatusCode::Unset as i32
        },
        message: String::new(),
    })
}

/// A span's 10 attributes, varied by `r` as real traffic's are (order ids
/// in paths, client addresses, user agents).
fn attributes(r: u64, err: bool) -> Vec<KeyValue> {
    let s = |x: &str| any_value::Value::StringValue(x.into());
    const AGENTS: [&str; 4] = [
        "okhttp/4.12.0",
        "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X)",
        "python-requests/2.31.0",
        "Go-http-client/2.0",
    ];
    vec![
        kv("http.request.method", s("GET")),
        kv("http.route", s("/api/v1/orders/{id}")),
        kv(
            "http.response.status_code",
            any_value::Value::IntValue(if err { 500 } else { 200 }),
        ),
        kv("url.path", s(&format!("/api/v1/orders/{}", r % 1_000_000))),
        kv("server.address", s("orders.shop.svc")),
        kv("server.port", any_value::Value::IntValue(8080)),
        kv("client.address", s(&client_address(r))),
        kv(
            "user_agent.original",
            s(AGENTS[(r >> 44) as usize % AGENTS.len()]),
        ),
        kv("route_id", s("orders-v2")),
        kv("net.proto", s("1.1")),
    ]
}

/// A client address (10.0.0.0/14) drawn from `r`.
fn client_address(r: u64) -> String {
    format!(
        "10.{}.{}.{}",
        (r >> 20) % 4,
        (r >> 28) % 256,
        (r >> 36) % 256
    )
}

/// A request of `n` spans with 10 attributes each; ids derived from `seed`.
/// Ids are random-looking and attribute values vary (order ids in paths,
/// client addresses, user agents, durations) as in real traffic, so that
/// compression ratios and costs are those of real telemetry (gzip about
/// 5:1), not of identical spans (60:1).
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
            trace_id.extend_from_slice(&mix(trace).to_be_bytes());
            let r = mix(id ^ 0x5bd1_e995);
            let start = 1_764_000_000_000_000_000u64 + id * 1_000_000 + r % 1_000_000;
            let slow = slow_every > 0 && trace.is_multiple_of(slow_every as u64);
            let dur = if slow {
                3_000_000_000
            } else {
                2_000_000 + r % 40_000_000
            };
            let err = error_every > 0 && (id as usize).is_multiple_of(error_every);
            Span {
                trace_id,
                span_id: mix(id).to_be_bytes().to_vec(),
                parent_span_id: if id.is_multiple_of(5) {
                    vec![]
                } else {
                    mix(id - 1).to_be_bytes().to_vec()
                },
                name: "GET /api/v1/orders/{id}".into(),
                kind: span::SpanKind::Server as i32,
                start_time_unix_nano: start,
                end_time_unix_nano: start + dur,
                attributes: attributes(r, err),
                status: span_status(err),
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

/// Span `j` of trace `t` of a set: a marker the sender overwrites with the
/// set's number (as it does in the trace ids), then `t` and `j`, so that
/// every span of a run has its own id, as profiles linking samples to
/// spans need.
fn span_id(t: u64, j: u64) -> Vec<u8> {
    let mut id = SPAN_MARKER.to_vec();
    id.extend_from_slice(&(((t as u32) << 12) | (j as u32 & 0xfff)).to_be_bytes());
    id
}

/// The first 4 bytes of a template's span ids (spread mode).
const SPAN_MARKER: [u8; 4] = [0xC0, 0xFF, 0xEE, 0x43];

/// The `parts` requests of one trace set: whole traces of `min..=max`
/// spans, about `n` spans a request. Span j of a trace is in request
/// `j % parts`, comes from service `j % services` (a resource each) and is
/// a child of span `(j - 1) / 2`: a trace's spans arrive over `parts`
/// requests from several services, interleaved with the set's other
/// traces, as SDK batch exporters send them to a gateway. Every
/// `slow_every`-th trace's root lasts 3 s; every `error_every`-th span is
/// an error.
fn split_traces(
    n: usize,
    parts: usize,
    (min, max): (usize, usize),
    services: usize,
    error_every: usize,
    slow_every: usize,
) -> Vec<ExportTraceServiceRequest> {
    let (parts, services) = (parts.max(1), services.max(1));
    let mut out: Vec<Vec<Vec<Span>>> = vec![vec![Vec::new(); services]; parts];
    let (mut total, mut t, mut id) = (0usize, 0u64, 0u64);
    while total < n * parts {
        let len = min + (mix(t ^ 0xA5A5) % (max.saturating_sub(min) + 1) as u64) as usize;
        let mut trace_id = vec![0xC0, 0xFF, 0xEE, 0x42];
        trace_id.extend_from_slice(&(t as u32).to_be_bytes());
        trace_id.extend_from_slice(&mix(t).to_be_bytes());
        let slow = slow_every > 0 && t.is_multiple_of(slow_every as u64);
        let t0 = 1_764_000_000_000_000_000u64 + t * 1_000_000;
        for j in 0..len as u64 {
            id += 1;
            let r = mix(id ^ 0x5bd1_e995);
            let start = t0 + j * 1_000_000 + r % 1_000_000;
            let dur = if slow && j == 0 {
                3_000_000_000
            } else {
                2_000_000 + r % 40_000_000
            };
            let err = error_every > 0 && id.is_multiple_of(error_every as u64);
            let span = Span {
                trace_id: trace_id.clone(),
                span_id: span_id(t, j),
                parent_span_id: if j == 0 {
                    vec![]
                } else {
                    span_id(t, (j - 1) / 2)
                },
                name: "GET /api/v1/orders/{id}".into(),
                kind: if j == 0 {
                    span::SpanKind::Server
                } else {
                    span::SpanKind::Client
                } as i32,
                start_time_unix_nano: start,
                end_time_unix_nano: start + dur,
                attributes: attributes(r, err),
                status: span_status(err),
                ..Default::default()
            };
            out[j as usize % parts][j as usize % services].push(span);
        }
        total += len;
        t += 1;
    }
    out.into_iter()
        .map(|by_service| ExportTraceServiceRequest {
            resource_spans: by_service
                .into_iter()
                .enumerate()
                .filter(|(_, spans)| !spans.is_empty())
                .map(|(k, spans)| ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![
                            kv(
                                "service.name",
                                any_value::Value::StringValue(format!("service-{k}")),
                            ),
                            kv(
                                "host.name",
                                any_value::Value::StringValue(format!("node-{k}")),
                            ),
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
                })
                .collect(),
        })
        .collect()
}

/// Send `per_sec` items of `signal` a second over `ch`, in requests of
/// `per_request` made by `body(i)`, until `deadline`; a refused request is
/// sent again.
async fn paced(
    deadline: Instant,
    per_sec: u64,
    per_request: u64,
    ch: tonic::transport::Channel,
    headers: http::HeaderMap,
    signal: Signal,
    mut body: impl FnMut(u64) -> Bytes,
) {
    let start = Instant::now();
    let mut i = 0u64;
    while Instant::now() < deadline {
        let due = start + Duration::from_secs_f64(i as f64 * per_request as f64 / per_sec as f64);
        tokio::time::sleep_until(due.into()).await;
        let sent = causeway_core::grpc::unary(
            &ch,
            export_path(signal),
            &headers,
            causeway_core::compress::Codec::None,
            vec![body(i)],
        )
        .await;
        if sent.is_ok() {
            i += 1;
        } else {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// 100 gateway access-log records as OTLP logs, carrying the trace ids of
/// trace set `set` of `traces_per_set` traces (the spans' renumbered ids):
/// route, method, status, duration, upstream, client, and on some a 429
/// with its rate-limit rule or a 503 with an open circuit.
fn gateway_logs(
    i: u64,
    set: u64,
    traces_per_set: u64,
) -> opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest {
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    let s = |x: &str| any_value::Value::StringValue(x.into());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let records = (0..100u64)
        .map(|k| {
            let trace = mix(i * 100 + k) % traces_per_set;
            let mut trace_id = vec![0xC0, 0xFF, 0xEE, 0x42];
            trace_id.extend_from_slice(&(set as u32).to_be_bytes());
            trace_id.extend_from_slice(&mix(trace).to_be_bytes());
            let r = mix(i ^ (k << 32));
            let status = match r % 200 {
                0 => 429,
                1 => 503,
                _ => 200,
            };
            let mut attributes = vec![
                kv(
                    "route_id",
                    s(["orders-v2", "payment-charge", "catalog", "search"][(r >> 8) as usize % 4]),
                ),
                kv("http.request.method", s("GET")),
                kv("url.path", s(&format!("/api/v1/orders/{}", r % 1_000_000))),
                kv(
                    "http.response.status_code",
                    any_value::Value::IntValue(status),
                ),
                kv(
                    "duration_ms",
                    any_value::Value::IntValue(((r >> 16) % 400) as i64),
                ),
                kv("upstream", s("10.0.3.7:8080")),
                kv("client.address", s(&client_address(r))),
            ];
            if status == 429 {
                attributes.push(kv("rate_limit_rule", s("qps-100-per-ip")));
            }
            if status == 503 {
                attributes.push(kv("circuit_state", s("OPEN")));
            }
            LogRecord {
                time_unix_nano: now,
                observed_time_unix_nano: now,
                severity_number: 9,
                severity_text: "INFO".into(),
                body: Some(AnyValue {
                    value: Some(s("GET /api/v1/orders")),
                }),
                attributes,
                trace_id,
                span_id: mix(r).to_be_bytes().to_vec(),
                ..Default::default()
            }
        })
        .collect();
    opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("api-gateway"))],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Each service and the ids of its spans in a trace set (see [`spans_by_service`]).
type SpansByService = Vec<(String, Vec<[u8; 4]>)>;

/// The span ids of each service in a trace set's templates (spread mode),
/// without their set's number: `(service.name, [t and j])`.
fn spans_by_service(templates: &[ExportTraceServiceRequest]) -> SpansByService {
    let mut out: Vec<(String, Vec<[u8; 4]>)> = Vec::new();
    for rs in templates.iter().flat_map(|r| &r.resource_spans) {
        let name = rs
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|kv| kv.key == "service.name")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .unwrap_or_default();
        let ids = rs
            .scope_spans
            .iter()
            .flat_map(|s| &s.spans)
            .filter(|s| s.span_id.starts_with(&SPAN_MARKER))
            .filter_map(|s| s.span_id[4..].try_into().ok());
        match out.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.extend(ids),
            None => out.push((name, ids.collect())),
        }
    }
    out.retain(|(_, v)| !v.is_empty());
    out
}

/// One second of one service's profiles, as a Go service profiled at
/// 100 Hz with its samples linked to their spans sends them (pprof labels
/// by otel-profiling-go; the eBPF profiler's span ids): a CPU profile of
/// `samples` 10 ms samples, each linked to a span of the service in one
/// of the last 20 trace sets sent, their stacks 30 frames deep out of 200
/// distinct stacks of 300 functions; and a mutex profile of one unlinked
/// sample per 50.
fn service_profiles(
    i: u64,
    (service, spans): (&str, &[[u8; 4]]),
    samples: u64,
    last_set: u64,
) -> opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use opentelemetry_proto::tonic::profiles::v1development::{
        Link, Profile, ResourceProfiles, Sample, ScopeProfiles, ValueType,
    };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut d = causeway_scenarios::profiles::go_service_dictionary(service);
    let mut cpu = Vec::new();
    for k in 0..samples {
        let r = mix(i.wrapping_mul(1_000_003) ^ k);
        let set = last_set.saturating_sub(r % 20).max(1) as u32;
        let mut span_id = set.to_be_bytes().to_vec();
        span_id.extend_from_slice(&spans[(r >> 8) as usize % spans.len()]);
        d.link_table.push(Link {
            trace_id: Vec::new(),
            span_id,
        });
        cpu.push(Sample {
            stack_index: 1 + ((r >> 32) % 200) as i32,
            link_index: d.link_table.len() as i32 - 1,
            values: vec![10_000_000],
            ..Default::default()
        });
    }
    let mutex = (0..samples.div_ceil(50))
        .map(|k| Sample {
            stack_index: 1 + (mix(i ^ (k << 40)) % 200) as i32,
            values: vec![5_000_000],
            ..Default::default()
        })
        .collect();
    let profile = |type_strindex, samples| Profile {
        sample_type: Some(ValueType {
            type_strindex,
            unit_strindex: 2,
        }),
        samples,
        time_unix_nano: now.saturating_sub(1_000_000_000),
        duration_nano: 1_000_000_000,
        ..Default::default()
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![kv(
                    "service.name",
                    any_value::Value::StringValue(service.into()),
                )],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![profile(1, cpu), profile(3, mutex)],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(d),
    }
}

/// 100 gauge points of host metrics (CPU and memory utilization, load) of
/// 20 hosts, now.
fn host_metrics(
    i: u64,
) -> opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest {
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    };
    let s = |x: &str| any_value::Value::StringValue(x.into());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let resource_metrics = (0..20u64)
        .map(|h| {
            let metrics = [
                "system.cpu.utilization",
                "system.memory.utilization",
                "system.cpu.load_average.1m",
                "system.disk.io_time",
                "system.network.dropped",
            ]
            .iter()
            .map(|name| Metric {
                name: (*name).into(),
                unit: "1".into(),
                data: Some(metric::Data::Gauge(Gauge {
                    data_points: vec![NumberDataPoint {
                        time_unix_nano: now,
                        value: Some(number_data_point::Value::AsDouble(
                            (mix(i ^ h) % 1000) as f64 / 1000.0,
                        )),
                        ..Default::default()
                    }],
                })),
                ..Default::default()
            })
            .collect();
            ResourceMetrics {
                resource: Some(Resource {
                    attributes: vec![kv("host.name", s(&format!("node-{h}")))],
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest {
        resource_metrics,
    }
}

/// What `loadgen send` sends.
#[derive(clap::Args)]
struct Load {
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
    /// Compress requests: none, gzip or zstd (as an SDK or a sidecar
    /// Collector sends them). Compressed templates are compressed once,
    /// up front, and sent without renumbering their trace ids.
    #[arg(long, default_value = "none")]
    compression: String,
    /// Spread each trace over `parts` requests, `spread` requests apart
    /// (as SDK batch processors send a trace's spans in several exports):
    /// by default each request carries one span of each of 500 traces.
    /// 0: a request holds 100 whole traces of 5 spans.
    #[arg(long, default_value = "0")]
    spread: u64,
    /// With `--spread`: how many requests a trace's spans are split over.
    #[arg(long, default_value = "5")]
    parts: usize,
    /// With `--spread`: spans a trace, `N` or `MIN-MAX` (default: `parts`,
    /// one span in each request).
    #[arg(long)]
    trace_spans: Option<String>,
    /// With `--spread`: services a trace's spans come from (a resource
    /// each in a request).
    #[arg(long, default_value = "1")]
    services: usize,
    /// Spans a second at most (0: as fast as accepted).
    #[arg(long, default_value = "0")]
    rate: u64,
    /// Also send this many OTLP log records a second: gateway access-log
    /// records (route, status, upstream, rate-limit rule, circuit
    /// state) carrying the trace ids of the spans just sent.
    #[arg(long, default_value = "0")]
    logs_per_sec: u64,
    /// Also send this many OTLP gauge data points a second (host
    /// metrics of 20 hosts).
    #[arg(long, default_value = "0")]
    points_per_sec: u64,
    /// Also send this many CPU profile samples a second (spread mode),
    /// each linked to a span just sent: each service's CPU and mutex
    /// profiles of the last second, every second (see `service_profiles`).
    #[arg(long, default_value = "0")]
    profile_samples_per_sec: u64,
    /// TLS: the CA certificate (PEM) that signed the receiver's; the
    /// server name checked is `localhost`.
    #[arg(long)]
    tls_ca: Option<std::path::PathBuf>,
    /// A bearer token sent with every request.
    #[arg(long)]
    token: Option<String>,
    /// Write, per trace set (spread mode), when its first and last
    /// slices were sent: `set first_ms last_ms` lines.
    #[arg(long)]
    sent_log: Option<std::path::PathBuf>,
}

/// `--trace-spans MIN-MAX` (or `N`), else every trace in `parts` parts.
fn trace_len(trace_spans: Option<&str>, parts: usize) -> anyhow::Result<(usize, usize)> {
    let Some(t) = trace_spans else {
        return Ok((parts, parts));
    };
    let (a, b) = t.split_once('-').unwrap_or((t, t));
    let (a, b) = (a.parse()?, b.parse()?);
    anyhow::ensure!(
        0 < a && a <= b,
        "--trace-spans {t}: MIN-MAX with 0 < MIN <= MAX"
    );
    Ok((a, b))
}

/// Each template encoded, with the offsets of its trace ids' marker (where
/// a send writes its number), or compressed once by `codec` (and never
/// renumbered).
fn encode(
    templates: &[ExportTraceServiceRequest],
    codec: causeway_core::compress::Codec,
) -> Vec<(Bytes, Vec<usize>)> {
    use causeway_core::compress::{Codec, Transport};
    templates
        .iter()
        .map(|req| {
            let b = req.encode_to_vec();
            // A trace id's marker (field 1, 16 bytes) is kept and the set's
            // number written after it; a span id's or a parent's (fields 2
            // and 4, 8 bytes) is overwritten with it.
            let offsets = b
                .windows(6)
                .enumerate()
                .filter_map(|(o, w)| match w {
                    [0x0a, 0x10, 0xC0, 0xFF, 0xEE, 0x42] => Some(o + 6),
                    [0x12 | 0x22, 0x08, m @ ..] if m == SPAN_MARKER => Some(o + 2),
                    _ => None,
                })
                .collect();
            if codec != Codec::None {
                let z = codec
                    .compress(Transport::Grpc, &[Bytes::from(b)])
                    .unwrap_or_default();
                return (z, Vec::new());
            }
            (Bytes::from(b), offsets)
        })
        .collect()
}

/// The spans in each template.
fn spans_in(templates: &[ExportTraceServiceRequest]) -> Vec<u64> {
    templates
        .iter()
        .map(|r| {
            r.resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len() as u64)
                .sum()
        })
        .collect()
}

/// `connections` channels to `target`, over TLS trusting `tls_ca` if given.
async fn connect(
    target: &str,
    tls_ca: Option<&std::path::Path>,
    connections: usize,
) -> anyhow::Result<Vec<tonic::transport::Channel>> {
    let scheme = if tls_ca.is_some() { "https" } else { "http" };
    let mut channels = Vec::new();
    for _ in 0..connections.max(1) {
        let mut ep = tonic::transport::Endpoint::from_shared(format!("{scheme}://{target}"))?
            .tcp_nodelay(true);
        if let Some(ca) = tls_ca {
            let pem = std::fs::read(ca).with_context(|| format!("{}", ca.display()))?;
            ep = ep.tls_config(
                tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(pem))
                    .domain_name("localhost"),
            )?;
        }
        let ch = ep
            .connect()
            .await
            .with_context(|| format!("connect {target}"))?;
        channels.push(ch);
    }
    Ok(channels)
}

/// What the span senders share: the encoded templates and the counts.
struct Senders {
    reqs: Vec<(Bytes, Vec<usize>)>,
    spans_per_template: Vec<u64>,
    codec: causeway_core::compress::Codec,
    headers: http::HeaderMap,
    /// Spans per request, and the rate asked (spans a second, 0: as fast as accepted).
    spans: usize,
    rate: u64,
    total_spans: u64,
    /// Spread mode: parts of a trace set `spread` requests apart (0: off).
    spread: u64,
    parts: u64,
    start: Instant,
    deadline: Instant,
    /// The next request's number.
    seq: AtomicU64,
    sent: AtomicU64,
    refused: AtomicU64,
    /// Per trace set (spread mode): number, first and last part's send (ms).
    sent_sets: std::sync::Mutex<Vec<(u64, u64, u64)>>,
    last_set: Arc<AtomicU64>,
}

impl Senders {
    /// Sender `t` on `ch` until the deadline or the total; a refused
    /// request is sent again.
    async fn run(self: Arc<Self>, ch: tonic::transport::Channel, t: usize) {
        let mut body = Bytes::new();
        let mut in_body = 0u64;
        let mut resend = false;
        while Instant::now() < self.deadline {
            if self.total_spans > 0 && self.sent.load(Ordering::Relaxed) >= self.total_spans {
                break;
            }
            if !resend {
                (body, in_body) = self.next(t).await;
            }
            resend = false;
            let r = causeway_core::grpc::unary(
                &ch,
                export_path(Signal::Traces),
                &self.headers,
                self.codec,
                vec![body.clone()],
            )
            .await;
            match r {
                Ok(_) => {
                    self.sent.fetch_add(in_body, Ordering::Relaxed);
                }
                Err(_) => {
                    self.refused.fetch_add(1, Ordering::Relaxed);
                    resend = true; // send the refused request again
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }

    /// The next request of sender `t` (when due at the rate) and its spans.
    async fn next(&self, t: usize) -> (Bytes, u64) {
        let n = self.seq.fetch_add(1, Ordering::Relaxed);
        if self.rate > 0 {
            // Request n is due n × spans / rate seconds after the start.
            let due = self.start
                + Duration::from_secs_f64(n as f64 * self.spans as f64 / self.rate as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        // Spread: request n carries part k of trace set r; the parts of a
        // set go `spread` requests apart.
        let (spread, parts) = (self.spread, self.parts);
        let (template, number) = if spread > 0 {
            let (block, pos) = (n / (parts * spread), n % (parts * spread));
            ((pos / spread) as usize, block * spread + pos % spread)
        } else {
            ((n as usize + t) % self.reqs.len(), n)
        };
        let in_body = self.spans_per_template[template];
        let last_part = parts as usize - 1;
        if spread > 0 && (template == 0 || template == last_part) {
            let ms = now_ms();
            let mut g = self.sent_sets.lock().unwrap_or_else(|p| p.into_inner());
            if template == 0 {
                g.push((number + 1, ms, 0));
                self.last_set.store(number + 1, Ordering::Relaxed);
            } else if let Some(e) = g.iter_mut().rev().find(|e| e.0 == number + 1) {
                e.2 = ms;
            }
        }
        let (template, offsets) = &self.reqs[template];
        let body = if offsets.is_empty() {
            template.clone()
        } else {
            let mut b = template.to_vec();
            for o in offsets {
                b[*o..o + 4].copy_from_slice(&(number as u32 + 1).to_be_bytes());
            }
            Bytes::from(b)
        };
        (body, in_body)
    }
}

/// The gateway-log and host-metric senders beside the spans: `logs` and
/// `points` a second (0: none), the log records carrying trace ids of the
/// last trace set sent.
fn side_senders(
    channels: &[tonic::transport::Channel],
    headers: &http::HeaderMap,
    deadline: Instant,
    (logs_per_sec, points_per_sec): (u64, u64),
    (last_set, traces_per_set): (Arc<AtomicU64>, u64),
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    // Four senders, each a quarter of the rate: one request in flight
    // cannot keep 200 requests a second against a busy daemon.
    for part in 0..4u64 {
        if logs_per_sec == 0 {
            break;
        }
        let ch = channels[part as usize % channels.len()].clone();
        let (headers, last_set) = (headers.clone(), last_set.clone());
        tasks.push(tokio::spawn(async move {
            paced(
                deadline,
                logs_per_sec.div_ceil(4),
                100,
                ch,
                headers,
                Signal::Logs,
                |i| {
                    let set = last_set.load(Ordering::Relaxed);
                    Bytes::from(gateway_logs(i * 4 + part, set, traces_per_set).encode_to_vec())
                },
            )
            .await;
        }));
    }
    if points_per_sec > 0 {
        let (ch, headers) = (channels[0].clone(), headers.clone());
        tasks.push(tokio::spawn(async move {
            paced(
                deadline,
                points_per_sec,
                100,
                ch,
                headers,
                Signal::Metrics,
                |i| Bytes::from(host_metrics(i).encode_to_vec()),
            )
            .await;
        }));
    }
    tasks
}

/// One profile sender per service: `samples_per_sec` CPU samples a second
/// over all of them, each service's profiles of the last second once a
/// second, linked to its spans of the last trace sets sent.
fn profile_senders(
    channels: &[tonic::transport::Channel],
    headers: &http::HeaderMap,
    deadline: Instant,
    samples_per_sec: u64,
    (by_service, last_set): (SpansByService, Arc<AtomicU64>),
) -> Vec<tokio::task::JoinHandle<()>> {
    let n = by_service.len() as u64;
    if samples_per_sec == 0 || n == 0 {
        return Vec::new();
    }
    let each = samples_per_sec.div_ceil(n);
    by_service
        .into_iter()
        .enumerate()
        .map(|(k, (service, spans))| {
            let ch = channels[k % channels.len()].clone();
            let (headers, last_set) = (headers.clone(), last_set.clone());
            tokio::spawn(async move {
                paced(deadline, each, each, ch, headers, Signal::Profiles, |i| {
                    let set = last_set.load(Ordering::Relaxed);
                    Bytes::from(
                        service_profiles(i * n + k as u64, (&service, &spans), each, set)
                            .encode_to_vec(),
                    )
                })
                .await;
            })
        })
        .collect()
}

/// Print what was sent (one JSON line), and write the trace sets' send
/// times to `sent_log` if asked.
fn report(
    senders: &Senders,
    start: Instant,
    sent_log: Option<std::path::PathBuf>,
    (span_bytes, wire_bytes_per_span): (f64, f64),
) -> anyhow::Result<()> {
    let spans = senders.spans;
    let secs = start.elapsed().as_secs_f64();
    let n = senders.sent.load(Ordering::Relaxed);
    if let Some(path) = sent_log {
        let g = senders.sent_sets.lock().unwrap_or_else(|p| p.into_inner());
        let lines: String = g
            .iter()
            .filter(|e| e.2 > 0)
            .map(|(s, a, b)| format!("{s} {a} {b}\n"))
            .collect();
        std::fs::write(&path, lines).with_context(|| format!("{}", path.display()))?;
    }
    println!(
        "{{\"role\":\"send\",\"spans_accepted\":{n},\"seconds\":{secs:.3},\"spans_per_sec\":{:.0},\"refused_requests\":{},\"bytes_per_span\":{span_bytes:.1},\"wire_bytes_per_span\":{wire_bytes_per_span:.1},\"spans_per_request\":{spans}}}",
        n as f64 / secs,
        senders.refused.load(Ordering::Relaxed)
    );
    Ok(())
}

/// The request templates and the traces in a set of them. Every send
/// renumbers the trace ids, so each request carries new traces (as real
/// traffic does) at the cost of one copy. Spread: `parts` templates,
/// template k holding part k of each trace.
fn templates(
    (spans, parts, trace_len, services): (usize, usize, (usize, usize), usize),
    (spread, error_every, slow_every): (u64, usize, usize),
) -> (Vec<ExportTraceServiceRequest>, u64) {
    let templates: Vec<ExportTraceServiceRequest> = if spread > 0 {
        split_traces(spans, parts, trace_len, services, error_every, slow_every)
    } else {
        (0..64)
            .map(|i| request(i, spans, error_every, slow_every))
            .collect()
    };
    // The log records carry trace ids of the last set sent.
    let traces_per_set = templates[0]
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| &s.trace_id)
        .collect::<std::collections::HashSet<_>>()
        .len()
        .max(1) as u64;
    (templates, traces_per_set)
}

async fn send(load: Load) -> anyhow::Result<()> {
    use causeway_core::compress::Codec;
    let Load {
        target,
        seconds,
        spans,
        concurrency,
        connections,
        error_every,
        slow_every,
        total_spans,
        compression,
        spread,
        parts,
        trace_spans,
        services,
        rate,
        logs_per_sec,
        points_per_sec,
        profile_samples_per_sec,
        tls_ca,
        token,
        sent_log,
    } = load;
    let codec =
        Codec::from_encoding(&compression).map_err(|e| anyhow::anyhow!("--compression: {e}"))?;
    let mut extra = http::HeaderMap::new();
    if let Some(t) = &token {
        extra.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_str(&format!("Bearer {t}"))?,
        );
    }
    let headers = causeway_core::grpc::unary_headers(extra);
    let trace_len = trace_len(trace_spans.as_deref(), parts)?;
    let (templates, traces_per_set) = templates(
        (spans, parts, trace_len, services),
        (spread, error_every, slow_every),
    );
    let channels = connect(&target, tls_ca.as_deref(), connections).await?;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let senders = Arc::new(Senders {
        reqs: encode(&templates, codec),
        spans_per_template: spans_in(&templates),
        codec,
        headers: headers.clone(),
        spans,
        rate,
        total_spans,
        spread,
        parts: parts.max(1) as u64,
        start,
        deadline,
        seq: AtomicU64::new(1),
        sent: AtomicU64::new(0),
        refused: AtomicU64::new(0),
        sent_sets: std::sync::Mutex::default(),
        last_set: Arc::new(AtomicU64::new(0)),
    });
    let wire_bytes_per_span =
        senders.reqs[0].0.len() as f64 / senders.spans_per_template[0].max(1) as f64;
    let span_bytes = request(0, spans, error_every, slow_every).encoded_len() as f64 / spans as f64;
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let ch = channels[t % channels.len()].clone();
        tasks.push(tokio::spawn(senders.clone().run(ch, t)));
    }
    tasks.extend(side_senders(
        &channels,
        &headers,
        deadline,
        (logs_per_sec, points_per_sec),
        (senders.last_set.clone(), traces_per_set),
    ));
    let by_service = if spread > 0 {
        spans_by_service(&templates)
    } else {
        Vec::new()
    };
    tasks.extend(profile_senders(
        &channels,
        &headers,
        deadline,
        profile_samples_per_sec,
        (by_service, senders.last_set.clone()),
    ));
    for t in tasks {
        t.await?;
    }
    report(&senders, start, sent_log, (span_bytes, wire_bytes_per_span))
}

/// Counts the items of one signal.
#[derive(Clone)]
struct SinkSvc<const LOGS: bool> {
    spans: Arc<AtomicU64>,
    last: Arc<AtomicU64>,
    /// `--flap`: (up, down) seconds and when the sink started.
    flap: Option<(u64, u64, Instant)>,
    /// With `--seen-log`: trace set -> when a span of it first arrived.
    seen: Option<Arc<std::sync::Mutex<std::collections::HashMap<u32, u64>>>>,
    /// With `--kept-log`: trace id -> whether an error or slow span of it came.
    kept: Option<Kept>,
}

/// Trace ids received, with whether a deterministic policy's span came.
type Kept = Arc<std::sync::Mutex<std::collections::HashMap<[u8; 16], bool>>>;

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
        if let Some((up, down, t0)) = self.flap {
            if t0.elapsed().as_secs() % (up + down) >= up {
                return Box::pin(async { Err(tonic::Status::unavailable("flapping: down")) });
            }
        }
        let signal = if LOGS { Signal::Logs } else { Signal::Traces };
        let n = wire::scan(signal, req.get_ref())
            .map(|s| s.items)
            .unwrap_or(0);
        self.spans.fetch_add(n as u64, Ordering::Relaxed);
        let now = now_ms();
        self.last.store(now, Ordering::Relaxed);
        if let (Some(kept), false) = (&self.kept, LOGS) {
            if let Ok(req) = ExportTraceServiceRequest::decode(req.get_ref().clone()) {
                let mut g = kept.lock().unwrap_or_else(|p| p.into_inner());
                for sp in req
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .flat_map(|s| &s.spans)
                {
                    let Ok(id) = <[u8; 16]>::try_from(sp.trace_id.as_slice()) else {
                        continue;
                    };
                    let error = sp
                        .status
                        .as_ref()
                        .is_some_and(|s| s.code == status::StatusCode::Error as i32);
                    let slow = sp
                        .end_time_unix_nano
                        .saturating_sub(sp.start_time_unix_nano)
                        >= 1_000_000_000;
                    *g.entry(id).or_insert(false) |= error || slow;
                }
            }
        }
        if let (Some(seen), false) = (&self.seen, LOGS) {
            if let Ok(req) = ExportTraceServiceRequest::decode(req.get_ref().clone()) {
                let mut g = seen.lock().unwrap_or_else(|p| p.into_inner());
                for sp in req
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .flat_map(|s| &s.spans)
                {
                    if sp.trace_id.len() == 16 && sp.trace_id[..4] == [0xC0, 0xFF, 0xEE, 0x42] {
                        let set = u32::from_be_bytes([
                            sp.trace_id[4],
                            sp.trace_id[5],
                            sp.trace_id[6],
                            sp.trace_id[7],
                        ]);
                        g.entry(set).or_insert(now);
                    }
                }
            }
        }
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
                    .accept_compressed(tonic::codec::CompressionEncoding::Zstd)
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

async fn sink(
    listen: String,
    idle_exit: u64,
    seen_log: Option<std::path::PathBuf>,
    kept_log: Option<std::path::PathBuf>,
    flap: Option<String>,
    count_file: Option<std::path::PathBuf>,
) -> anyhow::Result<()> {
    let flap = match flap {
        Some(f) => {
            let (up, down) = f.split_once(',').context("--flap UP,DOWN (seconds)")?;
            Some((up.parse()?, down.parse()?, Instant::now()))
        }
        None => None,
    };
    let seen = seen_log.as_ref().map(|_| Arc::default());
    let kept: Option<Kept> = kept_log.as_ref().map(|_| Arc::default());
    let svc = SinkSvc::<false> {
        spans: Arc::new(AtomicU64::new(0)),
        last: Arc::new(AtomicU64::new(0)),
        flap,
        seen: seen.clone(),
        kept: kept.clone(),
    };
    // Log records are counted apart (the response types are wire-compatible: both empty).
    let logs = SinkSvc::<true> {
        spans: Arc::new(AtomicU64::new(0)),
        last: svc.last.clone(),
        flap,
        seen: None,
        kept: None,
    };
    if let Some(path) = count_file {
        let (s, l) = (svc.spans.clone(), logs.spans.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let tmp = path.with_extension("tmp");
                let line = format!(
                    "{} {}\n",
                    s.load(Ordering::Relaxed),
                    l.load(Ordering::Relaxed)
                );
                if std::fs::write(&tmp, line).is_ok() {
                    std::fs::rename(&tmp, &path).ok();
                }
            }
        });
    }
    let log_records = logs.spans.clone();
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
    if let (Some(path), Some(seen)) = (seen_log, seen) {
        let g = seen.lock().unwrap_or_else(|p| p.into_inner());
        let lines: String = g.iter().map(|(s, t)| format!("{s} {t}\n")).collect();
        std::fs::write(&path, lines).with_context(|| format!("{}", path.display()))?;
    }
    if let (Some(path), Some(kept)) = (kept_log, kept) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let g = kept.lock().unwrap_or_else(|p| p.into_inner());
        let mut lines = Vec::with_capacity(g.len() * 35);
        for (id, flag) in g.iter() {
            for b in id {
                lines.extend([HEX[usize::from(b >> 4)], HEX[usize::from(b & 15)]]);
            }
            lines.extend_from_slice(if *flag { b" 1\n" } else { b" 0\n" });
        }
        std::fs::write(&path, lines).with_context(|| format!("{}", path.display()))?;
    }
    println!(
        "{{\"role\":\"sink\",\"spans_received\":{},\"log_records_received\":{}}}",
        spans.load(Ordering::Relaxed),
        log_records.load(Ordering::Relaxed)
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
        Cmd::Send(load) => rt.block_on(send(load)),
        Cmd::Sink {
            listen,
            idle_exit,
            seen_log,
            kept_log,
            flap,
            count_file,
        } => rt.block_on(sink(
            listen, idle_exit, seen_log, kept_log, flap, count_file,
        )),
    }
}

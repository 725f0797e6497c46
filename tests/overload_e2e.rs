//! Overload: clients offer far more than the daemon can export. With
//! `service.memory_limiter`, resident memory stays under the limit, the
//! clients get retryable refusals (HTTP 429 with Retry-After), and every
//! request that was accepted reaches the backend.

mod common;

use common::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const LIMIT_MIB: u64 = 192;

/// A request of about 512 KiB: 64 spans with an 8 KiB attribute each, the
/// request number in every span name.
fn request(r: u64) -> Vec<u8> {
    let blob = "x".repeat(8 << 10);
    let spans = (0..64u64)
        .map(|i| Span {
            trace_id: [(r + 1).to_be_bytes(), (i + 1).to_be_bytes()].concat(),
            span_id: (i + 1).to_be_bytes().to_vec(),
            name: format!("r{r}"),
            attributes: vec![opentelemetry_proto::tonic::common::v1::KeyValue {
                key: "blob".into(),
                value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                    value: Some(
                        opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                            blob.clone(),
                        ),
                    ),
                }),
                ..Default::default()
            }],
            ..Default::default()
        })
        .collect();
    causeway_core::model::traces_request(spans).to_vec()
}

/// A slow OTLP/HTTP backend: 200 ms a request, remembering the request
/// numbers it received.
fn slow_backend() -> (String, Arc<Mutex<HashSet<u64>>>) {
    let got: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let g = g.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                let Ok(req) = ExportTraceServiceRequest::decode(body.as_ref()) else {
                    return axum::http::StatusCode::BAD_REQUEST;
                };
                let mut g = g.lock().expect("lock");
                for rs in req.resource_spans {
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            if let Some(r) = s.name.strip_prefix('r').and_then(|x| x.parse().ok()) {
                                g.insert(r);
                            }
                        }
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    let url = serve_in_thread(app);
    (url, got)
}

/// The peak resident memory of process `pid`, sampled every `period`
/// from a thread of its own until [`PeakRss::stop`].
struct PeakRss {
    max: Arc<AtomicU64>,
    done: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl PeakRss {
    fn watch(pid: u32, period: Duration) -> PeakRss {
        let max = Arc::new(AtomicU64::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let thread = {
            let (max, done) = (max.clone(), done.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::SeqCst) {
                    if let Some(r) = rss_of(pid) {
                        max.fetch_max(r, Ordering::SeqCst);
                    }
                    std::thread::sleep(period); // the sampling period
                }
            })
        };
        PeakRss { max, done, thread }
    }

    /// The peak so far, in bytes.
    fn so_far(&self) -> u64 {
        self.max.load(Ordering::SeqCst)
    }

    /// Stop sampling; the peak in bytes.
    fn stop(self) -> u64 {
        self.done.store(true, Ordering::SeqCst);
        self.thread.join().expect("sampler");
        self.max.load(Ordering::SeqCst)
    }
}

fn rss_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[test]
fn ten_times_the_export_rate_stays_under_the_memory_limit_and_loses_nothing_accepted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (backend, got) = slow_backend();
    let http = free_port();
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{http}", max_request_body_size: 4MiB }}
exporters:
  otlphttp:
    endpoint: "{backend}"
    compression: none
    timeout: 10s
    retry_on_failure: {{ max_elapsed_time: 0s }}
    # Room for far more than the memory limit: memory, not the queue, is the bound here.
    sending_queue: {{ queue_size: 100000, num_consumers: 2 }}
service:
  memory_limiter:
    limit: {LIMIT_MIB}MiB
    spike_limit: 48MiB
    check_interval: 50ms
  pipelines:
    traces: {{ receivers: [otlp], exporters: [otlphttp] }}
  shutdown_timeout: 60s
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    );
    let d = Daemon::start(dir.path(), "overload", &config);
    let pid = d.child.id();
    let peak_rss = PeakRss::watch(pid, Duration::from_millis(10));
    // The backend takes 2 × 5 requests/s (2.5 MiB/s); 8 clients offer as
    // fast as the daemon answers, for 8 seconds.
    let accepted: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let refused = Arc::new(AtomicU64::new(0));
    let hinted = Arc::new(AtomicU64::new(0));
    let offered = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let clients: Vec<_> = (0..8u64)
        .map(|c| {
            let (accepted, refused, hinted, offered) = (
                accepted.clone(),
                refused.clone(),
                hinted.clone(),
                offered.clone(),
            );
            let url = format!("http://127.0.0.1:{http}/v1/traces");
            std::thread::spawn(move || {
                let client = http_client();
                let mut r = c;
                while start.elapsed() < Duration::from_secs(8) {
                    let body = request(r);
                    offered.fetch_add(body.len() as u64, Ordering::SeqCst);
                    let Ok(resp) = client
                        .post(&url)
                        .header("content-type", "application/x-protobuf")
                        .body(body)
                        .send()
                    else {
                        return false; // the daemon stopped answering
                    };
                    match resp.status().as_u16() {
                        200 => {
                            accepted.lock().expect("lock").insert(r);
                        }
                        429 | 503 => {
                            refused.fetch_add(1, Ordering::SeqCst);
                            if resp.headers().get("retry-after").is_some() {
                                hinted.fetch_add(1, Ordering::SeqCst);
                            }
                            // Back off as told (briefly: this is the overload).
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        s => panic!("unexpected status {s}"),
                    }
                    r += 8;
                }
                true
            })
        })
        .collect();
    for c in clients {
        assert!(
            c.join().expect("client"),
            "the daemon stopped answering:\n{}",
            d.stderr("overload")
        );
    }
    let offered_mib = offered.load(Ordering::SeqCst) as f64 / (1 << 20) as f64;
    let accepted = accepted.lock().expect("lock").clone();
    // Everything accepted reaches the backend.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !accepted.is_subset(&got.lock().expect("lock")) {
        assert!(
            Instant::now() < deadline,
            "accepted requests never delivered: {} of {}",
            accepted.difference(&got.lock().expect("lock")).count(),
            accepted.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let max = peak_rss.stop();
    let refused = refused.load(Ordering::SeqCst);
    eprintln!(
        "offered {offered_mib:.0} MiB in 8 s ({:.1}× the backend's 2.5 MiB/s), accepted {} requests, refused {refused}, max RSS {} MiB (limit {LIMIT_MIB} MiB)",
        offered_mib / 8.0 / 2.5,
        accepted.len(),
        max >> 20
    );
    assert!(
        offered_mib / 8.0 >= 25.0,
        "the clients offered at least ten times what the backend takes"
    );
    assert!(refused > 0, "the clients were refused");
    assert_eq!(
        hinted.load(Ordering::SeqCst),
        refused,
        "every refusal carries Retry-After"
    );
    assert!(
        max < LIMIT_MIB << 20,
        "RSS {} MiB over the {LIMIT_MIB} MiB limit",
        max >> 20
    );
    let refused_metric = d
        .metric("causeway_memory_limiter_refused_requests_total{receiver=\"otlp\",level=\"soft\"}")
        .unwrap_or(0.0);
    assert!(
        refused_metric > 0.0,
        "the limiter refused (not only the queue)"
    );
}

/// One slow uploader: a 4 MiB body announced, sent 64 KiB every 60 ms.
/// Returns the HTTP status it got (0: the connection broke first).
fn slow_upload(port: u16) -> u16 {
    use std::io::{Read, Write};
    const SIZE: usize = 4 << 20;
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return 0;
    };
    s.set_read_timeout(Some(Duration::from_secs(60))).ok();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/x-protobuf\r\nContent-Length: {SIZE}\r\n\r\n"
    );
    if s.write_all(head.as_bytes()).is_err() {
        return 0;
    }
    let chunk = vec![0u8; 64 << 10];
    let mut sent = 0;
    while sent < SIZE {
        // A refused client hears at once, before its body is read.
        s.set_nonblocking(true).ok();
        let mut peek = [0u8; 12];
        if let Ok(n) = s.peek(&mut peek) {
            if n >= 12 {
                s.set_nonblocking(false).ok();
                break;
            }
        }
        s.set_nonblocking(false).ok();
        if s.write_all(&chunk).is_err() {
            break;
        }
        sent += chunk.len();
        std::thread::sleep(Duration::from_millis(60)); // the client's pace: it is slow by design
    }
    let mut buf = [0u8; 12];
    match s.read_exact(&mut buf) {
        Ok(()) => std::str::from_utf8(&buf[9..12])
            .ok()
            .and_then(|x| x.parse().ok())
            .unwrap_or(0),
        Err(_) => 0,
    }
}

#[test]
fn two_hundred_slow_uploaders_are_refused_before_their_bodies_fill_memory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let http = free_port();
    let limit_mib = 160;
    let config = format!(
        r#"{receivers}exporters:
  file: {{ path: "{{dir}}/out.jsonl" }}
service:
  memory_limiter:
    limit: {limit_mib}MiB
    spike_limit: 48MiB
    check_interval: 50ms
  pipelines:
    traces: {{ receivers: [otlp], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        receivers = causeway_scenarios::config::otlp_http(http)
    );
    let d = Daemon::start(dir.path(), "uploads", &config);
    let pid = d.child.id();
    let peak_rss = PeakRss::watch(pid, Duration::from_millis(20));
    // 200 clients × 4 MiB = 800 MiB of bodies in flight at once, five times the limit.
    let clients: Vec<_> = (0..200)
        .map(|_| std::thread::spawn(move || slow_upload(http)))
        .collect();
    let statuses: Vec<u16> = clients
        .into_iter()
        .map(|c| c.join().expect("client"))
        .collect();
    let peak = peak_rss.stop();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    let read = statuses.iter().filter(|s| **s == 400).count();
    eprintln!(
        "200 slow uploaders: {refused} refused with 429, {read} read (400: zeros are no OTLP), others {:?}; peak RSS {} MiB of a {limit_mib} MiB limit",
        statuses.iter().filter(|s| **s != 429 && **s != 400).collect::<Vec<_>>(),
        peak >> 20
    );
    assert!(refused >= 150, "{refused} refused");
    assert!(read >= 1, "some uploads were admitted and read");
    assert!(
        peak < limit_mib << 20,
        "peak RSS {} MiB over the {limit_mib} MiB limit",
        peak >> 20
    );
    // The daemon still serves once the uploads are over.
    let ok = http_client()
        .post(format!("http://127.0.0.1:{http}/v1/traces"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .map(|r| r.status().as_u16());
    assert_eq!(ok.ok(), Some(200));
    assert!(d.terminate().success());
}

/// Over the memory limiter's soft limit (here 1 MiB: below what the daemon
/// needs at rest), OTLP/gRPC answers RESOURCE_EXHAUSTED with a RetryInfo detail,
/// and OTLP/HTTP 429 with Retry-After, as the OTLP spec asks.
#[tokio::test(flavor = "multi_thread")]
async fn over_the_memory_limit_grpc_says_resource_exhausted_with_retry_info() {
    use causeway_core::rpc::{RetryInfo, RpcStatus, RETRY_INFO_TYPE};
    let dir = tempfile::tempdir().expect("tempdir");
    let (grpc, http) = (free_port(), free_port());
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{grpc}" }}
      http: {{ endpoint: "127.0.0.1:{http}" }}
exporters:
  file: {{ path: "{{dir}}/out.jsonl" }}
service:
  memory_limiter:
    limit: 32MiB
    spike_limit: 31MiB
    check_interval: 50ms
    retry_after: 3s
  pipelines:
    traces: {{ receivers: [otlp], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    );
    let d = Daemon::start(dir.path(), "exhausted", &config);
    let err = otlp_grpc_traces(&format!("127.0.0.1:{grpc}"), bytes::Bytes::new())
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::ResourceExhausted, "{err:?}");
    let status = RpcStatus::decode(err.details()).expect("google.rpc.Status details");
    let info = status
        .details
        .iter()
        .find(|a| a.type_url == RETRY_INFO_TYPE)
        .expect("a RetryInfo detail");
    let delay = RetryInfo::decode(info.value.as_slice())
        .expect("RetryInfo")
        .retry_delay
        .expect("retry_delay");
    assert_eq!(delay.seconds, 3);
    let (status, after) = tokio::task::spawn_blocking(move || {
        let r = http_client()
            .post(format!("http://127.0.0.1:{http}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .body(Vec::<u8>::new())
            .send()
            .expect("http");
        let after = r
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        (r.status().as_u16(), after)
    })
    .await
    .expect("http client");
    assert_eq!(status, 429);
    assert_eq!(after.as_deref(), Some("3"));
    assert!(d.terminate().success());
}

/// A backend that refuses (503) until its gate opens, then takes every
/// request at once, remembering the request numbers it received.
fn gated_backend() -> (String, Arc<AtomicBool>, Arc<Mutex<HashSet<u64>>>) {
    let open = Arc::new(AtomicBool::new(false));
    let got: Arc<Mutex<HashSet<u64>>> = Arc::default();
    let (o, g) = (open.clone(), got.clone());
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (o, g) = (o.clone(), g.clone());
            async move {
                if !o.load(Ordering::SeqCst) {
                    return axum::http::StatusCode::SERVICE_UNAVAILABLE;
                }
                let Ok(req) = ExportTraceServiceRequest::decode(body.as_ref()) else {
                    return axum::http::StatusCode::BAD_REQUEST;
                };
                let mut g = g.lock().expect("lock");
                for s in req
                    .resource_spans
                    .iter()
                    .flat_map(|r| &r.scope_spans)
                    .flat_map(|s| &s.spans)
                {
                    if let Some(r) = s.name.strip_prefix('r').and_then(|x| x.parse().ok()) {
                        g.insert(r);
                    }
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    (serve_in_thread(app), open, got)
}

/// The `kafka` receiver under the memory budget: a topic with 5 GiB of
/// backlog, read by a daemon whose backend is down at first and whose
/// exporter queue may hold as much as the whole limit. Reading pauses
/// when memory passes the soft limit (the partitions keep the data), RSS
/// stays under the limit, and once the backend is back and memory falls,
/// reading resumes and every message is delivered.
#[test]
fn a_five_gib_kafka_backlog_stays_under_the_memory_limit_and_is_all_delivered() {
    use rdkafka::producer::{BaseRecord, Producer};
    const LIMIT: u64 = 256;
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = common::kafka::Broker::start(dir.path());
    broker.create_topic("flood", 4);
    // About 5.2 GiB: 10,240 requests of 528 KiB.
    let n = 10_240u64;
    let producer = broker.producer();
    for r in 0..n {
        let body = request(r);
        common::kafka::send_when_room(
            &producer,
            BaseRecord::<(), [u8]>::to("flood").payload(&body[..]),
        );
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(300)).expect("flush");
    drop(producer);

    let (backend, open, got) = gated_backend();
    let config = format!(
        r#"
receivers:
  kafka:
    brokers: ["{broker}"]
    topic: flood
    group_id: flood
    initial_offset: earliest
exporters:
  otlphttp:
    endpoint: "{backend}"
    compression: none
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 0s }}
    # Set above the budget's default (a quarter of the limit): downstream
    # can hold more than the limit allows, and the receiver's pause is
    # what keeps memory under it.
    sending_queue: {{ max_bytes: 256MiB }}
service:
  memory_limiter:
    limit: {LIMIT}MiB
    check_interval: 50ms
  pipelines:
    traces: {{ receivers: [kafka], exporters: [otlphttp] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        broker = broker.addr()
    );
    let d = Daemon::start(dir.path(), "kafka-flood", &config);
    let pid = d.child.id();
    let peak_rss = PeakRss::watch(pid, Duration::from_millis(10));
    // The backend is down: the exporter's queue fills until memory passes
    // the soft limit and reading pauses (or, were it not to, memory passes
    // the limit: the assertion below says so).
    let pauses = "causeway_kafka_receiver_pauses_total{receiver=\"kafka\"}";
    wait_for_or(
        Duration::from_secs(120),
        "reading paused over the soft limit",
        || d.metric(pauses).unwrap_or(0.0) >= 1.0 || peak_rss.so_far() >= LIMIT << 20,
        || d.stderr("kafka-flood"),
    );
    let paused_at = d.metric(pauses).unwrap_or(0.0);
    open.store(true, Ordering::SeqCst);
    wait_for_or(
        Duration::from_secs(600),
        "every message delivered",
        || got.lock().expect("lock").len() as u64 == n,
        || {
            format!(
                "{} of {n} delivered\n{}",
                got.lock().expect("lock").len(),
                d.stderr("kafka-flood")
            )
        },
    );
    let max = peak_rss.stop();
    // The peak the kernel kept, besides the samples.
    let hwm = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .expect("VmHWM")
        << 10;
    eprintln!(
        "5.2 GiB backlog: max RSS {} MiB sampled, {} MiB high-water mark (limit {LIMIT} MiB); paused {paused_at} times before the backend came back",
        max >> 20,
        hwm >> 20
    );
    assert!(
        hwm.max(max) < LIMIT << 20,
        "RSS {} MiB over the {LIMIT} MiB limit",
        hwm.max(max) >> 20
    );
    assert!(
        d.stderr("kafka-flood").contains("reading resumed"),
        "reading resumed once memory fell"
    );
}

/// A RabbitMQ management API answering `/api/queues` with `body` (swapped
/// by the test), as the broker answers the columns the receiver asks for.
fn management_api(body: Arc<Mutex<bytes::Bytes>>) -> String {
    let app = axum::Router::new().route(
        "/api/queues",
        axum::routing::get(move || {
            let b = body.lock().expect("lock").clone();
            async move { ([("content-type", "application/json")], b) }
        }),
    );
    serve_in_thread(app)
}

/// `n` queues in RabbitMQ's answer format (`orders` first, with 120
/// messages; the rest idle, `q1`…).
fn queues_answer(n: usize) -> bytes::Bytes {
    let mut s = String::from("[");
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        let (name, messages) = if i == 0 {
            ("orders".to_string(), 120)
        } else {
            (format!("q{i}"), 0)
        };
        s += &format!(
            r#"{{"consumers":1,"messages":{messages},"messages_ready":{messages},"messages_unacknowledged":0,"message_stats":{{"ack":500,"deliver_get":510,"deliver_get_details":{{"rate":4.0}},"publish":630,"publish_details":{{"rate":6.5}},"drop_unroutable":0}},"name":"{name}","node":"rabbit@mq-0","type":"classic","vhost":"/"}}"#
        );
    }
    s.push(']');
    bytes::Bytes::from(s)
}

/// How many points of `rabbitmq.message.current` for `orders` the file
/// exporter wrote.
fn orders_points(path: &std::path::Path) -> usize {
    read_jsonl(path)
        .iter()
        .flat_map(|v| v["resourceMetrics"].as_array().cloned().unwrap_or_default())
        .filter(|rm| {
            rm["resource"]["attributes"]
                .as_array()
                .is_some_and(|a| a.iter().any(|kv| kv["value"]["stringValue"] == "orders"))
        })
        .flat_map(|rm| rm["scopeMetrics"].as_array().cloned().unwrap_or_default())
        .flat_map(|sm| sm["metrics"].as_array().cloned().unwrap_or_default())
        .filter(|m| m["name"] == "rabbitmq.message.current")
        .count()
}

/// The `rabbitmq` receiver under the memory budget: a 64 MiB answer
/// (230,000 queues) is read one queue at a time, never as one JSON tree,
/// so RSS stays far under a 256 MiB limit; under a limit too small for
/// the answer, the read is refused before the body is kept (counted as
/// `memory_limit`), and once the answer fits, collections resume.
#[test]
fn a_64_mib_rabbitmq_answer_stays_under_the_memory_limit_and_is_refused_when_it_cannot_fit() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Just under the default body_size_limit (64 MiB).
    let big = queues_answer(230_000);
    assert!(
        (60 << 20..64 << 20).contains(&big.len()),
        "{} bytes",
        big.len()
    );
    let body = Arc::new(Mutex::new(big));
    let api = management_api(body.clone());
    let config = |name: &str, limit: u64| {
        format!(
            r#"
receivers:
  rabbitmq:
    endpoint: "{api}"
    username: guest
    password: guest
    collection_interval: 500ms
    bindings: false
    queues: {{ include: "orders" }}
exporters:
  file: {{ path: "{{dir}}/{name}.jsonl" }}
service:
  memory_limiter:
    limit: {limit}MiB
    check_interval: 50ms
  pipelines:
    metrics: {{ receivers: [rabbitmq], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        )
    };
    // 256 MiB: three collections of the whole answer.
    let d = Daemon::start(dir.path(), "rabbitmq-big", &config("big", 256));
    let peak = PeakRss::watch(d.child.id(), Duration::from_millis(10));
    let out = dir.path().join("big.jsonl");
    wait_for_or(
        Duration::from_secs(180),
        "three collections of the 64 MiB answer",
        || orders_points(&out) >= 3,
        || d.stderr("rabbitmq-big"),
    );
    let max = peak.stop();
    assert!(
        max < 256 << 20,
        "RSS {} MiB over the 256 MiB limit reading a 64 MiB answer",
        max >> 20
    );
    drop(d);
    eprintln!(
        "64 MiB answer under a 256 MiB limit: max RSS {} MiB",
        max >> 20
    );
    // 96 MiB (a soft limit of 77 MiB, the daemon using 50-60 MiB): the
    // answer cannot fit; it is refused before it is kept.
    let d = Daemon::start(dir.path(), "rabbitmq-small", &config("small", 96));
    let peak = PeakRss::watch(d.child.id(), Duration::from_millis(10));
    let refused = "causeway_rabbitmq_errors_total{receiver=\"rabbitmq\",reason=\"memory_limit\"}";
    wait_for_or(
        Duration::from_secs(60),
        "a read refused by the memory limiter",
        || d.metric(refused).unwrap_or(0.0) >= 2.0,
        || d.stderr("rabbitmq-small"),
    );
    let out = dir.path().join("small.jsonl");
    assert_eq!(orders_points(&out), 0, "nothing was collected from it");
    let max = peak.stop();
    assert!(
        max < 96 << 20,
        "RSS {} MiB over the 96 MiB limit",
        max >> 20
    );
    // The answer shrinks to what fits: collections resume.
    *body.lock().expect("lock") = queues_answer(1_000);
    wait_for_or(
        Duration::from_secs(60),
        "collections resumed",
        || orders_points(&out) >= 1,
        || d.stderr("rabbitmq-small"),
    );
}

//! End to end with the official OpenTelemetry Rust SDK as the client:
//! SDK --(gRPC and HTTP)--> causeway A --(otlp or otlphttp)--> causeway B --> file.
//! Every span, log record and metric must arrive exactly once with its
//! ids, parents, resource, scope, attributes, events, links and status.

mod common;

use common::*;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{
    Link, Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::logs::SdkLoggerProvider;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use std::collections::HashMap;
use std::time::Duration;

const TRACES_PER_CLIENT: usize = 20;

fn b_config() -> &'static str {
    r#"
receivers:
  otlp:
    protocols:
      grpc: { endpoint: "127.0.0.1:{b_grpc}" }
      http: { endpoint: "127.0.0.1:{b_http}" }
exporters:
  file: { path: "{dir}/b-{signal}.jsonl" }
service:
  pipelines:
    all: { receivers: [otlp], exporters: [file] }
  telemetry: { metrics: { address: "{telemetry}" } }
"#
}

fn a_config(id: &str, exporter: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{{a_grpc}}" }}
      http: {{ endpoint: "127.0.0.1:{{a_http}}" }}
processors:
  batch: {{ send_batch_size: 50, timeout: 100ms }}
exporters:
  {id}:
{exporter}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [batch], exporters: [{id}] }}
    logs: {{ receivers: [otlp], processors: [batch], exporters: [{id}] }}
    metrics: {{ receivers: [otlp], processors: [batch], exporters: [{id}] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    )
}

struct Expected {
    /// span name -> (trace id, span id, parent span id), all hex.
    spans: HashMap<String, (String, String, String)>,
    link_target: (String, String),
}

fn resource(client: &str) -> Resource {
    Resource::builder()
        .with_service_name("checkout")
        .with_attribute(KeyValue::new("client", client.to_string()))
        .build()
}

/// Emit traces, logs and metrics through the SDK to `grpc` or `http` endpoints of A.
fn emit(
    client: &str,
    grpc: bool,
    port: u16,
    exp: &mut Expected,
    compression: Option<opentelemetry_otlp::Compression>,
) {
    use opentelemetry_otlp::{WithHttpConfig as _, WithTonicConfig as _};
    // The SDK's HTTP exporter builds a reqwest client: it needs the process's rustls provider.
    causeway_core::tls::install_crypto_provider();
    let endpoint = |path: &str| {
        if grpc {
            format!("http://127.0.0.1:{port}")
        } else {
            format!("http://127.0.0.1:{port}{path}")
        }
    };
    let span_exporter = if grpc {
        let b = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint(""));
        match compression {
            Some(c) => b.with_compression(c).build(),
            None => b.build(),
        }
    } else {
        let b = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(endpoint("/v1/traces"));
        match compression {
            Some(c) => b.with_compression(c).build(),
            None => b.build(),
        }
    }
    .expect("span exporter");
    let tp = SdkTracerProvider::builder()
        .with_batch_exporter(span_exporter)
        .with_resource(resource(client))
        .build();
    let scope = InstrumentationScope::builder("e2e-scope")
        .with_version("1.2.3")
        .build();
    let tracer = tp.tracer_with_scope(scope);
    for i in 0..TRACES_PER_CLIENT {
        let root_name = format!("{client}-root-{i}");
        let mut root = tracer
            .span_builder(root_name.clone())
            .with_kind(SpanKind::Server)
            .with_attributes(vec![
                KeyValue::new("http.route", "/payment/charge"),
                KeyValue::new("attempt", i as i64),
                KeyValue::new("ratio", 0.5),
                KeyValue::new("ok", true),
            ])
            .start(&tracer);
        let root_ctx = root.span_context().clone();
        let cx = Context::current().with_remote_span_context(root_ctx.clone());
        let child_name = format!("{client}-child-{i}");
        let mut child = tracer
            .span_builder(child_name.clone())
            .with_kind(SpanKind::Client)
            .with_links(vec![Link::with_context(root_ctx.clone())])
            .start_with_context(&tracer, &cx);
        child.add_event(
            "cache.miss",
            vec![KeyValue::new("cache.key", format!("k{i}"))],
        );
        child.set_status(Status::error("upstream timeout"));
        let child_ctx = child.span_context().clone();
        child.end();
        root.set_status(Status::Ok);
        root.end();
        let t = root_ctx.trace_id().to_string();
        exp.spans.insert(
            root_name,
            (t.clone(), root_ctx.span_id().to_string(), String::new()),
        );
        exp.spans.insert(
            child_name,
            (
                t.clone(),
                child_ctx.span_id().to_string(),
                root_ctx.span_id().to_string(),
            ),
        );
        exp.link_target = (t, root_ctx.span_id().to_string());
    }
    tp.shutdown().expect("trace shutdown");

    let log_exporter = if grpc {
        let b = opentelemetry_otlp::LogExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint(""));
        match compression {
            Some(c) => b.with_compression(c).build(),
            None => b.build(),
        }
    } else {
        let b = opentelemetry_otlp::LogExporter::builder()
            .with_http()
            .with_endpoint(endpoint("/v1/logs"));
        match compression {
            Some(c) => b.with_compression(c).build(),
            None => b.build(),
        }
    }
    .expect("log exporter");
    let lp = SdkLoggerProvider::builder()
        .with_batch_exporter(log_exporter)
        .with_resource(resource(client))
        .build();
    let logger = lp.logger("e2e-logger");
    let (trace_hex, span_hex) = exp.link_target.clone();
    for i in 0..10 {
        let mut rec = logger.create_log_record();
        rec.set_body(AnyValue::from(format!("{client} log {i}")));
        rec.set_severity_number(Severity::Warn);
        rec.set_severity_text("WARN");
        rec.add_attribute("route_id", "payment-v2");
        rec.set_trace_context(
            opentelemetry::trace::TraceId::from_hex(&trace_hex).expect("hex"),
            opentelemetry::trace::SpanId::from_hex(&span_hex).expect("hex"),
            None,
        );
        logger.emit(rec);
    }
    lp.shutdown().expect("log shutdown");

    let metric_exporter = if grpc {
        let b = opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint(""));
        match compression {
            Some(c) => b.with_compression(c).build(),
            None => b.build(),
        }
    } else {
        let b = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(endpoint("/v1/metrics"));
        match compression {
            Some(c) => b.with_compression(c).build(),
            None => b.build(),
        }
    }
    .expect("metric exporter");
    let mp = SdkMeterProvider::builder()
        .with_reader(
            PeriodicReader::builder(metric_exporter)
                .with_interval(Duration::from_secs(3600))
                .build(),
        )
        .with_resource(resource(client))
        .build();
    let meter = mp.meter("e2e-meter");
    let counter = meter.u64_counter(format!("{client}.requests")).build();
    counter.add(7, &[KeyValue::new("route_id", "payment-v2")]);
    let hist = meter
        .f64_histogram(format!("{client}.latency"))
        .with_unit("ms")
        .build();
    for v in [5.0, 50.0, 500.0] {
        hist.record(v, &[]);
    }
    mp.shutdown().expect("metric shutdown");
}

/// How the SDK's gRPC and HTTP clients compress (`None`: not at all).
type ClientCompression = (
    Option<opentelemetry_otlp::Compression>,
    Option<opentelemetry_otlp::Compression>,
);

/// Bytes a daemon's `otlp` receiver took as `(wire, inflated)` for one
/// transport and encoding.
fn wire_bytes(d: &Daemon, transport: &str, encoding: &str) -> (f64, f64) {
    let series = |name: &str| {
        d.metric(&format!(
            "{name}{{receiver=\"otlp\",transport=\"{transport}\",encoding=\"{encoding}\"}}"
        ))
        .unwrap_or(0.0)
    };
    (
        series("causeway_receiver_wire_bytes_total"),
        series("causeway_receiver_inflated_bytes_total"),
    )
}

/// The encodings each hop really used: the SDK's to A, A's to B.
fn assert_compressed(d: &Daemon, transport: &str, encoding: &str) {
    let (wire, inflated) = wire_bytes(d, transport, encoding);
    assert!(wire > 0.0, "{transport} requests in {encoding}");
    if encoding != "identity" {
        assert!(
            inflated > wire,
            "{transport}/{encoding}: {wire} bytes on the wire inflate to {inflated}"
        );
    }
}

fn compression_name(c: Option<opentelemetry_otlp::Compression>) -> &'static str {
    match c {
        None => "identity",
        Some(opentelemetry_otlp::Compression::Gzip) => "gzip",
        Some(opentelemetry_otlp::Compression::Zstd) => "zstd",
        Some(other) => panic!("no test uses {other}"),
    }
}

fn run_roundtrip(
    id: &str,
    forward: &str,
    (grpc_c, http_c): ClientCompression,
    (b_transport, b_encoding): (&str, &str),
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (b_grpc, b_http) = (free_port(), free_port());
    let b = Daemon::start(
        dir.path(),
        "b",
        &b_config()
            .replace("{b_grpc}", &b_grpc.to_string())
            .replace("{b_http}", &b_http.to_string()),
    );
    let (a_grpc, a_http) = (free_port(), free_port());
    let forward = forward
        .replace("{b_grpc}", &b_grpc.to_string())
        .replace("{b_http}", &b_http.to_string());
    let a = Daemon::start(
        dir.path(),
        "a",
        &a_config(id, &forward)
            .replace("{a_grpc}", &a_grpc.to_string())
            .replace("{a_http}", &a_http.to_string()),
    );

    let mut exp = Expected {
        spans: HashMap::new(),
        link_target: Default::default(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    {
        // The tonic exporters need a Tokio runtime to drive their connections.
        let _guard = rt.enter();
        emit("grpcclient", true, a_grpc, &mut exp, grpc_c);
    }
    emit("httpclient", false, a_http, &mut exp, http_c);

    let total = exp.spans.len();
    wait_for(Duration::from_secs(30), "all spans at B", || {
        spans(&read_jsonl(&dir.path().join("b-traces.jsonl"))).len() >= total
    });
    assert_compressed(&a, "grpc", compression_name(grpc_c));
    assert_compressed(&a, "http", compression_name(http_c));
    assert_compressed(&b, b_transport, b_encoding);
    // Stop both gracefully: anything duplicated in flight would now be written.
    assert!(a.terminate().success());
    assert!(b.terminate().success());

    let got = spans(&read_jsonl(&dir.path().join("b-traces.jsonl")));
    assert_eq!(got.len(), total, "every span exactly once");
    let mut seen = HashMap::new();
    for (res, scope, sp) in &got {
        let name = sp["name"].as_str().expect("name").to_string();
        *seen.entry(name.clone()).or_insert(0) += 1;
        let (trace_id, span_id, parent) = exp
            .spans
            .get(&name)
            .unwrap_or_else(|| panic!("unexpected span {name}"));
        assert_eq!(sp["traceId"], trace_id.as_str(), "{name} trace id");
        assert_eq!(sp["spanId"], span_id.as_str(), "{name} span id");
        assert_eq!(sp["parentSpanId"], parent.as_str(), "{name} parent");
        assert_eq!(
            attr(&res["attributes"], "service.name").expect("service.name")["stringValue"],
            "checkout"
        );
        let client = name.split('-').next().expect("client");
        assert_eq!(
            attr(&res["attributes"], "client").expect("client attr")["stringValue"],
            client
        );
        assert_eq!(scope["name"], "e2e-scope");
        assert_eq!(scope["version"], "1.2.3");
        if name.contains("-root-") {
            assert_eq!(sp["kind"], 2, "server kind");
            assert_eq!(
                attr(&sp["attributes"], "http.route").expect("route")["stringValue"],
                "/payment/charge"
            );
            let i: i64 = name.rsplit('-').next().expect("i").parse().expect("num");
            assert_eq!(
                attr(&sp["attributes"], "attempt").expect("attempt")["intValue"],
                i.to_string()
            );
            assert_eq!(
                attr(&sp["attributes"], "ratio").expect("ratio")["doubleValue"],
                0.5
            );
            assert_eq!(
                attr(&sp["attributes"], "ok").expect("ok")["boolValue"],
                true
            );
            assert_eq!(sp["status"]["code"], 1, "OK status");
        } else {
            assert_eq!(sp["kind"], 3, "client kind");
            assert_eq!(sp["status"]["code"], 2, "ERROR status");
            assert_eq!(sp["status"]["message"], "upstream timeout");
            let ev = &sp["events"][0];
            assert_eq!(ev["name"], "cache.miss");
            assert!(attr(&ev["attributes"], "cache.key").is_some());
            let link = &sp["links"][0];
            assert_eq!(link["traceId"], trace_id.as_str());
            assert_eq!(link["spanId"], parent.as_str());
        }
        let start: u64 = sp["startTimeUnixNano"]
            .as_str()
            .expect("start")
            .parse()
            .expect("u64");
        let end: u64 = sp["endTimeUnixNano"]
            .as_str()
            .expect("end")
            .parse()
            .expect("u64");
        assert!(start > 0 && end >= start);
    }
    assert!(seen.values().all(|&n| n == 1));

    let logs = log_records(&read_jsonl(&dir.path().join("b-logs.jsonl")));
    assert_eq!(logs.len(), 20, "every log record exactly once");
    for (res, scope, rec) in &logs {
        assert_eq!(
            attr(&res["attributes"], "service.name").expect("svc")["stringValue"],
            "checkout"
        );
        assert_eq!(scope["name"], "e2e-logger");
        assert_eq!(rec["severityNumber"], 13);
        assert_eq!(rec["severityText"], "WARN");
        assert_eq!(
            attr(&rec["attributes"], "route_id").expect("route")["stringValue"],
            "payment-v2"
        );
        assert_eq!(rec["traceId"].as_str().map(str::len), Some(32));
        assert_eq!(rec["spanId"].as_str().map(str::len), Some(16));
        assert!(rec["body"]["stringValue"]
            .as_str()
            .expect("body")
            .contains(" log "));
    }

    let ms = metrics(&read_jsonl(&dir.path().join("b-metrics.jsonl")));
    for client in ["grpcclient", "httpclient"] {
        let counter: Vec<_> = ms
            .iter()
            .filter(|(_, m)| m["name"] == format!("{client}.requests"))
            .collect();
        assert_eq!(counter.len(), 1, "{client} counter once");
        let dp = &counter[0].1["sum"]["dataPoints"][0];
        assert_eq!(dp["asInt"], "7");
        assert_eq!(
            attr(&dp["attributes"], "route_id").expect("route")["stringValue"],
            "payment-v2"
        );
        let hist: Vec<_> = ms
            .iter()
            .filter(|(_, m)| m["name"] == format!("{client}.latency"))
            .collect();
        assert_eq!(hist.len(), 1, "{client} histogram once");
        assert_eq!(hist[0].1["unit"], "ms");
        assert_eq!(hist[0].1["histogram"]["dataPoints"][0]["count"], "3");
        assert_eq!(hist[0].1["histogram"]["dataPoints"][0]["sum"], 555.0);
    }
}

use opentelemetry_otlp::Compression::{Gzip, Zstd};

/// The SDK sends zstd over gRPC and gzip over HTTP; A forwards with zstd.
#[test]
fn sdk_to_causeway_to_causeway_over_grpc() {
    run_roundtrip(
        "otlp/forward",
        "    endpoint: 127.0.0.1:{b_grpc}\n    tls: { insecure: true }\n    compression: zstd\n",
        (Some(Zstd), Some(Gzip)),
        ("grpc", "zstd"),
    );
}

/// The SDK sends gzip over gRPC and zstd over HTTP; A forwards with snappy
/// (the block format over HTTP).
#[test]
fn sdk_to_causeway_to_causeway_over_http() {
    run_roundtrip(
        "otlphttp/forward",
        "    endpoint: http://127.0.0.1:{b_http}\n    compression: snappy\n",
        (Some(Gzip), Some(Zstd)),
        ("http", "snappy"),
    );
}

/// Uncompressed from the SDK; A forwards over gRPC with the default (gzip)
/// and, in a second run, with snappy (the framed format over gRPC).
#[test]
fn sdk_to_causeway_to_causeway_gzip_and_snappy_over_grpc() {
    run_roundtrip(
        "otlp/forward",
        "    endpoint: 127.0.0.1:{b_grpc}\n    tls: { insecure: true }\n",
        (None, None),
        ("grpc", "gzip"),
    );
    run_roundtrip(
        "otlp/forward",
        "    endpoint: 127.0.0.1:{b_grpc}\n    tls: { insecure: true }\n    compression: snappy\n",
        (None, Some(Gzip)),
        ("grpc", "snappy"),
    );
}

//! Tail sampling in the running daemon: slow and failed traces kept whole and
//! annotated, late spans follow the decision, and a flood beyond `max_memory`
//! keeps the process bounded while every slow or failed trace is still kept.

mod common;

use bytes::Bytes;
use common::*;
use opentelemetry_proto::tonic::trace::v1::{status, Span, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const T0: u64 = 1_764_000_000_000_000_000;

fn span(trace: u64, id: u64, parent: u64, dur_ms: u64, error: bool) -> Span {
    Span {
        trace_id: [trace.to_be_bytes(), [7; 8]].concat(),
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: if parent == 0 {
            vec![]
        } else {
            parent.to_be_bytes().to_vec()
        },
        name: format!("op-{id}"),
        start_time_unix_nano: T0,
        end_time_unix_nano: T0 + dur_ms * 1_000_000,
        status: Some(Status {
            code: if error {
                status::StatusCode::Error as i32
            } else {
                0
            },
            message: String::new(),
        }),
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> Bytes {
    causeway_core::model::traces_request(spans)
}

struct Client(String);

impl Client {
    async fn connect(addr: &str) -> Client {
        Client(addr.to_string())
    }

    /// Send, retrying while the daemon pushes back.
    async fn send(&mut self, body: Bytes) {
        for _ in 0..600 {
            match otlp_grpc_traces(&self.0, body.clone()).await {
                Ok(_) => return,
                Err(s) if s.code() == tonic::Code::Unavailable => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(s) => panic!("export failed: {s:?}"),
            }
        }
        panic!("never accepted");
    }
}

/// trace number -> (span ids, sampling.policy)
fn kept(path: &std::path::Path) -> BTreeMap<u64, (BTreeSet<String>, String)> {
    let mut out: BTreeMap<u64, (BTreeSet<String>, String)> = BTreeMap::new();
    for (_, _, s) in spans(&read_jsonl(path)) {
        let t = u64::from_str_radix(&s["traceId"].as_str().expect("id")[..16], 16).expect("hex");
        let e = out.entry(t).or_default();
        e.0.insert(s["spanId"].as_str().expect("span").to_string());
        if let Some(p) = attr(&s["attributes"], "sampling.policy") {
            e.1 = p["stringValue"].as_str().unwrap_or_default().to_string();
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn slow_and_failed_traces_are_kept_whole_and_annotated() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = free_port();
    let d = Daemon::start(
        dir.path(),
        "ts",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{g}" }}
processors:
  tail_sampling:
    decision_wait: 1s
    policies:
      - {{ name: slow, type: latency, latency: {{ threshold_ms: 500 }} }}
exporters:
  file: {{ path: "{{dir}}/kept.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let mut c = Client::connect(&format!("127.0.0.1:{g}")).await;
    let mut batch = vec![];
    for t in 1..=60u64 {
        let slow = t % 6 == 0;
        let failed = t % 6 == 1;
        batch.push(span(t, t * 10 + 1, 0, if slow { 800 } else { 20 }, false));
        batch.push(span(t, t * 10 + 2, t * 10 + 1, 10, failed));
    }
    // Spans of one trace split across requests, children before roots.
    let (first, second): (Vec<_>, Vec<_>) =
        batch.into_iter().partition(|s| s.parent_span_id.is_empty());
    c.send(request(second)).await;
    c.send(request(first)).await;

    let path = dir.path().join("kept.jsonl");
    wait_for(Duration::from_secs(20), "20 kept traces", || {
        kept(&path).len() == 20
    });
    // A late child of a kept trace (6) and of a dropped trace (3).
    c.send(request(vec![
        span(6, 63, 61, 5, false),
        span(3, 33, 31, 5, false),
    ]))
    .await;
    wait_for(Duration::from_secs(10), "the late span of trace 6", || {
        kept(&path).get(&6).is_some_and(|k| k.0.len() == 3)
    });
    let late = d.metric("causeway_tail_sampling_late_spans_total{component=\"tail_sampling\",decision=\"not_sampled\"}");
    assert_eq!(late, Some(1.0));
    assert!(d.terminate().success());

    let k = kept(&path);
    let expected: BTreeSet<u64> = (1..=60).filter(|t| t % 6 == 0 || t % 6 == 1).collect();
    assert_eq!(k.keys().copied().collect::<BTreeSet<_>>(), expected);
    for (t, (ids, policy)) in &k {
        let want_spans = if *t == 6 { 3 } else { 2 };
        assert_eq!(ids.len(), want_spans, "trace {t} whole");
        assert_eq!(
            policy,
            if t % 6 == 0 { "slow" } else { "errors" },
            "trace {t}"
        );
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_beyond_max_memory_stays_bounded_and_loses_no_slow_or_failed_trace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = free_port();
    let d = Daemon::start(
        dir.path(),
        "flood",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{g}" }}
processors:
  tail_sampling:
    decision_wait: 60s
    num_traces: 1000000
    max_memory: 16MiB
    policies:
      - {{ name: slow, type: latency, latency: {{ threshold_ms: 1000 }} }}
exporters:
  file: {{ path: "{{dir}}/kept.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let pid = d.child.id();
    let baseline = rss_kib(pid);
    let mut c = Client::connect(&format!("127.0.0.1:{g}")).await;
    // 200,000 spans in 40,000 traces, about 64 MiB encoded: four times max_memory.
    let mut must = BTreeSet::new();
    let mut peak = 0;
    for r in 0..400u64 {
        let mut spans = vec![];
        for k in 0..100u64 {
            let t = r * 100 + k + 1;
            let slow = t % 97 == 0;
            let failed = t % 89 == 0;
            if slow || failed {
                must.insert(t);
            }
            for i in 1..=5u64 {
                let mut s = span(
                    t,
                    t * 10 + i,
                    if i == 1 { 0 } else { t * 10 + 1 },
                    if slow { 1500 } else { 20 },
                    failed && i == 3,
                );
                s.name = format!("op-{i}-{}", "x".repeat(250));
                spans.push(s);
            }
        }
        c.send(request(spans)).await;
        peak = peak.max(rss_kib(pid));
    }
    let early = d
        .metric("causeway_tail_sampling_early_decisions_total{component=\"tail_sampling\",reason=\"max_memory\"}")
        .expect("metric");
    assert!(early > 10_000.0, "early decisions by max_memory: {early}");
    let pending = d
        .metric("causeway_tail_sampling_pending_bytes{component=\"tail_sampling\"}")
        .expect("metric");
    assert!(pending <= (16 << 20) as f64, "pending bytes {pending}");
    // RSS: the daemon's baseline, the bounded queues and 16 MiB of pending spans, not the 64 MiB sent.
    let growth_mib = (peak.saturating_sub(baseline)) as f64 / 1024.0;
    eprintln!("RSS grew by {growth_mib:.1} MiB (baseline {baseline} KiB, peak {peak} KiB)");
    assert!(
        growth_mib < 48.0,
        "RSS grew by {growth_mib:.1} MiB (baseline {baseline} KiB, peak {peak} KiB)"
    );
    assert!(d.terminate().success());
    let k = kept(&dir.path().join("kept.jsonl"));
    for t in &must {
        assert_eq!(
            k.get(t).map(|x| x.0.len()),
            Some(5),
            "slow or failed trace {t} kept whole"
        );
    }
}

/// One span of `service` in trace `t` (`kind` 2 server, 3 client), from
/// `start` to `end` (unix ns).
fn service_span(
    t: u64,
    (id, parent): (u64, u64),
    (name, kind): (&str, i32),
    (start, end): (u64, u64),
    attributes: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
) -> Span {
    Span {
        trace_id: [t.to_be_bytes(), [9; 8]].concat(),
        span_id: id.to_be_bytes().to_vec(),
        parent_span_id: if parent == 0 {
            vec![]
        } else {
            parent.to_be_bytes().to_vec()
        },
        name: name.into(),
        kind,
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes,
        ..Default::default()
    }
}

/// A front's `GET /r` calling the reports service's `GET /report`, which
/// takes `report_ms`, as two resources.
fn front_and_reports(t: u64, start: u64, report_ms: u64) -> Bytes {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
    use prost::Message;
    let kv = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    };
    let ms = 1_000_000;
    let resource = |service: &str, spans: Vec<Span>| ResourceSpans {
        resource: Some(Resource {
            attributes: vec![kv("service.name", service)],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    };
    let front = vec![
        service_span(
            t,
            (1, 0),
            ("GET /r", 2),
            (start, start + (report_ms + 10) * ms),
            vec![],
        ),
        service_span(
            t,
            (2, 1),
            ("GET", 3),
            (start + 5 * ms, start + (report_ms + 5) * ms),
            vec![kv("server.address", "reports")],
        ),
    ];
    let reports = vec![service_span(
        t,
        (3, 2),
        ("GET /report", 2),
        (start + 6 * ms, start + (report_ms + 4) * ms),
        vec![],
    )];
    Bytes::from(
        ExportTraceServiceRequest {
            resource_spans: vec![resource("front", front), resource("reports", reports)],
        }
        .encode_to_vec(),
    )
}

/// The README's wiring (`tail_sampling` keeping errors and traces over 1 s
/// with its 10 s `decision_wait`, then `correlate` with its defaults):
/// forty ordinary requests are not kept, yet they teach `correlate` the
/// reports service's normal, so the one slow request kept is measured
/// against it ("normally"), not against nothing ("no baseline yet").
#[tokio::test(flavor = "multi_thread")]
async fn behind_the_readmes_sampler_correlate_learns_the_normal_from_the_traces_not_kept() {
    let dir = tempfile::tempdir().expect("tempdir");
    let g = free_port();
    let d = Daemon::start(
        dir.path(),
        "learn",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{g}" }}
processors:
  tail_sampling:
    decision_wait: 10s
    policies:
      - {{ name: errors, type: status_code, status_code: {{ status_codes: [ERROR] }} }}
      - {{ name: slow, type: latency, latency: {{ threshold_ms: 1000 }} }}
  correlate: {{}}
exporters:
  file: {{ path: "{{dir}}/kept.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let mut c = Client::connect(&format!("127.0.0.1:{g}")).await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    for t in 1..=40u64 {
        c.send(front_and_reports(
            t,
            now - 60_000_000_000 + t * 1_000_000_000,
            100,
        ))
        .await;
    }
    c.send(front_and_reports(99, now, 1500)).await;
    let learned =
        "causeway_correlate_unkept_spans_total{component=\"correlate\",outcome=\"learned\"}";
    wait_for(
        Duration::from_secs(60),
        "the requests not kept learned from",
        || d.metric(learned).is_some_and(|n| n >= 120.0),
    );
    let path = dir.path().join("kept.jsonl");
    let verdict = || {
        spans(&read_jsonl(&path))
            .into_iter()
            .map(|(_, _, s)| s)
            .find(|s| attr(&s["attributes"], "rca.summary").is_some())
    };
    wait_for(Duration::from_secs(60), "the slow request analysed", || {
        verdict().is_some()
    });
    let s = verdict().expect("analysed");
    let text = |k: &str| {
        attr(&s["attributes"], k)
            .and_then(|v| v["stringValue"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    assert_eq!(text("rca.cause"), "slow_dependency", "{s}");
    assert_eq!(text("rca.culprit.service"), "reports", "{s}");
    assert!(text("rca.summary").contains("normally"), "{s}");
    let kept: BTreeSet<String> = spans(&read_jsonl(&path))
        .into_iter()
        .map(|(_, _, s)| s["traceId"].as_str().unwrap_or_default()[..16].to_string())
        .collect();
    assert_eq!(kept.len(), 1, "the slow request alone is kept: {kept:?}");
    assert_eq!(
        d.metric(learned),
        Some(120.0),
        "the 40 ordinary requests, 3 spans each"
    );
    assert!(d.terminate().success());
}

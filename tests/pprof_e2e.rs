//! The `pprof` receiver against a real Go runtime's `net/http/pprof`
//! (`tests/testbed/pprof/main.go`, the standard library only): the CPU
//! profile names the function the process really spins in, with the span
//! its pprof labels name as the sample's link; the mutex profile names the
//! function that held the contended lock; a target that is down is counted
//! and the other goes on. Truth: what the Go program was built to do.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;

const SPAN_ID: &str = "00f067aa0ba902b7";

/// The Go program, built into `dir`.
fn build(dir: &std::path::Path) -> std::path::PathBuf {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testbed/pprof/main.go");
    let bin = dir.join("pprof-target");
    let out = Command::new("go")
        .args(["build", "-o"])
        .arg(&bin)
        .arg(&src)
        .env("GOFLAGS", "-mod=mod")
        .env("GO111MODULE", "off")
        .output()
        .expect("go build (Go is installed by the machine)");
    assert!(
        out.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    bin
}

/// The Go program on `port`, its goroutine labelled with [`SPAN_ID`];
/// returns once it listens.
fn start_target(dir: &std::path::Path, bin: &std::path::Path, port: u16) -> std::process::Child {
    let log = std::fs::File::create(dir.join("target.log")).unwrap();
    let target = Command::new(bin)
        .env("PORT", port.to_string())
        .env("SPAN_ID", SPAN_ID)
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap();
    wait_for(Duration::from_secs(30), "the Go target listening", || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    target
}

fn text(v: &Value) -> Option<&str> {
    v.as_str()
}

/// A number the JSON may write as a number or a string.
fn num(v: &Value) -> i64 {
    v.as_i64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or(0)
}

/// A sample: its function names (leaf first), value, link's span id and
/// labels (`key=value`).
type Sampled = (Vec<String>, i64, Option<String>, Vec<String>);

/// One OTLP profile as the test reads it: its type, and per sample the
/// function names of its stack (leaf first), its value and its link's
/// span id.
struct Read {
    kind: String,
    samples: Vec<Sampled>,
    resource: Vec<(String, String)>,
}

fn read(line: &Value) -> Vec<Read> {
    let d = &line["dictionary"];
    let s = |i: &Value| {
        text(&d["stringTable"][num(i) as usize])
            .unwrap_or("")
            .to_string()
    };
    let mut out = Vec::new();
    for rp in line["resourceProfiles"].as_array().unwrap() {
        let resource: Vec<(String, String)> = rp["resource"]["attributes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|kv| {
                        (
                            kv["key"].as_str().unwrap_or("").to_string(),
                            kv["value"]["stringValue"]
                                .as_str()
                                .unwrap_or("")
                                .to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        for sp in rp["scopeProfiles"].as_array().unwrap() {
            for p in sp["profiles"].as_array().unwrap() {
                let kind = s(&p["sampleType"]["typeStrindex"]);
                let samples = p["samples"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|x| {
                        let stack = &d["stackTable"][num(&x["stackIndex"]) as usize];
                        // Every line of every location: a location's
                        // inlined functions first, its caller last.
                        let frames = stack["locationIndices"]
                            .as_array()
                            .map(|ls| {
                                ls.iter()
                                    .flat_map(|l| {
                                        let loc = &d["locationTable"][num(l) as usize];
                                        loc["lines"].as_array().cloned().unwrap_or_default()
                                    })
                                    .map(|line| {
                                        let f = &d["functionTable"]
                                            [num(&line["functionIndex"]) as usize];
                                        s(&f["nameStrindex"])
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        let link = num(&x["linkIndex"]);
                        let span = (link > 0)
                            .then(|| {
                                d["linkTable"][link as usize]["spanId"]
                                    .as_str()
                                    .map(String::from)
                            })
                            .flatten();
                        let labels = x["attributeIndices"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .map(|i| {
                                        let at = &d["attributeTable"][num(i) as usize];
                                        format!(
                                            "{}={}",
                                            s(&at["keyStrindex"]),
                                            at["value"]["stringValue"].as_str().unwrap_or("")
                                        )
                                    })
                                    .collect()
                            })
                            .unwrap_or_default();
                        (frames, num(&x["values"][0]), span, labels)
                    })
                    .collect();
                out.push(Read {
                    kind,
                    samples,
                    resource: resource.clone(),
                });
            }
        }
    }
    out
}

#[test]
fn a_go_runtimes_cpu_and_mutex_profiles_name_the_functions_and_the_span() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bin = build(d);
    let port = free_port();
    let dead = free_port();
    let mut target = start_target(d, &bin, port);
    let daemon = Daemon::start(
        d,
        "pprof",
        &format!(
            r#"
receivers:
  pprof:
    targets:
      - service: parser
        static_configs:
          - targets: ["127.0.0.1:{port}"]
            labels: {{ deployment.environment: test }}
      - service: gone
        static_configs: [{{ targets: ["127.0.0.1:{dead}"] }}]
    profiles: [cpu, mutex]
    seconds: 2s
    collection_interval: 2s
exporters:
  file: {{ path: "{{dir}}/profiles.jsonl" }}
service:
  pipelines:
    profiles: {{ receivers: [pprof], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let path = d.join("profiles.jsonl");
    let profiles = |kind: &str| -> Vec<Read> {
        read_jsonl(&path)
            .iter()
            .flat_map(read)
            .filter(|p| p.kind == kind)
            .collect()
    };
    wait_for(Duration::from_secs(60), "a CPU and a mutex profile", || {
        !profiles("cpu").is_empty() && !profiles("delay").is_empty()
    });
    target.kill().ok();
    target.wait().ok();

    // On-CPU: the leaf that holds the most time is the function the Go
    // program spins in, and its samples carry the span its labels name.
    let cpu = &profiles("cpu")[0];
    let mut by_leaf: std::collections::HashMap<&str, i64> = Default::default();
    for (frames, v, _, _) in &cpu.samples {
        // Below the hash the loop calls: the first frame of main's.
        if let Some(f) = frames.iter().find(|f| f.starts_with("main.")) {
            *by_leaf.entry(f.as_str()).or_default() += v;
        }
    }
    let top = by_leaf.iter().max_by_key(|(_, v)| **v).map(|(f, _)| *f);
    assert_eq!(top, Some("main.parseAST"), "{by_leaf:?}");
    let linked: Vec<_> = cpu
        .samples
        .iter()
        .filter(|(frames, ..)| frames.iter().any(|f| f == "main.parseAST"))
        .collect();
    assert!(!linked.is_empty());
    for (_, _, span, labels) in &linked {
        assert_eq!(span.as_deref(), Some(SPAN_ID));
        assert!(
            labels.contains(&"span_name=POST /parse".to_string()),
            "{labels:?}"
        );
    }
    for (k, v) in [
        ("service.name", "parser"),
        ("service.instance.id", format!("127.0.0.1:{port}").as_str()),
        ("deployment.environment", "test"),
    ] {
        assert!(
            cpu.resource.iter().any(|(a, b)| a == k && b == v),
            "{k}={v} not in {:?}",
            cpu.resource
        );
    }
    // Mutex: the delay is charged to the function that held the lock.
    let held: i64 = profiles("delay")
        .iter()
        .flat_map(|p| &p.samples)
        .filter(|(frames, ..)| frames.iter().any(|f| f == "main.holdSymbols"))
        .map(|(_, v, ..)| v)
        .sum();
    assert!(
        held > 0,
        "no delay under main.holdSymbols: {:?}",
        profiles("delay")
            .iter()
            .flat_map(|p| &p.samples)
            .map(|(f, v, ..)| (f.clone(), *v))
            .collect::<Vec<_>>()
    );
    // The target that is down is counted; the live one went on meanwhile.
    assert!(
        daemon
            .metric(r#"causeway_pprof_errors_total{receiver="pprof",reason="connect"}"#)
            .unwrap_or(0.0)
            >= 1.0
    );
}

/// The span whose pprof label the Go program's CPU samples carry, kept
/// and analysed: its trace names the function that spent its time, by the
/// span's own samples (the runtime's CPU profile, its label the link).
#[test]
fn a_kept_trace_names_the_function_its_span_spent_its_time_in() {
    use causeway_scenarios::send::read_annotated;

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bin = build(d);
    let (port, http) = (free_port(), free_port());
    let mut target = start_target(d, &bin, port);
    let _daemon = analysing_daemon(d, http, port, "[cpu]");
    // The profile is in the correlation state once it has passed it.
    let profiles = d.join("profiles.jsonl");
    wait_for(
        Duration::from_secs(60),
        "a CPU profile through correlate",
        || {
            read_jsonl(&profiles)
                .iter()
                .flat_map(read)
                .any(|p| p.kind == "cpu" && !p.samples.is_empty())
        },
    );
    target.kill().ok();
    target.wait().ok();
    // The request the labelled goroutine served: its span, 300 ms ago.
    send_span(http, 0x3c, SPAN_ID, 300);
    let traces = d.join("traces.jsonl");
    wait_for(Duration::from_secs(60), "the trace analysed", || {
        read_annotated(&traces)
            .values()
            .any(|a| a.root.contains_key("rca.cause"))
    });
    let got = read_annotated(&traces);
    let a = got.values().next().unwrap();
    assert_eq!(a.root["rca.code.function"], "main.parseAST", "{:?}", a.root);
    assert_eq!(a.root["rca.code.join"], "span");
    assert_eq!(a.root["rca.code.kind"], "cpu");
    assert!(
        a.root["rca.code.location"].contains("main.go:"),
        "{:?}",
        a.root
    );
}

/// The daemon that keeps every trace it receives on OTLP/HTTP port `http`
/// and analyses it with the profiles (`profiles`, every second) its `pprof`
/// receiver takes of the Go program on `port` as `parser`.
fn analysing_daemon(d: &std::path::Path, http: u16, port: u16, profiles: &str) -> Daemon {
    Daemon::start(
        d,
        "code",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{http}" }}
  pprof:
    targets:
      - service: parser
        static_configs: [{{ targets: ["127.0.0.1:{port}"] }}]
    profiles: {profiles}
    seconds: 1s
    collection_interval: 1s
processors:
  tail_sampling:
    decision_wait: 1s
    policies: [{{ name: all, type: always_sample }}]
  correlate: {{}}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  file/profiles: {{ path: "{{dir}}/profiles.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    profiles: {{ receivers: [pprof], processors: [correlate], exporters: [file/profiles] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    )
}

/// A server span of the `parser` service (trace of bytes `trace`, span
/// `span_id`) that ended now after `ms`, sent by OTLP/HTTP to port `http`.
fn send_span(http: u16, trace: u8, span_id: &str, ms: u64) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let s = |v: &str| AnyValue {
        value: Some(any_value::Value::StringValue(v.into())),
    };
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(s("parser")),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![trace; 16],
                    span_id: hex::decode(span_id).unwrap(),
                    name: "POST /parse".into(),
                    kind: span::SpanKind::Server as i32,
                    start_time_unix_nano: now - ms * 1_000_000,
                    end_time_unix_nano: now,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let r = http_client()
        .post(format!("http://127.0.0.1:{http}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(req.encode_to_vec())
        .send()
        .unwrap();
    assert!(r.status().is_success());
}

/// Go's mutex and block profiles taken together: a request of the process
/// off CPU while `main.holdSymbols` held the lock `main.lookupSymbol`
/// waited for is `lock_contention` naming the holder (the mutex profile's)
/// with the waiter beside it (the block profile's); the workers' waits on
/// their channel, longer in all than the lock's, are no lock.
#[test]
fn go_mutex_and_block_profiles_name_the_holder_and_the_waiter_of_a_lock() {
    use causeway_scenarios::send::read_annotated;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let bin = build(d);
    let (port, http) = (free_port(), free_port());
    let mut target = start_target(d, &bin, port);
    let _daemon = analysing_daemon(d, http, port, "[cpu, mutex, block]");
    // The block profile's waits, the lock's and the channel's, have passed
    // the correlation state.
    let profiles = d.join("profiles.jsonl");
    let waited = |f: &str| {
        read_jsonl(&profiles).iter().flat_map(read).any(|p| {
            p.kind == "delay"
                && p.samples
                    .iter()
                    .any(|(frames, ..)| frames.iter().any(|x| x == f))
        })
    };
    wait_for(Duration::from_secs(60), "the block profile's waits", || {
        waited("main.awaitJob") && waited("main.lookupSymbol")
    });
    // A request of the process, off CPU (its own goroutine has no CPU
    // samples: the labelled one's are linked to another span), 400 ms.
    send_span(http, 0x4d, "00f067aa0ba902b8", 400);
    let traces = d.join("traces.jsonl");
    wait_for(Duration::from_secs(90), "the trace analysed", || {
        read_annotated(&traces)
            .values()
            .any(|a| a.root.contains_key("rca.cause"))
    });
    target.kill().ok();
    target.wait().ok();
    let got = read_annotated(&traces);
    let a = got.values().next().unwrap();
    assert_eq!(a.root["rca.cause"], "lock_contention", "{:?}", a.root);
    assert_eq!(
        a.root["rca.code.function"], "main.holdSymbols",
        "{:?}",
        a.root
    );
    assert_eq!(
        a.root["rca.code.waiter_function"], "main.lookupSymbol",
        "{:?}",
        a.root
    );
    assert_eq!(a.root["rca.code.join"], "time");
}

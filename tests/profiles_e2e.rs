//! OTLP profiles (`opentelemetry.proto.profiles.v1development`, as
//! opentelemetry-proto 0.33 ships it: OTLP 1.10's dictionary with a stack
//! table) through causeway and the real Collector v0.148.0 (the first
//! release whose pdata reads OTLP 1.10's profiles; v0.140's reads 1.9's,
//! whose `Sample` numbers its fields otherwise and refuses ours), run with
//! `--feature-gates=service.profilesSupport`:
//!
//! test ──HTTP──▶ causeway A ──gRPC──▶ Collector ──gRPC──▶ causeway B (file)
//!                         └──────────HTTP──────────────▶ causeway B (file)
//!
//! Every leg carries the request unchanged: causeway B writes both copies,
//! and each is the request the test sent. Beside it: what a receiver
//! refuses (a sample pointing past the dictionary, JSON, a receiver whose
//! pipelines take no profiles) and that nothing else is lost meanwhile.
#![allow(clippy::unwrap_used)]

mod common;

use common::peers::Collector;
use common::*;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development::{
    Function, Line, Link, Location, Profile, ProfilesDictionary, ResourceProfiles, Sample,
    ScopeProfiles, Stack, ValueType,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::time::Duration;

/// A CPU profile of `checkout` as a Go runtime would send it: two stacks,
/// one sample linked to the span that ran it.
fn cpu_profile(samples: i64) -> ExportProfilesServiceRequest {
    let strings: Vec<String> = [
        "",
        "cpu",
        "nanoseconds",
        "main.parseAST",
        "main.handle",
        "runtime.mallocgc",
        "/src/checkout/parse.go",
        "/src/checkout/main.go",
        "/usr/lib/go/src/runtime/malloc.go",
    ]
    .map(String::from)
    .to_vec();
    let function = |name, file| Function {
        name_strindex: name,
        system_name_strindex: name,
        filename_strindex: file,
        start_line: 10,
    };
    let location = |function_index, line| Location {
        lines: vec![Line {
            function_index,
            line,
            column: 0,
        }],
        ..Default::default()
    };
    let dictionary = ProfilesDictionary {
        mapping_table: vec![Default::default()],
        location_table: vec![
            Default::default(),
            location(1, 42),
            location(2, 88),
            location(3, 1120),
        ],
        function_table: vec![
            Default::default(),
            function(3, 6),
            function(4, 7),
            function(5, 8),
        ],
        link_table: vec![
            Default::default(),
            Link {
                trace_id: vec![0x5a; 16],
                span_id: vec![0x17; 8],
            },
        ],
        string_table: strings,
        attribute_table: vec![Default::default()],
        // Leaf first: parseAST under handle; mallocgc under parseAST.
        stack_table: vec![
            Default::default(),
            Stack {
                location_indices: vec![1, 2],
            },
            Stack {
                location_indices: vec![3, 1, 2],
            },
        ],
    };
    let profile = Profile {
        sample_type: Some(ValueType {
            type_strindex: 1,
            unit_strindex: 2,
        }),
        samples: (0..samples)
            .map(|i| Sample {
                stack_index: 1 + (i % 2) as i32,
                link_index: i32::from(i % 3 == 0),
                values: vec![10_000_000],
                timestamps_unix_nano: vec![1_796_400_000_000_000_000 + i as u64 * 10_000_000],
                ..Default::default()
            })
            .collect(),
        time_unix_nano: 1_796_400_000_000_000_000,
        duration_nano: 10_000_000_000,
        period_type: Some(ValueType {
            type_strindex: 1,
            unit_strindex: 2,
        }),
        period: 10_000_000,
        profile_id: vec![7; 16],
        ..Default::default()
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("checkout".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "go.opentelemetry.io/ebpf-profiler".into(),
                    ..Default::default()
                }),
                profiles: vec![profile],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(dictionary),
    }
}

fn post(
    client: &reqwest::blocking::Client,
    url: &str,
    content_type: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let r = client
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .expect("post");
    (r.status().as_u16(), r.text().unwrap_or_default())
}

/// The requests causeway's file exporter wrote to `path`, as OTLP JSON
/// values.
fn written(path: &std::path::Path) -> Vec<serde_json::Value> {
    read_jsonl(path)
}

/// `req` as the file exporter writes it (its link ids in hex).
fn as_written(req: &ExportProfilesServiceRequest) -> serde_json::Value {
    let batch = causeway_core::Batch::from_encoded(
        causeway_core::Signal::Profiles,
        req.encode_to_vec().into(),
        0,
    );
    causeway_exporters::file::profiles_json(&batch).unwrap()
}

/// `v` with an attribute's empty value written as unset: the Collector's
/// pdata holds an attribute's value by value, so it sends the zero entry
/// of the attribute table with an empty `AnyValue` where the sender had
/// none (the same in OTLP: an empty `AnyValue` is no value).
fn unset_values(mut v: serde_json::Value) -> serde_json::Value {
    if let Some(t) = v
        .pointer_mut("/dictionary/attributeTable")
        .and_then(serde_json::Value::as_array_mut)
    {
        for a in t {
            if a.get("value") == Some(&serde_json::json!({})) {
                a["value"] = serde_json::Value::Null;
            }
        }
    }
    v
}

#[test]
fn profiles_cross_the_collector_both_ways_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (a_http, b_grpc, b_http, col_grpc, col_tel) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let b = Daemon::start(
        d,
        "b",
        &format!(
            r#"
receivers:
  otlp/from_collector:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{b_grpc}" }}
  otlp/direct:
    protocols:
      http: {{ endpoint: "127.0.0.1:{b_http}" }}
exporters:
  file/from_collector: {{ path: "{{dir}}/via-collector.jsonl" }}
  file/direct: {{ path: "{{dir}}/direct.jsonl" }}
service:
  pipelines:
    profiles/from_collector: {{ receivers: [otlp/from_collector], exporters: [file/from_collector] }}
    profiles/direct: {{ receivers: [otlp/direct], exporters: [file/direct] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let collector = Collector::start_profiles(
        d,
        "otelcol-profiles",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{col_grpc}" }}
exporters:
  otlp:
    endpoint: "127.0.0.1:{b_grpc}"
    tls: {{ insecure: true }}
service:
  pipelines:
    profiles: {{ receivers: [otlp], exporters: [otlp] }}
  telemetry:
    metrics:
      readers:
        - pull: {{ exporter: {{ prometheus: {{ host: 127.0.0.1, port: {col_tel} }} }} }}
"#
        ),
        &[col_grpc],
    );
    let a = Daemon::start(
        d,
        "a",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{a_http}" }}
processors:
  memory_limiter: {{ check_interval: 1s, limit_mib: 512 }}
exporters:
  otlp: {{ endpoint: "127.0.0.1:{col_grpc}" }}
  otlphttp: {{ endpoint: "http://127.0.0.1:{b_http}" }}
service:
  pipelines:
    profiles: {{ receivers: [otlp], processors: [memory_limiter], exporters: [otlp, otlphttp] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let client = http_client();
    let url = format!("http://127.0.0.1:{a_http}/v1development/profiles");
    let sent = [cpu_profile(30), cpu_profile(7)];
    for req in &sent {
        let (status, body) = post(&client, &url, "application/x-protobuf", req.encode_to_vec());
        assert_eq!(status, 200, "{body}");
    }
    // Refused with a reason, counted, and nothing else lost: a sample that
    // points past the stack table, and the same profile as JSON.
    let mut broken = cpu_profile(3);
    broken.resource_profiles[0].scope_profiles[0].profiles[0].samples[1].stack_index = 99;
    let (status, body) = post(
        &client,
        &url,
        "application/x-protobuf",
        broken.encode_to_vec(),
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("a sample points past the dictionary"),
        "{body}"
    );
    let (status, body) = post(&client, &url, "application/json", b"{}".to_vec());
    assert_eq!(status, 415, "{body}");
    assert!(body.contains("protobuf only"), "{body}");
    let (status, _) = post(
        &client,
        &format!("http://127.0.0.1:{a_http}/v1/traces"),
        "application/x-protobuf",
        Vec::new(),
    );
    assert_eq!(status, 200);

    let expected: Vec<serde_json::Value> = sent.iter().map(as_written).collect();
    for file in ["direct.jsonl", "via-collector.jsonl"] {
        let path = d.join(file);
        wait_for_or(
            Duration::from_secs(30),
            file,
            || written(&path).len() >= 2,
            || format!("collector:\n{}\na:\n{}", collector.log(), a.stderr("a")),
        );
        let got = written(&path);
        assert_eq!(got.len(), 2, "{file}");
        let got: Vec<serde_json::Value> = got.into_iter().map(unset_values).collect();
        for want in &expected {
            assert!(got.contains(want), "{file}: {want} not in {got:?}");
        }
    }
    // The samples taken, and the requests refused, by the receiver's count.
    assert_eq!(
        a.metric(r#"causeway_receiver_accepted_items_total{component="otlp",signal="profiles"}"#),
        Some(37.0)
    );
    assert_eq!(
        a.metric(r#"causeway_receiver_refused_items_total{component="otlp",signal="profiles"}"#),
        Some(1.0),
        "the request whose sample points past the dictionary"
    );
    drop(b);
}

#[test]
fn a_receiver_whose_pipelines_take_no_profiles_does_not_serve_them() {
    let dir = tempfile::tempdir().unwrap();
    let http = free_port();
    let _d = Daemon::start(
        dir.path(),
        "noprofiles",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{http}" }}
exporters:
  file: {{ path: "{{dir}}/out.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let (status, _) = post(
        &http_client(),
        &format!("http://127.0.0.1:{http}/v1development/profiles"),
        "application/x-protobuf",
        cpu_profile(2).encode_to_vec(),
    );
    assert_eq!(status, 404, "no pipeline takes profiles: not a silent drop");
}

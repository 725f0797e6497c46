//! The daemon's own metrics and traces, exported by OTLP (`service.telemetry`)
//! to a second causeway that writes them to a file.

mod common;

use common::*;
use std::time::Duration;

#[test]
fn own_metrics_and_traces_are_exported_by_otlp() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sink_grpc = free_port();
    let sink = Daemon::start(
        dir.path(),
        "sink",
        &sink_config(sink_grpc, "self-{signal}.jsonl", &["all"]),
    );
    let (g, h) = (free_port(), free_port());
    let daemon = Daemon::start(
        dir.path(),
        "observed",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{g}" }}
      http: {{ endpoint: "127.0.0.1:{h}" }}
exporters:
  file: {{ path: "{{dir}}/data.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [file] }}
  telemetry:
    resource: {{ deployment.environment: test }}
    metrics:
      address: "{{telemetry}}"
      readers:
        - periodic:
            interval: 200
            exporter: {{ otlp: {{ protocol: grpc, endpoint: "http://127.0.0.1:{sink_grpc}" }} }}
    traces:
      processors:
        - batch:
            exporter: {{ otlp: {{ protocol: grpc, endpoint: "http://127.0.0.1:{sink_grpc}" }} }}
"#
        ),
    );
    // Some traffic so the export span and counters exist.
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "content-type: application/json",
            &format!("http://127.0.0.1:{h}/v1/traces"),
            "-d",
            r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"x"}]}]}]}"#,
        ])
        .output()
        .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "200");

    let metrics_path = dir.path().join("self-metrics.jsonl");
    wait_for(
        Duration::from_secs(20),
        "the daemon's own accepted counter at the sink",
        || {
            metrics(&read_jsonl(&metrics_path)).iter().any(|(res, m)| {
                m["name"] == "causeway_receiver_accepted_items_total"
                    && attr(&res["attributes"], "service.name")
                        .is_some_and(|v| v["stringValue"] == "causeway")
                    && m["sum"]["dataPoints"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|dp| {
                            dp["asInt"] == "1"
                                && attr(&dp["attributes"], "signal")
                                    .is_some_and(|v| v["stringValue"] == "traces")
                        })
            })
        },
    );
    assert!(daemon.terminate().success());
    let traces_path = dir.path().join("self-traces.jsonl");
    wait_for(
        Duration::from_secs(20),
        "the daemon's own export span at the sink",
        || {
            spans(&read_jsonl(&traces_path)).iter().any(|(res, _, s)| {
                s["name"] == "causeway.export"
                    && attr(&res["attributes"], "deployment.environment")
                        .is_some_and(|v| v["stringValue"] == "test")
            })
        },
    );
    assert!(sink.terminate().success());
}

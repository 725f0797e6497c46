//! `causeway validate` reports every configuration error with its key path
//! and its place in the file.

mod common;

use std::process::Command;

fn validate(text: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, text).expect("write");
    let out = Command::new(common::BIN)
        .args(["validate", "--config", &path.display().to_string()])
        .output()
        .expect("run validate");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (
        out.status.success(),
        text.replace(&path.display().to_string(), "bad.yaml"),
    )
}

const BAD: &str = r#"receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:4317
processors:
  batch:
    timeout: 10 parsecs
  nosuch/thing: {}
exporters:
  otlp/jaeger:
    endpoint: jaeger:4317
    endpointt: typo
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/jaeger, otlp/missing]
"#;

#[test]
fn every_error_is_reported_with_path_and_location() {
    let (ok, out) = validate(BAD);
    assert!(!ok, "validate must fail:\n{out}");
    assert!(out.contains("4 errors"), "{out}");
    // A bad duration: key path and line:column of the key.
    assert!(
        out.contains("bad.yaml:8:5: processors.batch.timeout: invalid duration \"10 parsecs\""),
        "{out}"
    );
    // An unknown component type lists the valid ones.
    assert!(
        out.contains("bad.yaml:9:3: processors.nosuch/thing: unknown type \"nosuch\" for id \"nosuch/thing\" (valid values: [batch, correlate, memory_limiter, tail_sampling])"),
        "{out}"
    );
    // An unknown key, with the field itself located.
    assert!(
        out.contains("bad.yaml:13:5: exporters.otlp/jaeger.endpointt: unknown field `endpointt`"),
        "{out}"
    );
    // A pipeline naming an undefined component.
    assert!(
        out.contains("bad.yaml:19:32: service.pipelines.traces.exporters[1]: exporter \"otlp/missing\" is not defined under `exporters`"),
        "{out}"
    );
}

#[test]
fn yaml_syntax_error_has_a_location() {
    let (ok, out) = validate("receivers:\n  otlp: [\n");
    assert!(!ok);
    assert!(out.contains("bad.yaml:3:"), "{out}");
    assert!(out.contains("invalid YAML"), "{out}");
}

#[test]
fn top_level_unknown_key_and_signal_mismatch() {
    let (ok, out) = validate(
        "receivers:\n  otlp:\n    protocols: { http: }\nexporters:\n  debug:\nservice:\n  pipelines:\n    spans:\n      receivers: [otlp]\n      exporters: [debug]\n",
    );
    assert!(!ok);
    assert!(
        out.contains("service.pipelines.spans: unknown pipeline type \"spans\""),
        "{out}"
    );
    let (ok, out) = validate("recievers: {}\n");
    assert!(!ok);
    assert!(
        out.contains("bad.yaml:1:1: recievers: unknown field `recievers`"),
        "{out}"
    );
}

#[test]
fn missing_env_var_is_named() {
    let (ok, out) = validate(
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: ${env:CAUSEWAY_TEST_UNSET_VAR}\nexporters:\n  debug:\nservice:\n  pipelines:\n    traces: { receivers: [otlp], exporters: [debug] }\n",
    );
    assert!(!ok);
    assert!(out.contains("bad.yaml:5:9: receivers.otlp.protocols.grpc.endpoint: environment variable CAUSEWAY_TEST_UNSET_VAR is not set"), "{out}");
}

#[test]
fn valid_config_passes_with_env_defaults() {
    let (ok, out) = validate(
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: ${env:CAUSEWAY_TEST_UNSET_VAR:-127.0.0.1:4317}\nexporters:\n  otlp:\n    endpoint: localhost:4317\n    retry_on_failure: { initial_interval: 1s, max_elapsed_time: 1m }\n    sending_queue: { queue_size: 10 }\nservice:\n  pipelines:\n    traces: { receivers: [otlp], exporters: [otlp] }\n",
    );
    assert!(ok, "{out}");
    assert!(out.contains("valid"), "{out}");
}

#[test]
fn a_bad_rca_rule_is_rejected_with_its_path_and_location() {
    let (ok, out) = validate(
        r#"receivers:
  otlp:
    protocols:
      http:
processors:
  correlate:
    rules:
      - name: nope
        cause: db_lock
        sql: SELECT trace_id, 0.9 AS confidence, 'x' AS summary FROM spans WHERE no_such_column > 1
      - name: nope
        cause: two words
        sql: SELECT trace_id FROM spans
exporters:
  debug:
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [correlate]
      exporters: [debug]
"#,
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("processors.correlate.rules[0].sql:") && out.contains("no_such_column"),
        "{out}"
    );
    assert!(
        out.contains("processors.correlate.rules[1].name: rule \"nope\" is defined twice"),
        "{out}"
    );
    assert!(
        out.contains("processors.correlate.rules[1].cause:"),
        "{out}"
    );
    assert!(
        out.contains(
            "processors.correlate.rules[1].sql: the query must return a `confidence` column"
        ),
        "{out}"
    );
    assert!(out.contains("bad.yaml:10:"), "located: {out}");
}

#[test]
fn bad_alert_rules_are_rejected_with_their_path_and_location() {
    let (ok, out) = validate(
        r#"receivers:
  otlp:
    protocols:
      http:
processors:
  correlate:
    alerts:
      links:
        jaeger: "http://jaeger/trace/{{ .TraceID }}"
      rules:
        - alert: RouteSlow
          expr: SELECT route_id, p99 AS value FROM routes
          for: 5m
        - alert: LagBad
          expr: SELECT consumer_group, status_name AS value FROM kafka_groups
          fro: 5m
exporters:
  alertmanager:
    endpoint: http://alertmanager:9093
    url: http://typo
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [correlate]
      exporters: [alertmanager]
"#,
    );
    assert!(!ok, "{out}");
    // The unknown field `fro` stops the section from decoding: reported first.
    assert!(
        out.contains("processors.correlate.alerts.rules[1]") && out.contains("fro"),
        "{out}"
    );
    assert!(
        out.contains("exporters.alertmanager") && out.contains("url"),
        "{out}"
    );
    assert!(
        out.contains("bad.yaml:16:"),
        "located at the unknown field: {out}"
    );
}

#[test]
fn bad_alert_expressions_and_templates_are_rejected_with_their_path_and_location() {
    let (ok, out) = validate(
        r#"receivers:
  otlp:
    protocols:
      http:
processors:
  correlate:
    alerts:
      links:
        jaeger: "http://jaeger/trace/{{ .TraceID }}"
      rules:
        - alert: RouteSlow
          expr: SELECT route_id, p99 AS value FROM routes
          for: 5m
        - alert: LagBad
          expr: SELECT consumer_group, status_name AS value FROM kafka_groups
          annotations:
            summary: "{{ $labels.consumer_group } is bad"
exporters:
  alertmanager:
    endpoint: http://alertmanager:9093
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [correlate]
      exporters: [alertmanager]
"#,
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains(
            "processors.correlate.alerts.links.jaeger: unknown placeholder `{{ .TraceID }}`"
        ),
        "{out}"
    );
    assert!(
        out.contains("processors.correlate.alerts.rules[0].expr:") && out.contains("p99"),
        "{out}"
    );
    assert!(
        out.contains(
            "processors.correlate.alerts.rules[1].expr: the `value` column must be a number"
        ),
        "{out}"
    );
    assert!(
        out.contains("processors.correlate.alerts.rules[1].annotations.summary:")
            && out.contains("never closed"),
        "{out}"
    );
    assert!(
        out.contains("bad.yaml:12:"),
        "the expression is located: {out}"
    );
}

/// As in the Collector, an `otlphttp` exporter needs a URL only for the
/// signals it is used with: a `traces_endpoint` alone serves a traces
/// pipeline, and the same section in a logs pipeline is an error naming the
/// key to set.
#[test]
fn otlphttp_needs_an_endpoint_only_for_the_signals_of_its_pipelines() {
    let config = |pipelines: &str| {
        format!(
            r#"receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:4318
exporters:
  otlphttp/tempo:
    traces_endpoint: http://tempo:4318/v1/traces
service:
  pipelines:
{pipelines}"#
        )
    };
    let (ok, out) = validate(&config(
        "    traces:\n      receivers: [otlp]\n      exporters: [otlphttp/tempo]\n",
    ));
    assert!(ok, "a traces_endpoint alone serves traces:\n{out}");
    let (ok, out) = validate(&config(
        "    traces:\n      receivers: [otlp]\n      exporters: [otlphttp/tempo]\n    logs:\n      receivers: [otlp]\n      exporters: [otlphttp/tempo]\n",
    ));
    assert!(!ok, "{out}");
    assert!(
        out.contains("service.pipelines.logs.exporters[0]: exporter \"otlphttp/tempo\" cannot export the logs of pipeline \"logs\": it has no URL for them: set `endpoint` or `logs_endpoint`"),
        "{out}"
    );
    assert!(
        out.contains("1 error"),
        "only the logs pipeline is wrong:\n{out}"
    );
    let (ok, out) = validate(
        "receivers:\n  otlp:\n    protocols:\n      http: {}\nexporters:\n  otlphttp: {}\nservice:\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [otlphttp]\n",
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("exporters.otlphttp.endpoint: set `endpoint`"),
        "{out}"
    );
}

/// Three typos in one component are three errors of one run (they took
/// three runs, one a run), a duration with a space is refused as the
/// Collector refuses it, and a file indented with a tab says so.
#[test]
fn every_error_of_one_component_in_one_run_spaces_in_durations_and_tabs() {
    let (ok, out) = validate(
        r#"receivers:
  otlp:
    protocols: { grpc: { endpoint: 127.0.0.1:4317 } }
processors:
  tail_sampling:
    decision_wiat: 5s
    num_trace: 100
    expected_new_traces_per_sec: 10
    policies:
      - { name: slow, type: latency, latency: { threshold_ms: 100 }, extra: 1 }
  batch:
    timeout: 5 s
exporters:
  debug:
service:
  pipelines:
    traces: { receivers: [otlp], processors: [tail_sampling, batch], exporters: [debug] }
"#,
    );
    assert!(!ok, "{out}");
    for want in [
        "bad.yaml:6:5: processors.tail_sampling.decision_wiat: unknown field `decision_wiat`",
        "bad.yaml:7:5: processors.tail_sampling.num_trace: unknown field `num_trace`",
        "processors.tail_sampling.policies[0].extra: unknown field `extra`",
        "bad.yaml:12:5: processors.batch.timeout: invalid duration \"5 s\" (a space inside)",
    ] {
        assert!(out.contains(want), "missing {want:?} in:\n{out}");
    }
    assert!(out.contains("4 errors"), "{out}");
    let (ok, out) = validate("receivers:\n  otlp:\n\tprotocols: {}\n");
    assert!(!ok);
    assert!(
        out.contains("line 3 is indented with a tab: YAML indents with spaces only"),
        "{out}"
    );
}

/// A `correlate` that waits less for profiles than the `pprof` receiver
/// of its profiles pipeline takes to deliver them (a 15 s window answered
/// within a 10 s timeout) is warned about; the defaults are not.
#[test]
fn profiles_that_arrive_after_correlate_stops_waiting_are_warned_about() {
    let config = |wait: &str| {
        format!(
            r#"receivers:
  otlp:
    protocols: {{ grpc: {{ endpoint: 127.0.0.1:4317 }} }}
  pprof:
    targets: [{{ service: shop, static_configs: [{{ targets: ["127.0.0.1:6060"] }}] }}]
processors:
  tail_sampling:
    decision_wait: 10s
    policies: [{{ name: slow, type: latency, latency: {{ threshold_ms: 1000 }} }}]
  correlate: {{ {wait} }}
exporters:
  debug: {{}}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [debug] }}
    profiles: {{ receivers: [pprof], processors: [correlate], exporters: [debug] }}
"#
        )
    };
    let (ok, out) = validate(&config("profiles: { wait: 5s }"));
    assert!(ok, "a warning, not an error:\n{out}");
    assert!(
        out.contains("receiver pprof delivers what it covers up to 25s after it; processor correlate waits at most 5s for it (`profiles.wait`)"),
        "{out}"
    );
    let (ok, out) = validate(&config(""));
    assert!(ok, "{out}");
    assert!(!out.contains("profiles.wait"), "{out}");
}

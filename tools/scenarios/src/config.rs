//! Pieces of the daemon configs the test beds run, written once.

/// A config's `receivers:` section opening with an OTLP/HTTP receiver on
/// `http` (more protocols or receivers may follow, indented as theirs).
pub fn otlp_http(http: u16) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{http}" }}
"#
    )
}

/// The head of a test bed's config: an OTLP/HTTP receiver on `http` and a
/// `tail_sampling` processor that keeps every trace after `decision_wait`;
/// the bed's own processors follow, indented under `processors:`.
pub fn keep_all(http: u16, decision_wait: &str) -> String {
    format!(
        r#"{}processors:
  tail_sampling:
    decision_wait: {decision_wait}
    policies: [{{ name: all, type: always_sample }}]
"#,
        otlp_http(http)
    )
}

/// The tail of a test bed's config that analyses what it receives: the
/// traces (from `traces`), logs (from `logs`) and metrics (from `metrics`,
/// comma-separated receiver ids) through `correlate` (traces after
/// `tail_sampling`) into `{dir}/traces.jsonl`, `logs.jsonl` and
/// `metrics.jsonl`, and the daemon's telemetry served.
pub fn analysed(traces: &str, logs: &str, metrics: &str) -> String {
    format!(
        r#"exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  file/logs: {{ path: "{{dir}}/logs.jsonl" }}
  file/metrics: {{ path: "{{dir}}/metrics.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [{traces}], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [{logs}], processors: [correlate], exporters: [file/logs] }}
    metrics: {{ receivers: [{metrics}], processors: [correlate], exporters: [file/metrics] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    )
}

/// The tail of a config that writes the metrics of `receivers`
/// (comma-separated ids) to `{dir}/metrics.jsonl`, its telemetry served.
pub fn metrics_to_file(receivers: &str) -> String {
    format!(
        r#"exporters:
  file: {{ path: "{{dir}}/metrics.jsonl" }}
service:
  pipelines:
    metrics: {{ receivers: [{receivers}], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    )
}

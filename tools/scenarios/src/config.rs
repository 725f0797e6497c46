//! Pieces of the daemon configs the test beds run, written once.

/// The head of a test bed's config: an OTLP/HTTP receiver on `http` and a
/// `tail_sampling` processor that keeps every trace after `decision_wait`;
/// the bed's own processors follow, indented under `processors:`.
pub fn keep_all(http: u16, decision_wait: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{http}" }}
processors:
  tail_sampling:
    decision_wait: {decision_wait}
    policies: [{{ name: all, type: always_sample }}]
"#
    )
}

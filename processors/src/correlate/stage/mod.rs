//! The processor's stages, each with its slice of the config and its own
//! schedule: the analysis (and the traces it holds for evidence), the
//! emission of RCA records and counts, the alert rules, the incidents. The
//! processor asks each when it is due and runs those that are.

pub mod alert;
pub mod analyse;
pub mod emit;
pub mod incident;
pub mod unkept;

use async_trait::async_trait;
use causeway_core::Batch;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use tokio::time::Instant;

use crate::correlate::annotate::kv;

causeway_core::metrics! {
    /// Root-cause and alert rules that failed at run time, by rule.
    pub RuleErrors: counter = "causeway_rca_rule_errors_total";
}

/// Count a rule that failed at run time (`kind`: root-cause or alert);
/// the first failure of each rule is logged, the others only counted.
fn rule_failed(
    (telemetry, id): (&causeway_core::telemetry::Registry, &str),
    logged: &mut std::collections::HashSet<String>,
    (rule, error): (String, String),
    kind: &str,
) {
    telemetry
        .counter(RuleErrors, &[("component", id), ("rule", &rule)])
        .add(1);
    if logged.insert(rule.clone()) {
        tracing::warn!(processor = %id, %rule, %error, kind, "A rule failed; the other rules still ran.");
    }
}

/// A part of the processor that runs on its own schedule.
#[async_trait]
pub trait Stage: Send {
    /// When it is due next (`None`: nothing to run by the clock).
    fn due(&self) -> Option<Instant>;

    /// Run what is due at `now`; what it writes goes to `out`.
    async fn run(&mut self, now: Instant, out: &mut Vec<Batch>);

    /// At a flush: out with what it still holds.
    async fn flush(&mut self, _out: &mut Vec<Batch>) {}
}

/// Log records of causeway's own (alerts, incidents) as a batch, under
/// `service.name = causeway` and the scope `scope`.
fn own_logs(scope: &str, records: Vec<LogRecord>) -> Batch {
    Batch::from_logs(vec![ResourceLogs {
        resource: Some(Resource {
            attributes: vec![kv("service.name", "causeway".to_string())],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            scope: Some(InstrumentationScope {
                name: scope.into(),
                version: env!("CARGO_PKG_VERSION").into(),
                ..Default::default()
            }),
            log_records: records,
            ..Default::default()
        }],
        ..Default::default()
    }])
}

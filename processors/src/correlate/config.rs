//! Configuration of the `correlate` processor.

use causeway_core::config::{ConfigError, Duration, Validate};
use serde::Deserialize;

/// A root-cause rule: SQL over the joined evidence.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// The rule's name, written to `rca.rule`. A user rule named like a
    /// built-in rule replaces it.
    pub name: String,
    /// The cause it concludes: one of the vocabulary, or a new cause.
    pub cause: String,
    /// A SELECT over the tables `traces`, `spans`, `logs`, `route_stats`,
    /// `kafka_lag` and `host`, returning one row per trace it explains with
    /// the columns `trace_id`, `confidence` (0..1) and `summary`, and
    /// optionally `culprit_span_id` and `evidence`.
    pub sql: String,
}

/// `processors.correlate`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrelateConfig {
    /// How long logs, route statistics and metrics are kept (default 10m).
    #[serde(default = "window")]
    pub window: Duration,
    /// Log records kept at most; the oldest go first (default 200000).
    #[serde(default = "max_logs")]
    pub max_log_records: usize,
    /// Metric series kept at most (default 50000).
    #[serde(default = "max_series")]
    pub max_series: usize,
    /// Routes with statistics at most (default 10000).
    #[serde(default = "max_routes")]
    pub max_routes: usize,
    /// Metric points with a time in [trace start − lookback, trace end +
    /// lookahead] are joined to a trace (default 2m / 1m): a metric scraped
    /// before or after the request still counts.
    #[serde(default = "lookback")]
    pub metric_lookback: Duration,
    /// See `metric_lookback`.
    #[serde(default = "lookahead")]
    pub metric_lookahead: Duration,
    /// Use the built-in rules (default true).
    #[serde(default = "yes")]
    pub builtin_rules: bool,
    /// User rules. They run with the built-in ones; one with a built-in's name replaces it.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// Emit an RCA log record per analysed trace (into the logs pipelines this
    /// processor is in) and the `causeway.rca.traces` counter (into its
    /// metrics pipelines) (default true).
    #[serde(default = "yes")]
    pub events: bool,
    /// Alert rules over the route windows, root-cause results and lag status
    /// (see [`super::alerts`]); alerts leave as log records into the logs
    /// pipelines this processor is in.
    #[serde(default)]
    pub alerts: super::alerts::AlertsConfig,
}

fn window() -> Duration {
    Duration::secs(600)
}
fn max_logs() -> usize {
    200_000
}
fn max_series() -> usize {
    50_000
}
fn max_routes() -> usize {
    10_000
}
fn lookback() -> Duration {
    Duration::secs(120)
}
fn lookahead() -> Duration {
    Duration::secs(60)
}
fn yes() -> bool {
    true
}

/// Columns every rule must return.
pub const REQUIRED_COLUMNS: [&str; 3] = ["trace_id", "confidence", "summary"];

impl Validate for CorrelateConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.window.get().is_zero() {
            e.push(ConfigError::new("window", "must be more than 0"));
        }
        if self.max_log_records == 0 {
            e.push(ConfigError::new("max_log_records", "must be at least 1"));
        }
        let mut names = std::collections::HashSet::new();
        for (i, r) in self.rules.iter().enumerate() {
            if r.name.trim().is_empty() {
                e.push(ConfigError::new(
                    format!("rules[{i}].name"),
                    "must not be empty",
                ));
            }
            if !names.insert(r.name.clone()) {
                e.push(ConfigError::new(
                    format!("rules[{i}].name"),
                    format!("rule {:?} is defined twice", r.name),
                ));
            }
            if r.cause.trim().is_empty() || r.cause.contains(char::is_whitespace) {
                e.push(ConfigError::new(
                    format!("rules[{i}].cause"),
                    "must be one word, e.g. `db_lock_contention`",
                ));
            }
            if let Err(msg) = super::rules::check_sql(&r.sql) {
                e.push(ConfigError::new(format!("rules[{i}].sql"), msg));
            }
        }
        if !self.alerts.rules.is_empty() || !self.alerts.links.is_empty() {
            e.extend(super::alerts::validate(&self.alerts));
        }
        e
    }
}

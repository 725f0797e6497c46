//! Configuration of the `correlate` processor.

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use serde::Deserialize;
use std::collections::HashMap;

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
    /// `kafka_lag`, `rabbitmq_queue`, `host` and `dependency`, returning one row per trace it explains with
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
    /// Log records kept at most; the oldest go first, counted in
    /// `causeway_correlate_evicted_log_records_total{reason="count"}` (default 1000000).
    #[serde(default = "max_logs")]
    pub max_log_records: usize,
    /// Bytes of log records kept at most (body + 256 bytes each); the oldest
    /// go first, counted with `reason="bytes"` (default 256MiB).
    #[serde(default = "max_log_bytes")]
    pub max_log_bytes: ByteSize,
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
    /// A finding must account for at least this share of the trace's
    /// duration to be its cause, unless it explains why the request failed
    /// (default 0.2). Below it, it stays an alternative.
    #[serde(default = "min_share")]
    pub min_explained_share: f64,
    /// And at least this long (default 50ms): a 20 ms fallback read in a
    /// 30 ms trace is not why anyone was paged.
    #[serde(default = "min_explained")]
    pub min_explained: Duration,
    /// Hold an analysed trace whose cause is `unknown`, only
    /// `slow_dependency` (the fallback), or `upstream_timeout` (the callee
    /// was still running when the caller gave up) this long, then
    /// analyse it again: its gateway log or metrics may still arrive
    /// (metrics are scraped every 10–60 s). `0s` (default) turns it off.
    #[serde(default)]
    pub evidence_wait: Duration,
    /// The last analysed traces kept for the built-in page's trace view
    /// (`/api/traces/{id}`; default 2000, 0 keeps none).
    #[serde(default = "recent_traces")]
    pub recent_traces: usize,
    /// Traces held by `evidence_wait` at most; beyond, they leave at once (default 10000).
    #[serde(default = "max_held")]
    pub max_held_traces: usize,
    /// Service route → gateway route id, for sites whose gateway route ids
    /// and service routes differ, e.g. `{"POST /orders": order-create}`.
    /// Mappings are also learned from traces that carry both.
    #[serde(default)]
    pub route_map: HashMap<String, String>,
    /// When Kafka consumer lag counts as lag.
    #[serde(default)]
    pub consumer_lag: ConsumerLagConfig,
    /// Per-operation latency baselines.
    #[serde(default)]
    pub baseline: BaselineConfig,
    /// How the metrics of the servers a trace called (scraped from their
    /// exporters) join its client spans.
    #[serde(default)]
    pub dependencies: DependenciesConfig,
    /// Alert rules over the route windows, root-cause results and lag status
    /// (see [`super::alerts`]); alerts leave as log records into the logs
    /// pipelines this processor is in.
    #[serde(default)]
    pub alerts: super::alerts::AlertsConfig,
}

/// `processors.correlate.consumer_lag`: when plain consumer-group lag (the
/// Collector's `kafka.consumer_group.lag` / `lag_sum`) counts as lag.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerLagConfig {
    /// Lag in messages at or above which the group lags (default 5000, the
    /// low end of the 5,000–10,000 operators alarm at).
    #[serde(default = "lag_threshold")]
    pub lag_threshold: f64,
    /// Growth in messages, point after point over the join interval, at
    /// which the group lags whatever its level (default 1000).
    #[serde(default = "lag_growth")]
    pub lag_growth: f64,
    /// How often the lag is sampled: kafkametrics' `collection_interval`
    /// (default 1m) or kafka_lag's `interval`. A consumer's wait joins the
    /// lag sampled within this of it (default 1m).
    #[serde(default = "lag_sample_interval")]
    pub sample_interval: Duration,
}

impl Default for ConsumerLagConfig {
    fn default() -> Self {
        ConsumerLagConfig {
            lag_threshold: lag_threshold(),
            lag_growth: lag_growth(),
            sample_interval: lag_sample_interval(),
        }
    }
}

/// `processors.correlate.dependencies`: a dependency's metrics (Redis,
/// PostgreSQL, NGINX, Envoy, vLLM, Triton, DCGM; see [`super::deps`]) join
/// the client spans that called it by address.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DependenciesConfig {
    /// How often the dependencies are scraped: a client span joins the
    /// points within this of its start and end (default 15s). Set it to
    /// your `scrape_interval`.
    #[serde(default = "dep_sample_interval")]
    pub sample_interval: Duration,
    /// Addresses spans call → the scrape `job` or `instance` whose metrics
    /// describe that server, for what the automatic mapping cannot know,
    /// e.g. `{"redis.shop:6379": redis-cache}` when the exporter runs
    /// elsewhere than the server it watches.
    #[serde(default)]
    pub addresses: HashMap<String, String>,
}

impl Default for DependenciesConfig {
    fn default() -> Self {
        DependenciesConfig {
            sample_interval: dep_sample_interval(),
            addresses: HashMap::new(),
        }
    }
}

fn dep_sample_interval() -> Duration {
    Duration::secs(15)
}

/// `processors.correlate.baseline`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BaselineConfig {
    /// The window a baseline covers (two generations of half of it; default 1h).
    #[serde(default = "baseline_window")]
    pub window: Duration,
    /// Samples an operation needs before its baseline is used (default 20).
    /// Before, a span's whole self time counts as its deviation.
    #[serde(default = "min_samples")]
    pub min_samples: u64,
    /// Operations (service, span name) with a baseline at most (default 10000).
    #[serde(default = "max_operations")]
    pub max_operations: usize,
}

impl Default for BaselineConfig {
    fn default() -> Self {
        BaselineConfig {
            window: baseline_window(),
            min_samples: min_samples(),
            max_operations: max_operations(),
        }
    }
}

fn lag_threshold() -> f64 {
    5000.0
}
fn lag_sample_interval() -> Duration {
    Duration::secs(60)
}
fn lag_growth() -> f64 {
    1000.0
}
fn baseline_window() -> Duration {
    Duration::secs(3600)
}
fn min_samples() -> u64 {
    20
}
fn max_operations() -> usize {
    10_000
}
fn max_log_bytes() -> ByteSize {
    ByteSize(256 << 20)
}
fn min_explained() -> Duration {
    Duration::millis(50)
}
fn min_share() -> f64 {
    0.2
}
fn max_held() -> usize {
    10_000
}

fn window() -> Duration {
    Duration::secs(600)
}
fn max_logs() -> usize {
    1_000_000
}
fn max_series() -> usize {
    50_000
}
fn max_routes() -> usize {
    10_000
}
fn recent_traces() -> usize {
    2000
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
        if self.max_log_bytes.0 < 1 << 20 {
            e.push(ConfigError::new("max_log_bytes", "must be at least 1MiB"));
        }
        if !(0.0..=1.0).contains(&self.min_explained_share) {
            e.push(ConfigError::new(
                "min_explained_share",
                "must be between 0 and 1",
            ));
        }
        if self.baseline.window.get().is_zero() {
            e.push(ConfigError::new("baseline.window", "must be more than 0"));
        }
        if self.dependencies.sample_interval.get().is_zero() {
            e.push(ConfigError::new(
                "dependencies.sample_interval",
                "must be more than 0",
            ));
        }
        if self.consumer_lag.lag_threshold <= 0.0 {
            e.push(ConfigError::new(
                "consumer_lag.lag_threshold",
                "must be more than 0",
            ));
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

//! Configuration of the `correlate` processor. A source with settings adds
//! one field here, of a type its own file defines.

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use serde::Deserialize;
use std::collections::HashMap;

use super::alerts::AlertsConfig;
use super::incidents::config::IncidentsConfig;
use super::rules::{RetryStormConfig, RuleConfig};
use super::source::deps::DependenciesConfig;
use super::source::kafka::ConsumerLagConfig;
use super::source::nats::NatsConfig;
use super::source::rabbit::RabbitmqConfig;

/// `processors.correlate`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrelateConfig {
    /// How long logs, route statistics and metrics are kept.
    #[serde(default = "window")]
    pub window: Duration,
    /// Log records kept at most; the oldest go first, counted in
    /// `causeway_correlate_evicted_log_records_total{reason="count"}`.
    #[serde(default = "max_logs")]
    pub max_log_records: usize,
    /// Bytes of log records kept at most (body + 256 bytes each); the oldest
    /// go first, counted with `reason="bytes"`.
    #[serde(default = "max_log_bytes")]
    pub max_log_bytes: ByteSize,
    /// Metric series kept at most.
    #[serde(default = "max_series")]
    pub max_series: usize,
    /// Routes with statistics at most.
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
    /// Use the built-in rules.
    #[serde(default = "yes")]
    pub builtin_rules: bool,
    /// User rules. They run with the built-in ones; one with a built-in's name replaces it.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// Emit an RCA log record per analysed trace (into the logs pipelines this
    /// processor is in) and the `causeway.rca.traces` counter (into its
    /// metrics pipelines).
    #[serde(default = "yes")]
    pub events: bool,
    /// A finding must account for at least this share of the trace's
    /// duration to be its cause, unless it explains why the request failed
    ///. Below it, it stays an alternative.
    #[serde(default = "min_share")]
    pub min_explained_share: f64,
    /// And at least this long: a 20 ms fallback read in a
    /// 30 ms trace is not why anyone was paged.
    #[serde(default = "min_explained")]
    pub min_explained: Duration,
    /// Hold an analysed trace whose cause is `unknown`, only
    /// `slow_dependency` (the fallback), or `upstream_timeout` (the callee
    /// was still running when the caller gave up) this long, then
    /// analyse it again: its gateway log or metrics may still arrive
    /// (metrics are scraped every 10–60 s). `0s` turns it off.
    #[serde(default)]
    pub evidence_wait: Duration,
    /// The last analysed traces kept for the built-in page's trace view
    /// (`/api/traces/{id}`; default 2000, 0 keeps none).
    #[serde(default = "recent_traces")]
    pub recent_traces: usize,
    /// A kept trace with a call to an instrumented service (its address
    /// seen served by one) whose spans are not in it yet waits for them,
    /// before its analysis, at most this long (6s: the
    /// OpenTelemetry SDKs export a batch every 5 s, `OTEL_BSP_SCHEDULE_DELAY`,
    /// so a callee's span may come seconds after its caller's root, past a
    /// sampler's `decision_wait_after_root_received`). `0s`: no wait; a
    /// callee's span that comes after the analysis is passed on unanalysed.
    #[serde(default = "callee_wait")]
    pub callee_wait: Duration,
    /// Traces held by `evidence_wait` at most; beyond, they leave at once.
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
    /// How RabbitMQ's queues join the consumers that waited on them.
    #[serde(default)]
    pub rabbitmq: RabbitmqConfig,
    /// How NATS JetStream's consumers join the consumers that waited on them.
    #[serde(default)]
    pub nats: NatsConfig,
    /// The window of profile samples the `profiles` source joins.
    #[serde(default)]
    pub profiles: super::source::profiles::ProfilesConfig,
    /// Per-operation latency baselines.
    #[serde(default)]
    pub baseline: BaselineConfig,
    /// A message that waited at least this long between its producer span's
    /// end and its consumer span's start is `consumer_lag` by its wait
    /// alone, whatever the lag metrics say (500ms: a consumer that
    /// keeps up still waits up to its fetch wait, Kafka's
    /// `fetch.max.wait.ms`, 500 ms by default).
    #[serde(default = "min_message_wait")]
    pub min_message_wait: Duration,
    /// When a sequence of retries is a `retry_storm` (the retries are the
    /// problem) rather than a client answering its trigger (a 429, a 503,
    /// a timeout), which is then the cause.
    #[serde(default)]
    pub retry_storm: RetryStormConfig,
    /// How the metrics of the servers a trace called (scraped from their
    /// exporters) join its client spans.
    #[serde(default)]
    pub dependencies: DependenciesConfig,
    /// Alert rules over the route windows, root-cause results and lag status
    /// (see [`super::alerts`]); alerts leave as log records into the logs
    /// pipelines this processor is in.
    #[serde(default)]
    pub alerts: AlertsConfig,
    /// Incidents per route: detection against each route's normal, SLO
    /// burn alerts, and their explanation (see [`super::incidents`]).
    #[serde(default)]
    pub incidents: IncidentsConfig,
}

/// `processors.correlate.baseline`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BaselineConfig {
    /// The window a baseline covers (two generations of half of it).
    #[serde(default = "baseline_window")]
    pub window: Duration,
    /// Samples an operation needs before its baseline is used.
    /// Before, a span's whole self time counts as its deviation.
    #[serde(default = "min_samples")]
    pub min_samples: u64,
    /// Operations (service, span name) with a baseline at most.
    #[serde(default = "max_operations")]
    pub max_operations: usize,
    /// Spans a second, at most, of the traces a `tail_sampling` before
    /// this processor did not keep that the baselines (and the calls each
    /// operation makes) learn from (0: none, baselines then
    /// learn from the kept traces alone).
    #[serde(default = "unkept_spans_per_second")]
    pub unkept_spans_per_second: usize,
}

impl Validate for BaselineConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.window.get().is_zero() {
            e.push(ConfigError::new("window", "must be more than 0"));
        }
        e
    }
}

impl Default for BaselineConfig {
    fn default() -> Self {
        BaselineConfig {
            window: baseline_window(),
            min_samples: min_samples(),
            max_operations: max_operations(),
            unkept_spans_per_second: unkept_spans_per_second(),
        }
    }
}

fn unkept_spans_per_second() -> usize {
    20_000
}

fn min_message_wait() -> Duration {
    Duration::millis(500)
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
fn callee_wait() -> Duration {
    Duration::secs(6)
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

//! Configuration of the `tail_sampling` processor. The top-level keys and
//! the policy shape (`{name, type, <type>: {…}}`) are the OpenTelemetry
//! Collector's, so its configs paste in; causeway adds `max_memory`,
//! `max_spans_per_trace`, `always_keep_errors` and the `adaptive_latency` policy.

use super::policy::validate;
pub use super::policy::PolicyConfig;
use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use serde::Deserialize;

/// `processors.tail_sampling`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TailSamplingConfig {
    /// How long after a trace's first span to decide.
    #[serde(default = "default_wait")]
    pub decision_wait: Duration,
    /// Decide this long after the root span (no parent) arrived, when that is
    /// sooner than `decision_wait` (0s: off).
    #[serde(default)]
    pub decision_wait_after_root_received: Duration,
    /// Most traces held at once; beyond it the oldest are decided early.
    #[serde(default = "default_num_traces")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub num_traces: usize,
    /// Accepted for compatibility with the Collector; not needed here.
    #[serde(default)]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub expected_new_traces_per_sec: u64,
    /// Most bytes of pending spans (measured: encoded spans plus bookkeeping);
    /// beyond it the oldest traces are decided early.
    #[serde(default = "default_max_memory")]
    pub max_memory: ByteSize,
    /// A trace bigger than this is decided at once (0: off).
    #[serde(default, alias = "max_trace_size_bytes")]
    pub maximum_trace_size_bytes: ByteSize,
    /// A trace with more spans than this is decided at once (0: off).
    #[serde(default = "default_max_spans")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub max_spans_per_trace: usize,
    /// Remembered decisions, so late spans follow them.
    #[serde(default)]
    pub decision_cache: DecisionCacheConfig,
    /// Stop evaluating at the first policy that samples.
    #[serde(default)]
    pub sample_on_first_match: bool,
    /// At shutdown, drop pending traces instead of deciding them.
    #[serde(default)]
    pub drop_pending_traces_on_shutdown: bool,
    /// Keep every trace with an ERROR span, whatever the policies say,
    /// unless a `drop` policy drops it.
    #[serde(default = "yes")]
    pub always_keep_errors: bool,
    /// The policies, evaluated in order.
    #[serde(default)]
    pub policies: Vec<PolicyConfig>,
}

fn yes() -> bool {
    true
}
fn default_wait() -> Duration {
    Duration::secs(30)
}
fn default_num_traces() -> usize {
    50_000
}
fn default_max_memory() -> ByteSize {
    ByteSize(256 << 20)
}
fn default_max_spans() -> usize {
    10_000
}

/// `decision_cache`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionCacheConfig {
    /// Trace ids of kept traces to remember.
    #[serde(default = "default_cache")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub sampled_cache_size: usize,
    /// Trace ids of dropped traces to remember.
    #[serde(default = "default_cache")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub non_sampled_cache_size: usize,
}

impl Default for DecisionCacheConfig {
    fn default() -> Self {
        DecisionCacheConfig {
            sampled_cache_size: default_cache(),
            non_sampled_cache_size: default_cache(),
        }
    }
}

fn default_cache() -> usize {
    100_000
}

impl Validate for TailSamplingConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.decision_wait.get().is_zero() {
            e.push(ConfigError::new("decision_wait", "must be greater than 0"));
        }
        if self.num_traces == 0 {
            e.push(ConfigError::new("num_traces", "must be at least 1"));
        }
        if self.max_memory.0 < 1 << 20 {
            e.push(ConfigError::new("max_memory", "must be at least 1MiB"));
        }
        if self.policies.is_empty() && !self.always_keep_errors {
            e.push(ConfigError::new(
                "policies",
                "at least one policy is required",
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, p) in self.policies.iter().enumerate() {
            let path = format!("policies[{i}]");
            if !names.insert(p.name.as_str()) {
                e.push(ConfigError::new(
                    format!("{path}.name"),
                    format!("duplicate policy name {:?}", p.name),
                ));
            }
            validate(p, &path, 0, &mut e);
        }
        e
    }
}

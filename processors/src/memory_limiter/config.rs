//! Configuration of the `memory_limiter` processor: the Collector's keys.

use causeway_core::config::{lenient_int, ConfigError, Duration, Validate};
use serde::Deserialize;

/// `processors.memory_limiter`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryLimiterProcessorConfig {
    /// How often memory is measured. Required, as in the Collector (which
    /// recommends 1s); causeway also counts each admitted request at once.
    #[serde(default)]
    pub check_interval: Option<Duration>,
    /// Hard limit in MiB of the process's resident memory (the Collector
    /// measures its Go heap, about 50 MiB less). Wins over `limit_percentage`.
    #[serde(default, deserialize_with = "lenient_int")]
    pub limit_mib: u64,
    /// Headroom under the hard limit in MiB: data is refused above
    /// `limit_mib − spike_limit_mib` (default 20% of the limit).
    #[serde(default, deserialize_with = "lenient_int")]
    pub spike_limit_mib: u64,
    /// Hard limit as a percentage of the memory available to the process
    /// (the cgroup limit when there is one, else the machine's memory).
    #[serde(default, deserialize_with = "lenient_int")]
    pub limit_percentage: u64,
    /// Headroom as a percentage of the same memory.
    #[serde(default, deserialize_with = "lenient_int")]
    pub spike_limit_percentage: u64,
    /// The Collector's Go GC pacing; accepted, no effect (causeway has no GC).
    #[serde(default)]
    pub min_gc_interval_when_soft_limited: Option<Duration>,
    /// Accepted, no effect.
    #[serde(default)]
    pub max_gc_interval_when_soft_limited: Option<Duration>,
    /// Accepted, no effect.
    #[serde(default)]
    pub min_gc_interval_when_hard_limited: Option<Duration>,
    /// Accepted, no effect.
    #[serde(default)]
    pub max_gc_interval_when_hard_limited: Option<Duration>,
}

impl Validate for MemoryLimiterProcessorConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.check_interval.is_none_or(|d| d.get().is_zero()) {
            e.push(ConfigError::new(
                "check_interval",
                "must be more than 0 (the Collector recommends 1s)",
            ));
        }
        if self.limit_mib == 0 && self.limit_percentage == 0 {
            e.push(ConfigError::new(
                "limit_mib",
                "set limit_mib or limit_percentage",
            ));
        }
        if self.limit_mib > 0 {
            if self.spike_limit_mib >= self.limit_mib {
                e.push(ConfigError::new(
                    "spike_limit_mib",
                    "must be less than limit_mib",
                ));
            }
        } else {
            if self.limit_percentage > 100 {
                e.push(ConfigError::new("limit_percentage", "must be at most 100"));
            }
            if self.spike_limit_percentage > 100 {
                e.push(ConfigError::new(
                    "spike_limit_percentage",
                    "must be at most 100",
                ));
            } else if self.limit_percentage > 0
                && self.spike_limit_percentage >= self.limit_percentage
            {
                e.push(ConfigError::new(
                    "spike_limit_percentage",
                    "must be less than limit_percentage",
                ));
            }
        }
        e
    }
}

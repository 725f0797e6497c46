//! `latency`: keep traces lasting at least `threshold_ms` (earliest start
//! to latest end), and at most `upper_threshold_ms` when set. As in the
//! Collector, durations are counted in whole milliseconds, and with an
//! upper bound the lower one is exclusive.

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct Latency;

/// `latency`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LatencyConfig {
    /// Keep traces lasting at least this (earliest start to latest end).
    pub threshold_ms: u64,
    /// And at most this (0: no upper bound).
    #[serde(default)]
    pub upper_threshold_ms: u64,
}

impl Kind for Latency {
    const NAME: &'static str = "latency";
    type Settings = LatencyConfig;
    fn check(s: &LatencyConfig, c: &mut Check<'_>) {
        if s.upper_threshold_ms != 0 && s.upper_threshold_ms < s.threshold_ms {
            c.error("upper_threshold_ms", "must not be less than threshold_ms");
        }
    }
    fn build(s: LatencyConfig, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(s))
    }
}

impl Evaluator for LatencyConfig {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        let ms = t.duration_ns / 1_000_000;
        Decision::keep_if(if self.upper_threshold_ms == 0 {
            ms >= self.threshold_ms
        } else {
            self.threshold_ms < ms && ms <= self.upper_threshold_ms
        })
    }
}

//! `rate_limiting`: keep traces while the spans kept this second stay
//! under `spans_per_second` (strictly, as the Collector counts).

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct RateLimiting;

/// `rate_limiting`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitingConfig {
    /// Spans per second.
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub spans_per_second: u64,
}

struct Budget {
    per_sec: u64,
    second: u64,
    used: u64,
}

impl Kind for RateLimiting {
    const NAME: &'static str = "rate_limiting";
    type Settings = RateLimitingConfig;
    fn check(s: &RateLimitingConfig, c: &mut Check<'_>) {
        if s.spans_per_second == 0 {
            c.error("spans_per_second", "must be at least 1");
        }
    }
    fn build(s: RateLimitingConfig, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(Budget {
            per_sec: s.spans_per_second,
            second: u64::MAX,
            used: 0,
        }))
    }
}

impl Evaluator for Budget {
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        if self.second != now {
            self.second = now;
            self.used = 0;
        }
        let after = self.used + t.span_count as u64;
        if after < self.per_sec {
            self.used = after;
            Decision::Sampled
        } else {
            Decision::NotSampled
        }
    }
}

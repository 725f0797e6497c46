//! `bytes_limiting` (the Collector's, from after v0.140): keep traces while
//! a token bucket of bytes allows, filled at `bytes_per_second` up to
//! `burst_capacity` (default twice the rate). A trace costs its spans'
//! encoded size here; the Collector estimates the size from the fields
//! instead, so the two keep similar volumes, not the same traces. The
//! bucket fills once a second, on the processor's clock.

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct BytesLimiting;

/// `bytes_limiting`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BytesLimitingConfig {
    /// Bytes of kept spans per second.
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub bytes_per_second: u64,
    /// Most bytes kept in a burst (0: twice `bytes_per_second`).
    #[serde(default)]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub burst_capacity: u64,
}

struct Bucket {
    rate: u64,
    capacity: u64,
    tokens: u64,
    filled_at: Option<u64>,
}

impl Kind for BytesLimiting {
    const NAME: &'static str = "bytes_limiting";
    type Settings = BytesLimitingConfig;
    fn check(s: &BytesLimitingConfig, c: &mut Check<'_>) {
        if s.bytes_per_second == 0 {
            c.error("bytes_per_second", "must be at least 1");
        }
        if s.burst_capacity != 0 && s.burst_capacity < s.bytes_per_second {
            c.error("burst_capacity", "must not be less than bytes_per_second");
        }
    }
    fn build(s: BytesLimitingConfig, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        let capacity = if s.burst_capacity == 0 {
            s.bytes_per_second.saturating_mul(2)
        } else {
            s.burst_capacity
        };
        Ok(Box::new(Bucket {
            rate: s.bytes_per_second,
            capacity,
            tokens: capacity,
            filled_at: None,
        }))
    }
}

impl Evaluator for Bucket {
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        if let Some(at) = self.filled_at {
            let refill = now.saturating_sub(at).saturating_mul(self.rate);
            self.tokens = self.tokens.saturating_add(refill).min(self.capacity);
        }
        self.filled_at = Some(now);
        let cost = t.span_bytes as u64;
        if cost <= self.tokens {
            self.tokens -= cost;
            Decision::Sampled
        } else {
            Decision::NotSampled
        }
    }
}

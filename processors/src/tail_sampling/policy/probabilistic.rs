//! `probabilistic`: keep a fixed share of traces, by a hash of the trace id,
//! so that every instance with the same salt keeps the same traces (and the
//! same as the Collector's with that salt).

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct Probabilistic;

/// `probabilistic`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProbabilisticConfig {
    /// Percentage of traces to keep, 0–100.
    pub sampling_percentage: f64,
    /// Salt of the trace-id hash; instances that must agree share it.
    #[serde(default)]
    pub hash_salt: String,
}

/// The salt the Collector's probabilistic policy hashes when `hash_salt` is empty.
pub const COLLECTOR_DEFAULT_SALT: &str = "default-hash-seed";

/// The FNV-1a hash of salt and trace id, as the Collector computes it, so
/// instances with the same salt agree.
pub fn trace_hash(salt: &[u8], trace_id: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in salt.iter().chain(trace_id) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

struct Share {
    threshold: u64,
    salt: Vec<u8>,
    adjusted_count: Option<f64>,
}

impl Kind for Probabilistic {
    const NAME: &'static str = "probabilistic";
    type Settings = ProbabilisticConfig;
    fn check(s: &ProbabilisticConfig, c: &mut Check<'_>) {
        if !(0.0..=100.0).contains(&s.sampling_percentage) {
            c.error("sampling_percentage", "must be between 0 and 100");
        }
    }
    fn build(s: ProbabilisticConfig, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(Share {
            threshold: ((s.sampling_percentage / 100.0) * u64::MAX as f64) as u64,
            // The Collector hashes an empty salt as its default seed
            // (internal/sampling/probabilistic.go): the same config keeps
            // the same traces under either.
            salt: if s.hash_salt.is_empty() {
                COLLECTOR_DEFAULT_SALT.as_bytes().to_vec()
            } else {
                s.hash_salt.into_bytes()
            },
            adjusted_count: (s.sampling_percentage > 0.0).then(|| 100.0 / s.sampling_percentage),
        }))
    }
}

impl Evaluator for Share {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        Decision::keep_if(trace_hash(&self.salt, t.trace_id) <= self.threshold)
    }

    fn adjusted_count(&self) -> Option<f64> {
        self.adjusted_count
    }
}

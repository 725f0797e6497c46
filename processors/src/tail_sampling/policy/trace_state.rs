//! `trace_state`: keep traces with a span whose W3C `tracestate` has `key`
//! equal to one of `values`.

use super::{string_attribute, Check, Evaluator, Keys, Kind};
use serde::Deserialize;

/// The policy type.
pub struct TraceState;

/// `trace_state`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceStateConfig {
    /// The tracestate list-member key.
    pub key: String,
    /// Values matched exactly. As in the Collector, empty values and those
    /// with `key` and value together 256 bytes or longer are left out.
    pub values: Vec<String>,
}

impl TraceStateConfig {
    /// The values that can match.
    pub fn usable_values(&self) -> Vec<String> {
        self.values
            .iter()
            .filter(|v| !v.is_empty() && self.key.len() + v.len() < 256)
            .cloned()
            .collect()
    }
}

impl Kind for TraceState {
    const NAME: &'static str = "trace_state";
    type Settings = TraceStateConfig;
    fn check(s: &TraceStateConfig, c: &mut Check<'_>) {
        if s.key.is_empty() {
            c.error("key", "must not be empty");
        }
        if s.usable_values().is_empty() {
            c.error(
                "values",
                "needs a non-empty value shorter than 256 bytes together with the key",
            );
        }
    }
    fn build(s: TraceStateConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        let values = s.usable_values();
        Ok(Box::new(string_attribute::exact(
            keys.add_trace_state(&s.key),
            values,
        )))
    }
}

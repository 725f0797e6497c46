//! `span_count`: keep traces with at least `min_spans` spans, and at most
//! `max_spans` when set.

use super::{Decision, Evaluator, Keys, Kind, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct SpanCount;

/// `span_count`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SpanCountConfig {
    /// At least this many spans.
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub min_spans: usize,
    /// At most this many (0: no bound).
    #[serde(default)]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub max_spans: usize,
}

impl Kind for SpanCount {
    const NAME: &'static str = "span_count";
    type Settings = SpanCountConfig;
    fn build(s: SpanCountConfig, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(s))
    }
}

impl Evaluator for SpanCountConfig {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        let max = if self.max_spans == 0 {
            usize::MAX
        } else {
            self.max_spans
        };
        Decision::keep_if(t.span_count >= self.min_spans && t.span_count <= max)
    }
}

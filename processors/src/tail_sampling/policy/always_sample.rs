//! `always_sample`: keep every trace.

use super::{Decision, Evaluator, Keys, Kind, Takes, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct AlwaysSample;

/// It takes no settings.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

impl Kind for AlwaysSample {
    const NAME: &'static str = "always_sample";
    const SETTINGS: Takes = Takes::Nothing;
    type Settings = NoSettings;
    fn build(_: NoSettings, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(AlwaysSample))
    }
}

impl Evaluator for AlwaysSample {
    fn evaluate(&mut self, _: &TraceView<'_>, _: u64) -> Decision {
        Decision::Sampled
    }
}

//! `ottl_condition`: the Collector's OTTL conditions, refused with what to
//! write instead (causeway has no OTTL engine).

use super::{Check, Evaluator, Keys, Kind, Takes};

/// The policy type.
pub struct OttlCondition;

const REFUSAL: &str = "the `ottl_condition` policy is not supported: causeway has no OTTL engine. \
     Write the condition as string_attribute, numeric_attribute or boolean_attribute \
     policies (`invert_match: true` for `!=`), status_code or span_count, combined \
     with `and` (all must hold) or inside `drop`";

impl Kind for OttlCondition {
    const NAME: &'static str = "ottl_condition";
    const SETTINGS: Takes = Takes::Optional;
    const SUPPORTED: bool = false;
    /// Read only to report them unsupported.
    type Settings = serde_json::Value;
    fn check(_: &serde_json::Value, c: &mut Check<'_>) {
        c.policy_error("type", REFUSAL);
    }
    fn build(_: serde_json::Value, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Err(REFUSAL.into())
    }
}

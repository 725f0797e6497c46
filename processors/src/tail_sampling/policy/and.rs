//! `and`: keep when every sub-policy accepts (evaluated in order, stopping
//! at the first that does not, as the Collector does).

use super::{
    all_accept, build_all, Check, Decision, Evaluator, Keys, Kind, Policy, PolicyConfig, TraceView,
};
use serde::Deserialize;

/// The policy type.
pub struct And;

/// `and`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AndConfig {
    /// Sub-policies that must all keep.
    pub and_sub_policy: Vec<PolicyConfig>,
}

struct All(Vec<Policy>);

impl Kind for And {
    const NAME: &'static str = "and";
    type Settings = AndConfig;
    fn check(s: &AndConfig, c: &mut Check<'_>) {
        c.sub_policies("and_sub_policy", &s.and_sub_policy);
    }
    fn build(s: AndConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(All(build_all(&s.and_sub_policy, keys)?)))
    }
}

impl Evaluator for All {
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        Decision::keep_if(all_accept(&mut self.0, t, now))
    }
}

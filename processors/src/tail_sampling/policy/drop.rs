//! `drop`: drop the trace, whatever the other policies say, when every
//! sub-policy accepts it.

use super::{
    all_accept, build_all, Check, Decision, Evaluator, Keys, Kind, Policy, PolicyConfig, TraceView,
};
use serde::Deserialize;

/// The policy type.
pub struct Drop;

/// `drop`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DropConfig {
    /// Sub-policies that must all match for the trace to be dropped.
    pub drop_sub_policy: Vec<PolicyConfig>,
}

struct DropIfAll(Vec<Policy>);

impl Kind for Drop {
    const NAME: &'static str = "drop";
    type Settings = DropConfig;
    fn check(s: &DropConfig, c: &mut Check<'_>) {
        c.sub_policies("drop_sub_policy", &s.drop_sub_policy);
    }
    fn build(s: DropConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(DropIfAll(build_all(&s.drop_sub_policy, keys)?)))
    }
}

impl Evaluator for DropIfAll {
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        if all_accept(&mut self.0, t, now) {
            Decision::Drop
        } else {
            Decision::NotSampled
        }
    }
}

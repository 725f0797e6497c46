//! `composite`: sub-policies sharing a spans-per-second budget. As in the
//! Collector: they are asked in the order of `composite_sub_policy`; the
//! first that accepts a trace decides, keeping it while its own allocation
//! (`rate_allocation`, a percentage of `max_total_spans_per_second`; 0
//! means an equal share) and the total allow, else not keeping it; a
//! sub-policy without an allocation keeps nothing. `policy_order` is
//! checked to name sub-policies, and not used otherwise (the Collector
//! ignores it).

use super::{Check, Decision, Evaluator, Keys, Kind, Policy, PolicyConfig, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct Composite;

/// `composite`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompositeConfig {
    /// The budget shared by the sub-policies.
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub max_total_spans_per_second: u64,
    /// Sub-policy names (checked; the Collector does not use it either).
    #[serde(default)]
    pub policy_order: Vec<String>,
    /// The sub-policies, in the order they are asked.
    pub composite_sub_policy: Vec<PolicyConfig>,
    /// Share of the budget each may use; a sub-policy not listed keeps nothing.
    #[serde(default)]
    pub rate_allocation: Vec<RateAllocation>,
}

/// `{policy, percent}`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateAllocation {
    /// Sub-policy name.
    pub policy: String,
    /// Percent of `max_total_spans_per_second` (0: an equal share).
    pub percent: f64,
}

struct Sub {
    policy: Policy,
    allocated: u64,
    used: u64,
}

struct Shared {
    max_total: u64,
    subs: Vec<Sub>,
    second: u64,
    last: Option<usize>,
}

impl Kind for Composite {
    const NAME: &'static str = "composite";
    type Settings = CompositeConfig;
    fn check(s: &CompositeConfig, c: &mut Check<'_>) {
        c.sub_policies("composite_sub_policy", &s.composite_sub_policy);
        let named = |n: &str| s.composite_sub_policy.iter().any(|p| p.name == n);
        for (i, n) in s.policy_order.iter().enumerate() {
            if !named(n) {
                c.error(
                    &format!("policy_order[{i}]"),
                    format!("no sub-policy named {n:?}"),
                );
            }
        }
        for (i, r) in s.rate_allocation.iter().enumerate() {
            if !named(&r.policy) {
                c.error(
                    &format!("rate_allocation[{i}].policy"),
                    format!("no sub-policy named {:?}", r.policy),
                );
            }
        }
        let total: f64 = s.rate_allocation.iter().map(|r| r.percent).sum();
        if total > 100.0 {
            c.error(
                "rate_allocation",
                format!("percentages add up to {total}, more than 100"),
            );
        }
        if s.max_total_spans_per_second == 0 {
            c.error("max_total_spans_per_second", "must be at least 1");
        }
    }
    fn build(s: CompositeConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        let max = s.max_total_spans_per_second as f64;
        let equal = max / s.composite_sub_policy.len().max(1) as f64;
        let mut subs = Vec::new();
        for p in &s.composite_sub_policy {
            // The last allocation of a name wins, as in the Collector's map.
            let allocated = s
                .rate_allocation
                .iter()
                .rev()
                .find(|r| r.policy == p.name)
                .map_or(0.0, |r| {
                    if r.percent > 0.0 {
                        r.percent / 100.0 * max
                    } else {
                        equal
                    }
                });
            subs.push(Sub {
                policy: Policy::build(p, keys)?,
                allocated: allocated as u64,
                used: 0,
            });
        }
        Ok(Box::new(Shared {
            max_total: s.max_total_spans_per_second,
            subs,
            second: u64::MAX,
            last: None,
        }))
    }
}

impl Evaluator for Shared {
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        if self.second != now {
            self.second = now;
            self.subs.iter_mut().for_each(|s| s.used = 0);
        }
        self.last = None;
        let n = t.span_count as u64;
        for (i, sub) in self.subs.iter_mut().enumerate() {
            if !sub.policy.evaluate(t, now).accepts() {
                continue;
            }
            let after = sub.used + n;
            if after <= sub.allocated && after <= self.max_total {
                sub.used = after;
                self.last = Some(i);
                return Decision::Sampled;
            }
            return Decision::NotSampled;
        }
        Decision::NotSampled
    }

    fn decided_by(&self) -> Option<String> {
        let sub = self.subs.get(self.last?)?;
        Some(sub.policy.label())
    }
}

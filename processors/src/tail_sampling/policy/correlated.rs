//! `correlated` (causeway's): keep traces whose surroundings show trouble
//! — their gateway requests, their route, their topics' lag, their hosts'
//! pressure — as a `correlate` processor's state knows them, read through
//! the narrow [`crate::trouble`] interface.

use super::{Decision, Evaluator, Keys, Kind, TraceView};
use crate::tail_sampling::extract::AttrValue;
use crate::trouble::{Published, Trouble, ATTRIBUTES};
use causeway_core::shared::Slot;
use serde::Deserialize;

/// The policy type.
pub struct Correlated;

/// `correlated`: signal-aware sampling.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CorrelatedConfig {
    /// The id of the `correlate` processor whose state is read.
    #[serde(default = "default_correlate")]
    pub processor: String,
    /// Gateway answers that mark a trace's own request as in trouble.
    #[serde(default = "default_trouble_statuses")]
    pub statuses: Vec<i64>,
    /// A route is in trouble when this share of its gateway requests in the
    /// window answered one of `statuses`, or its circuit is not CLOSED.
    #[serde(default = "default_route_ratio")]
    pub route_error_ratio: f64,
    /// A host is in trouble above this CPU busy share…
    #[serde(default = "default_cpu_busy")]
    pub cpu_busy: f64,
    /// …or this iowait share…
    #[serde(default = "default_iowait")]
    pub iowait: f64,
    /// …or this memory used share.
    #[serde(default = "default_memory_used")]
    pub memory_used: f64,
}

fn default_correlate() -> String {
    "correlate".into()
}
fn default_trouble_statuses() -> Vec<i64> {
    vec![429, 503, 504]
}
fn default_route_ratio() -> f64 {
    0.05
}
fn default_cpu_busy() -> f64 {
    0.9
}
fn default_iowait() -> f64 {
    0.2
}
fn default_memory_used() -> f64 {
    0.95
}

struct InTrouble {
    state: Slot<Published>,
    trouble: Trouble,
    /// The attributes the state joins on, with their ids.
    keys: Vec<(&'static str, u16)>,
}

impl Kind for Correlated {
    const NAME: &'static str = "correlated";
    type Settings = CorrelatedConfig;
    fn build(c: CorrelatedConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(InTrouble {
            state: keys.shared.slot(&c.processor),
            trouble: Trouble {
                statuses: c.statuses,
                route_error_ratio: c.route_error_ratio,
                cpu_busy: c.cpu_busy,
                iowait: c.iowait,
                memory_used: c.memory_used,
            },
            keys: ATTRIBUTES.iter().map(|k| (*k, keys.add(k))).collect(),
        }))
    }
}

impl Evaluator for InTrouble {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        let Some(state) = self.state.get() else {
            return Decision::NotSampled;
        };
        let values = |k: &str| -> Vec<&str> {
            self.keys
                .iter()
                .filter(|(name, _)| *name == k)
                .flat_map(|(_, id)| t.values(*id))
                .filter_map(|v| match v {
                    AttrValue::Str(s) => Some(s.as_ref()),
                    _ => None,
                })
                .collect()
        };
        Decision::keep_if(state.in_trouble(t.trace_id, &values, &self.trouble))
    }
}

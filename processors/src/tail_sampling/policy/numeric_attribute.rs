//! `numeric_attribute`: keep traces with a span or resource attribute in
//! `[min_value, max_value]`. Integers compare as the Collector compares
//! them; a double attribute compares by its value here (the Collector reads
//! it as 0).

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use crate::tail_sampling::extract::AttrValue;
use serde::Deserialize;

/// The policy type.
pub struct NumericAttribute;

/// `numeric_attribute`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NumericAttributeConfig {
    /// Attribute key.
    pub key: String,
    /// Lower bound, inclusive.
    #[serde(default)]
    pub min_value: Option<f64>,
    /// Upper bound, inclusive.
    #[serde(default)]
    pub max_value: Option<f64>,
    /// Keep traces that do *not* match.
    #[serde(default)]
    pub invert_match: bool,
}

struct Range {
    key: u16,
    min: f64,
    max: f64,
    invert: bool,
}

impl Kind for NumericAttribute {
    const NAME: &'static str = "numeric_attribute";
    type Settings = NumericAttributeConfig;
    fn check(s: &NumericAttributeConfig, c: &mut Check<'_>) {
        if s.min_value.is_none() && s.max_value.is_none() {
            c.error("", "set min_value and/or max_value");
        }
    }
    fn build(s: NumericAttributeConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(Range {
            key: keys.add(&s.key),
            min: s.min_value.unwrap_or(f64::NEG_INFINITY),
            max: s.max_value.unwrap_or(f64::INFINITY),
            invert: s.invert_match,
        }))
    }
}

impl Evaluator for Range {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        let hit = t.values(self.key).any(|v| {
            let x = match v {
                AttrValue::Int(i) => *i as f64,
                AttrValue::Double(d) => *d,
                _ => return false,
            };
            x >= self.min && x <= self.max
        });
        Decision::matched(hit, self.invert)
    }
}

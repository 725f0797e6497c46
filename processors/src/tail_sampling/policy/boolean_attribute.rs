//! `boolean_attribute`: keep traces with a span or resource attribute equal
//! to `value`.

use super::{Decision, Evaluator, Keys, Kind, TraceView};
use crate::tail_sampling::extract::AttrValue;
use serde::Deserialize;

/// The policy type.
pub struct BooleanAttribute;

/// `boolean_attribute`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BooleanAttributeConfig {
    /// Attribute key.
    pub key: String,
    /// The value to match.
    pub value: bool,
    /// Keep traces that do *not* match.
    #[serde(default)]
    pub invert_match: bool,
}

struct Equals {
    key: u16,
    value: bool,
    invert: bool,
}

impl Kind for BooleanAttribute {
    const NAME: &'static str = "boolean_attribute";
    type Settings = BooleanAttributeConfig;
    fn build(s: BooleanAttributeConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(Equals {
            key: keys.add(&s.key),
            value: s.value,
            invert: s.invert_match,
        }))
    }
}

impl Evaluator for Equals {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        let hit = t
            .values(self.key)
            .any(|v| matches!(v, AttrValue::Bool(b) if *b == self.value));
        Decision::matched(hit, self.invert)
    }
}

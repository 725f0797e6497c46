//! `string_attribute`: keep traces with a span or resource attribute equal
//! to one of `values`, or matching one of them as a regular expression. As
//! in the Collector, a regular expression matches anywhere in the value
//! (anchor it with `^…$` to match the whole).

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use crate::tail_sampling::extract::AttrValue;
use regex::Regex;
use serde::Deserialize;

/// The policy type.
pub struct StringAttribute;

/// `string_attribute`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StringAttributeConfig {
    /// Attribute key (span or resource).
    pub key: String,
    /// Values (or regexes) to match.
    pub values: Vec<String>,
    /// Treat `values` as regular expressions (unanchored, as the Collector's).
    #[serde(default)]
    pub enabled_regex_matching: bool,
    /// Accepted for compatibility (the Collector's cache of regex results;
    /// nothing to size here).
    #[allow(dead_code)]
    #[serde(default)]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub cache_max_size: usize,
    /// Keep traces that do *not* match.
    #[serde(default)]
    pub invert_match: bool,
}

struct Matcher {
    key: u16,
    values: Vec<String>,
    regexes: Vec<Regex>,
    invert: bool,
}

impl Kind for StringAttribute {
    const NAME: &'static str = "string_attribute";
    type Settings = StringAttributeConfig;
    fn check(s: &StringAttributeConfig, c: &mut Check<'_>) {
        if s.enabled_regex_matching {
            for (i, v) in s.values.iter().enumerate() {
                if let Err(x) = Regex::new(v) {
                    c.error(&format!("values[{i}]"), format!("invalid regex: {x}"));
                }
            }
        }
        if s.values.is_empty() {
            c.error("values", "must not be empty");
        }
    }
    fn build(s: StringAttributeConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        let regexes = if s.enabled_regex_matching {
            s.values
                .iter()
                .map(|v| Regex::new(v).map_err(|e| e.to_string()))
                .collect::<Result<_, _>>()?
        } else {
            Vec::new()
        };
        Ok(Box::new(Matcher {
            key: keys.add(&s.key),
            values: s.values,
            regexes,
            invert: s.invert_match,
        }))
    }
}

/// A string-matching evaluator over one key (the `trace_state` policy's too).
pub(super) fn exact(key: u16, values: Vec<String>) -> impl Evaluator {
    Matcher {
        key,
        values,
        regexes: Vec::new(),
        invert: false,
    }
}

impl Evaluator for Matcher {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        let hit = t.values(self.key).any(|v| {
            let AttrValue::Str(s) = v else { return false };
            if self.regexes.is_empty() {
                self.values.iter().any(|x| x.as_str() == &**s)
            } else {
                self.regexes.iter().any(|r| r.is_match(s))
            }
        });
        Decision::matched(hit, self.invert)
    }
}

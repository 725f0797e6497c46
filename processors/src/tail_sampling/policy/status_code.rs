//! `status_code`: keep traces with a span in one of the listed statuses.

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use serde::Deserialize;

/// The policy type.
pub struct StatusCode;

/// `status_code`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusCodeConfig {
    /// `OK`, `ERROR`, `UNSET`.
    pub status_codes: Vec<StatusName>,
}

/// A span status.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
pub enum StatusName {
    /// Unset.
    #[serde(rename = "UNSET")]
    Unset,
    /// Ok.
    #[serde(rename = "OK")]
    Ok,
    /// Error.
    #[serde(rename = "ERROR")]
    Error,
}

struct Statuses {
    error: bool,
    ok: bool,
    unset: bool,
}

/// The evaluator of `always_keep_errors`.
pub(super) fn errors() -> impl Evaluator {
    Statuses {
        error: true,
        ok: false,
        unset: false,
    }
}

impl Kind for StatusCode {
    const NAME: &'static str = "status_code";
    type Settings = StatusCodeConfig;
    fn check(s: &StatusCodeConfig, c: &mut Check<'_>) {
        if s.status_codes.is_empty() {
            c.error("status_codes", "must list at least one of OK, ERROR, UNSET");
        }
    }
    fn build(s: StatusCodeConfig, _: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        Ok(Box::new(Statuses {
            error: s.status_codes.contains(&StatusName::Error),
            ok: s.status_codes.contains(&StatusName::Ok),
            unset: s.status_codes.contains(&StatusName::Unset),
        }))
    }
}

impl Evaluator for Statuses {
    fn evaluate(&mut self, t: &TraceView<'_>, _: u64) -> Decision {
        Decision::keep_if((self.error && t.error) || (self.ok && t.ok) || (self.unset && t.unset))
    }
}

//! The ground floor: what a trace, a finding, a verdict and a piece of
//! evidence are, and the Arrow tables they become. Nothing here knows the
//! state, a source or the processor.

pub mod attributes;
pub mod cause;
pub mod columns;
pub mod finding;
pub mod log;
pub mod series;
pub mod table;
pub mod trace;
pub mod view;

pub use crate::trouble::Trouble;

/// Lock, whatever a panicking holder left.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}
pub use finding::{Finding, RcaEvent, Rule, Verdict};
pub use log::{LogEvidence, Parts};
pub use series::{Key, LatestPoint, Series};
pub use trace::{Hex16, Joined, SpanFacts, SpanRef, SpanRow, TraceRow};

/// `d` in nanoseconds (saturating).
pub(crate) fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Now, in nanoseconds since the Unix epoch.
pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(nanos)
        .unwrap_or(0)
}

//! What the receivers that poll share: their rounds, and how a failed
//! round is counted and logged.

use crate::http_fetch::Failure;

/// The failed collections of a polling receiver: each counted under its
/// reason, each reason logged once until a collection succeeds again.
pub struct Failures {
    telemetry: causeway_core::telemetry::Registry,
    /// The counter's name and help.
    counter: (&'static str, &'static str),
    receiver: String,
    endpoint: String,
    /// What failed, for the log (`NATS collection`).
    what: &'static str,
    /// Said when it answers again (`The monitoring endpoint answers again.`).
    again: &'static str,
    reported: std::collections::HashSet<&'static str>,
}

impl Failures {
    /// The failures of receiver `receiver` reading `endpoint`, counted in
    /// `counter` (name, help).
    pub fn new(
        telemetry: &causeway_core::telemetry::Registry,
        counter: (&'static str, &'static str),
        (receiver, endpoint): (&str, &str),
        what: &'static str,
        again: &'static str,
    ) -> Self {
        Failures {
            telemetry: telemetry.clone(),
            counter,
            receiver: receiver.to_string(),
            endpoint: endpoint.to_string(),
            what,
            again,
            reported: std::collections::HashSet::new(),
        }
    }

    /// Count a failure; log it once per reason until a collection succeeds.
    pub fn failed(&mut self, f: &Failure) {
        self.telemetry
            .counter(
                self.counter.0,
                self.counter.1,
                &[("receiver", &self.receiver), ("reason", f.reason)],
            )
            .add(1);
        if self.reported.insert(f.reason) {
            tracing::warn!(receiver = %self.receiver, endpoint = %self.endpoint, reason = f.reason, error = %f.detail, "{} failed; the next round tries again.", self.what);
        }
    }

    /// A collection succeeded: say so once, if failures were logged.
    pub fn succeeded(&mut self) {
        if !self.reported.is_empty() {
            tracing::info!(receiver = %self.receiver, endpoint = %self.endpoint, "{}", self.again);
            self.reported.clear();
        }
    }
}

/// A polling receiver's rounds: every `period`, a late round delaying the
/// next rather than bunching them.
pub fn rounds(period: std::time::Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick
}

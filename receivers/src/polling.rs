//! What the receivers that poll share: their rounds, and how a failed
//! round is counted and logged.

use crate::http_fetch::Failure;

/// The failed collections of a polling receiver: each counted under its
/// reason, each reason logged once until a collection succeeds again.
pub struct Failures<M> {
    telemetry: causeway_core::telemetry::Registry,
    /// The counter.
    counter: M,
    receiver: String,
    endpoint: String,
    /// What failed, for the log (`NATS collection`).
    what: &'static str,
    /// Said when it answers again (`The monitoring endpoint answers again.`).
    again: &'static str,
    reported: std::collections::HashSet<&'static str>,
}

impl<M: causeway_core::telemetry::Metric> Failures<M> {
    /// The failures of receiver `receiver` reading `endpoint`, counted in
    /// `counter`.
    pub fn new(
        telemetry: &causeway_core::telemetry::Registry,
        counter: M,
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
                self.counter,
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

/// Declares the config of a receiver that polls a broker's HTTP API for
/// its backlog (`nats`, `rabbitmq`): after its own fields (ending with a
/// comma), the keys they share — `tls`, `collection_interval`, `timeout`,
/// `body_size_limit`, `backlog_threshold` and `growth_window` — and
/// `poll_errors()`, their checks with their paths.
macro_rules! poll_config {
    ($(#[$m:meta])* $vis:vis struct $name:ident { $($body:tt)* }) => {
        $(#[$m])*
        $vis struct $name {
            $($body)*
            /// TLS to an `https` endpoint (default: the system's roots).
            #[serde(default)]
            pub tls: causeway_core::tls::ClientTls,
            /// How often the API is read (default 10s, the Collector's).
            #[serde(default = "crate::polling::interval")]
            pub collection_interval: causeway_core::config::Duration,
            /// How long a request may take.
            #[serde(default = "crate::polling::timeout")]
            pub timeout: causeway_core::config::Duration,
            /// The largest answer read (default 64MiB; a bigger one is an error, counted).
            #[serde(default = "crate::polling::body_limit")]
            pub body_size_limit: causeway_core::config::ByteSize,
            /// Backlog (messages not yet delivered, plus for NATS those
            /// delivered and not acknowledged) at or above which the backlog
            /// alarm fires (default 5000, as for Kafka lag: the low end of
            /// the 5,000–10,000 operators alarm at).
            #[serde(default = "crate::polling::backlog_threshold")]
            pub backlog_threshold: f64,
            /// A backlog rising without a decrease for this long fires the alarm too.
            #[serde(default = "crate::polling::growth_window")]
            pub growth_window: causeway_core::config::Duration,
        }

        impl $name {
            /// The shared keys' errors, with their paths.
            pub fn poll_errors(&self) -> Vec<causeway_core::config::ConfigError> {
                use causeway_core::config::ConfigError;
                let mut e = self.tls.errors("tls");
                if self.collection_interval.get() < std::time::Duration::from_millis(100) {
                    e.push(ConfigError::new("collection_interval", "must be at least 100ms"));
                }
                if self.timeout.get().is_zero() {
                    e.push(ConfigError::new("timeout", "must be more than 0"));
                }
                if self.backlog_threshold < 0.0 {
                    e.push(ConfigError::new("backlog_threshold", "must not be negative"));
                }
                e
            }
        }
    };
}
pub(crate) use poll_config;

pub(crate) fn interval() -> causeway_core::config::Duration {
    causeway_core::config::Duration::secs(10)
}
pub(crate) fn timeout() -> causeway_core::config::Duration {
    causeway_core::config::Duration::secs(10)
}
pub(crate) fn body_limit() -> causeway_core::config::ByteSize {
    causeway_core::config::ByteSize(64 << 20)
}
pub(crate) fn backlog_threshold() -> f64 {
    5000.0
}
pub(crate) fn growth_window() -> causeway_core::config::Duration {
    causeway_core::config::Duration::secs(300)
}

/// Send a round's metrics (none: nothing sent); false when the receiver
/// was stopped meanwhile.
pub async fn send_metrics(
    out: &causeway_core::topology::Output,
    rms: Vec<opentelemetry_proto::tonic::metrics::v1::ResourceMetrics>,
    shutdown: &tokio_util::sync::CancellationToken,
) -> bool {
    rms.is_empty()
        || out
            .send_until_stopped(causeway_core::Batch::from_metrics(rms), shutdown)
            .await
}

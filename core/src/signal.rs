//! The signals (traces, logs, metrics and profiles), and sets of them.

use std::fmt;

/// One of the OpenTelemetry signals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// Spans.
    Traces,
    /// Log records.
    Logs,
    /// Metric data points.
    Metrics,
    /// Profiles (OTLP `v1development`): their samples are the items.
    Profiles,
}

impl Signal {
    /// All signals, in a fixed order.
    pub const ALL: [Signal; 4] = [
        Signal::Traces,
        Signal::Logs,
        Signal::Metrics,
        Signal::Profiles,
    ];

    /// The lowercase name used in config and metrics (`traces`, `logs`,
    /// `metrics`, `profiles`).
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Logs => "logs",
            Signal::Metrics => "metrics",
            Signal::Profiles => "profiles",
        }
    }

    /// The name of one item of this signal (`spans`, `log_records`,
    /// `data_points`, `samples`).
    pub fn item_name(self) -> &'static str {
        match self {
            Signal::Traces => "spans",
            Signal::Logs => "log_records",
            Signal::Metrics => "data_points",
            Signal::Profiles => "samples",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Signal::Traces => 1,
            Signal::Logs => 2,
            Signal::Metrics => 4,
            Signal::Profiles => 8,
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of signals (a bitmask).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SignalSet(u8);

impl SignalSet {
    /// No signal.
    pub const NONE: SignalSet = SignalSet(0);
    /// Traces, logs and metrics: what every general component handles.
    pub const ALL: SignalSet = SignalSet(7);
    /// Traces, logs, metrics and profiles: what `all` pipelines carry and
    /// the components that pass profiles on accept.
    pub const WITH_PROFILES: SignalSet = SignalSet(15);

    /// A set with one signal.
    pub fn only(signal: Signal) -> Self {
        SignalSet(signal.bit())
    }

    /// A set of the given signals.
    pub fn of(signals: &[Signal]) -> Self {
        SignalSet(signals.iter().fold(0, |acc, s| acc | s.bit()))
    }

    /// Whether `signal` is in the set.
    pub fn contains(self, signal: Signal) -> bool {
        self.0 & signal.bit() != 0
    }

    /// The signals in both sets.
    pub fn intersect(self, other: SignalSet) -> SignalSet {
        SignalSet(self.0 & other.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The signals in the set, in a fixed order.
    pub fn iter(self) -> impl Iterator<Item = Signal> {
        Signal::ALL.into_iter().filter(move |s| self.contains(*s))
    }
}

impl fmt::Display for SignalSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Signal::as_str).collect();
        write!(f, "[{}]", names.join(", "))
    }
}

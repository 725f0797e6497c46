//! The correlation state: a time window, in bounded memory, of
//! - log records (gateway and application) indexed by `trace_id`
//!   ([`logs::LogWindow`]);
//! - metric series, each under the key the evidence source that keeps it
//!   gave it ([`series::SeriesSet`]): the state knows no source;
//! - the traces analysed already and their producer spans
//!   ([`traces::TraceMemory`]);
//! - the analysed traces' RCA events and counts, for the RCA records, the
//!   counter and the alert rules ([`outbox::Outbox`]);
//! - the analysed traces as the page shows them ([`views::Views`]).
//!
//! Each part has its own lock: taking in logs does not wait on a tick's
//! series lookups, nor the page on either. Arrival order does not matter
//! within the window: everything is kept by its own time and looked up
//! when a trace is analysed.

pub mod logs;
pub mod outbox;
pub mod series;
pub mod traces;
pub mod views;

use std::sync::atomic::{AtomicU64, Ordering};

use super::analysis::baseline::Baselines;
use super::analysis::peers::Peers;
use super::analysis::refusal::Refusals;
use super::analysis::retries::RetryRates;

pub use series::Classify;

/// Limits of the store.
#[derive(Debug, Clone)]
pub struct Limits {
    /// How long evidence is kept (ns).
    pub window_ns: u64,
    /// Log records kept at most (oldest evicted first).
    pub max_log_records: usize,
    /// Bytes of log records kept at most (body + 256 bytes each; oldest evicted first).
    pub max_log_bytes: usize,
    /// Analysed trace ids remembered, so that their late spans are not analysed again.
    pub max_analysed: usize,
    /// Metric series kept at most (least recently updated evicted first).
    pub max_series: usize,
    /// Points per series.
    pub max_points: usize,
    /// Routes with statistics at most.
    pub max_routes: usize,
    /// RCA events waiting to be emitted at most (oldest dropped and counted).
    pub max_events: usize,
    /// The window a latency baseline covers (ns).
    pub baseline_window_ns: u64,
    /// Samples an operation needs before its baseline is used.
    pub baseline_min_samples: u64,
    /// Operations with a baseline at most.
    pub baseline_max_operations: usize,
}

/// The shared correlation state.
pub struct Store {
    limits: Limits,
    /// Per-operation latency baselines.
    pub baselines: Baselines,
    /// The services seen serving each address (callees named by address).
    pub peers: Peers,
    /// Each service's recent failed calls (its own refusals named by them).
    pub refusals: Refusals,
    /// Each target's retries a second (a retry storm is many requests' retries).
    pub retries: RetryRates,
    /// Log records by trace.
    pub logs: logs::LogWindow,
    /// Metric series by key.
    pub series: series::SeriesSet,
    /// Traces analysed already, and their producer spans.
    pub traces: traces::TraceMemory,
    /// RCA events and counts of the analysed traces.
    pub outbox: outbox::Outbox,
    /// The analysed traces as the page shows them.
    pub views: views::Views,
    /// The time of the newest record or point taken in (ns).
    clock: AtomicU64,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("limits", &self.limits)
            .finish()
    }
}

impl Store {
    /// Learn what the calls of `traces` teach, and fill in what was
    /// learned: the addresses services answer at (each client span's
    /// callee), the calls failed or answered (`Refusals`), and the retries
    /// each target received (`RetryRates`). Done as the
    /// spans arrive, whether their trace is analysed now, held or not kept.
    pub fn learn_calls(&self, traces: &mut [super::model::TraceRow]) {
        self.peers.learn_and_fill(traces);
        self.refusals.learn(traces);
        self.retries.learn(traces);
    }

    /// An empty store.
    pub fn new(limits: Limits) -> Self {
        Store {
            baselines: Baselines::new(
                limits.baseline_window_ns,
                limits.baseline_max_operations,
                limits.baseline_min_samples,
            ),
            peers: Peers::new(limits.baseline_max_operations),
            refusals: Refusals::new(limits.baseline_max_operations),
            retries: RetryRates::new(limits.baseline_max_operations),
            logs: logs::LogWindow::new(&limits),
            series: series::SeriesSet::new(&limits),
            traces: traces::TraceMemory::new(&limits),
            outbox: outbox::Outbox::new(&limits),
            views: views::Views::default(),
            clock: AtomicU64::new(0),
            limits,
        }
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The time of the newest record or point taken in (ns).
    pub fn clock(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    /// Move the clock to `now_ns` (never back); the clock after.
    pub fn tick(&self, now_ns: u64) -> u64 {
        self.clock.fetch_max(now_ns, Ordering::Relaxed).max(now_ns)
    }
}

pub(crate) use super::model::lock;

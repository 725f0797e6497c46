//! The analysed traces' RCA events, waiting for the first logs pipeline to
//! emit them; their counts by cause, route and service, for the first
//! metrics pipeline's counter; and the window of them the alert rules read.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::{lock, Limits};
use crate::correlate::model::RcaEvent;

#[derive(Default)]
struct Inner {
    events: VecDeque<RcaEvent>,
    /// Analysed traces of the window, with the time they were analysed (for alert rules).
    recent: VecDeque<(u64, RcaEvent)>,
    counts: BTreeMap<(String, String, String), u64>,
    counts_changed: bool,
    dropped_events: u64,
}

/// The RCA events and counts, bounded.
pub struct Outbox {
    window_ns: u64,
    max_events: usize,
    inner: Mutex<Inner>,
    log_events_owner: AtomicBool,
    metric_events_owner: AtomicBool,
}

impl Outbox {
    /// An empty outbox of the store's limits.
    pub fn new(limits: &Limits) -> Self {
        Outbox {
            window_ns: limits.window_ns,
            max_events: limits.max_events,
            inner: Mutex::new(Inner::default()),
            log_events_owner: AtomicBool::new(false),
            metric_events_owner: AtomicBool::new(false),
        }
    }

    /// Claim the emission of RCA log records (the first logs pipeline does).
    pub fn claim_log_events(&self) -> bool {
        !self.log_events_owner.swap(true, Ordering::SeqCst)
    }

    /// Claim the emission of the RCA counter (the first metrics pipeline does).
    pub fn claim_metric_events(&self) -> bool {
        !self.metric_events_owner.swap(true, Ordering::SeqCst)
    }

    /// Visit the traces analysed since `since_ns` (analysis time), oldest
    /// first, without copying them (the state is locked meanwhile: keep `f` short).
    pub fn visit(&self, since_ns: u64, mut f: impl FnMut(u64, &RcaEvent)) {
        let g = lock(&self.inner);
        for (t, e) in g.recent.iter().filter(|(t, _)| *t >= since_ns) {
            f(*t, e);
        }
    }

    /// Traces analysed since `since_ns` (analysis time), oldest first.
    pub fn recent(&self, since_ns: u64) -> Vec<(u64, RcaEvent)> {
        let g = lock(&self.inner);
        g.recent
            .iter()
            .filter(|(t, _)| *t >= since_ns)
            .cloned()
            .collect()
    }

    /// Record a trace analysed at `now_ns` for the RCA log record, the
    /// counter and the alert rules.
    pub fn push(&self, mut ev: RcaEvent, now_ns: u64) {
        let mut g = lock(&self.inner);
        let horizon = now_ns.saturating_sub(self.window_ns);
        while g
            .recent
            .front()
            .is_some_and(|(t, _)| *t < horizon || g.recent.len() >= self.max_events)
        {
            g.recent.pop_front();
        }
        let extra = std::mem::take(&mut ev.extra);
        g.recent.push_back((now_ns, ev.clone()));
        ev.extra = extra;
        *g.counts
            .entry((ev.cause.clone(), ev.route.clone(), ev.service.clone()))
            .or_default() += 1;
        g.counts_changed = true;
        if self.log_events_owner.load(Ordering::SeqCst) {
            g.events.push_back(ev);
            while g.events.len() > self.max_events {
                g.events.pop_front();
                g.dropped_events += 1;
            }
        }
    }

    /// RCA events waiting to be emitted.
    pub fn take_events(&self) -> Vec<RcaEvent> {
        lock(&self.inner).events.drain(..).collect()
    }

    /// The RCA counter, when it changed since the last call.
    pub fn take_counts(&self) -> Option<BTreeMap<(String, String, String), u64>> {
        let mut g = lock(&self.inner);
        if !g.counts_changed {
            return None;
        }
        g.counts_changed = false;
        Some(g.counts.clone())
    }
}

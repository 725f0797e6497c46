//! The last analysed traces as the page shows them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::lock;
use crate::correlate::model::view::TraceView;

/// A ring of trace views: (capacity, ring).
#[derive(Default)]
pub struct Views {
    ring: Mutex<(usize, VecDeque<Arc<TraceView>>)>,
    ui_owner: AtomicBool,
}

impl Views {
    /// Claim the page's API for this state (the first instance does).
    pub fn claim_ui(&self) -> bool {
        !self.ui_owner.swap(true, Ordering::SeqCst)
    }

    /// Keep the last `n` analysed traces for the page (0: none).
    pub fn keep(&self, n: usize) {
        let mut g = lock(&self.ring);
        g.0 = g.0.max(n);
    }

    /// Whether analysed traces are kept for the page.
    pub fn keeps(&self) -> bool {
        lock(&self.ring).0 > 0
    }

    /// Keep an analysed trace for the page (the oldest leaves beyond the capacity).
    pub fn push(&self, v: TraceView) {
        let mut g = lock(&self.ring);
        if g.0 == 0 {
            return;
        }
        g.1.push_back(Arc::new(v));
        while g.1.len() > g.0 {
            g.1.pop_front();
        }
    }

    /// The kept analysed traces, oldest first.
    pub fn all(&self) -> Vec<Arc<TraceView>> {
        lock(&self.ring).1.iter().cloned().collect()
    }
}

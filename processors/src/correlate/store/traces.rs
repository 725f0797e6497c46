//! The traces analysed already (their late spans are not analysed again)
//! and their producer spans (a consumer span that arrives after its trace
//! was analysed is measured from the span that produced its message).

use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::{lock, Limits};

#[derive(Default)]
struct Inner {
    /// Traces analysed (or held for evidence), with when.
    analysed: HashMap<[u8; 16], u64>,
    analysed_order: VecDeque<(u64, [u8; 16])>,
    late_spans: u64,
    /// Producer spans of analysed traces (trace id, span id), each as a
    /// one-span resource.
    producers: HashMap<([u8; 16], u64), (u64, Arc<ResourceSpans>)>,
    producer_order: VecDeque<(u64, ([u8; 16], u64))>,
}

/// What is remembered of the analysed traces, within the window and
/// `max_analysed`.
pub struct TraceMemory {
    window_ns: u64,
    max_analysed: usize,
    inner: Mutex<Inner>,
}

impl TraceMemory {
    /// An empty memory of the store's limits.
    pub fn new(limits: &Limits) -> Self {
        TraceMemory {
            window_ns: limits.window_ns,
            max_analysed: limits.max_analysed,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Mark traces as analysed at `now_ns`; returns, for each, whether it was
    /// analysed before (its spans are late).
    pub fn mark(&self, ids: &[[u8; 16]], now_ns: u64) -> Vec<bool> {
        let mut g = lock(&self.inner);
        let horizon = now_ns.saturating_sub(self.window_ns);
        while let Some(&(t, id)) = g.analysed_order.front() {
            if t >= horizon && g.analysed_order.len() <= self.max_analysed {
                break;
            }
            g.analysed_order.pop_front();
            if g.analysed.get(&id) == Some(&t) {
                g.analysed.remove(&id);
            }
        }
        ids.iter()
            .map(|id| {
                let before = g.analysed.contains_key(id);
                if !before {
                    g.analysed.insert(*id, now_ns);
                    g.analysed_order.push_back((now_ns, *id));
                }
                before
            })
            .collect()
    }

    /// Remember a producer span of an analysed trace (as a one-span
    /// resource), for as long as the window and `max_analysed` allow.
    pub fn remember_producer(
        &self,
        trace: [u8; 16],
        span_id: u64,
        span: ResourceSpans,
        now_ns: u64,
    ) {
        let mut g = lock(&self.inner);
        let horizon = now_ns.saturating_sub(self.window_ns);
        while let Some(&(t, key)) = g.producer_order.front() {
            if t >= horizon && g.producer_order.len() < self.max_analysed {
                break;
            }
            g.producer_order.pop_front();
            if g.producers.get(&key).is_some_and(|(at, _)| *at == t) {
                g.producers.remove(&key);
            }
        }
        let key = (trace, span_id);
        g.producers.insert(key, (now_ns, Arc::new(span)));
        g.producer_order.push_back((now_ns, key));
    }

    /// The remembered producer span `span_id` of `trace`.
    pub fn producer(&self, trace: &[u8; 16], span_id: u64) -> Option<Arc<ResourceSpans>> {
        let g = lock(&self.inner);
        g.producers.get(&(*trace, span_id)).map(|(_, r)| r.clone())
    }

    /// Count late spans (of traces analysed already); returns the total.
    pub fn count_late(&self, n: u64) -> u64 {
        let mut g = lock(&self.inner);
        g.late_spans += n;
        g.late_spans
    }
}

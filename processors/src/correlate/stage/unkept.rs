//! What the traces a sampler did not keep teach the correlation state
//! (`crate::unkept`): the operations' latency baselines, the targets each
//! operation calls and whether its calls were answered (what tells an open
//! breaker's refusal from an application's own exception), and the
//! addresses the services answer at. Without them, behind a sampler that
//! keeps the slow and the failed, the normal would be learned from the
//! abnormal alone. Within a budget of spans a second; the rest is counted.

use std::sync::{Arc, Mutex};

use causeway_core::telemetry::{Counter, Registry};
use causeway_core::{Batch, Signal};

use crate::correlate::analysis::{self, trace::RouteMap};
use crate::correlate::source::Correlation;

causeway_core::metrics! {
    /// Spans of traces a sampler did not keep, learned from (baselines, calls) or not, by outcome.
    pub UnkeptSpans: counter = "causeway_correlate_unkept_spans_total";
}

/// The learner `correlate` publishes for the samplers before it.
pub struct Learn {
    correlation: Arc<Correlation>,
    route_map: RouteMap,
    per_second: usize,
    /// (the second, spans granted in it).
    budget: Mutex<(u64, usize)>,
    learned: Counter,
    over_budget: Counter,
    bad_input: Counter,
}

impl Learn {
    /// A learner feeding `correlation`, taking at most `per_second` spans a second.
    pub fn new(
        correlation: Arc<Correlation>,
        route_map: RouteMap,
        per_second: usize,
        (telemetry, id): (&Registry, &str),
    ) -> Self {
        let c = |outcome: &str| {
            telemetry.counter(UnkeptSpans, &[("component", id), ("outcome", outcome)])
        };
        Learn {
            correlation,
            route_map,
            per_second,
            budget: Mutex::new((0, 0)),
            learned: c("learned"),
            over_budget: c("over_budget"),
            bad_input: c("bad_input"),
        }
    }
}

impl crate::unkept::Learner for Learn {
    fn wants(&self, spans: usize) -> bool {
        let second = crate::correlate::model::now_ns() / 1_000_000_000;
        let mut b = crate::correlate::model::lock(&self.budget);
        if b.0 != second {
            *b = (second, 0);
        }
        if b.1 + spans > self.per_second {
            self.over_budget.add(spans as u64);
            return false;
        }
        b.1 += spans;
        true
    }

    fn learn(&self, request: bytes::Bytes) {
        let req = match Batch::from_encoded(Signal::Traces, request, 0).to_traces_request() {
            Ok(r) => r,
            Err(e) => {
                self.bad_input.add(1);
                tracing::debug!(error = %e, "Traces not kept could not be read; not learned from.");
                return;
            }
        };
        let mut traces = analysis::trace::traces(&req.resource_spans, None, &self.route_map);
        let store = &self.correlation.store;
        store.learn_calls(&mut traces);
        let mut fed = Vec::new();
        for t in &traces {
            analysis::baseline::samples_of(t, &mut fed);
        }
        store
            .baselines
            .feed(crate::correlate::model::now_ns(), fed.into_iter());
        let spans: usize = traces.iter().map(|t| t.spans.len()).sum();
        self.learned.add(spans as u64);
    }
}

//! Client-side refusals, by what happened rather than by what a library
//! wrote: a span of an operation that calls a target failed fast with no
//! call under it (no client, server or messaging span below it, no pool
//! wait), while that service's recent calls to the target failed. An open
//! circuit breaker, whatever library raised it, does exactly this: it fails
//! the operation before any attempt, after the failures that opened it. The
//! target (the service the breaker guards) is one those failures went to
//! and that the operation is seen calling; when the refusal's own text names
//! one, that one, else the latest.
//!
//! Learned from the traces analysed and from those a sampler did not keep:
//! which targets each operation calls (the operation of the service's
//! topmost span in the trace, its local root), and each service's client
//! calls, failed (not a 4xx: that is the server's answer) or answered, with
//! their end times, the last [`PER_SERVICE`] of each kept; at most `max`
//! services and `max` operations (the ones seen longest ago go first). A
//! fast failure of an operation never seen calling the failed target (a
//! handler's own exception) is no refusal; nor is one after a call of the
//! service reached the target and was answered since its last failure: an
//! open breaker lets nothing through, so calls that still reach the
//! target say the breaker is closed, and the fast failure is the
//! application's own. It knows no evidence source.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::peers::address_of;
use super::shape;
use crate::correlate::model::trace::SpanKind;
use crate::correlate::model::{SpanRow, TraceRow};

/// A refusal takes at most this long (ms): a check of the breaker's state,
/// with the framework around it; an attempt that reached the network has a
/// client span of its own.
pub const REFUSAL_MS: f64 = 50.0;

/// How long a failed call keeps its caller's later refusals explained
/// (ms): the open state of the common breakers (resilience4j and pybreaker
/// 60 s, gobreaker 60 s, opossum 30 s) with room for the half-open probe
/// that fails and opens it again.
pub const WINDOW_MS: f64 = 120_000.0;

/// Failed calls remembered per service, and targets per operation.
pub const PER_SERVICE: usize = 16;

/// Answered calls remembered per service and target (their end times).
pub const ANSWERED: usize = 8;

/// A service and the operation of its local root.
type Op = (Arc<str>, String);

/// A service and a target it calls.
type Pair = (Arc<str>, Arc<str>);

#[derive(Debug, Default)]
struct Inner {
    /// Per service: (end, unix ms; the target) of its failed calls.
    failed: HashMap<Arc<str>, VecDeque<(f64, Arc<str>)>>,
    /// Per service and target: the ends (unix ms) of its latest answered
    /// calls, in end order; at most `max` pairs, the first seen out first.
    answered: HashMap<Pair, VecDeque<f64>>,
    answered_order: VecDeque<Pair>,
    order: VecDeque<Arc<str>>,
    /// Per operation: the targets it was seen calling.
    calls: HashMap<Op, Vec<Arc<str>>>,
    call_order: VecDeque<Op>,
}

/// Each service's recent failed calls.
#[derive(Debug)]
pub struct Refusals {
    inner: Mutex<Inner>,
    max: usize,
}

/// The target a failed call went to: the service that answers it, else
/// its address, else the RPC service it called.
fn target_of(s: &SpanRow) -> Option<Arc<str>> {
    s.callee
        .clone()
        .filter(|c| !c.is_empty())
        .or_else(|| address_of(s).map(Arc::from))
        .or_else(|| s.rpc_service.as_deref().map(Arc::from))
}

/// A span that could be a refusal: it failed, fast, with no call under
/// it, and it is no network attempt itself (a client span that names a
/// target made one).
fn refusal_shaped(s: &SpanRow, calls_below: bool) -> bool {
    let attempt = match s.kind {
        SpanKind::Client => target_of(s).is_some(),
        SpanKind::Producer | SpanKind::Consumer => true,
        _ => false,
    };
    shape::failed(s)
        && !attempt
        && !calls_below
        && !s.client_error
        && s.duration_ms <= REFUSAL_MS
        && !matches!(s.http_status, Some(400..=499))
}

/// Per span of `t`: whether a call (a client, server or messaging span, or
/// a wait for a pooled connection) is below it.
fn calls_below(t: &TraceRow) -> Vec<bool> {
    let mut below = vec![false; t.spans.len()];
    for s in &t.spans {
        if s.kind == SpanKind::Internal && !s.pool_wait {
            continue;
        }
        let mut at = s.parent;
        let mut steps = 0;
        while let Some(p) = at.filter(|_| steps <= t.spans.len()) {
            if below[p] {
                break;
            }
            below[p] = true;
            at = t.spans[p].parent;
            steps += 1;
        }
    }
    below
}

/// The operation of span `i`'s local root: its topmost ancestor in the
/// same service (itself when its parent is another service's).
fn local_op(t: &TraceRow, i: usize) -> Op {
    let service = &t.spans[i].service;
    let mut root = i;
    let mut steps = 0;
    while let Some(p) = t.spans[root].parent.filter(|_| steps <= t.spans.len()) {
        if t.spans[p].service != *service {
            break;
        }
        root = p;
        steps += 1;
    }
    (service.clone(), t.spans[root].op.clone())
}

/// Before `key` joins `map` (first seen, in `order`): the first seen go
/// while `max` are held.
pub(super) fn make_room<K: Clone + Eq + std::hash::Hash, V>(
    map: &mut HashMap<K, V>,
    order: &mut VecDeque<K>,
    max: usize,
    key: &K,
) {
    if map.contains_key(key) {
        return;
    }
    while map.len() >= max {
        match order.pop_front() {
            Some(old) => {
                map.remove(&old);
            }
            None => break,
        }
    }
    order.push_back(key.clone());
}

impl Refusals {
    /// Empty, remembering at most `max` services.
    pub fn new(max: usize) -> Self {
        Refusals {
            inner: Mutex::new(Inner::default()),
            max: max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::correlate::model::lock(&self.inner)
    }

    /// Learn the failed calls of `traces`, then mark each refusal-shaped
    /// span whose service's calls to a target failed before it
    /// (`refused_target`).
    pub fn learn_and_mark(&self, traces: &mut [TraceRow]) {
        self.learn(traces);
        self.mark(traces);
    }

    /// Learn the calls of `traces`: the targets each operation calls, and
    /// each service's calls, failed or answered.
    pub fn learn(&self, traces: &[TraceRow]) {
        let mut g = self.lock();
        for t in traces {
            let base = t.start_unix_ms;
            for (i, s) in t.spans.iter().enumerate() {
                if s.kind != SpanKind::Client {
                    continue;
                }
                let Some(target) = target_of(s).filter(|x| **x != *s.service) else {
                    continue;
                };
                self.seen_calling(&mut g, local_op(t, i), &target);
                if s.client_error {
                    continue;
                }
                if shape::failed(s) {
                    self.put(&mut g, &s.service, base + s.end_ms, target);
                } else {
                    self.answered(&mut g, (s.service.clone(), target), base + s.end_ms);
                }
            }
        }
    }

    /// Mark each refusal-shaped span whose service's last call to a target
    /// its operation calls failed, within [`WINDOW_MS`] before it, with
    /// no answered call to that target since (`refused_target`).
    pub fn mark(&self, traces: &mut [TraceRow]) {
        let g = self.lock();
        for t in traces.iter_mut() {
            let below = calls_below(t);
            let base = t.start_unix_ms;
            for (i, &under) in below.iter().enumerate() {
                let s = &t.spans[i];
                if !refusal_shaped(s, under) {
                    continue;
                }
                let (Some(failed), Some(calls)) =
                    (g.failed.get(&s.service), g.calls.get(&local_op(t, i)))
                else {
                    continue;
                };
                let at = base + s.start_ms;
                // A call of the service that reached the target and was
                // answered after the failure (and before the span) says
                // the breaker let calls through: no refusal.
                let answered_since = |x: &Arc<str>, failed_at: f64| {
                    g.answered
                        .get(&(s.service.clone(), x.clone()))
                        .is_some_and(|q| q.iter().any(|a| *a > failed_at && *a <= at))
                };
                let before: Vec<&Arc<str>> = failed
                    .iter()
                    .filter(|(end, x)| {
                        *end <= at
                            && at - *end <= WINDOW_MS
                            && calls.contains(x)
                            && !answered_since(x, *end)
                    })
                    .map(|(_, x)| x)
                    .collect();
                // The target its own text names, else the latest one.
                let text = format!(
                    "{} {} {} {}",
                    s.name,
                    s.exception_message.as_deref().unwrap_or(""),
                    s.status_message,
                    s.error_type.as_deref().unwrap_or("")
                )
                .to_ascii_lowercase();
                let named = before
                    .iter()
                    .find(|x| text.contains(&x.to_ascii_lowercase()));
                let target = named.or(before.last()).map(|x| (*x).clone());
                t.spans[i].refused_target = target;
            }
        }
    }

    /// Operation `op` was seen calling `target`.
    fn seen_calling(&self, g: &mut Inner, op: Op, target: &Arc<str>) {
        if let Some(targets) = g.calls.get_mut(&op) {
            if !targets.contains(target) {
                if targets.len() >= PER_SERVICE {
                    targets.remove(0);
                }
                targets.push(target.clone());
            }
            return;
        }
        make_room(&mut g.calls, &mut g.call_order, self.max, &op);
        g.calls.insert(op, vec![target.clone()]);
    }

    /// A call of `pair.0` to `pair.1` answered at `end`.
    fn answered(&self, g: &mut Inner, pair: Pair, end: f64) {
        make_room(&mut g.answered, &mut g.answered_order, self.max, &pair);
        let q = g.answered.entry(pair).or_default();
        let at = q.iter().rposition(|e| *e <= end).map_or(0, |p| p + 1);
        q.insert(at, end);
        while q.len() > ANSWERED {
            q.pop_front();
        }
    }

    fn put(&self, g: &mut Inner, service: &Arc<str>, end: f64, target: Arc<str>) {
        make_room(&mut g.failed, &mut g.order, self.max, service);
        let q = g.failed.entry(service.clone()).or_default();
        // Kept in end order: traces arrive roughly in time.
        let at = q.iter().rposition(|(e, _)| *e <= end).map_or(0, |p| p + 1);
        q.insert(at, (end, target));
        while q.len() > PER_SERVICE {
            q.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlate::model::trace::SpanStatus;

    fn span(kind: SpanKind, status: SpanStatus, start: f64, dur: f64) -> SpanRow {
        SpanRow {
            kind,
            status,
            service: "api".into(),
            start_ms: start,
            end_ms: start + dur,
            duration_ms: dur,
            ..Default::default()
        }
    }

    fn trace(at_unix_ms: f64, spans: Vec<SpanRow>) -> TraceRow {
        TraceRow {
            start_unix_ms: at_unix_ms,
            spans,
            ..Default::default()
        }
    }

    #[test]
    fn a_fast_failure_with_nothing_under_it_after_failed_calls_is_refused_by_the_caller() {
        let r = Refusals::new(4);
        // api's calls to pricing failed (nothing answered at the address).
        let mut call = span(SpanKind::Client, SpanStatus::Error, 0.0, 30.0);
        call.server_address = Some("10.0.0.7".into());
        call.server_port = Some(8080);
        call.callee = Some("pricing".into());
        let mut quote = span(SpanKind::Server, SpanStatus::Error, 0.0, 31.0);
        quote.op = "server GET /quote".into();
        let mut first = vec![trace(1_000.0, vec![quote.clone(), call])];
        first[0].spans[1].parent = Some(0);
        r.learn_and_mark(&mut first);
        assert_eq!(
            first[0].spans[0].refused_target, None,
            "it had a call under it"
        );
        // Later, api's quote fails in a millisecond without calling
        // anything (its framework's own spans under it).
        let mut refused = span(SpanKind::Server, SpanStatus::Error, 0.0, 1.0);
        refused.op = quote.op.clone();
        refused.exception_type = Some("CircuitBreakerError".into());
        let mut handler = span(SpanKind::Internal, SpanStatus::Unset, 0.0, 0.5);
        handler.parent = Some(0);
        let mut later = vec![trace(5_000.0, vec![refused.clone(), handler])];
        r.learn_and_mark(&mut later);
        assert_eq!(later[0].spans[0].refused_target.as_deref(), Some("pricing"));
        // The same fast failure of an operation never seen calling pricing
        // (a handler's own exception) is no refusal.
        let mut own = refused.clone();
        own.op = "server GET /fail".into();
        let mut t = vec![trace(5_000.0, vec![own])];
        r.learn_and_mark(&mut t);
        assert_eq!(t[0].spans[0].refused_target, None);
        // Not a refusal: too slow to be one, a 4xx, another service, or
        // long after the failures.
        let mut slow = refused.clone();
        slow.duration_ms = 200.0;
        let mut bad_request = refused.clone();
        bad_request.http_status = Some(400);
        let mut other = refused.clone();
        other.service = "checkout".into();
        let mut not_failed = refused.clone();
        not_failed.status = SpanStatus::Ok;
        not_failed.exception_type = None;
        let mut none = vec![trace(5_000.0, vec![slow, bad_request, other, not_failed])];
        r.learn_and_mark(&mut none);
        assert!(none[0].spans.iter().all(|s| s.refused_target.is_none()));
        let mut much_later = vec![trace(1_000.0 + WINDOW_MS + 100.0, vec![refused.clone()])];
        r.learn_and_mark(&mut much_later);
        assert_eq!(much_later[0].spans[0].refused_target, None);
        // Before the failures: nothing had failed yet.
        let mut earlier = vec![trace(500.0, vec![refused])];
        r.learn_and_mark(&mut earlier);
        assert_eq!(earlier[0].spans[0].refused_target, None);
    }

    #[test]
    fn a_fast_failure_after_the_target_answered_again_is_the_applications_own() {
        let r = Refusals::new(4);
        let call = |status: SpanStatus| {
            let mut c = span(SpanKind::Client, status, 0.0, 30.0);
            c.callee = Some("pricing".into());
            c.parent = Some(0);
            c
        };
        let mut quote = span(SpanKind::Server, SpanStatus::Error, 0.0, 31.0);
        quote.op = "server GET /quote".into();
        // A failed call, then (in a trace a sampler did not keep) one that
        // reached pricing and was answered: no breaker is open.
        r.learn(&[trace(1_000.0, vec![quote.clone(), call(SpanStatus::Error)])]);
        r.learn(&[trace(2_000.0, vec![quote.clone(), call(SpanStatus::Unset)])]);
        let mut exception = span(SpanKind::Internal, SpanStatus::Error, 0.0, 2.0);
        exception.exception_type = Some("java.lang.IllegalStateException".into());
        let mut root = quote.clone();
        root.duration_ms = 3.0;
        exception.parent = Some(0);
        let mut t = vec![trace(3_000.0, vec![root.clone(), exception.clone()])];
        r.learn_and_mark(&mut t);
        assert!(
            t[0].spans.iter().all(|s| s.refused_target.is_none()),
            "pricing answered after its failure: an application exception"
        );
        // Failing again, with nothing answered since: a refusal, however
        // many calls of the service to other targets were answered
        // meanwhile (a busy service).
        r.learn(&[trace(4_000.0, vec![quote.clone(), call(SpanStatus::Error)])]);
        let other: Vec<TraceRow> = (0..200)
            .map(|i| {
                let mut c = call(SpanStatus::Unset);
                c.callee = Some("reservations".into());
                trace(4_001.0 + f64::from(i), vec![quote.clone(), c])
            })
            .collect();
        r.learn(&other);
        let mut t = vec![trace(5_000.0, vec![root, exception])];
        r.learn_and_mark(&mut t);
        assert_eq!(t[0].spans[1].refused_target.as_deref(), Some("pricing"));
    }

    #[test]
    fn the_refusal_names_the_failed_target_its_text_names() {
        let r = Refusals::new(4);
        let failed = |callee: &str, end: f64| {
            let mut c = span(SpanKind::Client, SpanStatus::Error, 0.0, 10.0);
            c.callee = Some(callee.into());
            trace(end, vec![c])
        };
        let mut seen = vec![failed("inventory", 1_000.0), failed("pricing", 2_000.0)];
        r.learn_and_mark(&mut seen);
        let mut refused = span(SpanKind::Internal, SpanStatus::Error, 0.0, 0.5);
        refused.exception_message = Some("Circuit \"Inventory\" OPEN until 12:00".into());
        let mut t = vec![trace(3_000.0, vec![refused.clone()])];
        r.learn_and_mark(&mut t);
        assert_eq!(t[0].spans[0].refused_target.as_deref(), Some("inventory"));
        refused.exception_message = Some("open".into());
        let mut t = vec![trace(3_000.0, vec![refused])];
        r.learn_and_mark(&mut t);
        assert_eq!(t[0].spans[0].refused_target.as_deref(), Some("pricing"));
        // A client span with a target made an attempt: not a refusal.
        let mut attempt = span(SpanKind::Client, SpanStatus::Error, 0.0, 1.0);
        attempt.server_address = Some("10.0.0.9".into());
        let mut t = vec![trace(3_000.0, vec![attempt])];
        r.learn_and_mark(&mut t);
        assert_eq!(t[0].spans[0].refused_target, None);
    }

    #[test]
    fn services_and_failures_are_bounded() {
        let r = Refusals::new(2);
        for (i, svc) in ["a", "b", "c"].iter().enumerate() {
            let mut c = span(SpanKind::Client, SpanStatus::Error, 0.0, 1.0);
            c.service = (*svc).into();
            c.callee = Some("x".into());
            r.learn_and_mark(&mut [trace(i as f64, vec![c])]);
        }
        assert_eq!(r.lock().failed.len(), 2);
        assert!(!r.lock().failed.contains_key("a"));
        let mut many: Vec<TraceRow> = (0..40)
            .map(|i| {
                let mut c = span(SpanKind::Client, SpanStatus::Error, 0.0, 1.0);
                c.callee = Some("x".into());
                trace(f64::from(i), vec![c])
            })
            .collect();
        r.learn_and_mark(&mut many);
        assert_eq!(r.lock().failed["api"].len(), PER_SERVICE);
    }
}

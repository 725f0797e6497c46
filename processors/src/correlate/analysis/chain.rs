//! The failure chain of a trace: the spans a failure passed through, from
//! the response (the root) down to where it began (the error origin), and
//! where along it each span sits.
//!
//! A failure is explained at its origin: what a span closer to the response
//! shows (a gateway's 502, the failing client call of a caller) is a
//! consequence of what happened below it. The attempts of one retried call
//! are one step of the chain: a failure in any of them is the sequence's.

use crate::correlate::model::trace::SpanKind;
use crate::correlate::model::TraceRow;

/// The chain of a failed trace.
#[derive(Debug, Clone, Default)]
pub struct Chain {
    /// Span indices, the root first, the origin last (empty when the trace
    /// did not fail).
    pub spans: Vec<usize>,
    /// The step of each of `spans`: a call's client span and the server
    /// span that answered it are one step (one call seen from both ends).
    pub steps: Vec<usize>,
}

impl Chain {
    /// The chain of `t`: the root down to its error origin (the root alone
    /// when the failure is only in its status, a gateway's answer).
    pub fn of(t: &TraceRow) -> Chain {
        if !t.failed {
            return Chain::default();
        }
        let mut spans = Vec::new();
        let mut at = t.error_origin.or(Some(t.root));
        while let Some(i) = at {
            if spans.len() > t.spans.len() {
                break;
            }
            spans.push(i);
            at = t.spans[i].parent;
        }
        spans.reverse();
        let mut steps = Vec::with_capacity(spans.len());
        for (k, &i) in spans.iter().enumerate() {
            let same_call = k > 0
                && t.spans[i].kind == SpanKind::Server
                && matches!(
                    t.spans[spans[k - 1]].kind,
                    SpanKind::Client | SpanKind::Producer
                );
            // Steps count in twos: a gateway's own answer sits between a call
            // and what it called (`step_of_gateway`).
            let prev = steps.last().copied().unwrap_or(0);
            steps.push(if k == 0 || same_call { prev } else { prev + 2 });
        }
        Chain { spans, steps }
    }

    /// The last step: where the failure began.
    pub fn origin(&self) -> usize {
        self.steps.last().copied().unwrap_or(0)
    }

    /// The deepest span of step `k`.
    pub fn span_at(&self, k: usize) -> Option<usize> {
        self.steps
            .iter()
            .rposition(|&s| s == k)
            .map(|p| self.spans[p])
    }

    /// Where span `s` sits along the chain: the step of its deepest ancestor
    /// (itself included) on the chain, an attempt counting as the step of a
    /// sibling attempt that is on it. 0 (the response) when none is.
    pub fn step_of(&self, t: &TraceRow, s: usize) -> usize {
        self.position(t, s).map_or(0, |p| self.steps[p])
    }

    /// The index in `spans` of span `s`'s deepest ancestor on the chain.
    fn position(&self, t: &TraceRow, s: usize) -> Option<usize> {
        let mut at = Some(s);
        let mut walked = 0;
        while let Some(i) = at {
            if walked > t.spans.len() {
                break;
            }
            if let Some(k) = self.spans.iter().position(|&c| same_attempt(t, c, i)) {
                return Some(k);
            }
            at = t.spans[i].parent;
            walked += 1;
        }
        None
    }

    /// Where a gateway's line about `upstream` sits: just above the server
    /// span of the upstream when it answered (the gateway passed its answer
    /// on), else just below the call made to it (the gateway answered in its
    /// place), else just below the deepest call on the chain no traced
    /// server answered (the call the gateway took), else at the response.
    pub fn step_of_gateway(&self, t: &TraceRow, upstream: Option<&str>) -> usize {
        let named = upstream.and_then(|name| {
            self.spans
                .iter()
                .zip(&self.steps)
                .rev()
                .find_map(|(&i, &k)| {
                    let r = &t.spans[i];
                    if r.kind == SpanKind::Server && *r.service == *name {
                        Some(k.saturating_sub(1))
                    } else if r.kind == SpanKind::Client
                        && (r.callee.as_deref() == Some(name)
                            || r.server_address.as_deref() == Some(name)
                            || super::peers::address_of(r).as_deref() == Some(name))
                    {
                        Some(k + 1)
                    } else {
                        None
                    }
                })
        });
        named
            .or_else(|| {
                // A failed call no traced server answered (a 4xx is not an
                // error origin, so it may hang below the chain).
                (0..t.spans.len())
                    .filter(|&i| {
                        let r = &t.spans[i];
                        r.kind == SpanKind::Client
                            && super::shape::failed(r)
                            && !t
                                .spans
                                .iter()
                                .any(|c| c.parent == Some(i) && c.kind == SpanKind::Server)
                    })
                    .map(|i| self.step_of(t, i) + 1)
                    .max()
            })
            .unwrap_or(0)
    }

    /// Where a gateway's line sits when it names the call it answered (its
    /// `traceparent` is the caller's span `at`): just above that call's
    /// step when a traced server answered the call (the gateway passed the
    /// answer on), else just below it (the gateway answered in its place).
    /// Gateways in layers each sit at their own call.
    pub fn step_of_line(&self, t: &TraceRow, at: usize) -> usize {
        let k = self.step_of(t, at);
        let reached = t
            .spans
            .iter()
            .any(|c| c.parent == Some(at) && c.kind == SpanKind::Server);
        if reached {
            k.saturating_sub(1)
        } else {
            k + 1
        }
    }

    /// Whether span `s` is a retried call (an attempt, or one client span
    /// holding its attempts) on the chain: the failure went through it.
    pub fn through_retries(&self, t: &TraceRow, s: usize) -> bool {
        let r = &t.spans[s];
        (r.attempt.is_some() || r.attempts.is_some_and(|n| n >= 2))
            && self
                .position(t, s)
                .is_some_and(|p| same_attempt(t, self.spans[p], s))
    }
}

/// Whether spans `a` and `b` are the same span or attempts of one retried
/// call (siblings that both carry an attempt number).
pub fn same_attempt(t: &TraceRow, a: usize, b: usize) -> bool {
    let (x, y) = (&t.spans[a], &t.spans[b]);
    a == b || (x.attempt.is_some() && y.attempt.is_some() && x.parent == y.parent)
}

/// A span that failed because its caller gave up on it (a gRPC `CANCELLED`,
/// Go's `context canceled`, an aborted request): a consequence of the
/// caller's timeout, never a failure's origin.
pub fn cancelled(r: &crate::correlate::model::SpanRow) -> bool {
    if r.grpc_status == Some("CANCELLED") {
        return true;
    }
    let says = |x: &str| {
        let x = x.to_ascii_lowercase();
        x.contains("context canceled")
            || x.contains("cancellationexception")
            || x.contains("aborterror")
            || x.starts_with("cancelled")
            || x.starts_with("canceled")
    };
    r.error_type.as_deref().is_some_and(says)
        || r.exception_type.as_deref().is_some_and(says)
        || says(&r.status_message)
}

//! Retries in aggregate: how many retries a second each target receives,
//! from every trace the daemon sees (analysed, held or not kept). One
//! request retrying a flaky callee is the client doing its job, and the
//! cause is what the attempts met; a *storm* is many requests retrying into
//! one target at a rate that multiplies its load (the diagnosis guides:
//! more than 200 retries a second on one target). Each retry span of an
//! analysed trace is given its target's rate around it
//! (`target_retries_per_s`), which the `retry_storm` rule compares with
//! `retry_storm.min_rate`.
//!
//! A retry is a client span that is a later attempt of a retried call (the
//! layout's attempt 2 and on, see `shape`), one carrying
//! `http.request.resend_count` ≥ 1, or, for a client span whose attempts
//! are server spans below it (urllib3's `Retry`, Envoy), each attempt
//! after the first. Counted per target (the address called, else the
//! callee, else the RPC service) in slots of [`SLOT_MS`] by when the retry
//! began; a rate is the retries of the second before a moment, as a client
//! counting its own would see it. At most `max` targets (the ones seen
//! longest ago go) and [`KEPT_S`] seconds each. It knows no evidence
//! source.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use super::peers::address_of;
use crate::correlate::model::trace::SpanKind;
use crate::correlate::model::{SpanRow, TraceRow};

/// Seconds of counts kept per target.
pub const KEPT_S: u64 = 120;

/// The counts' resolution (ms).
pub const SLOT_MS: u64 = 100;

/// Slots in the second a rate counts.
const SLOTS_PER_S: u64 = 1000 / SLOT_MS;

/// How far before a retry its target's rate is looked at (s): a request
/// that began retrying in a storm is caught in it.
pub const LOOKBACK_S: u64 = 5;

/// The target a retry went to, as its count is kept: the address called,
/// else the callee, else the RPC service.
fn key_of(s: &SpanRow) -> Option<Arc<str>> {
    address_of(s)
        .map(Arc::from)
        .or_else(|| s.callee.clone().filter(|c| !c.is_empty()))
        .or_else(|| s.rpc_service.as_deref().map(Arc::from))
}

/// Retries that span `s` stands for: 1 for a later attempt, the attempts
/// after the first for a client span holding server attempts, else 0.
fn retries_of(s: &SpanRow) -> u32 {
    if s.kind != SpanKind::Client {
        return 0;
    }
    match (s.attempt, s.attempts) {
        (Some(k), _) if k >= 2 => 1,
        (Some(_), _) => 0,
        (None, Some(n)) if n >= 2 && s.resend_count.is_none() => {
            u32::try_from(n - 1).unwrap_or(u32::MAX)
        }
        _ => u32::from(s.resend_count.is_some_and(|c| c >= 1)),
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// Per target: (slot, retries begun in it), in slot order.
    counts: HashMap<Arc<str>, VecDeque<(u64, u32)>>,
    order: VecDeque<Arc<str>>,
}

/// Each target's retries a second.
#[derive(Debug)]
pub struct RetryRates {
    inner: Mutex<Inner>,
    max: usize,
}

impl RetryRates {
    /// Empty, counting at most `max` targets.
    pub fn new(max: usize) -> Self {
        RetryRates {
            inner: Mutex::new(Inner::default()),
            max: max.max(1),
        }
    }

    /// Count the retries of `traces` (each span is seen once: as it
    /// arrives, or in a trace a sampler did not keep).
    pub fn learn(&self, traces: &[TraceRow]) {
        let mut g = crate::correlate::model::lock(&self.inner);
        for t in traces {
            for s in &t.spans {
                let n = retries_of(s);
                let Some(key) = (n > 0).then(|| key_of(s)).flatten() else {
                    continue;
                };
                let slot = slot_of(t.start_unix_ms + s.start_ms);
                let g = &mut *g;
                super::refusal::make_room(&mut g.counts, &mut g.order, self.max, &key);
                let q = g.counts.entry(key).or_default();
                add(q, slot, n);
            }
        }
    }

    /// Give each retry span of `traces` its target's rate: the most
    /// retries it received in the second before any moment from
    /// [`LOOKBACK_S`] before the retry began to the retry's end.
    pub fn mark(&self, traces: &mut [TraceRow]) {
        let g = crate::correlate::model::lock(&self.inner);
        for t in traces.iter_mut() {
            let base = t.start_unix_ms;
            for s in t.spans.iter_mut() {
                if retries_of(s) == 0 {
                    continue;
                }
                let Some(q) = key_of(s).and_then(|k| g.counts.get(&k)) else {
                    continue;
                };
                let from = slot_of(base + s.start_ms).saturating_sub(LOOKBACK_S * SLOTS_PER_S);
                let to = slot_of(base + s.end_ms);
                s.target_retries_per_s = Some(f64::from(most_in_a_second(q, from, to)));
            }
        }
    }
}

/// The slot of a moment (unix ms).
fn slot_of(unix_ms: f64) -> u64 {
    (unix_ms.max(0.0) / SLOT_MS as f64) as u64
}

/// The most retries of the second before any slot from `from` to `to`.
fn most_in_a_second(q: &VecDeque<(u64, u32)>, from: u64, to: u64) -> u32 {
    let lo = from.saturating_sub(SLOTS_PER_S - 1);
    let seen: Vec<(u64, u32)> = q
        .iter()
        .copied()
        .filter(|(slot, _)| (lo..=to).contains(slot))
        .collect();
    // A second's count changes only where a slot enters it or leaves it.
    let (mut most, mut sum, mut left) = (0u32, 0u32, 0usize);
    for (i, &(slot, n)) in seen.iter().enumerate() {
        sum = sum.saturating_add(n);
        while seen[left].0 + SLOTS_PER_S <= slot {
            sum -= seen[left].1;
            left += 1;
        }
        // The second before `from` itself: every slot seen before it.
        let last_before = seen.get(i + 1).is_none_or(|x| x.0 >= from);
        if slot >= from || last_before {
            most = most.max(sum);
        }
    }
    most
}

/// Add `n` retries at `slot` to a target's counts, in slot order,
/// dropping the slots older than [`KEPT_S`] before the newest.
fn add(q: &mut VecDeque<(u64, u32)>, slot: u64, n: u32) {
    match q.iter().rposition(|(s, _)| *s <= slot) {
        Some(i) if q[i].0 == slot => q[i].1 = q[i].1.saturating_add(n),
        Some(i) => q.insert(i + 1, (slot, n)),
        None => q.push_front((slot, n)),
    }
    let newest = q.back().map_or(slot, |(s, _)| *s);
    while q
        .front()
        .is_some_and(|(s, _)| *s + KEPT_S * SLOTS_PER_S < newest)
    {
        q.pop_front();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(at_ms: f64, address: &str, attempt: i64) -> SpanRow {
        SpanRow {
            kind: SpanKind::Client,
            attrs: crate::correlate::model::attributes::SpanAttrs {
                server_address: Some(address.into()),
                ..Default::default()
            },
            attempt: Some(attempt),
            attempts: Some(6),
            start_ms: at_ms,
            end_ms: at_ms + 50.0,
            ..SpanRow::default()
        }
    }

    fn trace(start: f64, spans: Vec<SpanRow>) -> TraceRow {
        TraceRow {
            start_unix_ms: start,
            spans,
            ..TraceRow::default()
        }
    }

    #[test]
    fn retries_are_counted_per_target_and_given_to_the_retry_spans() {
        let r = RetryRates::new(4);
        // 300 retries into `supplier` within 300 ms, 3 into `other`.
        let storm: Vec<TraceRow> = (0..300)
            .map(|k| trace(10_000.0 + f64::from(k), vec![retry(0.0, "supplier", 2)]))
            .collect();
        r.learn(&storm);
        r.learn(&[trace(
            10_000.0,
            vec![
                retry(0.0, "other", 1),
                retry(60.0, "other", 2),
                retry(120.0, "other", 3),
                retry(180.0, "other", 4),
            ],
        )]);
        // A later retry into each: the storm's rate is seen 3 s later.
        let mut later = vec![
            trace(13_000.0, vec![retry(0.0, "supplier", 2)]),
            trace(13_000.0, vec![retry(0.0, "other", 2)]),
            trace(13_000.0, vec![retry(0.0, "supplier", 1)]),
        ];
        r.mark(&mut later);
        assert_eq!(later[0].spans[0].target_retries_per_s, Some(300.0));
        assert_eq!(later[1].spans[0].target_retries_per_s, Some(3.0));
        assert_eq!(
            later[2].spans[0].target_retries_per_s, None,
            "a first attempt is no retry"
        );
        // Past the lookback, the storm is over.
        let mut much_later = vec![trace(20_000.0, vec![retry(0.0, "supplier", 2)])];
        r.mark(&mut much_later);
        assert_eq!(much_later[0].spans[0].target_retries_per_s, Some(0.0));
        // A retry that ended before the storm began does not see it.
        let mut before = vec![trace(9_000.0, vec![retry(0.0, "supplier", 2)])];
        r.mark(&mut before);
        assert_eq!(before[0].spans[0].target_retries_per_s, Some(0.0));
    }

    #[test]
    fn a_rate_is_the_retries_of_a_second_not_of_a_calendar_second() {
        // 150 retries late in one second, 150 early in the next: 300 in
        // the second between.
        let mut q = VecDeque::new();
        add(&mut q, 108, 150);
        add(&mut q, 111, 150);
        add(&mut q, 140, 1);
        assert_eq!(most_in_a_second(&q, 100, 130), 300);
        assert_eq!(
            most_in_a_second(&q, 119, 130),
            150,
            "the second before 119 on"
        );
        assert_eq!(most_in_a_second(&q, 125, 145), 1);
        assert_eq!(most_in_a_second(&q, 0, 50), 0);
    }

    #[test]
    fn the_attempts_under_one_client_span_and_resend_counts_are_retries() {
        let holder = SpanRow {
            kind: SpanKind::Client,
            attempts: Some(4),
            ..SpanRow::default()
        };
        assert_eq!(retries_of(&holder), 3);
        let mut resent = SpanRow {
            kind: SpanKind::Client,
            ..SpanRow::default()
        };
        resent.resend_count = Some(2);
        assert_eq!(retries_of(&resent), 1);
        let server = SpanRow {
            kind: SpanKind::Server,
            attempt: Some(3),
            ..SpanRow::default()
        };
        assert_eq!(retries_of(&server), 0, "counted at the client");
    }

    #[test]
    fn targets_and_seconds_are_bounded() {
        let r = RetryRates::new(2);
        for (k, a) in ["a", "b", "c"].iter().enumerate() {
            r.learn(&[trace(1000.0 * k as f64, vec![retry(0.0, a, 2)])]);
        }
        let g = crate::correlate::model::lock(&r.inner);
        assert_eq!(g.counts.len(), 2);
        assert!(!g.counts.contains_key("a"), "the first seen went first");
        drop(g);
        let mut q = VecDeque::new();
        for s in [5, 3, 4, 5, 2000] {
            add(&mut q, s, 1);
        }
        assert_eq!(q, VecDeque::from(vec![(2000, 1)]));
        let mut q = VecDeque::new();
        for s in [5, 3, 4, 5] {
            add(&mut q, s, 1);
        }
        assert_eq!(q, VecDeque::from(vec![(3, 1), (4, 1), (5, 2)]));
    }
}

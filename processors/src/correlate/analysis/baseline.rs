//! Rolling latency baselines per (service, operation): what "slow" means
//! for that operation, so that a dependency that is always 1.5 s is not the
//! cause of a trace that is slow by nature.
//!
//! Each operation keeps two generations of a mergeable quantile sketch (1%
//! accuracy) of its duration; every `window / 2` the
//! older generation is dropped, so the baseline covers the last `window /
//! 2 .. window`. Operations are bounded (`max_operations`); the least
//! recently updated go first. The normal is the median, and a span deviates
//! by its duration beyond `factor` (3) × the median, counted up to its own
//! self time on the critical path: faults stay outliers
//! while they are a minority of an operation's spans; a slowness that
//! lasts becomes the normal within a window. Baselines learn from the
//! traces correlate analyses and, behind a `tail_sampling` processor, from
//! the traces it did not keep (`crate::unkept`, within
//! `baseline.unkept_spans_per_second`): the normal is learned from all the
//! traffic, not from the slow and failed share that is kept.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::correlate::model::trace::{TraceRow, NOT_IN_BATCH, PROMPT_BASELINE};
use crate::sketch::Sketch;

/// What a trace's spans teach the baselines, into `fed`: each span's
/// duration under its operation and, when the operation is not the name,
/// under its name (the coarser baseline used until the operation's own has
/// enough samples); a GenAI call's prompt tokens under its model.
pub fn samples_of<'a>(t: &'a TraceRow, fed: &mut Vec<(&'a str, &'a str, f64)>) {
    for s in t.spans.iter().filter(|s| s.at != NOT_IN_BATCH) {
        fed.push((&s.service, &s.op, s.duration_ms));
        if s.op != s.name {
            fed.push((&s.service, &s.name, s.duration_ms));
        }
        if let Some(tokens) = s.input_tokens {
            let model = s.gen_ai_model.as_deref().unwrap_or("");
            fed.push((PROMPT_BASELINE, model, tokens as f64));
        }
    }
}

#[derive(Debug, Default)]
struct Op {
    old: Sketch,
    cur: Sketch,
    updated: u64,
    /// The normal of both generations, computed once after each change.
    normal: Option<Option<f64>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// By [`key`]: one string, so that a lookup borrows `scratch` instead
    /// of allocating the key.
    ops: HashMap<String, Op, foldhash::fast::RandomState>,
    generation_start: u64,
    /// The key being looked up, written in place.
    scratch: String,
}

/// An operation's key: its service and its name, apart by a NUL (which
/// services' and operations' names do not hold).
fn key<'a>(scratch: &'a mut String, service: &str, op: &str) -> &'a str {
    scratch.clear();
    scratch.push_str(service);
    scratch.push('\0');
    scratch.push_str(op);
    scratch
}

/// A span is slow beyond this many times its operation's normal duration.
pub const SLOW_FACTOR: f64 = 3.0;

/// Baselines of every operation seen.
#[derive(Debug)]
pub struct Baselines {
    inner: Mutex<Inner>,
    half_window_ns: u64,
    max_ops: usize,
    /// Samples an operation needs before its baseline is used.
    pub min_samples: u64,
    /// The quantile that is "normal" (the median: robust while faults are
    /// a minority of an operation's spans).
    pub quantile: f64,
    /// A span is slow beyond `factor` × its normal duration.
    pub factor: f64,
}

impl Baselines {
    /// Empty baselines.
    pub fn new(window_ns: u64, max_ops: usize, min_samples: u64) -> Self {
        Baselines {
            inner: Mutex::new(Inner::default()),
            half_window_ns: (window_ns / 2).max(1),
            max_ops: max_ops.max(1),
            min_samples,
            quantile: 0.5,
            factor: SLOW_FACTOR,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::correlate::model::lock(&self.inner)
    }

    /// The normal duration (ms) of an operation, once it has enough samples.
    pub fn normal(&self, service: &str, op: &str) -> Option<f64> {
        let mut g = self.lock();
        let Inner { ops, scratch, .. } = &mut *g;
        let o = ops.get_mut(key(scratch, service, op))?;
        if o.normal.is_none() {
            let mut s = o.old.clone();
            s.merge(&o.cur);
            o.normal = Some(
                (s.count() >= self.min_samples)
                    .then(|| s.quantile(self.quantile))
                    .flatten(),
            );
        }
        o.normal.flatten()
    }

    /// Feed durations (ms) of operations observed at `now_ns`.
    pub fn feed<'a>(&self, now_ns: u64, samples: impl Iterator<Item = (&'a str, &'a str, f64)>) {
        let mut g = self.lock();
        if now_ns.saturating_sub(g.generation_start) >= self.half_window_ns {
            g.generation_start = now_ns;
            for o in g.ops.values_mut() {
                o.old = std::mem::take(&mut o.cur);
                o.normal = None;
            }
            g.ops.retain(|_, o| o.old.count() > 0);
        }
        let Inner { ops, scratch, .. } = &mut *g;
        for (service, op, v) in samples {
            let k = key(scratch, service, op);
            let add = |o: &mut Op| {
                o.cur.add(v);
                o.updated = now_ns;
                o.normal = None;
            };
            match ops.get_mut(k) {
                Some(o) => add(o),
                None => add(ops.entry(k.to_owned()).or_default()),
            }
        }
        if g.ops.len() > self.max_ops {
            let mut ages: Vec<(u64, String)> =
                g.ops.iter().map(|(k, o)| (o.updated, k.clone())).collect();
            ages.sort_unstable();
            let excess = g.ops.len() - self.max_ops;
            for (_, k) in ages.into_iter().take(excess) {
                g.ops.remove(&k);
            }
        }
    }

    /// Operations held.
    pub fn len(&self) -> usize {
        self.lock().ops.len()
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_baseline_needs_samples_forgets_old_generations_and_stays_bounded() {
        let b = Baselines::new(60_000_000_000, 100, 20);
        let t0 = 1_000_000_000_000u64;
        b.feed(t0, (0..19).map(|_| ("svc", "GET /x", 10.0)));
        assert_eq!(b.normal("svc", "GET /x"), None, "19 samples: not yet");
        b.feed(t0, std::iter::once(("svc", "GET /x", 10.0)));
        let n = b.normal("svc", "GET /x").expect("20 samples");
        assert!((n - 10.0).abs() < 0.2, "{n}");
        // Two half-windows later the old samples are gone.
        b.feed(
            t0 + 31_000_000_000,
            (0..30).map(|_| ("svc", "GET /x", 500.0)),
        );
        b.feed(
            t0 + 62_000_000_000,
            (0..30).map(|_| ("svc", "GET /x", 500.0)),
        );
        let n = b.normal("svc", "GET /x").expect("baseline");
        assert!((n - 500.0).abs() < 10.0, "{n}");
        let names: Vec<String> = (0..1000).map(|i| format!("op{i}")).collect();
        b.feed(
            t0 + 63_000_000_000,
            names.iter().map(|n| ("svc", n.as_str(), 1.0)),
        );
        assert_eq!(b.len(), 100, "bounded, and the newest kept");
    }
}

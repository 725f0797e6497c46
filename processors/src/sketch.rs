//! A mergeable quantile sketch (log-spaced buckets with 1% relative
//! accuracy, as DDSketch) and a rolling window of them.

use std::collections::BTreeMap;

/// Relative accuracy of quantile estimates.
const ALPHA: f64 = 0.01;

/// Counts of values in log-spaced buckets. Two sketches merge by adding counts.
#[derive(Debug, Clone, Default)]
pub struct Sketch {
    buckets: BTreeMap<i32, u64>,
    zeros: u64,
    count: u64,
}

fn gamma_ln() -> f64 {
    ((1.0 + ALPHA) / (1.0 - ALPHA)).ln()
}

impl Sketch {
    /// Add a value (negative values count as zero).
    pub fn add(&mut self, v: f64) {
        self.count += 1;
        if v <= 1e-9 {
            self.zeros += 1;
            return;
        }
        let idx = (v.ln() / gamma_ln()).ceil() as i32;
        *self.buckets.entry(idx).or_insert(0) += 1;
    }

    /// Add another sketch's counts.
    pub fn merge(&mut self, other: &Sketch) {
        self.count += other.count;
        self.zeros += other.zeros;
        for (k, v) in &other.buckets {
            *self.buckets.entry(*k).or_insert(0) += v;
        }
    }

    /// Values added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile, within 1% relative error; `None` when empty.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * (self.count - 1) as f64).floor() as u64;
        if rank < self.zeros {
            return Some(0.0);
        }
        let mut seen = self.zeros;
        for (idx, n) in &self.buckets {
            seen += n;
            if seen > rank {
                // The bucket's representative value: 2γ^i / (γ + 1).
                let g = gamma_ln().exp();
                return Some(2.0 * (f64::from(*idx) * gamma_ln()).exp() / (g + 1.0));
            }
        }
        None
    }
}

/// A sketch over a rolling window, kept as `slots` sub-windows.
#[derive(Debug, Clone)]
pub struct Rolling {
    slots: Vec<(u64, Sketch)>,
    slot_secs: u64,
}

impl Rolling {
    /// A window of `window_secs` in 10 slots.
    pub fn new(window_secs: u64) -> Self {
        let slot_secs = (window_secs / 10).max(1);
        Rolling {
            slots: vec![(u64::MAX, Sketch::default()); 10],
            slot_secs,
        }
    }

    /// Add a value observed at `now_secs`.
    pub fn add(&mut self, now_secs: u64, v: f64) {
        let epoch = now_secs / self.slot_secs;
        let n = self.slots.len() as u64;
        let slot = &mut self.slots[(epoch % n) as usize];
        if slot.0 != epoch {
            *slot = (epoch, Sketch::default());
        }
        slot.1.add(v);
    }

    /// The merged sketch of the slots still inside the window at `now_secs`.
    pub fn merged(&self, now_secs: u64) -> Sketch {
        let epoch = now_secs / self.slot_secs;
        let n = self.slots.len() as u64;
        let mut out = Sketch::default();
        for (e, s) in &self.slots {
            if *e != u64::MAX && *e + n > epoch && *e <= epoch {
                out.merge(s);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_relative_accuracy() {
        let mut s = Sketch::default();
        for i in 1..=10_000 {
            s.add(i as f64);
        }
        for (q, want) in [(0.5, 5000.0), (0.9, 9000.0), (0.99, 9900.0)] {
            let got = s.quantile(q).expect("non-empty");
            assert!((got - want).abs() / want < 0.021, "q{q}: {got} vs {want}");
        }
        let mut a = Sketch::default();
        let mut b = Sketch::default();
        for i in 1..=5000 {
            a.add(i as f64);
            b.add((i + 5000) as f64);
        }
        a.merge(&b);
        let got = a.quantile(0.99).expect("non-empty");
        assert!((got - 9900.0).abs() / 9900.0 < 0.021, "{got}");
    }

    #[test]
    fn old_slots_leave_the_window() {
        let mut r = Rolling::new(100);
        r.add(0, 1000.0);
        r.add(50, 1.0);
        assert_eq!(r.merged(50).count(), 2);
        assert_eq!(r.merged(105).count(), 1, "the first slot left the window");
        assert_eq!(r.merged(500).count(), 0);
    }
}

//! A route's statistics: the recent window as a ring of buckets, and its
//! normal as two generations (each half of `normal_window`) that the
//! buckets leaving the ring enter, unless an incident is open on the route.

use std::collections::{HashMap, VecDeque};

use super::hist::Hist;
use super::sample::Sample;

/// Evidence levels a route keeps at most.
const MAX_LEVELS: usize = 128;

/// Requests of a stretch of time.
#[derive(Debug, Clone, Default)]
pub struct Agg {
    /// Requests (weighted).
    pub n: f64,
    /// Failed requests (weighted).
    pub failed: f64,
    /// Their latencies.
    pub hist: Hist,
    /// Attribute → value → requests.
    pub attrs: HashMap<String, HashMap<String, f64>>,
    /// Evidence level → (sum, samples).
    pub levels: HashMap<String, (f64, f64)>,
}

/// The value a value beyond `max_values` of its attribute counts as.
pub const OTHER: &str = "(other)";

/// Add `w` to `m[k][v]`, `v` counting as [`OTHER`] past `max_values` values.
pub fn count_attr(
    m: &mut HashMap<String, HashMap<String, f64>>,
    k: &str,
    v: &str,
    w: f64,
    max_values: usize,
) {
    let vals = match m.get_mut(k) {
        Some(x) => x,
        None => m.entry(k.to_string()).or_default(),
    };
    if let Some(x) = vals.get_mut(v) {
        *x += w;
    } else if vals.len() < max_values {
        vals.insert(v.to_string(), w);
    } else {
        *vals.entry(OTHER.to_string()).or_default() += w;
    }
}

/// Add a level to `m` (at most [`MAX_LEVELS`] names).
pub fn count_level(m: &mut HashMap<String, (f64, f64)>, k: &str, v: f64, n: f64) {
    if let Some(x) = m.get_mut(k) {
        x.0 += v * n;
        x.1 += n;
    } else if m.len() < MAX_LEVELS {
        m.insert(k.to_string(), (v * n, n));
    }
}

impl Agg {
    /// Count one request.
    pub fn add(&mut self, s: &Sample, max_values: usize, with_detail: bool) {
        self.n += s.weight;
        if s.failed {
            self.failed += s.weight;
        }
        self.hist.add(s.duration_ms, s.weight);
        if with_detail {
            for (k, v) in &s.attrs {
                count_attr(&mut self.attrs, k, v, s.weight, max_values);
            }
            for (k, v) in &s.levels {
                count_level(&mut self.levels, k, *v, 1.0);
            }
        }
    }

    /// Add another's counts.
    pub fn merge(&mut self, o: &Agg, max_values: usize) {
        self.n += o.n;
        self.failed += o.failed;
        self.hist.merge(&o.hist);
        for (k, vals) in &o.attrs {
            for (v, w) in vals {
                count_attr(&mut self.attrs, k, v, *w, max_values);
            }
        }
        for (k, (sum, n)) in &o.levels {
            if let Some(x) = self.levels.get_mut(k) {
                x.0 += sum;
                x.1 += n;
            } else if self.levels.len() < MAX_LEVELS {
                self.levels.insert(k.clone(), (*sum, *n));
            }
        }
    }

    /// Failed share.
    pub fn error_share(&self) -> f64 {
        if self.n > 0.0 {
            self.failed / self.n
        } else {
            0.0
        }
    }
}

/// What a route's normal says.
#[derive(Debug, Clone, Default)]
pub struct Normal {
    /// Requests it covers.
    pub n: f64,
    /// The compared quantile (ms).
    pub q_ms: f64,
    /// p99 (ms).
    pub p99_ms: f64,
    /// Failed share.
    pub error_share: f64,
}

/// A route's statistics.
#[derive(Debug, Default)]
pub struct Route {
    /// (bucket number, its requests), oldest first.
    ring: VecDeque<(u64, Agg)>,
    /// The ring's requests, failures and latencies, kept as buckets come
    /// and go (the evaluation reads one histogram, not one per bucket).
    recent: (f64, f64, Hist),
    /// The normal's generations: (first bucket, requests), older first.
    gens: [(u64, Agg); 2],
    /// The normal, remade when a generation changes.
    pub normal: Option<Normal>,
    /// The last bucket with a request.
    pub last_seen: u64,
    /// It had a normal once (never evicted for room).
    pub established: bool,
}

/// How buckets, windows and the normal relate.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Buckets in the recent window.
    pub recent: u64,
    /// Buckets in a generation of the normal.
    pub generation: u64,
    /// The compared quantile.
    pub quantile: f64,
    /// Requests the normal needs.
    pub min_normal: f64,
    /// Distinct values per attribute.
    pub max_values: usize,
}

impl Route {
    /// Count a request in bucket `b`.
    pub fn add(&mut self, b: u64, s: &Sample, shape: &Shape) {
        self.last_seen = self.last_seen.max(b);
        let added = match self.ring.back_mut() {
            Some((x, agg)) if *x == b => {
                agg.add(s, shape.max_values, true);
                true
            }
            Some((x, _)) if *x > b => {
                match self.ring.iter_mut().rev().find(|(x, _)| *x <= b) {
                    Some((_, agg)) => {
                        agg.add(s, shape.max_values, true);
                        true
                    }
                    // Older than the window: not counted.
                    None => false,
                }
            }
            _ => {
                let mut agg = Agg::default();
                agg.add(s, shape.max_values, true);
                self.ring.push_back((b, agg));
                true
            }
        };
        if added {
            self.recent.0 += s.weight;
            if s.failed {
                self.recent.1 += s.weight;
            }
            self.recent.2.add(s.duration_ms, s.weight);
        }
    }

    /// Move the buckets that left the recent window (at bucket `now`) into
    /// the normal, or drop them while `frozen` (an incident is open).
    pub fn rotate(&mut self, now: u64, frozen: bool, shape: &Shape) {
        let mut changed = false;
        while let Some((b, _)) = self.ring.front() {
            if *b + shape.recent > now {
                break;
            }
            let Some((b, agg)) = self.ring.pop_front() else {
                break;
            };
            if self.ring.is_empty() {
                self.recent.0 = 0.0;
                self.recent.1 = 0.0;
                self.recent.2.clear();
            } else {
                self.recent.0 = (self.recent.0 - agg.n).max(0.0);
                self.recent.1 = (self.recent.1 - agg.failed).max(0.0);
                self.recent.2.sub(&agg.hist);
            }
            if frozen {
                continue;
            }
            if b >= self.gens[1].0 + shape.generation {
                // A new generation: the older one goes.
                self.gens[0] = std::mem::take(&mut self.gens[1]);
                self.gens[1].0 = b;
            }
            self.gens[1].1.merge(&agg, shape.max_values);
            changed = true;
        }
        // A generation older than the normal window goes even with no traffic.
        if self.gens[0].1.n > 0.0 && self.gens[0].0 + 2 * shape.generation + shape.recent <= now {
            self.gens[0] = Default::default();
            changed = true;
        }
        if changed {
            // The numbers only: the attribute values and levels are merged
            // when an incident opens (`detail`), not at every bucket.
            let (g0, g1) = (&self.gens[0].1, &self.gens[1].1);
            let n = g0.n + g1.n;
            let mut hist = g0.hist.clone();
            hist.merge(&g1.hist);
            self.normal = (n >= shape.min_normal).then(|| Normal {
                n,
                q_ms: hist.quantile(shape.quantile).unwrap_or(0.0),
                p99_ms: hist.quantile(0.99).unwrap_or(0.0),
                error_share: (g0.failed + g1.failed) / n,
            });
            self.established |= self.normal.is_some();
        }
    }

    /// The normal's attribute values and evidence levels.
    pub fn detail(&self, max_values: usize) -> Agg {
        let mut agg = self.gens[0].1.clone();
        agg.merge(&self.gens[1].1, max_values);
        agg
    }

    /// The recent window's requests and failures.
    pub fn recent_counts(&self) -> (f64, f64) {
        (self.recent.0, self.recent.1)
    }

    /// The recent window's latencies.
    pub fn recent_hist(&self) -> &Hist {
        &self.recent.2
    }

    /// Those of the recent window's buckets from bucket `from` on.
    pub fn recent_since(&self, from: u64) -> (f64, f64, Hist) {
        let mut h = Hist::default();
        let (mut n, mut f) = (0.0, 0.0);
        for (_, a) in self.ring.iter().filter(|(b, _)| *b >= from) {
            n += a.n;
            f += a.failed;
            h.merge(&a.hist);
        }
        (n, f, h)
    }
}

//! One incident: what it was opened against (the route's normal, frozen
//! then, or an SLO), what its requests have shown since it began, and its
//! explanation: causes with their shares, discriminators, what moved.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

use super::hist::Hist;
use super::route::{count_attr, count_level, Agg, Normal, OTHER};
use super::sample::Sample;
use super::slo::Burn;
use crate::correlate::model::cause::UNKNOWN;

/// An incident, as kept (and persisted while open).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Incident {
    /// Its id.
    pub id: String,
    /// The route.
    pub route: String,
    /// When it was opened (ns).
    pub opened_ns: u64,
    /// When its first slow or failed request started (ns).
    pub started_ns: u64,
    /// When its first slow or failed request was analysed (ns).
    pub first_seen_ns: u64,
    /// When it was last written (ns).
    pub written_ns: u64,
    /// When it resolved (ns).
    pub resolved_ns: Option<u64>,
    /// The `severity` label it was opened with.
    pub severity: String,
    /// The dominant cause when it opened (the alert's `cause` label).
    pub opening_cause: String,
    /// What opened it: `latency`, `errors`, `slo`.
    pub reasons: Vec<String>,
    /// The compared quantile (0.95).
    pub quantile: f64,
    /// The discriminating attributes in their configured order (ties go to the first).
    pub attr_order: Vec<String>,
    /// The normal's compared quantile (ms) when it opened (0: none).
    pub normal_q_ms: f64,
    /// The normal's p99 (ms).
    pub normal_p99_ms: f64,
    /// The normal's failed share.
    pub normal_error_share: f64,
    /// Requests the normal covered.
    pub normal_n: f64,
    /// A request at least this slow (ms) counts as slow in it.
    pub slow_ms: f64,
    /// The latest burn, when an SLO opened it or burned while it was open.
    pub burn: Option<BurnState>,
    /// Requests since it began (weighted).
    pub n: f64,
    /// Failed ones.
    pub failed: f64,
    /// Slow or failed ones.
    pub bad: f64,
    /// Their latencies.
    pub hist: Hist,
    /// (cause, culprit service, culprit kind, where) → slow or failed requests.
    pub causes: Vec<(CauseKey, f64)>,
    /// Attribute → value → slow or failed requests.
    pub bad_attrs: HashMap<String, HashMap<String, f64>>,
    /// Attribute → value → requests of the normal, when it opened.
    pub normal_attrs: HashMap<String, HashMap<String, f64>>,
    /// Evidence level → (sum, samples) before it (the normal's).
    pub before: HashMap<String, (f64, f64)>,
    /// Evidence level → (sum, samples) of its slow or failed requests.
    pub during: HashMap<String, (f64, f64)>,
    /// (failed, ms, trace id) of the worst requests.
    pub exemplars: Vec<(bool, f64, String)>,
}

/// A cause as an incident counts it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct CauseKey {
    /// The cause.
    pub cause: String,
    /// The culprit service.
    pub culprit_service: String,
    /// The culprit's kind.
    pub culprit_kind: String,
    /// The service the culprit span is in.
    pub at_service: String,
}

/// An SLO burn as an incident keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BurnState {
    /// The SLO.
    pub slo: String,
    /// Its burn rate.
    pub burn_rate: f64,
    /// The budget left.
    pub budget_left: f64,
    /// The severity of the window that fired.
    pub severity: String,
}

impl From<&Burn> for BurnState {
    fn from(b: &Burn) -> Self {
        BurnState {
            slo: b.slo.clone(),
            burn_rate: b.burn_rate,
            budget_left: b.budget_left,
            severity: b.severity.clone(),
        }
    }
}

/// A cause's share of an incident.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CauseShare {
    /// The cause.
    pub cause: String,
    /// Share of the slow or failed requests.
    pub share: f64,
    /// Slow or failed requests (weighted).
    pub requests: f64,
    /// The culprit service.
    pub culprit_service: String,
    /// Its kind.
    pub culprit_kind: String,
    /// The service it happened in.
    pub at_service: String,
}

/// An attribute value that sets the slow or failed requests apart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Discriminator {
    /// The attribute.
    pub attribute: String,
    /// Its value.
    pub value: String,
    /// Share of the incident's slow or failed requests with it.
    pub share_in: f64,
    /// Share of the route's normal traffic with it.
    pub share_out: f64,
    /// `share_in ÷ share_out` (the latter smoothed by half a request).
    pub lift: f64,
}

/// An evidence level that moved with the incident.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Moved {
    /// The level (`dependency redis 127.0.0.1:6379 miss_ratio`).
    pub series: String,
    /// Its mean before the incident (over the route's normal traffic).
    pub before: f64,
    /// Its mean over the incident's slow or failed requests.
    pub during: f64,
}

/// An incident's explanation.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// Causes, the dominant first.
    pub causes: Vec<CauseShare>,
    /// Discriminators, the strongest first.
    pub discriminators: Vec<Discriminator>,
    /// What moved, the most first.
    pub moved: Vec<Moved>,
    /// Worst trace ids first.
    pub exemplars: Vec<String>,
    /// p99 since it began (ms).
    pub p99_ms: f64,
    /// The compared quantile since it began (ms).
    pub q_ms: f64,
    /// Failed share since it began.
    pub error_share: f64,
}

/// Discriminators and levels reported at most.
const TOP: usize = 5;
/// Levels of one thing listed as moved before other things' are.
const PER_THING: usize = 2;
/// A discriminator covers at least this share of the slow or failed requests.
const MIN_SHARE_IN: f64 = 0.25;
/// And is at least this much more frequent among them than in normal traffic.
const MIN_LIFT: f64 = 1.5;
/// A level moved when it changed by at least this fraction of the larger of its two means.
const MIN_MOVE: f64 = 0.25;

impl Incident {
    /// A new incident against `normal` (or none: an SLO opened it).
    pub fn open(
        route: &str,
        now_ns: u64,
        normal: Option<(&Normal, Agg)>,
        slow_ms: f64,
    ) -> Incident {
        let mut i = Incident {
            id: String::new(),
            route: route.to_string(),
            opened_ns: now_ns,
            started_ns: now_ns,
            first_seen_ns: now_ns,
            written_ns: 0,
            slow_ms,
            ..Default::default()
        };
        if let Some((n, detail)) = normal {
            i.normal_q_ms = n.q_ms;
            i.normal_p99_ms = n.p99_ms;
            i.normal_error_share = n.error_share;
            i.normal_n = n.n;
            i.normal_attrs = detail.attrs;
            i.before = detail.levels;
        }
        i
    }

    /// Whether a request counts as slow or failed in it.
    pub fn is_bad(&self, s: &Sample) -> bool {
        s.failed || s.duration_ms >= self.slow_ms
    }

    /// Count a request of its route.
    pub fn add(&mut self, s: &Sample, max_values: usize, exemplars: usize) {
        self.n += s.weight;
        if s.failed {
            self.failed += s.weight;
        }
        self.hist.add(s.duration_ms, s.weight);
        if !self.is_bad(s) {
            return;
        }
        // The levels that came with the slow or failed requests (an
        // incident stays open a while after its fault ends: the levels of
        // its healthy requests then would water the move down).
        for (k, v) in &s.levels {
            count_level(&mut self.during, k, *v, 1.0);
        }
        self.bad += s.weight;
        self.started_ns = self.started_ns.min(s.start_ns.max(1));
        self.first_seen_ns = self.first_seen_ns.min(s.time_ns.max(1));
        let key = CauseKey {
            cause: s.cause.clone(),
            culprit_service: s.culprit_service.clone(),
            culprit_kind: s.culprit_kind.clone(),
            at_service: s.at_service.clone(),
        };
        // Bounded: the cause vocabulary is fixed; culprits beyond 64 pairs count as the last.
        let full = self.causes.len() >= 64;
        match self.causes.iter().position(|(k, _)| *k == key) {
            Some(at) => self.causes[at].1 += s.weight,
            None if !full => self.causes.push((key, s.weight)),
            None => {
                if let Some((_, w)) = self.causes.last_mut() {
                    *w += s.weight;
                }
            }
        }
        for (k, v) in &s.attrs {
            count_attr(&mut self.bad_attrs, k, v, s.weight, max_values);
        }
        let e = (s.failed, s.duration_ms, s.trace_id.clone());
        self.exemplars.push(e);
        self.exemplars.sort_by(|a, b| {
            (b.0, b.1)
                .partial_cmp(&(a.0, a.1))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        self.exemplars.truncate(exemplars);
    }

    /// Its explanation now.
    pub fn explain(&self) -> Explanation {
        Explanation {
            causes: self.cause_shares(),
            discriminators: self.discriminators(),
            moved: self.moved(),
            exemplars: self.exemplars.iter().map(|e| e.2.clone()).collect(),
            p99_ms: self.hist.quantile(0.99).unwrap_or(0.0),
            q_ms: self.hist.quantile(self.quantile).unwrap_or(0.0),
            error_share: if self.n > 0.0 {
                self.failed / self.n
            } else {
                0.0
            },
        }
    }

    /// Its causes, by the requests each explains (most first).
    fn cause_shares(&self) -> Vec<CauseShare> {
        let mut causes: Vec<CauseShare> = self
            .causes
            .iter()
            .map(|(k, w)| CauseShare {
                cause: k.cause.clone(),
                share: if self.bad > 0.0 { w / self.bad } else { 0.0 },
                requests: *w,
                culprit_service: k.culprit_service.clone(),
                culprit_kind: k.culprit_kind.clone(),
                at_service: k.at_service.clone(),
            })
            .collect();
        causes.sort_by(|a, b| {
            b.requests
                .partial_cmp(&a.requests)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.cause.cmp(&b.cause))
        });
        causes
    }

    /// The attribute values far more common among its requests than in the
    /// route's normal (at most `TOP`).
    fn discriminators(&self) -> Vec<Discriminator> {
        let mut discriminators = Vec::new();
        if self.bad > 0.0 {
            for (k, vals) in &self.bad_attrs {
                for (v, w) in vals.iter().filter(|(v, _)| v.as_str() != OTHER) {
                    let share_in = w / self.bad;
                    let out = self
                        .normal_attrs
                        .get(k)
                        .and_then(|m| m.get(v))
                        .copied()
                        .unwrap_or(0.0);
                    let share_out = if self.normal_n > 0.0 {
                        out / self.normal_n
                    } else {
                        0.0
                    };
                    let lift = share_in / ((out + 0.5) / (self.normal_n + 1.0));
                    if share_in >= MIN_SHARE_IN && lift >= MIN_LIFT {
                        discriminators.push(Discriminator {
                            attribute: k.clone(),
                            value: v.clone(),
                            share_in,
                            share_out,
                            lift,
                        });
                    }
                }
            }
        }
        // Ranked by lift within a factor of two, then by share within five
        // points: two attributes that set apart the same requests (a
        // version and the address of the pods running it) tie even when a
        // few requests lost the spans that carry one of them, and the one
        // listed first in `attributes` comes first.
        let rank = |k: &str| {
            self.attr_order
                .iter()
                .position(|x| x == k)
                .unwrap_or(usize::MAX)
        };
        let coarse = |d: &Discriminator| {
            (
                std::cmp::Reverse(d.lift.max(1.0).log2().floor() as i64),
                std::cmp::Reverse((d.share_in * 20.0).round() as i64),
                rank(&d.attribute),
            )
        };
        discriminators.sort_by(|a, b| {
            coarse(a)
                .cmp(&coarse(b))
                .then(
                    b.lift
                        .partial_cmp(&a.lift)
                        .unwrap_or(std::cmp::Ordering::Equal),
                )
                .then_with(|| (&a.attribute, &a.value).cmp(&(&b.attribute, &b.value)))
        });
        discriminators.truncate(TOP);
        discriminators
    }

    /// The series that moved most between before and during it (at most `TOP`).
    fn moved(&self) -> Vec<Moved> {
        let mut moved: Vec<(f64, Moved)> = self
            .during
            .iter()
            .filter_map(|(k, (sum, n))| {
                // A function the service's normal samples never had: none
                // of its time then.
                let absent = k
                    .split_once(super::sample::FUNCTION)
                    .and_then(|(family, _)| {
                        let prefix = format!("{family}{}", super::sample::FUNCTION);
                        self.before
                            .keys()
                            .any(|b| b.starts_with(&prefix))
                            .then_some((0.0, 1.0))
                    });
                let (bs, bn) = self.before.get(k).copied().or(absent)?;
                let (bs, bn) = (&bs, &bn);
                if *n <= 0.0 || *bn <= 0.0 {
                    return None;
                }
                let (before, during) = (bs / bn, sum / n);
                let scale = before.abs().max(during.abs());
                let score = if scale > 0.0 {
                    (during - before).abs() / scale
                } else {
                    0.0
                };
                (score >= MIN_MOVE).then(|| {
                    (
                        score,
                        Moved {
                            series: k.clone(),
                            before,
                            during,
                        },
                    )
                })
            })
            .collect();
        let by_score = |a: &(f64, Moved), b: &(f64, Moved)| {
            b.0.partial_cmp(&a.0)
                .unwrap_or(std::cmp::Ordering::Equal)
                .then_with(|| a.1.series.cmp(&b.1.series))
        };
        moved.sort_by(by_score);
        // At most `PER_THING` levels of one thing (a host, a dependency's
        // address, a function) until every thing that moved is listed:
        // five of a host's near-idle levels falling to zero must not hide
        // a dependency that moved with the incident.
        let mut listed: HashMap<&str, usize> = HashMap::new();
        let (first, rest): (Vec<_>, Vec<_>) = moved.iter().partition(|(_, m)| {
            let thing = m
                .series
                .rsplit_once(' ')
                .map_or(m.series.as_str(), |(t, _)| t);
            let n = listed.entry(thing).or_default();
            *n += 1;
            *n <= PER_THING
        });
        let mut top: Vec<(f64, Moved)> = first.into_iter().chain(rest).take(TOP).cloned().collect();
        top.sort_by(by_score);
        top.into_iter().map(|(_, m)| m).collect()
    }

    /// The one-line summary.
    pub fn summary(&self, e: &Explanation) -> String {
        let mut out = self.route.clone();
        let q = format!("p{}", (self.quantile * 100.0).round() as i64);
        if self.normal_n > 0.0 && q != "p99" {
            // The compared quantile first: what opened it.
            out.push_str(&format!(
                " {q} {} (normal {}),",
                duration(e.q_ms),
                duration(self.normal_q_ms)
            ));
        }
        out.push_str(&format!(" p99 {}", duration(e.p99_ms)));
        if self.normal_n > 0.0 {
            out.push_str(&format!(" (normal {})", duration(self.normal_p99_ms)));
        }
        if e.error_share > 0.0 || self.reasons.iter().any(|r| r == "errors") {
            out.push_str(&format!(
                ", {}% failed (normal {}%)",
                pct(e.error_share),
                pct(self.normal_error_share)
            ));
        }
        out.push_str(&format!(" since {}", clock(self.started_ns)));
        if let Some(b) = &self.burn {
            out.push_str(&format!(
                "; SLO {} burning {:.1}× its budget ({}% left)",
                b.slo,
                b.burn_rate,
                pct(b.budget_left)
            ));
        }
        if let Some(c) = e.causes.first() {
            out.push_str(&format!("; {}% {}", pct(c.share), c.cause));
            if !c.at_service.is_empty() {
                out.push_str(&format!(" in {}", c.at_service));
            }
            if !c.culprit_service.is_empty() && c.culprit_service != c.at_service {
                out.push_str(&format!(
                    " (culprit {} {})",
                    c.culprit_service, c.culprit_kind
                ));
            }
        }
        if let Some(d) = e.discriminators.first() {
            out.push_str(&format!(
                "; {}% of the slow or failed requests come from {}={} ({}% of normal traffic)",
                pct(d.share_in),
                d.attribute,
                d.value,
                pct(d.share_out)
            ));
        }
        if let Some(m) = e.moved.first() {
            out.push_str(&format!(
                "; {} {} → {}",
                m.series,
                level(m.before),
                level(m.during)
            ));
        }
        out
    }

    /// The dominant cause, or `unknown`.
    pub fn cause(&self, e: &Explanation) -> String {
        e.causes
            .first()
            .map_or_else(|| UNKNOWN.name.to_string(), |c| c.cause.clone())
    }
}

fn pct(x: f64) -> String {
    format!("{}", (x * 100.0).round() as i64)
}

fn level(x: f64) -> String {
    if x.abs() >= 100.0 || x == x.trunc() {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

/// `120 ms`, `2.8 s`.
pub fn duration(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{} ms", ms.round() as i64)
    }
}

/// `14:05:09` (UTC).
fn clock(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    format!("{:02}:{:02}:{:02}Z", (s / 3600) % 24, (s / 60) % 60, s % 60)
}

/// Causes by name (for tests and the page).
pub fn by_cause(e: &Explanation) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for c in &e.causes {
        *m.entry(c.cause.clone()).or_default() += c.share;
    }
    m
}

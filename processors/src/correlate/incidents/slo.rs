//! SLOs and their multi-window, multi-burn-rate alerts (the Google SRE
//! workbook, chapter 5): a window fires when the burn rate — the bad share
//! over the window divided by the budget share (1 − objective) — is at
//! least its rate over both its long and its short window.
//!
//! Good and bad requests are counted in fine buckets (a fifth of the
//! shortest short window, at least 1 s) over the longest long window, and
//! in hourly buckets over the period (for the budget left).

use std::collections::VecDeque;

use super::config::SloConfig;
use super::sample::Sample;

/// How one SLO stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Burn {
    /// The SLO's name.
    pub slo: String,
    /// The burn rate over the firing window's long window.
    pub burn_rate: f64,
    /// The firing window's severity.
    pub severity: String,
    /// The share of the error budget left over the period (may be below 0).
    pub budget_left: f64,
    /// The latency bound (ms), if any.
    pub latency_ms: Option<f64>,
}

/// One SLO's counts.
#[derive(Debug)]
pub struct Slo {
    /// Its configuration.
    pub cfg: SloConfig,
    fine_ns: u64,
    fine: VecDeque<(u64, f64, f64)>,
    coarse: VecDeque<(u64, f64, f64)>,
    longest_ns: u64,
}

const HOUR_NS: u64 = 3_600_000_000_000;

fn ns(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Slo {
    /// An SLO with nothing counted.
    pub fn new(cfg: SloConfig) -> Self {
        let shortest = cfg
            .windows
            .iter()
            .map(|w| ns(w.short.get()))
            .min()
            .unwrap_or(60_000_000_000);
        let longest_ns = cfg
            .windows
            .iter()
            .map(|w| ns(w.long.get()))
            .max()
            .unwrap_or(0);
        Slo {
            fine_ns: (shortest / 5).max(1_000_000_000),
            fine: VecDeque::new(),
            coarse: VecDeque::new(),
            longest_ns,
            cfg,
        }
    }

    /// Whether a request is bad by this SLO.
    pub fn bad(&self, s: &Sample) -> bool {
        s.failed
            || self
                .cfg
                .latency
                .is_some_and(|l| s.duration_ms >= l.get().as_secs_f64() * 1000.0)
    }

    /// Count a request of its route.
    pub fn add(&mut self, s: &Sample) {
        let bad = if self.bad(s) { s.weight } else { 0.0 };
        for (q, size) in [(&mut self.fine, self.fine_ns), (&mut self.coarse, HOUR_NS)] {
            let b = s.time_ns / size * size;
            match q.back_mut() {
                Some(last) if last.0 == b => {
                    last.1 += s.weight;
                    last.2 += bad;
                }
                Some(last) if last.0 > b => {
                    // Older than the newest bucket: into the one it belongs to.
                    if let Some(x) = q.iter_mut().rev().find(|x| x.0 <= b) {
                        x.1 += s.weight;
                        x.2 += bad;
                    }
                }
                _ => q.push_back((b, s.weight, bad)),
            }
        }
    }

    /// Forget what is older than any window needs.
    pub fn expire(&mut self, now_ns: u64) {
        let keep = now_ns.saturating_sub(self.longest_ns + self.fine_ns);
        while self.fine.front().is_some_and(|x| x.0 < keep) {
            self.fine.pop_front();
        }
        let keep = now_ns.saturating_sub(ns(self.cfg.period.get()) + HOUR_NS);
        while self.coarse.front().is_some_and(|x| x.0 < keep) {
            self.coarse.pop_front();
        }
    }

    fn budget(&self) -> f64 {
        1.0 - self.cfg.objective / 100.0
    }

    /// The burn rate over the last `window_ns` (`None`: no requests).
    pub fn burn_rate(&self, now_ns: u64, window_ns: u64) -> Option<f64> {
        let from = now_ns.saturating_sub(window_ns);
        let (n, bad) = self
            .fine
            .iter()
            .filter(|x| x.0 + self.fine_ns > from)
            .fold((0.0, 0.0), |(n, b), x| (n + x.1, b + x.2));
        (n > 0.0).then(|| bad / n / self.budget())
    }

    /// The error budget left over the period (1: untouched).
    pub fn budget_left(&self, now_ns: u64) -> f64 {
        let from = now_ns.saturating_sub(ns(self.cfg.period.get()));
        let (n, bad) = self
            .coarse
            .iter()
            .filter(|x| x.0 + HOUR_NS > from)
            .fold((0.0, 0.0), |(n, b), x| (n + x.1, b + x.2));
        if n <= 0.0 {
            return 1.0;
        }
        1.0 - bad / (n * self.budget())
    }

    /// The first of its windows that fires, most severe first (in the
    /// configured order), if any.
    pub fn firing(&self, now_ns: u64) -> Option<Burn> {
        self.cfg.windows.iter().find_map(|w| {
            let long = self.fires(now_ns, w)?;
            Some(Burn {
                slo: self.cfg.name.clone(),
                burn_rate: long,
                severity: w.severity.clone(),
                budget_left: self.budget_left(now_ns),
                latency_ms: self.cfg.latency.map(|l| l.get().as_secs_f64() * 1000.0),
            })
        })
    }

    /// The long window's burn rate when `w` fires.
    pub fn fires(&self, now_ns: u64, w: &super::config::BurnWindow) -> Option<f64> {
        let long = self.burn_rate(now_ns, ns(w.long.get()))?;
        let short = self.burn_rate(now_ns, ns(w.short.get()))?;
        (long >= w.burn_rate && short >= w.burn_rate).then_some(long)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlate::incidents::config::{burn_windows, BurnWindow};
    use causeway_core::config::Duration;

    fn slo(windows: Vec<BurnWindow>) -> Slo {
        Slo::new(SloConfig {
            name: "checkout-availability".into(),
            route: "checkout".into(),
            latency: Some(Duration::millis(300)),
            objective: 99.5,
            period: Duration::secs(30 * 86_400),
            windows,
        })
    }

    fn at(s: u64, ms: f64, failed: bool) -> Sample {
        Sample {
            time_ns: s * 1_000_000_000,
            route: "checkout".into(),
            duration_ms: ms,
            failed,
            weight: 1.0,
            ..Default::default()
        }
    }

    #[test]
    fn the_workbook_page_fires_at_14_4_times_over_both_windows_and_stops_with_the_short_one() {
        let mut s = slo(burn_windows());
        let t0 = 10 * 86_400;
        // An hour at 0.1% bad: burn 0.2, nothing fires.
        for i in 0..3600u64 {
            s.add(&at(t0 + i, if i % 1000 == 0 { 900.0 } else { 50.0 }, false));
        }
        let now = (t0 + 3600) * 1_000_000_000;
        assert!(s.firing(now).is_none());
        assert!(s.burn_rate(now, 3_600_000_000_000).unwrap() < 1.0);
        // Then 10 minutes at 50% bad (slow or failed): the 1 h burn is
        // (3.6 + 300) / 4200 / 0.005 ≈ 14.5 ≥ 14.4 and the 5 m burn 100.
        for i in 0..600u64 {
            s.add(&at(t0 + 3600 + i, 50.0, i % 2 == 0));
        }
        let now = (t0 + 4200) * 1_000_000_000;
        let b = s.firing(now).expect("the page window fires");
        assert_eq!(b.severity, "page");
        assert!(b.burn_rate >= 14.4, "{b:?}");
        assert!(
            b.budget_left < 0.0,
            "300 bad of 4200 at 99.5% is past the budget: {b:?}"
        );
        // The burn stops: once its short window is clean, the 14.4× window
        // stops though its long window still burns; the 6× one (30 m short
        // window) still fires, as the workbook means it to.
        for i in 0..400u64 {
            s.add(&at(t0 + 4200 + i, 50.0, false));
        }
        let now = (t0 + 4600) * 1_000_000_000;
        let windows = burn_windows();
        assert!(s.burn_rate(now, 3_600_000_000_000).unwrap() >= 14.4);
        assert_eq!(s.burn_rate(now, 300_000_000_000), Some(0.0));
        assert_eq!(s.fires(now, &windows[0]), None);
        assert!(s.fires(now, &windows[1]).is_some());
        assert!(s.fires(now, &windows[2]).is_some());
    }

    #[test]
    fn shrunk_windows_fire_and_expire() {
        let w = BurnWindow {
            severity: "page".into(),
            burn_rate: 14.4,
            long: Duration::secs(20),
            short: Duration::secs(5),
        };
        let mut s = slo(vec![w]);
        for i in 0..20u64 {
            s.add(&at(100 + i, 900.0, false));
        }
        assert!(s.firing(120 * 1_000_000_000).is_some());
        s.expire(1000 * 1_000_000_000);
        assert!(s.firing(1000 * 1_000_000_000).is_none());
        assert_eq!(s.burn_rate(1000 * 1_000_000_000, 20_000_000_000), None);
    }
}

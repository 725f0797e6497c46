//! Time lag, Burrow status, lag alarm and retry storms, from samples.

use std::collections::VecDeque;

/// Burrow's status codes (`kafka.consumer_group.status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Not enough samples yet.
    NotFound = 0,
    /// Keeping up.
    Ok = 1,
    /// Offsets advance but lag does not come down.
    Warn = 2,
    /// The group: a partition is STOP, STALL or REWIND.
    Err = 3,
    /// No progress for longer than the window's own span, with lag.
    Stop = 4,
    /// Members are there and committing, but the offset does not move, with lag.
    Stall = 5,
    /// The committed offset went back.
    Rewind = 6,
}

impl Status {
    /// Upper-case name.
    pub fn name(self) -> &'static str {
        match self {
            Status::NotFound => "NOTFOUND",
            Status::Ok => "OK",
            Status::Warn => "WARN",
            Status::Err => "ERR",
            Status::Stop => "STOP",
            Status::Stall => "STALL",
            Status::Rewind => "REWIND",
        }
    }

    /// How bad, for taking the worst of several.
    fn severity(self) -> u8 {
        match self {
            Status::NotFound => 0,
            Status::Ok => 1,
            Status::Warn => 2,
            Status::Stall => 3,
            Status::Rewind => 4,
            Status::Stop => 5,
            Status::Err => 6,
        }
    }
}

/// A group's status: the worst of its partitions, STOP/STALL/REWIND counting as ERR.
pub fn group_status(partitions: impl IntoIterator<Item = Status>) -> Status {
    let worst = partitions
        .into_iter()
        .max_by_key(|s| s.severity())
        .unwrap_or(Status::NotFound);
    match worst {
        Status::Stop | Status::Stall | Status::Rewind => Status::Err,
        s => s,
    }
}

/// High-water marks of a partition over time, to estimate when an offset was produced.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    points: VecDeque<(i64, f64)>,
    cap: usize,
}

impl Timeline {
    /// A timeline of at most `cap` points (kafka-lag-exporter keeps 60).
    pub fn new(cap: usize) -> Self {
        Timeline {
            points: VecDeque::new(),
            cap: cap.max(2),
        }
    }

    /// Record the latest offset at `t` (seconds). Equal offsets only move the last point's time.
    pub fn add(&mut self, latest: i64, t: f64) {
        if let Some(last) = self.points.back_mut() {
            if last.0 == latest {
                // Keep the first time an offset was the latest; it is when it was produced.
                return;
            }
            if latest < last.0 {
                // Topic recreated or truncated: start again.
                self.points.clear();
            }
        }
        self.points.push_back((latest, t));
        while self.points.len() > self.cap {
            self.points.pop_front();
        }
    }

    /// Age at `now` of the oldest unconsumed message (offset `committed`): 0
    /// when caught up. The message existed once the high-water mark passed
    /// it (reached `committed + 1`); between two samples that time is
    /// interpolated. A message older than the first sample was produced at
    /// or before it: its age is at least `now − first sample`, and that lower
    /// bound is what is reported. Extrapolating backwards from the first two
    /// samples (as kafka-lag-exporter does) overstates it by the whole idle
    /// time of a quiet topic: 24–30 s for a message that waited 3 s.
    pub fn lag_seconds(&self, committed: i64, now: f64) -> Option<f64> {
        let last = *self.points.back()?;
        if committed >= last.0 {
            return Some(0.0);
        }
        let first = *self.points.front()?;
        let target = committed.saturating_add(1);
        let produced_at = if target <= first.0 {
            first.1
        } else {
            let pts: Vec<(i64, f64)> = self.points.iter().copied().collect();
            pts.windows(2)
                .find(|w| target > w[0].0 && target <= w[1].0)
                .map_or(last.1, |w| interpolate(w[0], w[1], target))
        };
        Some((now - produced_at).max(0.0))
    }
}

fn interpolate(a: (i64, f64), b: (i64, f64), x: i64) -> f64 {
    if b.0 == a.0 {
        return a.1;
    }
    a.1 + (b.1 - a.1) * ((x - a.0) as f64 / (b.0 - a.0) as f64)
}

/// One sample of a partition of a group.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When (seconds).
    pub t: f64,
    /// Committed offset.
    pub committed: i64,
    /// Lag in messages.
    pub lag: i64,
}

/// Burrow's sliding-window evaluation of one partition, on samples the
/// receiver takes itself every interval, so a consumer that stopped is seen
/// without waiting for its next commit.
#[derive(Debug, Clone)]
pub struct Window {
    samples: VecDeque<Sample>,
    size: usize,
    /// When the committed offset last changed, and the first such time in the window.
    changes: VecDeque<f64>,
}

impl Window {
    /// A window of `size` samples (Burrow's `intervals`, default 10).
    pub fn new(size: usize) -> Self {
        Window {
            samples: VecDeque::new(),
            size: size.max(2),
            changes: VecDeque::new(),
        }
    }

    /// Add a sample.
    pub fn add(&mut self, s: Sample) {
        let changed = self
            .samples
            .back()
            .is_none_or(|p| p.committed != s.committed);
        if changed {
            self.changes.push_back(s.t);
        }
        self.samples.push_back(s);
        while self.samples.len() > self.size {
            self.samples.pop_front();
        }
        let oldest = self.samples.front().map_or(s.t, |f| f.t);
        while self.changes.len() > 1 && self.changes.get(1).is_some_and(|t| *t <= oldest) {
            self.changes.pop_front();
        }
    }

    /// The latest sample.
    pub fn last(&self) -> Option<&Sample> {
        self.samples.back()
    }

    /// Burrow's status. `allowed_lag`: lag at or below it counts as caught up.
    /// `has_members`: whether the group has members (None: unknown); with
    /// members a non-moving offset is STALL, without it is STOP.
    pub fn status(&self, now: f64, allowed_lag: i64, has_members: Option<bool>) -> Status {
        if self.samples.len() < self.size {
            return Status::NotFound;
        }
        let Some(last) = self.samples.back() else {
            return Status::NotFound;
        };
        if last.lag <= allowed_lag {
            return Status::Ok;
        }
        let s: Vec<&Sample> = self.samples.iter().collect();
        // Rule 1 comes first, as in Burrow: caught up at some point in the
        // window is OK. A quiet topic whose consumer is one message behind
        // between a produce and its commit is not stopped (it read STOP when
        // the window held a single commit: a span of 0 s).
        if s.iter().any(|x| x.lag <= allowed_lag) {
            return Status::Ok;
        }
        // REWIND: the offset went back within the window and did not recover.
        for w in s.windows(2) {
            if w[1].committed < w[0].committed && last.committed < w[0].committed {
                return Status::Rewind;
            }
        }
        // No progress at all in the window, with lag: STALL when members are
        // there (committing the same offset), STOP otherwise.
        let moved = s.windows(2).any(|w| w[1].committed != w[0].committed);
        if !moved {
            return if has_members == Some(true) {
                Status::Stall
            } else {
                Status::Stop
            };
        }
        // STOP: the time since the last progress is longer than the span over
        // which progress was seen (Burrow's rule on commit times).
        let first_change = self.changes.front().copied().unwrap_or(s[0].t);
        let last_change = self.changes.back().copied().unwrap_or(s[0].t);
        if now - last_change > last_change - first_change {
            return Status::Stop;
        }
        // WARN: offsets advance but lag never decreases. As in Burrow, lag is
        // compared at the commits (the first sample of each committed offset):
        // a sample taken between a burst of production and the next commit
        // is not a decrease when the commit brings the lag down a little.
        let at_commits: Vec<i64> = s
            .iter()
            .enumerate()
            .filter(|(i, x)| *i == 0 || s[i - 1].committed != x.committed)
            .map(|(_, x)| x.lag)
            .collect();
        let never_down = at_commits.windows(2).all(|w| w[1] >= w[0]);
        if at_commits.len() >= 2 && never_down && at_commits.last() > at_commits.first() {
            return Status::Warn;
        }
        Status::Ok
    }
}

/// The lag alarm SREs use: lag above a threshold, or lag growing for a whole window.
#[derive(Debug, Clone)]
pub struct LagAlarm {
    threshold: i64,
    growth_window: f64,
    /// Since when the lag has been growing (not decreasing), if it is.
    growing_since: Option<f64>,
    last_lag: Option<i64>,
}

impl LagAlarm {
    /// Alarm above `threshold` messages or after `growth_window` seconds of growth.
    pub fn new(threshold: i64, growth_window: f64) -> Self {
        LagAlarm {
            threshold,
            growth_window,
            growing_since: None,
            last_lag: None,
        }
    }

    /// Feed the current lag; returns whether the alarm is on.
    pub fn update(&mut self, lag: i64, t: f64) -> bool {
        match self.last_lag {
            Some(prev) if lag > prev => {
                self.growing_since.get_or_insert(t);
            }
            Some(prev) if lag < prev => self.growing_since = None,
            None => {}
            _ => {}
        }
        if lag == 0 {
            self.growing_since = None;
        }
        self.last_lag = Some(lag);
        lag > self.threshold
            || self
                .growing_since
                .is_some_and(|s| t - s >= self.growth_window)
    }
}

/// Produce rate of a topic from high-water-mark deltas, and the retry-storm verdict.
#[derive(Debug, Clone, Default)]
pub struct ProduceRate {
    last: Option<(i64, f64)>,
    rate: f64,
}

impl ProduceRate {
    /// Feed the sum of a topic's high-water marks at `t`; returns messages per second.
    pub fn update(&mut self, total_latest: i64, t: f64) -> f64 {
        if let Some((prev, pt)) = self.last {
            if t > pt {
                self.rate = if total_latest >= prev {
                    (total_latest - prev) as f64 / (t - pt)
                } else {
                    0.0
                };
            }
        }
        self.last = Some((total_latest, t));
        self.rate
    }
}

/// Whether a topic is in a retry storm: it is a retry/DLQ topic and its produce rate is above the threshold.
pub fn retry_storm(topic: &str, rate: f64, retry_topics: &regex::Regex, threshold: f64) -> bool {
    retry_topics.is_match(topic) && rate > threshold
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(samples: &[(f64, i64, i64)]) -> Window {
        let mut w = Window::new(samples.len());
        for (t, committed, lag) in samples {
            w.add(Sample {
                t: *t,
                committed: *committed,
                lag: *lag,
            });
        }
        w
    }

    #[test]
    fn burrow_statuses() {
        // Keeping up: lag returns to 0.
        let w = window(&[(0.0, 0, 5), (10.0, 10, 0), (20.0, 20, 3), (30.0, 30, 2)]);
        assert_eq!(w.status(30.0, 0, Some(true)), Status::Ok);
        // Progress but lag never comes down: WARN.
        let w = window(&[(0.0, 0, 10), (10.0, 10, 20), (20.0, 20, 30), (30.0, 30, 40)]);
        assert_eq!(w.status(30.0, 0, Some(true)), Status::Warn);
        // Sampled between production and the next commit: lag dips at each
        // commit but grows commit over commit: still WARN.
        let w = window(&[
            (0.0, 10, 40),
            (10.0, 10, 90),
            (20.0, 20, 80),
            (30.0, 20, 130),
            (40.0, 30, 120),
        ]);
        assert_eq!(w.status(40.0, 0, Some(true)), Status::Warn);
        // Lag at the commits comes down: OK.
        let w = window(&[
            (0.0, 10, 90),
            (10.0, 20, 60),
            (20.0, 30, 70),
            (30.0, 40, 50),
        ]);
        assert_eq!(w.status(30.0, 0, Some(true)), Status::Ok);
        // No progress at all with lag: STOP without members, STALL with.
        let w = window(&[
            (0.0, 50, 10),
            (10.0, 50, 20),
            (20.0, 50, 30),
            (30.0, 50, 40),
        ]);
        assert_eq!(w.status(30.0, 0, None), Status::Stop);
        assert_eq!(w.status(30.0, 0, Some(true)), Status::Stall);
        // Progress stopped a while ago (longer than the span it moved over): STOP.
        let w = window(&[
            (0.0, 0, 10),
            (10.0, 10, 10),
            (20.0, 10, 20),
            (30.0, 10, 30),
            (40.0, 10, 40),
        ]);
        assert_eq!(w.status(40.0, 0, None), Status::Stop);
        // The offset went back: REWIND.
        let w = window(&[
            (0.0, 100, 10),
            (10.0, 110, 10),
            (20.0, 50, 70),
            (30.0, 60, 70),
        ]);
        assert_eq!(w.status(30.0, 0, Some(true)), Status::Rewind);
        // Not enough samples.
        let mut w = Window::new(10);
        w.add(Sample {
            t: 0.0,
            committed: 0,
            lag: 100,
        });
        assert_eq!(w.status(0.0, 0, None), Status::NotFound);
        assert_eq!(group_status([Status::Ok, Status::Warn]), Status::Warn);
        assert_eq!(group_status([Status::Ok, Status::Stall]), Status::Err);
        assert_eq!(Status::Rewind as i32, 6);
    }

    #[test]
    fn a_quiet_topic_one_message_behind_between_commits_is_ok_not_stopped() {
        // A message a minute, consumed within 3 s, sampled every 15 s: the
        // committed offset does not move for four samples (nothing to read),
        // and the last sample falls between a produce and its commit (lag 1).
        let mut w = Window::new(5);
        for (i, lag) in [0, 0, 0, 0, 1].iter().enumerate() {
            w.add(Sample {
                t: 15.0 * i as f64,
                committed: 100,
                lag: *lag,
            });
        }
        assert_eq!(w.status(60.0, 0, Some(true)), Status::Ok, "not STALL");
        assert_eq!(w.status(60.0, 0, Some(false)), Status::Ok, "not STOP");
        // Behind for the whole window, not moving: STALL with members.
        let mut w = Window::new(5);
        for i in 0..5 {
            w.add(Sample {
                t: 15.0 * f64::from(i),
                committed: 100,
                lag: 1,
            });
        }
        assert_eq!(w.status(60.0, 0, Some(true)), Status::Stall);
    }

    #[test]
    fn time_lag_is_interpolated_and_extrapolated() {
        let mut tl = Timeline::new(60);
        tl.add(100, 10.0);
        tl.add(200, 20.0);
        tl.add(400, 30.0);
        assert_eq!(tl.lag_seconds(400, 35.0), Some(0.0), "caught up");
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        assert!(
            close(tl.lag_seconds(149, 35.0), 20.0),
            "offset 149 existed once the high-water mark reached 150, at 15 s"
        );
        assert!(
            close(tl.lag_seconds(299, 35.0), 10.0),
            "offset 299 existed at 25 s"
        );
        assert!(
            close(tl.lag_seconds(399, 35.0), 5.0),
            "one message behind: produced by the last sample, at 30 s at the latest"
        );
        assert!(
            close(tl.lag_seconds(50, 35.0), 25.0),
            "older than the first sample: at least 25 s old, never extrapolated past it"
        );
        tl.add(400, 40.0);
        assert!(
            close(tl.lag_seconds(299, 45.0), 20.0),
            "a repeated high-water mark keeps its first time"
        );
        // A quiet topic: one message every 15 s, consumed within 3 s. Never 24–30 s.
        let mut q = Timeline::new(60);
        q.add(1000, 0.0);
        q.add(1001, 15.0);
        q.add(1002, 30.0);
        assert!(
            close(q.lag_seconds(1001, 32.0), 2.0),
            "{:?}",
            q.lag_seconds(1001, 32.0)
        );
        assert_eq!(Timeline::new(60).lag_seconds(1, 1.0), None);
    }

    #[test]
    fn lag_alarm_by_threshold_and_by_growth() {
        let mut a = LagAlarm::new(10_000, 300.0);
        assert!(!a.update(100, 0.0));
        assert!(a.update(20_000, 15.0), "above the threshold");
        let mut a = LagAlarm::new(10_000, 300.0);
        let mut on = false;
        for i in 0..=30 {
            on = a.update(100 + i * 10, i as f64 * 15.0);
            if i * 15 < 300 {
                assert!(!on, "not yet at {}s", i * 15);
            }
        }
        assert!(on, "growing for five minutes");
        assert!(!a.update(50, 500.0), "coming down resets it");
    }

    #[test]
    fn retry_storms_from_high_water_deltas() {
        let re = regex::Regex::new(r".*-retry$|.*\.DLQ$").expect("re");
        let mut r = ProduceRate::default();
        r.update(1000, 0.0);
        let rate = r.update(5000, 10.0);
        assert_eq!(rate, 400.0);
        assert!(retry_storm("payments-retry", rate, &re, 200.0));
        assert!(
            !retry_storm("payments", rate, &re, 200.0),
            "not a retry topic"
        );
        assert!(
            !retry_storm("payments.DLQ", 50.0, &re, 200.0),
            "normal traffic"
        );
    }
}

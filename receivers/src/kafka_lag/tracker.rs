//! State across collection rounds: timelines, Burrow windows, alarms and
//! produce rates, turning each round's raw offsets into a [`Snapshot`].

use std::collections::{BTreeMap, HashMap, HashSet};

use super::analysis::{group_status, retry_storm, LagAlarm, ProduceRate, Sample, Timeline, Window};
use super::client::{GroupListing, Members, PerPartition, Topics};
use super::metrics::{GroupPartition, GroupSnapshot, PartitionOffsets, Snapshot};

/// What one round read from the cluster (already filtered by the config).
#[derive(Debug, Default)]
pub struct Round {
    /// Topics and their partitions.
    pub topics: Topics,
    /// (oldest, latest) per partition.
    pub watermarks: PerPartition<(i64, i64)>,
    /// The groups read.
    pub groups: Vec<GroupListing>,
    /// Committed offsets per group (groups whose fetch failed are absent).
    pub committed: BTreeMap<String, PerPartition<i64>>,
    /// Members and their assignments, when the broker described the groups.
    pub members: Option<BTreeMap<String, Members>>,
}

/// Tuning of the analysis.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Burrow window size (samples).
    pub window: usize,
    /// Lag counted as caught up.
    pub allowed_lag: i64,
    /// Alarm threshold (messages).
    pub lag_threshold: i64,
    /// Alarm growth window (seconds).
    pub growth_window: f64,
    /// Retry/DLQ topics.
    pub retry_topics: regex::Regex,
    /// Retry-storm rate (messages/s).
    pub retry_rate_threshold: f64,
}

/// Timeline points kept per partition (kafka-lag-exporter keeps 60).
const TIMELINE_POINTS: usize = 60;

type Key = (String, i32);
type GroupKey = (String, String, i32);

/// The receiver's memory of past rounds.
#[derive(Debug)]
pub struct Tracker {
    settings: Settings,
    timelines: HashMap<Key, Timeline>,
    windows: HashMap<GroupKey, Window>,
    alarms: HashMap<(String, String), LagAlarm>,
    rates: HashMap<String, ProduceRate>,
}

/// The windows and alarms a round saw (the others are forgotten).
#[derive(Default)]
struct Seen {
    windows: HashSet<GroupKey>,
    alarms: HashSet<(String, String)>,
}

impl Tracker {
    /// An empty tracker.
    pub fn new(settings: Settings) -> Self {
        Tracker {
            settings,
            timelines: HashMap::new(),
            windows: HashMap::new(),
            alarms: HashMap::new(),
            rates: HashMap::new(),
        }
    }

    /// Fold a round taken at `t` (unix seconds) in, and describe it.
    pub fn observe(&mut self, round: &Round, t: f64) -> Snapshot {
        let mut snap = Snapshot {
            time_ns: (t * 1e9) as u64,
            ..Default::default()
        };
        self.offsets(round, t, &mut snap);
        let mut seen = Seen::default();
        for listing in &round.groups {
            let Some(committed) = round.committed.get(&listing.id) else {
                continue;
            };
            let g = self.group(round, listing, committed, t, &snap, &mut seen);
            snap.groups.insert(listing.id.clone(), g);
        }
        self.windows.retain(|k, _| seen.windows.contains(k));
        self.alarms.retain(|k, _| seen.alarms.contains(k));
        snap
    }

    /// The partitions' offsets and each topic's produce rate.
    fn offsets(&mut self, round: &Round, t: f64, snap: &mut Snapshot) {
        let mut seen_parts: HashSet<Key> = HashSet::new();
        for (topic, parts) in &round.topics {
            let mut offsets = BTreeMap::new();
            let mut total = 0i64;
            for p in parts {
                let Some(&(oldest, latest)) = round.watermarks.get(&(topic.clone(), *p)) else {
                    continue;
                };
                let key = (topic.clone(), *p);
                self.timelines
                    .entry(key.clone())
                    .or_insert_with(|| Timeline::new(TIMELINE_POINTS))
                    .add(latest, t);
                seen_parts.insert(key);
                total = total.saturating_add(latest);
                offsets.insert(*p, PartitionOffsets { oldest, latest });
            }
            let rate = self
                .rates
                .entry(topic.clone())
                .or_default()
                .update(total, t);
            let storm = retry_storm(
                topic,
                rate,
                &self.settings.retry_topics,
                self.settings.retry_rate_threshold,
            );
            snap.produce.insert(topic.clone(), (rate, storm));
            snap.topics.insert(topic.clone(), offsets);
        }
        self.timelines.retain(|k, _| seen_parts.contains(k));
        self.rates.retain(|k, _| round.topics.contains_key(k));
    }

    /// A group's view of the topics it consumes: those it committed on;
    /// every partition of them is reported, without a commit as offset -1.
    fn group(
        &mut self,
        round: &Round,
        listing: &GroupListing,
        committed: &PerPartition<i64>,
        t: f64,
        snap: &Snapshot,
        seen: &mut Seen,
    ) -> GroupSnapshot {
        let described = round.members.as_ref().and_then(|m| m.get(&listing.id));
        let members = described.map(|m| m.count);
        let has_members = match members {
            Some(n) => Some(n > 0),
            None => match listing.state.as_str() {
                "Empty" | "Dead" => Some(false),
                "Stable" | "PreparingRebalance" | "CompletingRebalance" => Some(true),
                _ => None,
            },
        };
        let mut g = GroupSnapshot {
            members,
            ..Default::default()
        };
        let topics: std::collections::BTreeSet<&String> =
            committed.keys().map(|(topic, _)| topic).collect();
        let mut statuses = Vec::new();
        for topic in topics {
            let Some(parts) = snap.topics.get(topic) else {
                continue; // filtered out, or deleted
            };
            let mut views = BTreeMap::new();
            let mut lag_sum = 0i64;
            for (p, o) in parts {
                let c = committed.get(&(topic.clone(), *p)).copied();
                let mut view = GroupPartition {
                    committed: c,
                    lag_seconds: None,
                    status: super::analysis::Status::NotFound,
                    owner: described.and_then(|m| m.owners.get(&(topic.clone(), *p)).cloned()),
                };
                if let Some(c) = c {
                    let lag = (o.latest - c).max(0);
                    lag_sum = lag_sum.saturating_add(lag);
                    let key = (listing.id.clone(), topic.clone(), *p);
                    let w = self
                        .windows
                        .entry(key.clone())
                        .or_insert_with(|| Window::new(self.settings.window));
                    w.add(Sample {
                        t,
                        committed: c,
                        lag,
                    });
                    view.status = w.status(t, self.settings.allowed_lag, has_members);
                    view.lag_seconds = self
                        .timelines
                        .get(&(topic.clone(), *p))
                        .and_then(|tl| tl.lag_seconds(c, t));
                    seen.windows.insert(key);
                    statuses.push(view.status);
                }
                views.insert(*p, view);
            }
            let akey = (listing.id.clone(), topic.clone());
            let on = self
                .alarms
                .entry(akey.clone())
                .or_insert_with(|| {
                    LagAlarm::new(self.settings.lag_threshold, self.settings.growth_window)
                })
                .update(lag_sum, t);
            seen.alarms.insert(akey);
            g.alarm.insert(topic.clone(), on);
            g.partitions.insert(topic.clone(), views);
        }
        g.status = Some(group_status(statuses));
        g
    }
}

#[cfg(test)]
mod tests {
    use super::super::analysis::Status;
    use super::*;

    fn settings() -> Settings {
        Settings {
            window: 3,
            allowed_lag: 0,
            lag_threshold: 100,
            growth_window: 1000.0,
            retry_topics: regex::Regex::new("^(?:.*-retry)$").expect("regex"),
            retry_rate_threshold: 50.0,
        }
    }

    fn round(latest: i64, committed: Option<i64>, retry_latest: i64) -> Round {
        let mut r = Round::default();
        r.topics.insert("orders".into(), vec![0, 1]);
        r.topics.insert("orders-retry".into(), vec![0]);
        r.watermarks.insert(("orders".into(), 0), (0, latest));
        r.watermarks.insert(("orders".into(), 1), (0, 5));
        r.watermarks
            .insert(("orders-retry".into(), 0), (0, retry_latest));
        r.groups.push(GroupListing {
            id: "billing".into(),
            state: "Empty".into(),
        });
        let mut c = PerPartition::new();
        if let Some(x) = committed {
            c.insert(("orders".into(), 0), x);
        }
        r.committed.insert("billing".into(), c);
        r
    }

    #[test]
    fn rounds_become_lag_status_alarm_and_storm() {
        let mut tr = Tracker::new(settings());
        // Growing lag while the consumer advances: WARN after a full window.
        let s = tr.observe(&round(100, Some(50), 0), 0.0);
        let g = &s.groups["billing"];
        let p0 = &g.partitions["orders"][&0];
        assert_eq!(p0.committed, Some(50));
        assert_eq!(p0.status, Status::NotFound, "window not full yet");
        // Partition 1 has no commit: reported without a lag, never as a huge one.
        assert_eq!(g.partitions["orders"][&1].committed, None);
        tr.observe(&round(200, Some(60), 10), 10.0);
        let s = tr.observe(&round(300, Some(70), 2000), 20.0);
        let g = &s.groups["billing"];
        assert_eq!(g.partitions["orders"][&0].status, Status::Warn);
        assert_eq!(g.status, Some(Status::Warn));
        assert!(g.alarm["orders"], "lag 230 > threshold 100");
        // Committed 70 is older than the first sample (high-water mark 100 at
        // t=0): at least 20 s old at t=20, never extrapolated before it.
        let ls = g.partitions["orders"][&0].lag_seconds.expect("lag_seconds");
        assert!((ls - 20.0).abs() < 1e-6, "{ls}");
        // 1990 messages in 10 s on a retry topic: a storm; `orders` is not a retry topic.
        assert_eq!(s.produce["orders-retry"], (199.0, true));
        assert!(!s.produce["orders"].1);
        // Offsets stop moving: STOP (the group is Empty), the group is ERR.
        tr.observe(&round(400, Some(70), 2000), 30.0);
        tr.observe(&round(500, Some(70), 2000), 40.0);
        let s = tr.observe(&round(600, Some(70), 2000), 50.0);
        assert_eq!(
            s.groups["billing"].partitions["orders"][&0].status,
            Status::Stop
        );
        assert_eq!(s.groups["billing"].status, Some(Status::Err));
        assert_eq!(s.produce["orders-retry"], (0.0, false));
        // Caught up: OK.
        let s = tr.observe(&round(600, Some(600), 2000), 60.0);
        assert_eq!(
            s.groups["billing"].partitions["orders"][&0].status,
            Status::Ok
        );
        assert_eq!(
            s.groups["billing"].partitions["orders"][&0].lag_seconds,
            Some(0.0)
        );
    }

    #[test]
    fn state_of_vanished_groups_and_topics_is_dropped() {
        let mut tr = Tracker::new(settings());
        tr.observe(&round(100, Some(50), 0), 0.0);
        assert!(!tr.windows.is_empty() && !tr.timelines.is_empty());
        tr.observe(&Round::default(), 10.0);
        assert!(tr.windows.is_empty());
        assert!(tr.timelines.is_empty());
        assert!(tr.alarms.is_empty());
        assert!(tr.rates.is_empty());
    }
}

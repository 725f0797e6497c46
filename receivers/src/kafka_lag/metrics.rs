//! A sampled cluster snapshot, and its OTLP metrics with the names of the
//! Collector's kafkametricsreceiver plus causeway's time lag, status, alarm
//! and retry-storm metrics.

use opentelemetry_proto::tonic::metrics::v1::ResourceMetrics;
use std::collections::BTreeMap;

use crate::metric_builder::{kv, kv_int, Builder, Value};

use super::analysis::Status;

/// One partition of a topic: its offsets.
#[derive(Debug, Clone, Default)]
pub struct PartitionOffsets {
    /// Oldest available offset (low water mark).
    pub oldest: i64,
    /// Next offset to be written (high water mark).
    pub latest: i64,
}

/// A group's view of one partition.
#[derive(Debug, Clone)]
pub struct GroupPartition {
    /// Committed offset; `None` when the group never committed one.
    pub committed: Option<i64>,
    /// Time lag in seconds, when known.
    pub lag_seconds: Option<f64>,
    /// Burrow status of the partition.
    pub status: Status,
    /// The member it is assigned to, when the group was described and a
    /// member owns it.
    pub owner: Option<super::client::Owner>,
}

/// Per group: members, status, per topic/partition.
#[derive(Debug, Clone, Default)]
pub struct GroupSnapshot {
    /// Members, when the broker told.
    pub members: Option<i64>,
    /// Group status (the worst partition).
    pub status: Option<Status>,
    /// Lag alarm per topic.
    pub alarm: BTreeMap<String, bool>,
    /// topic → partition → view.
    pub partitions: BTreeMap<String, BTreeMap<i32, GroupPartition>>,
}

/// Everything one collection round saw.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Unix time of the round, nanoseconds.
    pub time_ns: u64,
    /// topic → partition → offsets.
    pub topics: BTreeMap<String, BTreeMap<i32, PartitionOffsets>>,
    /// Produce rate per topic (messages/s) and whether it is a retry storm.
    pub produce: BTreeMap<String, (f64, bool)>,
    /// group → snapshot.
    pub groups: BTreeMap<String, GroupSnapshot>,
}

/// The snapshot as OTLP metrics. Partitions without a committed offset get
/// no lag point at all (never a huge false lag); their offset point is -1.
pub fn to_metrics(snap: &Snapshot, cluster: &str) -> ResourceMetrics {
    let mut b = Builder::new(snap.time_ns, 0);
    topics(&mut b, snap);
    for (group, g) in &snap.groups {
        members(&mut b, group, g);
        for (topic, parts) in &g.partitions {
            group_topic(&mut b, snap, group, g, topic, parts);
        }
    }
    b.finish(
        vec![
            kv("kafka.cluster.alias", cluster),
            kv("service.name", "kafka"),
        ],
        "causeway.kafka_lag",
    )
}

/// Each topic's partitions and their offsets, and its produce rate.
fn topics(b: &mut Builder, snap: &Snapshot) {
    for (topic, parts) in &snap.topics {
        b.gauge(
            "kafka.topic.partitions",
            "{partitions}",
            "Partitions of a topic.",
            vec![kv("topic", topic)],
            Value::Int(i64::try_from(parts.len()).unwrap_or(i64::MAX)),
        );
        for (p, o) in parts {
            let attrs = || vec![kv("topic", topic), kv_int("partition", i64::from(*p))];
            b.gauge(
                "kafka.partition.current_offset",
                "1",
                "Current (high water mark) offset of a partition.",
                attrs(),
                Value::Int(o.latest),
            );
            b.gauge(
                "kafka.partition.oldest_offset",
                "1",
                "Oldest offset of a partition.",
                attrs(),
                Value::Int(o.oldest),
            );
        }
        if let Some((rate, storm)) = snap.produce.get(topic) {
            b.gauge(
                "kafka.topic.produce_rate",
                "{messages}/s",
                "Messages produced per second, from high-water-mark deltas.",
                vec![kv("topic", topic)],
                Value::Double(*rate),
            );
            b.gauge(
                "kafka.topic.retry_storm",
                "1",
                "1 when a retry/DLQ topic is produced to faster than retry_rate_threshold.",
                vec![kv("topic", topic)],
                Value::Int(i64::from(*storm)),
            );
        }
    }
}

/// A group's members, the partitions each is assigned, and its status.
fn members(b: &mut Builder, group: &str, g: &GroupSnapshot) {
    if let Some(m) = g.members {
        b.gauge(
            "kafka.consumer_group.members",
            "{members}",
            "Members of a consumer group.",
            vec![kv("group", group)],
            Value::Int(m),
        );
    }
    // Partitions assigned to each member (of the topics the group commits on).
    let mut per_member: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for gp in g.partitions.values().flat_map(|p| p.values()) {
        if let Some(o) = &gp.owner {
            *per_member.entry((&o.client_id, &o.host)).or_default() += 1;
        }
    }
    for ((client_id, host), n) in per_member {
        b.gauge(
            "kafka.consumer_group.member.partitions",
            "{partitions}",
            "Partitions assigned to a member of a consumer group.",
            vec![
                kv("group", group),
                kv("client_id", client_id),
                kv("owner", host),
            ],
            Value::Int(n),
        );
    }
    if let Some(s) = g.status {
        b.gauge(
            "kafka.consumer_group.status",
            "1",
            "Burrow status: 0 NOTFOUND, 1 OK, 2 WARN, 3 ERR, 4 STOP, 5 STALL, 6 REWIND.",
            vec![kv("group", group), kv("status", s.name())],
            Value::Int(s as i64),
        );
    }
}

/// A group on one topic: per partition its offset, lag, lag in seconds and
/// status; the sums over the topic and the alarm.
fn group_topic(
    b: &mut Builder,
    snap: &Snapshot,
    group: &str,
    g: &GroupSnapshot,
    topic: &str,
    parts: &BTreeMap<i32, GroupPartition>,
) {
    let (mut lag_sum, mut off_sum, mut any) = (0i64, 0i64, false);
    for (p, gp) in parts {
        let attrs = || {
            vec![
                kv("group", group),
                kv("topic", topic),
                kv_int("partition", i64::from(*p)),
            ]
        };
        let latest = snap
            .topics
            .get(topic)
            .and_then(|t| t.get(p))
            .map(|o| o.latest);
        b.gauge(
            "kafka.consumer_group.offset",
            "1",
            "Committed offset of a group on a partition (-1: none).",
            attrs(),
            Value::Int(gp.committed.unwrap_or(-1)),
        );
        if let (Some(c), Some(l)) = (gp.committed, latest) {
            let lag = (l - c).max(0);
            b.gauge(
                "kafka.consumer_group.lag",
                "{messages}",
                "Messages a group has not consumed on a partition.",
                attrs(),
                Value::Int(lag),
            );
            lag_sum += lag;
            off_sum += c;
            any = true;
        }
        if let Some(ls) = gp.lag_seconds {
            b.gauge(
                "kafka.consumer_group.lag_seconds",
                "s",
                "Age of the oldest unconsumed message, interpolated.",
                attrs(),
                Value::Double(ls),
            );
        }
        let mut with_status = attrs();
        with_status.push(kv("status", gp.status.name()));
        // Burrow's `owner` and `client_id` of the partition.
        if let Some(o) = &gp.owner {
            with_status.push(kv("owner", &o.host));
            with_status.push(kv("client_id", &o.client_id));
        }
        b.gauge(
            "kafka.consumer_group.partition_status",
            "1",
            "Burrow status of a partition (codes as kafka.consumer_group.status).",
            with_status,
            Value::Int(gp.status as i64),
        );
    }
    if any {
        b.gauge(
            "kafka.consumer_group.lag_sum",
            "{messages}",
            "Lag of a group summed over a topic's partitions.",
            vec![kv("group", group), kv("topic", topic)],
            Value::Int(lag_sum),
        );
        b.gauge(
            "kafka.consumer_group.offset_sum",
            "1",
            "Committed offsets of a group summed over a topic.",
            vec![kv("group", group), kv("topic", topic)],
            Value::Int(off_sum),
        );
    }
    if let Some(on) = g.alarm.get(topic) {
        b.gauge(
            "kafka.consumer_group.lag_alarm",
            "1",
            "1 when lag is above lag_threshold or has grown for growth_window.",
            vec![kv("group", group), kv("topic", topic)],
            Value::Int(i64::from(*on)),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point, NumberDataPoint};

    #[test]
    fn snapshot_to_kafkametrics_names_and_no_false_lag() {
        let mut snap = Snapshot {
            time_ns: 7,
            ..Default::default()
        };
        snap.topics.insert(
            "orders".into(),
            BTreeMap::from([
                (
                    0,
                    PartitionOffsets {
                        oldest: 0,
                        latest: 100,
                    },
                ),
                (
                    1,
                    PartitionOffsets {
                        oldest: 0,
                        latest: 50,
                    },
                ),
            ]),
        );
        let mut g = GroupSnapshot {
            members: Some(2),
            status: Some(Status::Warn),
            ..Default::default()
        };
        g.partitions.insert(
            "orders".into(),
            BTreeMap::from([
                (
                    0,
                    GroupPartition {
                        committed: Some(60),
                        lag_seconds: Some(12.5),
                        status: Status::Warn,
                        owner: Some(super::super::client::Owner {
                            client_id: "billing-1".into(),
                            host: "10.0.0.7".into(),
                        }),
                    },
                ),
                (
                    1,
                    GroupPartition {
                        committed: None,
                        lag_seconds: None,
                        status: Status::NotFound,
                        owner: None,
                    },
                ),
            ]),
        );
        g.alarm.insert("orders".into(), false);
        snap.groups.insert("billing".into(), g);
        let rm = to_metrics(&snap, "main");
        let m = &rm.scope_metrics[0].metrics;
        let get = |n: &str| {
            m.iter()
                .find(|x| x.name == n)
                .unwrap_or_else(|| panic!("{n} missing"))
        };
        let points = |n: &str| match &get(n).data {
            Some(metric::Data::Gauge(g)) => g.data_points.clone(),
            _ => vec![],
        };
        let int = |p: &NumberDataPoint| match p.value {
            Some(number_data_point::Value::AsInt(i)) => i,
            _ => i64::MIN,
        };
        let lag = points("kafka.consumer_group.lag");
        assert_eq!(
            lag.len(),
            1,
            "no lag point for a partition without a commit"
        );
        assert_eq!(int(&lag[0]), 40);
        assert_eq!(int(&points("kafka.consumer_group.lag_sum")[0]), 40);
        let offsets: Vec<i64> = points("kafka.consumer_group.offset")
            .iter()
            .map(int)
            .collect();
        assert_eq!(offsets, vec![60, -1]);
        assert_eq!(int(&points("kafka.consumer_group.members")[0]), 2);
        // The owner of partition 0, as Burrow reports it; partition 1 has none.
        let status = points("kafka.consumer_group.partition_status");
        let keys = |p: &NumberDataPoint| -> Vec<(String, String)> {
            p.attributes
                .iter()
                .map(|kv| {
                    let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(
                            opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(
                                s,
                            ),
                        ) => s.clone(),
                        other => format!("{other:?}"),
                    };
                    (kv.key.clone(), v)
                })
                .collect()
        };
        assert!(keys(&status[0]).contains(&("owner".into(), "10.0.0.7".into())));
        assert!(keys(&status[0]).contains(&("client_id".into(), "billing-1".into())));
        assert!(!keys(&status[1]).iter().any(|(k, _)| k == "owner"));
        let per_member = points("kafka.consumer_group.member.partitions");
        assert_eq!(per_member.len(), 1);
        assert_eq!(int(&per_member[0]), 1);
        assert!(keys(&per_member[0]).contains(&("client_id".into(), "billing-1".into())));
        assert_eq!(int(&points("kafka.consumer_group.status")[0]), 2);
        assert_eq!(int(&points("kafka.topic.partitions")[0]), 2);
        assert_eq!(points("kafka.partition.current_offset").len(), 2);
        assert!(
            matches!(points("kafka.consumer_group.lag_seconds")[0].value, Some(number_data_point::Value::AsDouble(x)) if x == 12.5)
        );
    }
}

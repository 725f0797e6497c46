//! The `kafka_lag` receiver in the running daemon against a real Apache
//! Kafka broker, driven by rdkafka producers and consumers: exact lag,
//! Burrow status through WARN and STOP and back to OK with time lag
//! tracking the oldest unconsumed message, members and their partitions
//! from Kafka's DescribeGroups (a group left with no members is STOP),
//! retry storms, and a broker restart under the daemon.

mod common;

use common::kafka::Broker;
use common::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const INTERVAL_MS: u64 = 400;

fn config(dir: &Path, broker: &str, extra: &str) -> String {
    format!(
        r#"
receivers:
  kafka_lag:
    brokers: ["{broker}"]
    interval: {INTERVAL_MS}ms
    timeout: 2s
    window: 5
    lag_threshold: 100
    retry_rate_threshold: 200
{extra}
exporters:
  file: {{ path: "{d}/metrics.jsonl" }}
service:
  pipelines:
    metrics: {{ receivers: [kafka_lag], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        d = dir.display()
    )
}

/// One collection round as exported: its time and every point.
#[derive(Debug)]
struct Snap {
    time: f64,
    points: Vec<(String, BTreeMap<String, String>, f64)>,
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

impl Snap {
    /// The value of `name` at the point whose attributes include `attrs`.
    fn get(&self, name: &str, attrs: &[(&str, &str)]) -> Option<f64> {
        self.points
            .iter()
            .find(|(n, a, _)| {
                n == name
                    && attrs
                        .iter()
                        .all(|(k, v)| a.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|p| p.2)
    }
}

fn snaps(dir: &Path) -> Vec<Snap> {
    let mut out = Vec::new();
    for line in read_jsonl(&dir.join("metrics.jsonl")) {
        let mut s = Snap {
            time: 0.0,
            points: Vec::new(),
        };
        for (resource, m) in metrics(&[line]) {
            assert_eq!(
                attr(&resource["attributes"], "kafka.cluster.alias").expect("cluster alias")
                    ["stringValue"],
                "kafka"
            );
            for dp in m["gauge"]["dataPoints"].as_array().into_iter().flatten() {
                let mut attrs = BTreeMap::new();
                for kv in dp["attributes"].as_array().into_iter().flatten() {
                    let v = &kv["value"];
                    let v = v["stringValue"]
                        .as_str()
                        .map(str::to_string)
                        .or_else(|| num(&v["intValue"]).map(|x| x.to_string()))
                        .unwrap_or_default();
                    attrs.insert(kv["key"].as_str().unwrap_or_default().to_string(), v);
                }
                let value = num(&dp["asInt"])
                    .or_else(|| num(&dp["asDouble"]))
                    .expect("value");
                s.time = num(&dp["timeUnixNano"]).expect("time") / 1e9;
                s.points.push((
                    m["name"].as_str().unwrap_or_default().to_string(),
                    attrs,
                    value,
                ));
            }
        }
        out.push(s);
    }
    out
}

/// Wait for the next exported round after the ones seen so far, and return it.
fn next_round(dir: &Path, seen: &mut usize) -> Snap {
    wait_for(Duration::from_secs(20), "a kafka_lag round", || {
        snaps(dir).len() > *seen
    });
    let mut all = snaps(dir);
    *seen = all.len();
    all.pop().expect("a round")
}

/// Rounds until `f` holds on one (at most `max`); returns that round.
fn round_where(
    dir: &Path,
    seen: &mut usize,
    max: usize,
    what: &str,
    mut f: impl FnMut(&Snap) -> bool,
) -> Snap {
    for _ in 0..max {
        let s = next_round(dir, seen);
        if f(&s) {
            return s;
        }
    }
    panic!("no round with {what} in {max} rounds");
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64()
}

#[test]
fn lag_per_partition_and_sums_are_exact() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    broker.create_topic("payments", 3);
    let p = broker.producer();
    for (part, n) in [(0, 30), (1, 20), (2, 10)] {
        broker.produce(&p, "payments", part, n);
    }
    let c = broker.consumer("billing");
    assert_eq!(broker.consume(&c, "payments", 0, 12), 12);
    assert_eq!(broker.consume(&c, "payments", 1, 20), 20);
    // Partition 2: never consumed, no commit.
    let d = Daemon::start(dir.path(), "lag", &config(dir.path(), &broker.addr(), ""));
    let mut seen = 0;
    let s = round_where(dir.path(), &mut seen, 10, "the group's commits", |s| {
        s.get("kafka.consumer_group.offset_sum", &[("group", "billing")])
            .is_some()
    });
    let g = |name: &str, part: &str| {
        s.get(
            name,
            &[
                ("group", "billing"),
                ("topic", "payments"),
                ("partition", part),
            ],
        )
    };
    assert_eq!(g("kafka.consumer_group.lag", "0"), Some(18.0));
    assert_eq!(g("kafka.consumer_group.lag", "1"), Some(0.0));
    assert_eq!(
        g("kafka.consumer_group.lag", "2"),
        None,
        "no commit: no (false) lag"
    );
    assert_eq!(g("kafka.consumer_group.offset", "0"), Some(12.0));
    assert_eq!(g("kafka.consumer_group.offset", "2"), Some(-1.0));
    let sum = |name: &str| s.get(name, &[("group", "billing"), ("topic", "payments")]);
    assert_eq!(sum("kafka.consumer_group.lag_sum"), Some(18.0));
    assert_eq!(sum("kafka.consumer_group.offset_sum"), Some(32.0));
    for (part, hwm) in [("0", 30.0), ("1", 20.0), ("2", 10.0)] {
        assert_eq!(
            s.get(
                "kafka.partition.current_offset",
                &[("topic", "payments"), ("partition", part)]
            ),
            Some(hwm)
        );
        assert_eq!(
            s.get(
                "kafka.partition.oldest_offset",
                &[("topic", "payments"), ("partition", part)]
            ),
            Some(0.0)
        );
    }
    assert_eq!(
        s.get("kafka.topic.partitions", &[("topic", "payments")]),
        Some(3.0)
    );
    // The consumer assigned its partitions itself (no subscription): Kafka
    // describes the group as one with offsets and no members.
    assert_eq!(
        s.get("kafka.consumer_group.members", &[("group", "billing")]),
        Some(0.0)
    );
    assert_eq!(
        d.metric("causeway_kafka_lag_errors_total{component=\"kafka_lag\",op=\"describe groups\"}"),
        None,
        "Kafka serves DescribeGroups"
    );
    assert_eq!(
        d.metric("causeway_kafka_lag_up{component=\"kafka_lag\"}"),
        Some(1.0)
    );
}

/// A consumer of `group` subscribed to `topic` (a member of the group once
/// polled), with `client` as its client id.
fn member(
    broker: &Broker,
    group: &str,
    client: &str,
    topic: &str,
) -> rdkafka::consumer::BaseConsumer {
    use rdkafka::config::ClientConfig;
    use rdkafka::consumer::Consumer;
    let c: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr())
        .set("group.id", group)
        .set("client.id", client)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "500")
        .create()
        .expect("consumer");
    c.subscribe(&[topic]).expect("subscribe");
    c
}

/// Poll every consumer until each owns `each` partitions; then commit the
/// end of each partition it owns.
fn settle(cs: &[&rdkafka::consumer::BaseConsumer], each: usize) {
    use rdkafka::consumer::{CommitMode, Consumer};
    wait_for(Duration::from_secs(60), "the group's assignment", || {
        for c in cs {
            while let Some(m) = c.poll(Duration::from_millis(50)) {
                m.expect("poll");
            }
        }
        cs.iter()
            .all(|c| c.assignment().map(|a| a.count()).unwrap_or(0) == each)
    });
    // Commit the end of each assigned partition explicitly: committing
    // "what was consumed" fails with NoOffset when a partition's messages
    // were all read before a rebalance handed it over.
    for c in cs {
        let mut ends = rdkafka::TopicPartitionList::new();
        for e in c.assignment().expect("assignment").elements() {
            let (_, high) = c
                .fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(10))
                .expect("watermarks");
            ends.add_partition_offset(e.topic(), e.partition(), rdkafka::Offset::Offset(high))
                .expect("offset");
        }
        c.commit(&ends, CommitMode::Sync).expect("commit");
    }
}

#[test]
fn describe_groups_names_members_and_their_partitions_and_a_group_left_empty_is_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    broker.create_topic("invoices", 4);
    let p = broker.producer();
    for part in 0..4 {
        broker.produce(&p, "invoices", part, 10);
    }
    let a = member(&broker, "ledger", "ledger-a", "invoices");
    let b = member(&broker, "ledger", "ledger-b", "invoices");
    settle(&[&a, &b], 2);
    let d = Daemon::start(
        dir.path(),
        "members",
        &config(dir.path(), &broker.addr(), ""),
    );
    let mut seen = 0;
    let s = round_where(dir.path(), &mut seen, 20, "the group's members", |s| {
        s.get("kafka.consumer_group.members", &[("group", "ledger")]) == Some(2.0)
    });
    for client in ["ledger-a", "ledger-b"] {
        assert_eq!(
            s.get(
                "kafka.consumer_group.member.partitions",
                &[
                    ("group", "ledger"),
                    ("client_id", client),
                    ("owner", "127.0.0.1")
                ]
            ),
            Some(2.0),
            "{client} owns 2 of the 4 partitions"
        );
    }
    // Every partition's status names its owner, as Burrow does.
    let owners: Vec<String> = (0..4)
        .map(|part| {
            let part = part.to_string();
            s.points
                .iter()
                .find(|(n, at, _)| {
                    n == "kafka.consumer_group.partition_status"
                        && at.get("group").map(String::as_str) == Some("ledger")
                        && at.get("partition") == Some(&part)
                })
                .and_then(|(_, at, _)| at.get("client_id").cloned())
                .unwrap_or_default()
        })
        .collect();
    let mut sorted = owners.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        ["ledger-a", "ledger-a", "ledger-b", "ledger-b"],
        "owners of partitions 0..4: {owners:?}"
    );
    assert_eq!(
        d.metric("causeway_kafka_lag_errors_total{component=\"kafka_lag\",op=\"describe groups\"}"),
        None
    );

    // Both members leave; production goes on. With no members and offsets
    // not moving while the lag grows, Burrow's verdict is STOP, not STALL.
    drop(a);
    drop(b);
    let mut last = None;
    for _ in 0..30 {
        for part in 0..4 {
            broker.produce(&p, "invoices", part, 5);
        }
        let s = next_round(dir.path(), &mut seen);
        let at = [
            ("group", "ledger"),
            ("topic", "invoices"),
            ("partition", "0"),
        ];
        last = Some((
            s.get("kafka.consumer_group.partition_status", &at),
            s.get("kafka.consumer_group.status", &[("group", "ledger")]),
            s.get("kafka.consumer_group.members", &[("group", "ledger")]),
        ));
        if matches!(last, Some((Some(v), _, _)) if v == 4.0) {
            break;
        }
    }
    assert_eq!(
        last,
        Some((Some(4.0), Some(3.0), Some(0.0))),
        "(partition status, group status, members) of the group left empty: STOP (the group ERR) with no members"
    );
}

#[test]
fn stopped_consumer_goes_warn_then_stop_with_time_lag_then_ok() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    broker.create_topic("orders", 1);
    let p = broker.producer();
    let c = broker.consumer("shipping");
    broker.produce(&p, "orders", 0, 20);
    broker.consume(&c, "orders", 0, 20);
    let _d = Daemon::start(
        dir.path(),
        "status",
        &config(dir.path(), &broker.addr(), ""),
    );
    let mut seen = 0;
    let status = |s: &Snap| {
        s.get(
            "kafka.consumer_group.partition_status",
            &[
                ("group", "shipping"),
                ("topic", "orders"),
                ("partition", "0"),
            ],
        )
    };
    // Caught up: OK once the window (5 rounds) is full.
    round_where(dir.path(), &mut seen, 15, "status OK", |s| {
        status(s) == Some(1.0)
    });

    // The consumer falls behind: it keeps committing, but less than is produced.
    // Each step waits for a round, so the daemon samples every step.
    let mut produced_at: Vec<(i64, f64)> = Vec::new(); // (first offset of a burst, when)
    let mut hwm = 20i64;
    let mut warn = false;
    let mut statuses = Vec::new();
    for _ in 0..15 {
        produced_at.push((hwm, now()));
        broker.produce(&p, "orders", 0, 50);
        hwm += 50;
        broker.consume(&c, "orders", 0, 10);
        let s = next_round(dir.path(), &mut seen);
        statuses.push(status(&s));
        if status(&s) == Some(2.0) {
            warn = true;
            break;
        }
    }
    assert!(
        warn,
        "status never WARN while lag grew with commits moving: {statuses:?}"
    );

    // The consumer stops; production goes on. STOP within the window.
    let committed = {
        let s = next_round(dir.path(), &mut seen);
        s.get(
            "kafka.consumer_group.offset",
            &[("group", "shipping"), ("partition", "0")],
        )
        .expect("offset") as i64
    };
    let mut stop = None;
    for _ in 0..15 {
        produced_at.push((hwm, now()));
        broker.produce(&p, "orders", 0, 20);
        hwm += 20;
        let s = next_round(dir.path(), &mut seen);
        if status(&s) == Some(4.0) {
            stop = Some(s);
            break;
        }
    }
    let s = stop.expect("status never STOP after the consumer stopped");
    assert_eq!(
        s.get("kafka.consumer_group.status", &[("group", "shipping")]),
        Some(3.0),
        "group ERR"
    );
    assert!(
        s.get(
            "kafka.consumer_group.lag_alarm",
            &[("group", "shipping"), ("topic", "orders")]
        ) == Some(1.0)
    );
    // Time lag: the age of the oldest unconsumed message (offset `committed`),
    // known to within one interval (the timeline's resolution) plus produce time.
    let born = produced_at
        .iter()
        .rev()
        .find(|(first, _)| *first <= committed)
        .map(|x| x.1)
        .expect("burst of the committed offset");
    let expected = s.time - born;
    let got = s
        .get(
            "kafka.consumer_group.lag_seconds",
            &[("group", "shipping"), ("partition", "0")],
        )
        .expect("lag_seconds");
    let tolerance = 2.0 * INTERVAL_MS as f64 / 1000.0 + 0.5;
    assert!(
        (got - expected).abs() <= tolerance,
        "lag_seconds {got:.2} vs age of the oldest unconsumed message {expected:.2} (±{tolerance})"
    );

    // It resumes and catches up: OK.
    let lag = (hwm - committed) as usize;
    broker.consume(&c, "orders", 0, lag);
    let s = round_where(
        dir.path(),
        &mut seen,
        15,
        "status OK after catching up",
        |s| status(s) == Some(1.0),
    );
    assert_eq!(
        s.get("kafka.consumer_group.lag", &[("group", "shipping")]),
        Some(0.0)
    );
    assert_eq!(
        s.get("kafka.consumer_group.lag_seconds", &[("group", "shipping")]),
        Some(0.0)
    );
    assert_eq!(
        s.get("kafka.consumer_group.status", &[("group", "shipping")]),
        Some(1.0)
    );
}

#[test]
fn a_burst_on_a_retry_topic_is_a_retry_storm_and_normal_traffic_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    broker.create_topic("orders", 1);
    broker.create_topic("orders-retry", 1);
    let p = broker.producer();
    let _d = Daemon::start(dir.path(), "storm", &config(dir.path(), &broker.addr(), ""));
    let mut seen = 0;
    let storm = |s: &Snap, t: &str| s.get("kafka.topic.retry_storm", &[("topic", t)]);
    // Normal traffic on both: a few messages a round. No storm.
    for _ in 0..4 {
        broker.produce(&p, "orders", 0, 5);
        broker.produce(&p, "orders-retry", 0, 5);
        let s = next_round(dir.path(), &mut seen);
        assert_ne!(
            storm(&s, "orders-retry"),
            Some(1.0),
            "normal retry traffic flagged"
        );
        assert_eq!(storm(&s, "orders"), Some(0.0));
    }
    // A burst far above 200/s on both: only the retry topic is a storm.
    broker.produce(&p, "orders-retry", 0, 3000);
    broker.produce(&p, "orders", 0, 3000);
    let s = round_where(dir.path(), &mut seen, 5, "a retry storm", |s| {
        storm(s, "orders-retry") == Some(1.0)
    });
    assert!(
        s.get("kafka.topic.produce_rate", &[("topic", "orders-retry")])
            .expect("rate")
            > 200.0
    );
    assert_eq!(
        storm(&s, "orders"),
        Some(0.0),
        "a burst on a non-retry topic is no retry storm"
    );
    // The burst is over: the flag clears.
    round_where(dir.path(), &mut seen, 5, "the storm over", |s| {
        storm(s, "orders-retry") == Some(0.0)
    });
}

#[test]
fn broker_restart_is_reported_and_metrics_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut broker = Broker::start(dir.path());
    broker.create_topic("events", 2);
    let p = broker.producer();
    broker.produce(&p, "events", 0, 7);
    drop(p);
    let d = Daemon::start(
        dir.path(),
        "restart",
        &config(dir.path(), &broker.addr(), ""),
    );
    let mut seen = 0;
    next_round(dir.path(), &mut seen);
    broker.stop();
    wait_for(Duration::from_secs(30), "failed rounds reported", || {
        d.metric("causeway_kafka_lag_rounds_total{component=\"kafka_lag\",outcome=\"error\"}")
            .unwrap_or(0.0)
            >= 2.0
    });
    assert_eq!(
        d.metric("causeway_kafka_lag_up{component=\"kafka_lag\"}"),
        Some(0.0)
    );
    assert!(
        d.metric("causeway_kafka_lag_errors_total{component=\"kafka_lag\",op=\"metadata\"}")
            .unwrap_or(0.0)
            >= 1.0
    );
    assert!(
        d.stderr("restart")
            .contains("Kafka cluster not read this round"),
        "no log line for the outage:\n{}",
        d.stderr("restart")
    );
    assert_eq!(
        http_get(&d.telemetry, "/healthz").map(|x| x.0),
        Some(200),
        "daemon still up"
    );
    seen = snaps(dir.path()).len();
    let restarted = now();
    broker.restart();
    let p = broker.producer();
    broker.produce(&p, "events", 0, 3);
    let s = round_where(
        dir.path(),
        &mut seen,
        60,
        "a round after the restart",
        |s| {
            s.time > restarted
                && s.get(
                    "kafka.partition.current_offset",
                    &[("topic", "events"), ("partition", "0")],
                ) == Some(10.0)
        },
    );
    assert_eq!(
        s.get("kafka.topic.partitions", &[("topic", "events")]),
        Some(2.0)
    );
    wait_for(Duration::from_secs(10), "up again", || {
        d.metric("causeway_kafka_lag_up{component=\"kafka_lag\"}") == Some(1.0)
    });
    assert!(d.stderr("restart").contains("Kafka cluster read again"));
}

/// Under the memory budget: with memory over the limiter's soft limit (a
/// 32 MiB limit, below what the daemon itself uses) no round starts; each
/// interval is counted as skipped and nothing is read from the cluster.
#[test]
fn over_the_memory_limit_rounds_are_skipped_and_counted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    broker.create_topic("events", 1);
    let cfg = config(dir.path(), &broker.addr(), "").replace(
        "service:\n",
        "service:\n  memory_limiter: { limit: 32MiB, check_interval: 50ms }\n",
    );
    let d = Daemon::start(dir.path(), "memory", &cfg);
    let skipped =
        "causeway_kafka_lag_rounds_total{component=\"kafka_lag\",outcome=\"memory_limit\"}";
    wait_for(Duration::from_secs(30), "rounds skipped", || {
        d.metric(skipped).unwrap_or(0.0) >= 3.0
    });
    assert_eq!(
        d.metric("causeway_kafka_lag_rounds_total{component=\"kafka_lag\",outcome=\"ok\"}")
            .unwrap_or(0.0),
        0.0,
        "no round read the cluster"
    );
    assert!(snaps(dir.path()).is_empty(), "nothing was exported");
    assert!(d
        .stderr("memory")
        .contains("kafka_lag skips its rounds until it falls"));
}

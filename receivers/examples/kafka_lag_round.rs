//! Benchmark of one `kafka_lag` collection round against a real broker.
//!
//! ```sh
//! cargo run --release -p causeway-receivers --example kafka_lag_round -- 127.0.0.1:9092 setup
//! cargo run --release -p causeway-receivers --example kafka_lag_round -- 127.0.0.1:9092 5
//! ```
//! `setup` creates 50 topics of 100 partitions (5,000), one message in each
//! partition, and 200 consumer groups, each committing on every partition of
//! one topic (20,000 group-partitions). A number runs that many rounds and
//! prints each round's wall time and this process's CPU time (user + system,
//! librdkafka's threads included).
#![allow(clippy::unwrap_used)]

use causeway_receivers::kafka_lag::bench_rounds;
use causeway_receivers::kafka_lag::client::Client;
use causeway_receivers::kafka_lag::config::KafkaLagConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

const TOPICS: usize = 50;
const PARTITIONS: i32 = 100;
const GROUPS: usize = 200;

fn cpu_seconds() -> f64 {
    // utime + stime from /proc/self/stat, in clock ticks (100 Hz on Linux).
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = after.split_whitespace().collect();
    (f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap()) / 100.0
}

fn setup(brokers: &str) {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", brokers);
    let admin: AdminClient<DefaultClientContext> = cfg.create().unwrap();
    let names: Vec<String> = (0..TOPICS).map(|t| format!("bench-{t:02}")).collect();
    let t0 = Instant::now();
    for chunk in names.chunks(10) {
        let topics: Vec<NewTopic<'_>> = chunk
            .iter()
            .map(|n| NewTopic::new(n, PARTITIONS, TopicReplication::Fixed(1)))
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(120)));
        for r in futures::executor::block_on(admin.create_topics(&topics, &opts)).unwrap() {
            if let Err((t, e)) = r {
                eprintln!("topic {t}: {e}");
            }
        }
    }
    eprintln!("topics created in {:?}", t0.elapsed());
    let producer: BaseProducer = cfg.clone().set("linger.ms", "5").create().unwrap();
    for n in &names {
        for p in 0..PARTITIONS {
            let mut rec = BaseRecord::<(), str>::to(n).partition(p).payload("x");
            while let Err((_, r)) = producer.send(rec) {
                producer.poll(Duration::from_millis(5));
                rec = r;
            }
        }
    }
    producer.flush(Duration::from_secs(120)).unwrap();
    eprintln!("produced in {:?}", t0.elapsed());
    for g in 0..GROUPS {
        let c: BaseConsumer = cfg
            .clone()
            .set("group.id", format!("bench-group-{g:03}"))
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(&names[g % TOPICS], p, Offset::Offset(0))
                .unwrap();
        }
        c.commit(&tpl, CommitMode::Sync).unwrap();
    }
    eprintln!("groups committed in {:?}", t0.elapsed());
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let brokers = args
        .get(1)
        .cloned()
        .unwrap_or_else(|| "127.0.0.1:9092".into());
    match args.get(2).map(String::as_str) {
        Some("setup") => setup(&brokers),
        Some("phases") => {
            // Where a round's wall time goes, request by request.
            let mut settings = std::collections::BTreeMap::new();
            settings.insert("bootstrap.servers".to_string(), brokers.clone());
            let c = Client::new(&settings, Duration::from_secs(60)).unwrap();
            for _ in 0..3 {
                let t = Instant::now();
                let topics = c.topics().unwrap();
                let t1 = t.elapsed();
                let wm = c.watermarks(&topics).unwrap();
                let t2 = t.elapsed();
                let (groups, _) = c.list_groups().unwrap();
                let t3 = t.elapsed();
                let ids: Vec<String> = groups.into_iter().map(|g| g.id).collect();
                let committed = c.committed(&ids);
                let t4 = t.elapsed();
                println!(
                    "metadata {:?} ({} topics), watermarks {:?} ({} partitions), list groups {:?} ({}), offset fetch {:?}",
                    t1,
                    topics.len(),
                    t2 - t1,
                    wm.len(),
                    t3 - t2,
                    ids.len(),
                    t4 - t3
                );
                drop(committed);
            }
        }
        n => {
            let rounds: usize = n.and_then(|x| x.parse().ok()).unwrap_or(5);
            let yaml = format!(
                "brokers: [\"{brokers}\"]\ntimeout: 60s\ngroups: {{ include: \"bench-group-.*\" }}\ntopics: {{ include: \"bench-.*\" }}\ndescribe_groups: false"
            );
            let v: serde_yaml::Value = serde_yaml::from_str(&yaml).unwrap();
            let cfg: KafkaLagConfig = causeway_core::config::decode(&v).unwrap();
            let mut cpu = cpu_seconds();
            let mut i = 0;
            bench_rounds(&cfg, rounds, |wall, snap| {
                let parts: usize = snap.topics.values().map(|t| t.len()).sum();
                let gps: usize = snap
                    .groups
                    .values()
                    .map(|g| g.partitions.values().map(|p| p.len()).sum::<usize>())
                    .sum();
                let now = cpu_seconds();
                println!(
                    "round {i}: {parts} partitions, {} groups, {gps} group-partitions: wall {:.3}s, CPU {:.2}s",
                    snap.groups.len(),
                    wall.as_secs_f64(),
                    now - cpu
                );
                cpu = now;
                i += 1;
            })
            .unwrap();
        }
    }
}

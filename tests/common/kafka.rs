//! A real Apache Kafka broker (or a cluster of them) per test, in KRaft
//! combined mode from the jars `scripts/peers.sh` fetches from Maven
//! Central, and a producer / consumer made with rdkafka to drive it.
#![allow(dead_code)]

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// Send `rec`; while librdkafka's queue is full, let it deliver and try again.
pub fn send_when_room<K, P>(p: &BaseProducer, mut rec: BaseRecord<'_, K, P>)
where
    K: rdkafka::message::ToBytes + ?Sized,
    P: rdkafka::message::ToBytes + ?Sized,
{
    loop {
        match p.send(rec) {
            Ok(()) => return,
            Err((e, r)) => {
                assert!(
                    matches!(
                        e,
                        rdkafka::error::KafkaError::MessageProduction(
                            rdkafka::types::RDKafkaErrorCode::QueueFull
                        )
                    ),
                    "produce: {e}"
                );
                p.poll(Duration::from_millis(10));
                rec = r;
            }
        }
    }
}

/// The broker's jars: `$CAUSEWAY_KAFKA_LIBS` (set by `scripts/peers.sh`,
/// which `scripts/test.sh` sources).
pub fn kafka_libs() -> PathBuf {
    let p = std::env::var("CAUSEWAY_KAFKA_LIBS")
        .map(PathBuf::from)
        .unwrap_or_default();
    assert!(
        p.is_dir(),
        "no Kafka broker jars: run the tests with scripts/test.sh, or `. scripts/peers.sh` first (it fetches Apache Kafka from Maven Central and sets CAUSEWAY_KAFKA_LIBS)"
    );
    p
}

/// One cluster id for every test broker: a cluster is told apart by its ports.
const CLUSTER_ID: &str = "Y2F1c2V3YXktdGVzdHMxMQ";

/// The JVM options of a test broker: a small heap, no JIT warm-up spent on
/// throughput nobody measures, and the serial collector (two cores).
const JVM: &[&str] = &[
    "-Xms128m",
    "-Xmx384m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Djava.awt.headless=true",
];

/// An Apache Kafka node (broker and controller) on 127.0.0.1 with its own
/// log directory.
pub struct Broker {
    /// The client listener's port.
    pub port: u16,
    /// The controller listener's port.
    pub controller_port: u16,
    /// The node id in its cluster (1-based).
    pub node_id: u32,
    dir: PathBuf,
    /// The `controller.quorum.voters` of its cluster.
    voters: String,
    /// Broker properties appended to the generated ones (listeners, SASL, ...).
    extra: String,
    /// How many brokers its cluster has (for the readiness check and replication defaults).
    size: usize,
    /// Extra arguments of `kafka-storage format` (`--add-scram ...`).
    format_args: Vec<String>,
    child: Option<Child>,
}

/// A test broker's log4j2 configuration: WARN and above to `broker.log`.
const LOG4J2: &str = "Configuration:\n  Appenders:\n    File:\n      name: F\n      fileName: broker.log\n      PatternLayout: { pattern: \"[%d] %p %m (%c)%n\" }\n  Loggers:\n    Root:\n      level: warn\n      AppenderRef: { ref: F }\n    Logger:\n      - { name: kafka.server.KafkaRaftServer, level: info, AppenderRef: { ref: F }, additivity: false }\n";

impl Broker {
    /// Start a one-node cluster in `dir` on free ports; returns when it
    /// answers metadata with itself as a broker.
    pub fn start(dir: &Path) -> Broker {
        Broker::start_with(dir, "")
    }

    /// [`Broker::start`] with `extra` lines appended to `server.properties`
    /// (a later key wins, so listeners can be replaced). `{port}` and
    /// `{controller_port}` in `extra` are replaced by the node's ports.
    pub fn start_with(dir: &Path, extra: &str) -> Broker {
        Broker::start_formatted(dir, extra, &[])
    }

    /// [`Broker::start_with`], with `format_args` given to `kafka-storage
    /// format` (e.g. `--add-scram`, credentials stored before the first start).
    pub fn start_formatted(dir: &Path, extra: &str, format_args: &[&str]) -> Broker {
        let port = free_port();
        let controller_port = free_port();
        let mut b = Broker {
            port,
            controller_port,
            node_id: 1,
            dir: dir.join("kafka-1"),
            voters: format!("1@127.0.0.1:{controller_port}"),
            extra: extra.to_string(),
            size: 1,
            format_args: format_args.iter().map(|a| a.to_string()).collect(),
            child: None,
        };
        b.format();
        b.restart();
        b.wait_ready();
        b
    }

    fn properties(&self) -> String {
        let rf = self.size.min(3);
        let isr = if rf > 1 { 2 } else { 1 };
        let mut p = format!(
            "process.roles=broker,controller
node.id={id}
controller.quorum.voters={voters}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=PLAINTEXT
log.dirs={dir}/data
num.partitions=1
offsets.topic.replication.factor={rf}
offsets.topic.num.partitions=10
transaction.state.log.replication.factor={rf}
transaction.state.log.min.isr={isr}
share.coordinator.state.topic.replication.factor={rf}
share.coordinator.state.topic.min.isr={isr}
group.initial.rebalance.delay.ms=0
log.flush.interval.messages=9223372036854775807
num.network.threads=2
num.io.threads=2
background.threads=2
log.cleaner.enable=false
auto.create.topics.enable=false
",
            id = self.node_id,
            voters = self.voters,
            port = self.port,
            cport = self.controller_port,
            dir = self.dir.display(),
        );
        if self.size > 1 {
            // A dead node is noticed in seconds rather than the defaults'
            // 9 s (controller) and 30 s (leaving the ISR), so a failover test
            // is not mostly waiting.
            p.push_str(
                "broker.session.timeout.ms=4000\nbroker.heartbeat.interval.ms=1000\nreplica.lag.time.max.ms=6000\n",
            );
        }
        p.push_str(
            &self
                .extra
                .replace("{port}", &self.port.to_string())
                .replace("{controller_port}", &self.controller_port.to_string()),
        );
        p
    }

    /// Write the node's configuration and format its log directory.
    fn format(&self) {
        std::fs::create_dir_all(&self.dir).expect("broker dir");
        std::fs::write(self.dir.join("server.properties"), self.properties()).expect("properties");
        std::fs::write(self.dir.join("log4j2.yaml"), LOG4J2).expect("log4j2");
        let out = Command::new("java")
            .args(JVM)
            .arg("-Dlog4j2.configurationFile=log4j2.yaml")
            .arg("-cp")
            .arg(kafka_libs().join("*"))
            .args(["kafka.tools.StorageTool", "format", "-t", CLUSTER_ID, "-c"])
            .arg("server.properties")
            .args(&self.format_args)
            .current_dir(&self.dir)
            .output()
            .expect("run kafka-storage format");
        assert!(
            out.status.success(),
            "kafka-storage format failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stop the broker with SIGKILL (no controlled shutdown) and wait for it.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Whether the broker process is running.
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Start (again) on the same ports and log directory; returns when the
    /// client port accepts connections (see [`Broker::wait_ready`]).
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "broker already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("stdout.log"))
            .expect("broker log");
        let child = Command::new("java")
            .args(JVM)
            .arg("-Dlog4j2.configurationFile=log4j2.yaml")
            .arg("-cp")
            .arg(kafka_libs().join("*"))
            .args(["kafka.Kafka", "server.properties"])
            .current_dir(&self.dir)
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start kafka");
        self.child = Some(child);
    }

    /// The node's log directory (`<dir>/data`: one folder per partition).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The broker's own log (WARN and above, and its start and stop lines).
    pub fn log(&self) -> String {
        let mut s = std::fs::read_to_string(self.dir.join("stdout.log")).unwrap_or_default();
        s.push_str(&std::fs::read_to_string(self.dir.join("broker.log")).unwrap_or_default());
        s
    }

    /// Wait until the node answers a metadata request listing every broker
    /// of its cluster (the quorum has a leader and the node registered).
    pub fn wait_ready(&mut self) {
        let start = Instant::now();
        let consumer: BaseConsumer = self.config().create().expect("metadata client");
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!("kafka exited with {status}:\n{}", self.log());
            }
            if let Ok(md) = consumer.fetch_metadata(None, Duration::from_millis(500)) {
                if md.brokers().len() >= self.size {
                    break;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "kafka not ready in 90s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        // The first group request creates `__consumer_offsets`; until its
        // partitions have leaders, group calls answer NotCoordinator. Wait
        // for a committed-offsets fetch of a probe group to succeed, so a
        // test's first commit does not race the topic's creation.
        let probe: BaseConsumer = self
            .config()
            .set("group.id", "causeway-test-probe")
            .create()
            .expect("probe");
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("__causeway_probe", 0);
        loop {
            if probe
                .committed_offsets(tpl.clone(), Duration::from_secs(2))
                .is_ok()
            {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(90),
                "kafka's group coordinator not ready in 90s:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn config(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.addr());
        c
    }

    /// Create a topic with `partitions` partitions.
    pub fn create_topic(&self, name: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.config().create().expect("admin");
        let topic = [NewTopic::new(name, partitions, TopicReplication::Fixed(1))];
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let res =
            futures::executor::block_on(admin.create_topics(&topic, &opts)).expect("create topic");
        for r in res {
            r.expect("topic created");
        }
    }

    /// A producer.
    pub fn producer(&self) -> BaseProducer {
        self.config()
            .set("linger.ms", "0")
            .create()
            .expect("producer")
    }

    /// Produce `n` messages to a partition; returns when all are acknowledged.
    pub fn produce(&self, p: &BaseProducer, topic: &str, partition: i32, n: usize) {
        for i in 0..n {
            let payload = format!("m{i}");
            send_when_room(
                p,
                BaseRecord::<(), str>::to(topic)
                    .partition(partition)
                    .payload(&payload),
            );
        }
        p.flush(Duration::from_secs(30)).expect("flush");
    }

    /// A consumer of `group` that reads and commits by hand.
    pub fn consumer(&self, group: &str) -> BaseConsumer {
        self.config()
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .create()
            .expect("consumer")
    }

    /// Consume `n` messages of one partition from the group's committed
    /// position (or the beginning), then commit the position after them.
    /// Returns the committed offset.
    pub fn consume(&self, c: &BaseConsumer, topic: &str, partition: i32, n: usize) -> i64 {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, partition);
        let committed = c
            .committed_offsets(tpl, Duration::from_secs(10))
            .expect("committed offsets");
        let start = match committed.elements().first().map(|e| e.offset()) {
            Some(Offset::Offset(o)) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        let mut assign = TopicPartitionList::new();
        assign
            .add_partition_offset(topic, partition, start)
            .expect("assign");
        c.assign(&assign).expect("assign");
        let mut next = match start {
            Offset::Offset(o) => o,
            _ => 0,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut got = 0;
        while got < n {
            assert!(Instant::now() < deadline, "consumed {got} of {n} in 30s");
            match c.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    assert_eq!(m.partition(), partition);
                    next = m.offset() + 1;
                    got += 1;
                }
                Some(Err(e)) => panic!("consume: {e}"),
                None => {}
            }
        }
        let mut commit = TopicPartitionList::new();
        commit
            .add_partition_offset(topic, partition, Offset::Offset(next))
            .expect("commit");
        c.commit(&commit, CommitMode::Sync).expect("commit");
        next
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A cluster of `n` Apache Kafka nodes, each broker and controller (a
/// quorum of `n` voters), on 127.0.0.1.
pub struct Cluster {
    pub brokers: Vec<Broker>,
}

impl Cluster {
    /// Start `n` nodes in `dir`; returns when every node answers metadata
    /// listing all `n` brokers.
    pub fn start(dir: &Path, n: usize) -> Cluster {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let voters = ports
            .iter()
            .enumerate()
            .map(|(i, (_, c))| format!("{}@127.0.0.1:{c}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let mut brokers: Vec<Broker> = ports
            .iter()
            .enumerate()
            .map(|(i, &(port, controller_port))| Broker {
                port,
                controller_port,
                node_id: i as u32 + 1,
                dir: dir.join(format!("kafka-{}", i + 1)),
                voters: voters.clone(),
                extra: String::new(),
                size: n,
                format_args: Vec::new(),
                child: None,
            })
            .collect();
        // Formatting runs a JVM each: in parallel, as the nodes start.
        std::thread::scope(|s| {
            for b in &brokers {
                s.spawn(move || b.format());
            }
        });
        for b in &mut brokers {
            b.restart();
        }
        for b in &mut brokers {
            b.wait_ready();
        }
        Cluster { brokers }
    }

    /// Every broker's address, comma-separated (a bootstrap list).
    pub fn bootstrap(&self) -> String {
        self.brokers
            .iter()
            .map(Broker::addr)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Create a topic with `partitions` partitions, `replicas` replicas each
    /// and `min.insync.replicas` = `min_isr`.
    pub fn create_topic(&self, name: &str, partitions: i32, replicas: i32, min_isr: u32) {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", self.bootstrap());
        let admin: AdminClient<DefaultClientContext> = c.create().expect("admin");
        let isr = min_isr.to_string();
        let topic = [
            NewTopic::new(name, partitions, TopicReplication::Fixed(replicas))
                .set("min.insync.replicas", &isr),
        ];
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
        let res =
            futures::executor::block_on(admin.create_topics(&topic, &opts)).expect("create topic");
        for r in res {
            r.expect("topic created");
        }
    }
}

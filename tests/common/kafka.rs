//! A real Kafka-protocol broker (tansu) per test, and a producer / consumer
//! made with rdkafka to drive it.
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

/// Where the tansu binary is: `$CAUSEWAY_TANSU`, `tansu` on PATH, or where `.ci/run` installs it.
pub fn tansu_bin() -> PathBuf {
    if let Ok(p) = std::env::var("CAUSEWAY_TANSU") {
        return PathBuf::from(p);
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for d in std::env::split_paths(&paths) {
            let p = d.join("tansu");
            if p.is_file() {
                return p;
            }
        }
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let p = PathBuf::from(home).join(".cache/tansu/bin/tansu");
    assert!(
        p.is_file(),
        "no tansu broker: set CAUSEWAY_TANSU, put `tansu` on PATH, or run `.ci/run` (it installs tansu 0.6.0 to ~/.cache/tansu)"
    );
    p
}

/// A tansu broker on 127.0.0.1 with SQLite storage in its own directory.
pub struct Broker {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Broker {
    /// Start a broker in `dir` on a free port; returns when it accepts connections.
    pub fn start(dir: &Path) -> Broker {
        let mut b = Broker {
            port: free_port(),
            dir: dir.to_path_buf(),
            child: None,
        };
        b.restart();
        b
    }

    /// `127.0.0.1:port`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Stop the broker (SIGKILL) and wait until its port is closed.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Start (again) on the same port and storage.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "broker already running");
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("tansu.log"))
            .expect("tansu log");
        let child = Command::new(tansu_bin())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
                "--storage-engine",
                "sqlite://tansu.db",
            ])
            .current_dir(&self.dir)
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start tansu");
        self.child = Some(child);
        let start = Instant::now();
        while std::net::TcpStream::connect(self.addr()).is_err() {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "tansu exited with {status}:\n{}",
                    std::fs::read_to_string(self.dir.join("tansu.log")).unwrap_or_default()
                );
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "tansu not listening in 30s"
            );
            std::thread::sleep(Duration::from_millis(20));
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
            let mut rec = BaseRecord::<(), str>::to(topic)
                .partition(partition)
                .payload(&payload);
            loop {
                match p.send(rec) {
                    Ok(()) => break,
                    Err((e, r)) => {
                        // Queue full: let librdkafka deliver, then try again.
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

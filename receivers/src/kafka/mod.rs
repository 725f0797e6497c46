//! The `kafka` receiver: OTLP requests read from Kafka topics by a consumer
//! group, the second tier of a scaled-out layout (see README "Scaling out").
//!
//! **Offsets are committed only when what was read is safe.** Every message
//! becomes a batch carrying an acknowledgement. It fires when every copy of
//! the data was delivered by its exporters (or written to a persistent
//! queue), or was decided and dropped by tail sampling, which holds the
//! acknowledgement with each pending trace. A partition's commit point is
//! its lowest offset not yet safe; it is committed every `commit_interval`.
//!
//! **A revoked partition is given up, not decided.** When the group takes a
//! partition away (a rebalance, or this instance stopping), the safe offsets
//! are committed at once and the acknowledgements still pending are
//! cancelled: tail sampling drops the traces that carry them without a
//! decision (`causeway_tail_sampling_traces_total{decision="revoked"}`),
//! and the partition's new owner reads them again from the committed
//! offset and decides them whole. Traces already decided here but not yet
//! delivered when that happens are delivered by both instances: they are
//! counted in `causeway_kafka_receiver_redelivered_messages_total`.
//!
//! **A delivery that an exporter gave up on holds the partition's commit
//! point** before that message for as long as this instance owns the
//! partition, so the next owner (after a restart) reads it again: nothing
//! is committed past data that was not delivered.
//!
//! A message that is not a valid OTLP request is counted, logged with its
//! topic, partition and offset, and skipped (its offset is committed).

pub mod config;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use bytes::Bytes;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::memory::{MemoryLimiter, Permit};
use causeway_core::model::{Ack, WeakAck};
use causeway_core::telemetry::{Counter, Gauge};
use causeway_core::topology::Output;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use rdkafka::consumer::{
    BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance, StreamConsumer,
};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

use config::{InitialOffset, KafkaEncoding, KafkaReceiverConfig, RebalanceStrategy};

causeway_core::metrics! {
    /// Messages read, by outcome.
    pub Messages: counter = "causeway_kafka_receiver_messages_total";
    /// Messages not yet safe when their partition was revoked: read again by the next owner.
    pub Redelivered: counter = "causeway_kafka_receiver_redelivered_messages_total";
    /// Offset commits, by outcome.
    pub Commits: counter = "causeway_kafka_receiver_commits_total";
    /// Rebalances, by kind.
    pub Rebalances: counter = "causeway_kafka_receiver_rebalances_total";
    /// Partitions this instance owns now.
    pub Assigned: gauge = "causeway_kafka_receiver_assigned_partitions";
    /// Bytes of the messages read and not yet safe.
    pub InFlightBytes: gauge = "causeway_kafka_receiver_in_flight_bytes";
    /// Times reading paused because memory was over the soft limit.
    pub Pauses: counter = "causeway_kafka_receiver_pauses_total";
}

/// `queued.max.messages.kbytes` unless `settings` say otherwise: what
/// librdkafka prefetches ahead of the receiver (its own default is 64 MiB),
/// outside the memory limiter's view until read.
const PREFETCH_KBYTES: &str = "16384";

pub use causeway_core::kafka::SIGNAL_HEADER;

/// Factory of the `kafka` receiver.
pub struct KafkaReceiverFactory;

#[async_trait]
impl ReceiverFactory for KafkaReceiverFactory {
    fn kind(&self) -> &'static str {
        "kafka"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::ALL
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<KafkaReceiverConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<KafkaReceiverConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: KafkaReceiverConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        Ok(Box::new(KafkaReceiver::new(cfg, &ctx)?))
    }
}

/// One message read and not yet safe.
struct Pending {
    ack: WeakAck,
    /// An exporter gave up on it: it holds the commit point.
    failed: bool,
    /// Its size.
    bytes: u64,
    /// Its bytes in the memory limiter's count, until it is safe.
    _held: Option<Permit>,
}

/// A partition this instance owns.
struct Owned {
    /// Changes each time the partition is assigned; stale acknowledgements
    /// (of a previous ownership) are ignored.
    epoch: u64,
    pending: BTreeMap<i64, Pending>,
    /// The offset after the last message read.
    next: Option<i64>,
    /// The offset last committed.
    committed: Option<i64>,
}

impl Owned {
    /// The offset to commit: the first one not safe, or after the last read.
    fn commit_point(&self) -> Option<i64> {
        self.pending.keys().next().copied().or(self.next)
    }

    /// The commit point, when it is past what was committed.
    fn due(&self) -> Option<i64> {
        self.commit_point()
            .filter(|c| self.committed.is_none_or(|old| *c > old))
    }

    /// Cancel every acknowledgement not yet fired (the next owner reads the
    /// messages again); returns how many were still live (not failed), and
    /// their bytes.
    fn give_up(&self) -> (usize, u64) {
        self.pending
            .values()
            .filter(|p| {
                p.ack.cancel();
                !p.failed
            })
            .fold((0, 0), |(n, b), p| (n + 1, b + p.bytes))
    }
}

#[derive(Default)]
struct State {
    owned: HashMap<(Arc<str>, i32), Owned>,
    epoch: u64,
    /// Messages pending and not failed, over all partitions.
    in_flight: usize,
    /// Their bytes.
    in_flight_bytes: u64,
    /// The receiver is stopping: nothing is committed any more.
    stopped: bool,
}

impl State {
    /// Offsets to commit now (those above what was committed).
    fn take_commits(&mut self) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for ((topic, p), o) in &mut self.owned {
            if let Some(c) = o.due() {
                if tpl
                    .add_partition_offset(topic, *p, Offset::Offset(c))
                    .is_ok()
                {
                    o.committed = Some(c);
                }
            }
        }
        tpl
    }
}

struct Ctx {
    id: String,
    state: Arc<Mutex<State>>,
    redelivered: Counter,
    revokes: Counter,
    assigns: Counter,
    assigned: Gauge,
    in_flight_bytes: Gauge,
    commit_failed: Counter,
    /// Range assignment: the topics are expected to be co-partitioned.
    copartitioned: bool,
}

impl ClientContext for Ctx {}

impl ConsumerContext for Ctx {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Revoke(revoked) = rebalance else {
            return;
        };
        self.revokes.add(1);
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        // Commit what is safe, then give up what is not: the next owner
        // reads it again from the committed offset.
        let mut commit = TopicPartitionList::new();
        let (mut given_up, mut bytes) = (0usize, 0u64);
        for e in revoked.elements() {
            let key: (Arc<str>, i32) = (Arc::from(e.topic()), e.partition());
            if let Some(o) = st.owned.remove(&key) {
                if let Some(c) = o.due() {
                    commit
                        .add_partition_offset(e.topic(), e.partition(), Offset::Offset(c))
                        .ok();
                }
                let (n, b) = o.give_up();
                given_up += n;
                bytes += b;
            }
        }
        st.in_flight = st.in_flight.saturating_sub(given_up);
        st.in_flight_bytes = st.in_flight_bytes.saturating_sub(bytes);
        self.in_flight_bytes
            .set(i64::try_from(st.in_flight_bytes).unwrap_or(i64::MAX));
        self.assigned.set(st.owned.len() as i64);
        let stopped = st.stopped;
        drop(st);
        self.redelivered.add(given_up as u64);
        if commit.count() > 0 && !stopped {
            if let Err(e) = consumer.commit(&commit, CommitMode::Sync) {
                self.commit_failed.add(1);
                tracing::warn!(receiver = %self.id, error = %e, "Committing the offsets of revoked partitions failed; their next owner reads from the previous commit (duplicates, no loss).");
            }
        }
        tracing::info!(receiver = %self.id, partitions = revoked.count(), given_up, "Partitions revoked; what was not safe is left to their next owner.");
    }

    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(assigned) = rebalance else {
            return;
        };
        self.assigns.add(1);
        // Co-partitioning (range assignment): every topic should bring the
        // same partition numbers.
        let mut by_topic: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for e in assigned.elements() {
            by_topic
                .entry(e.topic().to_string())
                .or_default()
                .push(e.partition());
        }
        by_topic.values_mut().for_each(|v| v.sort_unstable());
        let mut sets = by_topic.values();
        if let Some(first) = sets.next().filter(|_| self.copartitioned) {
            if sets.any(|s| s != first) {
                tracing::error!(receiver = %self.id, assignment = ?by_topic, "The topics' partitions assigned to this instance differ: give the spans and logs topics the same partition count, or a trace's log records reach another instance than its spans.");
            }
        }
        if let Ok(mut st) = self.state.lock() {
            st.epoch += 1;
            let epoch = st.epoch;
            for e in assigned.elements() {
                st.owned
                    .entry((Arc::from(e.topic()), e.partition()))
                    .or_insert_with(|| Owned {
                        epoch,
                        pending: BTreeMap::new(),
                        next: None,
                        committed: None,
                    });
            }
            self.assigned.set(st.owned.len() as i64);
        }
        tracing::info!(receiver = %self.id, partitions = assigned.count(), "Partitions assigned.");
    }
}

/// The receiver.
pub struct KafkaReceiver {
    id: String,
    cfg: KafkaReceiverConfig,
    consumer: StreamConsumer<Ctx>,
    state: Arc<Mutex<State>>,
    read: Counter,
    invalid: Counter,
    commits: Counter,
    commit_failed: Counter,
    gave_up: Counter,
    in_flight_bytes: Gauge,
    pauses: Counter,
    /// `service.memory_limiter`: reading pauses while memory is over its
    /// soft limit, and what was read counts until it is safe.
    limiter: Option<Arc<MemoryLimiter>>,
}

impl KafkaReceiver {
    fn new(cfg: KafkaReceiverConfig, ctx: &BuildContext) -> Result<Self, BoxError> {
        let id = ctx.id.to_string();
        let t = &ctx.telemetry;
        let messages =
            |outcome| t.counter(Messages, &[("receiver", id.as_str()), ("outcome", outcome)]);
        let commits =
            |outcome| t.counter(Commits, &[("receiver", id.as_str()), ("outcome", outcome)]);
        let rebalances = |kind| t.counter(Rebalances, &[("receiver", id.as_str()), ("kind", kind)]);
        let state = Arc::new(Mutex::new(State::default()));
        let in_flight_bytes = t.gauge(InFlightBytes, &[("receiver", id.as_str())]);
        let commit_failed = commits("failed");
        let context = Ctx {
            id: id.clone(),
            state: state.clone(),
            redelivered: t.counter(Redelivered, &[("receiver", id.as_str())]),
            revokes: rebalances("revoke"),
            assigns: rebalances("assign"),
            assigned: t.gauge(Assigned, &[("receiver", id.as_str())]),
            in_flight_bytes: in_flight_bytes.clone(),
            commit_failed: commit_failed.clone(),
            copartitioned: cfg.group_rebalance_strategy == RebalanceStrategy::Range,
        };
        let mut k = ClientConfig::new();
        k.set("queued.max.messages.kbytes", PREFETCH_KBYTES);
        for (key, v) in &cfg.settings {
            k.set(key, v);
        }
        k.set("bootstrap.servers", cfg.brokers.join(","))
            .set("group.id", &cfg.group_id)
            .set("client.id", &cfg.client_id)
            .set("enable.auto.commit", "false")
            .set(
                "auto.offset.reset",
                match cfg.initial_offset {
                    InitialOffset::Latest => "latest",
                    InitialOffset::Earliest => "earliest",
                },
            )
            .set(
                "partition.assignment.strategy",
                match cfg.group_rebalance_strategy {
                    RebalanceStrategy::Range => "range",
                    RebalanceStrategy::Roundrobin => "roundrobin",
                },
            );
        if let Some(instance) = &cfg.group_instance_id {
            k.set("group.instance.id", instance);
        }
        let consumer: StreamConsumer<Ctx> = k
            .create_with_context(context)
            .map_err(|e| format!("kafka receiver {id}: cannot create the consumer: {e}"))?;
        Ok(KafkaReceiver {
            read: messages("accepted"),
            invalid: messages("invalid"),
            gave_up: messages("not_delivered"),
            commits: commits("ok"),
            commit_failed,
            in_flight_bytes,
            pauses: t.counter(Pauses, &[("receiver", id.as_str())]),
            limiter: MemoryLimiter::shared(&ctx.shared),
            id,
            cfg,
            consumer,
            state,
        })
    }

    /// Commit what became safe (asynchronously; a failed commit is retried
    /// with the next one, which carries the same or later offsets).
    fn commit(&self, mode: CommitMode) {
        let tpl = match self.state.lock() {
            Ok(mut st) if !st.stopped => st.take_commits(),
            _ => return,
        };
        if tpl.count() == 0 {
            return;
        }
        match self.consumer.commit(&tpl, mode) {
            Ok(()) => self.commits.add(1),
            Err(e) => {
                self.commit_failed.add(1);
                // Forget what was "committed" so that the next round sends it again.
                if let Ok(mut st) = self.state.lock() {
                    for e in tpl.elements() {
                        if let Some(o) = st.owned.get_mut(&(Arc::from(e.topic()), e.partition())) {
                            o.committed = None;
                        }
                    }
                }
                tracing::warn!(receiver = %self.id, error = %e, "Committing offsets failed; retried with the next commit.");
            }
        }
    }

    /// The batch of one message, or why it is not valid OTLP.
    fn batch(&self, signal: Signal, payload: &[u8]) -> Result<Batch, String> {
        decode_message(self.cfg.encoding, signal, payload)
    }
}

/// One Kafka message's payload as a batch (`otlp_proto` or `otlp_json`,
/// checked as the OTLP receivers check a request), or why it is not valid
/// OTLP: the `kafka` receiver's framing, and a fuzz entry point.
pub fn decode_message(
    encoding: KafkaEncoding,
    signal: Signal,
    payload: &[u8],
) -> Result<Batch, String> {
    use opentelemetry_proto::tonic::collector::{
        logs::v1::ExportLogsServiceRequest, metrics::v1::ExportMetricsServiceRequest,
        trace::v1::ExportTraceServiceRequest,
    };
    use prost::Message as _;
    let body = match encoding {
        KafkaEncoding::OtlpProto => Bytes::copy_from_slice(payload),
        KafkaEncoding::OtlpJson => {
            let bad = |e: serde_json::Error| format!("invalid OTLP/JSON {signal} request: {e}");
            Bytes::from(match signal {
                Signal::Traces => serde_json::from_slice::<ExportTraceServiceRequest>(payload)
                    .map_err(bad)?
                    .encode_to_vec(),
                Signal::Logs => serde_json::from_slice::<ExportLogsServiceRequest>(payload)
                    .map_err(bad)?
                    .encode_to_vec(),
                Signal::Metrics => serde_json::from_slice::<ExportMetricsServiceRequest>(payload)
                    .map_err(bad)?
                    .encode_to_vec(),
                Signal::Profiles => {
                    return Err("profiles are not read from Kafka as OTLP/JSON".to_string())
                }
            })
        }
    };
    let (body, items, _) = crate::otlp::check(signal, body, |_| {}).map_err(|e| match e {
        crate::otlp::Refused::Invalid(m) => m,
        other => format!("{other:?}"),
    })?;
    Ok(Batch::from_encoded(signal, body, items))
}

/// The signal a message carries: its header's, else its topic's only one.
fn signal_of(
    m: &rdkafka::message::BorrowedMessage<'_>,
    signals: &[Signal],
) -> Result<Signal, String> {
    let header = m.headers().and_then(|h| {
        h.iter()
            .find(|x| x.key == SIGNAL_HEADER)
            .and_then(|x| x.value)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    });
    match header.as_deref() {
        Some(name) => causeway_core::kafka::signal_of(name)
            .ok_or_else(|| format!("unknown {SIGNAL_HEADER} header {name:?}")),
        None if signals.len() == 1 => Ok(signals[0]),
        None => Err(format!(
            "no {SIGNAL_HEADER} header on a topic that carries several signals"
        )),
    }
}

impl KafkaReceiver {
    /// Subscribe to the topics of the signals the pipelines take; which
    /// signals each carries.
    fn subscribe(&self, out: &Output) -> Result<BTreeMap<String, Vec<Signal>>, BoxError> {
        let mut topics: BTreeMap<String, Vec<Signal>> = BTreeMap::new();
        for s in [Signal::Traces, Signal::Logs, Signal::Metrics] {
            if out.accepts(s) {
                topics.entry(self.cfg.topic_of(s)).or_default().push(s);
            }
        }
        let names: Vec<&str> = topics.keys().map(String::as_str).collect();
        self.consumer
            .subscribe(&names)
            .map_err(|e| format!("kafka receiver {}: subscribe to {names:?}: {e}", self.id))?;
        tracing::info!(receiver = %self.id, topics = ?names, group = %self.cfg.group_id, "Consuming.");
        Ok(topics)
    }

    /// Stopping: commit what is safe, give up the rest (the group's next
    /// owner of each partition reads it again); then the group is left.
    fn stop(&self) {
        self.commit(CommitMode::Sync);
        if let Ok(mut st) = self.state.lock() {
            st.stopped = true;
            let given_up: usize = st.owned.values().map(|o| o.give_up().0).sum();
            tracing::info!(receiver = %self.id, given_up, "Stopped; messages not yet safe are read again by the partitions' next owner.");
        }
    }
}

type Done =
    std::pin::Pin<Box<dyn std::future::Future<Output = ((Arc<str>, i32), u64, i64, bool)> + Send>>;

#[async_trait]
impl Receiver for KafkaReceiver {
    async fn run(
        self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let topics = self.subscribe(&out)?;
        let mut done: FuturesUnordered<Done> = FuturesUnordered::new();
        let mut tick = tokio::time::interval(self.cfg.commit_interval.get());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let max = self.cfg.max_in_flight_messages;
        // Over the memory limiter's soft limit, the assigned partitions are
        // paused (librdkafka stops fetching them) and looked at again every
        // check interval; under it, they resume.
        let mut paused = false;
        let mut check = tokio::time::interval(
            self.limiter
                .as_ref()
                .map_or(std::time::Duration::from_secs(1), |l| l.check_interval()),
        );
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let room = self
                .state
                .lock()
                .map(|s| s.in_flight < max)
                .unwrap_or(false);
            let memory = self.limiter.as_ref().is_none_or(|l| l.below_soft());
            if memory == paused {
                paused = !memory;
                self.pause(paused);
            }
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some((key, epoch, offset, ok)) = done.next(), if !done.is_empty() => {
                    self.settle(key, epoch, offset, ok);
                }
                _ = tick.tick() => self.commit(CommitMode::Async),
                _ = check.tick(), if paused => {}
                m = self.consumer.recv(), if room && !paused => {
                    let m = match m {
                        Ok(m) => m,
                        Err(e) => {
                            tracing::warn!(receiver = %self.id, error = %e, "Reading from Kafka failed; librdkafka retries.");
                            continue;
                        }
                    };
                    let topic: Arc<str> = Arc::from(m.topic());
                    let (partition, offset) = (m.partition(), m.offset());
                    let signals = topics.get(&*topic).map(Vec::as_slice).unwrap_or(&[]);
                    let signal = signal_of(&m, signals);
                    let payload = m.payload().unwrap_or(&[]);
                    let bytes = payload.len() as u64;
                    let held = self.limiter.as_ref().map(|l| l.hold(bytes));
                    let batch = signal.and_then(|s| {
                        if !out.accepts(s) {
                            return Err(format!("a {s} message, and no pipeline of this receiver takes {s}"));
                        }
                        self.batch(s, payload)
                    });
                    drop(m);
                    let batch = match batch {
                        Ok(b) => b,
                        Err(reason) => {
                            if self.record(&topic, partition, offset, None).is_none() {
                                continue;
                            }
                            self.invalid.add(1);
                            tracing::warn!(receiver = %self.id, topic = %topic, partition, offset, reason = %reason, "Skipped a Kafka message that is not a valid OTLP request; its offset is committed.");
                            continue;
                        }
                    };
                    let (ack, rx) = Ack::new();
                    let Some(epoch) = self.record(&topic, partition, offset, Some((ack.downgrade(), bytes, held))) else {
                        // Not ours any more (revoked meanwhile): the next owner reads it.
                        continue;
                    };
                    let key = (topic, partition);
                    done.push(Box::pin(async move {
                        let ok = rx.await.unwrap_or(false);
                        (key, epoch, offset, ok)
                    }));
                    self.read.add(1);
                    if !out.send_until_stopped(batch.with_ack(ack.clone()), &shutdown).await {
                        // Not sent: never count it as safe.
                        ack.cancel();
                        break;
                    }
                    drop(ack);
                }
            }
        }
        self.stop();
        drop(out);
        self.consumer.unsubscribe();
        Ok(())
    }
}

impl KafkaReceiver {
    /// Note a message read: pending with its acknowledgement, or (without
    /// one) safe at once. `None` when the partition is not owned.
    fn record(
        &self,
        topic: &Arc<str>,
        partition: i32,
        offset: i64,
        pending: Option<(WeakAck, u64, Option<Permit>)>,
    ) -> Option<u64> {
        let mut st = self.state.lock().ok()?;
        // Only partitions assigned to this instance are tracked (a message
        // of one revoked meanwhile is left to its new owner).
        let o = st.owned.get_mut(&(topic.clone(), partition))?;
        o.next = Some(o.next.map_or(offset + 1, |n| n.max(offset + 1)));
        let e = o.epoch;
        if let Some((ack, bytes, held)) = pending {
            o.pending.insert(
                offset,
                Pending {
                    ack,
                    failed: false,
                    bytes,
                    _held: held,
                },
            );
            st.in_flight += 1;
            st.in_flight_bytes += bytes;
            self.in_flight_bytes
                .set(i64::try_from(st.in_flight_bytes).unwrap_or(i64::MAX));
        }
        Some(e)
    }

    /// An acknowledgement fired.
    fn settle(&self, key: (Arc<str>, i32), epoch: u64, offset: i64, ok: bool) {
        let Ok(mut st) = self.state.lock() else {
            return;
        };
        if st.stopped {
            return;
        }
        let Some(o) = st.owned.get_mut(&key).filter(|o| o.epoch == epoch) else {
            return;
        };
        let mut freed = 0;
        if ok {
            if let Some(p) = o.pending.remove(&offset) {
                if !p.failed {
                    st.in_flight -= 1;
                    freed = p.bytes;
                }
            }
        } else if let Some(p) = o.pending.get_mut(&offset) {
            if !p.failed {
                p.failed = true;
                // The data is gone; the offset alone holds the commit point.
                p._held = None;
                freed = p.bytes;
                st.in_flight -= 1;
                self.gave_up.add(1);
                tracing::error!(receiver = %self.id, topic = %key.0, partition = key.1, offset, "An exporter gave up on data read from this message: the partition's committed offset stays before it while this instance owns it, so that its next owner reads it again.");
            }
        }
        st.in_flight_bytes = st.in_flight_bytes.saturating_sub(freed);
        self.in_flight_bytes
            .set(i64::try_from(st.in_flight_bytes).unwrap_or(i64::MAX));
    }

    /// Pause (or resume) every partition assigned now.
    fn pause(&self, pause: bool) {
        let assignment = match self.consumer.assignment() {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(receiver = %self.id, error = %e, "Cannot read the assignment to pause or resume it.");
                return;
            }
        };
        let r = if pause {
            self.pauses.add(1);
            self.consumer.pause(&assignment)
        } else {
            self.consumer.resume(&assignment)
        };
        if let Err(e) = r {
            tracing::warn!(receiver = %self.id, error = %e, pause, "Pausing or resuming the partitions failed.");
        }
        let (rss, soft) = self
            .limiter
            .as_ref()
            .map_or((0, 0), |l| (l.estimate(), l.limits().1));
        if pause {
            tracing::info!(receiver = %self.id, partitions = assignment.count(), memory = rss, soft_limit = soft, "Memory over the soft limit: reading paused (the partitions keep the data).");
        } else {
            tracing::info!(receiver = %self.id, partitions = assignment.count(), memory = rss, soft_limit = soft, "Memory under the soft limit: reading resumed.");
        }
    }
}

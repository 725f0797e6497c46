//! The `kafka_lag` receiver: reads a Kafka cluster's consumer groups every
//! `interval` and emits OTLP metrics named as the Collector's
//! kafkametricsreceiver names them, plus what it does not compute: time lag
//! (`kafka.consumer_group.lag_seconds`), Burrow's status
//! (`kafka.consumer_group.status`, `kafka.consumer_group.partition_status`),
//! the lag alarm (`kafka.consumer_group.lag_alarm`) and retry storms
//! (`kafka.topic.produce_rate`, `kafka.topic.retry_storm`).
//!
//! A round is: Metadata, two batched ListOffsets (earliest, latest),
//! ListGroups, OffsetFetch per group (all in flight at once) and, when
//! enabled, DescribeGroups for member counts. It runs on tokio's blocking
//! pool (librdkafka calls block). A failed round is reported
//! (`causeway_kafka_lag_errors_total`, `causeway_kafka_lag_up` 0, a warning)
//! and the next one is tried at the next interval; nothing stalls the daemon.
//!
//! Status codes: 0 NOTFOUND (fewer samples than the window), 1 OK, 2 WARN
//! (offsets advance, lag never comes down), 3 ERR (group: a partition is
//! STOP, STALL or REWIND), 4 STOP (no commit progress for longer than the
//! span progress was seen over, with lag), 5 STALL (members there but the
//! offset does not move, with lag), 6 REWIND (the committed offset went back).

pub mod analysis;
pub mod client;
pub mod config;
pub mod metrics;
pub mod tracker;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::{Counter, Gauge, Registry};
use causeway_core::topology::Output;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

use crate::ReceiverError;
use client::Client;
use config::{Filter, KafkaLagConfig};
use tracker::{Round, Settings, Tracker};

causeway_core::metrics! {
    /// kafka_lag collection rounds, by outcome.
    pub Rounds: counter = "causeway_kafka_lag_rounds_total";
    /// Errors of kafka_lag talking to the cluster, by operation.
    pub Errors: counter = "causeway_kafka_lag_errors_total";
    /// 1 when the last kafka_lag round read the cluster.
    pub Up: gauge = "causeway_kafka_lag_up";
    /// Wall time of the last kafka_lag round, milliseconds.
    pub RoundMs: gauge = "causeway_kafka_lag_round_duration_ms";
}

/// Factory of the `kafka_lag` receiver.
pub struct KafkaLagFactory;

#[async_trait]
impl ReceiverFactory for KafkaLagFactory {
    fn kind(&self) -> &'static str {
        "kafka_lag"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Metrics)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<KafkaLagConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<KafkaLagConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: KafkaLagConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let id = ctx.id.to_string();
        let (settings, scope) = plan(&cfg)?;
        let rounds = |outcome: &str| {
            ctx.telemetry
                .counter(Rounds, &[("component", &id), ("outcome", outcome)])
        };
        Ok(Box::new(KafkaLagReceiver {
            ok: rounds("ok"),
            failed: rounds("error"),
            skipped: rounds("memory_limit"),
            limiter: causeway_core::memory::MemoryLimiter::shared(&ctx.shared),
            up: ctx.telemetry.gauge(Up, &[("component", &id)]),
            round_ms: ctx.telemetry.gauge(RoundMs, &[("component", &id)]),
            telemetry: ctx.telemetry.clone(),
            state: Some(State {
                client: None,
                tracker: Tracker::new(settings),
                scope,
            }),
            id,
            cfg,
        }))
    }
}

/// The analysis settings and what a round reads, from the config.
fn plan(cfg: &KafkaLagConfig) -> Result<(Settings, Scope), BoxError> {
    let settings = Settings {
        window: cfg.window,
        allowed_lag: cfg.allowed_lag,
        lag_threshold: cfg.lag_threshold,
        growth_window: cfg.growth_window.get().as_secs_f64(),
        retry_topics: regex::Regex::new(&format!("^(?:{})$", cfg.retry_topics))?,
        retry_rate_threshold: cfg.retry_rate_threshold,
    };
    let scope = Scope {
        groups: cfg.groups.compile()?,
        topics: cfg.topics.compile()?,
        describe: cfg.describe_groups,
        describe_after: None,
        known_groups: Vec::new(),
    };
    Ok((settings, scope))
}

/// After a failed DescribeGroups, how long to go without member counts.
const DESCRIBE_BACKOFF: Duration = Duration::from_secs(300);

/// What a round reads, and what it remembers of the listing.
#[derive(Debug, Clone)]
struct Scope {
    groups: Filter,
    topics: Filter,
    describe: bool,
    /// No DescribeGroups before this (it failed).
    describe_after: Option<Instant>,
    /// The last complete group listing.
    known_groups: Vec<client::GroupListing>,
}

/// Moved into the blocking pool for each round and back.
struct State {
    client: Option<Arc<Client>>,
    tracker: Tracker,
    scope: Scope,
}

struct KafkaLagReceiver {
    id: String,
    cfg: KafkaLagConfig,
    telemetry: Registry,
    ok: Counter,
    failed: Counter,
    /// Rounds not made because memory was over the soft limit.
    skipped: Counter,
    /// `service.memory_limiter`: a round (whose answers grow with the
    /// cluster's groups and partitions) starts only under its soft limit.
    limiter: Option<std::sync::Arc<causeway_core::memory::MemoryLimiter>>,
    up: Gauge,
    round_ms: Gauge,
    state: Option<State>,
}

/// A round's outcome: the snapshot (when the cluster answered) and every
/// error met, fatal to the round or not.
struct Outcome {
    snapshot: Option<metrics::Snapshot>,
    errors: Vec<ReceiverError>,
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Read the cluster once. Blocking.
fn collect(client: &Client, scope: &mut Scope, tracker: &mut Tracker) -> Outcome {
    let mut errors = Vec::new();
    let round = (|| -> Result<Round, ReceiverError> {
        let mut topics = client.topics()?;
        topics.retain(|t, _| scope.topics.matches(t));
        let watermarks = client.watermarks(&topics)?;
        let (mut groups, missing) = client.list_groups()?;
        groups.retain(|g| scope.groups.matches(&g.id));
        if missing.is_empty() {
            scope.known_groups = groups.clone();
        } else {
            // A broker did not list its groups: keep reading the groups known
            // from earlier rounds rather than losing their windows.
            for m in missing {
                errors.push(ReceiverError::Kafka {
                    op: "list groups",
                    message: m,
                });
            }
            for g in &scope.known_groups {
                if !groups.iter().any(|x| x.id == g.id) {
                    groups.push(g.clone());
                }
            }
            groups.sort_by(|a, b| a.id.cmp(&b.id));
        }
        let ids: Vec<String> = groups.iter().map(|g| g.id.clone()).collect();
        let mut committed = BTreeMap::new();
        for (g, r) in client.committed(&ids) {
            match r {
                Ok(c) => {
                    committed.insert(g, c);
                }
                Err(e) => errors.push(e),
            }
        }
        let describe = scope.describe
            && !ids.is_empty()
            && scope.describe_after.is_none_or(|t| Instant::now() >= t);
        let members = if describe {
            match client.members(&ids) {
                Ok(m) => {
                    scope.describe_after = None;
                    Some(m)
                }
                Err(e) => {
                    // Brokers without DescribeGroups drop the connection, which
                    // disturbs the next requests: ask again only after a while.
                    scope.describe_after = Some(Instant::now() + DESCRIBE_BACKOFF);
                    errors.push(e);
                    None
                }
            }
        } else {
            None
        };
        Ok(Round {
            topics,
            watermarks,
            groups,
            committed,
            members,
        })
    })();
    match round {
        Ok(round) => Outcome {
            snapshot: Some(tracker.observe(&round, now_secs())),
            errors,
        },
        Err(e) => {
            errors.push(e);
            Outcome {
                snapshot: None,
                errors,
            }
        }
    }
}

impl KafkaLagReceiver {
    fn report(&self, errors: &[ReceiverError], fatal: bool, consecutive: u64) {
        for e in errors {
            let op = match e {
                ReceiverError::Kafka { op, .. } => *op,
                _ => "other",
            };
            self.telemetry
                .counter(Errors, &[("component", &self.id), ("op", op)])
                .add(1);
            if fatal {
                tracing::warn!(receiver = %self.id, error = %e, consecutive_failures = consecutive, "Kafka cluster not read this round; retrying at the next interval.");
            } else {
                tracing::debug!(receiver = %self.id, error = %e, "Part of a Kafka round failed; the rest is reported.");
            }
        }
    }
}

#[async_trait]
impl Receiver for KafkaLagReceiver {
    async fn run(
        mut self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let mut state = self.state.take().ok_or("kafka_lag: already running")?;
        let settings = self.cfg.client_settings();
        let timeout = self.cfg.timeout.get();
        let mut tick = crate::polling::rounds(self.cfg.interval.get());
        let mut failures = 0u64;
        let mut partial_logged = std::collections::HashSet::new();
        let mut memory_logged = false;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tick.tick() => {}
            }
            if self.limiter.as_ref().is_some_and(|l| !l.below_soft()) {
                self.skipped.add(1);
                if !std::mem::replace(&mut memory_logged, true) {
                    tracing::warn!(receiver = %self.id, "Memory over the soft limit: kafka_lag skips its rounds until it falls.");
                }
                continue;
            }
            memory_logged = false;
            let started = Instant::now();
            let settings = settings.clone();
            let task = tokio::task::spawn_blocking(move || {
                let client = match &state.client {
                    Some(c) => Ok(c.clone()),
                    None => Client::new(&settings, timeout).map(Arc::new),
                };
                let outcome = match client {
                    Ok(c) => {
                        state.client = Some(c.clone());
                        collect(&c, &mut state.scope, &mut state.tracker)
                    }
                    Err(e) => Outcome {
                        snapshot: None,
                        errors: vec![e],
                    },
                };
                (state, outcome)
            });
            // A round in progress at shutdown is left to finish on its own
            // (bounded by `timeout` per request).
            let (s, outcome) = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = task => r?,
            };
            state = s;
            self.round_ms
                .set(i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX));
            let Some(snapshot) = outcome.snapshot else {
                failures += 1;
                self.failed.add(1);
                self.up.set(0);
                self.report(&outcome.errors, true, failures);
                continue;
            };
            if failures > 0 {
                tracing::info!(receiver = %self.id, failed_rounds = failures, "Kafka cluster read again.");
            }
            failures = 0;
            self.ok.add(1);
            self.up.set(1);
            for e in &outcome.errors {
                // e.g. a broker without DescribeGroups: said once per kind, counted always.
                if let ReceiverError::Kafka { op, .. } = e {
                    if partial_logged.insert(*op) {
                        tracing::warn!(receiver = %self.id, error = %e, "Part of the Kafka round failed (counted in causeway_kafka_lag_errors_total); the rest is reported.");
                    }
                }
            }
            self.report(&outcome.errors, false, 0);
            let rm = metrics::to_metrics(&snapshot, &self.cfg.cluster_alias);
            if !out
                .send_until_stopped(Batch::from_metrics(vec![rm]), &shutdown)
                .await
            {
                return Ok(());
            }
        }
        Ok(())
    }
}

/// For the benchmark (`examples/kafka_lag_round.rs`): read the cluster
/// `rounds` times with one client, calling `each` after every round with its
/// wall time and snapshot.
pub fn bench_rounds(
    cfg: &KafkaLagConfig,
    rounds: usize,
    mut each: impl FnMut(Duration, &metrics::Snapshot),
) -> Result<(), BoxError> {
    let (settings, mut scope) = plan(cfg)?;
    let client = Client::new(&cfg.client_settings(), cfg.timeout.get())?;
    let mut tracker = Tracker::new(settings);
    for _ in 0..rounds {
        let t = Instant::now();
        let o = collect(&client, &mut scope, &mut tracker);
        let Some(snap) = o.snapshot else {
            return Err(o
                .errors
                .into_iter()
                .next()
                .map_or_else(|| "round failed".into(), |e| e.into()));
        };
        each(t.elapsed(), &snap);
    }
    Ok(())
}

//! Delivery to one exporter: a bounded sending queue, concurrent consumers,
//! per-attempt timeouts and retries with backoff (the Collector's
//! exporterhelper).

use std::sync::Arc;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use super::disk_queue::DiskQueue;
use crate::component::{ExportError, Exporter};
use crate::config::DeliveryConfig;
use crate::model::Batch;
use crate::retry::Backoff;
use crate::telemetry::registry::{
    Counter, ExporterEnqueueFailed, ExporterQueueCapacity, ExporterQueueSize, ExporterRejected,
    ExporterRetries, ExporterSendFailed, ExporterSent, Gauge, QueueCorrupt, Registry,
    SignalCounters,
};

/// A batch in the sending queue, with what it holds of the queue's budgets
/// (its `sizer`'s, when that is `items` or `bytes`, and the `max_bytes`
/// bound), released when the batch leaves the queue.
type Queued = (Batch, Vec<OwnedSemaphorePermit>);

/// The budget of a queue whose `sizer` is `items` or `bytes`.
#[derive(Clone)]
pub(crate) struct Budget {
    sem: Arc<Semaphore>,
    capacity: usize,
    bytes: bool,
}

impl Budget {
    /// Units of `batch`, at most the whole budget (a batch bigger than the
    /// queue still goes through, alone).
    fn units(&self, batch: &Batch) -> u32 {
        let n = if self.bytes {
            batch.encoded_len()
        } else {
            batch.items()
        };
        n.clamp(1, self.capacity).min(u32::MAX as usize) as u32
    }

    /// Units queued now.
    fn used(&self) -> usize {
        self.capacity - self.sem.available_permits().min(self.capacity)
    }
}

/// The sending side of an exporter's queue, shared by the pipelines using it.
#[derive(Clone)]
pub(crate) struct ExporterQueue {
    pub(crate) id: String,
    pub(crate) tx: mpsc::Sender<Queued>,
    pub(crate) budget: Option<Budget>,
    /// The bound in encoded bytes of an in-memory queue whose `sizer`
    /// counts batches or items (`sending_queue.max_bytes`).
    pub(crate) bytes: Option<Budget>,
    pub(crate) disk: Option<Arc<DiskQueue>>,
    pub(crate) block: bool,
    pub(crate) enqueue_failed: SignalCounters,
    pub(crate) size: Gauge,
}

impl ExporterQueue {
    /// Enqueue; waits for room when `block_on_overflow`, else drops and counts.
    /// With a persistent queue the batch is written to disk (and its
    /// acknowledgement released: it is durable now).
    pub(crate) async fn push(&self, batch: Batch) {
        let (signal, items) = (batch.signal(), batch.items());
        if let Some(disk) = &self.disk {
            if let Err(error) = disk.push(signal, items, &batch.to_encoded()).await {
                batch.mark_failed();
                self.enqueue_failed.get(signal).add(items as u64);
                tracing::error!(exporter = %self.id, items, %error, "Cannot write to the persistent queue; batch dropped.");
            }
            self.size.set(disk.size_bytes() as i64);
            return;
        }
        let mut permits = Vec::with_capacity(2);
        for b in self.budget.iter().chain(self.bytes.iter()) {
            let n = b.units(&batch);
            let got = if self.block {
                b.sem.clone().acquire_many_owned(n).await.ok()
            } else {
                b.sem.clone().try_acquire_many_owned(n).ok()
            };
            match got {
                Some(p) => permits.push(p),
                None => {
                    batch.mark_failed();
                    self.enqueue_failed.get(signal).add(items as u64);
                    tracing::warn!(exporter = %self.id, items, reason = "sending queue is full", "Batch dropped (block_on_overflow is off).");
                    return;
                }
            }
        }
        let batch = (batch, permits);
        if self.block {
            if self.tx.send(batch).await.is_err() {
                self.enqueue_failed.get(signal).add(items as u64);
                tracing::error!(exporter = %self.id, items, "Exporter stopped; batch dropped.");
            }
        } else if let Err(e) = self.tx.try_send(batch) {
            self.enqueue_failed.get(signal).add(items as u64);
            let reason = match e {
                mpsc::error::TrySendError::Full(_) => "sending queue is full",
                mpsc::error::TrySendError::Closed(_) => "exporter stopped",
            };
            tracing::warn!(exporter = %self.id, items, reason, "Batch dropped (block_on_overflow is off).");
        }
        let fill = match &self.budget {
            Some(b) => b.used(),
            None => self.tx.max_capacity() - self.tx.capacity(),
        };
        self.size.set(fill as i64);
    }
}

struct Counters {
    sent: SignalCounters,
    failed: SignalCounters,
    rejected: SignalCounters,
    retries: Counter,
}

/// Create the queue of an exporter and the task that drains it. The task
/// ends when every sender is dropped and the queue is empty, or when
/// `hard_stop` fires (what is left is counted as failed).
///
/// `memory_limit` (the memory limiter's) sets the in-memory queue's byte
/// bound when `sending_queue.max_bytes` does not.
pub(crate) fn spawn(
    id: String,
    exporter: Arc<dyn Exporter>,
    delivery: DeliveryConfig,
    telemetry: &Registry,
    hard_stop: CancellationToken,
    memory_limit: Option<u64>,
) -> (ExporterQueue, tokio::task::JoinHandle<()>) {
    let disk = open_disk(&id, &delivery, telemetry);
    let (budget, bytes) = budgets(&delivery, disk.is_none(), memory_limit);
    // With an items or bytes budget the channel only needs to hold the
    // batches the budget lets in; it stays bounded either way.
    let capacity = match (&budget, delivery.queue.enabled) {
        (_, false) => 1,
        (None, true) => delivery.queue.queue_size,
        (Some(b), true) => b.capacity.min(1 << 16),
    };
    let (tx, rx) = mpsc::channel::<Queued>(capacity);
    let size = telemetry.gauge(ExporterQueueSize, &[("component", &id)]);
    telemetry
        .gauge(ExporterQueueCapacity, &[("component", &id)])
        .set(budget.as_ref().map_or(capacity, |b| b.capacity) as i64);
    let queue = ExporterQueue {
        id: id.clone(),
        tx,
        budget: budget.clone(),
        bytes,
        disk: disk.clone(),
        block: delivery.queue.block_on_overflow || !delivery.queue.enabled,
        enqueue_failed: telemetry.signal_counters(ExporterEnqueueFailed, &id),
        size: size.clone(),
    };
    let counters = Arc::new(Counters::new(telemetry, &id));
    let consumers = if delivery.queue.enabled {
        delivery.queue.num_consumers
    } else {
        1
    };
    let slots = Arc::new(Semaphore::new(consumers));
    let handle = tokio::spawn(async move {
        if let Some(disk) = disk {
            run_disk(
                id, exporter, delivery, disk, rx, counters, size, hard_stop, slots,
            )
            .await;
            return;
        }
        let runner = Runner {
            id,
            exporter,
            delivery,
            counters,
            hard_stop,
        };
        runner.run_memory(rx, budget, size, slots).await;
    });
    (queue, handle)
}

/// The persistent queue of `sending_queue.storage`, if it opens (else the
/// queue is in memory, said in the log).
fn open_disk(id: &str, delivery: &DeliveryConfig, telemetry: &Registry) -> Option<Arc<DiskQueue>> {
    delivery.queue.storage.as_ref().and_then(|dir| {
        let path = std::path::Path::new(dir).join(id.replace(['/', '\\'], "_"));
        let dropped = telemetry.counter(ExporterEnqueueFailed, &[("component", id), ("signal", "any")],
        );
        let corrupt = telemetry.counter(QueueCorrupt, &[("component", id)],
        );
        let opened = DiskQueue::open(
            &path,
            delivery.queue.max_size.0,
            delivery.queue.when_full,
            delivery.queue.fsync,
            dropped,
            corrupt,
        );
        match opened {
            Ok((q, problems)) => {
                for problem in problems {
                    tracing::error!(exporter = %id, queue = %path.display(), %problem, "Persistent queue damaged; skipped what could not be read.");
                }
                tracing::info!(exporter = %id, queue = %path.display(), bytes = q.size_bytes(), "Persistent queue open.");
                Some(Arc::new(q))
            }
            Err(error) => {
                tracing::error!(exporter = %id, queue = %path.display(), %error, "Cannot open the persistent queue; using memory.");
                None
            }
        }
    })
}

/// The queue's budget in its sizer's units, and a second bound in bytes
/// when the sizer counts batches or items: a thousand batches can
/// otherwise be gigabytes.
fn budgets(
    delivery: &DeliveryConfig,
    in_memory: bool,
    memory_limit: Option<u64>,
) -> (Option<Budget>, Option<Budget>) {
    let sizer = delivery.queue.sizer;
    let budget = (delivery.queue.enabled && sizer != crate::config::Sizer::Requests).then(|| {
        let capacity = delivery.queue.queue_size.clamp(1, Semaphore::MAX_PERMITS);
        Budget {
            sem: Arc::new(Semaphore::new(capacity)),
            capacity,
            bytes: sizer == crate::config::Sizer::Bytes,
        }
    });
    let bytes =
        (delivery.queue.enabled && in_memory && sizer != crate::config::Sizer::Bytes).then(|| {
            let max_bytes = delivery.queue.max_bytes.map_or_else(
                || crate::config::default_queue_max_bytes(memory_limit),
                |b| b.0,
            );
            let capacity = (max_bytes as usize).clamp(1, Semaphore::MAX_PERMITS);
            Budget {
                sem: Arc::new(Semaphore::new(capacity)),
                capacity,
                bytes: true,
            }
        });
    (budget, bytes)
}

impl Counters {
    fn new(telemetry: &Registry, id: &str) -> Self {
        Counters {
            sent: telemetry.signal_counters(ExporterSent, id),
            failed: telemetry.signal_counters(ExporterSendFailed, id),
            rejected: telemetry.signal_counters(ExporterRejected, id),
            retries: telemetry.counter(ExporterRetries, &[("component", id)]),
        }
    }
}

/// What the in-memory queue's runner delivers with.
struct Runner {
    id: String,
    exporter: Arc<dyn Exporter>,
    delivery: DeliveryConfig,
    counters: Arc<Counters>,
    hard_stop: CancellationToken,
}

impl Runner {
    /// Deliver what the in-memory queue holds, `slots` batches at a time,
    /// until it closes or the hard stop; what is left then is counted as
    /// failed.
    async fn run_memory(
        self,
        mut rx: mpsc::Receiver<Queued>,
        budget: Option<Budget>,
        size: Gauge,
        slots: Arc<Semaphore>,
    ) {
        let Runner {
            id,
            exporter,
            delivery,
            counters,
            hard_stop,
        } = self;
        let mut tasks = JoinSet::new();
        loop {
            let batch = tokio::select! {
                b = rx.recv() => b,
                _ = hard_stop.cancelled() => None,
            };
            let Some((batch, queued)) = batch else { break };
            // Out of the queue: its share of the budget is free again.
            drop(queued);
            size.set(budget.as_ref().map_or(rx.len(), Budget::used) as i64);
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => p,
                _ = hard_stop.cancelled() => {
                    counters.failed.get(batch.signal()).add(batch.items() as u64);
                    break;
                }
            };
            let Ok(permit) = permit else { break };
            let (exporter, counters, id, stop, delivery) = (
                exporter.clone(),
                counters.clone(),
                id.clone(),
                hard_stop.clone(),
                delivery.clone(),
            );
            let span = tracing::info_span!("causeway.export", exporter = %id, signal = %batch.signal(), items = batch.items());
            tasks.spawn(
                async move {
                    deliver(&id, exporter.as_ref(), &batch, &delivery, &counters, &stop).await;
                    drop(permit);
                }
                .instrument(span),
            );
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        // Anything still queued after a hard stop is lost: count it.
        rx.close();
        while let Ok((b, _)) = rx.try_recv() {
            b.mark_failed();
            counters.failed.get(b.signal()).add(b.items() as u64);
        }
        size.set(0);
        if let Err(error) = exporter.shutdown().await {
            tracing::error!(exporter = %id, %error, "Exporter shutdown failed.");
        }
    }
}

/// The runner of a persistent queue: records are read back from disk and
/// acknowledged once delivered (or given up). At a hard stop, what is not
/// acknowledged stays on disk for the next start.
#[allow(clippy::too_many_arguments)]
async fn run_disk(
    id: String,
    exporter: Arc<dyn Exporter>,
    delivery: DeliveryConfig,
    disk: Arc<DiskQueue>,
    mut closed: mpsc::Receiver<Queued>,
    counters: Arc<Counters>,
    size: Gauge,
    hard_stop: CancellationToken,
    slots: Arc<Semaphore>,
) {
    let mut tasks = JoinSet::new();
    let mut open = true;
    // `fsync: periodic`: a timer, so the tail of a burst is synced within a
    // second even when nothing is appended after it.
    let timer = disk.needs_timer().then(|| {
        let (disk, id) = (disk.clone(), id.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let d = disk.clone();
                match tokio::task::spawn_blocking(move || d.sync_periodic()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        tracing::error!(exporter = %id, %error, "Cannot sync the persistent queue.");
                    }
                    Err(_) => break,
                }
            }
        })
    });
    loop {
        let rec = tokio::select! {
            r = disk.pop() => r,
            // Every sender gone: no more pushes; drain what is on disk.
            _ = closed.recv(), if open => { open = false; disk.close(); continue; }
            _ = hard_stop.cancelled() => None,
        };
        let Some(rec) = rec else { break };
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p,
            _ = hard_stop.cancelled() => break,
        };
        let Ok(permit) = permit else { break };
        let (exporter, counters, id, stop, delivery, disk, size) = (
            exporter.clone(),
            counters.clone(),
            id.clone(),
            hard_stop.clone(),
            delivery.clone(),
            disk.clone(),
            size.clone(),
        );
        tasks.spawn(async move {
            let batch = Batch::from_encoded(rec.signal, rec.payload, rec.items);
            deliver(&id, exporter.as_ref(), &batch, &delivery, &counters, &stop).await;
            if !stop.is_cancelled() {
                disk.ack(rec.id);
            }
            size.set(disk.size_bytes() as i64);
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    if let Some(t) = timer {
        t.abort();
        if let Err(error) = disk.sync_periodic() {
            tracing::error!(exporter = %id, %error, "Cannot sync the persistent queue.");
        }
    }
    if let Err(error) = exporter.shutdown().await {
        tracing::error!(exporter = %id, %error, "Exporter shutdown failed.");
    }
}

/// `f`'s output, or `None` once `limit` passed; a zero `limit` waits as
/// long as `f` takes (the Collector's `timeout: 0`: an exporter whose
/// attempt cannot be called off, such as a file write that goes on in its
/// thread, would be written again by the retry of an attempt timed out).
async fn within<T>(
    limit: std::time::Duration,
    f: impl std::future::Future<Output = T>,
) -> Option<T> {
    if limit.is_zero() {
        Some(f.await)
    } else {
        tokio::time::timeout(limit, f).await.ok()
    }
}

async fn deliver(
    id: &str,
    exporter: &dyn Exporter,
    batch: &Batch,
    delivery: &DeliveryConfig,
    counters: &Counters,
    stop: &CancellationToken,
) {
    let (signal, items) = (batch.signal(), batch.items() as u64);
    let started = tokio::time::Instant::now();
    let mut backoff = Backoff::new(delivery.retry);
    loop {
        let attempt = tokio::select! {
            r = within(delivery.timeout, exporter.export(batch)) => r,
            _ = stop.cancelled() => {
                batch.mark_failed();
                counters.failed.get(signal).add(items);
                tracing::error!(exporter = %id, items, "Shutdown deadline reached; batch dropped.");
                return;
            }
        };
        let (error, retry_after) = match attempt {
            Some(Ok(d)) => {
                counters
                    .sent
                    .get(signal)
                    .add(items.saturating_sub(d.rejected));
                if d.rejected > 0 {
                    counters.rejected.get(signal).add(d.rejected);
                }
                return;
            }
            Some(Err(ExportError::Permanent { source })) => {
                batch.mark_failed();
                counters.failed.get(signal).add(items);
                tracing::error!(exporter = %id, items, error = %source, "Export rejected permanently; not retrying.");
                return;
            }
            Some(Err(ExportError::Retryable {
                source,
                retry_after,
            })) => (source.to_string(), retry_after),
            None => (
                format!("attempt timed out after {:?}", delivery.timeout),
                None,
            ),
        };
        if !delivery.retry.enabled {
            batch.mark_failed();
            counters.failed.get(signal).add(items);
            tracing::error!(exporter = %id, items, %error, "Export failed; retries are disabled.");
            return;
        }
        let wait = retry_after.unwrap_or_else(|| backoff.next_wait());
        let max = delivery.retry.max_elapsed_time.get();
        if !max.is_zero() && started.elapsed() + wait > max {
            batch.mark_failed();
            counters.failed.get(signal).add(items);
            tracing::error!(exporter = %id, items, %error, "Export failed; giving up after max_elapsed_time.");
            return;
        }
        counters.retries.add(1);
        tracing::warn!(exporter = %id, items, %error, wait_ms = wait.as_millis() as u64, "Export failed; will retry.");
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = stop.cancelled() => {
                batch.mark_failed();
                counters.failed.get(signal).add(items);
                tracing::error!(exporter = %id, items, "Shutdown deadline reached; batch dropped.");
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::component::Delivered;
    use crate::config::{Duration as D, QueueConfig, RetryConfig};
    use async_trait::async_trait;
    use std::collections::VecDeque;
    use std::sync::Mutex;
    use std::time::Duration;

    /// Answers from a script, recording when each attempt came.
    struct Scripted {
        answers: Mutex<VecDeque<Result<Delivered, ExportError>>>,
        attempts: Mutex<Vec<tokio::time::Instant>>,
    }

    #[async_trait]
    impl Exporter for Scripted {
        async fn export(&self, _batch: &Batch) -> Result<Delivered, ExportError> {
            self.attempts
                .lock()
                .expect("lock")
                .push(tokio::time::Instant::now());
            self.answers
                .lock()
                .expect("lock")
                .pop_front()
                .unwrap_or(Ok(Delivered::default()))
        }
    }

    fn retryable(after: Option<Duration>) -> Result<Delivered, ExportError> {
        Err(ExportError::Retryable {
            source: "down".into(),
            retry_after: after,
        })
    }

    fn delivery(max_elapsed: D) -> DeliveryConfig {
        DeliveryConfig {
            timeout: Duration::from_secs(5),
            retry: RetryConfig {
                initial_interval: D::millis(100),
                max_interval: D::millis(400),
                randomization_factor: 0.0,
                multiplier: 2.0,
                max_elapsed_time: max_elapsed,
                enabled: true,
            },
            queue: QueueConfig::default(),
        }
    }

    /// The runner of a test exporter, with no memory limit known.
    fn start(
        exporter: Arc<dyn Exporter>,
        d: DeliveryConfig,
        reg: &Registry,
    ) -> (ExporterQueue, tokio::task::JoinHandle<()>) {
        spawn("x".into(), exporter, d, reg, CancellationToken::new(), None)
    }

    async fn run(
        answers: Vec<Result<Delivered, ExportError>>,
        d: DeliveryConfig,
    ) -> (Arc<Scripted>, Registry) {
        let exp = Arc::new(Scripted {
            answers: Mutex::new(answers.into()),
            attempts: Mutex::new(vec![]),
        });
        let reg = Registry::new();
        deliver_one(exp.clone(), d, &reg).await;
        (exp, reg)
    }

    /// One batch of 3 items through a runner of `exporter`, to its end.
    async fn deliver_one(exporter: Arc<dyn Exporter>, d: DeliveryConfig, reg: &Registry) {
        let (queue, handle) = start(exporter, d, reg);
        queue
            .push(Batch::from_encoded(
                crate::Signal::Traces,
                bytes::Bytes::new(),
                3,
            ))
            .await;
        drop(queue);
        handle.await.expect("runner");
    }

    fn count<M: crate::telemetry::Metric>(reg: &Registry, m: M) -> u64 {
        reg.counter(m, &[("component", "x"), ("signal", "traces")])
            .get()
    }

    /// An exporter whose attempts take 30 s: timed out at 5 s it is tried
    /// again (what wrote the file exporter's batches twice when its write
    /// went on in its thread); with no timeout (zero) it is tried once.
    struct Slow(Mutex<u32>);

    #[async_trait]
    impl Exporter for Slow {
        async fn export(&self, _batch: &Batch) -> Result<Delivered, ExportError> {
            *self.0.lock().expect("lock") += 1;
            tokio::time::sleep(Duration::from_secs(30)).await;
            Ok(Delivered::default())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_timeout_waits_for_the_attempt_and_never_tries_it_again() {
        for (timeout, tried_again) in [(Duration::from_secs(5), true), (Duration::ZERO, false)] {
            let exp = Arc::new(Slow(Mutex::new(0)));
            let reg = Registry::new();
            let mut d = delivery(D::secs(12));
            d.timeout = timeout;
            deliver_one(exp.clone(), d, &reg).await;
            let attempts = *exp.0.lock().expect("lock");
            assert_eq!(
                attempts > 1,
                tried_again,
                "{timeout:?}: {attempts} attempts"
            );
            if !tried_again {
                assert_eq!(count(&reg, ExporterSent), 3);
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn permanent_errors_are_not_retried() {
        let (exp, reg) = run(
            vec![Err(ExportError::Permanent {
                source: "400".into(),
            })],
            delivery(D::secs(60)),
        )
        .await;
        assert_eq!(exp.attempts.lock().expect("lock").len(), 1);
        assert_eq!(reg.counter(ExporterRetries, &[("component", "x")]).get(), 0);
        assert_eq!(count(&reg, ExporterSent), 0);
        assert_eq!(count(&reg, ExporterSendFailed), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn retryable_errors_back_off_and_honour_the_server_hint() {
        let (exp, reg) = run(
            vec![
                retryable(None),
                retryable(None),
                retryable(Some(Duration::from_secs(3))),
                Ok(Delivered::default()),
            ],
            delivery(D::secs(60)),
        )
        .await;
        let at = exp.attempts.lock().expect("lock").clone();
        assert_eq!(at.len(), 4);
        let gaps: Vec<u128> = at.windows(2).map(|w| (w[1] - w[0]).as_millis()).collect();
        assert_eq!(
            gaps,
            vec![100, 200, 3000],
            "backoff 100ms, 200ms, then the server's 3s"
        );
        assert_eq!(reg.counter(ExporterRetries, &[("component", "x")]).get(), 3);
        assert_eq!(count(&reg, ExporterSent), 3);
    }

    /// Holds every export until released.
    struct Gate(tokio::sync::Semaphore);

    #[async_trait]
    impl Exporter for Gate {
        async fn export(&self, _batch: &Batch) -> Result<Delivered, ExportError> {
            let permit = self.0.acquire().await.map_err(|_| ExportError::Permanent {
                source: "closed".into(),
            })?;
            permit.forget();
            Ok(Delivered::default())
        }
    }

    #[tokio::test]
    async fn an_items_sizer_bounds_the_queue_in_items() {
        let gate = Arc::new(Gate(tokio::sync::Semaphore::new(0)));
        let mut d = delivery(D::secs(60));
        d.queue.num_consumers = 1;
        d.queue.queue_size = 10;
        d.queue.sizer = crate::config::Sizer::Items;
        d.queue.block_on_overflow = false;
        let reg = Registry::new();
        let (queue, handle) = start(gate.clone(), d, &reg);
        let batch = |n| Batch::from_encoded(crate::Signal::Traces, bytes::Bytes::new(), n);
        let size = || reg.gauge(ExporterQueueSize, &[("component", "x")]).get();
        let capacity = reg
            .gauge(ExporterQueueCapacity, &[("component", "x")])
            .get();
        assert_eq!(capacity, 10, "the capacity is in items");
        // The first batch goes to the one consumer (held at the gate), the
        // second waits for it outside the queue: both have left the queue.
        queue.push(batch(4)).await;
        queue.push(batch(4)).await;
        let wait = |want: i64| async move {
            for _ in 0..1000 {
                if size() == want {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            panic!("queue size {} never became {want}", size());
        };
        wait(0).await;
        // 4 + 4 items fit in 10; 4 more do not and are dropped, counted.
        queue.push(batch(4)).await;
        queue.push(batch(4)).await;
        assert_eq!(size(), 8);
        queue.push(batch(4)).await;
        assert_eq!(count(&reg, ExporterEnqueueFailed), 4);
        // A batch bigger than the whole queue is not refused for ever: it
        // takes the whole budget once the queue is empty.
        gate.0.add_permits(100);
        wait(0).await;
        queue.push(batch(25)).await;
        drop(queue);
        handle.await.expect("runner");
        assert_eq!(count(&reg, ExporterSent), 4 * 4 + 25);
        assert_eq!(count(&reg, ExporterEnqueueFailed), 4);
    }

    /// The default sizer counts batches, and `max_bytes` bounds the same
    /// queue in encoded bytes: a few large batches fill it long before
    /// `queue_size` is reached.
    #[tokio::test]
    async fn a_batch_counted_queue_is_also_bounded_in_bytes() {
        let gate = Arc::new(Gate(tokio::sync::Semaphore::new(0)));
        let mut d = delivery(D::secs(60));
        d.queue.num_consumers = 1;
        assert_eq!(d.queue.sizer, crate::config::Sizer::Requests);
        assert_eq!(
            d.queue.max_bytes, None,
            "the default: from the memory budget"
        );
        assert_eq!(crate::config::default_queue_max_bytes(None), 256 << 20);
        assert_eq!(
            crate::config::default_queue_max_bytes(Some(512 << 20)),
            128 << 20,
            "a quarter of the limit"
        );
        assert_eq!(
            crate::config::default_queue_max_bytes(Some(20 << 30)),
            256 << 20
        );
        d.queue.queue_size = 1000;
        d.queue.max_bytes = Some(crate::config::ByteSize(1 << 20));
        d.queue.block_on_overflow = false;
        let reg = Registry::new();
        let (queue, handle) = start(gate.clone(), d, &reg);
        let batch = || {
            Batch::from_encoded(
                crate::Signal::Traces,
                bytes::Bytes::from(vec![0u8; 300 << 10]),
                1,
            )
        };
        let failed = || count(&reg, ExporterEnqueueFailed);
        // One batch held by the consumer at the gate, one waiting for it:
        // both have left the queue; then three of 300 KiB fit in 1 MiB.
        for _ in 0..2 {
            queue.push(batch()).await;
        }
        for _ in 0..1000 {
            if queue.bytes.as_ref().map(Budget::used) == Some(0) && queue.tx.capacity() == 1000 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        for _ in 0..3 {
            queue.push(batch()).await;
        }
        assert_eq!(failed(), 0);
        // The fourth would pass 1 MiB: dropped (block_on_overflow is off),
        // with 997 batches of room left.
        queue.push(batch()).await;
        assert_eq!(failed(), 1);
        gate.0.add_permits(100);
        drop(queue);
        handle.await.expect("runner");
        assert_eq!(count(&reg, ExporterSent), 5);
    }

    #[test]
    fn sizers_are_the_collectors() {
        let q =
            |y: &str| crate::config::decode::<QueueConfig>(&serde_yaml::from_str(y).expect("yaml"));
        assert_eq!(
            q("sizer: items\nqueue_size: 100_000").expect("valid").sizer,
            crate::config::Sizer::Items
        );
        assert_eq!(
            q("sizer: bytes").expect("valid").sizer,
            crate::config::Sizer::Bytes
        );
        assert!(q("sizer: pages").is_err());
        let e = q("sizer: items\nstorage: /tmp/q").expect_err("persistent");
        assert_eq!(e[0].path, "sizer");
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_after_max_elapsed_time_and_counts_it() {
        let answers = (0..100).map(|_| retryable(None)).collect();
        let failed = {
            let (exp, reg) = run(answers, delivery(D::secs(2))).await;
            let at = exp.attempts.lock().expect("lock").clone();
            assert!((at[at.len() - 1] - at[0]) <= Duration::from_secs(2));
            assert!(at.len() >= 5, "{} attempts", at.len());
            count(&reg, ExporterSendFailed)
        };
        assert_eq!(failed, 3);
    }
}

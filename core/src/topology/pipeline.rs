//! One pipeline: its entry queue, its processors run inline, and the fanout
//! to its exporters' queues.

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::exporter_runner::ExporterQueue;
use crate::component::Processor;
use crate::model::{Batch, SignalSet};
use crate::telemetry::registry::{Gauge, SignalCounters};

pub(crate) struct Stage {
    pub(crate) id: String,
    pub(crate) processor: Box<dyn Processor>,
    pub(crate) accepts: SignalSet,
    pub(crate) received: SignalCounters,
    pub(crate) sent: SignalCounters,
    pub(crate) dropped: SignalCounters,
}

pub(crate) struct Sink {
    pub(crate) accepts: SignalSet,
    pub(crate) queue: ExporterQueue,
}

pub(crate) struct PipelineTask {
    pub(crate) id: String,
    pub(crate) rx: mpsc::Receiver<Batch>,
    pub(crate) stages: Vec<Stage>,
    pub(crate) sinks: Vec<Sink>,
    pub(crate) queue_size: Gauge,
}

impl PipelineTask {
    /// Run until every receiver has dropped its sender, then flush.
    pub(crate) async fn run(mut self) {
        loop {
            let deadline = self
                .stages
                .iter()
                .filter_map(|s| s.processor.next_deadline())
                .min();
            tokio::select! {
                biased;
                // Timers first: a decision or batch timeout is never starved by input.
                _ = sleep_until(deadline), if deadline.is_some() => {
                    let now = Instant::now();
                    for i in 0..self.stages.len() {
                        if self.stages[i].processor.next_deadline().is_some_and(|d| d <= now) {
                            let mut out = Vec::new();
                            let stage = &mut self.stages[i];
                            if let Err(error) = stage.processor.on_tick(now, &mut out).await {
                                tracing::error!(pipeline = %self.id, processor = %stage.id, %error, "Processor tick failed.");
                            }
                            self.forward(i, out).await;
                        }
                    }
                }
                batch = self.rx.recv() => {
                    let Some(batch) = batch else { break };
                    self.queue_size.set(self.rx.len() as i64);
                    self.run_from(0, vec![batch]).await;
                }
            }
        }
        // Flush every stage in order; what a stage flushes goes through the rest.
        for i in 0..self.stages.len() {
            let mut out = Vec::new();
            let stage = &mut self.stages[i];
            if let Err(error) = stage.processor.flush(&mut out).await {
                tracing::error!(pipeline = %self.id, processor = %stage.id, %error, "Processor flush failed.");
            }
            self.forward(i, out).await;
        }
        tracing::debug!(pipeline = %self.id, "Pipeline drained.");
    }

    /// Output of stage `i` goes on to stage `i + 1`.
    async fn forward(&mut self, i: usize, out: Vec<Batch>) {
        for b in &out {
            self.stages[i].sent.get(b.signal()).add(b.items() as u64);
        }
        self.run_from(i + 1, out).await;
    }

    /// Run `batches` through stages `start..`, then to the exporters.
    async fn run_from(&mut self, start: usize, mut batches: Vec<Batch>) {
        for stage in self.stages.iter_mut().skip(start) {
            let mut next = Vec::with_capacity(batches.len());
            for batch in batches {
                if !stage.accepts.contains(batch.signal()) {
                    next.push(batch);
                    continue;
                }
                let (signal, items) = (batch.signal(), batch.items() as u64);
                stage.received.get(signal).add(items);
                let before = next.len();
                if let Err(error) = stage.processor.process(batch, &mut next).await {
                    stage.dropped.get(signal).add(items);
                    tracing::error!(pipeline = %self.id, processor = %stage.id, items, %error, "Processor failed; batch dropped.");
                }
                for b in &next[before..] {
                    stage.sent.get(b.signal()).add(b.items() as u64);
                }
            }
            batches = next;
            if batches.is_empty() {
                return;
            }
        }
        for batch in batches {
            fanout(&self.id, &self.sinks, batch).await;
        }
    }
}

/// Send to every exporter taking the signal: a clone for all but the last.
async fn fanout(pipeline: &str, sinks: &[Sink], batch: Batch) {
    let targets: Vec<&Sink> = sinks
        .iter()
        .filter(|s| s.accepts.contains(batch.signal()))
        .collect();
    let Some((last, rest)) = targets.split_last() else {
        tracing::debug!(pipeline, signal = %batch.signal(), "No exporter takes this signal; dropped.");
        return;
    };
    for sink in rest {
        sink.queue.push(batch.clone()).await;
    }
    last.queue.push(batch).await;
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

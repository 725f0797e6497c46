//! Wiring: builds every component through its factory, connects them with
//! bounded queues, runs them, and shuts them down in order.
//!
//! receivers → (bounded entry queue per pipeline) → pipeline task running its
//! processors inline → fanout → (bounded sending queue per exporter) →
//! exporter runner with retries. Every queue is bounded and every full queue
//! waits, so a slow exporter pushes back all the way to the clients.

mod disk_queue;
mod exporter_runner;
mod pipeline;

pub use crate::output::{Output, SendError, ADMISSION_WAIT, RETRY_AFTER};
pub use disk_queue::{DiskQueue, Fsync, WhenFull};

use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::component::BuildContext;
use crate::config::{ComponentId, Config};
use crate::error::CoreError;
use crate::model::Batch;
use crate::registry::Registry;
use crate::telemetry::registry::{self as telemetry, Registry as Telemetry};
use exporter_runner::ExporterQueue;
use pipeline::{PipelineTask, Sink, Stage};

/// Batches a pipeline's entry queue holds before receivers must wait.
pub const PIPELINE_QUEUE: usize = 64;

/// A running topology.
pub struct Running {
    receivers_stop: CancellationToken,
    hard_stop: CancellationToken,
    extensions_stop: CancellationToken,
    extensions: Vec<(String, JoinHandle<()>)>,
    receivers: Vec<(String, JoinHandle<()>)>,
    pipelines: Vec<JoinHandle<()>>,
    exporters: Vec<JoinHandle<()>>,
}

/// Build every component and start the topology.
pub async fn start(
    config: &Config,
    registry: &Registry,
    telemetry: &Telemetry,
) -> Result<Running, CoreError> {
    let hard_stop = CancellationToken::new();
    let receivers_stop = CancellationToken::new();
    let shared = crate::shared::Shared::default();
    // The memory limiter: in the shared registry for the receivers, sampled
    // until the topology stops.
    if let Some(cfg) = &config.memory_limiter {
        let limiter = shared.get_or_init(crate::memory::SHARED_KEY, || {
            crate::memory::MemoryLimiter::new(cfg, telemetry)
        });
        let (limit, soft) = limiter.limits();
        tracing::info!(limit, soft_limit = soft, "Memory limiter on.");
        tokio::spawn(limiter.run(hard_stop.clone()));
    }
    let b = Build {
        config,
        registry,
        telemetry,
        shared,
    };
    // Extensions first, as in the Collector: a health check answers (not
    // ready) while the pipelines are built, and stays until they drain.
    b.service_info();
    let extensions_stop = CancellationToken::new();
    let extensions = b.extensions(&extensions_stop).await?;
    let (queues, exporters) = b.exporters(&hard_stop).await?;
    let (routes, pipelines) = b.pipelines(queues).await?;
    let receivers = b.receivers(routes, &receivers_stop).await?;
    Ok(Running {
        receivers_stop,
        hard_stop,
        extensions_stop,
        extensions,
        receivers,
        pipelines,
        exporters,
    })
}

/// Where each receiver's batches go: per pipeline, the signals it takes
/// from that receiver and its entry queue.
type Routes = HashMap<ComponentId, Vec<(crate::SignalSet, mpsc::Sender<Batch>)>>;

/// What building the components shares.
struct Build<'a> {
    config: &'a Config,
    registry: &'a Registry,
    telemetry: &'a Telemetry,
    shared: crate::shared::Shared,
}

impl Build<'_> {
    fn ctx(&self, id: &ComponentId, pipeline_signals: crate::SignalSet) -> BuildContext {
        BuildContext {
            id: id.clone(),
            telemetry: self.telemetry.clone(),
            shared: self.shared.clone(),
            pipeline_signals,
        }
    }

    /// The service's pipelines and extensions, for the extensions to show.
    fn service_info(&self) {
        let config = self.config;
        self.shared.get_or_init(crate::component::SERVICE_KEY, || {
            crate::component::ServiceInfo {
                pipelines: config
                    .pipelines
                    .iter()
                    .map(|p| {
                        let ids = |v: &[ComponentId]| v.iter().map(ToString::to_string).collect();
                        crate::component::PipelineInfo {
                            id: p.id.to_string(),
                            receivers: ids(&p.receivers),
                            processors: ids(&p.processors),
                            exporters: ids(&p.exporters),
                        }
                    })
                    .collect(),
                extensions: config.extensions.keys().map(ToString::to_string).collect(),
                started: Some(std::time::SystemTime::now()),
            }
        });
    }

    async fn extensions(
        &self,
        stop: &CancellationToken,
    ) -> Result<Vec<(String, JoinHandle<()>)>, CoreError> {
        let mut extensions = Vec::new();
        for (id, cfg) in &self.config.extensions {
            let factory = self
                .registry
                .extension(id.kind())
                .ok_or_else(|| build_err("extension", id, "unknown type".into()))?;
            let ext = factory
                .build(self.ctx(id, crate::SignalSet::ALL), cfg)
                .await
                .map_err(|e| build_err("extension", id, e))?;
            let stop = stop.clone();
            let name = id.to_string();
            let handle = tokio::spawn(async move {
                if let Err(error) = ext.run(stop).await {
                    tracing::error!(extension = %name, %error, "Extension failed.");
                }
            });
            extensions.push((id.to_string(), handle));
        }
        Ok(extensions)
    }

    /// Exporters: one instance and one queue each, shared by the pipelines using it.
    async fn exporters(
        &self,
        hard_stop: &CancellationToken,
    ) -> Result<(HashMap<ComponentId, ExporterQueue>, Vec<JoinHandle<()>>), CoreError> {
        let mut queues: HashMap<ComponentId, ExporterQueue> = HashMap::new();
        let mut exporters = Vec::new();
        // Sets each in-memory queue's byte bound when its config does not.
        let memory_limit = crate::memory::MemoryLimiter::shared(&self.shared).map(|l| l.limits().0);
        for id in self.config.pipelines.iter().flat_map(|p| &p.exporters) {
            if queues.contains_key(id) {
                continue;
            }
            let factory = self
                .registry
                .exporter(id.kind())
                .ok_or_else(|| build_err("exporter", id, "unknown type".into()))?;
            let built = factory
                .build(
                    self.ctx(id, crate::SignalSet::ALL),
                    &self.config.exporters[id],
                )
                .await
                .map_err(|e| build_err("exporter", id, e))?;
            let (queue, handle) = exporter_runner::spawn(
                id.to_string(),
                built.exporter,
                built.delivery,
                self.telemetry,
                hard_stop.clone(),
                memory_limit,
            );
            queues.insert(id.clone(), queue);
            exporters.push(handle);
        }
        Ok((queues, exporters))
    }

    /// Pipelines: their own processor instances, fanning out to the
    /// exporters' queues; the routes of the receivers into them.
    async fn pipelines(
        &self,
        queues: HashMap<ComponentId, ExporterQueue>,
    ) -> Result<(Routes, Vec<JoinHandle<()>>), CoreError> {
        let mut routes = Routes::new();
        let mut pipelines = Vec::new();
        for p in &self.config.pipelines {
            let pid = p.id.to_string();
            let mut stages = Vec::new();
            for id in &p.processors {
                stages.push(self.stage(p.id.signals, &pid, id).await?);
            }
            let sinks = p
                .exporters
                .iter()
                .filter_map(|id| {
                    let accepts = self
                        .registry
                        .exporter(id.kind())?
                        .signals()
                        .intersect(p.id.signals);
                    Some(Sink {
                        accepts,
                        queue: queues.get(id)?.clone(),
                    })
                })
                .collect();
            let (tx, rx) = mpsc::channel(PIPELINE_QUEUE);
            for r in &p.receivers {
                let signals = self
                    .registry
                    .receiver(r.kind())
                    .map_or(crate::SignalSet::NONE, |f| f.signals())
                    .intersect(p.id.signals);
                routes
                    .entry(r.clone())
                    .or_default()
                    .push((signals, tx.clone()));
            }
            drop(tx);
            let task = PipelineTask {
                queue_size: self
                    .telemetry
                    .gauge(telemetry::PipelineQueueSize, &[("pipeline", &pid)]),
                id: pid,
                rx,
                stages,
                sinks,
            };
            pipelines.push(tokio::spawn(task.run()));
        }
        Ok((routes, pipelines))
    }

    /// Processor `id` of pipeline `pid` (of `signals`), built, with its counters.
    async fn stage(
        &self,
        signals: crate::SignalSet,
        pid: &str,
        id: &ComponentId,
    ) -> Result<Stage, CoreError> {
        let factory = self
            .registry
            .processor(id.kind())
            .ok_or_else(|| build_err("processor", id, "unknown type".into()))?;
        let processor = factory
            .build(self.ctx(id, signals), &self.config.processors[id])
            .await
            .map_err(|e| build_err("processor", id, e))?;
        let name = id.to_string();
        let t = &self.telemetry;
        Ok(Stage {
            id: id.to_string(),
            accepts: processor.accepts().intersect(signals),
            processor,
            received: t.processor_counters(telemetry::ProcessorReceived, pid, &name),
            sent: t.processor_counters(telemetry::ProcessorSent, pid, &name),
            dropped: t.processor_counters(telemetry::ProcessorDropped, pid, &name),
        })
    }

    /// Receivers last, so nothing arrives before its path exists. All are
    /// built (sockets bound) before any runs.
    async fn receivers(
        &self,
        mut routes: Routes,
        stop: &CancellationToken,
    ) -> Result<Vec<(String, JoinHandle<()>)>, CoreError> {
        let mut built = Vec::new();
        for (id, cfg) in &self.config.receivers {
            let Some(r) = routes.remove(id) else { continue };
            let factory = self
                .registry
                .receiver(id.kind())
                .ok_or_else(|| build_err("receiver", id, "unknown type".into()))?;
            let receiver = factory
                .build(self.ctx(id, crate::SignalSet::ALL), cfg)
                .await
                .map_err(|e| build_err("receiver", id, e))?;
            built.push((
                id.to_string(),
                receiver,
                Output::new(&id.to_string(), r, self.telemetry),
            ));
        }
        Ok(built
            .into_iter()
            .map(|(id, receiver, out)| {
                let stop = stop.clone();
                let name = id.clone();
                let handle = tokio::spawn(async move {
                    if let Err(error) = receiver.run(out, stop).await {
                        tracing::error!(receiver = %name, %error, "Receiver failed.");
                    }
                });
                (id, handle)
            })
            .collect())
    }
}

fn build_err(kind: &'static str, id: &ComponentId, source: crate::BoxError) -> CoreError {
    CoreError::Build {
        kind,
        id: id.to_string(),
        source,
    }
}

impl Running {
    /// Stop accepting, drain pipelines and flush exporters. After `timeout`
    /// whatever is still queued or retrying is dropped and counted. Returns
    /// whether everything drained in time.
    pub async fn shutdown(self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        self.receivers_stop.cancel();
        let drained = async {
            for (id, h) in self.receivers {
                if let Err(error) = h.await {
                    tracing::error!(receiver = %id, %error, "Receiver task panicked.");
                }
            }
            for h in self.pipelines {
                if let Err(error) = h.await {
                    tracing::error!(%error, "Pipeline task panicked.");
                }
            }
        };
        let mut in_time = tokio::time::timeout_at(deadline, drained).await.is_ok();
        if !in_time {
            self.hard_stop.cancel();
        }
        let exporters = async {
            for h in self.exporters {
                if let Err(error) = h.await {
                    tracing::error!(%error, "Exporter task panicked.");
                }
            }
        };
        if tokio::time::timeout_at(deadline, exporters).await.is_err() {
            in_time = false;
            self.hard_stop.cancel();
        }
        self.extensions_stop.cancel();
        for (id, h) in self.extensions {
            if let Err(error) = h.await {
                tracing::error!(extension = %id, %error, "Extension task panicked.");
            }
        }
        in_time
    }
}

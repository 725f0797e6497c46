//! The traits every component implements, and the factories that build them.
//!
//! The topology knows components only through these traits: it never names a
//! concrete one.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::{ComponentId, ConfigError, DeliveryConfig};
use crate::error::BoxError;
use crate::model::{Batch, SignalSet};
use crate::output::Output;
use crate::telemetry::registry::Registry;

/// What a factory gets when it builds a component.
#[derive(Clone)]
pub struct BuildContext {
    /// The component's id.
    pub id: ComponentId,
    /// The daemon's metrics registry.
    pub telemetry: Registry,
    /// State shared with other components of the topology.
    pub shared: crate::shared::Shared,
    /// The signals of the pipeline a processor is built for (one instance a
    /// pipeline); every signal for receivers and exporters.
    pub pipeline_signals: crate::SignalSet,
}

/// A source of data. It is built (and binds its sockets) before anything
/// runs, then runs until `shutdown` fires, sending into `out`. It must drop
/// `out` when it returns: that is how pipelines learn there is no more input.
#[async_trait]
pub trait Receiver: Send {
    /// Run until `shutdown`.
    async fn run(self: Box<Self>, out: Output, shutdown: CancellationToken)
        -> Result<(), BoxError>;
}

/// An error from a processor. The batch it was processing is lost and counted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProcessError(pub BoxError);

/// A step of a pipeline. One instance per pipeline. Batches of signals it
/// does not accept bypass it.
#[async_trait]
pub trait Processor: Send {
    /// The signals it processes.
    fn accepts(&self) -> SignalSet;
    /// Process one batch, pushing what it passes on into `out` (maybe later).
    async fn process(&mut self, batch: Batch, out: &mut Vec<Batch>) -> Result<(), ProcessError>;
    /// When [`Processor::on_tick`] must run next, if ever.
    fn next_deadline(&self) -> Option<Instant> {
        None
    }
    /// Called at or after [`Processor::next_deadline`].
    async fn on_tick(&mut self, _now: Instant, _out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        Ok(())
    }
    /// Called at shutdown: push out everything held.
    async fn flush(&mut self, _out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        Ok(())
    }
}

/// The result of a successful export.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// Items the backend accepted the request for but rejected
    /// (OTLP partial success). They are not resent.
    pub rejected: u64,
}

/// Why an export attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// Try again later (after `retry_after` if the server said so).
    #[error("retryable: {source}")]
    Retryable {
        /// The cause.
        #[source]
        source: BoxError,
        /// The server's hint.
        retry_after: Option<Duration>,
    },
    /// Never resend this batch (the server said it is invalid).
    #[error("permanent: {source}")]
    Permanent {
        /// The cause.
        #[source]
        source: BoxError,
    },
}

/// A destination. `export` is one attempt: queueing, retries with backoff,
/// timeouts and concurrency live in the topology (the Collector's
/// exporterhelper), configured by [`DeliveryConfig`].
#[async_trait]
pub trait Exporter: Send + Sync {
    /// One attempt to deliver `batch`.
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError>;
    /// Flush and close; called once after the last export.
    async fn shutdown(&self) -> Result<(), BoxError> {
        Ok(())
    }
}

/// A built exporter and how to deliver to it.
pub struct BuiltExporter {
    /// The exporter.
    pub exporter: Arc<dyn Exporter>,
    /// Queue, retry and timeout settings.
    pub delivery: DeliveryConfig,
}

/// Builds receivers of one type.
#[async_trait]
pub trait ReceiverFactory: Send + Sync {
    /// The type in component ids (`otlp`).
    fn kind(&self) -> &'static str;
    /// Signals it can produce.
    fn signals(&self) -> SignalSet;
    /// Decode and check a section; paths relative to the section.
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>>;
    /// The JSON Schema of a section, from the config struct `validate`
    /// decodes (`causeway schema`, the README key tables).
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema;
    /// How long after the time it covers what this section produces
    /// arrives, at most (a profile window is answered at its end, within a
    /// timeout); `None` for data that arrives as it happens.
    fn delivery_lag(&self, _cfg: &serde_yaml::Value) -> Option<Duration> {
        None
    }
    /// Build (binding sockets); `cfg` has been validated.
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError>;
}

/// Builds processors of one type.
#[async_trait]
pub trait ProcessorFactory: Send + Sync {
    /// The type in component ids (`batch`).
    fn kind(&self) -> &'static str;
    /// Signals it processes.
    fn signals(&self) -> SignalSet;
    /// Decode and check a section.
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>>;
    /// The JSON Schema of a section, from the config struct `validate`
    /// decodes (`causeway schema`, the README key tables).
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema;
    /// The memory budget this section asks admission control to enforce (the
    /// Collector's `memory_limiter` processor), `None` for most processors.
    /// causeway enforces one budget for the whole process, at the receivers,
    /// before requests are decoded: the loader takes the lowest asked for by
    /// the processors in use and `service.memory_limiter`.
    fn admission(&self, _cfg: &serde_yaml::Value) -> Option<crate::memory::MemoryLimiterConfig> {
        None
    }
    /// How long this section waits for data that arrives after the time
    /// it covers (see [`ReceiverFactory::delivery_lag`]), and the key that
    /// sets it; `None` when it does not use such data. The loader warns
    /// when a receiver in one of its pipelines delivers later than that.
    fn late_data_wait(&self, _cfg: &serde_yaml::Value) -> Option<(Duration, &'static str)> {
        None
    }
    /// Build one instance (one per pipeline).
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Processor>, BoxError>;
}

/// A service beside the pipelines (a health check endpoint, status pages).
/// Extensions are built (sockets bound) before any pipeline and stopped
/// after every pipeline has drained, as in the Collector.
#[async_trait]
pub trait Extension: Send {
    /// Run until `shutdown`.
    async fn run(self: Box<Self>, shutdown: CancellationToken) -> Result<(), BoxError>;
}

/// Builds extensions of one type.
#[async_trait]
pub trait ExtensionFactory: Send + Sync {
    /// The type in component ids (`health_check`).
    fn kind(&self) -> &'static str;
    /// Decode and check a section.
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>>;
    /// The JSON Schema of a section, from the config struct `validate`
    /// decodes (`causeway schema`, the README key tables).
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema;
    /// Whether it authenticates exporters' requests (`auth.authenticator`
    /// may name it); such an extension fills [`crate::auth::shared_key`].
    fn authenticates(&self) -> bool {
        false
    }
    /// Things the section asks for that causeway does differently, said once
    /// at startup and by `validate` (a Go profile from `pprof`).
    fn warnings(&self, _cfg: &serde_yaml::Value) -> Vec<String> {
        Vec::new()
    }
    /// The listeners that serve data (not probes): each one beyond loopback
    /// needs TLS and credentials unless `service.insecure_expose` (see
    /// [`crate::exposure`]).
    fn exposes(&self, _cfg: &serde_yaml::Value) -> Vec<crate::exposure::Exposed> {
        Vec::new()
    }
    /// Build it (binding its sockets).
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Extension>, BoxError>;
}

/// What extensions may read about the running service (the zpages), in
/// [`crate::shared::Shared`] under [`SERVICE_KEY`].
#[derive(Debug, Clone, Default)]
pub struct ServiceInfo {
    /// Pipelines, in file order.
    pub pipelines: Vec<PipelineInfo>,
    /// Extension ids, in start order.
    pub extensions: Vec<String>,
    /// When the topology started.
    pub started: Option<std::time::SystemTime>,
}

/// One pipeline's components, by id.
#[derive(Debug, Clone, Default)]
pub struct PipelineInfo {
    /// The pipeline id.
    pub id: String,
    /// Receiver ids.
    pub receivers: Vec<String>,
    /// Processor ids, in order.
    pub processors: Vec<String>,
    /// Exporter ids.
    pub exporters: Vec<String>,
}

/// The key of [`ServiceInfo`] in the shared state.
pub const SERVICE_KEY: &str = "service";

/// Builds exporters of one type.
#[async_trait]
pub trait ExporterFactory: Send + Sync {
    /// The type in component ids (`otlp`).
    fn kind(&self) -> &'static str;
    /// Signals it can export.
    fn signals(&self) -> SignalSet;
    /// Decode and check a section.
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>>;
    /// The JSON Schema of a section, from the config struct `validate`
    /// decodes (`causeway schema`, the README key tables).
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema;
    /// Why this section cannot export `signal` although the type can (an
    /// `otlphttp` exporter with a `traces_endpoint` only, in a logs
    /// pipeline); `None` when it can. Asked for every pipeline the exporter
    /// is in, so that a section need only configure the signals it is used
    /// for.
    fn cannot_export(&self, _cfg: &serde_yaml::Value, _signal: crate::Signal) -> Option<String> {
        None
    }
    /// Build it.
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError>;
}

//! The `batch` processor: groups items into larger batches by count and
//! time, per signal, as the Collector's batch processor does
//! (`send_batch_size`, `timeout`). Encoded batches are joined without being
//! decoded.

#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, ProcessError, Processor, ProcessorFactory};
use causeway_core::config::{decode, ConfigError, Duration, Validate};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use serde::Deserialize;
use tokio::time::Instant;

/// `processors.batch`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchConfig {
    /// Send as soon as this many items are held (a trigger, not a cap).
    #[serde(default = "default_size")]
    pub send_batch_size: usize,
    /// Send what is held this long after its first item arrived.
    #[serde(default = "default_timeout")]
    pub timeout: Duration,
    /// Largest batch sent: bigger ones are split (0: no limit).
    /// Spans and log records are counted; metrics are split between
    /// resources, never inside one.
    #[serde(default, deserialize_with = "causeway_core::config::lenient_int")]
    pub send_batch_max_size: usize,
    /// Not supported: causeway does not carry request metadata through
    /// pipelines (validation says so when it is set).
    #[serde(default)]
    pub metadata_keys: Vec<String>,
    /// Accepted with `metadata_keys`; no effect.
    #[serde(default)]
    pub metadata_cardinality_limit: Option<u64>,
}

impl Default for BatchConfig {
    fn default() -> Self {
        BatchConfig {
            send_batch_size: default_size(),
            timeout: default_timeout(),
            send_batch_max_size: 0,
            metadata_keys: Vec::new(),
            metadata_cardinality_limit: None,
        }
    }
}

fn default_size() -> usize {
    8192
}
fn default_timeout() -> Duration {
    Duration::millis(200)
}

impl Validate for BatchConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.send_batch_size == 0 {
            e.push(ConfigError::new("send_batch_size", "must be at least 1"));
        }
        if self.timeout.get().is_zero() {
            e.push(ConfigError::new("timeout", "must be greater than 0"));
        }
        if self.send_batch_max_size != 0 && self.send_batch_max_size < self.send_batch_size {
            e.push(ConfigError::new(
                "send_batch_max_size",
                "must be 0 or at least send_batch_size",
            ));
        }
        if !self.metadata_keys.is_empty() {
            e.push(ConfigError::new(
                "metadata_keys",
                "not supported: causeway does not carry client metadata through pipelines, so it cannot batch by it; remove the key (batches then mix tenants, as the Collector does without it)",
            ));
        }
        e
    }
}

/// Factory of the `batch` processor.
pub struct BatchProcessorFactory;

#[async_trait]
impl ProcessorFactory for BatchProcessorFactory {
    fn kind(&self) -> &'static str {
        "batch"
    }
    fn signals(&self) -> SignalSet {
        // In a profiles pipeline too, passing them through unbatched (a
        // request's samples index its own dictionary): see `accepts`.
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<BatchConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<BatchConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        _ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Processor>, BoxError> {
        let cfg: BatchConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        Ok(Box::new(BatchProcessor::new(cfg)))
    }
}

struct Pending {
    batch: Batch,
    deadline: Instant,
}

/// Holds at most one pending batch per signal.
pub struct BatchProcessor {
    cfg: BatchConfig,
    pending: [Option<Pending>; 4],
}

impl BatchProcessor {
    /// A processor with this config.
    pub fn new(cfg: BatchConfig) -> Self {
        BatchProcessor {
            cfg,
            pending: [None, None, None, None],
        }
    }
}

#[async_trait]
impl Processor for BatchProcessor {
    fn accepts(&self) -> SignalSet {
        SignalSet::ALL
    }

    async fn process(&mut self, batch: Batch, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        let slot = &mut self.pending[batch.signal() as usize];
        match slot {
            Some(p) => p
                .batch
                .append(batch)
                .map_err(|e| ProcessError(Box::new(e)))?,
            None => {
                *slot = Some(Pending {
                    batch,
                    deadline: Instant::now() + self.cfg.timeout.get(),
                })
            }
        }
        if slot
            .as_ref()
            .is_some_and(|p| p.batch.items() >= self.cfg.send_batch_size)
        {
            if let Some(p) = slot.take() {
                emit(self.cfg.send_batch_max_size, p.batch, out)?;
            }
        }
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.pending.iter().flatten().map(|p| p.deadline).min()
    }

    async fn on_tick(&mut self, now: Instant, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        for s in Signal::ALL {
            let slot = &mut self.pending[s as usize];
            if slot.as_ref().is_some_and(|p| p.deadline <= now) {
                if let Some(p) = slot.take() {
                    emit(self.cfg.send_batch_max_size, p.batch, out)?;
                }
            }
        }
        Ok(())
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        for p in self.pending.iter_mut().filter_map(|p| p.take()) {
            emit(self.cfg.send_batch_max_size, p.batch, out)?;
        }
        Ok(())
    }
}

/// Send `batch`, split to `max` items when that is set.
fn emit(max: usize, batch: Batch, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
    if max == 0 || batch.items() <= max {
        out.push(batch);
        return Ok(());
    }
    out.extend(
        batch
            .split_max(max)
            .map_err(|e| ProcessError(Box::new(e)))?,
    );
    Ok(())
}

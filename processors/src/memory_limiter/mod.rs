//! `memory_limiter`: the Collector's processor form of admission control.
//!
//! In the Collector the processor refuses data once the Go heap passes its
//! soft limit, after the receiver has already decoded it. causeway maps the
//! same keys onto its one process-wide limiter (`service.memory_limiter`),
//! which refuses requests at the receivers before they are decoded (gRPC
//! RESOURCE_EXHAUSTED / HTTP 429 with a retry hint) and pauses file tailing.
//! The processor itself passes data through unchanged, wherever it sits in
//! the pipeline. With several limits set, the lowest applies (the config
//! loader says so).

mod config;
#[cfg(test)]
mod tests;

pub use config::MemoryLimiterProcessorConfig;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, ProcessError, Processor, ProcessorFactory};
use causeway_core::config::{decode, ByteSize, ConfigError, Duration};
use causeway_core::memory::MemoryLimiterConfig;
use causeway_core::{Batch, BoxError, SignalSet};

/// Builds `memory_limiter` processors.
pub struct MemoryLimiterFactory;

#[async_trait]
impl ProcessorFactory for MemoryLimiterFactory {
    fn kind(&self) -> &'static str {
        "memory_limiter"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<MemoryLimiterProcessorConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        let c: MemoryLimiterProcessorConfig = decode(cfg)?;
        let m = limiter_config(&c, available_memory());
        let errors = m.errors();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors
                .into_iter()
                .map(|e| {
                    ConfigError::new(
                        if c.limit_mib > 0 {
                            "limit_mib"
                        } else {
                            "limit_percentage"
                        },
                        format!("the resulting limit of {}: {}", m.limit, e.message),
                    )
                })
                .collect())
        }
    }
    fn admission(&self, cfg: &serde_yaml::Value) -> Option<MemoryLimiterConfig> {
        let c: MemoryLimiterProcessorConfig = decode(cfg).ok()?;
        Some(limiter_config(&c, available_memory()))
    }
    async fn build(
        &self,
        _ctx: BuildContext,
        _cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Processor>, BoxError> {
        Ok(Box::new(PassThrough))
    }
}

/// The limiter settings the Collector's keys mean, given the memory
/// available to the process (for the percentages).
pub fn limiter_config(c: &MemoryLimiterProcessorConfig, available: u64) -> MemoryLimiterConfig {
    const MIB: u64 = 1 << 20;
    let (limit, spike) = if c.limit_mib > 0 {
        (c.limit_mib * MIB, c.spike_limit_mib * MIB)
    } else {
        (
            available / 100 * c.limit_percentage,
            available / 100 * c.spike_limit_percentage,
        )
    };
    MemoryLimiterConfig {
        limit: ByteSize(limit),
        // 0 means the default, 20% of the limit, in both.
        spike_limit: (spike > 0).then_some(ByteSize(spike)),
        check_interval: c.check_interval.unwrap_or(Duration::secs(1)),
        retry_after: Duration::secs(1),
    }
}

pub use causeway_core::memory::available_memory;

struct PassThrough;

#[async_trait]
impl Processor for PassThrough {
    fn accepts(&self) -> SignalSet {
        SignalSet::ALL
    }
    async fn process(&mut self, batch: Batch, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        out.push(batch);
        Ok(())
    }
}

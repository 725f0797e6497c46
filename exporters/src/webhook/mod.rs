//! The `webhook` exporter: alerts POSTed as Alertmanager's webhook payload
//! (version 4: `status`, `commonLabels`, `alerts[]` with `fingerprint`, …),
//! the format chat-ops bridges and incident tools already take from
//! Alertmanager. Same records, delivery and retry rules as the
//! `alertmanager` exporter; `endpoint` is the full URL.

pub mod config;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, BuiltExporter, ExporterFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::{BoxError, Signal, SignalSet};

use crate::alertmanager::{build, Payload};
use config::WebhookConfig;

/// Factory of the `webhook` exporter.
pub struct WebhookExporterFactory;

#[async_trait]
impl ExporterFactory for WebhookExporterFactory {
    fn kind(&self) -> &'static str {
        "webhook"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Logs)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<WebhookConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<WebhookConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        build(&ctx, cfg, Payload::Webhook)
    }
}

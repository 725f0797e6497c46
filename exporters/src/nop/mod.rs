//! The `nop` exporter, as the Collector's: accepts every batch and drops it.
//! For pipelines that exist for what their processors keep (a tier-2
//! gateway's metrics pipeline feeds `correlate`'s join and exports nothing:
//! one other instance exports the metrics, see README "Scaling out").

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError, DeliveryConfig, Validate};
use causeway_core::{Batch, BoxError, SignalSet};
use serde::Deserialize;

/// `exporters.nop`: no settings.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NopConfig {}

impl Validate for NopConfig {}

/// Factory of the `nop` exporter.
pub struct NopExporterFactory;

struct Nop;

#[async_trait]
impl Exporter for Nop {
    async fn export(&self, _batch: &Batch) -> Result<Delivered, ExportError> {
        Ok(Delivered::default())
    }
}

#[async_trait]
impl ExporterFactory for NopExporterFactory {
    fn kind(&self) -> &'static str {
        "nop"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<NopConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<NopConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        _ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        decode::<NopConfig>(cfg).map_err(|e| format!("{e:?}"))?;
        Ok(BuiltExporter {
            exporter: std::sync::Arc::new(Nop),
            delivery: DeliveryConfig::default(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_no_settings() {
        let f = NopExporterFactory;
        assert!(f.validate(&serde_yaml::Value::Null).is_ok());
        let e = f
            .validate(&serde_yaml::from_str("verbosity: basic").expect("yaml"))
            .expect_err("unknown key");
        assert!(format!("{e:?}").contains("verbosity"), "{e:?}");
    }
}

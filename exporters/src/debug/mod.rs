//! The `debug` exporter: a readable summary of what passes, on stdout.

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError, DeliveryConfig, Validate};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use serde::Deserialize;
use std::io::Write as _;
use std::sync::Arc;

/// `exporters.debug`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DebugExporterConfig {
    /// `basic` (one line a batch, the default), `normal` (one line an item)
    /// or `detailed` (the batch as OTLP JSON).
    #[serde(default)]
    pub verbosity: Verbosity,
    /// Batches printed in full each second before sampling starts (default 2,
    /// as in the Collector).
    #[serde(
        default = "default_initial",
        deserialize_with = "causeway_core::config::lenient_int"
    )]
    pub sampling_initial: u64,
    /// After those, every this-many-th batch of the second is printed
    /// (1: all of them).
    #[serde(
        default = "default_thereafter",
        deserialize_with = "causeway_core::config::lenient_int"
    )]
    pub sampling_thereafter: u64,
    /// Accepted for compatibility: causeway always prints to stdout.
    #[serde(default)]
    pub use_internal_logger: Option<bool>,
}

fn default_initial() -> u64 {
    2
}
fn default_thereafter() -> u64 {
    1
}

impl Default for DebugExporterConfig {
    fn default() -> Self {
        DebugExporterConfig {
            verbosity: Verbosity::default(),
            sampling_initial: default_initial(),
            sampling_thereafter: default_thereafter(),
            use_internal_logger: None,
        }
    }
}

/// How much to print.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Verbosity {
    /// One line a batch.
    #[default]
    Basic,
    /// One line an item.
    Normal,
    /// Full OTLP JSON.
    Detailed,
}

impl Validate for DebugExporterConfig {
    fn validate(&self) -> Vec<ConfigError> {
        if self.sampling_thereafter == 0 {
            vec![ConfigError::new(
                "sampling_thereafter",
                "must be at least 1",
            )]
        } else {
            Vec::new()
        }
    }
}

/// Factory of the `debug` exporter.
pub struct DebugExporterFactory;

#[async_trait]
impl ExporterFactory for DebugExporterFactory {
    fn kind(&self) -> &'static str {
        "debug"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<DebugExporterConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<DebugExporterConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: DebugExporterConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let mut delivery = DeliveryConfig::default();
        delivery.queue.num_consumers = 1;
        Ok(BuiltExporter {
            exporter: Arc::new(DebugExporter {
                id: ctx.id.to_string(),
                verbosity: cfg.verbosity,
                sampler: Sampler::new(cfg.sampling_initial, cfg.sampling_thereafter),
            }),
            delivery,
        })
    }
}

struct DebugExporter {
    id: String,
    verbosity: Verbosity,
    sampler: Sampler,
}

/// The Collector's sampling of debug output: in each second, the first
/// `initial` batches, then every `thereafter`-th.
struct Sampler {
    initial: u64,
    thereafter: u64,
    /// (second, batches seen in it).
    state: std::sync::Mutex<(u64, u64)>,
}

impl Sampler {
    fn new(initial: u64, thereafter: u64) -> Self {
        Sampler {
            initial,
            thereafter: thereafter.max(1),
            state: std::sync::Mutex::new((u64::MAX, 0)),
        }
    }

    /// Whether the batch seen in second `now` is printed.
    fn sample(&self, now: u64) -> bool {
        let mut st = match self.state.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if st.0 != now {
            *st = (now, 0);
        }
        st.1 += 1;
        let n = st.1;
        n <= self.initial || (n - self.initial).is_multiple_of(self.thereafter)
    }
}

fn hex(b: &[u8]) -> String {
    hex::encode(b)
}

/// The summary text of a batch.
fn summarize(
    id: &str,
    batch: &Batch,
    verbosity: Verbosity,
) -> Result<String, causeway_core::CoreError> {
    let mut s = format!(
        "{id}: {}: {} {}\n",
        batch.signal(),
        batch.items(),
        batch.signal().item_name()
    );
    match verbosity {
        Verbosity::Basic => {}
        Verbosity::Detailed => {
            let json = match batch.signal() {
                Signal::Traces => serde_json::to_string_pretty(&batch.to_traces_request()?),
                Signal::Logs => serde_json::to_string_pretty(&batch.to_logs_request()?),
                Signal::Metrics => serde_json::to_string_pretty(&batch.to_metrics_request()?),
                Signal::Profiles => {
                    serde_json::to_string_pretty(&crate::file::profiles_json(batch)?)
                }
            };
            s.push_str(&json.unwrap_or_default());
            s.push('\n');
        }
        Verbosity::Normal => normal(&mut s, batch)?,
    }
    Ok(s)
}

/// A line per span, log record, profile or metric.
fn normal(s: &mut String, batch: &Batch) -> Result<(), causeway_core::CoreError> {
    match batch.signal() {
        Signal::Traces => {
            for rs in batch.to_traces_request()?.resource_spans {
                for ss in rs.scope_spans {
                    for sp in ss.spans {
                        let dur_ms = sp
                            .end_time_unix_nano
                            .saturating_sub(sp.start_time_unix_nano)
                            as f64
                            / 1e6;
                        let code = sp.status.map(|st| st.code).unwrap_or(0);
                        s.push_str(&format!(
                            "  span {} trace={} id={} parent={} {:.3}ms status={} attrs={}",
                            sp.name,
                            hex(&sp.trace_id),
                            hex(&sp.span_id),
                            hex(&sp.parent_span_id),
                            dur_ms,
                            code,
                            sp.attributes.len()
                        ));
                        s.push('\n');
                    }
                }
            }
        }
        Signal::Logs => {
            for rl in batch.to_logs_request()?.resource_logs {
                for sl in rl.scope_logs {
                    for l in sl.log_records {
                        let body = l.body.map(|b| format!("{:?}", b.value)).unwrap_or_default();
                        s.push_str(&format!(
                            "  log severity={} trace={} {}",
                            l.severity_text,
                            hex(&l.trace_id),
                            body
                        ));
                        s.push('\n');
                    }
                }
            }
        }
        Signal::Profiles => profiles(s, batch)?,
        Signal::Metrics => {
            for rm in batch.to_metrics_request()?.resource_metrics {
                for sm in rm.scope_metrics {
                    for m in sm.metrics {
                        s.push_str(&format!("  metric {} unit={:?}", m.name, m.unit));
                        s.push('\n');
                    }
                }
            }
        }
    }
    Ok(())
}

/// A line per profile: its sample type, samples and duration.
fn profiles(s: &mut String, batch: &Batch) -> Result<(), causeway_core::CoreError> {
    let req = batch.to_profiles_request()?.unwrap_or_default();
    let strings = req
        .dictionary
        .as_ref()
        .map(|d| d.string_table.as_slice())
        .unwrap_or_default();
    let name = |i: i32| {
        usize::try_from(i)
            .ok()
            .and_then(|i| strings.get(i))
            .map_or("", String::as_str)
    };
    for rp in &req.resource_profiles {
        for sp in &rp.scope_profiles {
            for p in &sp.profiles {
                let (kind, unit) = p
                    .sample_type
                    .as_ref()
                    .map_or(("", ""), |t| (name(t.type_strindex), name(t.unit_strindex)));
                s.push_str(&format!(
                    "  profile {kind}/{unit} samples={} duration={:.3}s",
                    p.samples.len(),
                    p.duration_nano as f64 / 1e9
                ));
                s.push('\n');
            }
        }
    }
    Ok(())
}

#[async_trait]
impl Exporter for DebugExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let second = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        if !self.sampler.sample(second) {
            return Ok(Delivered::default());
        }
        let text =
            summarize(&self.id, batch, self.verbosity).map_err(|e| ExportError::Permanent {
                source: Box::new(e),
            })?;
        let mut out = std::io::stdout().lock();
        // stdout closed (e.g. a pipe) is not worth failing the pipeline for.
        if out.write_all(text.as_bytes()).is_err() {
            tracing::debug!(exporter = %self.id, "stdout is closed.");
        }
        Ok(Delivered::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_prints_the_first_batches_of_each_second_then_every_nth() {
        let s = Sampler::new(2, 3);
        let printed: Vec<bool> = (0..8).map(|_| s.sample(100)).collect();
        // 1, 2 printed; then the 3rd after them (5th), then the 8th.
        assert_eq!(
            printed,
            vec![true, true, false, false, true, false, false, true]
        );
        // A new second starts over.
        assert!(s.sample(101) && s.sample(101) && !s.sample(101));
        // The defaults print everything.
        let all = Sampler::new(default_initial(), default_thereafter());
        assert!((0..100).all(|_| all.sample(7)));
    }

    #[test]
    fn the_collector_keys_load() {
        let c: DebugExporterConfig = decode(
            &serde_yaml::from_str(
                "verbosity: detailed\nsampling_initial: 5\nsampling_thereafter: 200\nuse_internal_logger: false",
            )
            .expect("yaml"),
        )
        .expect("valid");
        assert_eq!((c.sampling_initial, c.sampling_thereafter), (5, 200));
        assert!(decode::<DebugExporterConfig>(
            &serde_yaml::from_str("sampling_thereafter: 0").expect("yaml")
        )
        .is_err());
    }
}

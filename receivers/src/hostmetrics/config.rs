//! Configuration of the `hostmetrics` receiver.

use causeway_core::config::{ConfigError, Duration, Validate};
use serde::Deserialize;

/// `receivers.hostmetrics`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HostMetricsConfig {
    /// How often to read /proc. Utilizations are over this interval.
    #[serde(default = "interval")]
    pub collection_interval: Duration,
    /// Where the host's `/proc` is mounted, for a container reading its
    /// host's (`/hostfs` → `/hostfs/proc`).
    #[serde(default = "root")]
    pub root_path: String,
    /// `host.name` on the resource (unset: the kernel's hostname under `root_path`).
    #[serde(default)]
    pub host_name: Option<String>,
    /// Which groups of metrics to read, as the Collector's `scrapers`:
    /// `cpu`, `load`, `memory`, `disk`, `network`, `paging`, and causeway's
    /// `pressure` (PSI).
    /// Absent: all of them. Each may carry the Collector's per-metric
    /// switches, `metrics: {system.cpu.utilization: {enabled: false}}`.
    #[serde(default)]
    pub scrapers: Option<indexmap::IndexMap<String, Option<ScraperConfig>>>,
}

/// One scraper's settings.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScraperConfig {
    /// Per-metric switches.
    #[serde(default)]
    pub metrics: indexmap::IndexMap<String, MetricSwitch>,
}

/// `{enabled: bool}`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricSwitch {
    /// Whether the metric is reported.
    pub enabled: bool,
}

/// The scrapers and the metrics each reports.
pub const SCRAPERS: &[(&str, &[&str])] = &[
    (
        "cpu",
        &[
            "system.cpu.time",
            "system.cpu.utilization",
            "system.cpu.logical.count",
        ],
    ),
    (
        "load",
        &[
            "system.cpu.load_average.1m",
            "system.cpu.load_average.5m",
            "system.cpu.load_average.15m",
        ],
    ),
    (
        "memory",
        &[
            "system.memory.usage",
            "system.memory.utilization",
            "system.linux.memory.available",
            "system.linux.memory.anon",
        ],
    ),
    ("disk", &["system.disk.io_time", "system.disk.utilization"]),
    (
        "network",
        &[
            "system.network.io",
            "system.network.packets",
            "system.network.errors",
            "system.network.dropped",
        ],
    ),
    (
        "paging",
        &[
            "system.paging.operations",
            "system.paging.faults",
            "system.paging.usage",
        ],
    ),
    ("pressure", &["system.linux.pressure"]),
];

impl HostMetricsConfig {
    /// Whether metric `name` is reported.
    pub fn wants(&self, name: &str) -> bool {
        let Some(scrapers) = &self.scrapers else {
            return true;
        };
        SCRAPERS.iter().any(|(scraper, metrics)| {
            metrics.contains(&name)
                && scrapers.get(*scraper).is_some_and(|c| {
                    c.as_ref()
                        .and_then(|c| c.metrics.get(name))
                        .is_none_or(|m| m.enabled)
                })
        })
    }
}

fn interval() -> Duration {
    Duration::secs(10)
}
fn root() -> String {
    "/".into()
}

impl Validate for HostMetricsConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.collection_interval.get() < std::time::Duration::from_millis(50) {
            e.push(ConfigError::new(
                "collection_interval",
                "must be at least 50ms",
            ));
        }
        if self.root_path.is_empty() {
            e.push(ConfigError::new("root_path", "must not be empty"));
        }
        let known: Vec<&str> = SCRAPERS.iter().map(|(s, _)| *s).collect();
        for (name, c) in self.scrapers.iter().flatten() {
            let Some((_, metrics)) = SCRAPERS.iter().find(|(s, _)| s == name) else {
                e.push(ConfigError::new(
                    format!("scrapers.{name}"),
                    format!(
                        "the {name} scraper is not built in (causeway reads [{}]: the host evidence its root-cause analysis uses); remove it, or run the Collector's hostmetrics receiver for it",
                        known.join(", ")
                    ),
                ));
                continue;
            };
            for m in c.iter().flat_map(|c| c.metrics.keys()) {
                if !metrics.contains(&m.as_str()) {
                    e.push(ConfigError::new(
                        format!("scrapers.{name}.metrics.{m}"),
                        format!(
                            "the {name} scraper has no metric {m:?} (it has [{}])",
                            metrics.join(", ")
                        ),
                    ));
                }
            }
        }
        e
    }
}

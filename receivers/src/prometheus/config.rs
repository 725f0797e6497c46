//! Configuration of the `prometheus` receiver: the Collector's shape
//! (`config:` holding Prometheus' own `scrape_configs`).

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

/// `receivers.prometheus`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrometheusReceiverConfig {
    /// Prometheus' configuration: `global` and `scrape_configs`.
    pub config: PromConfig,
}

/// `config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PromConfig {
    /// Defaults for every job.
    #[serde(default)]
    pub global: GlobalConfig,
    /// The jobs.
    pub scrape_configs: Vec<ScrapeConfig>,
}

/// `global`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GlobalConfig {
    /// Default scrape interval (Prometheus' default: 1m).
    #[serde(default)]
    pub scrape_interval: Option<Duration>,
    /// Default scrape timeout (Prometheus' default: 10s).
    #[serde(default)]
    pub scrape_timeout: Option<Duration>,
}

/// One job.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScrapeConfig {
    /// The job name (`service.name` of what it scrapes).
    pub job_name: String,
    /// How often (default: `global.scrape_interval`, else 1m).
    #[serde(default)]
    pub scrape_interval: Option<Duration>,
    /// How long a scrape may take (default: `global.scrape_timeout`, else 10s).
    #[serde(default)]
    pub scrape_timeout: Option<Duration>,
    /// Path (default `/metrics`).
    #[serde(default = "default_path")]
    pub metrics_path: String,
    /// `http` (default) or `https`.
    #[serde(default = "default_scheme")]
    pub scheme: String,
    /// URL query parameters.
    #[serde(default)]
    pub params: IndexMap<String, Vec<String>>,
    /// Targets and their extra labels.
    #[serde(default)]
    pub static_configs: Vec<StaticConfig>,
    /// Keep the scraped `job`/`instance` labels instead of renaming them `exported_*`.
    #[serde(default)]
    pub honor_labels: bool,
    /// Largest body read from a target (default 16MiB); a bigger one fails the scrape.
    #[serde(default = "default_body_limit")]
    pub body_size_limit: ByteSize,
    /// Most samples taken from one scrape (default 200000); more fail the scrape.
    #[serde(
        default = "default_sample_limit",
        deserialize_with = "causeway_core::config::lenient_int"
    )]
    pub sample_limit: usize,
}

/// `static_configs[]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticConfig {
    /// `host:port` of each target.
    pub targets: Vec<String>,
    /// Labels added to every series of these targets.
    #[serde(default)]
    pub labels: IndexMap<String, String>,
}

fn default_path() -> String {
    "/metrics".into()
}
fn default_scheme() -> String {
    "http".into()
}
fn default_body_limit() -> ByteSize {
    ByteSize(16 << 20)
}
fn default_sample_limit() -> usize {
    200_000
}

impl ScrapeConfig {
    /// The interval and timeout that apply.
    pub fn timing(&self, g: &GlobalConfig) -> (std::time::Duration, std::time::Duration) {
        let interval = self
            .scrape_interval
            .or(g.scrape_interval)
            .unwrap_or(Duration::secs(60))
            .get();
        let timeout = self
            .scrape_timeout
            .or(g.scrape_timeout)
            .unwrap_or(Duration::secs(10))
            .get();
        (interval, timeout.min(interval))
    }
}

impl Validate for PrometheusReceiverConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.config.scrape_configs.is_empty() {
            e.push(ConfigError::new(
                "config.scrape_configs",
                "at least one job is required",
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, j) in self.config.scrape_configs.iter().enumerate() {
            let at = |k: &str| format!("config.scrape_configs[{i}].{k}");
            if j.job_name.trim().is_empty() {
                e.push(ConfigError::new(at("job_name"), "must not be empty"));
            } else if !names.insert(j.job_name.as_str()) {
                e.push(ConfigError::new(
                    at("job_name"),
                    format!("duplicate job {:?}", j.job_name),
                ));
            }
            if j.scheme != "http" {
                e.push(ConfigError::new(
                    at("scheme"),
                    format!(
                        "{:?}: only `http` is supported so far (no tls_config yet)",
                        j.scheme
                    ),
                ));
            }
            if !j.metrics_path.starts_with('/') {
                e.push(ConfigError::new(at("metrics_path"), "must start with `/`"));
            }
            let (interval, _) = j.timing(&self.config.global);
            if interval < std::time::Duration::from_millis(100) {
                e.push(ConfigError::new(
                    at("scrape_interval"),
                    "must be at least 100ms",
                ));
            }
            if j.static_configs.iter().all(|s| s.targets.is_empty()) {
                e.push(ConfigError::new(at("static_configs"), "no target"));
            }
            for (k, s) in j.static_configs.iter().enumerate() {
                for (t, target) in s.targets.iter().enumerate() {
                    if target.contains('/') || !target.contains(':') {
                        e.push(ConfigError::new(
                            at(&format!("static_configs[{k}].targets[{t}]")),
                            format!("{target:?}: write host:port"),
                        ));
                    }
                }
            }
            if j.sample_limit == 0 {
                e.push(ConfigError::new(at("sample_limit"), "must be at least 1"));
            }
        }
        e
    }
}

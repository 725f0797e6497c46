//! Configuration of the `hostmetrics` receiver.

use causeway_core::config::{ConfigError, Duration, Validate};
use serde::Deserialize;

/// `receivers.hostmetrics`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostMetricsConfig {
    /// How often to read /proc (default 10s). Utilizations are over this interval.
    #[serde(default = "interval")]
    pub collection_interval: Duration,
    /// Where the host's `/proc` is mounted, for a container reading its
    /// host's (`/hostfs` → `/hostfs/proc`; default `/`).
    #[serde(default = "root")]
    pub root_path: String,
    /// `host.name` on the resource (default: the kernel's hostname under `root_path`).
    #[serde(default)]
    pub host_name: Option<String>,
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
        e
    }
}

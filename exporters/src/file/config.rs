//! Configuration of the `file` exporter.

use causeway_core::config::{ConfigError, Validate};
use serde::Deserialize;

/// `exporters.file`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileExporterConfig {
    /// File to write. With `{signal}` in it (e.g. `out/{signal}.jsonl`) each
    /// signal gets its own file; otherwise all signals share one.
    pub path: String,
    /// Only `json` (OTLP JSON, one request a line, as the Collector's file exporter writes).
    #[serde(default = "json")]
    pub format: String,
    /// Size-based rotation.
    #[serde(default)]
    pub rotation: Option<RotationConfig>,
}

fn json() -> String {
    "json".into()
}

/// `rotation`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RotationConfig {
    /// Rotate when the file would exceed this many megabytes (MiB).
    #[serde(default = "max_mb")]
    pub max_megabytes: u64,
    /// Rotated files to keep (0 keeps all).
    #[serde(default = "max_backups")]
    pub max_backups: usize,
}

impl Default for RotationConfig {
    fn default() -> Self {
        RotationConfig {
            max_megabytes: max_mb(),
            max_backups: max_backups(),
        }
    }
}

fn max_mb() -> u64 {
    100
}
fn max_backups() -> usize {
    100
}

impl Validate for FileExporterConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.path.trim().is_empty() {
            e.push(ConfigError::new("path", "must not be empty"));
        }
        if self.format != "json" {
            e.push(ConfigError::new(
                "format",
                format!(
                    "unsupported format {:?}: only `json` is available",
                    self.format
                ),
            ));
        }
        if let Some(r) = &self.rotation {
            if r.max_megabytes == 0 {
                e.push(ConfigError::new(
                    "rotation.max_megabytes",
                    "must be at least 1",
                ));
            }
        }
        e
    }
}

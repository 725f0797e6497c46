//! Configuration of the `gateway_log` receiver.

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

use super::parse::Canon;

/// Where to start in files found at startup without a checkpoint.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum StartAt {
    /// From the first byte.
    Beginning,
    /// From the current end (new lines only), as the Collector's filelog does.
    #[default]
    End,
}

/// Line formats.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum FormatName {
    /// One JSON object a line.
    #[default]
    Json,
    /// Envoy's (and Envoy Gateway's) JSON access log.
    Envoy,
    /// Envoy's default text access log.
    EnvoyText,
    /// Istio's default text access log.
    Istio,
    /// NGINX combined (+ timings) or NGINX JSON.
    Nginx,
    /// ingress-nginx's default `log-format-upstream`, or its JSON variables.
    IngressNginx,
    /// Kong Gateway's log serializer (JSON).
    Kong,
    /// Apache APISIX's logger format (JSON).
    Apisix,
    /// Traefik's JSON access log.
    Traefik,
    /// AWS Application Load Balancer access log.
    AwsAlb,
    /// Google Cloud load balancer request log (Cloud Logging JSON).
    GcpLb,
    /// Named-capture regex (`regex:`).
    Regex,
}

/// `receivers.gateway_log`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GatewayLogConfig {
    /// Glob patterns of files to tail: the live file (`access.log`) is
    /// enough. The rotated backups of what they name are found whatever
    /// the include says (the name plus a rotation suffix, compressed or
    /// not, in its directory or the `olddir` of `logrotate_configs`): they
    /// carry what a copy-truncate copied or a compression took before the
    /// end was read. Backups found at startup are history, not read.
    pub include: Vec<String>,
    /// Glob patterns to leave out (of the files and of their backups).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// logrotate configuration files (or directories of them) read at
    /// startup for the `olddir` of the included files (default
    /// `[/etc/logrotate.conf, /etc/logrotate.d]`; a missing one is skipped).
    #[serde(default = "logrotate_configs")]
    pub logrotate_configs: Vec<String>,
    /// `end` or `beginning`, for files found at startup without a checkpoint.
    /// Files that appear later are always read from their beginning.
    #[serde(default)]
    pub start_at: StartAt,
    /// How often to look for new files and new lines.
    #[serde(default = "poll")]
    pub poll_interval: Duration,
    /// `json`, `envoy`, `nginx` or `regex`.
    #[serde(default)]
    pub format: FormatName,
    /// For `format: regex`: named captures named after the fields (`trace_id`, `route_id`, `status_code`, …).
    #[serde(default)]
    pub regex: Option<String>,
    /// Which key holds which field, e.g. `{trace_id: x_trace, duration_ms: took}`.
    #[serde(default)]
    pub fields: IndexMap<String, String>,
    /// Longer lines are cut: skipped to the next newline, counted and reported.
    #[serde(default = "max_line")]
    pub max_line_bytes: ByteSize,
    /// Bytes of a file's beginning that identify it across renames.
    #[serde(default = "fingerprint")]
    pub fingerprint_size: ByteSize,
    /// Directory for read checkpoints; without it a restart starts over by `start_at`.
    #[serde(default)]
    pub storage: Option<String>,
    /// Lines per batch sent into the pipeline.
    #[serde(default = "batch_lines")]
    pub max_batch_lines: usize,
    /// Batches sent but not yet delivered; reading pauses beyond it. This
    /// bounds what a crash can repeat.
    #[serde(default = "inflight")]
    pub max_inflight_batches: usize,
    /// After an exporter gave up on lines (its `max_elapsed_time` passed),
    /// the checkpoint stays before them and the files are read again from
    /// it after this pause: a file can always be read again.
    #[serde(default = "redeliver")]
    pub redeliver_delay: Duration,
    /// Files open at most, counting those opened ahead of the reader
    ///: a new file is opened within one `poll_interval` of
    /// appearing, even while the lines read before are still being
    /// delivered, so a rotation that compresses it away before it is read
    /// loses nothing. With this many open, a new file is opened only when
    /// the reader polls.
    #[serde(default = "max_held")]
    pub max_held_files: usize,
    /// A file that bad lines are appended to (as JSON, with file, offset and reason).
    #[serde(default)]
    pub dead_letter: Option<String>,
    /// Resource attributes of the records, e.g. `service.name: edge-gateway`.
    #[serde(default)]
    pub resource: IndexMap<String, String>,
}

fn poll() -> Duration {
    Duration::millis(200)
}
fn max_line() -> ByteSize {
    ByteSize(1 << 20)
}
fn fingerprint() -> ByteSize {
    ByteSize(1024)
}
fn batch_lines() -> usize {
    1000
}
fn inflight() -> usize {
    16
}
fn max_held() -> usize {
    1024
}
fn redeliver() -> Duration {
    Duration::secs(5)
}

impl Validate for GatewayLogConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.include.is_empty() {
            e.push(ConfigError::new(
                "include",
                "at least one glob pattern is required",
            ));
        }
        for (key, list) in [("include", &self.include), ("exclude", &self.exclude)] {
            for (i, p) in list.iter().enumerate() {
                if let Err(x) = glob::Pattern::new(p) {
                    e.push(ConfigError::new(
                        format!("{key}[{i}]"),
                        format!("invalid glob: {x}"),
                    ));
                }
            }
        }
        match (&self.format, &self.regex) {
            (FormatName::Regex, None) => {
                e.push(ConfigError::new("regex", "required with format: regex"))
            }
            (FormatName::Regex, Some(r)) => match regex::Regex::new(r) {
                Err(x) => e.push(ConfigError::new("regex", format!("invalid regex: {x}"))),
                Ok(re) => {
                    for n in re.capture_names().flatten() {
                        if Canon::from_name(n).is_none() {
                            e.push(ConfigError::new("regex", format!("unknown capture name {n:?}: use field names such as trace_id, route_id, status_code")));
                        }
                    }
                }
            },
            (_, Some(_)) => e.push(ConfigError::new("regex", "only used with format: regex")),
            _ => {}
        }
        if !self.fields.is_empty()
            && matches!(
                self.format,
                FormatName::EnvoyText | FormatName::Istio | FormatName::AwsAlb | FormatName::Regex
            )
        {
            e.push(ConfigError::new(
                "fields",
                "maps JSON keys, and this format is text: use `format: regex` with named captures to read other parts of the line",
            ));
        }
        for k in self.fields.keys() {
            if Canon::from_name(k).is_none() {
                let valid: Vec<&str> = Canon::ALL.iter().map(|c| c.name()).collect();
                e.push(ConfigError::new(
                    format!("fields.{k}"),
                    format!("unknown field (valid: {})", valid.join(", ")),
                ));
            }
        }
        if self.max_line_bytes.0 < 64 {
            e.push(ConfigError::new("max_line_bytes", "must be at least 64"));
        }
        if self.fingerprint_size.0 < 16 {
            e.push(ConfigError::new(
                "fingerprint_size",
                "must be at least 16 bytes",
            ));
        }
        if self.max_batch_lines == 0 {
            e.push(ConfigError::new("max_batch_lines", "must be at least 1"));
        }
        if self.max_inflight_batches == 0 {
            e.push(ConfigError::new(
                "max_inflight_batches",
                "must be at least 1",
            ));
        }
        if self.max_held_files == 0 {
            e.push(ConfigError::new("max_held_files", "must be at least 1"));
        }
        if self.poll_interval.get().is_zero() {
            e.push(ConfigError::new("poll_interval", "must be greater than 0"));
        }
        e
    }
}

fn logrotate_configs() -> Vec<String> {
    vec!["/etc/logrotate.conf".into(), "/etc/logrotate.d".into()]
}

//! Typed pieces of the configuration shared by all components.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer};
use std::fmt;
use std::str::FromStr;

use super::{ConfigError, Validate};
use crate::model::{Signal, SignalSet};

/// A component id: `type` or `type/name`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ComponentId {
    kind: String,
    name: Option<String>,
}

impl ComponentId {
    /// The component type (`otlp` in `otlp/jaeger`).
    pub fn kind(&self) -> &str {
        &self.kind
    }
    /// The name after the slash, if any.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl FromStr for ComponentId {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, name) = match s.split_once('/') {
            Some((k, n)) => (k, Some(n)),
            None => (s, None),
        };
        let valid_kind = kind.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_kind {
            return Err(format!(
                "invalid component id {s:?}: the type must start with a letter and contain only letters, digits and `_`"
            ));
        }
        if name.is_some_and(|n| n.is_empty() || n.contains(char::is_whitespace)) {
            return Err(format!(
                "invalid component id {s:?}: the name after `/` must be non-empty, without spaces"
            ));
        }
        Ok(ComponentId {
            kind: kind.to_string(),
            name: name.map(str::to_string),
        })
    }
}

impl fmt::Display for ComponentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(n) => write!(f, "{}/{}", self.kind, n),
            None => f.write_str(&self.kind),
        }
    }
}

/// A pipeline id: `traces`, `logs`, `metrics`, `profiles` or `all`,
/// optionally `/name`. `all` pipelines carry every signal together (for
/// joins).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PipelineId {
    /// The signals this pipeline carries.
    pub signals: SignalSet,
    id: String,
}

impl PipelineId {
    /// Parse `traces[/name]`, `logs[/name]`, `metrics[/name]`,
    /// `profiles[/name]`, `all[/name]`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let kind = s.split_once('/').map_or(s, |(k, _)| k);
        let signals = match kind {
            "traces" => SignalSet::only(Signal::Traces),
            "logs" => SignalSet::only(Signal::Logs),
            "metrics" => SignalSet::only(Signal::Metrics),
            "profiles" => SignalSet::only(Signal::Profiles),
            "all" => SignalSet::WITH_PROFILES,
            other => {
                return Err(format!(
                    "unknown pipeline type {other:?} (valid: traces, logs, metrics, profiles, all; optionally followed by /name)"
                ))
            }
        };
        Ok(PipelineId {
            signals,
            id: s.to_string(),
        })
    }
}

impl fmt::Display for PipelineId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// A duration written as `10s`, `500ms`, `1m30s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Duration(pub std::time::Duration);

impl Duration {
    /// From seconds.
    pub const fn secs(s: u64) -> Self {
        Duration(std::time::Duration::from_secs(s))
    }
    /// From milliseconds.
    pub const fn millis(ms: u64) -> Self {
        Duration(std::time::Duration::from_millis(ms))
    }
    /// The std duration.
    pub fn get(self) -> std::time::Duration {
        self.0
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected a duration such as `10s`, `500ms` or `1m30s`")
        })?;
        let t = s.trim();
        if t.contains(char::is_whitespace) {
            // `5 s`, `1m 30s`: humantime would take them, the Collector
            // (Go's time.ParseDuration) refuses them; so does causeway, so
            // that a file means the same to both.
            return Err(serde::de::Error::custom(format!(
                "invalid duration {s:?} (a space inside); write it without spaces, e.g. `5s`, `1m30s`"
            )));
        }
        humantime::parse_duration(t).map(Duration).map_err(|e| {
            serde::de::Error::custom(format!(
                "invalid duration {s:?} ({e}); write e.g. `10s`, `500ms`, `1m30s`"
            ))
        })
    }
}

impl fmt::Display for Duration {
    /// As it is written in a config: `30s`, `1m30s`, `250ms`, `0s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u128); 6] = [
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ];
        let mut left = self.0.as_nanos();
        if left == 0 {
            return f.write_str("0s");
        }
        for (unit, size) in UNITS {
            if left >= size {
                write!(f, "{}{unit}", left / size)?;
                left %= size;
            }
        }
        Ok(())
    }
}

/// Written back as in a config, so that the JSON Schema carries defaults.
impl serde::Serialize for Duration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl schemars::JsonSchema for Duration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^([0-9]+(\\.[0-9]+)?[a-zµ]+)+$",
            "description": "A duration: a number and a unit (ns, us, ms, s, m, h), repeated without spaces: `10s`, `500ms`, `1m30s`."
        })
    }
}

/// A size in bytes written as `64MiB`, `1GB`, `512KiB` or a plain number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteSize(pub u64);

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        match n {
            0 => write!(f, "0B"),
            _ if n.is_multiple_of(1 << 30) => write!(f, "{}GiB", n >> 30),
            _ if n.is_multiple_of(1 << 20) => write!(f, "{}MiB", n >> 20),
            _ if n.is_multiple_of(1 << 10) => write!(f, "{}KiB", n >> 10),
            _ => write!(f, "{n}B"),
        }
    }
}

/// Deserialize an integer written as YAML 1.1 allows and the Collector
/// (Go's YAML) reads it: `100000`, `100_000` or `"100000"`.
pub fn lenient_int<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        N(u64),
        S(String),
    }
    let expected = || serde::de::Error::custom("expected a whole number such as 100000 or 100_000");
    let n = match Raw::deserialize(d).map_err(|_| expected())? {
        Raw::N(n) => n,
        Raw::S(s) => s.trim().replace('_', "").parse().map_err(|_| {
            serde::de::Error::custom(format!(
                "invalid number {s:?}; expected a whole number such as 100000 or 100_000"
            ))
        })?,
    };
    T::try_from(n).map_err(|_| serde::de::Error::custom(format!("{n} is too large")))
}

impl FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let split = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let (num, unit) = t.split_at(split);
        let num: f64 = num
            .parse()
            .map_err(|_| format!("invalid size {s:?}; write e.g. `64MiB`, `512KiB`, `1GB`"))?;
        let mult: u64 = match unit.trim() {
            "" | "B" => 1,
            "KB" | "kB" => 1_000,
            "MB" => 1_000_000,
            "GB" => 1_000_000_000,
            "KiB" => 1 << 10,
            "MiB" => 1 << 20,
            "GiB" => 1 << 30,
            other => {
                return Err(format!(
                    "unknown size unit {other:?} in {s:?} (use B, KB, MB, GB, KiB, MiB, GiB)"
                ))
            }
        };
        Ok(ByteSize((num * mult as f64) as u64))
    }
}

impl<'de> Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d).map_err(|_| {
            serde::de::Error::custom("expected a size such as `64MiB` or a number of bytes")
        })? {
            Raw::N(n) => Ok(ByteSize(n)),
            Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// Written back as in a config, so that the JSON Schema carries defaults.
impl serde::Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl schemars::JsonSchema for ByteSize {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteSize".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "anyOf": [
                {"type": "integer", "minimum": 0},
                {"type": "string", "pattern": "^[0-9]+(\\.[0-9]+)? ?(B|KB|kB|MB|GB|KiB|MiB|GiB)?$"}
            ],
            "description": "A size: a number of bytes, or a number and a unit (B, KB, MB, GB, KiB, MiB, GiB): `64MiB`, `512KiB`."
        })
    }
}

/// Deserialize a present-but-null section (`grpc:`) as its defaults, as the
/// Collector does; use with `#[serde(deserialize_with = ...)]`.
pub fn null_as_default<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Some(Option::<T>::deserialize(d)?.unwrap_or_default()))
}

/// The top level of the pipeline file (its JSON Schema is composed by
/// [`super::schema::pipeline_file`], one entry per component type).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineFile {
    /// Receivers by id; each section is decoded by its factory.
    #[serde(default)]
    pub receivers: IndexMap<String, serde_yaml::Value>,
    /// Processors by id.
    #[serde(default)]
    pub processors: IndexMap<String, serde_yaml::Value>,
    /// Exporters by id.
    #[serde(default)]
    pub exporters: IndexMap<String, serde_yaml::Value>,
    /// Connectors by id (none is built in yet; see README).
    #[serde(default)]
    pub connectors: IndexMap<String, serde_yaml::Value>,
    /// Extensions by id (none is built in yet; see README).
    #[serde(default)]
    pub extensions: IndexMap<String, serde_yaml::Value>,
    /// Which components run, wired how.
    #[serde(default)]
    pub service: ServiceConfig,
}

/// The `service` section.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// Extensions to start.
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Pipelines by id (`traces`, `logs/gateway`, `all`, …).
    #[serde(default)]
    pub pipelines: IndexMap<String, PipelineConfig>,
    /// The daemon's own logs, metrics and traces.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// How long SIGTERM/SIGINT may take to drain pipelines and flush exporters
    /// before what is left is dropped (counted). A causeway extension.
    #[serde(default = "default_shutdown_timeout")]
    pub shutdown_timeout: Duration,
    /// Admission control on a memory budget (see [`crate::memory`]). Off by default.
    #[serde(default)]
    pub memory_limiter: Option<crate::memory::MemoryLimiterConfig>,
    /// Serve the telemetry server (the page, its API, `/metrics`), `zpages`
    /// and `pprof` beyond loopback without TLS and credentials (default
    /// false: such a config is refused, naming the key to set; with true,
    /// `validate` and the start warn instead). For a lab. A causeway key.
    #[serde(default)]
    pub insecure_expose: bool,
}

impl Default for ServiceConfig {
    fn default() -> Self {
        ServiceConfig {
            extensions: Vec::new(),
            pipelines: IndexMap::new(),
            telemetry: TelemetryConfig::default(),
            shutdown_timeout: default_shutdown_timeout(),
            memory_limiter: None,
            insecure_expose: false,
        }
    }
}

fn default_shutdown_timeout() -> Duration {
    Duration::secs(30)
}

/// One pipeline.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// Receiver ids feeding this pipeline.
    #[serde(default)]
    pub receivers: Vec<String>,
    /// Processor ids, in order.
    #[serde(default)]
    pub processors: Vec<String>,
    /// Exporter ids receiving the pipeline's output.
    #[serde(default)]
    pub exporters: Vec<String>,
}

/// `service.telemetry`, in the Collector's shape.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryConfig {
    /// The daemon's logs.
    #[serde(default)]
    pub logs: TelemetryLogs,
    /// The daemon's metrics.
    #[serde(default)]
    pub metrics: TelemetryMetrics,
    /// The daemon's traces.
    #[serde(default)]
    pub traces: TelemetryTraces,
    /// Resource attributes on the daemon's own telemetry.
    #[serde(default)]
    pub resource: IndexMap<String, String>,
    /// Serve the built-in page (`/`) and its JSON API (`/api/…`) on the
    /// telemetry server, with its TLS and `auth`. A causeway key.
    #[serde(default = "yes")]
    pub ui: bool,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            logs: TelemetryLogs::default(),
            metrics: TelemetryMetrics::default(),
            traces: TelemetryTraces::default(),
            resource: IndexMap::new(),
            ui: true,
        }
    }
}

/// `service.telemetry.logs`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryLogs {
    /// `debug`, `info`, `warn`, `error` (the `--log-level` flag wins).
    pub level: Option<String>,
    /// `console` (text) or `json` (the `--log-format` flag wins).
    pub encoding: Option<String>,
}

/// `service.telemetry.metrics`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryMetrics {
    /// `none` disables the metrics server; anything else enables it.
    pub level: Option<String>,
    /// Legacy form of the pull reader: `host:port` of `/metrics`, `/healthz`, `/readyz`
    ///.
    pub address: Option<String>,
    /// Readers: `pull` (Prometheus) and `periodic` (OTLP push).
    #[serde(default)]
    pub readers: Vec<MetricReader>,
    /// TLS for the `/metrics`, `/healthz`, `/readyz` server (unset: plaintext).
    #[serde(default)]
    pub tls: Option<crate::tls::ServerTls>,
    /// Also serve the OpenTelemetry Collector's names of the same counts
    /// (`otelcol_receiver_accepted_spans`, `otelcol_exporter_sent_spans`,
    /// `otelcol_exporter_queue_size`, …) so that its dashboards and alerts
    /// work unchanged. A causeway key.
    #[serde(default = "yes")]
    pub collector_names: bool,
    /// Require a bearer token or a user and password on the telemetry
    /// server (`/metrics`, the page and its API; not `/healthz`, `/readyz`,
    /// which probes call without credentials). A causeway key.
    #[serde(default)]
    pub auth: Option<crate::tls::ServerAuth>,
    /// Limits of the telemetry server under a connection flood
    /// (`max`, `handshake_timeout`, `header_read_timeout`, `idle_timeout`,
    /// `keepalive_interval`, `keepalive_timeout`). A causeway key.
    #[serde(default)]
    pub connections: crate::conn::ConnectionLimits,
}

impl Default for TelemetryMetrics {
    fn default() -> Self {
        TelemetryMetrics {
            level: None,
            address: None,
            readers: Vec::new(),
            tls: None,
            collector_names: true,
            auth: None,
            connections: crate::conn::ConnectionLimits::default(),
        }
    }
}

/// One metric reader.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricReader {
    /// Serve `/metrics` for scraping.
    pub pull: Option<PullReader>,
    /// Push by OTLP at an interval.
    pub periodic: Option<PeriodicReader>,
}

/// `pull: {exporter: {prometheus: {host, port}}}`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PullReader {
    /// The exporter.
    pub exporter: PullExporter,
}

/// `exporter: {prometheus: …}`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PullExporter {
    /// Host and port of the scrape endpoint.
    pub prometheus: PrometheusEndpoint,
}

/// Host and port.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrometheusEndpoint {
    /// Host.
    #[serde(default = "default_host")]
    pub host: String,
    /// Port.
    #[serde(default = "default_port")]
    pub port: u16,
}

impl Default for PrometheusEndpoint {
    fn default() -> Self {
        PrometheusEndpoint {
            host: default_host(),
            port: default_port(),
        }
    }
}

fn default_host() -> String {
    "127.0.0.1".into()
}

fn default_port() -> u16 {
    8888
}

/// `periodic: {interval, exporter: {otlp: …}}`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PeriodicReader {
    /// Export interval in milliseconds, as in the Collector.
    pub interval: Option<u64>,
    /// The OTLP exporter.
    pub exporter: OtlpTelemetryExporter,
}

/// `exporter: {otlp: {protocol, endpoint}}`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpTelemetryExporter {
    /// Where to send.
    pub otlp: OtlpTelemetryEndpoint,
}

/// An OTLP destination for the daemon's own telemetry.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpTelemetryEndpoint {
    /// `grpc` or `http/protobuf`.
    pub protocol: Option<String>,
    /// E.g. `http://127.0.0.1:4317` (`https://…` with `tls`).
    pub endpoint: String,
    /// TLS: `ca_file`, and `cert_file`/`key_file` for mTLS.
    #[serde(default)]
    pub tls: crate::tls::ClientTls,
}

/// `service.telemetry.traces`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TelemetryTraces {
    /// Span processors: `- batch: {exporter: {otlp: …}}`.
    #[serde(default)]
    pub processors: Vec<TraceProcessorConfig>,
}

/// One span processor of the daemon's own traces.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TraceProcessorConfig {
    /// Batch span processor.
    pub batch: Option<BatchSpanProcessorConfig>,
}

/// `batch: {exporter: {otlp: …}}`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchSpanProcessorConfig {
    /// The exporter.
    pub exporter: OtlpTelemetryExporter,
}

/// `retry_on_failure`, as in the Collector's exporterhelper.
#[derive(Debug, Clone, Copy, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RetryConfig {
    /// Retry retryable failures at all.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// First wait.
    #[serde(default = "retry_initial")]
    pub initial_interval: Duration,
    /// Jitter: each wait is multiplied by a random factor in `[1-f, 1+f]`.
    #[serde(default = "retry_jitter")]
    pub randomization_factor: f64,
    /// Growth of the wait after each failure.
    #[serde(default = "retry_multiplier")]
    pub multiplier: f64,
    /// Largest wait.
    #[serde(default = "retry_max_interval")]
    pub max_interval: Duration,
    /// Give up after this long (`0s`: never).
    #[serde(default = "retry_max_elapsed")]
    pub max_elapsed_time: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            enabled: true,
            initial_interval: retry_initial(),
            randomization_factor: retry_jitter(),
            multiplier: retry_multiplier(),
            max_interval: retry_max_interval(),
            max_elapsed_time: retry_max_elapsed(),
        }
    }
}

fn yes() -> bool {
    true
}
fn retry_initial() -> Duration {
    Duration::secs(5)
}
fn retry_jitter() -> f64 {
    0.5
}
fn retry_multiplier() -> f64 {
    1.5
}
fn retry_max_interval() -> Duration {
    Duration::secs(30)
}
fn retry_max_elapsed() -> Duration {
    Duration::secs(300)
}

impl Validate for RetryConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if !(0.0..=1.0).contains(&self.randomization_factor) {
            e.push(ConfigError::new(
                "randomization_factor",
                "must be between 0 and 1",
            ));
        }
        if self.multiplier < 1.0 {
            e.push(ConfigError::new("multiplier", "must be at least 1"));
        }
        if self.initial_interval.get().is_zero() {
            e.push(ConfigError::new(
                "initial_interval",
                "must be greater than 0",
            ));
        }
        if self.max_interval < self.initial_interval {
            e.push(ConfigError::new(
                "max_interval",
                "must not be less than initial_interval",
            ));
        }
        e
    }
}

/// `sending_queue`, as in the Collector's exporterhelper.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueConfig {
    /// Queue at all (off: the pipeline waits for each export).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Concurrent exports.
    #[serde(default = "queue_consumers")]
    pub num_consumers: usize,
    /// Capacity, in units of `sizer`.
    #[serde(default = "queue_size", deserialize_with = "lenient_int")]
    pub queue_size: usize,
    /// When full: wait (pushing back to receivers and clients) or drop and count.
    /// causeway waits by default, so nothing is dropped silently.
    #[serde(default = "yes")]
    pub block_on_overflow: bool,
    /// What `queue_size` counts, as in the Collector: `requests` (batches,
    /// the default), `items` (spans, log records, data points) or `bytes`
    /// (encoded). The persistent queue is bounded by `max_size` instead.
    #[serde(default)]
    pub sizer: Sizer,
    /// A second bound on an in-memory queue whose `sizer` counts batches or
    /// items: the encoded bytes it holds (unset: a quarter of the memory
    /// limiter's limit, at most 256MiB; a batch bigger than that goes
    /// alone). A causeway key: without it, 1,000 batches of up to 20 MiB
    /// each could hold 20 GiB.
    #[serde(default)]
    pub max_bytes: Option<ByteSize>,
    /// A directory for a persistent queue on local disk (off: in memory).
    /// What is queued survives a crash or kill -9 and is sent after a restart.
    #[serde(default)]
    pub storage: Option<String>,
    /// Largest size of the persistent queue.
    #[serde(default = "queue_max_size")]
    pub max_size: ByteSize,
    /// Persistent queue full: `block` (backpressure) or `drop_oldest` (counted).
    #[serde(default)]
    pub when_full: crate::topology::WhenFull,
    /// Persistent queue fsync: `always`, `periodic` (once a second) or `never`.
    #[serde(default)]
    pub fsync: crate::topology::Fsync,
}

/// What a sending queue's `queue_size` counts.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Sizer {
    /// Batches.
    #[default]
    Requests,
    /// Spans, log records or data points.
    Items,
    /// Encoded bytes.
    Bytes,
}

fn queue_max_size() -> ByteSize {
    ByteSize(1 << 30)
}

/// `sending_queue.max_bytes` when it is not set: a quarter of the memory
/// limiter's `limit` (none: no limit known), at most 256 MiB, at least 1 MiB.
pub fn default_queue_max_bytes(memory_limit: Option<u64>) -> u64 {
    memory_limit.map_or(256 << 20, |l| (l / 4).clamp(1 << 20, 256 << 20))
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            enabled: true,
            num_consumers: queue_consumers(),
            queue_size: queue_size(),
            block_on_overflow: true,
            sizer: Sizer::default(),
            max_bytes: None,
            storage: None,
            max_size: queue_max_size(),
            when_full: crate::topology::WhenFull::Block,
            fsync: crate::topology::Fsync::Periodic,
        }
    }
}

fn queue_consumers() -> usize {
    10
}
fn queue_size() -> usize {
    1000
}

impl Validate for QueueConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.num_consumers == 0 {
            e.push(ConfigError::new("num_consumers", "must be at least 1"));
        }
        if self.queue_size == 0 {
            e.push(ConfigError::new("queue_size", "must be at least 1"));
        }
        if self.storage.as_ref().is_some_and(|s| s.trim().is_empty()) {
            e.push(ConfigError::new("storage", "must be a directory path"));
        }
        if self.max_bytes.is_some_and(|b| b.0 < 1 << 20) {
            e.push(ConfigError::new("max_bytes", "must be at least 1MiB"));
        }
        if self.max_size.0 < 1 << 20 {
            e.push(ConfigError::new("max_size", "must be at least 1MiB"));
        }
        if self.sizer != Sizer::Requests && self.storage.is_some() {
            e.push(ConfigError::new(
                "sizer",
                "a persistent queue (`storage`) is bounded by `max_size` in bytes; leave `sizer` at `requests`",
            ));
        }
        e
    }
}

/// Check the delivery sections every exporter has, with their key paths
/// (`retry_on_failure.…`, `sending_queue.…`, `timeout`).
pub fn delivery_errors(
    retry: &RetryConfig,
    queue: &QueueConfig,
    timeout: Duration,
) -> Vec<ConfigError> {
    let mut e: Vec<ConfigError> = retry
        .validate()
        .into_iter()
        .map(|x| x.under("retry_on_failure"))
        .collect();
    e.extend(
        queue
            .validate()
            .into_iter()
            .map(|x| x.under("sending_queue")),
    );
    if timeout.get().is_zero() {
        e.push(ConfigError::new("timeout", "must be greater than 0"));
    }
    e
}

/// How the topology delivers to an exporter: timeout, retries, queue.
#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// Per-attempt timeout.
    pub timeout: std::time::Duration,
    /// Retries.
    pub retry: RetryConfig,
    /// Sending queue.
    pub queue: QueueConfig,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            timeout: std::time::Duration::from_secs(5),
            retry: RetryConfig::default(),
            queue: QueueConfig::default(),
        }
    }
}

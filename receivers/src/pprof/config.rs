//! `receivers.pprof`.

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

use crate::prometheus::config::{FileSdConfig, StaticConfig};

/// A profile a Go runtime serves under `/debug/pprof/`.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// On-CPU time: `profile?seconds=N`, N seconds sampled.
    Cpu,
    /// Time goroutines waited on a `sync.Mutex` another held:
    /// `mutex?seconds=N`, what happened in those N seconds (the runtime
    /// records it only with `runtime.SetMutexProfileFraction`).
    Mutex,
    /// Time goroutines blocked (channels, `select`, `sync`):
    /// `block?seconds=N` (with `runtime.SetBlockProfileRate`).
    Block,
    /// The goroutines now and where they stand: `goroutine`.
    Goroutine,
    /// Allocations over N seconds (GC pressure): `allocs?seconds=N`.
    Allocs,
}

impl Kind {
    /// The path under the prefix, with its window.
    pub fn path(self, seconds: u64) -> String {
        match self {
            Kind::Cpu => format!("profile?seconds={seconds}"),
            Kind::Mutex => format!("mutex?seconds={seconds}"),
            Kind::Block => format!("block?seconds={seconds}"),
            Kind::Allocs => format!("allocs?seconds={seconds}"),
            Kind::Goroutine => "goroutine".to_string(),
        }
    }

    /// A delta over the window, stamped as Go's `net/http/pprof` stamps
    /// one: its time is the window's end (a CPU profile's is its start).
    pub fn is_delta(self) -> bool {
        matches!(self, Kind::Mutex | Kind::Block | Kind::Allocs)
    }

    /// Its name (the `profile` label of the receiver's counters).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Cpu => "cpu",
            Kind::Mutex => "mutex",
            Kind::Block => "block",
            Kind::Goroutine => "goroutine",
            Kind::Allocs => "allocs",
        }
    }
}

/// The processes of one service.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Job {
    /// `service.name` of their profiles.
    pub service: String,
    /// `host:port` of each process, with labels that become resource
    /// attributes of its profiles (as the `prometheus` receiver's).
    #[serde(default)]
    pub static_configs: Vec<StaticConfig>,
    /// Files listing more (re-read when they change; as Prometheus's).
    #[serde(default)]
    pub file_sd_configs: Vec<FileSdConfig>,
    /// `http` or `https`.
    #[serde(default = "http")]
    pub scheme: String,
    /// Where the runtime serves its profiles.
    #[serde(default = "prefix")]
    pub path_prefix: String,
}

/// `receivers.pprof`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PprofConfig {
    /// The services whose processes are profiled.
    pub targets: Vec<Job>,
    /// Which profiles are taken of each process.
    #[serde(default = "kinds")]
    pub profiles: Vec<Kind>,
    /// How often each profile is taken of each process. At
    /// least `seconds`; equal to it (the default), profiling is continuous:
    /// each window starts as the last one is answered.
    #[serde(default = "interval")]
    pub collection_interval: Duration,
    /// The window of a CPU profile and of a delta profile (mutex, block,
    /// allocs): what happened in these seconds.
    #[serde(default = "seconds")]
    pub seconds: Duration,
    /// How long an answer may take beyond `seconds`.
    #[serde(default = "timeout")]
    pub timeout: Duration,
    /// The largest answer, inflated: beyond, it is refused
    /// and counted (`reason="body_size_limit"`).
    #[serde(default = "body_limit")]
    pub body_size_limit: ByteSize,
    /// Samples in one profile, over every sample type:
    /// beyond, it is refused and counted (`reason="too_large"`).
    #[serde(default = "max_samples")]
    pub max_samples: usize,
    /// Frames in one stack (Go cuts stacks at 128).
    #[serde(default = "max_depth")]
    pub max_depth: usize,
    /// Client TLS for `https` targets.
    #[serde(default)]
    pub tls: causeway_core::tls::ClientTls,
    /// Attributes added to every profile's resource.
    #[serde(default)]
    pub resource_attributes: IndexMap<String, String>,
}

fn http() -> String {
    "http".into()
}
fn prefix() -> String {
    "/debug/pprof/".into()
}
fn kinds() -> Vec<Kind> {
    vec![Kind::Cpu, Kind::Mutex]
}
fn interval() -> Duration {
    Duration::secs(15)
}
fn seconds() -> Duration {
    Duration::secs(15)
}
fn timeout() -> Duration {
    Duration::secs(10)
}
fn body_limit() -> ByteSize {
    ByteSize(16 << 20)
}
fn max_samples() -> usize {
    200_000
}
fn max_depth() -> usize {
    1024
}

impl Validate for PprofConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.targets.is_empty() {
            e.push(ConfigError::new("targets", "list at least one service"));
        }
        for (i, j) in self.targets.iter().enumerate() {
            let at = |k: &str| format!("targets[{i}].{k}");
            if j.service.trim().is_empty() {
                e.push(ConfigError::new(at("service"), "must not be empty"));
            }
            if j.static_configs.is_empty() && j.file_sd_configs.is_empty() {
                e.push(ConfigError::new(
                    at("static_configs"),
                    "set static_configs or file_sd_configs",
                ));
            }
            if j.scheme != "http" && j.scheme != "https" {
                e.push(ConfigError::new(at("scheme"), "`http` or `https`"));
            }
            if !j.path_prefix.starts_with('/') || !j.path_prefix.ends_with('/') {
                e.push(ConfigError::new(
                    at("path_prefix"),
                    "must start and end with `/` (`/debug/pprof/`)",
                ));
            }
            for (k, s) in j.static_configs.iter().enumerate() {
                for (n, t) in s.targets.iter().enumerate() {
                    if t.is_empty() || t.contains('/') {
                        e.push(ConfigError::new(
                            at(&format!("static_configs[{k}].targets[{n}]")),
                            format!("{t:?}: host:port"),
                        ));
                    }
                }
            }
        }
        if self.profiles.is_empty() {
            e.push(ConfigError::new(
                "profiles",
                "list at least one of cpu, mutex, block, goroutine, allocs",
            ));
        }
        let secs = self.seconds.get();
        if secs.as_secs() == 0 || secs.subsec_nanos() != 0 {
            e.push(ConfigError::new(
                "seconds",
                "a whole number of seconds, at least 1s",
            ));
        }
        if self.collection_interval.get() < secs {
            e.push(ConfigError::new(
                "collection_interval",
                format!("must be at least `seconds` ({secs:?}): a profile takes that long"),
            ));
        }
        if self.timeout.get().is_zero() {
            e.push(ConfigError::new("timeout", "must be more than 0"));
        }
        if self.max_samples == 0 {
            e.push(ConfigError::new("max_samples", "must be at least 1"));
        }
        if !(1..=crate::pprof::MAX_DEPTH).contains(&self.max_depth) {
            e.push(ConfigError::new(
                "max_depth",
                format!("from 1 to {}", crate::pprof::MAX_DEPTH),
            ));
        }
        e.extend(self.tls.errors("tls"));
        e
    }
}

//! Configuration of the `loadbalancing` exporter, in the shape of the
//! Collector's loadbalancingexporter.

use causeway_core::config::{
    decode, delivery_errors, ConfigError, Duration, QueueConfig, RetryConfig, Validate,
};
use serde::Deserialize;

use crate::otlp::config::OtlpGrpcConfig;

/// What routes an item to a backend.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize, schemars::JsonSchema,
)]
pub enum RoutingKey {
    /// The trace id: every span of a trace, and every log record
    /// carrying that trace id, reaches the same backend.
    #[default]
    #[serde(rename = "traceID")]
    TraceId,
    /// The resource's `service.name`.
    #[serde(rename = "service")]
    Service,
}

/// `protocol`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    /// The OTLP/gRPC exporter settings for every backend (`compression`,
    /// `headers`, `tls`, `timeout`); `endpoint` is each backend's.
    #[schemars(with = "serde_json::Map<String, serde_json::Value>")]
    pub otlp: serde_yaml::Value,
}

/// `resolver.static`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StaticResolver {
    /// Backends, `host:port`.
    pub hostnames: Vec<String>,
}

/// `resolver.dns`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DnsResolver {
    /// A name whose addresses are the backends (a headless Service).
    pub hostname: String,
    /// The backends' port.
    #[serde(default = "port")]
    pub port: u16,
    /// How often the name is resolved again.
    #[serde(default = "five_seconds")]
    pub interval: Duration,
    /// Bound of one resolution.
    #[serde(default = "one_second")]
    pub timeout: Duration,
}

/// `resolver.file`: backends listed in a file, one `host:port` a line
/// (`#` comments), read again every `interval` (as Prometheus' file service
/// discovery; for sites that render the list from their inventory).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileResolver {
    /// The file.
    pub path: String,
    /// How often it is read again.
    #[serde(default = "five_seconds")]
    pub interval: Duration,
}

/// `resolver`: exactly one of them.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Resolver {
    /// A fixed list.
    #[serde(rename = "static")]
    pub static_: Option<StaticResolver>,
    /// DNS A/AAAA records, resolved again on an interval.
    pub dns: Option<DnsResolver>,
    /// A file, read again on an interval.
    pub file: Option<FileResolver>,
}

fn port() -> u16 {
    4317
}
fn five_seconds() -> Duration {
    Duration::secs(5)
}
fn one_second() -> Duration {
    Duration::secs(1)
}
fn timeout() -> Duration {
    Duration::secs(5)
}

/// `exporters.loadbalancing`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LoadBalancingConfig {
    /// `traceID` or `service`.
    #[serde(default)]
    pub routing_key: RoutingKey,
    /// The per-backend exporter.
    pub protocol: Protocol,
    /// Where the backends come from.
    pub resolver: Resolver,
    /// Per-attempt timeout of one backend's part of a batch.
    #[serde(default = "timeout")]
    pub timeout: Duration,
    /// Retries, re-routed: a part a backend failed is split again on the
    /// ring as it is then (a backend removed meanwhile no longer gets it).
    #[serde(default)]
    pub retry_on_failure: RetryConfig,
    /// The bounded sending queue, in front of the routing (one for all
    /// backends: a backend that goes away takes no queue with it).
    #[serde(default)]
    pub sending_queue: QueueConfig,
    /// With `routing_key: traceID`, a trace id stays on the backend it went
    /// to while its spans keep coming less than this apart, even when
    /// backends are added and the ring would send it elsewhere (default
    /// 30s; `0s`: off, as the Collector). A backend that leaves the list
    /// keeps the traces already under way on it for this long (draining,
    /// as a terminating pod still serves); one that fails gives them back
    /// to the ring.
    #[serde(default = "affinity")]
    pub trace_affinity: Duration,
    /// Trace ids remembered for `trace_affinity` at most (default 1000000,
    /// about 60 MiB); beyond, the least recent are forgotten.
    #[serde(default = "max_affinity")]
    pub max_affinity_traces: usize,
}

fn affinity() -> Duration {
    Duration::secs(30)
}
fn max_affinity() -> usize {
    1_000_000
}

impl LoadBalancingConfig {
    /// The per-backend OTLP/gRPC settings with `endpoint` set.
    pub fn backend(&self, endpoint: &str) -> Result<OtlpGrpcConfig, Vec<ConfigError>> {
        let mut v = match &self.protocol.otlp {
            serde_yaml::Value::Null => serde_yaml::Value::Mapping(Default::default()),
            v => v.clone(),
        };
        if let serde_yaml::Value::Mapping(m) = &mut v {
            m.insert("endpoint".into(), endpoint.into());
        }
        decode::<OtlpGrpcConfig>(&v)
    }
}

impl Validate for LoadBalancingConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = delivery_errors(&self.retry_on_failure, &self.sending_queue, self.timeout);
        if let serde_yaml::Value::Mapping(m) = &self.protocol.otlp {
            for (key, why) in [
                ("endpoint", "set by the resolver for each backend"),
                ("retry_on_failure", "use the exporter's own retry_on_failure: retries are re-routed over the backends as they are then"),
                ("sending_queue", "use the exporter's own sending_queue: a queue per backend is lost with its backend"),
            ] {
                if m.contains_key(key) {
                    e.push(ConfigError::new(format!("protocol.otlp.{key}"), why));
                }
            }
        }
        if let Err(errs) = self.backend("placeholder:4317") {
            e.extend(
                errs.into_iter()
                    .filter(|x| x.path != "endpoint")
                    .map(|x| ConfigError::new(format!("protocol.otlp.{}", x.path), x.message)),
            );
        }
        let r = &self.resolver;
        let set = [r.static_.is_some(), r.dns.is_some(), r.file.is_some()]
            .iter()
            .filter(|x| **x)
            .count();
        if set != 1 {
            e.push(ConfigError::new(
                "resolver",
                "set exactly one of static, dns or file",
            ));
        }
        if let Some(s) = &r.static_ {
            if s.hostnames.is_empty() || s.hostnames.iter().any(|h| h.trim().is_empty()) {
                e.push(ConfigError::new(
                    "resolver.static.hostnames",
                    "list at least one host:port",
                ));
            }
        }
        if let Some(d) = &r.dns {
            if d.hostname.trim().is_empty() {
                e.push(ConfigError::new(
                    "resolver.dns.hostname",
                    "must not be empty",
                ));
            }
            if d.interval.get().is_zero() {
                e.push(ConfigError::new(
                    "resolver.dns.interval",
                    "must be above zero",
                ));
            }
        }
        if let Some(f) = &r.file {
            if f.path.trim().is_empty() {
                e.push(ConfigError::new("resolver.file.path", "must not be empty"));
            }
            if f.interval.get().is_zero() {
                e.push(ConfigError::new(
                    "resolver.file.interval",
                    "must be above zero",
                ));
            }
        }
        e
    }
}

//! Configuration of the `otlp` receiver, in the Collector's shape.

use causeway_core::config::{null_as_default, ByteSize, ConfigError, Validate};
use causeway_core::conn::ConnectionLimits;
use causeway_core::tls::{ServerAuth, ServerTls};
use serde::Deserialize;

/// `receivers.otlp`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OtlpReceiverConfig {
    /// The protocols to serve; at least one.
    #[serde(default)]
    pub protocols: Protocols,
    /// End-to-end acknowledgements: answer a request only
    /// once every exporter of its pipelines has it on disk (a persistent
    /// `sending_queue`) or has delivered it; if an exporter gives up, the
    /// client gets a retryable error. With a persistent queue, a crash then
    /// loses nothing a client was told is accepted. Costs latency: the
    /// answer waits for `batch` timeouts and deliveries. A processor that
    /// holds data itself (`tail_sampling`) acknowledges once it has taken it.
    #[serde(default)]
    pub acknowledgements: bool,
}

/// `protocols`: a present key (even empty, `grpc:`) enables the protocol with its defaults.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Protocols {
    /// OTLP/gRPC.
    #[serde(default, deserialize_with = "null_as_default")]
    pub grpc: Option<GrpcConfig>,
    /// OTLP/HTTP (protobuf and JSON).
    #[serde(default, deserialize_with = "null_as_default")]
    pub http: Option<HttpConfig>,
}

/// `protocols.grpc`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcConfig {
    /// `host:port` to listen on.
    #[serde(default = "grpc_endpoint")]
    pub endpoint: String,
    /// Largest accepted message, in MiB, after decompression.
    #[serde(default = "max_recv")]
    pub max_recv_msg_size_mib: u64,
    /// Largest number of concurrent streams per connection (the default is
    /// the minimum HTTP/2 recommends; streams beyond it are refused with
    /// REFUSED_STREAM, which gRPC clients retry).
    #[serde(default = "max_streams")]
    pub max_concurrent_streams: Option<u32>,
    /// TLS (unset: plaintext).
    #[serde(default)]
    pub tls: Option<ServerTls>,
    /// Authentication of requests (unset: none).
    #[serde(default)]
    pub auth: Option<ServerAuth>,
    /// Limits under a connection flood: `max` (4096), `handshake_timeout`
    /// (5s), `header_read_timeout` (10s), `idle_timeout` (5m),
    /// `keepalive_interval` (30s), `keepalive_timeout` (20s).
    #[serde(default)]
    pub connections: ConnectionLimits,
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            endpoint: grpc_endpoint(),
            max_recv_msg_size_mib: max_recv(),
            max_concurrent_streams: max_streams(),
            tls: None,
            auth: None,
            connections: ConnectionLimits::default(),
        }
    }
}

fn grpc_endpoint() -> String {
    "127.0.0.1:4317".into()
}
fn max_recv() -> u64 {
    4
}

/// `protocols.http`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// `host:port` to listen on.
    #[serde(default = "http_endpoint")]
    pub endpoint: String,
    /// Largest accepted body, before and after decompression.
    #[serde(default = "max_body")]
    pub max_request_body_size: ByteSize,
    /// Path of trace exports.
    #[serde(default = "traces_path")]
    pub traces_url_path: String,
    /// Path of log exports.
    #[serde(default = "logs_path")]
    pub logs_url_path: String,
    /// Path of metric exports.
    #[serde(default = "metrics_path")]
    pub metrics_url_path: String,
    /// TLS (unset: plaintext).
    #[serde(default)]
    pub tls: Option<ServerTls>,
    /// Authentication of requests (unset: none).
    #[serde(default)]
    pub auth: Option<ServerAuth>,
    /// Limits under a connection flood: `max` (4096), `handshake_timeout`
    /// (5s), `header_read_timeout` (10s), `idle_timeout` (5m),
    /// `keepalive_interval` (30s), `keepalive_timeout` (20s).
    #[serde(default)]
    pub connections: ConnectionLimits,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            endpoint: http_endpoint(),
            max_request_body_size: max_body(),
            traces_url_path: traces_path(),
            logs_url_path: logs_path(),
            metrics_url_path: metrics_path(),
            tls: None,
            auth: None,
            connections: ConnectionLimits::default(),
        }
    }
}

fn http_endpoint() -> String {
    "127.0.0.1:4318".into()
}
fn max_body() -> ByteSize {
    ByteSize(20 << 20)
}
fn traces_path() -> String {
    "/v1/traces".into()
}
fn logs_path() -> String {
    "/v1/logs".into()
}
fn metrics_path() -> String {
    "/v1/metrics".into()
}

fn check_endpoint(path: &str, endpoint: &str, errors: &mut Vec<ConfigError>) {
    if endpoint
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .is_none()
    {
        errors.push(ConfigError::new(
            path,
            format!("invalid endpoint {endpoint:?}: expected host:port"),
        ));
    }
}

impl Validate for OtlpReceiverConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.protocols.grpc.is_none() && self.protocols.http.is_none() {
            e.push(ConfigError::new(
                "protocols",
                "enable at least one protocol (`grpc:` and/or `http:`)",
            ));
        }
        for (proto, tls, auth) in [
            (
                "grpc",
                self.protocols.grpc.as_ref().and_then(|g| g.tls.as_ref()),
                self.protocols.grpc.as_ref().and_then(|g| g.auth.as_ref()),
            ),
            (
                "http",
                self.protocols.http.as_ref().and_then(|h| h.tls.as_ref()),
                self.protocols.http.as_ref().and_then(|h| h.auth.as_ref()),
            ),
        ] {
            if let Some(t) = tls {
                e.extend(t.errors(&format!("protocols.{proto}.tls")));
            }
            if let Some(a) = auth {
                e.extend(a.errors(&format!("protocols.{proto}.auth")));
            }
        }
        for (proto, limits) in [
            ("grpc", self.protocols.grpc.as_ref().map(|g| &g.connections)),
            ("http", self.protocols.http.as_ref().map(|h| &h.connections)),
        ] {
            for (path, message) in limits
                .map(|l| l.problems(&format!("protocols.{proto}.connections")))
                .unwrap_or_default()
            {
                e.push(ConfigError::new(path, message));
            }
        }
        if let Some(g) = &self.protocols.grpc {
            check_endpoint("protocols.grpc.endpoint", &g.endpoint, &mut e);
            if g.max_recv_msg_size_mib == 0 {
                e.push(ConfigError::new(
                    "protocols.grpc.max_recv_msg_size_mib",
                    "must be at least 1",
                ));
            }
        }
        if let Some(h) = &self.protocols.http {
            check_endpoint("protocols.http.endpoint", &h.endpoint, &mut e);
            for (k, p) in [
                ("traces_url_path", &h.traces_url_path),
                ("logs_url_path", &h.logs_url_path),
                ("metrics_url_path", &h.metrics_url_path),
            ] {
                if !p.starts_with('/') {
                    e.push(ConfigError::new(
                        format!("protocols.http.{k}"),
                        "must start with `/`",
                    ));
                }
            }
            if h.max_request_body_size.0 == 0 {
                e.push(ConfigError::new(
                    "protocols.http.max_request_body_size",
                    "must be greater than 0",
                ));
            }
        }
        e
    }
}

fn max_streams() -> Option<u32> {
    Some(100)
}

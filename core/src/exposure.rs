//! Listeners reachable beyond this host. A server that serves data (the
//! page and its API: kept traces with their log lines; `/metrics`; zpages;
//! pprof) must not be open to anyone who can reach the machine: bound beyond
//! loopback, it needs TLS and credentials, or the config says explicitly
//! that it is wanted (`service.insecure_expose: true`, a warning then).
//! Probes (`/healthz`, `/readyz`, the `health_check` extension) serve no
//! data and are exempt: a kubelet calls them on the pod's address.

use crate::config::ConfigError;
use crate::config::TelemetryMetrics;

/// A listener a component (or the telemetry server) asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exposed {
    /// Its key path under the component's section (`endpoint`), or from the
    /// file's root for the telemetry server.
    pub key: String,
    /// `host:port` as configured.
    pub address: String,
    /// Both TLS and credentials are configured on it.
    pub protected: bool,
    /// What it serves, for the message.
    pub serves: String,
}

/// Whether `host:port` (or `[v6]:port`, or `:port`) listens beyond
/// loopback: any address but `localhost` and the loopback ones, an empty
/// host (every interface) and host names included.
pub fn beyond_loopback(address: &str) -> bool {
    let host = match address.rsplit_once(':') {
        Some((h, port)) if port.chars().all(|c| c.is_ascii_digit()) => h,
        _ => address,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match host.parse::<std::net::IpAddr>() {
        Ok(ip) => !ip.is_loopback(),
        Err(_) => true,
    }
}

/// The telemetry server's listener: where it binds (`level: none`: none), the
/// key that sets it, and what it serves.
pub fn telemetry(m: &TelemetryMetrics, ui: bool) -> Option<Exposed> {
    if m.level.as_deref() == Some("none") {
        return None;
    }
    let (key, address) = match m
        .readers
        .iter()
        .enumerate()
        .find_map(|(i, r)| r.pull.as_ref().map(|p| (i, p)))
    {
        Some((i, p)) => (
            format!("service.telemetry.metrics.readers[{i}].pull.exporter.prometheus.host"),
            format!(
                "{}:{}",
                p.exporter.prometheus.host, p.exporter.prometheus.port
            ),
        ),
        None => (
            "service.telemetry.metrics.address".to_string(),
            m.address
                .clone()
                .unwrap_or_else(|| "127.0.0.1:8888".to_string()),
        ),
    };
    Some(Exposed {
        key,
        address,
        protected: m.tls.is_some() && m.auth.is_some(),
        serves: if ui {
            "the page and its API (kept traces with their log lines) and /metrics".into()
        } else {
            "/metrics".into()
        },
    })
}

/// Errors for each unprotected listener beyond loopback, or, with
/// `insecure`, warnings. `under` prefixes each listener's key (the
/// component's section path, or "" for keys from the root).
pub fn check(listeners: &[(String, Exposed)], insecure: bool) -> (Vec<ConfigError>, Vec<String>) {
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    for (under, e) in listeners {
        if e.protected || !beyond_loopback(&e.address) {
            continue;
        }
        let path = if under.is_empty() {
            e.key.clone()
        } else {
            format!("{under}.{}", e.key)
        };
        if insecure {
            warnings.push(format!(
                "{path}: {} serves {} beyond loopback without TLS and credentials, as `service.insecure_expose: true` asks",
                e.address, e.serves
            ));
        } else {
            errors.push(ConfigError::new(
                path,
                format!(
                    "{} is reachable beyond this host and would serve {} without TLS and credentials: set its `tls` and `auth`, bind it to 127.0.0.1, or set `service.insecure_expose: true` to serve it anyway",
                    e.address, e.serves
                ),
            ));
        }
    }
    (errors, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_told_from_everything_else() {
        for a in [
            "127.0.0.1:8888",
            "localhost:1",
            "[::1]:8888",
            "127.1.2.3:9",
            "LOCALHOST:2",
        ] {
            assert!(!beyond_loopback(a), "{a}");
        }
        for a in [
            "0.0.0.0:8888",
            ":8888",
            "[::]:8888",
            "10.1.2.3:8888",
            "my-pod:8888",
            "0.0.0.0",
        ] {
            assert!(beyond_loopback(a), "{a}");
        }
    }

    #[test]
    fn an_unprotected_listener_beyond_loopback_is_an_error_unless_asked_for() {
        let l = |address: &str, protected| {
            (
                "extensions.zpages".to_string(),
                Exposed {
                    key: "endpoint".into(),
                    address: address.into(),
                    protected,
                    serves: "zpages".into(),
                },
            )
        };
        let (e, w) = check(
            &[
                l("0.0.0.0:1", false),
                l("127.0.0.1:2", false),
                l("0.0.0.0:3", true),
            ],
            false,
        );
        assert_eq!(e.len(), 1);
        assert!(w.is_empty());
        assert_eq!(e[0].path, "extensions.zpages.endpoint");
        assert!(
            e[0].message.contains("service.insecure_expose: true"),
            "{}",
            e[0].message
        );
        let (e, w) = check(&[l("0.0.0.0:1", false)], true);
        assert!(e.is_empty());
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("insecure_expose"));
    }
}

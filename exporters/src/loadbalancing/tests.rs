use super::config::LoadBalancingConfig;
use causeway_core::config::decode;

fn cfg(y: &str) -> Result<LoadBalancingConfig, Vec<causeway_core::config::ConfigError>> {
    decode(&serde_yaml::from_str(y).expect("yaml"))
}

#[test]
fn collector_shaped_config_and_every_error_named() {
    let c = cfg(
        "protocol: {otlp: {tls: {insecure: true}, compression: zstd}}\nresolver: {static: {hostnames: [\"a:4317\", \"b:4317\"]}}\n",
    )
    .expect("valid");
    assert_eq!(c.backend("a:4317").expect("backend").endpoint, "a:4317");
    let c = cfg(
        "routing_key: service\nprotocol: {otlp: {}}\nresolver: {dns: {hostname: gw-headless}}\n",
    )
    .expect("valid");
    assert_eq!(c.resolver.dns.as_ref().map(|d| d.port), Some(4317));

    let errs = cfg(
        "protocol: {otlp: {endpoint: x:1, sending_queue: {queue_size: 5}, compression: brotli}}\nresolver: {static: {hostnames: []}, dns: {hostname: x}}\n",
    )
    .expect_err("invalid");
    let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "protocol.otlp.endpoint",
        "protocol.otlp.sending_queue",
        "resolver",
        "resolver.static.hostnames",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    assert!(
        paths
            .iter()
            .any(|p| p.starts_with("protocol.otlp.compression")),
        "{paths:?}"
    );
    assert!(cfg(
        "routing_key: traceId\nprotocol: {otlp: {}}\nresolver: {static: {hostnames: [a:1]}}\n"
    )
    .is_err());
}

#[tokio::test]
async fn the_dns_resolver_resolves_names_to_backends() {
    let c = cfg("protocol: {otlp: {tls: {insecure: true}}}\nresolver: {dns: {hostname: localhost, port: 14999}}\n")
        .expect("valid");
    let e = super::LoadBalancingExporter::new(
        c,
        "lb",
        &causeway_core::telemetry::Registry::new(),
        None,
    )
    .expect("build");
    let eps = e.resolve().await.expect("resolves");
    assert!(
        eps.iter()
            .any(|a| a == "127.0.0.1:14999" || a == "[::1]:14999"),
        "{eps:?}"
    );
}

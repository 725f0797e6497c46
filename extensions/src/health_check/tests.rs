use super::*;

#[test]
fn durations_are_written_as_go_writes_them() {
    use std::time::Duration;
    assert_eq!(go_duration(Duration::ZERO), "0s");
    assert_eq!(go_duration(Duration::from_nanos(750)), "750ns");
    assert_eq!(go_duration(Duration::from_micros(1500)), "1.5ms");
    assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
    assert_eq!(go_duration(Duration::from_millis(2500)), "2.5s");
    assert_eq!(go_duration(Duration::from_secs(62)), "1m2s");
    assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
    assert_eq!(go_duration(Duration::from_millis(3_723_456)), "1h2m3.456s");
}

fn cfg(yaml: &str) -> HealthCheckConfig {
    decode(&serde_yaml::from_str(yaml).expect("yaml")).expect("valid")
}

#[tokio::test]
async fn the_status_follows_the_pipelines_lifecycle() {
    let telemetry = Registry::new();
    let hc = start(
        "health_check",
        &cfg("endpoint: 127.0.0.1:0\npath: /health/status"),
        telemetry.clone(),
    )
    .await
    .expect("start");
    let url = format!("http://{}/health/status", hc.local_addr());
    // Before the pipelines start: 503 and the Collector's zero values.
    let (code, text) = crate::get(&url).await;
    assert_eq!(code, 503);
    let body: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["status"], "Server not available");
    assert_eq!(body["upSince"], "0001-01-01T00:00:00Z");
    assert_eq!(body["uptime"], "");

    telemetry.set_ready(true);
    let (code, text) = crate::get(&url).await;
    assert_eq!(code, 200);
    let body: serde_json::Value = serde_json::from_str(&text).expect("json");
    assert_eq!(body["status"], "Server available");
    let since: SystemTime =
        humantime::parse_rfc3339(body["upSince"].as_str().expect("str")).expect("RFC 3339 time");
    assert!(since <= SystemTime::now());
    assert!(body["uptime"].as_str().expect("str").ends_with('s'));

    // Other paths are not the health check.
    assert_eq!(
        crate::get(&format!("http://{}/", hc.local_addr())).await.0,
        404
    );

    // Shutdown begins: 503 again.
    telemetry.set_ready(false);
    assert_eq!(crate::get(&url).await.0, 503);

    let stop = tokio_util::sync::CancellationToken::new();
    stop.cancel();
    Box::new(hc).run(stop).await.expect("stops");
}

#[tokio::test]
async fn response_body_replaces_the_json() {
    let telemetry = Registry::new();
    let hc = start(
        "health_check",
        &cfg("endpoint: 127.0.0.1:0\nresponse_body: {healthy: I'm OK, unhealthy: I'm bad}"),
        telemetry.clone(),
    )
    .await
    .expect("start");
    let url = format!("http://{}/", hc.local_addr());
    assert_eq!(crate::get(&url).await, (503, "I'm bad".to_string()));
    telemetry.set_ready(true);
    assert_eq!(crate::get(&url).await, (200, "I'm OK".to_string()));
}

#[test]
fn collector_keys_are_accepted_and_mistakes_named() {
    let f = HealthCheckFactory;
    let ok: serde_yaml::Value = serde_yaml::from_str(
        "endpoint: 0.0.0.0:13133\npath: /\ncheck_collector_pipeline: {enabled: true, interval: 5m, exporter_failure_threshold: 5}",
    )
    .expect("yaml");
    assert!(f.validate(&ok).is_ok());
    assert_eq!(f.warnings(&ok).len(), 1);
    assert!(f.validate(&serde_yaml::Value::Null).is_ok());
    let bad: serde_yaml::Value = serde_yaml::from_str("path: health\nendpont: x").expect("yaml");
    let errs = f.validate(&bad).expect_err("invalid");
    assert!(
        errs[0].path == "endpont" && errs[0].message.contains("unknown field"),
        "{errs:?}"
    );
}

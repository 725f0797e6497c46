//! The webhook exporter: Alertmanager's webhook payload (version 4).

use crate::alertmanager::tests::{alert_record, batch, server};
use crate::alertmanager::{fingerprint, AlertExporter, Payload};
use axum::http::StatusCode;
use causeway_core::component::Exporter;
use causeway_core::config::decode;
use std::collections::BTreeMap;

#[tokio::test]
async fn posts_the_alertmanager_webhook_payload() {
    let (url, got) = server("/hooks/sre", StatusCode::NO_CONTENT).await;
    let cfg =
        decode(&serde_yaml::from_str(&format!("endpoint: {url}/hooks/sre")).unwrap()).unwrap();
    let ex = AlertExporter::new(&cfg, "webhook", Payload::Webhook).unwrap();
    ex.export(&batch(vec![
        alert_record(
            "RouteSlow",
            "firing",
            r#"{"alertname":"RouteSlow","route_id":"r1"}"#,
        ),
        alert_record(
            "RouteSlow",
            "resolved",
            r#"{"alertname":"RouteSlow","route_id":"r2"}"#,
        ),
    ]))
    .await
    .unwrap();
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let p = &got[0];
    assert_eq!(p["version"], "4");
    assert_eq!(p["status"], "firing", "firing when any alert fires");
    assert_eq!(
        p["commonLabels"],
        serde_json::json!({"alertname": "RouteSlow"})
    );
    assert_eq!(p["commonAnnotations"]["summary"], "route r1 is slow");
    let alerts = p["alerts"].as_array().unwrap();
    assert_eq!(alerts.len(), 2);
    assert_eq!(alerts[0]["status"], "firing");
    assert_eq!(alerts[1]["status"], "resolved");
    assert_eq!(alerts[1]["labels"]["route_id"], "r2");
    let labels: BTreeMap<String, String> =
        serde_json::from_value(alerts[0]["labels"].clone()).unwrap();
    assert_eq!(alerts[0]["fingerprint"], fingerprint(&labels).as_str());
    assert_ne!(alerts[0]["fingerprint"], alerts[1]["fingerprint"]);
}

//! The alertmanager exporter against an in-test server speaking
//! Alertmanager's API v2 (`POST /api/v2/alerts`, JSON array).

use super::config::AlertHttpConfig;
use super::{alerts_of, AlertExporter, Payload};
use axum::http::StatusCode;
use axum::routing::post;
use causeway_core::component::{ExportError, Exporter};
use causeway_core::config::decode;
use causeway_core::Batch;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use std::sync::{Arc, Mutex};

use causeway_core::model::text_attribute as kv;

pub(crate) fn alert_record(name: &str, status: &str, labels: &str) -> LogRecord {
    LogRecord {
        attributes: vec![
            kv("event.name", "causeway.alert"),
            kv("alert.status", status),
            kv("alert.labels", labels),
            kv(
                "alert.annotations",
                r#"{"summary":"route r1 is slow","jaeger_url":"http://j/trace/ab"}"#,
            ),
            kv("alert.starts_at", "2026-11-29T10:00:00.000Z"),
            kv("alert.ends_at", "2026-11-29T10:04:00.000Z"),
            kv("alert.generator_url", "http://j/trace/ab"),
            kv("alert.name", name),
        ],
        ..Default::default()
    }
}

pub(crate) fn batch(records: Vec<LogRecord>) -> Batch {
    Batch::from_logs(vec![ResourceLogs {
        scope_logs: vec![ScopeLogs {
            log_records: records,
            ..Default::default()
        }],
        ..Default::default()
    }])
}

/// A server on 127.0.0.1 answering `status` and keeping each body as JSON.
pub(crate) async fn server(
    path: &'static str,
    status: StatusCode,
) -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
    let got: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        path,
        post(move |body: axum::body::Bytes| {
            let g = g.clone();
            async move {
                if let Ok(v) = serde_json::from_slice(&body) {
                    g.lock().unwrap().push(v);
                }
                status
            }
        }),
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, app).await });
    (format!("http://{addr}"), got)
}

fn exporter(endpoint: &str, payload: Payload) -> AlertExporter {
    let cfg: AlertHttpConfig = decode(
        &serde_yaml::from_str(&format!("endpoint: {endpoint}\nheaders: {{X-Team: sre}}")).unwrap(),
    )
    .unwrap();
    AlertExporter::new(&cfg, "alertmanager", payload).unwrap()
}

#[tokio::test]
async fn posts_alerts_as_api_v2_and_skips_other_records() {
    let (url, got) = server("/api/v2/alerts", StatusCode::OK).await;
    let ex = exporter(&url, Payload::AlertmanagerV2);
    let other = LogRecord {
        attributes: vec![kv("route_id", "r1")],
        ..Default::default()
    };
    ex.export(&batch(vec![
        other,
        alert_record(
            "RouteSlow",
            "firing",
            r#"{"alertname":"RouteSlow","route_id":"r1"}"#,
        ),
    ]))
    .await
    .unwrap();
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    let alerts = got[0].as_array().expect("a JSON array");
    assert_eq!(alerts.len(), 1, "only the alert record is sent: {got:?}");
    let a = &alerts[0];
    assert_eq!(a["labels"]["alertname"], "RouteSlow");
    assert_eq!(a["labels"]["route_id"], "r1");
    assert_eq!(a["annotations"]["jaeger_url"], "http://j/trace/ab");
    assert_eq!(a["startsAt"], "2026-11-29T10:00:00.000Z");
    assert_eq!(a["endsAt"], "2026-11-29T10:04:00.000Z");
    assert_eq!(a["generatorURL"], "http://j/trace/ab");
    assert!(
        a.get("status").is_none(),
        "API v2 infers status from endsAt"
    );
}

#[tokio::test]
async fn batches_without_alerts_send_nothing_and_bad_records_are_named() {
    let (url, got) = server("/api/v2/alerts", StatusCode::OK).await;
    let ex = exporter(&url, Payload::AlertmanagerV2);
    let bad = alert_record("X", "firing", "not json");
    let (alerts, errors) = alerts_of(&batch(vec![bad.clone()])).unwrap();
    assert!(alerts.is_empty());
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].starts_with("resource_logs[0].scope_logs[0].log_records[0]: alert.labels"),
        "{errors:?}"
    );
    let d = ex.export(&batch(vec![bad])).await.unwrap();
    assert_eq!(d.rejected, 1);
    assert!(got.lock().unwrap().is_empty());
}

#[tokio::test]
async fn server_errors_are_retried_and_client_errors_are_not() {
    let (url, _) = server("/api/v2/alerts", StatusCode::SERVICE_UNAVAILABLE).await;
    let b = batch(vec![alert_record("A", "firing", r#"{"alertname":"A"}"#)]);
    let e = exporter(&url, Payload::AlertmanagerV2)
        .export(&b)
        .await
        .unwrap_err();
    assert!(matches!(e, ExportError::Retryable { .. }), "{e:?}");
    let (url, _) = server("/api/v2/alerts", StatusCode::BAD_REQUEST).await;
    let e = exporter(&url, Payload::AlertmanagerV2)
        .export(&b)
        .await
        .unwrap_err();
    assert!(matches!(e, ExportError::Permanent { .. }), "{e:?}");
    // Nothing listening: retryable.
    let e = exporter("http://127.0.0.1:9", Payload::AlertmanagerV2)
        .export(&b)
        .await
        .unwrap_err();
    assert!(matches!(e, ExportError::Retryable { .. }), "{e:?}");
}

#[test]
fn config_errors_name_the_key() {
    use causeway_core::config::ConfigError;
    let e: Vec<ConfigError> = decode::<AlertHttpConfig>(
        &serde_yaml::from_str("endpoint: ftp://am:9093\nheaders: {\"bad header\": x}").unwrap(),
    )
    .unwrap_err();
    let paths: Vec<&str> = e.iter().map(|x| x.path.as_str()).collect();
    assert_eq!(paths, ["endpoint", "headers.bad header"], "{e:?}");
    // An https endpoint without ca_file is fine: the system's roots apply.
    assert!(
        decode::<AlertHttpConfig>(&serde_yaml::from_str("endpoint: https://am:9093").unwrap())
            .is_ok()
    );
    let e = decode::<AlertHttpConfig>(&serde_yaml::from_str("endpoint: http://x\nurl: y").unwrap())
        .unwrap_err();
    assert!(e[0].message.contains("url"), "{e:?}");
}

#[test]
fn encoded_batches_are_searched_for_alerts_without_decoding_the_rest() {
    let encode = |records: Vec<LogRecord>| {
        let b = batch(records);
        let n = b.items();
        Batch::from_encoded(causeway_core::Signal::Logs, b.to_encoded(), n)
    };
    let access_log = LogRecord {
        attributes: vec![kv("route_id", "r1"), kv("status_code", "503")],
        ..Default::default()
    };
    // Access logs only: nothing to send.
    let (alerts, errors) = alerts_of(&encode(vec![access_log.clone(); 3])).unwrap();
    assert!(alerts.is_empty() && errors.is_empty());
    // An alert among them, in a batch of two encoded requests: found.
    let mut b = encode(vec![access_log.clone()]);
    b.append(encode(vec![
        access_log,
        alert_record("RouteP99High", "firing", r#"{"alertname":"RouteP99High"}"#),
    ]))
    .unwrap();
    let (alerts, errors) = alerts_of(&b).unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(alerts.len(), 1);
    assert_eq!(alerts[0].labels["alertname"], "RouteP99High");
    // An encoded batch without the marker is not decoded at all (garbage
    // passes as "no alerts"); with the marker it is, and garbage is an error.
    let junk = Batch::from_encoded(causeway_core::Signal::Logs, vec![0xff, 0x01].into(), 1);
    assert!(alerts_of(&junk).is_ok_and(|(a, e)| a.is_empty() && e.is_empty()));
    let mut junk = b"causeway.alert".to_vec();
    junk.insert(0, 0xff);
    let bad = Batch::from_encoded(causeway_core::Signal::Logs, junk.into(), 1);
    assert!(alerts_of(&bad).is_err());
}

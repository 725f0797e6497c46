//! What a newcomer saw on the default pipeline (issue #44): a WARN
//! `rca.cause=unknown` record for every healthy trace, `unknown` as the
//! largest bar of the Causes view, a service without `service.name` shown
//! as "(1)", and double spaces in summaries. Through the real binary: a
//! healthy trace's RCA record is INFO and the page counts it apart; a
//! failed trace of a nameless service is WARN, named `(no service.name)`
//! on the page, its summary without double spaces.

mod common;

use common::{http_get, read_jsonl, wait_for, Daemon};
use serde_json::Value;
use std::time::Duration;

const CONFIG: &str = r#"receivers:
  otlp:
    protocols:
      http: { endpoint: "127.0.0.1:HTTP" }
processors:
  tail_sampling:
    decision_wait: 300ms
    policies: [{ name: all, type: always_sample }]
  correlate: {}
exporters:
  file: { path: "{dir}/{signal}.jsonl" }
service:
  telemetry: { metrics: { address: "{telemetry}" } }
  pipelines:
    traces: { receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file] }
    logs: { receivers: [otlp], processors: [correlate], exporters: [file] }
"#;

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// One server span of `service` (none: no resource attribute at all),
/// 20 ms long, failed or not.
fn trace(trace_id: &str, service: Option<&str>, failed: bool) -> String {
    let end = now_ns();
    let start = end - 20_000_000;
    let resource = match service {
        Some(s) => format!(
            r#"{{"attributes":[{{"key":"service.name","value":{{"stringValue":"{s}"}}}}]}}"#
        ),
        None => "{}".to_string(),
    };
    let status = if failed {
        r#","status":{"code":2,"message":"boom"}"#
    } else {
        ""
    };
    format!(
        r#"{{"resourceSpans":[{{"resource":{resource},"scopeSpans":[{{"spans":[{{"traceId":"{trace_id}","spanId":"eee19b7ec3c1b174","name":"GET /items","kind":2,"startTimeUnixNano":"{start}","endTimeUnixNano":"{end}","attributes":[{{"key":"http.route","value":{{"stringValue":"/items"}}}}]{status}}}]}}]}}]}}"#
    )
}

fn attr<'a>(rec: &'a Value, key: &str) -> Option<&'a Value> {
    rec["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

#[test]
fn a_healthy_trace_is_info_and_counted_apart_and_a_nameless_service_is_named() {
    let dir = tempfile::tempdir().expect("dir");
    let http = common::free_port();
    let d = Daemon::start(
        dir.path(),
        "healthy",
        &CONFIG.replace("HTTP", &http.to_string()),
    );
    let healthy = "11111111111111111111111111111111";
    let failed = "22222222222222222222222222222222";
    let client = common::http_client();
    for body in [
        trace(healthy, Some("shop"), false),
        trace(failed, None, true),
    ] {
        let r = client
            .post(format!("http://127.0.0.1:{http}/v1/traces"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .expect("post");
        assert!(r.status().is_success(), "{}", r.status());
    }
    let logs = dir.path().join("logs.jsonl");
    let records = || -> Vec<Value> {
        read_jsonl(&logs)
            .iter()
            .flat_map(|r| r["resourceLogs"].as_array().cloned().unwrap_or_default())
            .flat_map(|rl| rl["scopeLogs"].as_array().cloned().unwrap_or_default())
            .flat_map(|sl| sl["logRecords"].as_array().cloned().unwrap_or_default())
            .filter(|r| {
                attr(r, "event.name").and_then(|v| v["stringValue"].as_str())
                    == Some("causeway.rca")
            })
            .collect()
    };
    wait_for(Duration::from_secs(60), "two RCA records", || {
        records().len() >= 2
    });
    let by_trace = |id: &str| -> Value {
        records()
            .into_iter()
            .find(|r| {
                r["traceId"]
                    .as_str()
                    .is_some_and(|t| t.eq_ignore_ascii_case(id))
            })
            .unwrap_or_else(|| panic!("no RCA record of {id}: {:?}", records()))
    };
    let h = by_trace(healthy);
    assert_eq!(
        attr(&h, "rca.cause").and_then(|v| v["stringValue"].as_str()),
        Some("unknown")
    );
    assert_eq!(h["severityText"], "INFO", "{h}");
    let f = by_trace(failed);
    assert_eq!(f["severityText"], "WARN", "{f}");
    let summary = f["body"]["stringValue"].as_str().expect("summary");
    assert!(!summary.contains("  "), "double space in {summary:?}");

    let (code, body) = http_get(&d.telemetry, "/api/causes").expect("/api/causes");
    assert_eq!(code, 200, "{body}");
    let causes: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(causes["healthy_traces"], 1, "{causes}");
    let listed: Vec<&str> = causes["causes"]
        .as_array()
        .expect("causes")
        .iter()
        .filter_map(|c| c["cause"].as_str())
        .collect();
    assert!(!listed.contains(&"unknown"), "{causes}");
    assert!(
        causes["top_services"]
            .as_array()
            .is_some_and(|s| s.iter().any(|x| x["name"] == "(no service.name)")),
        "{causes}"
    );
    assert!(d.terminate().success());
}

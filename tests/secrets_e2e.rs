//! No secret is ever printed or served (issue #34 item 4): a daemon holding
//! every kind of credential causeway takes (the OTLP receiver's bearer token
//! and basic-auth password, the client-side `bearertokenauth` token and
//! `basicauth` password, a Kafka SASL password in librdkafka `settings`, the
//! telemetry server's and zpages' credentials) runs at debug level, takes a
//! request, tries its exporters against peers that refuse, and everything it
//! wrote (stdout, stderr, `/metrics`, the page's API, every zpages page, and
//! `validate`'s output) is searched for each secret.

mod common;

use common::{free_port, http_client, Daemon, BIN};
use std::process::Command;
use std::time::Duration;

const SECRETS: &[&str] = &[
    "tok-OTLP-receiver-5f1c",
    "pw-BASIC-receiver-9a2e",
    "tok-EXPORTER-client-77d0",
    "pw-BASIC-exporter-3b81",
    "pw-KAFKA-sasl-c4d9",
    "pw-TELEMETRY-basic-e06a",
    "tok-ZPAGES-bearer-1d5f",
];

#[test]
fn no_credential_appears_in_logs_metrics_zpages_the_page_or_validate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (grpc, http, zp, dead) = (free_port(), free_port(), free_port(), free_port());
    let cfg = format!(
        r#"
extensions:
  bearertokenauth/out: {{ token: "{tok_exp}" }}
  basicauth/out: {{ client_auth: {{ username: exp, password: "{pw_exp}" }} }}
  zpages: {{ endpoint: "127.0.0.1:{zp}", auth: {{ bearer_token: "{tok_zp}" }} }}
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{grpc}", auth: {{ bearer_token: "{tok_rcv}" }} }}
      http: {{ endpoint: "127.0.0.1:{http}", auth: {{ basic: {{ username: rcv, password: "{pw_rcv}" }} }} }}
exporters:
  otlphttp/a:
    endpoint: "http://127.0.0.1:{dead}"
    auth: {{ authenticator: bearertokenauth/out }}
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 2s }}
  otlp/b:
    endpoint: "127.0.0.1:{dead}"
    tls: {{ insecure: true }}
    auth: {{ authenticator: basicauth/out }}
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 200ms, max_elapsed_time: 2s }}
  kafka:
    brokers: ["127.0.0.1:{dead}"]
    settings:
      security.protocol: SASL_PLAINTEXT
      sasl.mechanism: PLAIN
      sasl.username: exp
      sasl.password: "{pw_kafka}"
service:
  extensions: [bearertokenauth/out, basicauth/out, zpages]
  shutdown_timeout: 3s
  pipelines:
    traces: {{ receivers: [otlp], exporters: [otlphttp/a, otlp/b, kafka] }}
  telemetry:
    logs: {{ level: debug }}
    metrics:
      address: "{{telemetry}}"
      auth: {{ basic: {{ username: m, password: "{pw_tel}" }} }}
"#,
        tok_exp = SECRETS[2],
        pw_exp = SECRETS[3],
        tok_zp = SECRETS[6],
        tok_rcv = SECRETS[0],
        pw_rcv = SECRETS[1],
        pw_kafka = SECRETS[4],
        pw_tel = SECRETS[5],
    );
    let d = Daemon::start(dir.path(), "secrets", &cfg);
    let c = http_client();
    // One request the receiver accepts (basic auth), one it refuses.
    let body = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"GET /","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}"#;
    let url = format!("http://127.0.0.1:{http}/v1/traces");
    let ok = c
        .post(&url)
        .basic_auth("rcv", Some(SECRETS[1]))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("post");
    assert_eq!(ok.status().as_u16(), 200);
    let refused = c
        .post(&url)
        .basic_auth("rcv", Some("wrong"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .expect("post");
    assert_eq!(refused.status().as_u16(), 401);
    // The exporters tried and gave up (their peers refuse): counted.
    let tel = format!("http://{}", d.telemetry);
    let metrics = || {
        c.get(format!("{tel}/metrics"))
            .basic_auth("m", Some(SECRETS[5]))
            .send()
            .and_then(|r| r.text())
            .unwrap_or_default()
    };
    common::wait_for(
        Duration::from_secs(30),
        "both OTLP exporters to give up",
        || {
            let m = metrics();
            ["otlphttp/a", "otlp/b"].iter().all(|e| {
                m.lines().any(|l| {
                    l.starts_with("causeway_exporter_send_failed_items_total")
                        && l.contains(&format!("component=\"{e}\""))
                        && !l.ends_with(" 0")
                })
            })
        },
    );
    let mut served = vec![("/metrics".to_string(), metrics())];
    for path in ["/api/pipelines", "/api/traces", "/api/routes"] {
        let t = c
            .get(format!("{tel}{path}"))
            .basic_auth("m", Some(SECRETS[5]))
            .send()
            .and_then(|r| r.text())
            .expect("api");
        served.push((path.to_string(), t));
    }
    for path in [
        "/debug/servicez",
        "/debug/pipelinez",
        "/debug/extensionz",
        "/debug/expvarz",
        "/debug/featurez",
        "/debug/tracez",
    ] {
        let r = c
            .get(format!("http://127.0.0.1:{zp}{path}"))
            .bearer_auth(SECRETS[6])
            .send()
            .expect("zpages");
        assert_eq!(r.status().as_u16(), 200, "{path}");
        served.push((path.to_string(), r.text().expect("text")));
    }
    assert!(d.terminate().success());
    let path = dir.path().join("secrets.yaml");
    let v = Command::new(BIN)
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .expect("validate");
    assert!(v.status.success());
    let mut written = vec![
        (
            "stderr".to_string(),
            std::fs::read_to_string(dir.path().join("secrets.stderr")).unwrap_or_default(),
        ),
        (
            "stdout".to_string(),
            std::fs::read_to_string(dir.path().join("secrets.stdout")).unwrap_or_default(),
        ),
        (
            "validate".to_string(),
            String::from_utf8_lossy(&v.stdout).into_owned() + &String::from_utf8_lossy(&v.stderr),
        ),
    ];
    written.extend(served);
    // Debug logging did run: the search is over something.
    assert!(written[0].1.contains("DEBUG"), "no debug log to search");
    let mut found = Vec::new();
    for (what, text) in &written {
        for s in SECRETS {
            if text.contains(s) {
                found.push(format!("{s} in {what}"));
            }
        }
    }
    assert!(found.is_empty(), "secrets printed: {found:?}");
}

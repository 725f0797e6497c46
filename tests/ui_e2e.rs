//! The built-in page, loaded in a real headless browser (Debian's
//! `chromium`; `scripts/test.sh` installs it) from the real binary fed by
//! `causeway demo`'s traffic: the routes view lists the faulty routes with
//! their causes, a trace shows its waterfall with the critical path and the
//! culprit marked and the evidence with the gateway's 429 line; HTML in span
//! names and log lines shows as text; a bad trace id gets a message, not a
//! 500; a daemon that stops answering shows "reconnecting" and keeps the
//! view. Screenshots of each view go to `$CAUSEWAY_SCREENSHOTS` when set
//! (`docs/` holds the ones shown in the README).
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::Value;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PIPELINE: &str = r#"
receivers:
  otlp:
    protocols:
      http: { endpoint: "127.0.0.1:@HTTP@" }
processors:
  tail_sampling:
    decision_wait: 2s
    policies: [{ name: everything, type: always_sample }]
  correlate:
    window: 10m
    alerts:
      links:
        jaeger: "http://jaeger.example:16686/trace/{{ $trace_id }}"
exporters:
  file: { path: "{dir}/{signal}.jsonl" }
service:
  pipelines:
    traces: { receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file] }
    logs: { receivers: [otlp], processors: [correlate], exporters: [file] }
    metrics: { receivers: [otlp], processors: [correlate], exporters: [file] }
  telemetry: { metrics: { address: "{telemetry}" } }
"#;

fn api(addr: &str, path: &str) -> (u16, Value) {
    let (st, body) = http_get(addr, path).unwrap_or((0, String::new()));
    (st, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// A failing trace whose span name, status message and route hold HTML,
/// with a log record whose body is a script.
fn send_hostile(http: &str, trace_id: &str) {
    let t = now_ns();
    let resource =
        r#"{"attributes":[{"key":"service.name","value":{"stringValue":"evil<b>svc</b>"}}]}"#;
    let logs = format!(
        r#"{{"resourceLogs":[{{"resource":{resource},"scopeLogs":[{{"logRecords":[{{"timeUnixNano":"{t}","traceId":"{trace_id}","severityNumber":17,"body":{{"stringValue":"<script>document.title='pwned'</script> upstream said <b>no</b>"}}}}]}}]}}]}}"#,
        t = t + 100_000_000
    );
    let spans = format!(
        r#"{{"resourceSpans":[{{"resource":{resource},"scopeSpans":[{{"spans":[{{"traceId":"{trace_id}","spanId":"1111111111111111","name":"<script>alert(1)</script>","kind":2,"startTimeUnixNano":"{t}","endTimeUnixNano":"{e}","status":{{"code":2,"message":"<img src=x onerror=alert(2)>"}},"attributes":[{{"key":"http.route","value":{{"stringValue":"/evil/<i>x</i>"}}}}]}}]}}]}}]}}"#,
        e = t + 900_000_000
    );
    let c = http_client();
    for (path, body) in [("/v1/logs", logs), ("/v1/traces", spans)] {
        let r = c
            .post(format!("http://{http}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .unwrap();
        assert!(r.status().is_success(), "{path}: {}", r.status());
    }
}

#[test]
fn the_page_shows_routes_causes_and_a_trace_with_its_evidence_in_a_real_browser() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (http, telemetry) = (free_port(), free_port());
    let telemetry = format!("127.0.0.1:{telemetry}");
    let config = PIPELINE
        .replace("@HTTP@", &http.to_string())
        .replace("{dir}", &d.display().to_string())
        .replace("{telemetry}", &telemetry);
    std::fs::write(d.join("ui.yaml"), config).unwrap();
    // `causeway demo` on this pipeline: its generator sends the faults.
    let daemon = Daemon::spawn(
        d,
        "ui",
        &[
            "demo",
            "--seconds",
            "900",
            "--config",
            &d.join("ui.yaml").display().to_string(),
        ],
        &[],
        telemetry.clone(),
    );
    let http = format!("127.0.0.1:{http}");
    let hostile = "0badc0de0badc0de0badc0de0badc0de";
    send_hostile(&http, hostile);
    // Wait for the demo's faulty routes to be analysed.
    let mut exemplar = String::new();
    wait_for(
        Duration::from_secs(120),
        "a rate-limited route with an exemplar, and an open circuit",
        || {
            let (_, r) = api(&telemetry, "/api/routes");
            let found = r["routes"].as_array().into_iter().flatten().find(|x| {
                x["cause"] == "rate_limited"
                    && x["exemplar"].as_str().is_some_and(|e| {
                        let (st, t) = api(&telemetry, &format!("/api/traces/{e}"));
                        st == 200
                            && t["cause"] == "rate_limited"
                            && t["logs"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .any(|l| l["gateway"] == true && l["status"] == 429)
                    })
            });
            if let Some(x) = found {
                exemplar = x["exemplar"].as_str().unwrap().to_string();
            }
            let causes: Vec<&str> = r["routes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|x| x["cause"].as_str())
                .collect();
            found.is_some() && causes.contains(&"circuit_open")
        },
    );
    wait_for(
        Duration::from_secs(30),
        "the hostile trace analysed",
        || api(&telemetry, &format!("/api/traces/{hostile}")).0 == 200,
    );
    let base = format!("http://{telemetry}/");

    // Routes: the faulty routes with their causes, worst first.
    let dom = chromium(&format!("{base}#/routes"), 8000, None);
    assert!(dom.contains(r#"<table id="routes">"#), "{dom}");
    for cause in ["rate_limited", "circuit_open"] {
        assert!(
            dom.contains(&format!(r#"data-cause="{cause}""#)),
            "no route with cause {cause}:\n{dom}"
        );
    }
    assert!(dom.contains(&format!("#/trace/{exemplar}")), "{dom}");
    assert!(dom.contains("<svg class=\"spark\""), "a chart per route");

    // The exemplar: waterfall with the critical path and culprit, the 429 line.
    let dom = chromium(&format!("{base}#/trace/{exemplar}"), 8000, None);
    assert!(dom.contains(r#"id="waterfall""#), "{dom}");
    assert!(
        dom.contains(r#"<tr class="critical"#),
        "critical spans marked:\n{dom}"
    );
    assert!(dom.contains(r#"culprit""#), "the culprit marked:\n{dom}");
    assert!(
        dom.contains(r#"<span class="cause" id="cause">rate_limited</span>"#),
        "{dom}"
    );
    let evidence = &dom[dom.find(r#"id="evidence""#).expect("evidence panel")..];
    let gateway = &evidence[evidence
        .find(r#"class="gateway-log""#)
        .expect("a gateway line")..];
    let line_end = gateway.find("</tr>").unwrap();
    assert!(
        gateway[..line_end].contains("429"),
        "{}",
        &gateway[..line_end]
    );
    assert!(
        dom.contains(&format!("http://jaeger.example:16686/trace/{exemplar}")),
        "the link out, from alerts.links"
    );

    // HTML in span names, statuses, routes and log bodies is text.
    let dom = chromium(&format!("{base}#/trace/{hostile}"), 8000, None);
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{dom}"
    );
    assert!(
        dom.contains("&lt;script&gt;document.title='pwned'&lt;/script&gt;"),
        "{dom}"
    );
    assert!(dom.contains("evil&lt;b&gt;svc&lt;/b&gt;"), "{dom}");
    assert!(!dom.contains("<script>alert(1)"), "{dom}");
    assert!(!dom.contains("<b>svc"), "{dom}");
    assert!(
        dom.contains("<title>causeway — why requests are slow</title>"),
        "no script ran"
    );

    // Bad ids: a message, never a 500.
    let dom = chromium(
        &format!("{base}#/trace/ffffffffffffffffffffffffffffffff"),
        4000,
        None,
    );
    assert!(
        dom.contains(r#"id="error""#) && dom.contains("not among the"),
        "{dom}"
    );
    let dom = chromium(&format!("{base}#/trace/not-a-trace%3Cb%3E"), 4000, None);
    assert!(
        dom.contains(r#"id="error""#) && dom.contains("32 hexadecimal digits"),
        "{dom}"
    );
    for (path, want) in [
        ("/api/traces/zz", 400),
        ("/api/traces/ffffffffffffffffffffffffffffffff", 404),
        ("/api/traces/%3Cscript%3E", 400),
        ("/api/nothing", 404),
    ] {
        let (st, v) = api(&telemetry, path);
        assert_eq!(st, want, "{path}: {v}");
        assert!(v["error"].is_string(), "{path}: {v}");
    }

    // Causes and pipelines.
    let dom = chromium(&format!("{base}#/causes"), 8000, None);
    assert!(
        dom.contains(r#"id="causes-chart""#) && dom.contains(r#"data-cause="rate_limited""#),
        "{dom}"
    );
    let chart = &dom[dom.find(r#"id="causes-chart""#).unwrap()..];
    assert!(
        chart[..chart.find("</svg>").unwrap()].contains("<rect"),
        "bars drawn:\n{chart}"
    );
    let dom = chromium(&format!("{base}#/pipelines"), 8000, None);
    assert!(dom.contains(r#"data-component="otlp""#), "{dom}");
    assert!(dom.contains(r#"data-component="file""#), "{dom}");
    assert!(dom.contains(r#"data-stat="accepted""#), "{dom}");
    // The sources' tables, drawn from `/api/sources`: the Kafka groups the
    // scenarios' lag metrics name, with their columns as the source
    // describes them (the alarm flag drawn as bad); the sources with no
    // data say so under the title they give.
    let kafka = &dom[dom.find(r#"<table id="kafka">"#).expect("the kafka table")..];
    let kafka = &kafka[..kafka.find("</table>").unwrap()];
    assert!(kafka.contains("<th>Consumer group</th>"), "{kafka}");
    assert!(
        kafka.contains("consumer-lag-svc-workers")
            && kafka.contains(r#"<span class="bad">on</span>"#),
        "{kafka}"
    );
    for (title, empty) in [
        ("RabbitMQ queues", "None reported (rabbitmq receiver)."),
        ("NATS JetStream consumers", "None reported (nats receiver)."),
    ] {
        assert!(dom.contains(title) && dom.contains(empty), "{title}: {dom}");
    }

    // Screenshots of each view; for the README's, a minute of traffic first
    // (six 10 s buckets on the healthy route).
    let shots = match std::env::var("CAUSEWAY_SCREENSHOTS") {
        Ok(p) => {
            wait_for(Duration::from_secs(120), "a minute of traffic", || {
                let (_, r) = api(&telemetry, "/api/routes");
                r["routes"].as_array().into_iter().flatten().any(|x| {
                    x["route"] == "route-healthy-0"
                        && x["points"].as_array().is_some_and(|p| p.len() >= 6)
                })
            });
            std::path::PathBuf::from(p)
        }
        Err(_) => d.join("shots"),
    };
    std::fs::create_dir_all(&shots).unwrap();
    for (name, hash) in [
        ("routes", "#/routes".to_string()),
        ("causes", "#/causes".to_string()),
        ("trace", format!("#/trace/{exemplar}")),
        ("pipelines", "#/pipelines".to_string()),
    ] {
        let p = shots.join(format!("ui-{name}.png"));
        chromium(&format!("{base}{hash}"), 8000, Some(&p));
        let png = std::fs::read(&p).unwrap();
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 10_000,
            "{name}: {} bytes",
            png.len()
        );
    }
    assert!(daemon.terminate().success());
}

#[test]
fn the_page_says_reconnecting_and_keeps_its_view_while_the_daemon_does_not_answer() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let daemon = Daemon::start(
        d,
        "ui-restart",
        r#"
receivers:
  otlp:
    protocols:
      http: { endpoint: "127.0.0.1:0" }
processors:
  correlate: {}
exporters:
  file: { path: "{dir}/out.jsonl" }
service:
  pipelines:
    logs: { receivers: [otlp], processors: [correlate], exporters: [file] }
  telemetry: { metrics: { address: "{telemetry}" } }
"#,
    );
    // The page from the daemon, its API through a stand-in that answers the
    // first requests from the daemon and then, as a restarting daemon
    // does, no more (503).
    let (_, index) = http_get(&daemon.telemetry, "/").unwrap();
    let (_, js) = http_get(&daemon.telemetry, "/ui/app.js").unwrap();
    let (_, css) = http_get(&daemon.telemetry, "/ui/app.css").unwrap();
    let upstream = daemon.telemetry.clone();
    let polls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = polls.clone();
    let app = axum::Router::new()
        .route(
            "/",
            axum::routing::get(move || async move { axum::response::Html(index) }),
        )
        .route(
            "/ui/app.js",
            axum::routing::get(move || async move { ([("content-type", "text/javascript")], js) }),
        )
        .route(
            "/ui/app.css",
            axum::routing::get(move || async move { ([("content-type", "text/css")], css) }),
        )
        .route(
            "/api/{*path}",
            axum::routing::get(move |axum::extract::Path(p): axum::extract::Path<String>| {
                let upstream = upstream.clone();
                let n = seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                async move {
                    if n >= 3 {
                        return (axum::http::StatusCode::SERVICE_UNAVAILABLE, String::new());
                    }
                    let (st, body) = tokio::task::spawn_blocking(move || {
                        http_get(&upstream, &format!("/api/{p}")).unwrap()
                    })
                    .await
                    .unwrap();
                    (axum::http::StatusCode::from_u16(st).unwrap(), body)
                }
            }),
        );
    let stand_in = serve_in_thread(app);
    let dom = chromium(&format!("{stand_in}/#/pipelines"), 12000, None);
    assert!(
        polls.load(std::sync::atomic::Ordering::SeqCst) > 2,
        "the page polled again"
    );
    assert!(dom.contains("reconnecting"), "{dom}");
    assert!(
        dom.contains(r#"id="components""#),
        "the last view stays:\n{dom}"
    );
    assert!(daemon.terminate().success());
    // Off (`service.telemetry.ui: false`), and behind credentials.
    let off = Daemon::start(
        d,
        "ui-off",
        r#"
receivers:
  otlp:
    protocols:
      http: { endpoint: "127.0.0.1:0" }
exporters:
  file: { path: "{dir}/out.jsonl" }
service:
  pipelines:
    logs: { receivers: [otlp], exporters: [file] }
  telemetry:
    ui: false
    metrics:
      address: "{telemetry}"
      auth: { basic: { username: sre, password: pager } }
"#,
    );
    // Credentials guard /metrics (and would guard the page); probes stay open.
    let get = |path: &str, auth: bool| {
        let mut r = http_client().get(format!("http://{}{path}", off.telemetry));
        if auth {
            r = r.basic_auth("sre", Some("pager"));
        }
        r.send().unwrap().status().as_u16()
    };
    assert_eq!(get("/metrics", false), 401);
    assert_eq!(get("/metrics", true), 200);
    assert_eq!(get("/healthz", false), 200);
    assert_eq!(get("/", true), 404, "ui: false serves no page");
    assert_eq!(get("/api/routes", true), 404);
    assert!(off.terminate().success());
}

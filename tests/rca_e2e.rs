//! Root-cause analysis in the running daemon: a scenario per cause of the
//! vocabulary, sent over OTLP/HTTP in every arrival order (logs first, spans
//! first, metrics scraped late), comes out of the file exporter with the
//! right cause, culprit and evidence; the RCA log records and counter flow
//! to the logs and metrics exporters; a user SQL rule adds a cause that
//! appears on matching traces only.

mod common;

use causeway_scenarios::send::{read_annotated, send, Order};
use causeway_scenarios::{case, Rng, CAUSES, HARD};
use common::*;
use std::time::Duration;

const USER_RULE: &str = r#"
        - name: table_lock
          cause: db_lock_contention
          sql: |
            SELECT s.trace_id, 0.99 AS confidence,
                   concat('table lock in ', max(s.service), ': ', max(s.name), ' waited ',
                          CAST(CAST(max(s.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
                   max(s.span_id) AS culprit_span_id
            FROM spans s
            WHERE s.db_system IS NOT NULL AND s.name LIKE 'LOCK TABLE%' AND s.duration_ms >= 100
            GROUP BY s.trace_id
"#;

/// `c` sent alone, in `order`.
fn send_one(
    client: &reqwest::blocking::Client,
    base: &str,
    c: &causeway_scenarios::Case,
    order: Order,
) {
    send(client, base, std::slice::from_ref(c), order).expect("send");
}

#[test]
fn every_cause_is_found_in_every_arrival_order_and_a_user_rule_adds_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let http = free_port();
    let config = format!(
        r#"{head}  correlate:
    evidence_wait: 2s
    rules:{USER_RULE}
{tail}"#,
        tail = causeway_scenarios::config::analysed("otlp", "otlp", "otlp"),
        head = causeway_scenarios::config::keep_all(http, "1s")
    );
    let d = Daemon::start(dir.path(), "rca", &config);
    let now = now_ns();
    let mut rng = Rng::new(42);
    let client = http_client();
    let base = format!("http://127.0.0.1:{http}");
    let orders = [Order::LogsFirst, Order::SpansFirst, Order::MetricsFirst];
    let mut cases = Vec::new();
    let mut n = 0;
    for cause in CAUSES {
        for order in orders {
            let c = case(&mut rng, cause, n, now);
            n += 1;
            send(&client, &base, std::slice::from_ref(&c), order).expect("send");
            cases.push((c, order));
        }
    }
    // The hard cases: stock-instrumentation evidence and layouts that fool
    // simple rules. Host metrics of `late_metrics_cpu` arrive after the
    // trace's decision (within `evidence_wait`).
    let mut hard = Vec::new();
    let mut late = Vec::new();
    for (kind, _) in HARD {
        let mut c = case(&mut rng, kind, n, now);
        n += 1;
        let mut sent = c.clone();
        if c.late_metrics {
            late.append(&mut sent.metrics);
        }
        send_one(&client, &base, &sent, Order::SpansFirst);
        c.metrics.clear();
        hard.push(c);
    }
    let late_sender = std::thread::spawn({
        let (client, base) = (client.clone(), base.clone());
        move || {
            std::thread::sleep(Duration::from_millis(1500));
            let body = prost::Message::encode_to_vec(
                &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest {
                    resource_metrics: late,
                },
            );
            causeway_scenarios::send::post(&client, &format!("{base}/v1/metrics"), body)
        }
    });
    // A slow table lock, for the user rule, and a healthy trace it must not touch.
    let mut lock = case(&mut rng, "slow_dependency", n, now);
    for rs in &mut lock.spans {
        for ss in &mut rs.scope_spans {
            for sp in &mut ss.spans {
                if sp.name == "SELECT report" || sp.name == "GET /data" {
                    sp.name = "LOCK TABLE orders".into();
                    sp.attributes.push(opentelemetry_proto::tonic::common::v1::KeyValue {
                        key: "db.system".into(),
                        value: Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                            value: Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue("postgresql".into())),
                        }),
                        ..Default::default()
                    });
                }
            }
        }
    }
    send_one(&client, &base, &lock, Order::SpansFirst);
    let healthy = case(&mut rng, "healthy", n + 1, now);
    send_one(&client, &base, &healthy, Order::LogsFirst);

    late_sender
        .join()
        .expect("thread")
        .expect("late metrics sent");
    let path = dir.path().join("traces.jsonl");
    let total = cases.len() + hard.len() + 2;
    wait_for(Duration::from_secs(60), "every trace analysed", || {
        read_annotated(&path)
            .values()
            .filter(|a| a.root.contains_key("rca.cause"))
            .count()
            >= total
    });
    let got = read_annotated(&path);
    for (c, order) in &cases {
        let a = &got[&hex::encode(c.trace_id)];
        let cause = &a.root["rca.cause"];
        assert_eq!(cause, c.cause, "{} sent {order:?}: {:?}", c.cause, a.root);
        assert_eq!(
            a.root["rca.culprit.service"], c.culprit_service,
            "{} culprit: {:?}",
            c.cause, a.root
        );
        assert_eq!(a.root["rca.route_id"], c.route);
        assert!(!a.critical.is_empty(), "critical path marked");
        let evidence: serde_json::Value =
            serde_json::from_str(&a.root["rca.evidence"]).expect("evidence is JSON");
        assert_eq!(evidence["rule"], a.root["rca.rule"].as_str());
        let confidence: f64 = a.root["rca.confidence"].parse().expect("confidence");
        // A slow dependency judged without a baseline yet is stated with low confidence.
        assert!(confidence > 0.2, "{}: {confidence}", c.cause);
        // The evidence that decided it is there.
        match c.cause {
            "rate_limited" => {
                assert!(
                    a.root["rca.summary"].contains("rate-limited by qps-"),
                    "{}",
                    a.root["rca.summary"]
                );
                assert!(evidence["logs"]
                    .as_array()
                    .is_some_and(|l| l.iter().any(|x| x["status"] == 429)));
            }
            "circuit_open" => assert!(evidence["logs"]
                .as_array()
                .is_some_and(|l| l.iter().any(|x| x["circuit_state"] == "OPEN"))),
            "upstream_timeout" => assert!(evidence["logs"]
                .as_array()
                .is_some_and(|l| l.iter().any(|x| x["status"] == 504))),
            "consumer_lag" | "retry_storm"
                if evidence["metrics"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|x| x["kind"] == "kafka")) =>
            {
                let k = evidence["metrics"]
                    .as_array()
                    .expect("metrics")
                    .iter()
                    .find(|x| x["kind"] == "kafka")
                    .expect("kafka");
                assert!(
                    k["time_unix_nano"].as_u64().is_some_and(|t| t > 0),
                    "metric time in the evidence"
                );
                assert_eq!(
                    a.root["rca.culprit.span_id"],
                    hex::encode(c.culprit_span_id),
                    "the consumer span"
                );
            }
            "host_cpu_saturation" | "host_io_wait" | "host_memory_pressure" => {
                let m = evidence["metrics"].as_array().expect("metrics");
                assert!(
                    m.iter()
                        .any(|x| x["kind"] == "host" && x["culprit"] == true),
                    "{m:?}"
                );
            }
            "tls_handshake" | "cache_miss_fallback" | "error" | "queueing" => {
                assert_eq!(
                    a.root["rca.culprit.span_id"],
                    hex::encode(c.culprit_span_id),
                    "{}",
                    c.cause
                );
            }
            _ => {}
        }
    }
    for c in &hard {
        let a = &got[&hex::encode(c.trace_id)];
        assert_eq!(a.root["rca.cause"], c.cause, "{}: {:?}", c.kind, a.root);
        if c.cause == "unknown" {
            // No fault: the culprit is only a pointer to the largest self
            // time, whichever service the random calls gave it to: the
            // span the evidence shows.
            let ev: serde_json::Value =
                serde_json::from_str(&a.root["rca.evidence"]).expect("evidence is JSON");
            assert_eq!(
                ev["spans"][0]["service"].as_str(),
                Some(a.root["rca.culprit.service"].as_str()),
                "{}: {:?}",
                c.kind,
                a.root
            );
        } else {
            assert_eq!(
                a.root["rca.culprit.service"], c.culprit_service,
                "{} culprit: {:?}",
                c.kind, a.root
            );
        }
        assert_eq!(a.root["rca.route_id"], c.route, "{}", c.kind);
        if let Some(second) = c.second {
            assert!(
                a.root["rca.alternatives"].contains(&format!("{second}:")),
                "{}: {:?}",
                c.kind,
                a.root
            );
        }
    }
    let l = &got[&hex::encode(lock.trace_id)];
    assert_eq!(l.root["rca.cause"], "db_lock_contention");
    assert_eq!(l.root["rca.rule"], "table_lock");
    assert!(
        l.root["rca.summary"].starts_with("table lock in"),
        "{}",
        l.root["rca.summary"]
    );
    let h = &got[&hex::encode(healthy.trace_id)];
    assert!(
        h.root["rca.cause"] == "unknown" || h.root["rca.cause"] == "slow_dependency",
        "{:?}",
        h.root
    );
    assert!(
        got.values()
            .filter(|a| a.root.get("rca.cause").map(String::as_str) == Some("db_lock_contention"))
            .count()
            == 1,
        "the user rule matched other traces"
    );

    // RCA events: one log record per analysed trace, and the counter.
    wait_for(Duration::from_secs(10), "RCA log records", || {
        log_records(&read_jsonl(&dir.path().join("logs.jsonl")))
            .iter()
            .filter(|(_, _, r)| attr(&r["attributes"], "rca.cause").is_some())
            .count()
            >= total
    });
    let events = log_records(&read_jsonl(&dir.path().join("logs.jsonl")));
    let lock_event = events
        .iter()
        .find(|(_, _, r)| {
            r["traceId"].as_str() == Some(hex::encode(lock.trace_id).as_str())
                && attr(&r["attributes"], "rca.cause").is_some()
        })
        .expect("the lock trace's RCA record");
    assert_eq!(
        attr(&lock_event.2["attributes"], "rca.cause").expect("cause")["stringValue"],
        "db_lock_contention"
    );
    assert!(lock_event.2["body"]["stringValue"]
        .as_str()
        .is_some_and(|b| b.starts_with("table lock in")));
    wait_for(
        Duration::from_secs(10),
        "the causeway.rca.traces counter",
        || {
            metrics(&read_jsonl(&dir.path().join("metrics.jsonl")))
                .iter()
                .any(|(_, m)| m["name"] == "causeway.rca.traces")
        },
    );
    let last = metrics(&read_jsonl(&dir.path().join("metrics.jsonl")))
        .into_iter()
        .rfind(|(_, m)| m["name"] == "causeway.rca.traces")
        .expect("counter");
    let points = last.1["sum"]["dataPoints"]
        .as_array()
        .expect("points")
        .clone();
    assert!(points.iter().any(
        |p| attr(&p["attributes"], "cause").is_some_and(|c| c["stringValue"] == "circuit_open")
    ));
    assert!(
        d.metric("causeway_correlate_analysed_traces_total{component=\"correlate\"}")
            .unwrap_or(0.0)
            >= total as f64
    );
}

#[test]
fn signal_aware_sampling_keeps_a_fast_trace_whose_request_was_rate_limited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let http = free_port();
    let config = format!(
        r#"{receivers}processors:
  tail_sampling:
    decision_wait: 1s
    always_keep_errors: false
    policies:
      - {{ name: slow, type: latency, latency: {{ threshold_ms: 5000 }} }}
      - {{ name: trouble, type: correlated, correlated: {{ processor: correlate }} }}
  correlate: {{}}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  file/other: {{ path: "{{dir}}/other.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [otlp], processors: [correlate], exporters: [file/other] }}
    metrics: {{ receivers: [otlp], processors: [correlate], exporters: [file/other] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        receivers = causeway_scenarios::config::otlp_http(http)
    );
    let d = Daemon::start(dir.path(), "sampling", &config);
    let now = now_ns();
    let mut rng = Rng::new(7);
    let client = http_client();
    let base = format!("http://127.0.0.1:{http}");
    // Fast (well under 5 s), but the gateway answered 429 to its first attempts.
    let mut limited = case(&mut rng, "rate_limited", 1, now);
    let healthy = case(&mut rng, "healthy", 2, now);
    // Make the rate-limited trace fast: shrink every span to its first millisecond.
    for rs in &mut limited.spans {
        for ss in &mut rs.scope_spans {
            for sp in &mut ss.spans {
                sp.end_time_unix_nano = sp
                    .end_time_unix_nano
                    .min(sp.start_time_unix_nano + 1_000_000);
            }
        }
    }
    send_one(&client, &base, &limited, Order::LogsFirst);
    send_one(&client, &base, &healthy, Order::LogsFirst);
    let path = dir.path().join("traces.jsonl");
    wait_for(
        Duration::from_secs(30),
        "the rate-limited trace kept",
        || read_annotated(&path).contains_key(&hex::encode(limited.trace_id)),
    );
    // Both decided: one kept, one dropped.
    wait_for(Duration::from_secs(30), "both decided", || {
        d.metric("causeway_tail_sampling_traces_total{component=\"tail_sampling\",decision=\"not_sampled\"}") == Some(1.0)
            && d.metric("causeway_tail_sampling_traces_total{component=\"tail_sampling\",decision=\"sampled\"}") == Some(1.0)
    });
    let got = read_annotated(&path);
    assert_eq!(
        got[&hex::encode(limited.trace_id)].root["rca.cause"],
        "rate_limited"
    );
    assert!(
        !got.contains_key(&hex::encode(healthy.trace_id)),
        "a fast healthy trace was kept"
    );
    let spans = common::spans(&read_jsonl(&path));
    let root = spans
        .iter()
        .find(|(_, _, s)| {
            s["traceId"].as_str() == Some(hex::encode(limited.trace_id).as_str())
                && s["parentSpanId"].as_str().unwrap_or("").is_empty()
        })
        .expect("root");
    assert_eq!(
        attr(&root.2["attributes"], "sampling.policy").expect("policy")["stringValue"],
        "trouble"
    );
}

#[test]
fn demo_runs_from_anywhere_prints_root_causes_a_summary_and_leaves_everything_in_the_file_sink() {
    // An empty directory: no pipeline.yaml, no --config; the demo carries its own.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let out = std::process::Command::new(BIN)
        .args([
            "demo",
            "--seconds",
            "12",
            "--data",
            &data.display().to_string(),
        ])
        .current_dir(dir.path())
        .output()
        .expect("run demo");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Only warnings on stderr: stdout is the report, not interleaved logs.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains(" INFO "), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !stdout.contains("traces: "),
        "debug exporter lines in the report:\n{stdout}"
    );
    // The closing table: a row per cause with its count and an example, then where the data went.
    let table = stdout
        .split_once("cause                  traces  example")
        .map(|x| x.1)
        .unwrap_or_else(|| panic!("no summary table:\n{stdout}"));
    let rows: Vec<(&str, usize)> = table
        .lines()
        .skip(1)
        .take_while(|l| !l.is_empty())
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?, w.next()?.parse().ok()?))
        })
        .collect();
    assert!(
        rows.len() >= 4 && rows.iter().all(|(c, n)| CAUSES.contains(c) && *n >= 1),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("Where the data went ({})", data.display())),
        "{stdout}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let causes: std::collections::BTreeSet<&str> = stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| CAUSES.contains(c))
        .collect();
    assert!(causes.len() >= 4, "few root causes printed:\n{stdout}");
    assert!(stdout.contains("rate-limited by qps-"), "{stdout}");
    // Everything is in the embedded file sink.
    let traces = read_annotated(&data.join("traces.jsonl"));
    assert!(
        traces
            .values()
            .filter(|a| a.root.get("rca.cause").is_some_and(|c| c == "rate_limited"))
            .count()
            >= 1
    );
    let rca_logs = log_records(&read_jsonl(&data.join("logs.jsonl")))
        .into_iter()
        .filter(|(_, _, r)| attr(&r["attributes"], "rca.cause").is_some())
        .count();
    assert!(rca_logs >= causes.len());
    let m = metrics(&read_jsonl(&data.join("metrics.jsonl")));
    assert!(m.iter().any(|(_, m)| m["name"] == "causeway.rca.traces"));
    assert!(
        m.iter().any(|(_, m)| m["name"] == "system.cpu.time"),
        "host metrics from /proc"
    );
}

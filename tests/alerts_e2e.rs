//! Alerting in the running daemon: a scenario pushes a route over an alert
//! rule; an in-test Alertmanager (API v2) receives the firing alert with
//! its labels, annotations (dominant cause, share, exemplar trace) and
//! links, receives it again while it fires, and receives it resolved once
//! the route recovers.

mod common;

use causeway_scenarios::send::{send, Order};
use causeway_scenarios::{case, Rng};
use common::*;
use serde_json::Value;
use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// An RFC 3339 time as the daemon writes it (`2026-11-29T10:00:00.123Z`).
fn rfc3339(v: &Value) -> SystemTime {
    humantime::parse_rfc3339(v.as_str().expect("a time string")).expect("RFC 3339")
}

#[test]
fn a_route_over_its_rule_fires_resends_and_resolves_with_cause_and_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    let http = free_port();
    let am = AlertSink::start();
    let config = format!(
        r#"{head}  correlate:
    alerts:
      interval: 200ms
      window: 3s
      resend: 1s
      links:
        jaeger: "http://jaeger.example:16686/trace/{{{{ $trace_id }}}}"
        logs: "http://grafana.example/explore?left=%7B%22queries%22:%5B%7B%22expr%22:%22%7Broute_id%3D%5C%22{{{{ $labels.route_id }}}}%5C%22%7D%20%7C%20trace_id%3D%5C%22{{{{ $trace_id }}}}%5C%22%22%7D%5D%7D"
      rules:
        - alert: CircuitOpenTraces
          expr: |
            SELECT route_id, count(*) AS value FROM rca
            WHERE cause = 'circuit_open' GROUP BY route_id HAVING count(*) >= 2
          for: 1s
          labels: {{ severity: page, team: payments }}
          annotations:
            summary: "{{{{ $value }}}} traces on route {{{{ $labels.route_id }}}} failed fast on an open circuit"
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  file/logs: {{ path: "{{dir}}/logs.jsonl" }}
  alertmanager: {{ endpoint: "{am}", retry_on_failure: {{ initial_interval: 100ms }} }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [otlp], processors: [correlate], exporters: [file/logs, alertmanager] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        head = causeway_scenarios::config::keep_all(http, "500ms"),
        am = am.url
    );
    let d = Daemon::start(dir.path(), "alerts", &config);
    let client = http_client();
    let base = format!("http://127.0.0.1:{http}");
    let mut rng = Rng::new(7);
    let mut sent: HashSet<String> = HashSet::new();
    let route = "route-circuit-open-0";
    let firing = |a: &Value| a["labels"]["alertname"] == "CircuitOpenTraces";
    // Circuit-open failures on one route (n a multiple of 3 keeps the
    // route), and healthy traffic on another, until the alert has been
    // sent twice while firing.
    let mut n = 0u64;
    let start = std::time::Instant::now();
    loop {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock")
            .as_nanos() as u64;
        let c = case(&mut rng, "circuit_open", n * 3, now);
        assert_eq!(c.route, route);
        sent.insert(hex::encode(c.trace_id));
        let h = case(&mut rng, "healthy", n * 3 + 1, now);
        send(&client, &base, &[c, h], Order::LogsFirst).expect("send");
        n += 1;
        let firing_sends = am
            .alerts()
            .iter()
            .filter(|(at, a)| firing(a) && rfc3339(&a["endsAt"]) > *at)
            .count();
        if firing_sends >= 2 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no alert re-sent while firing within 60s; got {:?}\n{}",
            am.alerts(),
            d.stderr("alerts")
        );
        std::thread::sleep(Duration::from_millis(250)); // the scenario's pace, not a wait for a result
    }
    let stopped = SystemTime::now();
    wait_for(Duration::from_secs(30), "the alert resolved", || {
        am.alerts()
            .iter()
            .any(|(at, a)| firing(a) && rfc3339(&a["endsAt"]) <= *at)
    });

    let all = am.alerts();
    let fired: Vec<&(SystemTime, Value)> = all
        .iter()
        .filter(|(at, a)| firing(a) && rfc3339(&a["endsAt"]) > *at)
        .collect();
    assert!(fired.len() >= 2, "{all:?}");
    for (at, a) in &fired {
        let l = &a["labels"];
        assert_eq!(l["route_id"], route);
        assert_eq!(l["severity"], "page");
        assert_eq!(l["team"], "payments");
        assert_eq!(
            l.as_object().unwrap().len(),
            4,
            "alertname, route_id and the rule's labels only: {l}"
        );
        let an = &a["annotations"];
        assert_eq!(an["cause"], "circuit_open", "{an}");
        let share: f64 = an["cause_share"].as_str().unwrap().parse().unwrap();
        assert!(
            share > 0.9,
            "every analysed trace on the route is circuit_open: {an}"
        );
        let trace = an["trace_id"].as_str().expect("exemplar trace");
        assert!(
            sent.contains(trace),
            "the exemplar {trace} is one of the scenario's traces"
        );
        assert_eq!(
            an["jaeger_url"],
            format!("http://jaeger.example:16686/trace/{trace}")
        );
        let logs = an["logs_url"].as_str().unwrap();
        assert!(
            logs.contains(&format!("route_id%3D%5C%22{route}%5C%22")) && logs.contains(trace),
            "{logs}"
        );
        assert_eq!(a["generatorURL"], an["jaeger_url"]);
        assert!(
            an["summary"].as_str().unwrap().ends_with(&format!(
                "traces on route {route} failed fast on an open circuit"
            )),
            "{an}"
        );
        let value: f64 = an["value"].as_str().unwrap().parse().unwrap();
        assert!(value >= 2.0, "{an}");
        // Firing: endsAt ahead, so Alertmanager resolves it if causeway dies.
        assert!(rfc3339(&a["endsAt"]) > *at + Duration::from_secs(1));
        assert!(rfc3339(&a["startsAt"]) <= *at);
    }
    // Re-sent, not restarted: one startsAt for every send.
    let starts: HashSet<&str> = fired
        .iter()
        .map(|(_, a)| a["startsAt"].as_str().unwrap())
        .collect();
    assert_eq!(starts.len(), 1, "{fired:?}");
    // `for: 1s`: pending first, so it fired at least a second after it began.
    let (first_at, _) = fired[0];
    let began = rfc3339(&fired[0].1["startsAt"]);
    assert!(
        *first_at >= began + Duration::from_millis(900),
        "fired before `for` elapsed"
    );
    // Resolved after the failures stopped, with the same identity.
    let (res_at, resolved) = all
        .iter()
        .find(|(at, a)| firing(a) && rfc3339(&a["endsAt"]) <= *at)
        .unwrap();
    assert!(*res_at >= stopped);
    assert_eq!(resolved["labels"], fired[0].1["labels"]);
    assert_eq!(resolved["startsAt"], fired[0].1["startsAt"]);
    // Only the failing route alerted.
    assert!(
        all.iter().all(|(_, a)| a["labels"]["route_id"] == route),
        "{all:?}"
    );
    // The alerts were also logged as records next to the RCA events.
    let logs = read_jsonl(&dir.path().join("logs.jsonl"));
    let records = log_records(&logs);
    assert!(records
        .iter()
        .any(|(_, _, r)| attr(&r["attributes"], "event.name")
            .is_some_and(|v| v["stringValue"] == "causeway.alert")));
    assert!(d.metric("causeway_alerts_sent_total{component=\"correlate\",alert=\"CircuitOpenTraces\",status=\"resolved\"}").unwrap_or(0.0) >= 1.0);
}

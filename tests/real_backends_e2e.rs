//! The metrics, log and alert exporters against real servers: the ones
//! Debian ships (`victoria-metrics`, `prometheus` with its remote-write
//! receiver, `prometheus-alertmanager`) and VictoriaLogs (its Loki push
//! API; built from the Go module proxy by `scripts/peers.sh`), read back
//! through each server's own query API: what an SRE's dashboards, log
//! searches and alert routes will see. `scripts/test.sh` installs the
//! packages.

mod common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

/// A server process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
    name: &'static str,
    log: std::path::PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn which(candidates: &[&str]) -> String {
    candidates
        .iter()
        .find(|p| Path::new(p).exists())
        .map(|p| p.to_string())
        .unwrap_or_else(|| {
            panic!("none of {candidates:?} (Debian packages; scripts/test.sh installs them)")
        })
}

impl Server {
    /// Start `program` and wait until `ready(addr)` says it serves.
    fn start(
        name: &'static str,
        dir: &Path,
        program: &str,
        args: &[String],
        ready: impl Fn(&str) -> bool,
    ) -> Server {
        let log = dir.join(format!("{name}.log"));
        let port = args
            .iter()
            .find_map(|a| a.rsplit_once("127.0.0.1:").map(|x| x.1.to_string()))
            .expect("an address argument");
        let addr = format!("127.0.0.1:{port}");
        let mut child = Command::new(program)
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::from(std::fs::File::create(&log).expect("log")))
            .stderr(Stdio::from(
                std::fs::OpenOptions::new()
                    .append(true)
                    .open(&log)
                    .expect("log"),
            ))
            .spawn()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        let started = std::time::Instant::now();
        loop {
            if ready(&addr) {
                break;
            }
            if let Ok(Some(st)) = child.try_wait() {
                panic!(
                    "{name} exited with {st}: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{name} not ready: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Server {
            child,
            addr,
            name,
            log,
        }
    }

    /// VictoriaLogs (`CAUSEWAY_VICTORIALOGS`, from `scripts/peers.sh`) on
    /// `port`, its data in `dir/victoria-logs` (kept across restarts).
    fn victoria_logs(dir: &Path, port: u16) -> Server {
        let bin = std::env::var("CAUSEWAY_VICTORIALOGS")
            .expect("CAUSEWAY_VICTORIALOGS (scripts/peers.sh builds VictoriaLogs)");
        Server::start(
            "victoria-logs",
            dir,
            &bin,
            &[
                format!("-httpListenAddr=127.0.0.1:{port}"),
                format!("-storageDataPath={}", dir.join("victoria-logs").display()),
            ],
            |a| matches!(http_get(a, "/health"), Some((200, _))),
        )
    }

    /// The records a LogsQL query finds in tenant `0:project`, each a JSON
    /// object of its fields.
    fn logsql(&self, project: &str, query: &str) -> Vec<Value> {
        http_client()
            .get(format!(
                "http://{}/select/logsql/query?query={}",
                self.addr,
                enc(query)
            ))
            .header("ProjectID", project)
            .send()
            .and_then(|r| r.text())
            .map(|body| {
                body.lines()
                    .filter_map(|l| serde_json::from_str(l).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    fn victoria_metrics(dir: &Path, name: &'static str) -> Server {
        let data = dir.join(name);
        Server::start(
            name,
            dir,
            &which(&["/usr/bin/victoria-metrics"]),
            &[
                format!("-httpListenAddr=127.0.0.1:{}", free_port()),
                format!("-storageDataPath={}", data.display()),
                "-retentionPeriod=1d".into(),
                // Recent samples are hidden from queries for 30 s by default.
                "-search.latencyOffset=0s".into(),
                "-search.disableCache".into(),
            ],
            |a| matches!(http_get(a, "/health"), Some((200, _))),
        )
    }

    fn prometheus(dir: &Path) -> Server {
        Server::prometheus_with(dir, "global: { scrape_interval: 15s }\n")
    }

    fn prometheus_with(dir: &Path, config: &str) -> Server {
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, config).expect("config");
        Server::start(
            "prometheus",
            dir,
            &which(&["/usr/bin/prometheus"]),
            &[
                format!("--config.file={}", cfg.display()),
                format!("--storage.tsdb.path={}", dir.join("prom").display()),
                "--web.enable-remote-write-receiver".into(),
                "--enable-feature=exemplar-storage".into(),
                format!("--web.listen-address=127.0.0.1:{}", free_port()),
            ],
            |a| matches!(http_get(a, "/-/ready"), Some((200, _))),
        )
    }

    /// PromQL at the server's now: `(labels, value)` of each result.
    fn query(&self, promql: &str) -> Vec<(Value, f64)> {
        let (status, body) = http_get(&self.addr, &format!("/api/v1/query?query={}", enc(promql)))
            .unwrap_or((0, String::new()));
        assert!(
            status == 200 || status == 0,
            "{}: {status} {body}",
            self.name
        );
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        v["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| {
                let val = r["value"][1]
                    .as_str()
                    .and_then(|x| x.parse().ok())
                    .unwrap_or(f64::NAN);
                (r["metric"].clone(), val)
            })
            .collect()
    }

    fn one(&self, promql: &str) -> Option<f64> {
        let r = self.query(promql);
        (r.len() == 1).then(|| r[0].1)
    }

    /// Metric names of the series matching `selector`.
    fn series_names(&self, selector: &str) -> Vec<String> {
        let (_, body) = http_get(
            &self.addr,
            &format!("/api/v1/series?match[]={}", enc(selector)),
        )
        .unwrap_or_default();
        let v: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
        let mut names: Vec<String> = v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["__name__"].as_str().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

/// Percent-encoding for a query parameter.
fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn kv(k: &str, v: &str) -> Value {
    json!({"key": k, "value": {"stringValue": v}})
}

/// One OTLP/JSON metrics request, round `round` (1 or 2).
fn metrics(round: u64, start: u64) -> Value {
    let t = now_ns().to_string();
    let start = start.to_string();
    // Round 2: the temperature series stops (no recorded value).
    let temp = if round == 1 {
        json!({"asDouble": 21.5, "timeUnixNano": t})
    } else {
        json!({"flags": 1, "timeUnixNano": t})
    };
    json!({"resourceMetrics": [{
        "resource": {"attributes": [kv("service.name", "shop"), kv("service.instance.id", "shop-1"), kv("host.name", "web-1")]},
        "scopeMetrics": [{"metrics": [
            {"name": "queue.depth", "unit": "By", "gauge": {"dataPoints": [
                {"asInt": (7 * round).to_string(), "timeUnixNano": t, "attributes": [kv("queue", "orders")]}]}},
            {"name": "room.temp", "unit": "Cel", "gauge": {"dataPoints": [temp]}},
            {"name": "http.server.requests", "unit": "{request}", "sum": {
                "aggregationTemporality": 2, "isMonotonic": true,
                "dataPoints": [{"asInt": (40 + round).to_string(), "startTimeUnixNano": start, "timeUnixNano": t}]}},
            {"name": "jobs.done", "sum": {
                "aggregationTemporality": 1, "isMonotonic": true,
                "dataPoints": [{"asInt": (if round == 1 { 5 } else { 3 }).to_string(), "startTimeUnixNano": start, "timeUnixNano": t}]}},
            // The names issue #21 found wrong: a counter with unit `1`
            // (was `postgresql_commits__1_total`), a gauge with unit `1`,
            // binary prefixes per minute, and attribute keys that collide
            // or start with a digit.
            {"name": "postgresql.commits", "unit": "1", "sum": {
                "aggregationTemporality": 2, "isMonotonic": true,
                "dataPoints": [{"asInt": (10 * round).to_string(), "startTimeUnixNano": start, "timeUnixNano": t}]}},
            {"name": "kafka.consumer_group.offset", "unit": "1", "gauge": {"dataPoints": [
                {"asInt": "1234", "timeUnixNano": t, "attributes": [kv("topic.name", "orders"), kv("topic_name", "legacy"), kv("2xx", "yes")]}]}},
            {"name": "data.rate", "unit": "KiBy/min", "gauge": {"dataPoints": [
                {"asDouble": 3.5, "timeUnixNano": t}]}},
            {"name": "http.server.duration", "unit": "s", "histogram": {
                "aggregationTemporality": 2,
                "dataPoints": [{"count": (3 * round).to_string(), "sum": 0.6 * round as f64,
                    "bucketCounts": [round.to_string(), round.to_string(), round.to_string()],
                    "explicitBounds": [0.1, 0.5], "startTimeUnixNano": start, "timeUnixNano": t,
                    "exemplars": [{"timeUnixNano": t, "asDouble": 0.3,
                        "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174"}]}]}}
        ]}]
    }]})
}

fn post(http: u16, body: &Value) {
    let r = http_client()
        .post(format!("http://127.0.0.1:{http}/v1/metrics"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text());
}

/// What every server must show after the two rounds.
fn check(s: &Server, staleness: bool) {
    let sel = r#"{job="shop",instance="shop-1"}"#;
    wait_for(Duration::from_secs(30), s.name, || {
        s.one(&format!("jobs_done_total{sel}")) == Some(8.0)
            && s.one(&format!("http_server_duration_seconds_count{sel}")) == Some(6.0)
    });
    assert_eq!(
        s.one(r#"queue_depth_bytes{job="shop",instance="shop-1",queue="orders"}"#),
        Some(14.0),
        "{}: gauge",
        s.name
    );
    assert_eq!(
        s.one(&format!("http_server_requests_total{sel}")),
        Some(42.0),
        "{}: cumulative monotonic sum",
        s.name
    );
    for (le, want) in [("0.1", 2.0), ("0.5", 4.0), ("+Inf", 6.0)] {
        assert_eq!(
            s.one(&format!(
                r#"http_server_duration_seconds_bucket{{job="shop",le="{le}"}}"#
            )),
            Some(want),
            "{}: bucket le={le}",
            s.name
        );
    }
    let sum = s
        .one(&format!("http_server_duration_seconds_sum{sel}"))
        .unwrap_or(0.0);
    assert!((sum - 1.2).abs() < 1e-9, "{}: histogram sum {sum}", s.name);
    assert_eq!(
        s.one(r#"target_info{job="shop",instance="shop-1",host_name="web-1"}"#),
        Some(1.0),
        "{}: target_info",
        s.name
    );
    assert_eq!(
        s.one(&format!("postgresql_commits_total{sel}")),
        Some(20.0),
        "{}: a counter with unit 1",
        s.name
    );
    assert_eq!(
        s.one(r#"kafka_consumer_group_offset_ratio{job="shop",topic_name="orders;legacy",key_2xx="yes"}"#),
        Some(1234.0),
        "{}: a gauge with unit 1; colliding and digit-led keys",
        s.name
    );
    assert_eq!(
        s.one(&format!("data_rate_kibibytes_per_min{sel}")),
        Some(3.5),
        "{}: KiBy/min",
        s.name
    );
    let names = s.series_names(sel);
    for n in [
        "http_server_duration_seconds_bucket",
        "http_server_duration_seconds_count",
        "http_server_duration_seconds_sum",
        "http_server_requests_total",
        "jobs_done_total",
        "postgresql_commits_total",
        "kafka_consumer_group_offset_ratio",
        "data_rate_kibibytes_per_min",
        "queue_depth_bytes",
        "room_temp_celsius",
        "target_info",
    ] {
        assert!(
            names.iter().any(|x| x == n),
            "{}: {n} not in {names:?}",
            s.name
        );
    }
    if staleness {
        // The series that stopped is stale: gone from instant queries, not 0.
        assert!(
            s.query(r#"room_temp_celsius{job="shop"}"#).is_empty(),
            "{}: a stopped series still answers",
            s.name
        );
        assert_eq!(
            s.one(r#"max_over_time(room_temp_celsius{job="shop"}[5m])"#),
            Some(21.5)
        );
    }
    let log = std::fs::read_to_string(&s.log).unwrap_or_default();
    assert!(
        !log.contains("cannot parse") && !log.contains("out of order"),
        "{}: {log}",
        s.name
    );
}

#[test]
fn metrics_arrive_in_victoriametrics_and_prometheus_as_their_query_apis_show() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let vm = Server::victoria_metrics(d, "victoria-metrics");
    let vmz = Server::victoria_metrics(d, "victoria-metrics-zstd");
    let prom = Server::prometheus(d);
    let http = free_port();
    let cfg = format!(
        r#"{receivers}exporters:
  victoriametrics/vm:
    endpoint: "http://{vm}/api/v1/write"
    retry_on_failure: {{ initial_interval: 100ms }}
  victoriametrics/vmz:
    endpoint: "http://{vmz}/api/v1/write"
    compression: zstd
    retry_on_failure: {{ initial_interval: 100ms }}
  victoriametrics/prometheus:
    endpoint: "http://{prom}/api/v1/write"
    retry_on_failure: {{ initial_interval: 100ms }}
service:
  pipelines:
    metrics: {{ receivers: [otlp], exporters: [victoriametrics/vm, victoriametrics/vmz, victoriametrics/prometheus] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        receivers = causeway_scenarios::config::otlp_http(http),
        vm = vm.addr,
        vmz = vmz.addr,
        prom = prom.addr
    );
    let daemon = Daemon::start(d, "causeway", &cfg);
    let start = now_ns();
    post(http, &metrics(1, start));
    // The first round is in (so the second is later in every series).
    wait_for(Duration::from_secs(30), "round 1 in prometheus", || {
        prom.one(r#"jobs_done_total{job="shop"}"#) == Some(5.0)
    });
    post(http, &metrics(2, start));
    check(&prom, true);
    // The histogram's exemplar, on the bucket its value (0.3) falls in,
    // as Prometheus' exemplar API returns it.
    let secs = start / 1_000_000_000;
    let (_, body) = http_get(
        &prom.addr,
        &format!(
            "/api/v1/query_exemplars?query={}&start={}&end={}",
            enc("http_server_duration_seconds_bucket"),
            secs - 3600,
            secs + 3600
        ),
    )
    .expect("exemplar query");
    let v: Value = serde_json::from_str(&body).expect("json");
    let found: Vec<&Value> = v["data"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["seriesLabels"]["le"] == "0.5")
        .flat_map(|s| s["exemplars"].as_array().into_iter().flatten())
        .collect();
    assert!(
        found.iter().any(
            |e| e["labels"]["trace_id"] == "5b8efff798038103d269b633813fc60c"
                && e["labels"]["span_id"] == "eee19b7ec3c1b174"
                && e["value"] == "0.3"
        ),
        "{body}"
    );
    check(&vm, false);
    // Debian's VictoriaMetrics (1.79) predates its zstd protocol: the
    // exporter asks (get_vm_proto_version), hears no, and sends snappy.
    check(&vmz, false);
    assert!(
        daemon
            .stderr("causeway")
            .contains("does not speak the VictoriaMetrics remote write protocol"),
        "the fallback is said"
    );
    assert!(daemon.terminate().success());
}

/// `GET /api/v2/alerts` of the real Alertmanager, over TLS.
fn am_alerts(client: &reqwest::blocking::Client, url: &str) -> Vec<Value> {
    client
        .get(format!("{url}/api/v2/alerts"))
        .send()
        .ok()
        .and_then(|r| r.text().ok())
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default()
}

#[test]
fn alerts_fire_and_resolve_in_the_real_alertmanager_over_tls_with_its_own_inhibition() {
    use causeway_scenarios::send::{send, Order};
    use causeway_scenarios::{case, Rng};
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    // Alertmanager behind TLS (its own --web.config.file), certificate from our CA.
    let good = ca("causeway test CA");
    let other = ca("some other CA");
    let (crt, key) = leaf(d, &good, "alertmanager", &["127.0.0.1", "localhost"], false);
    std::fs::write(d.join("ca.crt"), good.cert.pem()).expect("ca");
    std::fs::write(d.join("other-ca.crt"), other.cert.pem()).expect("other ca");
    std::fs::write(
        d.join("web.yml"),
        format!("tls_server_config:\n  cert_file: {crt}\n  key_file: {key}\n"),
    )
    .expect("web config");
    // Grouping and inhibition are Alertmanager's: a page inhibits the ticket
    // of the same route.
    std::fs::write(
        d.join("am.yml"),
        r#"
route:
  receiver: "null"
  group_by: [alertname, route_id]
receivers:
  - name: "null"
inhibit_rules:
  - source_matchers: ['severity="page"']
    target_matchers: ['severity="ticket"']
    equal: [route_id]
"#,
    )
    .expect("am config");
    let am_port = free_port();
    let client = https(client_config(&good.cert.pem(), None));
    let am = Server::start(
        "alertmanager",
        d,
        &which(&["/usr/bin/prometheus-alertmanager"]),
        &[
            format!("--config.file={}", d.join("am.yml").display()),
            format!("--web.config.file={}", d.join("web.yml").display()),
            format!("--storage.path={}", d.join("am").display()),
            format!("--web.listen-address=127.0.0.1:{am_port}"),
            "--cluster.listen-address=".into(),
        ],
        // Ready over TLS, with the certificate verified.
        |a| {
            client
                .get(format!("https://{a}/-/ready"))
                .send()
                .is_ok_and(|r| r.status().is_success())
        },
    );
    let am_url = format!("https://{}", am.addr);
    let http = free_port();
    let rule = |name: &str, severity: &str| {
        format!(
            r#"
        - alert: {name}
          expr: |
            SELECT route_id, count(*) AS value FROM rca
            WHERE cause = 'circuit_open' GROUP BY route_id HAVING count(*) >= 2
          for: 1s
          labels: {{ severity: {severity} }}
          annotations:
            summary: "{{{{ $value }}}} traces on route {{{{ $labels.route_id }}}} failed fast on an open circuit""#
        )
    };
    let config = format!(
        r#"{head}  correlate:
    alerts:
      interval: 200ms
      window: 3s
      resend: 1s
      rules:{page}{ticket}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  alertmanager:
    endpoint: "{am_url}"
    tls: {{ ca_file: "{ca}" }}
    retry_on_failure: {{ initial_interval: 100ms }}
  alertmanager/wrong_ca:
    endpoint: "{am_url}"
    tls: {{ ca_file: "{other_ca}" }}
    retry_on_failure: {{ initial_interval: 100ms, max_elapsed_time: 1s }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [otlp], processors: [correlate], exporters: [alertmanager, alertmanager/wrong_ca] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        head = causeway_scenarios::config::keep_all(http, "500ms"),
        page = rule("CircuitOpenPage", "page"),
        ticket = rule("CircuitOpenTicket", "ticket"),
        ca = d.join("ca.crt").display(),
        other_ca = d.join("other-ca.crt").display(),
    );
    let daemon = Daemon::start(d, "causeway", &config);
    let otlp = http_client();
    let base = format!("http://127.0.0.1:{http}");
    let mut rng = Rng::new(11);
    let route = "route-circuit-open-0";
    let named = |alerts: &[Value], name: &str| -> Option<Value> {
        alerts
            .iter()
            .find(|a| a["labels"]["alertname"] == name)
            .cloned()
    };
    let mut n = 0u64;
    let start = std::time::Instant::now();
    let (page, ticket) = loop {
        let now = now_ns();
        let c = case(&mut rng, "circuit_open", n * 3, now);
        let h = case(&mut rng, "healthy", n * 3 + 1, now);
        send(&otlp, &base, &[c, h], Order::LogsFirst).expect("send");
        n += 1;
        let alerts = am_alerts(&client, &am_url);
        if let (Some(p), Some(t)) = (
            named(&alerts, "CircuitOpenPage"),
            named(&alerts, "CircuitOpenTicket"),
        ) {
            if t["status"]["state"] == "suppressed" {
                break (p, t);
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no alerts in Alertmanager within 60s: {alerts:?}\n{}",
            daemon.stderr("causeway")
        );
        std::thread::sleep(Duration::from_millis(250)); // the scenario's pace, not a wait for a result
    };
    // As Alertmanager sees them: the page active, the ticket inhibited by it.
    assert_eq!(page["status"]["state"], "active", "{page}");
    assert_eq!(page["labels"]["route_id"], route);
    assert_eq!(page["labels"]["severity"], "page");
    assert_eq!(page["annotations"]["cause"], "circuit_open");
    let inhibited_by = ticket["status"]["inhibitedBy"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(inhibited_by, vec![page["fingerprint"].clone()], "{ticket}");
    let ends = humantime::parse_rfc3339(page["endsAt"].as_str().expect("endsAt")).expect("time");
    assert!(ends > SystemTime::now(), "firing: endsAt ahead ({page})");
    // Re-sent while it fires (resend: 1s): Alertmanager sees the same alert
    // (one fingerprint, one startsAt) updated, its endsAt pushed on.
    wait_for(Duration::from_secs(20), "the alert re-sent", || {
        let now = SystemTime::now();
        let c = case(&mut rng, "circuit_open", n * 3, now_ns());
        n += 1;
        send(&otlp, &base, &[c], Order::LogsFirst).is_ok()
            && named(&am_alerts(&client, &am_url), "CircuitOpenPage").is_some_and(|a| {
                a["fingerprint"] == page["fingerprint"]
                    && a["startsAt"] == page["startsAt"]
                    && humantime::parse_rfc3339(a["endsAt"].as_str().unwrap_or(""))
                        .is_ok_and(|e| e > ends && e > now)
            })
    });
    // Grouped by Alertmanager's own route: one group per alert name and route.
    let (_, groups) = {
        let r = client
            .get(format!("{am_url}/api/v2/alerts/groups"))
            .send()
            .expect("groups");
        (
            r.status(),
            serde_json::from_str::<Value>(&r.text().expect("groups")).expect("groups JSON"),
        )
    };
    let labels: Vec<Value> = groups
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g["labels"].clone())
        .collect();
    assert!(
        labels.contains(&json!({"alertname": "CircuitOpenPage", "route_id": route})),
        "{groups}"
    );
    // The failures stop: causeway resolves, Alertmanager drops the alerts.
    wait_for(Duration::from_secs(60), "the alerts resolved", || {
        let alerts = am_alerts(&client, &am_url);
        named(&alerts, "CircuitOpenPage").is_none() && named(&alerts, "CircuitOpenTicket").is_none()
    });
    // The exporter trusting another CA never got through: the handshake failed.
    let refused = daemon
        .metric(r#"causeway_exporter_send_failed_items_total{component="alertmanager/wrong_ca",signal="logs"}"#)
        .unwrap_or(0.0);
    assert!(refused >= 1.0, "the wrong CA was not refused");
    let said: Vec<String> = daemon
        .stderr("causeway")
        .lines()
        .filter(|l| l.contains("wrong_ca"))
        .map(str::to_string)
        .collect();
    assert!(
        said.iter()
            .any(|l| l.to_lowercase().contains("certificate")),
        "{said:#?}"
    );
    let delivered = daemon
        .metric(r#"causeway_exporter_sent_items_total{component="alertmanager",signal="logs"}"#)
        .unwrap_or(0.0);
    assert!(delivered >= 2.0);
    assert!(daemon.terminate().success());
    drop(am);
}

/// The Collector's self-metrics, as served by causeway, scraped by a real
/// Prometheus and read with the queries of the Collector's community
/// dashboards (Grafana's "OpenTelemetry Collector" dashboard writes names
/// as `otelcol_…(_total)?` regexes to cover both spellings; Perses' lists
/// jobs by `otelcol_process_uptime`).
#[test]
fn collector_dashboard_queries_work_against_a_running_daemon() {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let http = free_port();
    let down = free_port();
    let daemon = Daemon::start(
        d,
        "selfmetrics",
        &format!(
            r#"{receivers}processors:
  batch:
    timeout: 50ms
exporters:
  file:
    path: {{dir}}/out.jsonl
  otlphttp/down:
    endpoint: http://127.0.0.1:{down}
    retry_on_failure: {{ enabled: false }}
service:
  telemetry:
    metrics: {{ address: "{{telemetry}}" }}
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [file, otlphttp/down]
"#,
            receivers = causeway_scenarios::config::otlp_http(http)
        ),
    );
    let prom = Server::prometheus_with(
        d,
        &format!(
            "global: {{ scrape_interval: 1s }}\nscrape_configs:\n  - job_name: causeway\n    static_configs: [{{ targets: ['{}'] }}]\n",
            daemon.telemetry
        ),
    );
    let target_up = || prom.one("up{job=\"causeway\"}") == Some(1.0);
    wait_for(
        Duration::from_secs(30),
        "prometheus scraping causeway",
        target_up,
    );

    let body = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..100u64)
                    .map(|i| Span {
                        trace_id: (u128::from(i) + 1).to_be_bytes().to_vec(),
                        span_id: (i + 1).to_be_bytes().to_vec(),
                        name: "op".into(),
                        start_time_unix_nano: 1,
                        end_time_unix_nano: 2,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec();
    let r = http_client()
        .post(format!("http://127.0.0.1:{http}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .expect("post");
    assert!(r.status().is_success());

    let by = |q: &str, label: &str| -> Vec<(String, f64)> {
        let mut v: Vec<(String, f64)> = prom
            .query(q)
            .into_iter()
            .map(|(m, x)| (m[label].as_str().unwrap_or("").to_string(), x))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    wait_for(Duration::from_secs(30), "the counts in prometheus", || {
        by(
            "sum by (exporter) (otelcol_exporter_send_failed_spans)",
            "exporter",
        ) == [
            ("file".to_string(), 0.0),
            ("otlphttp/down".to_string(), 100.0),
        ]
    });
    // The dashboard panels, as written there.
    let accepted = by(
        "sum by (receiver) (rate({__name__=~\"otelcol_receiver_accepted_spans(_total)?\"}[1m]))",
        "receiver",
    );
    assert!(
        accepted.len() == 1 && accepted[0].0 == "otlp" && accepted[0].1 > 0.0,
        "{accepted:?}"
    );
    assert_eq!(
        by(
            "sum by (receiver) ({__name__=~\"otelcol_receiver_refused_spans(_total)?\"})",
            "receiver"
        ),
        [("otlp".to_string(), 0.0)]
    );
    assert_eq!(
        by(
            "sum by (exporter) ({__name__=~\"otelcol_exporter_sent_spans(_total)?\"})",
            "exporter"
        ),
        [
            ("file".to_string(), 100.0),
            ("otlphttp/down".to_string(), 0.0)
        ]
    );
    let capacity = by(
        "max by (exporter) (otelcol_exporter_queue_capacity)",
        "exporter",
    );
    assert_eq!(capacity.len(), 2, "{capacity:?}");
    assert!(capacity.iter().all(|(_, c)| *c > 0.0), "{capacity:?}");
    assert_eq!(
        by(
            "max by (exporter) (otelcol_exporter_queue_size)",
            "exporter"
        )
        .len(),
        2
    );
    assert_eq!(
        by(
            "sum by (processor) ({__name__=~\"otelcol_processor_incoming_items(_total)?\", otel_signal=\"traces\"})",
            "processor"
        ),
        [("batch".to_string(), 100.0)]
    );
    assert_eq!(
        by(
            "sum by (processor) (otelcol_processor_outgoing_items{otel_signal=\"traces\"})",
            "processor"
        ),
        [("batch".to_string(), 100.0)]
    );
    let rss = prom.one("max(otelcol_process_memory_rss)").unwrap_or(0.0);
    assert!(rss > 1e6, "rss {rss}");
    assert!(prom.one("max(otelcol_process_uptime)").unwrap_or(0.0) > 0.0);
    wait_for(Duration::from_secs(20), "a cpu rate", || {
        prom.one("sum(rate({__name__=~\"otelcol_process_cpu_seconds(_total)?\"}[1m]))")
            .is_some()
    });
    assert_eq!(
        by(
            "group by (job) ({__name__=~'otelcol_process_uptime.*'})",
            "job"
        ),
        [("causeway".to_string(), 1.0)]
    );
}

/// The `prometheus` receiver scraping a real Prometheus' own `/metrics`
/// (counters, gauges, histograms and summaries from client_golang), next to
/// a dead target, one answering garbage and one over `body_size_limit`;
/// then the Prometheus stops: `up` 0 and its series marked stale.
#[test]
fn the_prometheus_receiver_scrapes_a_real_server_and_survives_bad_targets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let prom = Server::prometheus(d);
    let garbage = serve_in_thread(axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async { "this is { not the text format\n" }),
    ));
    let big = serve_in_thread(axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async { "x 1\n".repeat(400_000) }),
    ));
    let secured = serve_in_thread(axum::Router::new().route(
        "/metrics",
        axum::routing::get(|h: axum::http::HeaderMap| async move {
            if h.get("authorization").is_some_and(|v| v == "Bearer s3cret") {
                (
                    axum::http::StatusCode::OK,
                    "# TYPE secured_metric gauge\nsecured_metric 1\n",
                )
            } else {
                (axum::http::StatusCode::UNAUTHORIZED, "")
            }
        }),
    ));
    std::fs::write(d.join("token"), "s3cret\n").expect("token");
    // Alertmanager's own /metrics, as Debian runs it.
    std::fs::write(
        d.join("am.yml"),
        "route: { receiver: x }\nreceivers: [{ name: x }]\n",
    )
    .expect("am config");
    let am_port = free_port();
    let am = Server::start(
        "alertmanager",
        d,
        &which(&["/usr/bin/prometheus-alertmanager"]),
        &[
            format!("--config.file={}", d.join("am.yml").display()),
            format!("--storage.path={}", d.join("am").display()),
            format!("--web.listen-address=127.0.0.1:{am_port}"),
            "--cluster.listen-address=".into(),
        ],
        |a| http_get(a, "/-/ready").is_some_and(|(s, _)| s == 200),
    );
    // A target that speaks OpenMetrics only when asked for it, and one whose
    // OpenMetrics body is cut short (no `# EOF`).
    const OM: &str = "# TYPE om_requests counter\n# UNIT om_requests_seconds seconds\nom_requests_total{path=\"/a\"} 7 # {trace_id=\"4bf92f3577b34da6\"} 1 1700000000.5\nom_requests_created{path=\"/a\"} 1700000000.25\n# TYPE om_build info\nom_build_info{version=\"1.0\"} 1\n# EOF\n";
    let om = serve_in_thread(axum::Router::new().route(
        "/metrics",
        axum::routing::get(|h: axum::http::HeaderMap| async move {
            let wants = h
                .get("accept")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.starts_with("application/openmetrics-text;version=1.0.0"));
            if wants {
                (
                    axum::http::StatusCode::OK,
                    [(
                        "content-type",
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    OM,
                )
            } else {
                (
                    axum::http::StatusCode::NOT_ACCEPTABLE,
                    [("content-type", "text/plain")],
                    "",
                )
            }
        }),
    ));
    let om_cut = serve_in_thread(axum::Router::new().route(
        "/metrics",
        axum::routing::get(|| async {
            (
                [(
                    "content-type",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                )],
                OM.trim_end_matches("# EOF\n"),
            )
        }),
    ));
    let dead = free_port();
    let host = |url: &str| url.trim_start_matches("http://").to_string();
    let daemon = Daemon::start(
        d,
        "scraper",
        &format!(
            r#"
receivers:
  prometheus:
    config:
      global: {{ scrape_interval: 500ms, scrape_timeout: 2s }}
      scrape_configs:
        - job_name: prom
          static_configs: [{{ targets: ["{prom}"], labels: {{ env: test }} }}]
          metric_relabel_configs:
            - {{ source_labels: [__name__], regex: "go_.*|prometheus_http_.*", action: keep }}
        - job_name: secured
          authorization: {{ credentials_file: "{{dir}}/token" }}
          static_configs: [{{ targets: ["{secured}"] }}]
        - job_name: dead
          static_configs: [{{ targets: ["127.0.0.1:{dead}"] }}]
        - job_name: garbage
          static_configs: [{{ targets: ["{garbage}"] }}]
        - job_name: big
          body_size_limit: 1MiB
          static_configs: [{{ targets: ["{big}"] }}]
        - job_name: alertmanager
          static_configs: [{{ targets: ["127.0.0.1:{am_port}"] }}]
        - job_name: om
          static_configs: [{{ targets: ["{om}"] }}]
        - job_name: om_cut
          static_configs: [{{ targets: ["{om_cut}"] }}]
{tail}"#,
            tail = causeway_scenarios::config::metrics_to_file("prometheus"),
            prom = prom.addr,
            garbage = host(&garbage),
            big = host(&big),
            secured = host(&secured),
            om = host(&om),
            om_cut = host(&om_cut),
        ),
    );
    let out = d.join("metrics.jsonl");
    let of_job = |job: &str| metrics_of_service(&read_jsonl(&out), job);
    let up_values = |job: &str| -> Vec<f64> {
        of_job(job)
            .iter()
            .filter(|m| m["name"] == "up")
            .filter_map(|m| m["gauge"]["dataPoints"][0]["asDouble"].as_f64())
            .collect()
    };
    wait_for(Duration::from_secs(30), "every job scraped", || {
        up_values("prom").contains(&1.0)
            && up_values("secured").contains(&1.0)
            && up_values("alertmanager").contains(&1.0)
            && up_values("om").contains(&1.0)
            && ["dead", "garbage", "big", "om_cut"]
                .iter()
                .all(|j| up_values(j).contains(&0.0))
    });
    // Every type arrives as its OTLP counterpart.
    let prom_metrics = of_job("prom");
    let find = |name: &str| prom_metrics.iter().find(|m| m["name"] == name).cloned();
    let counter = find("prometheus_http_requests_total").expect("a counter");
    assert_eq!(counter["sum"]["isMonotonic"], true, "{counter}");
    let p = &counter["sum"]["dataPoints"][0];
    assert_eq!(
        attr(&p["attributes"], "env").and_then(|v| v["stringValue"].as_str()),
        Some("test")
    );
    assert!(find("go_goroutines").is_some_and(|m| m["gauge"].is_object()));
    let hist = find("prometheus_http_request_duration_seconds").expect("a histogram");
    let hp = &hist["histogram"]["dataPoints"][0];
    assert_eq!(
        hp["bucketCounts"].as_array().map(Vec::len),
        hp["explicitBounds"].as_array().map(|b| b.len() + 1),
        "{hist}"
    );
    assert!(find("go_gc_duration_seconds").is_some_and(|m| m["summary"].is_object()));
    // metric_relabel_configs kept only go_* and prometheus_http_*.
    assert!(
        prom_metrics.iter().all(|m| {
            let n = m["name"].as_str().unwrap_or("");
            n.starts_with("go_")
                || n.starts_with("prometheus_http_")
                || n == "up"
                || n.starts_with("scrape_")
        }),
        "a series the keep rule should have dropped"
    );
    assert!(of_job("secured")
        .iter()
        .any(|m| m["name"] == "secured_metric"));
    // Alertmanager's own series, typed.
    let am_metrics = of_job("alertmanager");
    let am_find = |name: &str| am_metrics.iter().find(|m| m["name"] == name).cloned();
    assert!(am_find("alertmanager_alerts").is_some_and(|m| m["gauge"].is_object()));
    assert!(am_find("alertmanager_notifications_total")
        .is_some_and(|m| m["sum"]["isMonotonic"] == true));
    assert!(am_find("alertmanager_http_request_duration_seconds")
        .is_some_and(|m| m["histogram"].is_object()));
    assert!(am_find("alertmanager_build_info").is_some());
    drop(am);
    // OpenMetrics, negotiated: the counter with its start time, the info metric.
    let om_metrics = of_job("om");
    let c = om_metrics
        .iter()
        .find(|m| m["name"] == "om_requests_total")
        .expect("the OpenMetrics counter");
    assert_eq!(c["sum"]["isMonotonic"], true);
    assert_eq!(
        c["sum"]["dataPoints"][0]["startTimeUnixNano"],
        "1700000000250000000"
    );
    assert_eq!(c["sum"]["dataPoints"][0]["asDouble"], 7.0);
    assert!(om_metrics.iter().any(|m| m["name"] == "om_build_info"));

    // Bad targets are counted by reason, and the daemon goes on.

    let errors = |job: &str, reason: &str| {
        daemon
            .metric(&format!(
                "causeway_prometheus_scrape_errors_total{{job=\"{job}\",reason=\"{reason}\"}}"
            ))
            .unwrap_or(0.0)
    };
    assert!(errors("dead", "connect") >= 1.0);
    assert!(errors("garbage", "parse") >= 1.0);
    assert!(errors("big", "body_size_limit") >= 1.0);
    assert!(errors("om_cut", "parse") >= 1.0);
    // The Prometheus goes away: up 0, and its series get staleness markers.
    drop(prom);
    wait_for(
        Duration::from_secs(30),
        "prom down and its series stale",
        || {
            let ms = of_job("prom");
            let up_zero = ms.iter().any(|m| {
                m["name"] == "up" && m["gauge"]["dataPoints"][0]["asDouble"].as_f64() == Some(0.0)
            });
            let stale = ms.iter().any(|m| {
                m["name"] == "go_goroutines"
                    && m["gauge"]["dataPoints"]
                        .as_array()
                        .is_some_and(|ps| ps.iter().any(|p| p["flags"] == 1))
            });
            up_zero && stale
        },
    );
    assert!(daemon.terminate().success());
}

/// OTLP/JSON log records of the `gateway` service, one per `(route, trace
/// id, body)`, each with the root cause causeway writes on a kept trace's
/// RCA record.
fn gateway_logs(records: &[(&str, &str, &str)]) -> Value {
    let t = now_ns();
    let recs: Vec<Value> = records
        .iter()
        .enumerate()
        .map(|(i, (route, trace, body))| {
            json!({"timeUnixNano": (t + i as u64).to_string(), "severityNumber": 17, "severityText": "ERROR",
                   "traceId": trace, "spanId": "eee19b7ec3c1b174", "body": {"stringValue": body},
                   "attributes": [kv("route_id", route), kv("rca.cause", "upstream_timeout"),
                                  kv("rca.culprit.service", "pricing")]})
        })
        .collect();
    json!({"resourceLogs": [{
        "resource": {"attributes": [kv("service.name", "gateway")]},
        "scopeLogs": [{"logRecords": recs}]
    }]})
}

fn post_logs(http: u16, body: &Value) {
    let r = http_client()
        .post(format!("http://127.0.0.1:{http}/v1/logs"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .expect("post");
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.text());
}

/// The loki exporter into VictoriaLogs' Loki push API, both encodings
/// (protobuf + snappy; JSON + gzip): each record is found by a LogsQL query
/// with its stream labels (`service_name`, `route_id`, `level`) and its
/// structured metadata (`trace_id`, the `rca_*` fields); records sent while
/// VictoriaLogs is down arrive once it is back; a push it answers 400 (a
/// tenant header it cannot parse) is counted as failed, never resent, and
/// the other exporters go on.
#[test]
fn logs_arrive_in_victorialogs_through_its_loki_api_as_logsql_shows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let port = free_port();
    let vl = Server::victoria_logs(d, port);
    let http = free_port();
    let push = format!("http://127.0.0.1:{port}/insert/loki/api/v1/push");
    let cfg = format!(
        r#"{receivers}exporters:
  loki/protobuf:
    endpoint: "{push}"
    headers: {{ ProjectID: "1" }}
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 500ms }}
  loki/json:
    endpoint: "{push}"
    encoding: json
    compression: gzip
    headers: {{ ProjectID: "2" }}
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 500ms }}
  loki/refused:
    endpoint: "{push}"
    headers: {{ AccountID: "not-a-number" }}
    retry_on_failure: {{ initial_interval: 100ms, max_interval: 500ms }}
service:
  pipelines:
    logs: {{ receivers: [otlp], exporters: [loki/protobuf, loki/json, loki/refused] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        receivers = causeway_scenarios::config::otlp_http(http),
    );
    let daemon = Daemon::start(d, "causeway", &cfg);
    let trace = "5b8efff798038103d269b633813fc60c";
    post_logs(
        http,
        &gateway_logs(&[("checkout", trace, "upstream timed out")]),
    );
    // Each encoding's records, by tenant (VictoriaLogs' ProjectID header).
    let found = |project: &str, query: &str| vl.logsql(project, query);
    for project in ["1", "2"] {
        wait_for(
            Duration::from_secs(30),
            "the record in VictoriaLogs",
            || !found(project, &format!("trace_id:{trace}")).is_empty(),
        );
        let r = &found(project, &format!("trace_id:{trace}"))[0];
        assert_eq!(r["_msg"], "upstream timed out", "{r}");
        let stream = r["_stream"].as_str().unwrap_or_default();
        for label in [
            r#"service_name="gateway""#,
            r#"route_id="checkout""#,
            r#"level="error""#,
        ] {
            assert!(
                stream.contains(label),
                "{label} not in the stream {stream}: {r}"
            );
        }
        assert_eq!(r["rca_cause"], "upstream_timeout", "{r}");
        assert_eq!(r["rca_culprit_service"], "pricing", "{r}");
        assert_eq!(r["span_id"], "eee19b7ec3c1b174", "{r}");
        // Found by its labels as a dashboard's stream selector would.
        assert_eq!(
            found(
                project,
                r#"{service_name="gateway",route_id="checkout"} rca_cause:upstream_timeout"#
            )
            .len(),
            1
        );
    }
    // Nothing lands in the default tenant the refused exporter aimed at,
    // and its pushes are counted as failed.
    assert!(vl.logsql("0", "*").is_empty());
    wait_for(Duration::from_secs(30), "the refused push counted", || {
        daemon
            .metric(r#"causeway_exporter_send_failed_items_total{component="loki/refused",signal="logs"}"#)
            .unwrap_or(0.0)
            >= 1.0
    });

    // An outage: what is sent while VictoriaLogs is down arrives once it is
    // back, in both encodings.
    drop(vl);
    let late = "6c9f0000000000000000000000000001";
    post_logs(
        http,
        &gateway_logs(&[("search", late, "sent during the outage")]),
    );
    let vl = Server::victoria_logs(d, port);
    for project in ["1", "2"] {
        wait_for(Duration::from_secs(60), "the outage's record", || {
            vl.logsql(project, &format!("trace_id:{late}"))
                .iter()
                .any(|r| r["_msg"] == "sent during the outage")
        });
    }
    // A 400 is not retried (it fails at once, where a retried push would
    // count nothing until its retries ran out), and each record fails once.
    let failed = || {
        daemon
            .metric(r#"causeway_exporter_send_failed_items_total{component="loki/refused",signal="logs"}"#)
            .unwrap_or(0.0)
    };
    wait_for(
        Duration::from_secs(60),
        "the second refused push counted",
        || failed() >= 2.0,
    );
    assert_eq!(failed(), 2.0, "each refused record counted once");
    assert!(daemon.terminate().success());
}

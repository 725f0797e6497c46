//! Incidents per route on real software, with causeway's default incident
//! settings: NGINX (Debian) as the gateway, Redis with Debian's
//! redis_exporter, PostgreSQL, Node.js services under the stock
//! OpenTelemetry SDK (`tests/testbed/incident.js`), and a real Alertmanager
//! (Debian's `prometheus-alertmanager`) whose webhook notifications are
//! what the test reads.
//!
//! Two versions of the catalog run side by side; 2.4.1 has a cache-key bug
//! (the request id in the key), so every lookup it makes misses the warm
//! Redis cache and falls back to a slow PostgreSQL read. For 60 s, NGINX
//! sends 80% of the item route's requests to 2.4.1 (a canary by header),
//! and the driver goes over NGINX's `limit_req` on the search route. A
//! report route is slow (1.5 s) all along. The truth is what the services
//! observed: the version that served each item request and whether Redis
//! answered it, and the search requests the catalog served (one the limit
//! turned away never reached it).
//!
//! Shown: the item route opens exactly one incident, whose dominant cause
//! is `cache_miss_fallback` in the catalog, whose top discriminator is
//! `service.version=2.4.1`, whose "what moved" names Redis's miss ratio (from
//! its exporter), and which resolves after the fault; the search route
//! opens a second one, separately, whose SLO (shrunk burn windows) pages
//! through Alertmanager with the incident's summary and then resolves; the
//! report route opens none; causeway is restarted while both are open and
//! they are the same incidents after it.
#![allow(clippy::unwrap_used)]

mod common;

use common::testbed::{postgres, spawn, wait_port, which};
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One request as the load driver recorded it (its truth).
struct Driven {
    id: String,
    path: String,
    phase: String,
    status: i64,
    /// When the driver sent it and had its answer (ms since the epoch).
    start: i64,
    t: i64,
}

impl Driven {
    fn route(&self) -> &str {
        match self.path.as_str() {
            "/search" => "search",
            "/report" => "report",
            _ => "catalog-item",
        }
    }
}

/// The requests of `route` the driver saw bad in the 10 s before `until`:
/// answered with an error or not at all, or slower than 95% of the route's
/// healthy requests. Their start times.
fn bad_before(driven: &[Driven], route: &str, until: i64) -> Vec<i64> {
    let mut healthy: Vec<i64> = driven
        .iter()
        .filter(|x| x.route() == route && x.phase == "healthy")
        .map(|x| x.t - x.start)
        .collect();
    healthy.sort_unstable();
    let p95 = healthy[healthy.len() * 95 / 100];
    let mut bad: Vec<i64> = driven
        .iter()
        .filter(|x| x.route() == route && x.start < until && x.start >= until - 10_000)
        .filter(|x| x.status != 200 || x.t - x.start > p95)
        .map(|x| x.start)
        .collect();
    bad.sort_unstable();
    bad
}

/// Whether the driver saw `route` bad from `opened` into the fault: the
/// request it sent at `opened` was bad (by [`bad_before`]), and from then to
/// the fault no 3 s passed without a bad one.
fn driver_saw_it_bad_from(driven: &[Driven], route: &str, opened: i64, fault_from: i64) -> bool {
    let bad = bad_before(driven, route, fault_from);
    let Some(first) = bad.iter().position(|&t| (t - opened).abs() <= 50) else {
        return false;
    };
    let mut run = bad[first..].to_vec();
    run.push(fault_from);
    run.windows(2).all(|w| w[1] - w[0] <= 3_000)
}

fn s<'a>(r: &'a BTreeMap<String, Value>, k: &str) -> &'a str {
    r.get(k).and_then(Value::as_str).unwrap_or("")
}

#[test]
fn a_canary_with_a_cache_key_bug_and_a_rate_limit_are_two_incidents_explained_paged_and_resolved() {
    let testbed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testbed");
    assert!(
        testbed
            .join("node_modules/@opentelemetry/sdk-node")
            .exists(),
        "tests/testbed/node_modules is missing: scripts/test.sh runs `npm ci` there"
    );
    let mut dir = tempfile::tempdir().unwrap();
    // CAUSEWAY_TESTBED_KEEP keeps the directory (logs, truth, incidents), pass or fail.
    if std::env::var_os("CAUSEWAY_TESTBED_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("test bed directory: {}", dir.path().display());
    }
    let d = dir.path();
    let (pg_port, redis_port, redis_exp, nginx_port, otlp_port) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let (stable_port, canary_port, am_port) = (free_port(), free_port(), free_port());
    let _pg = postgres(d, pg_port, &[]);
    let _redis = common::testbed::redis(d, redis_port);
    let mut redis_exporter = spawn(
        "redis_exporter",
        Command::new(which(&["/usr/bin/prometheus-redis-exporter"])).args([
            format!("-redis.addr=redis://127.0.0.1:{redis_port}"),
            format!("-web.listen-address=127.0.0.1:{redis_exp}"),
        ]),
        d,
    );
    wait_port(redis_exp, "redis_exporter", &mut redis_exporter, d);

    // Alertmanager, notifying a webhook here (firing and resolved).
    let notes: Arc<Mutex<Vec<Value>>> = Default::default();
    let n2 = notes.clone();
    let hook = serve_in_thread(axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: axum::body::Bytes| {
            let n2 = n2.clone();
            async move {
                if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                    n2.lock().unwrap().push(v);
                }
                axum::http::StatusCode::OK
            }
        }),
    ));
    std::fs::write(
        d.join("am.yml"),
        format!(
            r#"
route:
  receiver: hook
  group_by: [alertname, route_id]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: "{hook}/hook"
        send_resolved: true
"#
        ),
    )
    .unwrap();
    let mut am = spawn(
        "alertmanager",
        Command::new(which(&["/usr/bin/prometheus-alertmanager"])).args([
            format!("--config.file={}", d.join("am.yml").display()),
            format!("--storage.path={}", d.join("am").display()),
            format!("--web.listen-address=127.0.0.1:{am_port}"),
            "--cluster.listen-address=".into(),
        ]),
        d,
    );
    wait_port(am_port, "alertmanager", &mut am, d);

    // causeway: every incident setting at its default, but where open
    // incidents are kept and one SLO (burn windows shrunk to seconds).
    let config = |run: u32| {
        format!(
            r#"{receivers}  prometheus:
    config:
      global: {{ scrape_interval: 1s, scrape_timeout: 900ms }}
      scrape_configs:
        - job_name: redis
          static_configs: [{{ targets: ["127.0.0.1:{redis_exp}"] }}]
  gateway_log:
    include: ["{{dir}}/access.log*"]
    start_at: beginning
    storage: "{{dir}}/gateway-checkpoints"
    format: nginx
    poll_interval: 50ms
    resource: {{ service.name: nginx-gateway }}
processors:
  tail_sampling:
    policies: [{{ name: all, type: always_sample }}]
  correlate:
    dependencies: {{ sample_interval: 1s }}
    incidents:
      state_file: "{{dir}}/incidents.json"
      slos:
        - name: search-availability
          route: search
          objective: 99
          windows: [{{ severity: page, burn_rate: 14.4, long: 30s, short: 10s }}]
exporters:
  file/traces: {{ path: "{{dir}}/traces-{run}.jsonl" }}
  file/logs: {{ path: "{{dir}}/logs-{run}.jsonl" }}
  nop: {{}}
  alertmanager: {{ endpoint: "http://127.0.0.1:{am_port}", retry_on_failure: {{ initial_interval: 100ms }} }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [otlp, gateway_log], processors: [correlate], exporters: [file/logs, alertmanager] }}
    metrics: {{ receivers: [prometheus], processors: [correlate], exporters: [nop] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
            receivers = causeway_scenarios::config::otlp_http(otlp_port)
        )
    };
    std::fs::create_dir(d.join("gateway-checkpoints")).unwrap();
    let daemon = Daemon::start(d, "incidents-1", &config(1));

    let nginx_conf = common::testbed::nginx_gateway_conf(
        d,
        1024,
        &format!(
            r#"  limit_req_zone $binary_remote_addr zone=search:1m rate=10r/s;
  limit_req_status 429;
  map $limit_req_status $rate_limit_rule {{ REJECTED "search-10rps"; default ""; }}
  upstream catalog_stable {{ server 127.0.0.1:{stable_port}; }}
  upstream catalog_canary {{ server 127.0.0.1:{canary_port}; }}
  map $http_x_canary $catalog {{ "1" catalog_canary; default catalog_stable; }}
  server {{
    listen 127.0.0.1:{nginx_port};
    access_log {d}/access.log gateway;
    set $route_id "";
    location /item/ {{ set $route_id catalog-item; proxy_pass http://$catalog; }}
    location = /report {{ set $route_id report; proxy_pass http://catalog_stable; }}
    location = /search {{ set $route_id search; limit_req zone=search; proxy_pass http://catalog_stable; }}
  }}"#,
            d = d.display()
        ),
    );
    let _nginx = common::testbed::nginx("nginx", d, &nginx_conf, nginx_port);

    let truth = d.join("truth.jsonl");
    let node = |role: &'static str, name: &'static str, port: u16, extra: &[(&str, &str)]| {
        let mut c = Command::new("node");
        c.current_dir(&testbed)
            .args(["incident.js", role])
            .env(
                "OTEL_SERVICE_NAME",
                if role == "driver" {
                    "load-driver"
                } else {
                    "catalog"
                },
            )
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{otlp_port}"),
            )
            .env("OTEL_BSP_SCHEDULE_DELAY", "200")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("OTEL_LOGS_EXPORTER", "none")
            .env("TRUTH_FILE", &truth)
            .env("PORT", port.to_string())
            .env("PG_PORT", pg_port.to_string())
            .env("REDIS_PORT", redis_port.to_string())
            .env("GATEWAY", format!("http://127.0.0.1:{nginx_port}"))
            .env("HEALTHY_S", "100")
            .env("FAULT_S", "60")
            .env("AFTER_S", "100");
        for (k, v) in extra {
            c.env(k, v);
        }
        spawn(name, &mut c, d)
    };
    let mut stable = node(
        "catalog",
        "catalog-2.4.0",
        stable_port,
        &[
            ("VERSION", "2.4.0"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.version=2.4.0"),
        ],
    );
    let mut canary = node(
        "catalog",
        "catalog-2.4.1",
        canary_port,
        &[
            ("VERSION", "2.4.1"),
            ("CACHE_KEY_BUG", "1"),
            ("OTEL_RESOURCE_ATTRIBUTES", "service.version=2.4.1"),
        ],
    );
    wait_port(stable_port, "catalog 2.4.0", &mut stable, d);
    wait_port(canary_port, "catalog 2.4.1", &mut canary, d);
    let mut driver = node("driver", "driver", 0, &[]);

    // Both incidents open; then causeway restarts (SIGTERM, start again on
    // the same state file) while they are. The waits count from the fault
    // the driver made (its truth), not from the start: how long the warm-up
    // takes is not the thing under test. An incident opens within the fault
    // (60 s) plus the sampler's decision wait (30 s) plus an interval (10 s).
    let fault_start = || {
        read_jsonl(&truth)
            .iter()
            .any(|v| v["phase"] == "fault" || v["phase"] == "after")
    };
    let driver_log = || std::fs::read_to_string(d.join("driver.log")).unwrap_or_default();
    wait_for_or(
        Duration::from_secs(400),
        "the driver's fault",
        fault_start,
        driver_log,
    );
    let seen = |logs: &Path, stderr: &str| {
        // What the analysed traces were, by route and outcome, next to the
        // incident records: a timeout says whether the samples were there.
        let mut by_route: BTreeMap<(String, bool, String), usize> = BTreeMap::new();
        for v in read_jsonl(logs) {
            for r in v["resourceLogs"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|r| r["scopeLogs"].as_array().into_iter().flatten())
                .flat_map(|s| s["logRecords"].as_array().into_iter().flatten())
            {
                let a = |k: &str| {
                    r["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .find(|kv| kv["key"] == k)
                        .map(|kv| kv["value"].clone())
                };
                if let Some(failed) = a("rca.failed") {
                    let route = a("rca.route_id")
                        .and_then(|v| v["stringValue"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    let cause = a("rca.cause")
                        .and_then(|v| v["stringValue"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    *by_route
                        .entry((route, failed["boolValue"] == true, cause))
                        .or_default() += 1;
                }
            }
        }
        let mut out = format!("analysed traces (route, failed, cause): {by_route:?}\n");
        // causeway's warnings and errors.
        out += &std::fs::read_to_string(d.join(stderr))
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.contains(" INFO "))
            .collect::<Vec<_>>()
            .join("\n");
        out += "incident records:\n";
        for r in incident_records(logs) {
            out += &format!(
                "  {} {} {:?} {}\n",
                s(&r, "incident.state"),
                s(&r, "incident.route"),
                r.get("incident.reasons"),
                s(&r, "incident.summary")
            );
        }
        out
    };
    // Both faulty routes have a record in `state` in `logs`.
    let both = |logs: &Path, state: &str| {
        let routes: BTreeSet<String> = incident_records(logs)
            .iter()
            .filter(|r| s(r, "incident.state") == state)
            .map(|r| s(r, "incident.route").to_string())
            .collect();
        routes.contains("catalog-item") && routes.contains("search")
    };
    let logs1 = d.join("logs-1.jsonl");
    wait_for_or(
        Duration::from_secs(160),
        "both incidents opened",
        || both(&logs1, "open"),
        || {
            // The gateway tailer's and correlate's own counts as well.
            let metrics = http_get(&daemon.telemetry, "/metrics")
                .map(|(_, b)| b)
                .unwrap_or_default()
                .lines()
                .filter(|l| {
                    !l.starts_with('#') && (l.contains("gateway_log") || l.contains("correlate"))
                })
                .collect::<Vec<_>>()
                .join("\n");
            format!("{metrics}\n{}", seen(&logs1, "incidents-1.stderr"))
        },
    );
    let status = daemon.terminate();
    assert!(status.success(), "causeway exited with {status}");
    let daemon = Daemon::start(d, "incidents-2", &config(2));
    common::testbed::wait_driver(&mut driver, d);
    // The driver ends 100 s after the fault; an incident resolves once the
    // recent window (1 min) and the decision wait have passed the fault.
    let logs2 = d.join("logs-2.jsonl");
    wait_for_or(
        Duration::from_secs(120),
        "both incidents resolved",
        || both(&logs2, "resolved"),
        || seen(&logs2, "incidents-2.stderr"),
    );
    wait_for(
        Duration::from_secs(30),
        "Alertmanager notified the page resolved",
        || {
            notes
                .lock()
                .unwrap()
                .iter()
                .any(|n| n["status"] == "resolved" && n["commonLabels"]["route_id"] == "search")
        },
    );

    // The truth: who served each item request, and whether Redis answered.
    let mut served: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut search_served: BTreeSet<String> = BTreeSet::new();
    let mut driven: Vec<Driven> = Vec::new();
    for v in read_jsonl(&truth) {
        let id = v["trace_id"].as_str().unwrap().to_string();
        if let Some(ver) = v["version"].as_str() {
            served.insert(
                id,
                (ver.to_string(), v["cache"].as_str().unwrap().to_string()),
            );
        } else if v["served"] == "search" {
            search_served.insert(id);
        } else if let Some(p) = v["path"].as_str() {
            driven.push(Driven {
                id,
                path: p.to_string(),
                phase: v["phase"].as_str().unwrap().to_string(),
                status: v["status"].as_i64().unwrap(),
                start: v["start"].as_i64().unwrap(),
                t: v["t"].as_i64().unwrap(),
            });
        }
    }
    let fault: Vec<&Driven> = driven.iter().filter(|x| x.phase == "fault").collect();
    let fault_from = fault.iter().map(|x| x.t).min().unwrap();
    let fault_to = fault.iter().map(|x| x.t).max().unwrap();
    let items = |phase: &str| -> (usize, usize) {
        let xs: Vec<_> = driven
            .iter()
            .filter(|x| x.phase == phase && x.path.starts_with("/item/"))
            .collect();
        let cold = xs
            .iter()
            .filter(|x| served.get(&x.id) == Some(&("2.4.1".to_string(), "miss".to_string())))
            .count();
        (cold, xs.len())
    };
    let (cold, n) = items("fault");
    assert!(
        cold * 10 >= n * 7,
        "during the fault {cold} of {n} item requests missed on 2.4.1"
    );
    let (cold, n) = items("healthy");
    assert_eq!(cold, 0, "before the fault {cold} of {n} missed on 2.4.1");
    assert!(
        !driven
            .iter()
            .any(|x| x.phase == "healthy" && served.get(&x.id).is_some_and(|s| s.1 == "miss")),
        "the warm keys were cold before the fault"
    );
    let searches: Vec<_> = fault.iter().filter(|x| x.path == "/search").collect();
    let turned_away = searches
        .iter()
        .filter(|x| !search_served.contains(&x.id))
        .count();
    assert!(
        turned_away * 2 >= searches.len(),
        "the limit turned away {turned_away} of {} searches",
        searches.len()
    );

    // The incidents, over both runs of causeway.
    let all: Vec<BTreeMap<String, Value>> = incident_records(&logs1)
        .into_iter()
        .chain(incident_records(&logs2))
        .collect();
    for r in &all {
        eprintln!(
            "{} {} {}",
            s(r, "incident.state"),
            s(r, "incident.route"),
            s(r, "incident.summary")
        );
    }
    let routes: BTreeSet<&str> = all.iter().map(|r| s(r, "incident.route")).collect();
    assert_eq!(
        routes,
        BTreeSet::from(["catalog-item", "search"]),
        "the report route, slow by nature, opened none; nothing else did"
    );
    let of = |route: &str| -> Vec<&BTreeMap<String, Value>> {
        all.iter()
            .filter(|r| s(r, "incident.route") == route)
            .collect()
    };
    let (item, search) = (of("catalog-item"), of("search"));
    for (route, rs) in [("catalog-item", &item), ("search", &search)] {
        let ids: BTreeSet<&str> = rs.iter().map(|r| s(r, "incident.id")).collect();
        assert_eq!(
            ids.len(),
            1,
            "{route}: one incident across the restart ({ids:?})"
        );
        assert_eq!(
            rs.iter()
                .filter(|r| s(r, "incident.state") == "open")
                .count(),
            1,
            "{route}: opened once"
        );
        let last = rs.last().unwrap();
        assert_eq!(s(last, "incident.state"), "resolved", "{route}");
        // An incident starts with the fault; on a loaded machine it may
        // start earlier, but only where the driver itself saw the route slow
        // or failing all the way into the fault.
        let opened = rs[0]["incident.started_at"].as_i64().unwrap();
        assert!(
            opened <= fault_to
                && (opened >= fault_from - 3_000
                    || driver_saw_it_bad_from(&driven, route, opened, fault_from)),
            "{route} started at {opened}, the fault was {fault_from}..{fault_to}; \
             what the driver saw of it before the fault: {:?}",
            bad_before(&driven, route, fault_from)
        );
    }
    assert_ne!(s(item[0], "incident.id"), s(search[0], "incident.id"));
    // The item incident's explanation, as its last record before it resolved says it.
    let e = item[item.len() - 2];
    assert_eq!(s(e, "incident.cause"), "cache_miss_fallback", "{e:?}");
    assert_eq!(s(e, "incident.culprit.at_service"), "catalog");
    assert!(e["incident.cause_share"].as_f64().unwrap() >= 0.8, "{e:?}");
    let disc: Value = serde_json::from_str(s(e, "incident.discriminators")).unwrap();
    assert_eq!(disc[0]["attribute"], "service.version", "{disc}");
    assert_eq!(disc[0]["value"], "2.4.1", "{disc}");
    assert!(
        disc[0]["share_in"].as_f64().unwrap() >= 0.8
            && disc[0]["share_out"].as_f64().unwrap() < 0.05
    );
    let moved: Value = serde_json::from_str(s(e, "incident.moved")).unwrap();
    let miss = moved
        .as_array()
        .unwrap()
        .iter()
        .find(|m| {
            let n = m["series"].as_str().unwrap();
            n.contains("redis") && n.ends_with(" miss_ratio")
        })
        .unwrap_or_else(|| panic!("no Redis miss ratio among what moved: {moved}"));
    assert!(
        miss["before"].as_f64().unwrap() < 0.1 && miss["during"].as_f64().unwrap() >= 0.5,
        "{miss}"
    );
    for t in s(e, "incident.exemplars").split(',') {
        assert_eq!(
            served.get(t).map(|x| (x.0.as_str(), x.1.as_str())),
            Some(("2.4.1", "miss")),
            "exemplar {t}"
        );
    }
    let summary = s(e, "incident.summary");
    assert!(
        summary.contains("cache_miss_fallback in catalog"),
        "{summary}"
    );
    assert!(summary.contains("service.version=2.4.1"), "{summary}");
    // The search incident: the limit, paged by its SLO.
    let e = search[search.len() - 2];
    assert_eq!(s(e, "incident.cause"), "rate_limited", "{e:?}");
    assert_eq!(
        s(&search[0].clone().clone(), "incident.slo"),
        "search-availability"
    );
    assert_eq!(s(search[0], "incident.severity"), "page");
    assert!(search[0]["incident.burn_rate"].as_f64().unwrap() >= 14.4);
    let disc: Value = serde_json::from_str(s(e, "incident.discriminators")).unwrap();
    assert!(
        disc.as_array()
            .unwrap()
            .iter()
            .any(|x| x["attribute"] == "log.rate_limit_rule" && x["value"] == "search-10rps"),
        "{disc}"
    );

    // Alertmanager paged with the incident's summary, and resolved it.
    let notes = notes.lock().unwrap().clone();
    let page = notes
        .iter()
        .flat_map(|n| n["alerts"].as_array().unwrap().iter())
        .find(|a| {
            a["status"] == "firing"
                && a["labels"]["alertname"] == "CausewayIncident"
                && a["labels"]["route_id"] == "search"
        })
        .unwrap_or_else(|| panic!("no page: {notes:?}"));
    assert_eq!(page["labels"]["severity"], "page");
    assert_eq!(page["labels"]["cause"], "rate_limited");
    assert!(
        page["annotations"]["summary"]
            .as_str()
            .unwrap()
            .contains("SLO search-availability burning"),
        "{page}"
    );
    assert!(notes.iter().any(|n| n["status"] == "firing"
        && n["commonLabels"]["route_id"] == "catalog-item"
        && n["commonLabels"]["severity"] == "warning"));
    // The page: the Incidents view draws both, resolved, with their explanation.
    let (st, body) = http_get(&daemon.telemetry, "/api/incidents").unwrap();
    assert_eq!(st, 200);
    let listed: Value = serde_json::from_str(&body).unwrap();
    let ids: BTreeSet<&str> = listed["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] == "resolved")
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        BTreeSet::from([s(item[0], "incident.id"), s(search[0], "incident.id")]),
        "{listed}"
    );
    let dom = chromium(
        &format!("http://{}/#/incidents", daemon.telemetry),
        8000,
        None,
    );
    for want in [
        r#"data-route="catalog-item" data-state="resolved""#,
        r#"data-route="search" data-state="resolved""#,
        "service.version",
        "search-availability",
        "cache_miss_fallback",
    ] {
        assert!(
            dom.contains(want),
            "the Incidents view lacks {want}:\n{dom}"
        );
    }
    drop(daemon);
}

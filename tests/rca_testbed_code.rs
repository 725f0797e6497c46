//! The code that held the time, on a real Go runtime: a shop instrumented by
//! otelhttp whose tracer provider is wrapped by `otel-profiling-go` (its CPU
//! samples carry the local root span's id), `net/http/pprof` scraped by
//! causeway's `pprof` receiver with its default settings (CPU and mutex
//! profiles, back to back), a front calling it (`tests/testbed/codeshop`).
//! causeway runs with its default `correlate` and `pprof` settings and the
//! tail sampler's default `decision_wait` (30 s: the profile of a span's
//! window has arrived by then).
//!
//! | cause | mechanism | ground truth from |
//! |---|---|---|
//! | cpu_hotspot | `main.parseAST` hashes four million times | the work the driver asked for |
//! | lock_contention | `main.refreshSymbols` holds the symbol table's `sync.Mutex` for 300 ms at a time while `/symbols` waits for it | the time the handler waited for `Lock()`, by its own clock |
//! | gc_pressure | `main.renderPage` allocates three million nodes | the work asked for and the GC cycles that ran meanwhile (`runtime/metrics`) |
//! | healthy | the same routes with little work, beside each fault | the work asked for and no wait for the lock |
//!
//! The bed's binary is built by `scripts/peers.sh` (cached by its sources).
#![allow(clippy::unwrap_used)]

mod common;

use common::testbed::{spawn, wait_port};
use common::*;
use std::collections::{BTreeMap, HashMap};
use std::process::Command;

const CODE_CAUSES: [&str; 3] = ["cpu_hotspot", "lock_contention", "gc_pressure"];

#[test]
fn a_go_services_own_code_is_named_as_the_cause_by_its_profiles() {
    let bin = testbed::peer("CAUSEWAY_TESTBED_CODESHOP");
    let dir = testbed::bed_dir();
    let d = dir.path();
    let p = free_port;
    let (otlp_port, shop_port, pprof_port, front_port) = (p(), p(), p(), p());
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{otlp_port}" }}
  pprof:
    targets:
      - service: shop
        static_configs: [{{ targets: ["127.0.0.1:{pprof_port}"] }}]
processors:
  tail_sampling:
    policies: [{{ name: all, type: always_sample }}]
  correlate: {{}}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  file/logs: {{ path: "{{dir}}/logs.jsonl" }}
  nop: {{}}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [otlp], processors: [correlate], exporters: [file/logs] }}
    profiles: {{ receivers: [pprof], processors: [correlate], exporters: [nop] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    );
    let truth = d.join("truth.jsonl");
    let role = |name: &'static str, port: u16, extra: &[(&str, String)]| {
        let mut c = Command::new(&bin);
        c.arg(name)
            .env("PORT", port.to_string())
            .env("OTEL_SERVICE_NAME", name)
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{otlp_port}"),
            )
            .env("TRUTH_FILE", &truth);
        for (k, v) in extra {
            c.env(k, v);
        }
        spawn(name, &mut c, d)
    };
    let url = |port: u16| format!("http://127.0.0.1:{port}");
    // The shop first: the receiver's first profile starts with the daemon.
    let mut shop = role("shop", shop_port, &[("PPROF_PORT", pprof_port.to_string())]);
    let mut front = role("front", front_port, &[("SHOP_URL", url(shop_port))]);
    wait_port(shop_port, "shop", &mut shop, d);
    wait_port(pprof_port, "shop's pprof", &mut shop, d);
    wait_port(front_port, "front", &mut front, d);
    let daemon = Daemon::start(d, "code", &config);
    let driver = |phase: &str| {
        let mut p = role(
            "driver",
            0,
            &[
                ("PHASE", phase.to_string()),
                ("FRONT_URL", url(front_port)),
                ("SHOP_PPROF_URL", url(pprof_port)),
                (
                    "SCALE",
                    std::env::var("CAUSEWAY_TESTBED_SCALE").unwrap_or_else(|_| "1".into()),
                ),
            ],
        );
        testbed::wait_driver(&mut p, d);
    };
    // The routes' normal, learned (analysed) before the faults.
    driver("warmup");
    let traces = d.join("traces.jsonl");
    let warmup: Vec<String> = read_jsonl(&truth)
        .iter()
        .map(|v| v["trace_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(warmup.len(), 90);
    testbed::verdicts(&traces, warmup.iter());
    driver("faults");

    // The ground truth: what each request's mechanism did, by the shop.
    let mut label: BTreeMap<String, String> = BTreeMap::new();
    let mut function: HashMap<String, String> = HashMap::new();
    for v in read_jsonl(&truth) {
        let id = v["trace_id"].as_str().unwrap().to_string();
        let asked = v["label"].as_str().unwrap();
        if asked == "warmup" {
            continue;
        }
        let ms = v["ms"].as_i64().unwrap();
        let l = match v["route"].as_str().unwrap() {
            // The lock: whatever the driver meant, the wait decides.
            "/symbols" => {
                let waited = v["waited_ms"].as_i64().unwrap();
                if waited >= 20 && waited * 2 >= ms {
                    "lock_contention"
                } else if ms < 20 {
                    "healthy"
                } else {
                    "unexpected: a slow lookup that did not wait for the lock"
                }
            }
            "/render" if asked == "gc_pressure" => {
                if v["gc_cycles"].as_u64().unwrap() >= 1 {
                    "gc_pressure"
                } else {
                    "unexpected: no GC cycle while the page allocated"
                }
            }
            _ => asked,
        };
        assert!(!l.starts_with("unexpected"), "the test bed misbehaved: {v}");
        function.insert(id.clone(), v["function"].as_str().unwrap().to_string());
        label.insert(id, l.to_string());
    }
    let count = |c: &str| label.values().filter(|l| *l == c).count();
    for c in CODE_CAUSES {
        assert!(count(c) >= 15, "{c}: {} traces ({label:?})", count(c));
    }

    let got = testbed::verdicts(&traces, label.keys());
    let score = testbed::score(&label, &got, &|_, _| ("shop".into(), "code"), &traces);
    score.assert_bounds(&CODE_CAUSES, 15);

    // The function the mechanism ran, named on the kept trace, with the
    // join that found it.
    for c in CODE_CAUSES {
        let (mut n, mut right) = (0, 0);
        for (id, _) in label.iter().filter(|(_, l)| *l == c) {
            let a = &got[id].root;
            n += 1;
            let named = a.get("rca.code.function") == function.get(id);
            let join = a.get("rca.code.join").map(String::as_str);
            let want_join = if c == "lock_contention" {
                "time"
            } else {
                "span"
            };
            if named && join == Some(want_join) {
                right += 1;
            } else {
                eprintln!(
                    "  {c} {id}: code {:?} by {join:?} (want {:?} by {want_join}); {}",
                    a.get("rca.code.function"),
                    function.get(id),
                    a.get("rca.summary").map_or("", String::as_str)
                );
            }
        }
        assert!(
            right * 10 >= n * 9,
            "{c}: the function named for {right} of {n}"
        );
    }
    // No healthy trace is given a cause of its code.
    for (id, _) in label.iter().filter(|(_, l)| *l == "healthy") {
        let cause = got[id].root.get("rca.cause").map_or("", String::as_str);
        assert!(
            !CODE_CAUSES.contains(&cause),
            "healthy {id} given {cause}: {:?}",
            got[id].root.get("rca.summary")
        );
    }
    // The page's trace view draws the culprit span's flame graph, the named
    // function marked (a real browser).
    let (id, _) = label.iter().find(|(_, l)| *l == "cpu_hotspot").unwrap();
    let dom = chromium(
        &format!("http://{}/#/trace/{id}", daemon.telemetry),
        8000,
        None,
    );
    let flame = &dom[dom.find(r#"id="flame""#).expect("the flame graph")..];
    let named = &flame[flame
        .find(r#"class="frame named""#)
        .expect("the named frame")..];
    assert!(
        named[..named.find("</g>").unwrap()].contains("main.parseAST"),
        "{named}"
    );
    assert!(dom.contains(r#"id="code-top""#), "{dom}");
    // The RCA log record of the trace carries its top frames.
    let record = read_jsonl(&d.join("logs.jsonl"))
        .iter()
        .flat_map(|l| l["resourceLogs"].as_array().cloned().unwrap_or_default())
        .flat_map(|r| r["scopeLogs"].as_array().cloned().unwrap_or_default())
        .flat_map(|s| s["logRecords"].as_array().cloned().unwrap_or_default())
        .find(|r| r["traceId"].as_str().map(str::to_lowercase).as_deref() == Some(id.as_str()))
        .expect("the trace's RCA log record");
    let top = attr(&record["attributes"], "rca.code.top_own")
        .and_then(|v| v["stringValue"].as_str())
        .expect("rca.code.top_own on the record");
    let top: serde_json::Value = serde_json::from_str(top).unwrap();
    assert_eq!(top[0]["function"], "main.parseAST", "{top}");
}

/// A JVM's own code, by async-profiler's own OTLP profiles (its agent
/// library from Maven Central, `event=cpu`, posting a profile every 2 s to
/// causeway's `otlp` receiver): a Java service under the OpenTelemetry Java
/// agent (`tests/testbed/javacode`, the JDK's HttpServer) behind the Go
/// front. async-profiler's samples name no span: the join is by the
/// service and the time, ≥ 90% of the parses named. Truth: the work the
/// request asked for.
#[test]
fn a_jvms_own_code_is_named_by_async_profilers_profiles() {
    let path = testbed::peer;
    let (shop_bin, java, profiler, ledger) = (
        path("CAUSEWAY_TESTBED_CODESHOP"),
        path("CAUSEWAY_TESTBED_JAVA"),
        path("CAUSEWAY_ASYNC_PROFILER"),
        path("CAUSEWAY_TESTBED_LEDGER"),
    );
    let dir = testbed::bed_dir();
    let d = dir.path();
    let p = free_port;
    let (otlp_port, ledger_port, admin_port, front_port) = (p(), p(), p(), p());
    let daemon = Daemon::start(
        d,
        "java",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{otlp_port}" }}
processors:
  tail_sampling:
    decision_wait: 10s
    policies: [{{ name: all, type: always_sample }}]
  correlate: {{}}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  nop: {{}}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    profiles: {{ receivers: [otlp], processors: [correlate], exporters: [nop] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let truth = d.join("truth.jsonl");
    let otlp = format!("http://127.0.0.1:{otlp_port}");
    let mut jvm = spawn(
        "ledger",
        Command::new("java")
            .arg(format!(
                "-javaagent:{}",
                java.join("opentelemetry-javaagent.jar").display()
            ))
            .arg(format!(
                "-agentpath:{}=start,event=cpu,interval=10ms,loop=2s,otlp,file={otlp}/v1development/profiles",
                profiler.display()
            ))
            .args(["-cp", &ledger.display().to_string(), "Ledger"])
            .env("OTEL_SERVICE_NAME", "ledger")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
            .env("OTEL_METRICS_EXPORTER", "none")
            .env("OTEL_LOGS_EXPORTER", "none")
            .env("OTEL_BSP_SCHEDULE_DELAY", "200")
            .env("PORT", ledger_port.to_string())
            .env("ADMIN_PORT", admin_port.to_string())
            .env("TRUTH_FILE", &truth),
        d,
    );
    let mut front = spawn(
        "front",
        Command::new(&shop_bin)
            .arg("front")
            .env("PORT", front_port.to_string())
            .env("OTEL_SERVICE_NAME", "front")
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
            .env("SHOP_URL", format!("http://127.0.0.1:{ledger_port}")),
        d,
    );
    wait_port(ledger_port, "ledger", &mut jvm, d);
    wait_port(front_port, "front", &mut front, d);
    // The routes' normal, analysed, then five parses of a big document.
    let mut warm = spawn(
        "driver",
        Command::new(&shop_bin)
            .arg("driver")
            .env("PHASE", "warmup")
            .env("FRONT_URL", format!("http://127.0.0.1:{front_port}"))
            .env("TRUTH_FILE", &truth),
        d,
    );
    testbed::wait_driver(&mut warm, d);
    let traces = d.join("traces.jsonl");
    let ids = |label: &str| -> Vec<String> {
        read_jsonl(&truth)
            .iter()
            .filter(|v| v["label"] == label)
            .map(|v| v["trace_id"].as_str().unwrap().to_string())
            .collect()
    };
    let warmup = ids("warmup");
    assert_eq!(warmup.len(), 90);
    testbed::verdicts(&traces, warmup.iter());
    // Two clients, eight parses each, back to back: the profile's windows
    // (2 s) are the service's CPU, shared by the spans that overlap them.
    std::thread::scope(|sc| {
        for _ in 0..2 {
            sc.spawn(|| {
                let client = http_client();
                for _ in 0..8 {
                    let r = client
                        .get(format!("http://127.0.0.1:{front_port}/api/parse?n=4000000"))
                        .header("X-Label", "cpu_hotspot")
                        .send()
                        .unwrap();
                    assert!(r.status().is_success());
                }
            });
        }
    });
    let hot = ids("cpu_hotspot");
    assert_eq!(hot.len(), 16);
    let got = testbed::verdicts(&traces, hot.iter());
    let mut right = 0;
    for id in &hot {
        let a = &got[id].root;
        let ms = read_jsonl(&truth)
            .iter()
            .find(|v| v["trace_id"] == id.as_str())
            .and_then(|v| v["ms"].as_i64())
            .unwrap();
        assert!(ms >= 100, "the parse took {ms} ms: too little to tell");
        let verdict = (
            a.get("rca.cause").map(String::as_str),
            a.get("rca.culprit.service").map(String::as_str),
            a.get("rca.culprit.kind").map(String::as_str),
            a.get("rca.code.function").map(String::as_str),
            a.get("rca.code.join").map(String::as_str),
        );
        if verdict
            == (
                Some("cpu_hotspot"),
                Some("ledger"),
                Some("code"),
                Some("Ledger.parseAst"),
                Some("time"),
            )
        {
            right += 1;
        } else {
            eprintln!("  {id}: {verdict:?} {:?}", a.get("rca.summary"));
        }
    }
    // A time join spreads a window's samples evenly over it: a span at the
    // edge of the burst may be given too little of them.
    assert!(
        right * 10 >= hot.len() * 9,
        "{right} of {} right",
        hot.len()
    );
    // No warm-up request is given a cause of its code.
    let all = testbed::verdicts(&traces, warmup.iter());
    for id in &warmup {
        let cause = all[id].root.get("rca.cause").map_or("", String::as_str);
        assert!(!CODE_CAUSES.contains(&cause), "warm-up {id} given {cause}");
    }
    drop(daemon);
}

//! Retries, one request's and many requests', on Go services instrumented
//! by otelhttp only (`tests/testbed/go/storm.go`): a shop whose purchases
//! call a supplier through go-retryablehttp (each attempt given up after
//! 100 ms, retried 10-40 ms later, up to 8 attempts), and a supplier of four
//! workers that finish what they began whether or not the caller still
//! waits. causeway runs `examples/gateway.yaml`'s sampler and its default
//! `correlate`.
//!
//! | phase | mechanism | ground truth (the shop's own count) | cause |
//! |---|---|---|---|
//! | one buyer, the supplier taking 300 ms | each attempt gives up, the next one too: a transient failure retried | ≥ 6 attempts, none answered, < 50 retries sent in the second before it ended | `upstream_timeout`, the retries its evidence |
//! | 80 buyers, the supplier taking 10 ms | its 400 a second are outrun; the attempts that time out are retried into the work the earlier ones left | ≥ 2 attempts, ≥ 400 retries sent in the second before it ended | `retry_storm`, what the attempts met in the evidence |
//!
//! `scripts/peers.sh` builds the Go binary (cached by its files).
#![allow(clippy::unwrap_used)]

mod common;

use common::testbed::{spawn, wait_port, Wiring};
use common::*;
use std::collections::BTreeMap;
use std::process::Command;

#[test]
fn one_requests_retries_are_their_trigger_and_many_requests_retries_are_a_storm() {
    let bin = testbed::peer("CAUSEWAY_TESTBED_GO");
    let dir = testbed::bed_dir();
    let d = dir.path();
    let p = free_port;
    let (otlp_port, shop_port, shop_admin, supplier_port, supplier_admin) =
        (p(), p(), p(), p(), p());
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{otlp_port}" }}
processors:
  tail_sampling: {sampler}
  correlate: {{}}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        sampler = Wiring::Shipped.sampler()
    );
    let daemon = Daemon::start(d, "retries", &config);
    let truth = d.join("truth.jsonl");
    let role = |name: &'static str, port: u16, admin: u16, extra: &[(&str, String)]| {
        let mut c = Command::new(&bin);
        c.arg(name)
            .env("PORT", port.to_string())
            .env("ADMIN_PORT", admin.to_string())
            .env("OTEL_SERVICE_NAME", name.trim_start_matches("storm-"))
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{otlp_port}"),
            )
            .env("OTEL_BSP_MAX_QUEUE_SIZE", "65536")
            .env("TRUTH_FILE", &truth);
        for (k, v) in extra {
            c.env(k, v);
        }
        spawn(name, &mut c, d)
    };
    let url = |port: u16| format!("http://127.0.0.1:{port}");
    let mut supplier = role("storm-supplier", supplier_port, supplier_admin, &[]);
    let mut shop = role(
        "storm-shop",
        shop_port,
        shop_admin,
        &[("SUPPLIER_URL", url(supplier_port))],
    );
    wait_port(supplier_port, "supplier", &mut supplier, d);
    wait_port(supplier_admin, "supplier's admin", &mut supplier, d);
    wait_port(shop_port, "shop", &mut shop, d);
    wait_port(shop_admin, "shop's admin", &mut shop, d);
    let get = |port: u16, path: &str| {
        let out = Command::new("curl")
            .args(["-sf", "--max-time", "120", &format!("{}{path}", url(port))])
            .output()
            .unwrap();
        assert!(out.status.success(), "{path}: {out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    // The normal: two buyers, the supplier taking 10 ms.
    get(shop_admin, "/drive?c=2&secs=6");
    // One buyer alone, the supplier taking 300 ms: every attempt times out.
    get(supplier_admin, "/work?ms=300");
    get(shop_admin, "/drive?c=1&secs=12");
    // Eighty buyers, the supplier back to 10 ms.
    get(supplier_admin, "/work?ms=10");
    get(shop_admin, "/drive?c=80&secs=10");

    // The ground truth: the shop's own count.
    let mut label: BTreeMap<String, String> = BTreeMap::new();
    let lines = read_jsonl(&truth);
    for v in &lines {
        let id = v["trace_id"].as_str().unwrap().to_string();
        let attempts = v["attempts"].as_i64().unwrap();
        let answered = v["answered"].as_bool().unwrap();
        let retries = v["retries_last_second"].as_i64().unwrap();
        let l = if attempts >= 2 && retries >= 400 {
            "retry_storm"
        } else if attempts >= 6 && !answered && retries < 50 {
            "upstream_timeout"
        } else if attempts == 1 && answered {
            "healthy"
        } else {
            continue;
        };
        label.insert(id, l.to_string());
    }
    let count = |c: &str| label.values().filter(|l| *l == c).count();
    assert!(count("upstream_timeout") >= 6, "{label:?}");
    assert!(count("retry_storm") >= 100, "{}", count("retry_storm"));
    let traces = d.join("traces.jsonl");
    let (scored, dropped, got) = testbed::kept_labels(&daemon, &traces, label, lines.len());
    let faults: BTreeMap<String, String> =
        scored.into_iter().filter(|(_, l)| l != "healthy").collect();
    assert_eq!(
        dropped.get("upstream_timeout").copied().unwrap_or(0)
            + dropped.get("retry_storm").copied().unwrap_or(0),
        0,
        "every failed purchase is kept by the shipped sampler: {dropped:?}"
    );
    let score = testbed::score(
        &faults,
        &got,
        &|_, _| ("supplier".into(), "callee"),
        &traces,
    );
    for c in ["upstream_timeout", "retry_storm"] {
        let (n, r, cu) = score.per.get(c).copied().unwrap_or_default();
        assert!(n >= 6, "{c}: {n} kept");
        assert!(r * 100 >= n * 95, "{c}: {r} of {n} right (≥ 95%)");
        assert!(cu * 100 >= r * 95, "{c}: culprit right for {cu} of {r}");
    }
    // One request's retries are the evidence of its trigger, a storm's
    // trigger is in its evidence.
    for (id, l) in &faults {
        let a = &got[id].root;
        if a["rca.cause"] != *l {
            continue;
        }
        let summary = &a["rca.summary"];
        let reason = a.get("rca.reason").map_or("", String::as_str);
        match l.as_str() {
            "upstream_timeout" => assert!(summary.contains("retried"), "{id}: {summary}"),
            _ => assert!(
                summary.contains("retries a second (a retry storm)")
                    && (reason.contains("(how retry_storm shows at the same call)")
                        || reason.contains("(what the storm's attempts met)")),
                "{id}: {summary} / {reason}"
            ),
        }
    }
}

//! Root causes on Python services that use libraries no causeway rule
//! names: Flask services instrumented by the stock OpenTelemetry SDK and
//! instrumentations from PyPI (flask, requests, grpc, sqlalchemy), a breaker
//! from the `circuitbreaker` package with its default settings, a grpcio
//! client, whose spans carry no `server.address`, and SQLAlchemy's pool
//! (`tests/testbed/python/bed.py`).
//! causeway runs with its default `correlate` settings.
//!
//! | cause | mechanism | ground truth from |
//! |---|---|---|
//! | upstream_unavailable | the grpcio server of `reservations` exited; pricing's HTTP server exited (the breaker's first five calls) | grpcio raised `StatusCode.UNAVAILABLE`; requests raised `ConnectionError` |
//! | circuit_open | `@circuit` opened after five failures and refuses for 30 s | the breaker raised `CircuitBreakerError` (no request went out) |
//! | healthy | a 503 retried once at once and answered, by the handler's own loop and by urllib3's `Retry` inside requests (one client span, the attempts only as pricing's server spans) | the client's own statuses: 503, then 200; the adapter's final 200 |
//! | error | `/order`'s own validation raises `ValueError` in an internal span before any call, after the api's calls to pricing failed (the 503s) and were answered again: an application exception, never `circuit_open` | the handler raised it (no breaker on that path) |
//! | queueing | six reports at once on a SQLAlchemy pool of two connections that two exports hold for 1.5 s (the stock instrumentation's `connect` span, a name no rule lists, is the checkout) | the pool's own `checkout` event: the report waited ≥ 100 ms for it |
//!
//! The bed's venv is built by `scripts/deps.sh` (cached by version).
#![allow(clippy::unwrap_used)]

mod common;

use common::testbed::{spawn, wait_port, Wiring};
use common::*;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

fn python() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let p = PathBuf::from(home).join(".cache/causeway-peers/pyvenv-bed-2/bin/python");
    assert!(
        p.exists(),
        "the Python test bed's venv: scripts/deps.sh makes {}",
        p.display()
    );
    p
}

#[test]
fn python_services_with_unlisted_libraries_get_the_right_cause_and_culprit() {
    let py = python();
    let bed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testbed/python/bed.py");
    let dir = testbed::bed_dir();
    let d = dir.path();
    let p = free_port;
    let (otlp_port, pricing_port, res_admin, res_grpc, api_port) = (p(), p(), p(), p(), p());
    let wiring = testbed::wiring();
    let head = match wiring {
        Wiring::KeepAll => causeway_scenarios::config::keep_all(otlp_port, "2s"),
        Wiring::Shipped => format!(
            "{}processors:\n  tail_sampling: {}\n",
            causeway_scenarios::config::otlp_http(otlp_port),
            wiring.sampler()
        ),
    };
    let config = format!(
        "{head}  correlate: {{}}\n{tail}",
        tail = causeway_scenarios::config::analysed("otlp", "otlp", "otlp"),
    );
    let daemon = Daemon::start(d, "python", &config);

    let truth = d.join("truth.jsonl");
    let service = |role: &'static str, port: u16, extra: &[(&str, String)]| {
        let mut c = Command::new(&py);
        c.arg(&bed)
            .arg(role)
            .env("PORT", port.to_string())
            .env("OTEL_SERVICE_NAME", role)
            .env(
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{otlp_port}"),
            )
            .env("TRUTH_FILE", &truth);
        for (k, v) in extra {
            c.env(k, v);
        }
        spawn(role, &mut c, d)
    };
    let url = |port: u16| format!("http://127.0.0.1:{port}");
    let mut pricing = service("pricing", pricing_port, &[]);
    let mut reservations = service(
        "reservations",
        res_admin,
        &[("GRPC_PORT", res_grpc.to_string())],
    );
    let mut api = service(
        "api",
        api_port,
        &[
            ("PRICING_URL", url(pricing_port)),
            ("RESERVATIONS_ADDR", format!("127.0.0.1:{res_grpc}")),
            ("DB_FILE", d.join("api.db").display().to_string()),
            ("HOLD_S", "1.5".into()),
        ],
    );
    wait_port(pricing_port, "pricing", &mut pricing, d);
    wait_port(res_grpc, "reservations", &mut reservations, d);
    wait_port(api_port, "api", &mut api, d);
    let mut driver = service(
        "driver",
        0,
        &[
            ("API_URL", url(api_port)),
            ("PRICING_URL", url(pricing_port)),
            ("RESERVATIONS_ADMIN", url(res_admin)),
            // Behind the shipped sampler, the reports' route has its
            // normal traffic first: its p99 is then the waits', as in
            // production where they are rare.
            (
                "WARMUP",
                if wiring == Wiring::Shipped {
                    "1900"
                } else {
                    "0"
                }
                .to_string(),
            ),
            (
                "SCALE",
                std::env::var("CAUSEWAY_TESTBED_SCALE").unwrap_or_else(|_| "1".into()),
            ),
        ],
    );
    testbed::wait_driver(&mut driver, d);

    // The ground truth: the driver's label, or what the mechanism did.
    let mut driver_labels: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut observed: HashMap<String, String> = HashMap::new();
    for v in read_jsonl(&truth) {
        let id = v["trace_id"].as_str().unwrap().to_string();
        if let Some(l) = v["label"].as_str() {
            driver_labels.insert(id, (l.into(), v["path"].as_str().unwrap().into()));
        } else if let Some(o) = v["observed"].as_str() {
            observed.insert(id, o.into());
        }
    }
    let mut label: BTreeMap<String, String> = BTreeMap::new();
    for (id, (l, path)) in &driver_labels {
        let l = if l == "observed" {
            observed
                .get(id)
                .cloned()
                .unwrap_or_else(|| panic!("{id} {path}: the service recorded nothing"))
        } else {
            l.clone()
        };
        assert!(
            !l.starts_with("unexpected"),
            "the test bed misbehaved: {id} {path} {l}"
        );
        // The warm-up and the exports holding the pool are not judged.
        if l != "warmup" && l != "holder" {
            label.insert(id.clone(), l);
        }
    }
    let count = |c: &str| label.values().filter(|l| *l == c).count();
    // The breaker opened after its five failures, by its own count.
    assert_eq!(count("circuit_open"), 15, "{label:?}");
    // Most reports waited for the pool, by its own checkout event.
    assert!(count("queueing") >= 15, "{label:?}");
    assert_eq!(count("error"), 10, "{label:?}");

    let traces = d.join("traces.jsonl");
    let (label, got) = testbed::judged(wiring, &daemon, &traces, label, driver_labels.len());
    let culprit_of = |cause: &str, id: &str| -> (String, &'static str) {
        let path = driver_labels.get(id).map_or("", |(_, p)| p.as_str());
        let service = match (cause, path) {
            // The gRPC server that went away, not the caller that met it.
            ("upstream_unavailable", "/hold") => "reservations",
            // The HTTP server that went away, and the breaker guarding it.
            ("upstream_unavailable" | "circuit_open", _) => "pricing",
            // The api's own pool of connections, and its own exception.
            ("queueing" | "error", _) => "api",
            (other, _) => panic!("no culprit for {other}"),
        };
        let kind = if cause == "queueing" || cause == "error" {
            "service"
        } else {
            "callee"
        };
        (service.to_string(), kind)
    };
    let score = testbed::score(&label, &got, &culprit_of, &traces);
    score.assert_bounds_for(
        wiring,
        &["upstream_unavailable", "circuit_open", "queueing", "error"],
        5,
    );
}

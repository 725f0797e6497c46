//! Root causes on an LLM service served by real serving software: a coding
//! assistant (Flask, redis-py, the OpenAI client; the stock OpenTelemetry
//! SDK with PyPI's flask, redis and official GenAI instrumentations) in
//! front of llama.cpp's own server (`llama-server`, CPU, two slots, its
//! prompt cache, `--metrics` scraped by causeway's `prometheus` receiver)
//! behind NGINX (`tests/testbed/llm/assistant.py`). The model is tiny and
//! random (its answers are nonsense); its timings are real. causeway runs
//! with its default `correlate` settings.
//!
//! Every fault is a real mechanism; the ground truth is what llama.cpp
//! reported for the request (the `timings` of its last chunk: prompt tokens
//! processed and taken from its cache, prompt and generation times) and
//! what the service and the driver saw, never the field a rule reads:
//!
//! | cause | mechanism | ground truth from |
//! |---|---|---|
//! | long_prompt | sessions that send the whole repository (~9,000 tokens) instead of one file (~2,000) | llama.cpp's prompt tokens ≥ 4× the usual, and its prompt time ≥ half the call |
//! | cache_miss_fallback | client 2.0 puts the time at the head of the system prompt: llama.cpp's prompt cache stops matching | llama.cpp took < half the prompt from its cache, and its prompt time was ≥ half the call |
//! | inference_queueing | eight requests at once on two slots | the time to the first chunk the service saw less llama.cpp's prompt time: ≥ 100 ms and ≥ 30% of the call |
//! | host_cpu_saturation | busy loops on every core while the usual requests go on (the server runs one thread) | /proc/stat ≥ 90% busy over the hog; llama.cpp's own compute ≥ 2× its usual |
//! | rate_limited | one client over NGINX's `limit_req` on the same route | the request never reached the assistant |
//! | upstream_timeout | answers longer than NGINX's `proxy_read_timeout` on the same route, one at a time | the assistant's call outlasted the timeout |
//!
//! The machine's speed sets the timeout: before the load, llama.cpp's own
//! timings of an uncached prompt of the long shape and of a usual decode
//! set NGINX's read timeout (1.6 times that prefill, 6 s at least) and the
//! length of the timeout phase's answers (1.4 times the timeout to
//! decode), so that on a busy machine the long prompts still finish and the
//! timeouts still time out.
//!
//! Every verdict on a llama.cpp call says where its time went — the wait
//! for a slot, the prefill (uncached of all prompt tokens) and the decode
//! (tokens, ms each) — estimated from the call's tokens against llama.cpp's
//! own counters: the official OpenAI instrumentation of these versions
//! writes no time to first chunk on the span (the service streams every
//! answer; the instrumentation records that time only as the
//! `gen_ai.client.operation.time_to_first_chunk` histogram), and llama.cpp
//! writes no spans.
//!
//! The second test is a pulse of long contexts on the route, at a steady
//! rate: it opens one incident (default incident settings) whose cause is
//! `long_prompt` in the assistant, whose strongest discriminator is the
//! prompt-size bucket, whose "what moved" is llama.cpp's own prompt work,
//! and which resolves after the pulse.
//!
//! `scripts/peers.sh` builds llama-server and the model, and makes the
//! bed's venv (cached by version). `bench/rca_testbed.sh` (`BED=llm`) runs
//! it longer.
#![allow(clippy::unwrap_used)]

mod common;

use common::testbed::{nginx, spawn, wait_port, Wiring};
use common::*;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// The bed's parts, running: Redis, llama-server, causeway, NGINX, the assistant.
struct Bed {
    dir: tempfile::TempDir,
    truth: std::path::PathBuf,
    run: Box<dyn Fn(&'static str) -> Proc>,
    /// NGINX's read timeout, set from llama.cpp's speed on this machine.
    timeout_ms: f64,
    _procs: Vec<Proc>,
    daemon: Daemon,
}

impl Bed {
    fn start(wiring: Wiring) -> Bed {
        let server = testbed::peer("CAUSEWAY_LLAMA_SERVER");
        let model = testbed::peer("CAUSEWAY_LLM_MODEL");
        let py = testbed::peer("CAUSEWAY_LLM_PYTHON");
        let bed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testbed/llm/assistant.py");
        let dir = testbed::bed_dir();
        let d = dir.path();
        let p = free_port;
        let (redis_port, llm_port, otlp_port, nginx_port, assistant_port) =
            (p(), p(), p(), p(), p());
        let redis = testbed::redis(d, redis_port);

        // llama.cpp: two slots of 12,288 tokens, one thread, its metrics on.
        let mut llm = spawn(
            "llama-server",
            Command::new(&server).args([
                "-m",
                &model.display().to_string(),
                "--host",
                "127.0.0.1",
                "--port",
                &llm_port.to_string(),
                "-np",
                "2",
                "-c",
                "24576",
                "-t",
                "1",
                "--metrics",
            ]),
            d,
        );
        wait_port(llm_port, "llama-server", &mut llm, d);
        wait_for(
            Duration::from_secs(60),
            "llama-server loaded the model",
            || http_get(&format!("127.0.0.1:{llm_port}"), "/health").is_some_and(|(s, _)| s == 200),
        );

        // How fast llama.cpp is here and now, by its own timings: the
        // gateway waits 1.6 times the longest prompt's prefill (6 s at
        // least), and the timeout phase's answers take 1.4 times that to
        // decode, so that a busy machine's long prompts are not cut off and
        // its timeouts still time out.
        let out = Command::new(&py)
            .arg(&bed)
            .arg("calibrate")
            .env("LLM_URL", format!("http://127.0.0.1:{llm_port}"))
            .output()
            .expect("run the calibration");
        assert!(
            out.status.success(),
            "calibration: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let cal: serde_json::Value = serde_json::from_slice(&out.stdout).expect("calibration JSON");
        let (long_ms, decode_ms) = (
            cal["long_prompt_ms"].as_f64().unwrap(),
            cal["decode_ms_per_token"].as_f64().unwrap(),
        );
        let timeout_s = (1.6 * long_ms / 1000.0).ceil().max(6.0);
        // At most what a slot holds beside the usual prompt.
        let timeout_tokens = (1.4 * timeout_s * 1000.0 / decode_ms)
            .ceil()
            .clamp(2200.0, 9000.0);
        // The assistant goes on decoding after the gateway gave up: its
        // span must arrive before the trace is decided.
        let decision_wait = (2.0 * timeout_s + 5.0).max(15.0);
        let sampler = wiring.sampler_or(&format!(
            "{{ decision_wait: {decision_wait}s, policies: [{{ name: all, type: always_sample }}] }}"
        ));
        eprintln!(
            "calibration: long prompt {long_ms:.0} ms, decode {decode_ms:.2} ms/token: \
             gateway timeout {timeout_s} s, timeout answers of {timeout_tokens} tokens"
        );

        let config = format!(
            r#"{receivers}  prometheus:
    config:
      global: {{ scrape_interval: 1s, scrape_timeout: 900ms }}
      scrape_configs:
        - job_name: llama-server
          static_configs: [{{ targets: ["127.0.0.1:{llm_port}"] }}]
  hostmetrics: {{}}
  gateway_log:
    include: ["{{dir}}/access.log*"]
    start_at: beginning
    format: nginx
    poll_interval: 50ms
    resource: {{ service.name: nginx-gateway }}
processors:
  tail_sampling: {sampler}
  correlate:
    # llama-server is scraped every second (above); the README says to
    # set this to the scrape interval. Every threshold is the default.
    dependencies: {{ sample_interval: 1s }}
{tail}"#,
            receivers = causeway_scenarios::config::otlp_http(otlp_port),
            tail = causeway_scenarios::config::analysed(
                "otlp",
                "otlp, gateway_log",
                "prometheus, hostmetrics"
            ),
        );
        let daemon = Daemon::start(d, "llm", &config);

        // NGINX as the gateway of the one route: a per-client rate limit (a
        // request without the header is not counted) and the read timeout.
        let nginx_conf = testbed::nginx_gateway_conf(
            d,
            256,
            &format!(
                r#"  limit_req_zone $http_x_client_id zone=perclient:1m rate=2r/s;
  limit_req_status 429;
  map $limit_req_status $rate_limit_rule {{ REJECTED "per-client-2rps"; default ""; }}
  server {{
    listen 127.0.0.1:{nginx_port};
    access_log {d}/access.log gateway;
    set $route_id "";
    location = /assist {{
      set $route_id assist;
      limit_req zone=perclient;
      proxy_read_timeout {timeout_s}s;
      proxy_pass http://127.0.0.1:{assistant_port};
    }}
  }}"#,
                d = d.display()
            ),
        );
        let gateway = nginx("nginx", d, &nginx_conf, nginx_port);

        let truth = d.join("truth.jsonl");
        let service = move |role: &'static str, name: &str, port: u16, d: &Path| {
            let mut c = Command::new(&py);
            c.arg(&bed)
                .arg(role)
                .env("PORT", port.to_string())
                .env("OTEL_SERVICE_NAME", name)
                .env("OTEL_EXPERIMENTAL_RESOURCE_DETECTORS", "otel,host")
                .env(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    format!("http://127.0.0.1:{otlp_port}"),
                )
                .env("TRUTH_FILE", d.join("truth.jsonl"))
                .env("STOP_FILE", d.join("stop"))
                .env("REDIS_PORT", redis_port.to_string())
                .env("LLM_URL", format!("http://127.0.0.1:{llm_port}"))
                .env("GATEWAY", format!("http://127.0.0.1:{nginx_port}"))
                .env("TIMEOUT_TOKENS", timeout_tokens.to_string())
                .env(
                    "SCALE",
                    std::env::var("CAUSEWAY_TESTBED_SCALE").unwrap_or_else(|_| "1".into()),
                );
            spawn(role, &mut c, d)
        };
        let mut assistant = service("assistant", "assistant", assistant_port, d);
        wait_port(assistant_port, "assistant", &mut assistant, d);
        let dir_path = d.to_path_buf();
        Bed {
            truth,
            run: Box::new(move |mode| service(mode, "client", 0, &dir_path)),
            timeout_ms: timeout_s * 1000.0,
            _procs: vec![redis, llm, gateway, assistant],
            daemon,
            dir,
        }
    }

    /// Run the driver in `mode` (`driver` or `pulse`) to its end.
    fn drive(&self, mode: &'static str) {
        let mut driver = (self.run)(mode);
        testbed::wait_driver(&mut driver, self.dir.path());
    }
}

#[test]
fn an_llm_service_on_llama_cpp_gets_the_right_cause_and_culprit() {
    let _one = common::alone();
    let wiring = testbed::wiring();
    let bed = Bed::start(wiring);
    bed.drive("driver");
    let (d, truth) = (bed.dir.path(), &bed.truth);

    // What the driver sent, and what llama.cpp did for each request that
    // reached the assistant.
    let mut phase: BTreeMap<String, String> = BTreeMap::new();
    let mut call: HashMap<String, serde_json::Value> = HashMap::new();
    let mut hog_busy = None;
    for v in read_jsonl(truth) {
        if v["phase"] == "hog" && v["busy"].is_number() {
            hog_busy = v["busy"].as_f64();
            continue;
        }
        let id = v["trace_id"].as_str().unwrap().to_string();
        if let Some(ph) = v["phase"].as_str() {
            phase.insert(id, ph.to_string());
        } else {
            call.insert(id, v);
        }
    }
    let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    let median = |mut xs: Vec<f64>| {
        xs.sort_by(f64::total_cmp);
        xs[xs.len() / 2]
    };
    let usual: Vec<&serde_json::Value> = phase
        .iter()
        .filter(|(_, p)| *p == "warmup")
        .filter_map(|(id, _)| call.get(id))
        .collect();
    assert!(
        usual.len() >= 20,
        "the warm-up reached llama.cpp: {}",
        usual.len()
    );
    let usual_prompt = median(usual.iter().map(|v| f(v, "prompt_tokens")).collect());
    let usual_compute = median(
        usual
            .iter()
            .map(|v| f(v, "prompt_ms") + f(v, "predicted_ms"))
            .collect(),
    );
    // The hog's effect on the host, as /proc/stat counted it.
    let busy = hog_busy.expect("the hog's /proc/stat share");
    assert!(busy >= 0.9, "the CPU hog kept the host {busy:.2} busy");

    let mut label: BTreeMap<String, String> = BTreeMap::new();
    for (id, ph) in &phase {
        if ph == "warmup" {
            continue;
        }
        let Some(c) = call.get(id) else {
            // Never reached the assistant: the gateway's limit turned it away.
            assert_eq!(
                ph, "limited",
                "{id}: a {ph} request never reached the assistant"
            );
            label.insert(id.clone(), "rate_limited".into());
            continue;
        };
        let (call_ms, ttft, prompt_ms) = (f(c, "call_ms"), f(c, "ttft_ms"), f(c, "prompt_ms"));
        let (prompt, cached) = (f(c, "prompt_tokens"), f(c, "cache_n"));
        let wait = ttft - prompt_ms;
        let l = if call_ms >= bed.timeout_ms {
            "upstream_timeout"
        } else if ph == "hog" {
            if f(c, "prompt_ms") + f(c, "predicted_ms") >= 2.0 * usual_compute {
                "host_cpu_saturation"
            } else {
                "unjudged"
            }
        } else if wait >= 100.0 && wait >= 0.3 * call_ms {
            "inference_queueing"
        } else if prompt >= 4.0 * usual_prompt && prompt_ms >= 0.5 * call_ms {
            "long_prompt"
        } else if cached < 0.5 * prompt && prompt_ms >= 100.0 && prompt_ms >= 0.5 * call_ms {
            "cache_miss_fallback"
        } else if cached < 0.5 * prompt {
            // llama.cpp's cache did miss, too briefly to make the call
            // slow by the rule above: not a clean healthy example either.
            "unjudged"
        } else if ph == "healthy" || ph == "limited" {
            "healthy"
        } else {
            // A burst request that found a free slot, say: nothing happened to it.
            "unjudged"
        };
        if l != "unjudged" {
            label.insert(id.clone(), l.to_string());
        }
    }
    // The mechanisms did what they are for, by their own measure.
    let count = |c: &str| label.values().filter(|l| *l == c).count();
    for (cause, phase_name) in [
        ("long_prompt", "long"),
        ("cache_miss_fallback", "miss"),
        ("upstream_timeout", "timeout"),
        ("rate_limited", "limited"),
    ] {
        let sent = phase.values().filter(|p| *p == phase_name).count();
        assert!(
            count(cause) * 10 >= sent * 8,
            "{cause}: {} of {sent} {phase_name} requests ({label:?})",
            count(cause)
        );
    }

    let traces = d.join("traces.jsonl");
    let sent = read_jsonl(truth)
        .iter()
        .filter_map(|v| v["trace_id"].as_str().map(str::to_string))
        .collect::<std::collections::HashSet<_>>()
        .len();
    let (label, got) = testbed::judged(wiring, &bed.daemon, &traces, label, sent);
    let culprit_of = |cause: &str, _: &str| -> (String, &'static str) {
        match cause {
            // The model server whose slots were full, whose cache missed.
            "inference_queueing" | "cache_miss_fallback" => ("llama-server".into(), "dependency"),
            // The service that sent the prompt.
            "long_prompt" => ("assistant".into(), "service"),
            "host_cpu_saturation" => ("assistant".into(), "host"),
            "upstream_timeout" => ("assistant".into(), "callee"),
            "rate_limited" => ("nginx-gateway".into(), "limiter"),
            other => panic!("no culprit for {other}"),
        }
    };
    let score = testbed::score(&label, &got, &culprit_of, &traces);
    score.assert_bounds_for(
        wiring,
        &[
            "long_prompt",
            "cache_miss_fallback",
            "inference_queueing",
            "host_cpu_saturation",
            "rate_limited",
            "upstream_timeout",
        ],
        5,
    );
}

/// A pulse of long contexts on the route opens one incident, explained by
/// `long_prompt` in the assistant, whose strongest discriminator is the
/// prompt-size bucket and whose "what moved" names llama.cpp's own levels,
/// and which resolves once the pulse is over (default incident settings).
#[test]
fn a_pulse_of_long_contexts_opens_one_incident_explained_by_the_prompt_size() {
    let _one = common::alone();
    let bed = Bed::start(Wiring::KeepAll);
    let d = bed.dir.path();
    let mut driver = (bed.run)("pulse");
    let logs = d.join("logs.jsonl");
    let on_route = || -> Vec<BTreeMap<String, serde_json::Value>> {
        incident_records(&logs)
            .into_iter()
            .filter(|r| r["incident.route"] == "assist")
            .collect()
    };
    wait_for_or(
        Duration::from_secs(300),
        "the route's incident opened and resolved",
        || on_route().iter().any(|r| r["incident.state"] == "resolved"),
        || format!("{:?}", on_route()),
    );
    std::fs::write(d.join("stop"), "").unwrap();
    testbed::wait_driver(&mut driver, d);

    let records = on_route();
    let ids: std::collections::BTreeSet<&str> = records
        .iter()
        .map(|r| r["incident.id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 1, "one incident on the route: {records:?}");
    // Its explanation, as its last record before it resolved says it.
    let resolved = records
        .iter()
        .position(|r| r["incident.state"] == "resolved")
        .unwrap();
    assert!(resolved >= 1, "{records:?}");
    let e = &records[resolved - 1];
    let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
    assert_eq!(s("incident.cause"), "long_prompt", "{e:?}");
    assert_eq!(s("incident.culprit.at_service"), "assistant", "{e:?}");
    assert!(e["incident.cause_share"].as_f64().unwrap() >= 0.8, "{e:?}");
    let disc: serde_json::Value = serde_json::from_str(&s("incident.discriminators")).unwrap();
    assert_eq!(disc[0]["attribute"], "gen_ai.usage.input_tokens", "{disc}");
    assert_eq!(disc[0]["value"], "8192-16383", "{disc}");
    assert!(
        disc[0]["share_in"].as_f64().unwrap() >= 0.8
            && disc[0]["share_out"].as_f64().unwrap() < 0.05,
        "{disc}"
    );
    let moved: serde_json::Value = serde_json::from_str(&s("incident.moved")).unwrap();
    eprintln!("moved: {moved}");
    // What moved includes llama.cpp's own prompt work: its cached share
    // fell or the uncached prompt tokens it processed per request grew
    // (the host's CPU may move with it: a long prefill keeps a core busy).
    let moved = moved.as_array().unwrap();
    let level = |name: &str| {
        moved
            .iter()
            .find(|m| m["series"].as_str().unwrap().ends_with(name))
            .map(|m| (m["before"].as_f64().unwrap(), m["during"].as_f64().unwrap()))
    };
    let cached_fell = level(" prompt_cached_ratio").is_some_and(|(b, d)| d < b);
    let uncached_grew = level(" prompt_tokens_processed").is_some_and(|(b, d)| d > 10.0 * b);
    assert!(cached_fell || uncached_grew, "{moved:?}");
    let summary = s("incident.summary");
    assert!(summary.contains("long_prompt in assistant"), "{summary}");
    assert!(
        summary.contains(
            "of the slow or failed requests come from gen_ai.usage.input_tokens=8192-16383"
        ),
        "{summary}"
    );
    // The exemplars are the pulse's long contexts, by llama.cpp's own count.
    let mut phase: HashMap<String, String> = HashMap::new();
    let mut prompt: HashMap<String, f64> = HashMap::new();
    for v in read_jsonl(&bed.truth) {
        let id = v["trace_id"].as_str().unwrap_or_default().to_string();
        if let Some(p) = v["phase"].as_str() {
            phase.insert(id, p.to_string());
        } else if let Some(t) = v["prompt_tokens"].as_f64() {
            prompt.insert(id, t);
        }
    }
    for t in s("incident.exemplars").split(',') {
        assert_eq!(
            phase.get(t).map(String::as_str),
            Some("pulse-long"),
            "exemplar {t}"
        );
        assert!(
            prompt[t] >= 8192.0,
            "exemplar {t}: {} prompt tokens",
            prompt[t]
        );
    }
}

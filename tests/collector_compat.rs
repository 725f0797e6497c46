//! A Collector user's configs and deployment habits, against the real binary:
//! a dozen representative Collector configs either validate or fail naming
//! the unsupported key and what to use instead; a stock gateway config with
//! `memory_limiter`, `batch` (`send_batch_max_size`), the `health_check`,
//! `zpages`, `pprof` and `bearertokenauth` extensions runs as it does under
//! the Collector.

mod common;

use common::{free_port, http_get, wait_for, Daemon};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// The `# expect:` lines of a config: `valid`, or `error <path>: <text>` each.
fn expectations(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# expect: "))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_representative_collector_config_validates_or_names_what_to_use_instead() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/collector_configs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("tests/collector_configs")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 12, "a dozen configs, found {}", files.len());
    let mut valid = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).expect("read");
        let expect = expectations(&text);
        assert!(!expect.is_empty(), "{}: no `# expect:` line", f.display());
        let out = Command::new(common::BIN)
            .args(["validate", "--config", &f.display().to_string()])
            .env("MY_POD_IP", "127.0.0.1")
            .env("API_TOKEN", "t")
            .output()
            .expect("run validate");
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        let name = f
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if expect == ["valid"] {
            assert!(out.status.success(), "{name} should validate:\n{said}");
            valid += 1;
            continue;
        }
        assert!(!out.status.success(), "{name} should fail:\n{said}");
        let errors: Vec<&str> = said.lines().filter(|l| l.starts_with("  - ")).collect();
        assert_eq!(errors.len(), expect.len(), "{name}: errors\n{said}");
        for e in &expect {
            let (path, text) = e
                .strip_prefix("error ")
                .and_then(|e| e.split_once(": "))
                .unwrap_or_else(|| panic!("{name}: bad expectation {e:?}"));
            assert!(
                errors
                    .iter()
                    .any(|l| l.contains(&format!(" {path}: ")) && l.contains(text)),
                "{name}: no error at {path} saying {text:?}:\n{said}"
            );
        }
    }
    assert!(
        valid >= 5,
        "at least five of them are configs causeway runs as they are"
    );
}

/// What the Collector's own `validate` (the real binary, built from the
/// Collector's and contrib's modules by scripts/peers.sh) says of each
/// config in tests/collector_configs: `None` it accepts it, `Some(text)` it
/// refuses it with an error containing `text`.
const COLLECTOR_SAYS: &[(&str, Option<&str>)] = &[
    ("bearer-token-auth.yaml", None),
    // The Collector removed the `logging` exporter (v0.111): both refuse it.
    ("debug-exporters.yaml", Some("logging")),
    ("filelog.yaml", None),
    ("gateway-tail-sampling.yaml", None),
    ("hostmetrics-remote-write.yaml", None),
    ("k8s-enrichment.yaml", None),
    ("kafka-buffer.yaml", None),
    ("kafkametrics.yaml", None),
    ("loadbalancing-tier1.yaml", None),
    ("otlphttp-backends.yaml", None),
    // Without `--feature-gates=service.profilesSupport` (docs/collector.md).
    ("profiles-pipeline.yaml", Some("service.profilesSupport")),
    ("sidecar-agent.yaml", None),
    ("spanmetrics.yaml", None),
    ("tail-sampling-readme.yaml", None),
];

/// The Collector as the compatibility oracle: every config in
/// tests/collector_configs goes to both `validate`s. Where both accept it,
/// causeway runs it as the Collector would; where causeway refuses what the
/// Collector accepts, each refused component or key is named in
/// docs/collector.md ("Coming from the OpenTelemetry Collector").
#[test]
fn the_collectors_own_validate_agrees_or_the_difference_is_documented() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/collector_configs");
    let coming = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/collector.md"),
    )
    .expect("docs/collector.md");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("configs")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    files.sort();
    let listed: Vec<&str> = COLLECTOR_SAYS.iter().map(|(f, _)| *f).collect();
    assert_eq!(
        files, listed,
        "every config has the Collector's verdict stated"
    );
    let mut both_accept = 0;
    for (name, says) in COLLECTOR_SAYS {
        let path = dir.join(name);
        let tmp = tempfile::tempdir().expect("tempdir");
        // The Collector resolves ${env:...} too: the same environment for both.
        let out = Command::new(common::peers::otelcol_bin())
            .args(["validate", "--config", &path.display().to_string()])
            .env("MY_POD_IP", "127.0.0.1")
            .env("API_TOKEN", "t")
            .current_dir(tmp.path())
            .output()
            .expect("run otelcol validate");
        let said = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        match says {
            None => assert!(
                out.status.success(),
                "the Collector should accept {name}:\n{said}"
            ),
            Some(text) => {
                assert!(!out.status.success(), "the Collector should refuse {name}");
                assert!(
                    said.contains(text),
                    "{name}: the Collector's error lacks {text:?}:\n{said}"
                );
            }
        }
        let text = std::fs::read_to_string(&path).expect("read");
        let expect = expectations(&text);
        if expect == ["valid"] {
            if says.is_none() {
                both_accept += 1;
            }
            continue;
        }
        if says.is_some() {
            continue; // both refuse
        }
        for e in &expect {
            let (path, text) = e
                .strip_prefix("error ")
                .and_then(|e| e.split_once(": "))
                .unwrap_or_else(|| panic!("{name}: bad expectation {e:?}"));
            let last = path.rsplit('.').next().unwrap_or(path);
            let last = last.split('[').next().unwrap_or(last);
            // `...policies[11].type`: the refused thing is the value, named in the text.
            let word = if last == "type" {
                text.split('`').nth(1).unwrap_or(last)
            } else {
                last
            };
            assert!(
                coming.contains(&format!("`{word}`")),
                "{name}: causeway refuses `{word}` ({path}), which the Collector accepts, and docs/collector.md does not name it"
            );
        }
    }
    assert!(both_accept >= 5, "{both_accept} configs accepted by both");
}

/// One OTLP request of `spans`, encoded.
fn request(spans: Vec<Span>) -> Vec<u8> {
    causeway_core::model::traces_request(spans).to_vec()
}

fn spans(n: usize, first: usize) -> Vec<u8> {
    request(
        (first..first + n)
            .map(|i| Span {
                trace_id: (i as u128 + 1).to_be_bytes().to_vec(),
                span_id: (i as u64 + 1).to_be_bytes().to_vec(),
                name: format!("op-{i}"),
                start_time_unix_nano: 1,
                end_time_unix_nano: 2,
                ..Default::default()
            })
            .collect(),
    )
}

/// What the backend got: (Authorization header, spans) per request.
type Got = Arc<Mutex<Vec<(String, usize)>>>;

fn backend() -> (String, Got) {
    let got: Got = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                let auth = headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_string();
                let body = if headers.get("content-encoding").is_some_and(|v| v == "gzip") {
                    let mut out = Vec::new();
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(&body[..]),
                        &mut out,
                    )
                    .expect("gzip");
                    out
                } else {
                    body.to_vec()
                };
                let n = ExportTraceServiceRequest::decode(body.as_slice())
                    .map(|r| {
                        r.resource_spans
                            .iter()
                            .flat_map(|rs| &rs.scope_spans)
                            .map(|ss| ss.spans.len())
                            .sum()
                    })
                    .unwrap_or(0);
                g.lock().expect("lock").push((auth, n));
                axum::http::StatusCode::OK
            },
        ),
    );
    (common::serve_in_thread(app), got)
}

#[test]
fn a_stock_collector_gateway_runs_with_its_extensions_limiter_and_bearer_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token = dir.path().join("token");
    std::fs::write(&token, "tok-1\n").expect("token");
    let (sink, got) = backend();
    let (hc, zp, pp, http) = (free_port(), free_port(), free_port(), free_port());
    let config = format!(
        r#"
extensions:
  health_check:
    endpoint: 127.0.0.1:{hc}
    path: /health/status
  zpages:
    endpoint: 127.0.0.1:{zp}
  pprof:
    endpoint: 127.0.0.1:{pp}
  bearertokenauth:
    filename: {token}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{http}
processors:
  memory_limiter:
    check_interval: 1s
    limit_mib: 512
    spike_limit_mib: 128
  batch:
    send_batch_size: 100
    send_batch_max_size: 100
    timeout: 200ms
exporters:
  otlphttp:
    traces_endpoint: {sink}/v1/traces
    auth:
      authenticator: bearertokenauth
service:
  extensions: [health_check, zpages, pprof, bearertokenauth]
  telemetry:
    metrics:
      address: "{{telemetry}}"
  pipelines:
    traces:
      receivers: [otlp]
      processors: [memory_limiter, batch]
      exporters: [otlphttp]
"#,
        token = token.display()
    );
    let d = Daemon::start(dir.path(), "gateway", &config);
    let hc_addr = format!("127.0.0.1:{hc}");

    // health_check: the Collector's JSON, 200 once the pipelines run.
    let (code, body) = http_get(&hc_addr, "/health/status").expect("health check answers");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(v["status"], "Server available");
    assert!(
        v["upSince"].as_str().is_some_and(|s| s.ends_with('Z')),
        "{v}"
    );

    // The memory_limiter processor is the daemon's admission limiter.
    let err = d.stderr("gateway");
    assert!(
        err.contains("Memory limiter on") && err.contains("limit=536870912"),
        "{err}"
    );

    // 250 spans in one request leave in batches of at most 100, each with the token.
    let client = common::http_client();
    let post = |body: Vec<u8>| {
        let r = client
            .post(format!("http://127.0.0.1:{http}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .body(body)
            .send()
            .expect("post");
        let st = r.status();
        assert!(
            st.is_success(),
            "{} {} {}",
            st,
            r.text().unwrap_or_default(),
            d.stderr("gateway")
        );
    };
    post(spans(250, 0));
    let total = |g: &Got| g.lock().expect("lock").iter().map(|x| x.1).sum::<usize>();
    wait_for(Duration::from_secs(20), "250 spans at the backend", || {
        let n = total(&got);
        if n < 250 && d.stderr("gateway").contains("ERROR") {
            panic!("{}", d.stderr("gateway"));
        }
        n >= 250
    });
    {
        let g = got.lock().expect("lock");
        assert!(
            g.iter().all(|(_, n)| *n <= 100),
            "a batch over send_batch_max_size: {g:?}"
        );
        assert!(g.iter().all(|(a, _)| a == "Bearer tok-1"), "{g:?}");
    }

    // The token file is rotated: later requests carry the new token.
    std::fs::write(&token, "tok-2\n").expect("rotate");
    std::fs::File::options()
        .write(true)
        .open(&token)
        .and_then(|f| f.set_modified(SystemTime::now() + Duration::from_secs(10)))
        .expect("mtime");
    let mut i = 250;
    wait_for(
        Duration::from_secs(20),
        "a request with the rotated token",
        || {
            post(spans(1, i));
            i += 1;
            std::thread::sleep(Duration::from_millis(200));
            got.lock()
                .expect("lock")
                .iter()
                .any(|(a, _)| a == "Bearer tok-2")
        },
    );

    // zpages: the pipeline with its components and live counts.
    let (code, page) = http_get(&format!("127.0.0.1:{zp}"), "/debug/pipelinez").expect("zpages");
    assert_eq!(code, 200);
    for part in [
        "Pipeline traces",
        "memory_limiter",
        "batch",
        "otlphttp",
        "receiver_accepted_items: ",
    ] {
        assert!(page.contains(part), "{part} missing:\n{page}");
    }
    // pprof: a clear answer, not a Go profile.
    let (code, text) =
        http_get(&format!("127.0.0.1:{pp}"), "/debug/pprof/profile?seconds=5").expect("pprof");
    assert_eq!(code, 501);
    assert!(text.contains("perf record"), "{text}");

    let status = d.terminate();
    assert!(status.success(), "{status}");
    assert!(
        http_get(&hc_addr, "/health/status").is_none(),
        "health check still up after exit"
    );
}

#[test]
fn an_exporter_naming_a_missing_or_wrong_authenticator_is_refused_at_validate() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("c.yaml");
    std::fs::write(
        &path,
        r#"
extensions:
  zpages:
receivers:
  otlp:
    protocols:
      grpc:
exporters:
  otlp:
    endpoint: backend:4317
    auth:
      authenticator: bearertokenauth
  loadbalancing:
    protocol:
      otlp:
        auth:
          authenticator: zpages
    resolver:
      static:
        hostnames: [a:4317]
service:
  extensions: [zpages]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlp, loadbalancing]
"#,
    )
    .expect("write");
    let out = Command::new(common::BIN)
        .args(["validate", "--config", &path.display().to_string()])
        .output()
        .expect("run");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(said.contains("exporters.otlp.auth.authenticator: \"bearertokenauth\" is not an extension listed in service.extensions"), "{said}");
    assert!(said.contains("exporters.loadbalancing.protocol.otlp.auth.authenticator: extension \"zpages\" is not an authenticator"), "{said}");
}

/// The sum of every series of `name` (any suffix, any labels) whose labels
/// contain `with`, on a Prometheus text page.
fn scraped(addr: &str, name: &str, with: &str) -> f64 {
    http_get(addr, "/metrics")
        .map(|(_, body)| {
            body.lines()
                .filter(|l| l.starts_with(name) && l.contains(with))
                .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
                .sum()
        })
        .unwrap_or(0.0)
}

/// Trace ids (hex) each policy's backend received over OTLP/HTTP
/// (`/<policy>/v1/traces`).
type Kept = Arc<Mutex<BTreeMap<String, BTreeSet<String>>>>;

fn policy_sinks() -> (String, Kept) {
    let got: Kept = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/{policy}/v1/traces",
        axum::routing::post(
            move |axum::extract::Path(policy): axum::extract::Path<String>,
                  body: axum::body::Bytes| async move {
                let req = ExportTraceServiceRequest::decode(&body[..]).expect("OTLP");
                let mut g = g.lock().expect("lock");
                let set = g.entry(policy).or_default();
                for s in req
                    .resource_spans
                    .iter()
                    .flat_map(|rs| &rs.scope_spans)
                    .flat_map(|ss| &ss.spans)
                {
                    set.insert(hex::encode(&s.trace_id));
                }
                axum::http::StatusCode::OK
            },
        ),
    );
    (common::serve_in_thread(app), got)
}

/// Each shared policy type with settings that decide some traces each way,
/// as `(name, policies)`: one `tail_sampling` processor each, in the
/// Collector's own keys.
const POLICIES: &[(&str, &str)] = &[
    ("always", "{name: all, type: always_sample}"),
    ("latency", "{name: slow, type: latency, latency: {threshold_ms: 1000}}"),
    ("latency-band", "{name: band, type: latency, latency: {threshold_ms: 500, upper_threshold_ms: 1500}}"),
    ("status", "{name: errors, type: status_code, status_code: {status_codes: [ERROR]}}"),
    ("status-ok", "{name: fine, type: status_code, status_code: {status_codes: [OK, UNSET]}}"),
    ("string", "{name: envs, type: string_attribute, string_attribute: {key: env, values: [prod, canary-eu]}}"),
    ("string-regex", "{name: re, type: string_attribute, string_attribute: {key: env, values: ['can', '^stag'], enabled_regex_matching: true}}"),
    ("string-invert", "{name: not-test, type: string_attribute, string_attribute: {key: env, values: [test], invert_match: true}}"),
    ("resource-string", "{name: gold, type: string_attribute, string_attribute: {key: tier, values: [gold]}}"),
    ("numeric", "{name: retried, type: numeric_attribute, numeric_attribute: {key: retries, min_value: 3, max_value: 7}}"),
    ("numeric-invert", "{name: few, type: numeric_attribute, numeric_attribute: {key: retries, min_value: 5, max_value: 100, invert_match: true}}"),
    ("boolean", "{name: cached, type: boolean_attribute, boolean_attribute: {key: cached, value: true}}"),
    ("trace-state", "{name: rojo, type: trace_state, trace_state: {key: rojo, values: [00f067aa0ba902b7]}}"),
    ("probabilistic", "{name: ten, type: probabilistic, probabilistic: {sampling_percentage: 10}}"),
    ("probabilistic-salt", "{name: quarter, type: probabilistic, probabilistic: {sampling_percentage: 25, hash_salt: s1}}"),
    ("span-count", "{name: mid, type: span_count, span_count: {min_spans: 2, max_spans: 3}}"),
    ("rate-limiting", "{name: budget, type: rate_limiting, rate_limiting: {spans_per_second: 100000000}}"),
    ("and", "{name: slow-errors, type: and, and: {and_sub_policy: [{name: s, type: latency, latency: {threshold_ms: 1000}}, {name: e, type: status_code, status_code: {status_codes: [ERROR]}}]}}"),
    ("drop", "{name: no-test, type: drop, drop: {drop_sub_policy: [{name: t, type: string_attribute, string_attribute: {key: env, values: [test]}}]}}\n      - {name: all, type: always_sample}"),
    ("composite", "{name: c, type: composite, composite: {max_total_spans_per_second: 100000000, policy_order: [errors, slow], composite_sub_policy: [{name: errors, type: status_code, status_code: {status_codes: [ERROR]}}, {name: slow, type: latency, latency: {threshold_ms: 2000}}], rate_allocation: [{policy: errors, percent: 50}]}}"),
    ("invert-and-latency", "{name: not-test, type: string_attribute, string_attribute: {key: env, values: [test], invert_match: true}}\n      - {name: slow, type: latency, latency: {threshold_ms: 1000}}"),
];

/// The same traces, in the same requests, through the real Collector's
/// `tail_sampling` (v0.140.1) and causeway's, one processor per entry of
/// [`POLICIES`] in one pipeline each: every processor keeps the same set
/// under both. Traces are made to exercise every policy (durations,
/// statuses, span and resource attributes, tracestate, span counts, random
/// ids); each trace's first span is its root, which covers it, so that the
/// Collector's latency (read span by span) sees the whole duration first.
/// Each side is read once it has decided every trace of every processor.
#[test]
fn every_shared_policy_keeps_the_same_traces_as_the_collector() {
    const TRACES: usize = 2000;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = causeway_scenarios::Rng::new(7);
    let requests: Vec<Vec<u8>> = {
        let mut all = Vec::new();
        for _ in 0..TRACES {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&rng.next_u64().to_be_bytes());
            id[8..].copy_from_slice(&rng.next_u64().to_be_bytes());
            let start = 1_700_000_000_000_000_000u64 + rng.range(0, 1_000_000 - 1) * 1_000;
            let dur_ms = 1 + rng.range(0, 3000 - 1);
            let n = 1 + rng.range(0, 4 - 1) as usize;
            let mut spans = Vec::new();
            for i in 0..n {
                let mut attrs = Vec::new();
                let mut kv = |k: &str, v: any_value::Value| {
                    attrs.push(KeyValue {
                        key: k.into(),
                        value: Some(AnyValue { value: Some(v) }),
                        ..Default::default()
                    })
                };
                if rng.range(0, 2 - 1) == 0 {
                    let env = ["prod", "test", "staging", "canary-eu", "pre-staging"];
                    kv(
                        "env",
                        any_value::Value::StringValue(env[rng.range(0, 5 - 1) as usize].into()),
                    );
                }
                if rng.range(0, 3 - 1) == 0 {
                    kv(
                        "retries",
                        any_value::Value::IntValue(rng.range(0, 12 - 1) as i64),
                    );
                }
                if rng.range(0, 3 - 1) == 0 {
                    kv(
                        "cached",
                        any_value::Value::BoolValue(rng.range(0, 2 - 1) == 0),
                    );
                }
                let trace_state = match rng.range(0, 6 - 1) {
                    0 => "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE",
                    1 => "congo=t61rcWkgMzE",
                    2 => "rojo=ffffffffffffffff",
                    _ => "",
                };
                let code = [0, 0, 1, 2][rng.range(0, 4 - 1) as usize];
                // The root covers the trace; children sit inside it.
                let (s, e) = if i == 0 {
                    (start, start + dur_ms * 1_000_000)
                } else {
                    let s = start + rng.range(0, dur_ms - 1) * 1_000_000 / 2;
                    (s, s + 1_000_000)
                };
                spans.push(Span {
                    trace_id: id.to_vec(),
                    span_id: (rng.next_u64() | 1).to_be_bytes().to_vec(),
                    parent_span_id: if i == 0 {
                        Vec::new()
                    } else {
                        spans_root(&spans)
                    },
                    name: format!("op-{i}"),
                    start_time_unix_nano: s,
                    end_time_unix_nano: e,
                    attributes: attrs,
                    trace_state: trace_state.into(),
                    status: Some(Status {
                        code,
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            let tier = if rng.range(0, 4 - 1) == 0 {
                "gold"
            } else {
                "silver"
            };
            all.push(ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![KeyValue {
                        key: "tier".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(tier.into())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            });
        }
        all.chunks(200)
            .map(|c| {
                ExportTraceServiceRequest {
                    resource_spans: c.to_vec(),
                }
                .encode_to_vec()
            })
            .collect()
    };
    let send = |http: u16| {
        let client = common::http_client();
        for body in &requests {
            let r = client
                .post(format!("http://127.0.0.1:{http}/v1/traces"))
                .header("content-type", "application/x-protobuf")
                .body(body.clone())
                .send()
                .expect("post");
            let st = r.status();
            assert!(st.is_success(), "{} {}", st, r.text().unwrap_or_default());
        }
    };
    // One pipeline per policy entry; `extra` goes into each tail_sampling.
    let pipeline = |http: u16, sink: &str, extra: &str| {
        let mut processors = String::new();
        let mut exporters = String::new();
        let mut pipelines = String::new();
        for (name, policies) in POLICIES {
            processors += &format!(
                "  tail_sampling/{name}:\n    decision_wait: 1s\n{extra}    policies:\n      - {policies}\n"
            );
            exporters += &format!(
                "  otlphttp/{name}:\n    traces_endpoint: {sink}/{name}/v1/traces\n    compression: none\n"
            );
            pipelines += &format!(
                "    traces/{name}: {{receivers: [otlp], processors: [tail_sampling/{name}, batch], exporters: [otlphttp/{name}]}}\n"
            );
        }
        (
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{http}\nprocessors:\n  batch:\n{processors}exporters:\n{exporters}"
            ),
            pipelines,
        )
    };
    let decisions = (TRACES * POLICIES.len()) as f64;

    // The Collector.
    let (sink, collector_kept) = policy_sinks();
    let (http, tel) = (free_port(), free_port());
    let (head, pipelines) = pipeline(http, &sink, "");
    let config = head
        + &format!(
            "service:\n  telemetry:\n    metrics:\n      level: detailed\n      readers:\n        - pull:\n            exporter:\n              prometheus:\n                host: 127.0.0.1\n                port: {tel}\n  pipelines:\n{pipelines}"
        );
    let c = common::peers::Collector::start(dir.path(), "otelcol-policies", &config, &[http, tel]);
    send(http);
    let tel_addr = format!("127.0.0.1:{tel}");
    let global = "otelcol_processor_tail_sampling_global_count_traces_sampled";
    wait_for(
        Duration::from_secs(180),
        "the Collector deciding every trace in every processor",
        || scraped(&tel_addr, global, "sampled=") >= decisions,
    );
    let kept = scraped(&tel_addr, global, "sampled=\"true\"") as usize;
    let total = |k: &Kept| {
        k.lock()
            .expect("lock")
            .values()
            .map(BTreeSet::len)
            .sum::<usize>()
    };
    wait_for(
        Duration::from_secs(60),
        "the Collector's kept traces at the sinks",
        || total(&collector_kept) >= kept,
    );
    c.terminate();

    // causeway, on the same pipelines (its errors are kept only by policies here).
    let (sink, causeway_kept) = policy_sinks();
    let http = free_port();
    let (head, pipelines) = pipeline(http, &sink, "    always_keep_errors: false\n");
    let config = head
        + "service:\n  telemetry:\n    metrics:\n      address: \"{telemetry}\"\n  pipelines:\n"
        + &pipelines;
    let d = Daemon::start(dir.path(), "causeway-policies", &config);
    send(http);
    wait_for(
        Duration::from_secs(180),
        "causeway deciding every trace in every processor",
        || {
            scraped(
                &d.telemetry,
                "causeway_tail_sampling_traces_total",
                "component=",
            ) >= decisions
        },
    );
    assert!(d.terminate().success());

    let a = collector_kept.lock().expect("lock").clone();
    let b = causeway_kept.lock().expect("lock").clone();
    assert_eq!(total(&collector_kept), kept);
    let empty = BTreeSet::new();
    let mut differ = Vec::new();
    for (name, _) in POLICIES {
        let x = a.get(*name).unwrap_or(&empty);
        let y = b.get(*name).unwrap_or(&empty);
        // Every entry decides traces both ways, except the two that keep all.
        if !matches!(*name, "always" | "rate-limiting") {
            assert!(
                !x.is_empty() && x.len() < TRACES,
                "{name}: the Collector kept {} of {TRACES}: the traces do not exercise it",
                x.len()
            );
        } else {
            assert_eq!(x.len(), TRACES, "{name}");
        }
        if x != y {
            differ.push(format!(
                "{name}: the Collector kept {}, causeway {}, both {}; only the Collector {:?}; only causeway {:?}",
                x.len(),
                y.len(),
                x.intersection(y).count(),
                x.difference(y).take(3).collect::<Vec<_>>(),
                y.difference(x).take(3).collect::<Vec<_>>()
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The span id of a trace's root (its first span).
fn spans_root(spans: &[Span]) -> Vec<u8> {
    spans.first().map(|s| s.span_id.clone()).unwrap_or_default()
}

/// A forwarding hop sends zstd requests on as their senders compressed them:
/// no processor changed the spans, so the batch's body is the senders'
/// frames joined, byte for byte (zstd data is one or more frames, RFC 8878).
/// The Collector, behind causeway over gRPC, reads every span of the joined
/// frames; the in-test backend behind the Collector counts them.
#[test]
fn senders_zstd_frames_go_on_unchanged_and_the_collector_reads_every_span() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (sink, got) = backend();
    // What causeway sends over OTLP/HTTP, as received.
    let raw: Arc<Mutex<Vec<axum::body::Bytes>>> = Arc::default();
    let r = raw.clone();
    let recorder = common::serve_in_thread(axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| async move {
            r.lock().expect("lock").push(body);
            axum::http::StatusCode::OK
        }),
    ));
    let col_grpc = free_port();
    let _collector = common::peers::Collector::start(
        dir.path(),
        "otelcol",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: 127.0.0.1:{col_grpc}
exporters:
  otlphttp:
    traces_endpoint: {sink}/v1/traces
    compression: none
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [otlphttp]
"#
        ),
        &[col_grpc],
    );
    let http = free_port();
    let _d = Daemon::start(
        dir.path(),
        "forward",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{http}
processors:
  batch:
    send_batch_size: 300
    timeout: 30s
exporters:
  otlp/collector:
    endpoint: 127.0.0.1:{col_grpc}
    tls: {{ insecure: true }}
    compression: zstd
  otlphttp/raw:
    traces_endpoint: {recorder}/v1/traces
    compression: zstd
service:
  telemetry:
    metrics:
      address: "{{telemetry}}"
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [otlp/collector, otlphttp/raw]
"#
        ),
    );
    // Three requests of 100 spans, compressed as a sender would (a level
    // causeway does not use), make one batch of 300.
    let frames: Vec<Vec<u8>> = (0..3)
        .map(|i| zstd::bulk::compress(&spans(100, i * 100), 7).expect("zstd"))
        .collect();
    let client = common::http_client();
    for f in &frames {
        let r = client
            .post(format!("http://127.0.0.1:{http}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "zstd")
            .body(f.clone())
            .send()
            .expect("post");
        assert_eq!(r.status(), 200);
    }
    wait_for(Duration::from_secs(60), "the batch at the recorder", || {
        !raw.lock().expect("lock").is_empty()
    });
    let bodies = raw.lock().expect("lock").clone();
    assert_eq!(bodies.len(), 1, "one batch");
    assert_eq!(
        bodies[0].as_ref(),
        frames.concat().as_slice(),
        "the body is the senders' frames, joined"
    );
    wait_for(
        Duration::from_secs(60),
        "300 spans through the Collector",
        || {
            got.lock()
                .expect("lock")
                .iter()
                .map(|(_, n)| n)
                .sum::<usize>()
                >= 300
        },
    );
    let total: usize = got.lock().expect("lock").iter().map(|(_, n)| n).sum();
    assert_eq!(
        total, 300,
        "the Collector read every span of the joined frames"
    );
}

//! A Collector user's configs and deployment habits, against the real binary:
//! a dozen representative Collector configs either validate or fail naming
//! the unsupported key and what to use instead; a stock gateway config with
//! `memory_limiter`, `batch` (`send_batch_max_size`), the `health_check`,
//! `zpages`, `pprof` and `bearertokenauth` extensions runs as it does under
//! the Collector.

mod common;

use common::{free_port, http_get, wait_for, Daemon};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;
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
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
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
        assert!(r.status().is_success(), "{}", r.status());
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

/// Trace ids (hex) a backend received over OTLP/HTTP.
type Ids = Arc<Mutex<std::collections::BTreeSet<String>>>;

fn trace_sink() -> (String, Ids) {
    let got: Ids = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| async move {
                let mut raw = Vec::new();
                if headers.get("content-encoding").is_some_and(|v| v == "gzip") {
                    std::io::Read::read_to_end(
                        &mut flate2::read::GzDecoder::new(&body[..]),
                        &mut raw,
                    )
                    .expect("gzip");
                } else {
                    raw = body.to_vec();
                }
                let req = ExportTraceServiceRequest::decode(raw.as_slice()).expect("OTLP");
                let mut g = g.lock().expect("lock");
                for s in req
                    .resource_spans
                    .iter()
                    .flat_map(|rs| &rs.scope_spans)
                    .flat_map(|ss| &ss.spans)
                {
                    g.insert(hex::encode(&s.trace_id));
                }
                axum::http::StatusCode::OK
            },
        ),
    );
    (common::serve_in_thread(app), got)
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

/// The Collector as the oracle of a shared policy: the same 3,000 traces
/// through the real Collector's `tail_sampling` and through causeway's,
/// with `probabilistic {sampling_percentage: 10}` and no salt, keep the
/// same set. (They shared no more than chance before: the Collector hashes
/// an empty `hash_salt` as `default-hash-seed`.) Each side is read once it
/// has decided every trace, by its own count of decisions.
#[test]
fn probabilistic_sampling_keeps_the_same_traces_as_the_collector() {
    const TRACES: usize = 3000;
    let dir = tempfile::tempdir().expect("tempdir");
    let pipeline = |http: u16, sink: &str| {
        format!(
            r#"receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{http}
processors:
  tail_sampling:
    decision_wait: 1s
    policies:
      - name: ten-percent
        type: probabilistic
        probabilistic: {{sampling_percentage: 10}}
exporters:
  otlphttp:
    traces_endpoint: {sink}/v1/traces
    compression: none
"#
        )
    };
    // Trace ids as SDKs make them: random (ids that differ only in their
    // last bytes hash alike under FNV-1a's top bits, and are all kept or
    // all dropped by both).
    let ids: Vec<[u8; 16]> = {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            // splitmix64
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        (0..TRACES)
            .map(|_| {
                let mut id = [0u8; 16];
                id[..8].copy_from_slice(&next().to_be_bytes());
                id[8..].copy_from_slice(&next().to_be_bytes());
                id
            })
            .collect()
    };
    let batch = |chunk: &[[u8; 16]]| {
        request(
            chunk
                .iter()
                .map(|id| Span {
                    trace_id: id.to_vec(),
                    span_id: id[..8].to_vec(),
                    name: "op".into(),
                    start_time_unix_nano: 1,
                    end_time_unix_nano: 2,
                    ..Default::default()
                })
                .collect(),
        )
    };
    let send = |http: u16| {
        let client = common::http_client();
        for chunk in ids.chunks(500) {
            let r = client
                .post(format!("http://127.0.0.1:{http}/v1/traces"))
                .header("content-type", "application/x-protobuf")
                .body(batch(chunk))
                .send()
                .expect("post");
            assert!(r.status().is_success(), "{}", r.status());
        }
    };

    // The Collector.
    let (sink, collector_kept) = trace_sink();
    let (http, tel) = (free_port(), free_port());
    let config = pipeline(http, &sink)
        + &format!(
            r#"service:
  telemetry:
    metrics:
      level: detailed
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: {tel}
  pipelines:
    traces: {{receivers: [otlp], processors: [tail_sampling], exporters: [otlphttp]}}
"#
        );
    let c =
        common::peers::Collector::start(dir.path(), "otelcol-probabilistic", &config, &[http, tel]);
    send(http);
    let tel_addr = format!("127.0.0.1:{tel}");
    let global = "otelcol_processor_tail_sampling_global_count_traces_sampled";
    wait_for(
        Duration::from_secs(120),
        "the Collector deciding every trace",
        || scraped(&tel_addr, global, "sampled=") >= TRACES as f64,
    );
    let kept = scraped(&tel_addr, global, "sampled=\"true\"") as usize;
    wait_for(
        Duration::from_secs(60),
        "the Collector's kept traces at the sink",
        || collector_kept.lock().expect("lock").len() >= kept,
    );
    c.terminate();

    // causeway, on the same pipeline.
    let (sink, causeway_kept) = trace_sink();
    let http = free_port();
    let config = pipeline(http, &sink)
        + r#"service:
  telemetry:
    metrics:
      address: "{telemetry}"
  pipelines:
    traces: {receivers: [otlp], processors: [tail_sampling], exporters: [otlphttp]}
"#;
    let d = Daemon::start(dir.path(), "causeway-probabilistic", &config);
    send(http);
    wait_for(
        Duration::from_secs(120),
        "causeway deciding every trace",
        || {
            scraped(
                &d.telemetry,
                "causeway_tail_sampling_traces_total",
                "component=",
            ) >= TRACES as f64
        },
    );
    assert!(d.terminate().success());

    let a = collector_kept.lock().expect("lock").clone();
    let b = causeway_kept.lock().expect("lock").clone();
    assert!(
        kept > TRACES / 20 && kept < TRACES / 5,
        "the Collector kept {kept} of {TRACES}"
    );
    assert_eq!(a.len(), kept);
    let only_collector: Vec<_> = a.difference(&b).take(5).collect();
    let only_causeway: Vec<_> = b.difference(&a).take(5).collect();
    assert!(
        a == b,
        "kept by the Collector {}, by causeway {}, by both {}; only the Collector: {only_collector:?}; only causeway: {only_causeway:?}",
        a.len(),
        b.len(),
        a.intersection(&b).count()
    );
}

//! Kept traces into a real Jaeger v2 (in-memory storage), read back through
//! Jaeger's own query APIs: one causeway exports over OTLP/gRPC, another
//! over OTLP/HTTP. For every trace, every `rca.*` attribute causeway wrote
//! (as its file exporter shows) is on the same span in Jaeger's answer of
//! both `/api/traces/{id}` (the UI's JSON) and `/api/v3/traces/{id}`
//! (OTLP JSON); the critical-path spans and the culprit span are spans of
//! the returned trace; and the page's "open in Jaeger" link is a URL
//! Jaeger answers, naming a trace Jaeger has.

mod common;

use causeway_scenarios::send::{send, Order};
use causeway_scenarios::{case, Rng, CAUSES};
use common::peers::{jaeger_get_until, Jaeger};
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// A causeway whose traces go to Jaeger through `exporter` (YAML of one
/// exporter named `jaeger`'s body under its type), and to a file.
fn causeway(
    dir: &std::path::Path,
    name: &str,
    http: u16,
    exporter: &str,
    jaeger: &Jaeger,
) -> Daemon {
    let config = format!(
        r#"{head}  correlate:
    evidence_wait: 2s
    alerts:
      links:
        jaeger: "http://{query}/trace/{{{{ $trace_id }}}}"
exporters:
{exporter}
  file/traces: {{ path: "{{dir}}/{name}-traces.jsonl" }}
  file/logs: {{ path: "{{dir}}/{name}-logs.jsonl" }}
  file/metrics: {{ path: "{{dir}}/{name}-metrics.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [{exp_id}, file/traces] }}
    logs: {{ receivers: [otlp], processors: [correlate], exporters: [file/logs] }}
    metrics: {{ receivers: [otlp], processors: [correlate], exporters: [file/metrics] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        head = causeway_scenarios::config::keep_all(http, "1s"),
        query = jaeger.query_addr(),
        exp_id = exporter
            .trim()
            .split(':')
            .next()
            .expect("exporter id")
            .trim(),
    );
    Daemon::start(dir, name, &config)
}

/// An OTLP/JSON attribute value as a comparable string.
fn otlp_value(v: &Value) -> String {
    if let Some(s) = v.get("stringValue").and_then(Value::as_str) {
        return s.to_string();
    }
    if let Some(b) = v.get("boolValue").and_then(Value::as_bool) {
        return b.to_string();
    }
    if let Some(i) = v.get("intValue") {
        return i
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| i.to_string());
    }
    if let Some(d) = v.get("doubleValue").and_then(Value::as_f64) {
        return format!("{d}");
    }
    v.to_string()
}

/// A Jaeger (UI JSON) tag value as a comparable string.
fn jaeger_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n
            .as_i64()
            .map(|i| i.to_string())
            .unwrap_or_else(|| format!("{}", n.as_f64().unwrap_or(f64::NAN))),
        other => other.to_string(),
    }
}

/// span id → its `rca.*` attributes, from OTLP JSON resource spans.
fn rca_by_span(resource_spans: &[Value]) -> BTreeMap<String, BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for rs in resource_spans {
        for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
            for sp in ss["spans"].as_array().into_iter().flatten() {
                let id = sp["spanId"].as_str().unwrap_or_default().to_lowercase();
                let e: &mut BTreeMap<String, String> = out.entry(id).or_default();
                for a in sp["attributes"].as_array().into_iter().flatten() {
                    let k = a["key"].as_str().unwrap_or_default();
                    if k.starts_with("rca.") {
                        e.insert(k.to_string(), otlp_value(&a["value"]));
                    }
                }
            }
        }
    }
    out
}

/// What causeway wrote: trace id → span id → rca attributes.
fn written(path: &std::path::Path) -> BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>> {
    let mut out: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>> = BTreeMap::new();
    for line in read_jsonl(path) {
        for rs in line["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for sp in ss["spans"].as_array().into_iter().flatten() {
                    let tid = sp["traceId"].as_str().unwrap_or_default().to_lowercase();
                    let one = serde_json::json!([{ "scopeSpans": [{ "spans": [sp] }] }]);
                    let arr = one.as_array().cloned().unwrap_or_default();
                    out.entry(tid).or_default().extend(rca_by_span(&arr));
                }
            }
        }
    }
    out
}

#[test]
fn kept_traces_in_jaeger_carry_every_rca_attribute_on_its_span_over_grpc_and_http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let jaeger = Jaeger::start(d);
    let (h1, h2) = (free_port(), free_port());
    let grpc = causeway(
        d,
        "grpc",
        h1,
        &format!(
            "  otlp/jaeger: {{ endpoint: \"127.0.0.1:{}\", tls: {{ insecure: true }} }}",
            jaeger.otlp_grpc
        ),
        &jaeger,
    );
    let http = causeway(
        d,
        "http",
        h2,
        &format!(
            "  otlphttp/jaeger: {{ endpoint: \"http://127.0.0.1:{}\" }}",
            jaeger.otlp_http
        ),
        &jaeger,
    );
    let now = now_ns();
    let mut rng = Rng::new(7);
    let client = http_client();
    let mut sent: Vec<(&str, String)> = Vec::new();
    let mut n = 0;
    for (name, port) in [("grpc", h1), ("http", h2)] {
        for cause in CAUSES {
            let c = case(&mut rng, cause, n, now);
            n += 1;
            send(
                &client,
                &format!("http://127.0.0.1:{port}"),
                std::slice::from_ref(&c),
                Order::LogsFirst,
            )
            .expect("send");
            sent.push((
                name,
                c.trace_id.iter().map(|b| format!("{b:02x}")).collect(),
            ));
        }
    }
    // Wait until each causeway wrote every trace with its verdict.
    for name in ["grpc", "http"] {
        let path = d.join(format!("{name}-traces.jsonl"));
        let want: BTreeSet<&String> = sent.iter().filter(|s| s.0 == name).map(|s| &s.1).collect();
        wait_for(Duration::from_secs(60), "every verdict written", || {
            let w = written(&path);
            want.iter().all(|t| {
                w.get(*t)
                    .is_some_and(|spans| spans.values().any(|a| a.contains_key("rca.cause")))
            })
        });
    }
    let q = jaeger.query_addr();
    let mut checked_attrs = 0;
    for name in ["grpc", "http"] {
        let w = written(&d.join(format!("{name}-traces.jsonl")));
        for (_, tid) in sent.iter().filter(|s| s.0 == name) {
            let spans = &w[tid];
            let n_spans = spans.len();
            // The UI's API: tags on each span, by span id.
            let v1 = jaeger_get_until(
                &q,
                &format!("/api/traces/{tid}"),
                Duration::from_secs(30),
                |v| {
                    v["data"][0]["spans"]
                        .as_array()
                        .is_some_and(|s| s.len() == n_spans)
                },
            );
            let mut v1_tags: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            for sp in v1["data"][0]["spans"].as_array().into_iter().flatten() {
                let id = sp["spanID"].as_str().unwrap_or_default().to_lowercase();
                let e = v1_tags.entry(id).or_default();
                for t in sp["tags"].as_array().into_iter().flatten() {
                    let k = t["key"].as_str().unwrap_or_default();
                    if k.starts_with("rca.") {
                        e.insert(k.to_string(), jaeger_value(&t["value"]));
                    }
                }
            }
            // The v3 API: OTLP JSON.
            let v3 = jaeger_get_until(
                &q,
                &format!("/api/v3/traces/{tid}"),
                Duration::from_secs(30),
                |v| v["result"]["resourceSpans"].is_array(),
            );
            let v3_attrs = rca_by_span(
                v3["result"]["resourceSpans"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default(),
            );
            for (sid, attrs) in spans {
                for (k, val) in attrs {
                    checked_attrs += 1;
                    assert_eq!(
                        v1_tags.get(sid).and_then(|t| t.get(k)),
                        Some(val),
                        "{name}: trace {tid} span {sid}: {k} in /api/traces"
                    );
                    assert_eq!(
                        v3_attrs.get(sid).and_then(|t| t.get(k)),
                        Some(val),
                        "{name}: trace {tid} span {sid}: {k} in /api/v3/traces"
                    );
                }
            }
            // The critical path and the culprit are spans of the returned trace.
            let critical: Vec<&String> = spans
                .iter()
                .filter(|(_, a)| a.get("rca.critical_path").map(String::as_str) == Some("true"))
                .map(|(s, _)| s)
                .collect();
            assert!(!critical.is_empty(), "{tid}: no critical path written");
            for s in critical {
                assert!(
                    v1_tags.contains_key(s),
                    "{tid}: critical span {s} not in Jaeger's trace"
                );
            }
            let culprit = spans
                .values()
                .find_map(|a| a.get("rca.culprit.span_id"))
                .expect("a culprit span");
            if !culprit.is_empty() {
                assert!(
                    v1_tags.contains_key(&culprit.to_lowercase()),
                    "{tid}: culprit span {culprit} not in Jaeger's trace"
                );
            }
        }
    }
    assert!(
        checked_attrs > 100,
        "only {checked_attrs} rca attributes compared"
    );

    // The page's "open in Jaeger" link: a URL Jaeger's query service answers,
    // naming a trace Jaeger has.
    for (d, tid) in [(&grpc, &sent[0].1), (&http, &sent[CAUSES.len()].1)] {
        let (code, body) = http_get(&d.telemetry, &format!("/api/traces/{tid}")).expect("page api");
        assert_eq!(code, 200, "{body}");
        let v: Value = serde_json::from_str(&body).expect("json");
        let link = v["links"]
            .as_array()
            .into_iter()
            .flatten()
            .find_map(|l| l["url"].as_str().or_else(|| l.as_str()))
            .or_else(|| v["links"]["jaeger"].as_str())
            .unwrap_or_else(|| panic!("no jaeger link in {}", v["links"]))
            .to_string();
        let want = format!("http://{q}/trace/{tid}");
        assert_eq!(link, want);
        let path = link.trim_start_matches(&format!("http://{q}"));
        let (code, _) = http_get(&q, path).expect("jaeger answers the link");
        assert_eq!(code, 200, "Jaeger at {link}");
        let (code, _) = http_get(
            &q,
            &format!("/api/traces/{}", path.trim_start_matches("/trace/")),
        )
        .expect("jaeger api");
        assert_eq!(code, 200, "the trace the link names is in Jaeger");
    }
    drop(jaeger);
}

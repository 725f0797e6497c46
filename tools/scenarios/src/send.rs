//! Sending scenarios to a daemon over OTLP/HTTP (protobuf), and reading
//! back what its file exporter wrote.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::{Case, Rng};

/// What to send first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Logs, metrics, then spans.
    LogsFirst,
    /// Spans, logs, then metrics (scraped late).
    SpansFirst,
    /// Metrics, spans, then logs.
    MetricsFirst,
}

/// Post one protobuf body; retries while the daemon asks to (429/503).
pub fn post(client: &reqwest::blocking::Client, url: &str, body: Vec<u8>) -> Result<(), String> {
    for _ in 0..100 {
        let r = client
            .post(url)
            .header("content-type", "application/x-protobuf")
            .body(body.clone())
            .send()
            .map_err(|e| format!("{url}: {e}"))?;
        match r.status().as_u16() {
            200 => return Ok(()),
            429 | 503 => std::thread::sleep(Duration::from_millis(200)),
            s => return Err(format!("{url}: HTTP {s}: {}", r.text().unwrap_or_default())),
        }
    }
    Err(format!("{url}: still refused after 100 tries"))
}

/// Send cases to `base` (`http://127.0.0.1:4318`) in the given order.
pub fn send(
    client: &reqwest::blocking::Client,
    base: &str,
    cases: &[Case],
    order: Order,
) -> Result<(), String> {
    let spans = ExportTraceServiceRequest {
        resource_spans: cases.iter().flat_map(|c| c.spans.clone()).collect(),
    }
    .encode_to_vec();
    let logs = ExportLogsServiceRequest {
        resource_logs: cases.iter().flat_map(|c| c.logs.clone()).collect(),
    }
    .encode_to_vec();
    let metrics = ExportMetricsServiceRequest {
        resource_metrics: cases.iter().flat_map(|c| c.metrics.clone()).collect(),
    }
    .encode_to_vec();
    let (t, l, m) = (
        format!("{base}/v1/traces"),
        format!("{base}/v1/logs"),
        format!("{base}/v1/metrics"),
    );
    match order {
        Order::LogsFirst => {
            post(client, &l, logs)?;
            post(client, &m, metrics)?;
            post(client, &t, spans)
        }
        Order::SpansFirst => {
            post(client, &t, spans)?;
            post(client, &l, logs)?;
            post(client, &m, metrics)
        }
        Order::MetricsFirst => {
            post(client, &m, metrics)?;
            post(client, &t, spans)?;
            post(client, &l, logs)
        }
    }
}

/// A random order.
pub fn random_order(rng: &mut Rng) -> Order {
    *rng.pick(&[Order::LogsFirst, Order::SpansFirst, Order::MetricsFirst])
}

/// What the daemon concluded for a trace, from its root span's `rca.*` attributes.
#[derive(Debug, Clone, Default)]
pub struct Annotated {
    /// `rca.*` attributes of the root span (string forms).
    pub root: HashMap<String, String>,
    /// Span ids (hex) marked `rca.critical_path`.
    pub critical: Vec<String>,
}

fn value_str(v: &serde_json::Value) -> String {
    for k in ["stringValue", "intValue", "doubleValue", "boolValue"] {
        if let Some(x) = v.get(k) {
            return match x {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
        }
    }
    String::new()
}

/// Every cause a root span's annotations state, with its confidence: the
/// verdict's (unless `unknown`) and each of `rca.alternatives`
/// (`cause:confidence:share,…`), for a reliability table.
pub fn stated_findings(root: &HashMap<String, String>) -> Vec<(String, f64)> {
    let mut stated = Vec::new();
    if let Some(cause) = root.get("rca.cause").filter(|c| *c != "unknown") {
        let conf = root
            .get("rca.confidence")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0.0);
        stated.push((cause.clone(), conf));
    }
    for alt in root
        .get("rca.alternatives")
        .into_iter()
        .flat_map(|x| x.split(','))
    {
        let mut parts = alt.split(':');
        if let (Some(cause), Some(Ok(p))) = (parts.next(), parts.next().map(str::parse::<f64>)) {
            stated.push((cause.to_string(), p));
        }
    }
    stated
}

/// Read a file exporter's traces: trace id (hex) → annotations.
pub fn read_annotated(path: &Path) -> HashMap<String, Annotated> {
    let mut out: HashMap<String, Annotated> = HashMap::new();
    let Ok(bytes) = std::fs::read(path) else {
        return out;
    };
    // A line still being written may end in part of a character.
    let text = String::from_utf8_lossy(&bytes);
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        for rs in v["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for sp in ss["spans"].as_array().into_iter().flatten() {
                    let tid = sp["traceId"].as_str().unwrap_or_default().to_lowercase();
                    let sid = sp["spanId"].as_str().unwrap_or_default().to_lowercase();
                    let entry = out.entry(tid).or_default();
                    for a in sp["attributes"].as_array().into_iter().flatten() {
                        let k = a["key"].as_str().unwrap_or_default();
                        if k == "rca.critical_path" {
                            entry.critical.push(sid.clone());
                        } else if k.starts_with("rca.") && k != "rca.self_time_ms" {
                            entry.root.insert(k.to_string(), value_str(&a["value"]));
                        }
                    }
                }
            }
        }
    }
    out
}

//! `causeway demo`: a built-in pipeline and traffic generator that injects
//! faults, printing the root-cause summaries as they come out of the
//! pipeline's file sink, then a table of causes and where the data is. It
//! needs no file and no service, and runs from any directory.

use causeway_core::config::Config;
use causeway_scenarios::send::{random_order, send};
use causeway_scenarios::{case, Rng};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

/// The faults the demo injects, in turn, among healthy traffic.
const FAULTS: [&str; 8] = [
    "rate_limited",
    "circuit_open",
    "upstream_timeout",
    "consumer_lag",
    "cache_miss_fallback",
    "host_cpu_saturation",
    "tls_handshake",
    "queueing",
];

/// The demo's own pipeline: the default one without the `debug` exporter
/// (its batch lines would interleave with the causes), on free ports.
const PIPELINE: &str = r#"
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:@HTTP@
  hostmetrics:
    collection_interval: 5s
processors:
  tail_sampling:
    decision_wait: 3s
    policies:
      - name: everything
        type: always_sample
  correlate:
    window: 10m
  batch:
    timeout: 200ms
exporters:
  file:
    path: "@DATA@/{signal}.jsonl"
service:
  pipelines:
    traces:
      receivers: [otlp]
      processors: [tail_sampling, correlate, batch]
      exporters: [file]
    logs:
      receivers: [otlp]
      processors: [correlate, batch]
      exporters: [file]
    metrics:
      receivers: [otlp, hostmetrics]
      processors: [correlate, batch]
      exporters: [file]
  telemetry:
    metrics:
      address: 127.0.0.1:@TELEMETRY@
"#;

/// The built-in pipeline writing under `data`, on free ports.
pub fn pipeline(data: &std::path::Path) -> anyhow::Result<String> {
    let port = || -> anyhow::Result<u16> {
        Ok(std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port())
    };
    let (http, telemetry) = (port()?, port()?);
    Ok(PIPELINE
        .replace("@HTTP@", &http.to_string())
        .replace("@TELEMETRY@", &telemetry.to_string())
        .replace("@DATA@", &data.display().to_string().replace('"', "\\\"")))
}

/// Where the demo writes when not told: a new directory under the system's
/// temporary directory.
pub fn default_data_dir() -> PathBuf {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    std::env::temp_dir().join(format!("causeway-demo-{secs}"))
}

fn get<'a>(v: &'a serde_yaml::Value, path: &[&str]) -> Option<&'a serde_yaml::Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// Where the demo sends (the `otlp` receiver's HTTP endpoint) and reads
/// (the file exporter's logs file), from the config.
pub fn endpoints(config: &Config) -> anyhow::Result<(String, PathBuf)> {
    let http = config
        .receivers
        .iter()
        .find(|(id, _)| id.kind() == "otlp")
        .and_then(|(_, v)| get(v, &["protocols", "http", "endpoint"]))
        .and_then(|v| v.as_str())
        .map(str::to_string)
        .ok_or_else(|| {
            anyhow::anyhow!("the demo needs an `otlp` receiver with `protocols.http`")
        })?;
    let logs = config
        .exporters
        .iter()
        .find(|(id, _)| id.kind() == "file")
        .and_then(|(_, v)| get(v, &["path"]))
        .and_then(|v| v.as_str())
        .map(|p| PathBuf::from(p.replace("{signal}", "logs")))
        .ok_or_else(|| anyhow::anyhow!("the demo needs a `file` exporter"))?;
    Ok((http, logs))
}

/// Send traffic until `stop`: every second a few healthy traces and one
/// fault. Returns (traces sent, of them with a fault).
pub fn generate(http: String, stop: CancellationToken) -> (u64, u64) {
    let client = {
        causeway_core::tls::install_crypto_provider();
        reqwest::blocking::Client::new()
    };
    let base = format!("http://{http}");
    let mut rng = Rng::new(2026);
    let mut n = 0u64;
    let mut fault = 0usize;
    while !stop.is_cancelled() {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let mut cases = Vec::new();
        for _ in 0..6 {
            cases.push(case(&mut rng, "healthy", n, now));
            n += 1;
        }
        cases.push(case(&mut rng, FAULTS[fault % FAULTS.len()], n, now));
        n += 1;
        fault += 1;
        if let Err(error) = send(&client, &base, &cases, random_order(&mut rng)) {
            tracing::warn!(%error, "Demo traffic not sent.");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    (n, fault as u64)
}

/// What the demo found: per cause, the traces and one example summary.
#[derive(Debug, Default)]
pub struct Found {
    /// cause → (traces, example summary).
    pub causes: std::collections::BTreeMap<String, (usize, String)>,
}

impl Found {
    /// Root causes printed.
    pub fn total(&self) -> usize {
        self.causes.values().map(|c| c.0).sum()
    }

    /// The summary table.
    pub fn table(&self) -> String {
        let mut out = format!("{:<22} {:>6}  example\n", "cause", "traces");
        let mut rows: Vec<_> = self.causes.iter().collect();
        rows.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        for (cause, (n, example)) in rows {
            out.push_str(&format!("{cause:<22} {n:>6}  {example}\n"));
        }
        out
    }
}

/// Print the RCA log records appended to `logs` until `stop`; returns what
/// was found.
pub async fn print(logs: PathBuf, stop: CancellationToken) -> Found {
    let mut offset = std::fs::metadata(&logs).map(|m| m.len()).unwrap_or(0);
    let mut partial = String::new();
    let mut found = Found::default();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return found,
            _ = tick.tick() => {}
        }
        let Ok(mut f) = std::fs::File::open(&logs) else {
            continue;
        };
        if f.seek(SeekFrom::Start(offset)).is_err() {
            continue;
        }
        let mut buf = String::new();
        if f.read_to_string(&mut buf).is_err() {
            continue;
        }
        offset += buf.len() as u64;
        partial.push_str(&buf);
        while let Some(i) = partial.find('\n') {
            let line: String = partial.drain(..=i).collect();
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            for rl in v["resourceLogs"].as_array().into_iter().flatten() {
                for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                    for r in sl["logRecords"].as_array().into_iter().flatten() {
                        let attr = |k: &str| {
                            r["attributes"]
                                .as_array()
                                .and_then(|a| a.iter().find(|x| x["key"] == k))
                                .and_then(|x| x["value"]["stringValue"].as_str())
                                .map(str::to_string)
                        };
                        let Some(cause) = attr("rca.cause") else {
                            continue;
                        };
                        if cause == "unknown" || cause == "slow_dependency" {
                            continue; // healthy traffic
                        }
                        let summary = r["body"]["stringValue"].as_str().unwrap_or_default();
                        println!(
                            "{:<22} {:<30} {}  (trace {})",
                            cause,
                            attr("rca.route_id").unwrap_or_default(),
                            summary,
                            r["traceId"].as_str().unwrap_or_default()
                        );
                        let e = found
                            .causes
                            .entry(cause)
                            .or_insert_with(|| (0, summary.to_string()));
                        e.0 += 1;
                    }
                }
            }
        }
    }
}

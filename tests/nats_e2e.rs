//! The NATS evidence source end to end: a real `nats-server` (Debian's,
//! JetStream on, its own ports and store), read by the `nats` receiver
//! through its monitoring endpoint, and a real client, nats-py traced by
//! the stock OpenTelemetry Python SDK and PyPI's `otel-instrumentation-nats`
//! (`tests/nats/service.py`, in the venv `scripts/deps.sh` makes).
//!
//! The ground truth is what the test did to the consumer: while its worker
//! ran, each message was consumed at once; while it was down, the messages
//! published waited in the stream until it came back. The first are kept
//! as slow (their worker takes 300 ms) and must not be blamed on the
//! consumer; the second must be, naming the consumer and the service that
//! consumes late.
#![allow(clippy::unwrap_used)]

mod common;

use causeway_scenarios::send::read_annotated;
use common::*;
use serde_json::Value;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn python() -> PathBuf {
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let p = PathBuf::from(home).join(".cache/causeway-peers/pyvenv-nats-1/bin/python");
    assert!(
        p.exists(),
        "nats-py and the OpenTelemetry SDK: scripts/deps.sh makes {}",
        p.display()
    );
    p
}

fn nats_server() -> PathBuf {
    ["/usr/sbin/nats-server", "/usr/bin/nats-server"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("nats-server: scripts/deps.sh installs it")
}

/// A NATS server of its own with JetStream: client and monitoring ports.
struct Server {
    _proc: Proc,
    client: u16,
    monitor: u16,
}

impl Server {
    fn start(d: &Path) -> Server {
        let (client, monitor) = (free_port(), free_port());
        let log = std::fs::File::create(d.join("nats-server.log")).unwrap();
        let child = Command::new(nats_server())
            .args(["-a", "127.0.0.1", "-p", &client.to_string()])
            .args(["-m", &monitor.to_string(), "-js", "-sd"])
            .arg(d.join("jetstream"))
            .process_group(0)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("nats-server");
        let s = Server {
            _proc: Proc(child, "nats-server"),
            client,
            monitor,
        };
        wait_for(Duration::from_secs(20), "nats-server's /jsz", || {
            http_get(&format!("127.0.0.1:{}", s.monitor), "/jsz").is_some_and(|r| r.0 == 200)
        });
        s
    }

    /// Client connections the server has.
    fn connections(&self) -> Option<u64> {
        let (_, body) = http_get(&format!("127.0.0.1:{}", self.monitor), "/connz")?;
        serde_json::from_str::<Value>(&body).ok()?["num_connections"].as_u64()
    }

    /// A consumer as the server itself reports it.
    fn consumer(&self, name: &str) -> Option<Value> {
        let (_, body) = http_get(
            &format!("127.0.0.1:{}", self.monitor),
            "/jsz?accounts=true&streams=true&consumers=true",
        )?;
        let v: Value = serde_json::from_str(&body).ok()?;
        v["account_details"]
            .as_array()?
            .iter()
            .flat_map(|a| a["stream_detail"].as_array().into_iter().flatten())
            .flat_map(|s| s["consumer_detail"].as_array().into_iter().flatten())
            .find(|c| c["name"] == name)
            .cloned()
    }
}

fn service_cmd(d: &Path, args: &[&str], env: &[(&str, String)]) -> Command {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/nats/service.py");
    let mut c = Command::new(python());
    c.arg(script)
        .args(args)
        .env("TRUTH_FILE", d.join("truth.jsonl"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .process_group(0)
        .stderr(Stdio::inherit());
    c
}

/// A worker of `tests/nats/service.py`, once it said `ready`.
fn worker(d: &Path, args: &[&str], env: &[(&str, String)]) -> Proc {
    let mut c = service_cmd(d, args, env)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python");
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "service.py {args:?}");
    Proc(c, "service.py")
}

/// A publisher of `tests/nats/service.py`, run to its end (its spans flushed).
fn publish(d: &Path, args: &[&str], env: &[(&str, String)]) {
    let out = service_cmd(d, args, env).output().expect("python");
    assert!(out.status.success(), "service.py {args:?}: {}", out.status);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");
}

/// What the services did, per trace id: (published in phase, consumed).
fn truth(d: &Path) -> std::collections::BTreeMap<String, (String, bool)> {
    let mut out: std::collections::BTreeMap<String, (String, bool)> = Default::default();
    for v in read_jsonl(&d.join("truth.jsonl")) {
        let Some(id) = v["trace_id"].as_str() else {
            continue;
        };
        let e = out.entry(id.to_string()).or_default();
        if let Some(p) = v["phase"].as_str() {
            e.0 = p.to_string();
        }
        e.1 |= v["consumed"] == true;
    }
    out
}

/// The latest value the receiver wrote for a consumer's metric.
fn written(d: &Path, consumer: &str, name: &str) -> Option<(u64, f64)> {
    let mut last = None;
    for line in read_jsonl(&d.join("metrics.jsonl")) {
        for rm in line["resourceMetrics"].as_array().into_iter().flatten() {
            let c = attr(&rm["resource"]["attributes"], "nats.consumer.name")
                .and_then(|v| v["stringValue"].as_str());
            if c != Some(consumer) {
                continue;
            }
            for m in rm["scopeMetrics"][0]["metrics"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if m["name"] != name {
                    continue;
                }
                let p = &m["gauge"]["dataPoints"][0];
                let t = p["timeUnixNano"].as_str().and_then(|s| s.parse().ok());
                let v = p["asInt"].as_str().and_then(|s| s.parse().ok());
                if let (Some(t), Some(v)) = (t, v) {
                    last = Some((t, v));
                }
            }
        }
    }
    last
}

#[test]
fn messages_that_waited_for_a_stopped_jetstream_consumer_are_blamed_on_it_and_promptly_consumed_ones_are_not(
) {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let server = Server::start(d);
    let otlp = free_port();
    let daemon = Daemon::start(
        d,
        "nats-rca",
        &format!(
            r#"{receivers}  nats:
    endpoint: http://127.0.0.1:{monitor}
    collection_interval: 500ms
processors:
  tail_sampling:
    decision_wait: 8s
    policies:
      - {{ name: slow, type: latency, latency: {{ threshold_ms: 200 }} }}
  correlate:
    consumer_lag: {{ sample_interval: 1s }}
    alerts:
      interval: 500ms
      window: 10s
      rules:
        - alert: NatsConsumerBehind
          expr: SELECT stream, consumer, pending AS value FROM nats_consumers WHERE pending >= 3
          for: 0s
{tail}"#,
            receivers = causeway_scenarios::config::otlp_http(otlp),
            tail = causeway_scenarios::config::analysed("otlp", "otlp", "nats"),
            monitor = server.monitor
        ),
    );
    let env = |service: &str, extra: &[(&'static str, &str)]| -> Vec<(&'static str, String)> {
        let mut v = vec![
            ("NATS_URL", format!("nats://127.0.0.1:{}", server.client)),
            ("OTEL_SERVICE_NAME", service.to_string()),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{otlp}"),
            ),
        ];
        v.extend(extra.iter().map(|(k, x)| (*k, x.to_string())));
        v
    };
    let traces = d.join("traces.jsonl");
    let analysed = |ids: &[String]| {
        let a = read_annotated(&traces);
        ids.iter()
            .all(|id| a.get(id).is_some_and(|x| x.root.contains_key("rca.cause")))
    };
    let phase = |p: &str| -> Vec<String> {
        truth(d)
            .into_iter()
            .filter(|(_, (ph, _))| ph == p)
            .map(|(id, _)| id)
            .collect()
    };

    // Healthy: the worker consumes each message at once (and takes 300 ms
    // over it, so the traces are kept as slow).
    let first_worker = worker(
        d,
        &["worker", "orders.created", "billing"],
        &env("billing-worker", &[("WORK_MS", "300")]),
    );
    for i in 0..3 {
        publish(
            d,
            &["publish", "orders.created", "1"],
            &env("orders-api", &[("PHASE", "healthy")]),
        );
        wait_for(Duration::from_secs(20), "the message consumed", || {
            truth(d)
                .values()
                .filter(|(p, c)| p == "healthy" && *c)
                .count()
                > i
        });
    }
    let healthy = phase("healthy");
    assert_eq!(healthy.len(), 3);
    wait_for(
        Duration::from_secs(40),
        "the healthy traces analysed",
        || analysed(&healthy),
    );

    // The worker goes away; its durable consumer stays, and what is
    // published meanwhile waits in the stream.
    drop(first_worker);
    wait_for(Duration::from_secs(20), "the worker disconnected", || {
        server.connections() == Some(0)
    });
    assert!(
        server.consumer("billing").is_some(),
        "the durable consumer stays"
    );
    publish(
        d,
        &["publish", "orders.created", "5"],
        &env("orders-api", &[("PHASE", "backlog")]),
    );
    // The receiver sees them pending, and keeps seeing them for 2 s: the
    // messages wait that long at least.
    wait_for(Duration::from_secs(20), "5 pending seen", || {
        written(d, "billing", "nats.consumer.pending").is_some_and(|(_, v)| v >= 5.0)
    });
    let first = written(d, "billing", "nats.consumer.pending").unwrap().0;
    wait_for(Duration::from_secs(20), "2 s of the backlog seen", || {
        written(d, "billing", "nats.consumer.pending")
            .is_some_and(|(t, v)| v >= 5.0 && t >= first + 2_000_000_000)
    });
    // An alert rule over the consumers fires for it.
    wait_for(Duration::from_secs(20), "the consumer alert", || {
        alert_labels(&d.join("logs.jsonl")).iter().any(|l| {
            l.contains("\"alertname\":\"NatsConsumerBehind\"")
                && l.contains("\"consumer\":\"billing\"")
                && l.contains("\"stream\":\"ORDERS\"")
        })
    });
    // The worker comes back and drains the backlog.
    let _worker = worker(
        d,
        &["worker", "orders.created", "billing"],
        &env("billing-worker", &[("WORK_MS", "10")]),
    );
    let backlog = phase("backlog");
    assert_eq!(backlog.len(), 5);
    wait_for(Duration::from_secs(20), "the backlog consumed", || {
        truth(d)
            .values()
            .filter(|(p, c)| p == "backlog" && *c)
            .count()
            == 5
    });
    wait_for(
        Duration::from_secs(60),
        "the backlog traces analysed",
        || analysed(&backlog),
    );

    let a = read_annotated(&traces);
    let evidence =
        |id: &str| -> Value { serde_json::from_str(&a[id].root["rca.evidence"]).unwrap() };
    let nats_rows = |id: &str| -> Vec<Value> {
        evidence(id)["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m["kind"] == "nats")
            .cloned()
            .collect()
    };
    for id in &backlog {
        let r = &a[id].root;
        eprintln!(
            "backlog {id}: {} {} | {}",
            r["rca.cause"], r["rca.summary"], r["rca.evidence"]
        );
        assert_eq!(r["rca.cause"], "consumer_lag", "{id}: {}", r["rca.summary"]);
        assert_eq!(evidence(id)["rule"], "nats_consumer_lag");
        assert!(
            r["rca.summary"].contains("NATS consumer billing of stream ORDERS"),
            "{}",
            r["rca.summary"]
        );
        // The service at fault: the one that consumed late, not the publisher.
        assert_eq!(r["rca.culprit.service"], "billing-worker");
        let row = nats_rows(id)
            .into_iter()
            .find(|m| m["consumer"] == "billing" && m["role"] == "consume")
            .expect("the consumer's evidence");
        assert!(row["pending"].as_f64().is_some_and(|p| p >= 1.0), "{row}");
        // It explains the wait: at least the 2 s the backlog was seen.
        let explained = evidence(id)["explained_ms"].as_f64().unwrap();
        assert!(explained >= 2000.0, "{explained}");
    }
    for id in &healthy {
        let r = &a[id].root;
        eprintln!("healthy {id}: {} {}", r["rca.cause"], r["rca.summary"]);
        assert_ne!(r["rca.cause"], "consumer_lag", "{id}: {}", r["rca.summary"]);
        // Joined, and healthy: nothing was pending while it waited.
        let row = nats_rows(id)
            .into_iter()
            .find(|m| m["consumer"] == "billing" && m["role"] == "consume")
            .expect("the consumer joined");
        assert_eq!(row["pending"], 0.0, "{row}");
    }
    // The page: the consumer in its table, the table in the sources' list.
    let (code, body) = http_get(&daemon.telemetry, "/api/nats").unwrap();
    assert_eq!(code, 200, "{body}");
    let consumers: Value = serde_json::from_str(&body).unwrap();
    assert!(
        consumers
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["consumer"] == "billing"
                && c["stream"] == "ORDERS"
                && c["subjects"] == "orders.>"),
        "{body}"
    );
    let (_, body) = http_get(&daemon.telemetry, "/api/sources").unwrap();
    assert!(body.contains("\"path\":\"nats\""), "{body}");
    assert!(daemon.terminate().success());
}

//! The `rabbitmq` receiver against a real RabbitMQ (Debian's
//! `rabbitmq-server` 3.10 with its management plugin), started here on free
//! ports in its own directories, driven by a real AMQP client (Debian's
//! python3-pika, `tests/rabbitmq/amqp.py`): depths, consumer counts and
//! counters as the broker reports them, and the status under the real
//! conditions (no consumer, a consumer that stops acking, a slow consumer).
//! Then the faults: the API down, refusing the credentials, answering
//! garbage, too much, or too slowly. `scripts/test.sh` installs both.
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use serde_json::Value;
use std::io::BufRead;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const PYTHON: &str = "/usr/bin/python3";

/// A RabbitMQ node of its own: AMQP, management, distribution and epmd ports.
struct Broker {
    _proc: Proc,
    amqp: u16,
    http: u16,
    epmd: u16,
}

impl Drop for Broker {
    fn drop(&mut self) {
        // epmd leaves on its own; this one listens on our port only.
        Command::new("epmd")
            .args(["-port", &self.epmd.to_string(), "-kill"])
            .env("ERL_EPMD_PORT", self.epmd.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok();
    }
}

impl Broker {
    fn start(d: &Path) -> Broker {
        let bin = Path::new("/usr/lib/rabbitmq/bin/rabbitmq-server");
        assert!(bin.exists(), "rabbitmq-server: scripts/test.sh installs it");
        let (amqp, http, dist, epmd) = (free_port(), free_port(), free_port(), free_port());
        let dir = d.join("rabbitmq");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.default = 127.0.0.1:{amqp}\nmanagement.tcp.port = {http}\n\
management.tcp.ip = 127.0.0.1\nloopback_users = none\ncollect_statistics_interval = 500\n"
            ),
        )
        .unwrap();
        std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_management].\n").unwrap();
        let log = std::fs::File::create(dir.join("server.log")).unwrap();
        let child = Command::new(bin)
            .env("HOME", &dir)
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_NODENAME", format!("causeway{amqp}@localhost"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_DIST_PORT", dist.to_string())
            .env("ERL_EPMD_PORT", epmd.to_string())
            .env("RABBITMQ_PID_FILE", dir.join("pid"))
            .process_group(0)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("rabbitmq-server");
        let mut b = Broker {
            _proc: Proc(child, "rabbitmq-server"),
            amqp,
            http,
            epmd,
        };
        wait_for(Duration::from_secs(90), "RabbitMQ's management API", || {
            if let Ok(Some(st)) = b._proc.0.try_wait() {
                panic!(
                    "rabbitmq-server exited {st}: {}",
                    std::fs::read_to_string(dir.join("server.log")).unwrap_or_default()
                );
            }
            b.api("/api/overview").is_some()
        });
        b.amqp = amqp;
        b
    }

    fn api(&self, path: &str) -> Option<Value> {
        let r = http_client()
            .get(format!("http://127.0.0.1:{}{path}", self.http))
            .basic_auth("guest", Some("guest"))
            .timeout(Duration::from_secs(5))
            .send()
            .ok()?;
        if !r.status().is_success() {
            return None;
        }
        serde_json::from_str(&r.text().ok()?).ok()
    }

    /// Run the AMQP client; for `hold` and `slow` it keeps running (returned).
    fn client(&self, args: &[&str]) -> Proc {
        let c = Command::new(PYTHON)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/rabbitmq/amqp.py"))
            .arg(self.amqp.to_string())
            .args(args)
            .process_group(0)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3-pika: scripts/test.sh installs it");
        ready(c, "amqp.py", args)
    }

    fn run(&self, args: &[&str]) {
        let mut p = self.client(args);
        let st = p.0.wait().unwrap();
        assert!(st.success(), "amqp.py {args:?}: {st}");
    }
}

/// The last value of each (queue, metric[, attribute value]) in the file.
fn last_values(path: &Path) -> std::collections::BTreeMap<(String, String, String), f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in read_jsonl(path) {
        for rm in line["resourceMetrics"].as_array().into_iter().flatten() {
            let queue = attr(&rm["resource"]["attributes"], "rabbitmq.queue.name")
                .and_then(|v| v["stringValue"].as_str())
                .unwrap_or("")
                .to_string();
            each_number_point(rm, |m, p| {
                let a = p["attributes"]
                    .as_array()
                    .and_then(|a| a.first())
                    .and_then(|kv| kv["value"]["stringValue"].as_str())
                    .unwrap_or("")
                    .to_string();
                let v = p["asInt"]
                    .as_str()
                    .and_then(|s| s.parse().ok())
                    .or_else(|| p["asInt"].as_f64())
                    .or_else(|| p["asDouble"].as_f64())
                    .unwrap_or(f64::NAN);
                let name = m["name"].as_str().unwrap_or("").to_string();
                // The status carries its name as the attribute: one key per metric.
                let a = if name == "rabbitmq.queue.status" {
                    String::new()
                } else {
                    a
                };
                out.insert((queue.clone(), name, a), v);
            });
        }
    }
    out
}

#[test]
fn queue_depth_consumers_and_status_from_a_real_broker() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let broker = Broker::start(d);
    // depth: 100 published, 30 taken, nobody consuming → STOP.
    broker.run(&["publish", "depth", "100"]);
    broker.run(&["get", "depth", "30"]);
    // stalled: a consumer that takes 5 and never acks → STALL.
    broker.run(&["publish", "stalled", "50"]);
    let _stuck = broker.client(&["hold", "stalled", "5"]);
    // drained: all taken → OK.
    broker.run(&["publish", "drained", "10"]);
    broker.run(&["get", "drained", "10"]);
    // slow: a consumer of 2 messages/s under 25/s → WARN while it falls behind.
    let _slow = broker.client(&["slow", "slow", "2"]);
    let _publisher = broker.client(&["publish", "slow", "2000", "25"]);
    let daemon = Daemon::start(
        d,
        "rabbitmq",
        &format!(
            r#"
receivers:
  rabbitmq:
    endpoint: http://127.0.0.1:{http}
    username: guest
    password: guest
    collection_interval: 500ms
    window: 4
    queues: {{ exclude: "ignored.*" }}
{tail}"#,
            tail = causeway_scenarios::config::metrics_to_file("rabbitmq"),
            http = broker.http
        ),
    );
    let out = d.join("metrics.jsonl");
    let k = |q: &str, m: &str, a: &str| (q.to_string(), m.to_string(), a.to_string());
    wait_for(Duration::from_secs(60), "every queue judged", || {
        let v = last_values(&out);
        let get = |q: &str, m: &str, a: &str| v.get(&k(q, m, a)).copied();
        get("depth", "rabbitmq.queue.status", "") == Some(4.0)
            && get("depth", "rabbitmq.message.published", "") == Some(100.0)
            && get("depth", "rabbitmq.message.acknowledged", "") == Some(30.0)
            && get("stalled", "rabbitmq.queue.status", "") == Some(5.0)
            && get("stalled", "rabbitmq.message.current", "unacknowledged") == Some(5.0)
            && get("drained", "rabbitmq.queue.status", "") == Some(1.0)
            && get("slow", "rabbitmq.queue.status", "") == Some(2.0)
            // The broker's own rates: its management plugin reports a
            // rate only once two of its samples (5 s apart) saw messages.
            && get("slow", "rabbitmq.queue.publish_rate", "").is_some_and(|r| r > 5.0)
    });
    let v = last_values(&out);
    let get = |q: &str, m: &str, a: &str| v.get(&k(q, m, a)).copied();
    // Depth N − M, ready and unacknowledged, consumer counts, the counters.
    assert_eq!(
        get("depth", "rabbitmq.message.current", "ready"),
        Some(70.0)
    );
    assert_eq!(
        get("depth", "rabbitmq.message.current", "unacknowledged"),
        Some(0.0)
    );
    assert_eq!(get("depth", "rabbitmq.consumer.count", ""), Some(0.0));
    assert_eq!(get("depth", "rabbitmq.message.delivered", ""), Some(30.0));
    assert_eq!(get("stalled", "rabbitmq.consumer.count", ""), Some(1.0));
    assert_eq!(
        get("stalled", "rabbitmq.message.current", "ready"),
        Some(45.0)
    );
    assert_eq!(
        get("drained", "rabbitmq.message.current", "ready"),
        Some(0.0)
    );
    assert_eq!(get("drained", "rabbitmq.queue.backlog_age", ""), Some(0.0));
    // The head message's AMQP timestamp gives the backlog's age.
    let age = get("depth", "rabbitmq.queue.backlog_age", "").expect("age");
    assert!((0.0..120.0).contains(&age), "{age}");
    // The backlog alarm: below the default 5,000 and not rising for 5 minutes.
    assert_eq!(get("depth", "rabbitmq.queue.backlog_alarm", ""), Some(0.0));
    // Resource attributes as the Collector's receiver writes them.
    let line = read_jsonl(&out).into_iter().last().unwrap();
    let rm = &line["resourceMetrics"][0];
    for key in [
        "rabbitmq.queue.name",
        "rabbitmq.vhost.name",
        "rabbitmq.node.name",
    ] {
        assert!(attr(&rm["resource"]["attributes"], key).is_some(), "{key}");
    }
    assert!(daemon.terminate().success());
}

#[test]
fn a_management_api_down_refusing_garbled_huge_or_slow_is_counted_and_retried() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let broker = Broker::start(d);
    broker.run(&["publish", "fine", "3"]);
    let garbage = serve_in_thread(axum::Router::new().route(
        "/api/queues",
        axum::routing::get(|| async { "<html>502 Bad Gateway</html>" }),
    ));
    let huge = serve_in_thread(axum::Router::new().route(
        "/api/queues",
        axum::routing::get(|| async { format!("[{}]", "{\"name\":\"q\"},".repeat(400_000)) }),
    ));
    let slow = serve_in_thread(axum::Router::new().route(
        "/api/queues",
        axum::routing::get(|| async {
            tokio::time::sleep(Duration::from_secs(30)).await;
            "[]"
        }),
    ));
    // Queues answered, bindings not: the queues still flow.
    let no_bindings = serve_in_thread(
        axum::Router::new()
            .route(
                "/api/queues",
                axum::routing::get(|| async {
                    r#"[{"name":"unbound","vhost":"/","messages":4,"messages_ready":4,"messages_unacknowledged":0,"consumers":0}]"#
                }),
            )
            .route(
                "/api/bindings",
                axum::routing::get(|| async { "<html>500 Internal Server Error</html>" }),
            )
            .route("/api/exchanges", axum::routing::get(|| async { "[]" })),
    );
    let down = free_port();
    let config = format!(
        r#"
receivers:
  rabbitmq/good:
    endpoint: http://127.0.0.1:{http}
    username: guest
    password_file: "{{dir}}/password"
    collection_interval: 300ms
  rabbitmq/unauthorized:
    endpoint: http://127.0.0.1:{http}
    username: guest
    password: wrong
    collection_interval: 300ms
  rabbitmq/down:
    endpoint: http://127.0.0.1:{down}
    username: x
    collection_interval: 300ms
  rabbitmq/garbage:
    endpoint: {garbage}
    username: x
    collection_interval: 300ms
  rabbitmq/huge:
    endpoint: {huge}
    username: x
    collection_interval: 300ms
    body_size_limit: 1MiB
  rabbitmq/slow:
    endpoint: {slow}
    username: x
    collection_interval: 300ms
    timeout: 500ms
  rabbitmq/nobindings:
    endpoint: {no_bindings}
    username: x
    collection_interval: 300ms
{tail}"#, tail = causeway_scenarios::config::metrics_to_file("rabbitmq/good, rabbitmq/unauthorized, rabbitmq/down, rabbitmq/garbage, rabbitmq/huge, rabbitmq/slow, rabbitmq/nobindings"),
        http = broker.http
    );
    std::fs::write(d.join("password"), "guest\n").unwrap();
    let daemon = Daemon::start(d, "faults", &config);
    let errors = |r: &str, reason: &str| {
        daemon
            .metric(&format!(
                "causeway_rabbitmq_errors_total{{receiver=\"rabbitmq/{r}\",reason=\"{reason}\"}}"
            ))
            .unwrap_or(0.0)
    };
    // Each fault counted more than once: every round tries again.
    wait_for(Duration::from_secs(30), "every fault counted twice", || {
        errors("unauthorized", "unauthorized") >= 2.0
            && errors("down", "connect") >= 2.0
            && errors("garbage", "parse") >= 2.0
            && errors("huge", "body_size_limit") >= 2.0
            && errors("slow", "timeout") >= 2.0
            && errors("nobindings", "parse") >= 2.0
    });
    // The good one next to them flows.
    let out = d.join("metrics.jsonl");
    wait_for(Duration::from_secs(20), "the good receiver's queue", || {
        last_values(&out).get(&(
            "fine".into(),
            "rabbitmq.message.current".into(),
            "ready".into(),
        )) == Some(&3.0)
            && last_values(&out).get(&(
                "unbound".into(),
                "rabbitmq.queue.status".into(),
                String::new(),
            )) == Some(&4.0)
    });
    // Logged once per receiver and reason, not once per round.
    let stderr = daemon.stderr("faults");
    for (r, reason) in [
        ("unauthorized", "unauthorized"),
        ("down", "connect"),
        ("garbage", "parse"),
        ("huge", "body_size_limit"),
        ("slow", "timeout"),
        ("nobindings", "parse"),
    ] {
        let n = stderr
            .lines()
            .filter(|l| {
                l.contains(&format!("rabbitmq/{r}")) && l.contains(&format!("reason=\"{reason}\""))
            })
            .count();
        assert_eq!(n, 1, "{r}/{reason} logged {n} times:\n{stderr}");
    }
    assert!(daemon.terminate().success());
}

/// A Node.js service of `tests/testbed/rabbit.js` (amqplib, traced by the
/// stock OpenTelemetry SDK and its amqplib instrumentation), once it said
/// `ready`.
fn node(d: &Path, args: &[&str], env: &[(&str, String)]) -> Proc {
    let testbed = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testbed");
    assert!(
        testbed.join("node_modules/amqplib").exists(),
        "amqplib: scripts/test.sh runs npm ci in tests/testbed"
    );
    let c = Command::new("node")
        .current_dir(&testbed)
        .arg("rabbit.js")
        .args(args)
        .env("OTEL_BSP_SCHEDULE_DELAY", "200")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_LOGS_EXPORTER", "none")
        .env("TRUTH_FILE", d.join("truth.jsonl"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("node");
    ready(c, "rabbit.js", args)
}

/// The client once its first line says `ready`.
fn ready(mut c: Child, name: &'static str, args: &[&str]) -> Proc {
    let mut line = String::new();
    std::io::BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready", "{name} {args:?}");
    Proc(c, name)
}

/// What the services saw, by trace id: (route, status).
fn truth(d: &Path) -> std::collections::BTreeMap<String, (String, u16)> {
    read_jsonl(&d.join("truth.jsonl"))
        .into_iter()
        .filter_map(|v| {
            Some((
                v["trace_id"].as_str()?.to_string(),
                (
                    v["route"].as_str()?.to_string(),
                    v["status"].as_u64()? as u16,
                ),
            ))
        })
        .collect()
}

#[test]
fn a_request_published_to_a_queue_whose_consumer_died_is_blamed_on_its_backlog_and_a_healthy_queue_is_not(
) {
    use causeway_scenarios::send::read_annotated;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let broker = Broker::start(d);
    let otlp = free_port();
    let daemon = Daemon::start(
        d,
        "rabbitmq-rca",
        &format!(
            r#"{receivers}  rabbitmq:
    endpoint: http://127.0.0.1:{http}
    username: guest
    password: guest
    collection_interval: 500ms
    window: 4
processors:
  tail_sampling:
    decision_wait: 3s
    policies:
      - {{ name: troubled-queues, type: correlated, correlated: {{ processor: correlate }} }}
      - {{ name: slow, type: latency, latency: {{ threshold_ms: 200 }} }}
  correlate:
    consumer_lag: {{ sample_interval: 1s }}
    alerts:
      interval: 500ms
      window: 10s
      rules:
        - alert: QueueWithoutConsumer
          expr: SELECT queue, vhost, status_name, depth AS value FROM rabbitmq_queues WHERE status = 4
          for: 0s
{tail}"#,
            receivers = causeway_scenarios::config::otlp_http(otlp),
            tail = causeway_scenarios::config::analysed("otlp", "otlp", "rabbitmq"),
            http = broker.http
        ),
    );
    let amqp = format!("amqp://guest:guest@127.0.0.1:{}", broker.amqp);
    let otel = |service: &str| {
        vec![
            ("AMQP_URL", amqp.clone()),
            ("OTEL_SERVICE_NAME", service.to_string()),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                format!("http://127.0.0.1:{otlp}"),
            ),
        ]
    };
    let orders_worker = node(
        d,
        &["worker", "orders.created"],
        &[otel("order-worker"), vec![("WORK_MS", "10".into())]].concat(),
    );
    // The mail worker is slow (250 ms a message) but keeps up: its traces
    // are kept as slow, and its queue is healthy.
    let _mail_worker = node(
        d,
        &["worker", "mail"],
        &[otel("mail-worker"), vec![("WORK_MS", "250".into())]].concat(),
    );
    let api_port = free_port();
    let _api = node(
        d,
        &["api"],
        &[otel("api"), vec![("PORT", api_port.to_string())]].concat(),
    );
    let api = format!("127.0.0.1:{api_port}");
    let get = |path: &str| http_get(&api, path).map(|r| r.0);
    let traces = d.join("traces.jsonl");
    let analysed = |ids: &[String]| {
        let a = read_annotated(&traces);
        ids.iter()
            .all(|id| a.get(id).is_some_and(|x| x.root.contains_key("rca.cause")))
    };
    let ids_of = |route: &str, status: u16| -> Vec<String> {
        truth(d)
            .into_iter()
            .filter(|(_, (r, s))| r == route && *s == status)
            .map(|(id, _)| id)
            .collect()
    };

    // Healthy: both queues consumed.
    for i in 0..3 {
        assert_eq!(get(&format!("/order/{i}")), Some(200));
        assert_eq!(get(&format!("/notify/{i}")), Some(200));
    }
    let healthy_mail = ids_of("/notify/:id", 200);
    assert_eq!(healthy_mail.len(), 3);
    wait_for(
        Duration::from_secs(30),
        "the slow notify traces analysed",
        || analysed(&healthy_mail),
    );

    // The orders consumer dies: its queue has no consumer, requests time out.
    drop(orders_worker);
    wait_for(
        Duration::from_secs(30),
        "the broker to see no consumer",
        || {
            broker
                .api("/api/queues/%2F/orders.created")
                .is_some_and(|q| q["consumers"].as_u64() == Some(0))
        },
    );
    // Orders keep coming (here from another publisher) and pile up; the
    // requests below come once the receiver has seen it.
    broker.run(&["publish", "orders.created", "5"]);
    let metrics = d.join("metrics.jsonl");
    wait_for(
        Duration::from_secs(30),
        "orders.created seen as STOP",
        || {
            last_values(&metrics)
                .get(&(
                    "orders.created".to_string(),
                    "rabbitmq.queue.status".to_string(),
                    String::new(),
                ))
                .copied()
                == Some(4.0)
        },
    );
    // An alert rule over the queues fires for it, with the queue's labels.
    wait_for(Duration::from_secs(30), "the queue alert", || {
        alert_labels(&d.join("logs.jsonl")).iter().any(|l| {
            l.contains("\"alertname\":\"QueueWithoutConsumer\"")
                && l.contains("\"queue\":\"orders.created\"")
                && l.contains("\"status_name\":\"STOP\"")
        })
    });
    for i in 10..13 {
        assert_eq!(get(&format!("/order/{i}")), Some(504));
        assert_eq!(get(&format!("/notify/{i}")), Some(200));
    }
    // Fire and forget: fast, kept only by the correlated policy when the
    // queue they reach is in trouble.
    for i in 20..23 {
        assert_eq!(get(&format!("/notify-async/{i}")), Some(200));
    }
    for i in 20..23 {
        assert_eq!(get(&format!("/order-async/{i}")), Some(200));
    }
    let stuck = ids_of("/order/:id", 504);
    let mail = ids_of("/notify/:id", 200);
    let async_orders = ids_of("/order-async/:id", 200);
    let async_mail = ids_of("/notify-async/:id", 200);
    assert_eq!((stuck.len(), mail.len(), async_orders.len()), (3, 6, 3));
    let all: Vec<String> = [stuck.clone(), mail.clone(), async_orders.clone()].concat();
    wait_for(Duration::from_secs(60), "every kept trace analysed", || {
        analysed(&all)
    });
    let a = read_annotated(&traces);
    let evidence =
        |id: &str| -> Value { serde_json::from_str(&a[id].root["rca.evidence"]).unwrap() };
    let queue_ev = |id: &str, queue: &str| -> Option<Value> {
        evidence(id)["metrics"]
            .as_array()?
            .iter()
            .find(|m| m["kind"] == "queue" && m["queue"] == queue)
            .cloned()
    };
    for id in &stuck {
        let r = &a[id].root;
        eprintln!(
            "stuck {id}: {} {} | {}",
            r["rca.cause"], r["rca.summary"], r["rca.evidence"]
        );
        assert_eq!(r["rca.cause"], "consumer_lag", "{id}: {}", r["rca.summary"]);
        assert!(
            r["rca.summary"].contains("orders.created") && r["rca.summary"].contains("no consumer"),
            "{}",
            r["rca.summary"]
        );
        assert_eq!(evidence(id)["rule"], "queue_backlog");
        // The queue's own numbers, as the broker reported them.
        let q = queue_ev(id, "orders.created").expect("the queue's evidence");
        assert_eq!(q["status"], 4, "STOP: {q}");
        assert_eq!(q["consumers"], 0.0, "{q}");
        assert!(q["depth"].as_f64().is_some_and(|x| x >= 1.0), "{q}");
        assert_eq!(q["role"], "publish");
        // It explains the wait for the reply, most of the 1.5 s.
        let explained = evidence(id)["explained_ms"].as_f64().unwrap();
        assert!(explained >= 1200.0, "{explained}");
    }
    for id in healthy_mail.iter().chain(&mail) {
        let r = &a[id].root;
        eprintln!("mail {id}: {} {}", r["rca.cause"], r["rca.summary"]);
        assert_ne!(r["rca.cause"], "consumer_lag", "{id}: {}", r["rca.summary"]);
        // Joined, and healthy: the queue and its consumer side.
        let q = queue_ev(id, "mail").expect("the mail queue joined");
        assert_eq!(q["status"], 1, "{q}");
        assert!(!r["rca.summary"].contains("orders.created"));
    }
    // Only the queue without consumer alerted.
    let labels = alert_labels(&d.join("logs.jsonl"));
    assert!(
        labels
            .iter()
            .all(|l| l.contains("\"queue\":\"orders.created\"")),
        "{labels:?}"
    );
    // The correlated policy kept the fast publishes to the queue in trouble,
    // and not those to the healthy one (decided before the later ones).
    let kept = read_annotated(&traces);
    assert!(async_orders.iter().all(|id| kept.contains_key(id)));
    for id in &async_mail {
        assert!(
            !kept.contains_key(id),
            "a fast trace to a healthy queue was kept: {:?}",
            kept[id].root
        );
    }
    assert!(daemon.terminate().success());
}

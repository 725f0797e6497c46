//! The `prometheus` receiver against exporters from Debian, started here on
//! free ports: `prometheus-redis-exporter` in front of a real `redis-server`
//! (hits and misses made with `redis-cli`), `prometheus-nginx-exporter` in
//! front of a real NGINX `stub_status`, and `prometheus-node-exporter`.
//! Every family arrives with its type, `up` is 1, and an exporter that stops
//! gives `up` 0 and staleness markers. `scripts/test.sh` installs them.

mod common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn start(d: &Path, name: &str, bin: &str, args: &[String], port: u16) -> Proc {
    assert!(
        Path::new(bin).exists(),
        "{bin}: scripts/test.sh installs it"
    );
    let log = std::fs::File::create(d.join(format!("{name}.log"))).expect("log");
    let child = Command::new(bin)
        .args(args)
        .current_dir(d)
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| panic!("{bin}: {e}"));
    let mut p = Proc(child);
    wait_for(Duration::from_secs(30), name, || {
        if let Ok(Some(st)) = p.0.try_wait() {
            panic!(
                "{name} exited {st}: {}",
                std::fs::read_to_string(d.join(format!("{name}.log"))).unwrap_or_default()
            );
        }
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    p
}

/// Run a redis-cli command; a server still starting (a refused connection,
/// `-LOADING`) is asked again for up to 10 s, then the answer is shown.
fn redis_cli(port: u16, args: &[&str]) {
    let started = std::time::Instant::now();
    loop {
        let out = Command::new("redis-cli")
            .args(["-p", &port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli");
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && !text.starts_with("ERR") && !text.starts_with("LOADING") {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "redis-cli -p {port} {args:?}: {} {text} {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn debian_exporters_scraped_with_types_up_and_staleness() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (redis, redis_exp, nginx, nginx_exp, node_exp) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );

    let _redis = start(
        d,
        "redis",
        "/usr/bin/redis-server",
        &[
            "--port".into(),
            redis.to_string(),
            "--bind".into(),
            "127.0.0.1".into(),
            "--save".into(),
            String::new(),
            "--appendonly".into(),
            "no".into(),
            "--dir".into(),
            d.display().to_string(),
        ],
        redis,
    );
    // Two hits, three misses.
    redis_cli(redis, &["SET", "k", "v"]);
    for _ in 0..2 {
        redis_cli(redis, &["GET", "k"]);
    }
    for key in ["a", "b", "c"] {
        redis_cli(redis, &["GET", key]);
    }
    let redis_exporter = start(
        d,
        "redis_exporter",
        "/usr/bin/prometheus-redis-exporter",
        &[
            format!("-redis.addr=redis://127.0.0.1:{redis}"),
            format!("-web.listen-address=127.0.0.1:{redis_exp}"),
        ],
        redis_exp,
    );

    std::fs::write(
        d.join("nginx.conf"),
        format!(
            "daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/nginx-error.log;\nevents {{ worker_connections 32; }}\nhttp {{\n  access_log off;\n  client_body_temp_path {d}/b; proxy_temp_path {d}/p; fastcgi_temp_path {d}/f; uwsgi_temp_path {d}/u; scgi_temp_path {d}/s;\n  server {{ listen 127.0.0.1:{nginx}; location = /stub_status {{ stub_status; }} }}\n}}\n",
            d = d.display()
        ),
    )
    .expect("nginx.conf");
    let _nginx = start(
        d,
        "nginx",
        "/usr/sbin/nginx",
        &[
            "-c".into(),
            d.join("nginx.conf").display().to_string(),
            "-p".into(),
            d.display().to_string(),
        ],
        nginx,
    );
    let _nginx_exporter = start(
        d,
        "nginx_exporter",
        "/usr/bin/prometheus-nginx-exporter",
        &[
            format!("-nginx.scrape-uri=http://127.0.0.1:{nginx}/stub_status"),
            format!("-web.listen-address=127.0.0.1:{nginx_exp}"),
        ],
        nginx_exp,
    );
    let _node_exporter = start(
        d,
        "node_exporter",
        "/usr/bin/prometheus-node-exporter",
        &[format!("--web.listen-address=127.0.0.1:{node_exp}")],
        node_exp,
    );

    let daemon = scraper(
        d,
        "scraper",
        &format!(
            r#"      global: {{ scrape_interval: 500ms }}
      scrape_configs:
        - job_name: redis
          static_configs: [{{ targets: ["127.0.0.1:{redis_exp}"] }}]
        - job_name: nginx
          static_configs: [{{ targets: ["127.0.0.1:{nginx_exp}"] }}]
        - job_name: node
          static_configs: [{{ targets: ["127.0.0.1:{node_exp}"] }}]
"#
        ),
    );
    let out = d.join("metrics.jsonl");
    let of_job = |job: &str| metrics_of_service(&read_jsonl(&out), job);
    let last = |job: &str, name: &str| -> Option<Value> {
        of_job(job).into_iter().rev().find(|m| m["name"] == name)
    };
    let value = |m: &Value, kind: &str| -> Option<f64> {
        m[kind]["dataPoints"]
            .as_array()?
            .iter()
            .find_map(|p| p["asDouble"].as_f64())
    };
    wait_for(
        Duration::from_secs(30),
        "the three exporters scraped",
        || {
            ["redis", "nginx", "node"]
                .iter()
                .all(|j| last(j, "up").and_then(|m| value(&m, "gauge")) == Some(1.0))
        },
    );
    // Redis: the exporter's counters carry what redis-cli did.
    let hits = last("redis", "redis_keyspace_hits_total").expect("hits");
    assert_eq!(hits["sum"]["isMonotonic"], true);
    assert_eq!(value(&hits, "sum"), Some(2.0));
    let misses = last("redis", "redis_keyspace_misses_total").expect("misses");
    assert_eq!(value(&misses, "sum"), Some(3.0));
    assert!(last("redis", "redis_connected_clients").is_some_and(|m| m["gauge"].is_object()));
    assert_eq!(
        last("redis", "redis_up").and_then(|m| value(&m, "gauge")),
        Some(1.0)
    );
    // NGINX stub_status through its exporter.
    assert!(last("nginx", "nginx_connections_active").is_some_and(|m| m["gauge"].is_object()));
    assert!(
        last("nginx", "nginx_http_requests_total").is_some_and(|m| m["sum"]["isMonotonic"] == true)
    );
    // node_exporter: counters, gauges, and the Go runtime's summary.
    assert!(last("node", "node_cpu_seconds_total").is_some_and(|m| m["sum"]["isMonotonic"] == true));
    assert!(last("node", "node_memory_MemAvailable_bytes").is_some_and(|m| m["gauge"].is_object()));
    assert!(last("node", "go_gc_duration_seconds").is_some_and(|m| m["summary"].is_object()));
    assert_eq!(
        daemon.metric("causeway_prometheus_scrape_errors_total{job=\"redis\",reason=\"connect\"}"),
        None
    );

    // The Redis exporter stops: up 0, its series marked stale.
    drop(redis_exporter);
    wait_for(
        Duration::from_secs(30),
        "redis exporter down and stale",
        || {
            let up0 = last("redis", "up").and_then(|m| value(&m, "gauge")) == Some(0.0);
            let stale = of_job("redis").iter().any(|m| {
                m["name"] == "redis_keyspace_hits_total"
                    && m["gauge"]["dataPoints"]
                        .as_array()
                        .is_some_and(|ps| ps.iter().any(|p| p["flags"] == 1))
            });
            up0 && stale
        },
    );
    assert!(
        daemon
            .metric("causeway_prometheus_scrape_errors_total{job=\"redis\",reason=\"connect\"}")
            .unwrap_or(0.0)
            >= 1.0
    );
    assert!(daemon.terminate().success());
}

/// Targets that misbehave: an endless body, one that hangs, a million
/// series, a series of 100,000 labels, a 1 MiB label value, series written twice, NaN and infinities.
/// Each is bounded and counted by reason, the good target beside them keeps
/// flowing, and the daemon's memory stays bounded.
#[test]
fn misbehaving_targets_are_bounded_counted_and_the_rest_flows() {
    use axum::routing::get;
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let endless = serve_in_thread(axum::Router::new().route(
        "/metrics",
        get(|| async {
            let chunk = bytes::Bytes::from("endless_series 1\n".repeat(4096));
            use futures::StreamExt;
            let stream = futures::stream::repeat(chunk).map(Ok::<_, std::io::Error>);
            axum::body::Body::from_stream(stream)
        }),
    ));
    let hang = serve_in_thread(axum::Router::new().route(
        "/metrics",
        get(|| async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            "never"
        }),
    ));
    let million = serve_in_thread(axum::Router::new().route(
        "/metrics",
        get(|| async {
            let mut s = String::with_capacity(20_000_000);
            for i in 0..1_000_000u32 {
                s.push_str(&format!("m{{i=\"{i}\"}} 1\n"));
            }
            s
        }),
    ));
    let many_labels = serve_in_thread(axum::Router::new().route(
        "/metrics",
        get(|| async {
            let labels: Vec<String> = (0..100_000).map(|i| format!("l{i}=\"v\"")).collect();
            format!("wide{{{}}} 1\n", labels.join(","))
        }),
    ));
    let big_label = serve_in_thread(axum::Router::new().route(
        "/metrics",
        get(|| async { format!("x{{v=\"{}\"}} 1\n", "a".repeat(1 << 20)) }),
    ));
    let odd = serve_in_thread(axum::Router::new().route(
        "/metrics",
        get(|| async {
            "# TYPE dup gauge\ndup{a=\"1\"} 1\ndup{a=\"1\"} 2\nnan_value NaN\npos_inf +Inf\nneg_inf -Inf\n"
        }),
    ));
    let host = |url: &str| url.trim_start_matches("http://").to_string();
    let daemon = scraper(
        d,
        "scraper",
        &format!(
            r#"      global: {{ scrape_interval: 500ms, scrape_timeout: 400ms }}
      scrape_configs:
        - job_name: endless
          body_size_limit: 1MiB
          static_configs: [{{ targets: ["{endless}"] }}]
        - job_name: hang
          static_configs: [{{ targets: ["{hang}"] }}]
        - job_name: million
          scrape_timeout: 5s
          scrape_interval: 5s
          static_configs: [{{ targets: ["{million}"] }}]
        - job_name: big_label
          static_configs: [{{ targets: ["{big_label}"] }}]
        - job_name: many_labels
          static_configs: [{{ targets: ["{many_labels}"] }}]
        - job_name: odd
          static_configs: [{{ targets: ["{odd}"] }}]
"#,
            endless = host(&endless),
            hang = host(&hang),
            million = host(&million),
            big_label = host(&big_label),
            many_labels = host(&many_labels),
            odd = host(&odd),
        ),
    );
    let errors = |job: &str, reason: &str| {
        daemon
            .metric(&format!(
                "causeway_prometheus_scrape_errors_total{{job=\"{job}\",reason=\"{reason}\"}}"
            ))
            .unwrap_or(0.0)
    };
    wait_for(Duration::from_secs(60), "every bad target counted", || {
        errors("endless", "body_size_limit") >= 1.0
            && errors("hang", "timeout") >= 1.0
            && errors("million", "sample_limit") >= 1.0
            && errors("big_label", "label_value_length_limit") >= 1.0
            && errors("many_labels", "label_limit") >= 1.0
            && errors("odd", "duplicate_series") >= 1.0
    });
    // The good parts of the odd target flow: the first of the duplicates, NaN and infinities.
    let out = d.join("metrics.jsonl");
    let odd_metrics = metrics_of_service(&read_jsonl(&out), "odd");
    let dup = odd_metrics
        .iter()
        .find(|m| m["name"] == "dup")
        .expect("dup");
    let points = dup["gauge"]["dataPoints"].as_array().expect("points");
    assert_eq!(points.len(), 1, "{dup}");
    assert_eq!(points[0]["asDouble"].as_f64(), Some(1.0));
    for name in ["nan_value", "pos_inf", "neg_inf"] {
        assert!(
            odd_metrics.iter().any(|m| m["name"] == name),
            "{name} missing"
        );
    }
    // Each reason is logged once per target, not every round.
    let log = daemon.stderr("scraper");
    assert_eq!(log.matches("job=endless").count(), 1, "{log}");
    // Memory stayed bounded: the peak RSS of the daemon.
    let status =
        std::fs::read_to_string(format!("/proc/{}/status", daemon.child.id())).expect("status");
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM");
    eprintln!("peak RSS {} MiB", hwm_kb / 1024);
    assert!(hwm_kb < 400 * 1024, "peak RSS {hwm_kb} kB");
    assert!(daemon.terminate().success());
}

/// PostgreSQL, run as `postgres` (it refuses root), killed with its process
/// group when the test ends.
#[test]
fn the_postgres_exporter_in_front_of_a_real_postgresql() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (pg_port, exp) = (free_port(), free_port());
    let _pg = common::testbed::postgres(d, pg_port, &[]);
    let bin = "/usr/bin/prometheus-postgres-exporter";
    assert!(
        Path::new(bin).exists(),
        "{bin}: scripts/test.sh installs it"
    );
    let elog = std::fs::File::create(d.join("pg_exporter.log")).expect("log");
    let mut exporter = Proc(
        Command::new(bin)
            .arg(format!("--web.listen-address=127.0.0.1:{exp}"))
            .env(
                "DATA_SOURCE_NAME",
                format!("postgresql://postgres@127.0.0.1:{pg_port}/postgres?sslmode=disable"),
            )
            .stdout(Stdio::from(elog.try_clone().expect("log")))
            .stderr(Stdio::from(elog))
            .spawn()
            .expect("postgres exporter"),
    );
    wait_for(Duration::from_secs(30), "postgres exporter", || {
        if let Ok(Some(st)) = exporter.0.try_wait() {
            panic!(
                "exporter exited {st}: {}",
                std::fs::read_to_string(d.join("pg_exporter.log")).unwrap_or_default()
            );
        }
        std::net::TcpStream::connect(("127.0.0.1", exp)).is_ok()
    });
    let _daemon = scraper(
        d,
        "scraper",
        &format!(
            r#"      global: {{ scrape_interval: 500ms, scrape_timeout: 5s }}
      scrape_configs:
        - job_name: postgres
          static_configs: [{{ targets: ["127.0.0.1:{exp}"] }}]
"#
        ),
    );
    let out = d.join("metrics.jsonl");
    let last = |name: &str| -> Option<Value> {
        metrics(&read_jsonl(&out))
            .into_iter()
            .rev()
            .map(|(_, m)| m)
            .find(|m| m["name"] == name)
    };
    let gauge = |m: &Value| m["gauge"]["dataPoints"][0]["asDouble"].as_f64();
    wait_for(Duration::from_secs(30), "pg_up = 1", || {
        last("pg_up").and_then(|m| gauge(&m)) == Some(1.0)
    });
    // The lock evidence #20 builds on: pg_locks_count by mode, as a gauge.
    let locks = last("pg_locks_count").expect("pg_locks_count");
    let modes: Vec<String> = locks["gauge"]["dataPoints"]
        .as_array()
        .expect("points")
        .iter()
        .filter_map(|p| {
            attr(&p["attributes"], "mode")
                .and_then(|v| v["stringValue"].as_str())
                .map(str::to_string)
        })
        .collect();
    assert!(modes.iter().any(|m| m == "accesssharelock"), "{modes:?}");
    assert!(last("pg_settings_max_connections")
        .and_then(|m| gauge(&m))
        .is_some_and(|v| v >= 1.0));
    assert!(last("pg_stat_database_xact_commit").is_some_and(|m| m["sum"]["isMonotonic"] == true));
}

/// Targets from a file (`file_sd_configs`), relabeled into the multi-target
/// pattern of the real redis_exporter (`/scrape?target=redis://…`, one
/// exporter for many Redis servers): each Redis is its own `instance`; a
/// server removed from the file stops being scraped and its series, `up`
/// included, are marked stale; one added is scraped.
#[test]
fn file_discovered_targets_come_and_go_through_the_multi_target_exporter() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (r1, r2, exp) = (free_port(), free_port(), free_port());
    let redis = |name: &str, port: u16| {
        start(
            d,
            name,
            "/usr/bin/redis-server",
            &[
                "--port".into(),
                port.to_string(),
                "--bind".into(),
                "127.0.0.1".into(),
                "--save".into(),
                String::new(),
            ],
            port,
        )
    };
    let _r1 = redis("redis1", r1);
    let _r2 = redis("redis2", r2);
    redis_cli(r2, &["SET", "only-on-2", "x"]);
    let _exporter = start(
        d,
        "redis_exporter",
        "/usr/bin/prometheus-redis-exporter",
        &[format!("-web.listen-address=127.0.0.1:{exp}")],
        exp,
    );
    let file = d.join("targets.json");
    let write = |ports: &[u16]| {
        let targets: Vec<String> = ports
            .iter()
            .map(|p| format!("\"redis://127.0.0.1:{p}\""))
            .collect();
        let tmp = d.join("targets.json.tmp");
        std::fs::write(
            &tmp,
            format!(
                "[{{\"targets\": [{}], \"labels\": {{\"team\": \"cache\"}}}}]",
                targets.join(",")
            ),
        )
        .expect("write");
        std::fs::rename(&tmp, &file).expect("rename");
    };
    write(&[r1]);
    let daemon = Daemon::start(
        d,
        "sd",
        &format!(
            r#"
receivers:
  prometheus:
    config:
      scrape_configs:
        - job_name: redis
          scrape_interval: 300ms
          metrics_path: /scrape
          file_sd_configs: [{{ files: ["{{dir}}/*.json"], refresh_interval: 5m }}]
          relabel_configs:
            - {{ source_labels: [__address__], target_label: __param_target }}
            - {{ source_labels: [__param_target], target_label: instance }}
            - {{ target_label: __address__, replacement: "127.0.0.1:{exp}" }}
{tail}"#,
            tail = causeway_scenarios::config::metrics_to_file("prometheus")
        ),
    );
    let out = d.join("metrics.jsonl");
    let instance_of = |rm: &Value| {
        attr(&rm["resource"]["attributes"], "service.instance.id")
            .and_then(|v| v["stringValue"].as_str())
            .unwrap_or("")
            .to_string()
    };
    // (instance, metric name, value or None when stale) in file order.
    let points = || -> Vec<(String, String, Option<f64>, Value)> {
        let mut v = Vec::new();
        for line in read_jsonl(&out) {
            for rm in line["resourceMetrics"].as_array().into_iter().flatten() {
                let inst = instance_of(rm);
                each_number_point(rm, |m, p| {
                    let stale = p["flags"] == 1;
                    let val = p["asDouble"].as_f64().filter(|_| !stale);
                    v.push((
                        inst.clone(),
                        m["name"].as_str().unwrap_or("").to_string(),
                        val,
                        p.clone(),
                    ));
                });
            }
        }
        v
    };
    let (i1, i2) = (
        format!("redis://127.0.0.1:{r1}"),
        format!("redis://127.0.0.1:{r2}"),
    );
    wait_for(
        Duration::from_secs(30),
        "the first Redis scraped through the exporter",
        || {
            points()
                .iter()
                .any(|(i, n, v, _)| *i == i1 && n == "redis_up" && *v == Some(1.0))
        },
    );
    // Its group label came along; the second server is not scraped yet.
    let ps = points();
    let p = ps
        .iter()
        .find(|(i, n, _, _)| *i == i1 && n == "redis_up")
        .expect("redis_up");
    assert_eq!(
        attr(&p.3["attributes"], "team").and_then(|v| v["stringValue"].as_str()),
        Some("cache")
    );
    assert!(!ps.iter().any(|(i, _, _, _)| *i == i2));
    // The file now lists the second server only.
    write(&[r2]);
    wait_for(
        Duration::from_secs(30),
        "the second scraped, the first stale",
        || {
            let ps = points();
            let second = ps
                .iter()
                .any(|(i, n, v, _)| *i == i2 && n == "redis_up" && *v == Some(1.0));
            let up_stale = ps
                .iter()
                .any(|(i, n, v, _)| *i == i1 && n == "up" && v.is_none());
            let series_stale = ps
                .iter()
                .any(|(i, n, v, _)| *i == i1 && n == "redis_connected_clients" && v.is_none());
            second && up_stale && series_stale
        },
    );
    // And no scrape of the first after its stale markers.
    let ps = points();
    let last_stale = ps
        .iter()
        .rposition(|(i, n, v, _)| *i == i1 && n == "up" && v.is_none())
        .expect("stale");
    assert!(
        !ps[last_stale + 1..]
            .iter()
            .any(|(i, n, v, _)| *i == i1 && n == "up" && v.is_some()),
        "the removed target was scraped again"
    );
    // The second server's own keyspace: keys of db0 is 1.
    assert!(ps.iter().any(|(i, n, v, p)| *i == i2
        && n == "redis_db_keys"
        && *v == Some(1.0)
        && attr(&p["attributes"], "db").and_then(|v| v["stringValue"].as_str()) == Some("db0")));
    assert!(daemon.terminate().success());
}

/// What `redis-cli -p {port} {args}` answers, line by line.
fn redis_lines(port: u16, args: &[&str]) -> Vec<String> {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// The Sentinel's own word on a master's replicas: (replicas not flagged
/// down or disconnected, sentinels that reach it, this one included).
fn sentinel_truth(sentinel: u16) -> (usize, usize) {
    let field = |lines: &[String], key: &str| -> Vec<String> {
        lines
            .chunks(2)
            .filter(|kv| kv[0] == key)
            .map(|kv| kv.get(1).cloned().unwrap_or_default())
            .collect()
    };
    let replicas = redis_lines(sentinel, &["SENTINEL", "REPLICAS", "shop"]);
    let ok = field(&replicas, "flags")
        .iter()
        .filter(|f| !f.contains("s_down") && !f.contains("o_down") && !f.contains("disconnected"))
        .count();
    let master = redis_lines(sentinel, &["SENTINEL", "MASTER", "shop"]);
    let others: usize = field(&master, "num-other-sentinels")
        .first()
        .and_then(|n| n.parse().ok())
        .expect("num-other-sentinels");
    (ok, others + 1)
}

/// A trace whose one client span called Redis at `port` for 50 ms, ending now.
fn redis_call(id: u8, port: u16) -> bytes::Bytes {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span};
    use prost::Message;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    let kv = |k: &str, v: any_value::Value| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    };
    let s = |v: &str| any_value::Value::StringValue(v.into());
    let span = |sid: u8, parent: Option<u8>, name: &str, kind, start, attrs| Span {
        trace_id: vec![id; 16],
        span_id: vec![sid; 8],
        parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
        name: name.into(),
        kind: kind as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: now,
        attributes: attrs,
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("cart"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: vec![
                    span(
                        1,
                        None,
                        "GET /cart",
                        span::SpanKind::Server,
                        now - 60_000_000,
                        vec![],
                    ),
                    span(
                        2,
                        Some(1),
                        "GET",
                        span::SpanKind::Client,
                        now - 50_000_000,
                        vec![
                            kv("db.system", s("redis")),
                            kv("server.address", s("127.0.0.1")),
                            kv("server.port", any_value::Value::IntValue(i64::from(port))),
                        ],
                    ),
                ],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
    .encode_to_vec()
    .into()
}

/// A real Redis Sentinel watching a real master with one replica, scraped
/// through redis_exporter: a trace that called the master carries, in its
/// `dependency` evidence, the replicas and sentinels the Sentinel reaches,
/// as the Sentinel itself reports them; after the replica is stopped and
/// the Sentinel flags it down, the next trace's count is one less.
#[test]
fn a_sentinel_tells_a_trace_that_called_its_master_how_many_replicas_it_reaches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (master, replica, sentinel, exp, otlp) = (
        free_port(),
        free_port(),
        free_port(),
        free_port(),
        free_port(),
    );
    let _master = common::testbed::redis_with(d, "master", master, &[]);
    let replica_proc = common::testbed::redis_with(
        d,
        "replica",
        replica,
        &["--replicaof", "127.0.0.1", &master.to_string()],
    );
    let conf = d.join("sentinel.conf");
    std::fs::write(
        &conf,
        format!(
            "port {sentinel}\nbind 127.0.0.1\ndir {}\nsentinel monitor shop 127.0.0.1 {master} 1\nsentinel down-after-milliseconds shop 1000\n",
            d.display()
        ),
    )
    .expect("sentinel.conf");
    let _sentinel = start(
        d,
        "sentinel",
        "/usr/bin/redis-server",
        &[conf.display().to_string(), "--sentinel".into()],
        sentinel,
    );
    wait_for(
        Duration::from_secs(30),
        "the Sentinel to reach the replica",
        || sentinel_truth(sentinel).0 == 1,
    );
    let _exporter = start(
        d,
        "redis_exporter",
        "/usr/bin/prometheus-redis-exporter",
        &[
            format!("-redis.addr=redis://127.0.0.1:{sentinel}"),
            format!("-web.listen-address=127.0.0.1:{exp}"),
        ],
        exp,
    );
    let _daemon = Daemon::start(
        d,
        "sentinel-rca",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{otlp}" }}
  prometheus:
    config:
      scrape_configs:
        - job_name: sentinel
          scrape_interval: 1s
          static_configs: [{{ targets: ["127.0.0.1:{exp}"] }}]
processors:
  correlate:
    dependencies: {{ sample_interval: 1s }}
exporters:
  file/traces: {{ path: "{{dir}}/traces.jsonl" }}
  file/metrics: {{ path: "{{dir}}/metrics.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [correlate], exporters: [file/traces] }}
    metrics: {{ receivers: [prometheus], processors: [correlate], exporters: [file/metrics] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    // The replica count as causeway took it in: (time, value) of each point.
    let ok_slaves = || -> Vec<(u64, f64)> {
        metrics_of_service(&read_jsonl(&d.join("metrics.jsonl")), "sentinel")
            .iter()
            .filter(|m| m["name"] == "redis_sentinel_master_ok_slaves")
            .flat_map(|m| {
                m["gauge"]["dataPoints"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|p| {
                Some((
                    p["timeUnixNano"].as_str()?.parse().ok()?,
                    p["asDouble"].as_f64()?,
                ))
            })
            .collect()
    };
    // Three seconds of the replica counted, so the trace's window sees no earlier value.
    wait_for(
        Duration::from_secs(60),
        "three seconds of one replica scraped",
        || {
            let pts = ok_slaves();
            let first = pts.iter().find(|(_, v)| *v == 1.0).map(|(t, _)| *t);
            first.is_some_and(|f| {
                pts.iter()
                    .any(|(t, v)| *v == 1.0 && *t >= f + 3_000_000_000)
            }) && pts.iter().rev().take(3).all(|(_, v)| *v == 1.0)
        },
    );
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let send = |id: u8| {
        rt.block_on(otlp_grpc_traces(
            &format!("127.0.0.1:{otlp}"),
            redis_call(id, master),
        ))
        .expect("export");
    };
    let truth_up = sentinel_truth(sentinel);
    send(1);
    // The replica stops; the Sentinel flags it down, and causeway scrapes that.
    drop(replica_proc);
    wait_for(
        Duration::from_secs(30),
        "the Sentinel to flag the replica down",
        || sentinel_truth(sentinel).0 == 0,
    );
    let truth_down = sentinel_truth(sentinel);
    wait_for(Duration::from_secs(30), "the lost replica scraped", || {
        ok_slaves().last().is_some_and(|(_, v)| *v == 0.0)
    });
    send(2);
    let evidence = |id: u8| -> Option<Value> {
        let tid = format!("{:02x}", id).repeat(16);
        let a = causeway_scenarios::send::read_annotated(&d.join("traces.jsonl"));
        let ev: Value = serde_json::from_str(a.get(&tid)?.root.get("rca.evidence")?).ok()?;
        ev["metrics"]
            .as_array()?
            .iter()
            .find(|m| m["kind"] == "dependency" && m["system"] == "redis_sentinel")
            .cloned()
    };
    wait_for(Duration::from_secs(60), "both traces analysed", || {
        evidence(1).is_some() && evidence(2).is_some()
    });
    let (up, down) = (evidence(1).unwrap(), evidence(2).unwrap());
    assert_eq!(up["address"], format!("127.0.0.1:{master}"), "{up}");
    assert_eq!(
        (up["ok_replicas"].as_f64(), up["ok_sentinels"].as_f64()),
        (Some(truth_up.0 as f64), Some(truth_up.1 as f64)),
        "the Sentinel reached the replica and itself: {up}"
    );
    assert_eq!(up["master_ok"].as_f64(), Some(1.0), "{up}");
    assert_eq!(
        (down["ok_replicas"].as_f64(), down["ok_sentinels"].as_f64()),
        (Some(truth_down.0 as f64), Some(truth_down.1 as f64)),
        "the replica the Sentinel lost is gone from the count: {down}"
    );
    assert_eq!(truth_up.0, truth_down.0 + 1);
}

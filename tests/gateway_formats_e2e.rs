//! The `ingress_nginx` preset against real NGINX writing ingress-nginx's
//! default `log-format-upstream` (the variables ingress-nginx's Lua sets,
//! `$proxy_upstream_name` and `$req_id`, set in the config here): an
//! upstream that answers, one tried after a dead one, and a 503 the ingress
//! answers itself, tailed by the real binary.

mod common;

use common::*;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

fn nginx(d: &Path, conf: &str, port: u16) -> Nginx {
    std::fs::write(d.join("nginx.conf"), conf).expect("conf");
    let log = std::fs::File::create(d.join("nginx.log")).expect("log");
    let bin = ["/usr/sbin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("/usr/sbin/nginx: scripts/test.sh installs nginx-light");
    let child = Command::new(bin)
        .args([
            "-c",
            &d.join("nginx.conf").display().to_string(),
            "-p",
            &d.display().to_string(),
        ])
        .stdout(Stdio::from(log.try_clone().expect("log")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start nginx");
    let mut n = Nginx(child);
    wait_for(Duration::from_secs(30), "nginx listening", || {
        if let Ok(Some(st)) = n.0.try_wait() {
            panic!(
                "nginx exited {st}: {}",
                std::fs::read_to_string(d.join("nginx.log")).unwrap_or_default()
            );
        }
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    n
}

fn str_attr(r: &serde_json::Value, k: &str) -> Option<String> {
    attr(&r["attributes"], k).and_then(|v| v["stringValue"].as_str().map(str::to_string))
}

fn num_attr(r: &serde_json::Value, k: &str) -> Option<f64> {
    attr(&r["attributes"], k).and_then(|v| {
        v["doubleValue"]
            .as_f64()
            .or_else(|| v["intValue"].as_str().and_then(|s| s.parse().ok()))
            .or_else(|| v["intValue"].as_f64())
    })
}

#[test]
fn ingress_nginx_default_format_from_real_nginx() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (port, backend, dead) = (free_port(), free_port(), free_port());
    let conf = format!(
        r#"
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
events {{ worker_connections 64; }}
http {{
  client_body_temp_path {d}/nginx-body;
  proxy_temp_path {d}/nginx-proxy;
  fastcgi_temp_path {d}/nginx-fastcgi;
  uwsgi_temp_path {d}/nginx-uwsgi;
  scgi_temp_path {d}/nginx-scgi;
  # ingress-nginx's default log-format-upstream, verbatim.
  log_format upstreaminfo '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent" $request_length $request_time [$proxy_upstream_name] [$proxy_alternative_upstream_name] $upstream_addr $upstream_response_length $upstream_response_time $upstream_status $req_id';
  upstream two {{ server 127.0.0.1:{dead}; server 127.0.0.1:{backend}; }}
  server {{ listen 127.0.0.1:{backend}; access_log off; location / {{ return 200 "ok"; }} }}
  server {{
    listen 127.0.0.1:{port};
    access_log {d}/access.log upstreaminfo;
    set $proxy_alternative_upstream_name "";
    set $req_id $request_id;
    location /api/ {{ set $proxy_upstream_name "default-api-80"; proxy_pass http://127.0.0.1:{backend}; }}
    location /retry/ {{ set $proxy_upstream_name "default-retry-80"; proxy_pass http://two; }}
    location /limited {{ set $proxy_upstream_name "default-limited-80"; return 503; }}
  }}
}}
"#,
        d = d.display()
    );
    let _nginx = nginx(d, &conf, port);
    let daemon = Daemon::start(
        d,
        "ingress",
        r#"
receivers:
  gateway_log:
    include: ["{dir}/access.log"]
    start_at: beginning
    format: ingress_nginx
    poll_interval: 50ms
exporters:
  file: { path: "{dir}/logs.jsonl" }
service:
  pipelines:
    logs: { receivers: [gateway_log], exporters: [file] }
  telemetry: { metrics: { address: "{telemetry}" } }
"#,
    );
    let client = http_client();
    let get = |path: &str| {
        client
            .get(format!("http://127.0.0.1:{port}{path}"))
            .send()
            .expect("request")
            .status()
            .as_u16()
    };
    assert_eq!(get("/api/orders?id=7"), 200);
    for i in 0..4 {
        assert_eq!(get(&format!("/retry/{i}")), 200);
    }
    assert_eq!(get("/limited"), 503);
    let out = d.join("logs.jsonl");
    wait_for(Duration::from_secs(20), "six records", || {
        log_records(&read_jsonl(&out)).len() >= 6
    });
    let records: Vec<serde_json::Value> = log_records(&read_jsonl(&out))
        .into_iter()
        .map(|x| x.2)
        .collect();
    assert_eq!(records.len(), 6);
    assert_eq!(
        daemon
            .metric("causeway_gateway_log_lines_total{component=\"gateway_log\",outcome=\"bad\"}"),
        Some(0.0)
    );
    let by_route = |route: &str| -> Vec<&serde_json::Value> {
        records
            .iter()
            .filter(|r| str_attr(r, "route_id").as_deref() == Some(route))
            .collect()
    };
    let api = by_route("default-api-80");
    assert_eq!(api.len(), 1);
    assert_eq!(num_attr(api[0], "http.response.status_code"), Some(200.0));
    assert_eq!(str_attr(api[0], "url.path").as_deref(), Some("/api/orders"));
    assert_eq!(
        str_attr(api[0], "http.request.method").as_deref(),
        Some("GET")
    );
    assert_eq!(
        str_attr(api[0], "server.address"),
        Some(format!("127.0.0.1:{backend}"))
    );
    assert!(num_attr(api[0], "http.server.request.duration").is_some());
    assert!(num_attr(api[0], "gateway.upstream.duration").is_some());
    assert_eq!(
        str_attr(api[0], "client.address").as_deref(),
        Some("127.0.0.1")
    );
    // The time is NGINX's $time_local, not when the line was read.
    assert!(
        api[0]["timeUnixNano"].as_str().is_some_and(|t| t != "0"),
        "{}",
        api[0]
    );

    let retries = by_route("default-retry-80");
    assert_eq!(retries.len(), 4);
    // Round robin over a dead and a live server: some requests tried both,
    // and their upstream time is the sum NGINX wrote ("0.000, 0.001").
    let both: Vec<_> = retries
        .iter()
        .filter(|r| str_attr(r, "server.address").is_some_and(|a| a.contains(", ")))
        .collect();
    assert!(
        !both.is_empty(),
        "no request tried the dead server first: {retries:?}"
    );
    for r in &both {
        let line = r["body"]["stringValue"].as_str().expect("line");
        let times: f64 = line
            .split(" [] ")
            .nth(1)
            .and_then(|rest| rest.split(' ').nth(4).map(|_| rest))
            .map(|rest| {
                // upstream_addr (2 parts), response lengths (2), then times (2)
                let w: Vec<&str> = rest.split(' ').collect();
                w[4].trim_end_matches(',').parse::<f64>().unwrap_or(0.0)
                    + w[5].parse::<f64>().unwrap_or(0.0)
            })
            .expect("times");
        let got = num_attr(r, "gateway.upstream.duration").expect("upstream duration");
        assert!((got - times).abs() < 1e-9, "{got} vs {times}: {line}");
    }

    let limited = by_route("default-limited-80");
    assert_eq!(limited.len(), 1);
    assert_eq!(
        num_attr(limited[0], "http.response.status_code"),
        Some(503.0)
    );
    assert!(
        str_attr(limited[0], "server.address").is_none(),
        "{}",
        limited[0]
    );
    assert_eq!(limited[0]["severityText"], "ERROR");
}

//! Helpers for end-to-end tests that run the real `causeway` binary.
#![allow(dead_code)]

pub mod kafka;
pub mod otlp_client;
pub mod peers;
pub mod starve;
pub mod testbed;

use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime};

pub const BIN: &str = env!("CARGO_BIN_EXE_causeway");

/// A free TCP port on 127.0.0.1 (bound then released).
pub fn free_port() -> u16 {
    // The kernel may hand a released port out again; a test that asks for
    // two (a listener and the telemetry server) must not get the same one.
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        if GIVEN.lock().expect("ports").insert(port) {
            return port;
        }
    }
}

/// Poll `f` until it is true; panic with `what` after `timeout`.
pub fn wait_for(timeout: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Poll `f` until it is true; after `timeout`, panic with `what` and what
/// `context` says then (the state to debug a timeout from).
pub fn wait_for_or(
    timeout: Duration,
    what: &str,
    mut f: impl FnMut() -> bool,
    context: impl FnOnce() -> String,
) {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > timeout {
            panic!(
                "timed out after {timeout:?} waiting for {what}\n{}",
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A plain HTTP/1.0 GET; returns (status, body).
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64
}

/// A blocking HTTP client (with the process's rustls provider installed).
pub fn http_client() -> reqwest::blocking::Client {
    causeway_core::tls::install_crypto_provider();
    reqwest::blocking::Client::new()
}

/// A child process killed with its process group when dropped (servers
/// that fork, such as `runuser` starting PostgreSQL, leave nothing behind);
/// the name says which, in failure messages.
pub struct Proc(pub Child, pub &'static str);

impl Drop for Proc {
    fn drop(&mut self) {
        Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0.id())])
            .stderr(Stdio::null())
            .status()
            .ok();
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// The caller's turn to run alone among the tests of its binary that ask:
/// a test bed or a stress test is a whole-machine workload (services under
/// load, a daemon analysing them), and two at once on two cores make the
/// machine the fault (healthy requests really queue, profiles ship late).
pub fn alone() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A running daemon.
pub struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
    pub telemetry: String,
}

impl Daemon {
    /// Write `config` (with `{dir}` and `{telemetry}` replaced) and start the
    /// daemon on it; returns once `/readyz` answers 200.
    pub fn start(dir: &Path, name: &str, config: &str) -> Daemon {
        Self::spawn_config(dir, name, config, &[])
    }

    /// Like [`Daemon::start`], with environment variables.
    pub fn spawn_config(dir: &Path, name: &str, config: &str, env: &[(&str, String)]) -> Daemon {
        let telemetry = format!("127.0.0.1:{}", free_port());
        let config = config
            .replace("{dir}", &dir.display().to_string())
            .replace("{telemetry}", &telemetry);
        let path = dir.join(format!("{name}.yaml"));
        std::fs::write(&path, config).expect("write config");
        Self::spawn(
            dir,
            name,
            &["--config", &path.display().to_string()],
            env,
            telemetry,
        )
    }

    /// Start the binary with `args` and environment, without waiting for
    /// it to be ready (its telemetry server may need TLS and credentials).
    pub fn spawn_unready(dir: &Path, name: &str, args: &[&str], env: &[(&str, String)]) -> Daemon {
        let stdout = std::fs::File::create(dir.join(format!("{name}.stdout"))).expect("stdout");
        let stderr = std::fs::File::create(dir.join(format!("{name}.stderr"))).expect("stderr");
        // `CAUSEWAY_TEST_BIN` runs the tests against another build (an older
        // commit's binary, to show a test bed failing before a change).
        let bin = std::env::var_os("CAUSEWAY_TEST_BIN").unwrap_or_else(|| BIN.into());
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .current_dir(dir)
            .stdout(stdout)
            .stderr(Stdio::from(stderr));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("spawn causeway");
        Daemon {
            child,
            dir: dir.to_path_buf(),
            telemetry: String::new(),
        }
    }

    /// Start the binary with `args` and environment; `telemetry` is where `/readyz` is.
    pub fn spawn(
        dir: &Path,
        name: &str,
        args: &[&str],
        env: &[(&str, String)],
        telemetry: String,
    ) -> Daemon {
        let mut d = Self::spawn_unready(dir, name, args, env);
        d.telemetry = telemetry;
        let name = name.to_string();
        let start = Instant::now();
        loop {
            if let Some((200, _)) = http_get(&d.telemetry, "/readyz") {
                break;
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                let err =
                    std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap_or_default();
                panic!("causeway {name} exited with {status} before ready:\n{err}");
            }
            // A safety net, not a measure: a debug build on a busy machine
            // may take a while to start.
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "causeway {name} not ready in 180s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    /// Send SIGTERM and wait for the exit.
    pub fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -TERM failed");
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "causeway did not exit within 60s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The value of one series on `/metrics` (name with labels, exactly as rendered).
    pub fn metric(&self, series: &str) -> Option<f64> {
        let (_, body) = http_get(&self.telemetry, "/metrics")?;
        body.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
    }

    pub fn stderr(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{name}.stderr"))).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // Already exited is fine: nothing to clean up then.
        if self.child.kill().is_ok() {
            self.child.wait().ok();
        }
    }
}

/// The `alert.labels` (JSON text) of every alert record in a logs file
/// written by the file exporter.
pub fn alert_labels(path: &Path) -> Vec<String> {
    log_records(&read_jsonl(path))
        .iter()
        .filter_map(|(_, _, r)| attr(&r["attributes"], "alert.labels"))
        .filter_map(|v| v["stringValue"].as_str().map(String::from))
        .collect()
}

/// Every JSON line of a file (missing file: none).
/// The complete lines only: a line still being written (no newline yet)
/// is not read; a complete line that is not JSON fails the test.
pub fn read_jsonl(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).unwrap_or_default();
    let complete = bytes
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(&bytes[..0], |i| &bytes[..=i]);
    complete
        .split(|&b| b == b'\n')
        .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
        .map(|l| serde_json::from_slice(l).expect("valid JSON line"))
        .collect()
}

/// Every span in OTLP JSON lines, with its resource and scope: (resource, scope, span).
pub fn spans(lines: &[Value]) -> Vec<(Value, Value, Value)> {
    let mut out = vec![];
    for l in lines {
        for rs in l["resourceSpans"].as_array().into_iter().flatten() {
            for ss in rs["scopeSpans"].as_array().into_iter().flatten() {
                for sp in ss["spans"].as_array().into_iter().flatten() {
                    out.push((rs["resource"].clone(), ss["scope"].clone(), sp.clone()));
                }
            }
        }
    }
    out
}

/// Every log record: (resource, scope, record).
pub fn log_records(lines: &[Value]) -> Vec<(Value, Value, Value)> {
    let mut out = vec![];
    for l in lines {
        for rl in l["resourceLogs"].as_array().into_iter().flatten() {
            for sl in rl["scopeLogs"].as_array().into_iter().flatten() {
                for r in sl["logRecords"].as_array().into_iter().flatten() {
                    out.push((rl["resource"].clone(), sl["scope"].clone(), r.clone()));
                }
            }
        }
    }
    out
}

/// Every metric: (resource, metric).
pub fn metrics(lines: &[Value]) -> Vec<(Value, Value)> {
    let mut out = vec![];
    for l in lines {
        for rm in l["resourceMetrics"].as_array().into_iter().flatten() {
            for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
                for m in sm["metrics"].as_array().into_iter().flatten() {
                    out.push((rm["resource"].clone(), m.clone()));
                }
            }
        }
    }
    out
}

/// The metrics of the resources whose `service.name` is `service` (a
/// scrape job's, for the `prometheus` receiver), from OTLP JSON lines.
pub fn metrics_of_service(lines: &[Value], service: &str) -> Vec<Value> {
    metrics(lines)
        .into_iter()
        .filter(|(r, _)| {
            attr(&r["attributes"], "service.name").and_then(|v| v["stringValue"].as_str())
                == Some(service)
        })
        .map(|(_, m)| m)
        .collect()
}

/// The value of attribute `key` in an OTLP JSON attribute list.
pub fn attr<'a>(attrs: &'a Value, key: &str) -> Option<&'a Value> {
    attrs
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)
        .map(|kv| &kv["value"])
}

/// Send one encoded `ExportTraceServiceRequest` over OTLP/gRPC on a new connection.
pub async fn otlp_grpc_traces(
    addr: &str,
    body: bytes::Bytes,
) -> Result<
    opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
    tonic::Status,
> {
    use causeway_core::grpc::{export_path, ClientCodec};
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|e| tonic::Status::internal(e.to_string()))?
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut client = tonic::client::Grpc::new(channel);
    client
        .ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    client
        .unary(
            tonic::Request::new(vec![body]),
            tonic::codegen::http::uri::PathAndQuery::from_static(export_path(
                causeway_core::Signal::Traces,
            )),
            ClientCodec::default(),
        )
        .await
        .map(tonic::Response::into_inner)
}

/// Serve `app` on 127.0.0.1 from a thread of its own (with its own runtime,
/// so blocking tests can use it); returns `http://host:port`.
pub fn serve_in_thread(app: axum::Router) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.set_nonblocking(true).expect("nonblocking");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).expect("listener");
            axum::serve(l, app).await.ok();
        });
    });
    url
}

/// An Alertmanager-compatible server on 127.0.0.1 (`POST /api/v2/alerts`),
/// keeping every alert it is sent with the time it arrived.
pub struct AlertSink {
    pub url: String,
    pub got: std::sync::Arc<std::sync::Mutex<Vec<(SystemTime, Value)>>>,
}

impl AlertSink {
    pub fn start() -> AlertSink {
        let got: std::sync::Arc<std::sync::Mutex<Vec<(SystemTime, Value)>>> = Default::default();
        let g = got.clone();
        let app = axum::Router::new().route(
            "/api/v2/alerts",
            axum::routing::post(move |body: axum::body::Bytes| {
                let g = g.clone();
                async move {
                    let Ok(Value::Array(alerts)) = serde_json::from_slice(&body) else {
                        return axum::http::StatusCode::BAD_REQUEST;
                    };
                    let now = SystemTime::now();
                    let mut g = g.lock().expect("lock");
                    g.extend(alerts.into_iter().map(|a| (now, a)));
                    axum::http::StatusCode::OK
                }
            }),
        );
        AlertSink {
            url: serve_in_thread(app),
            got,
        }
    }

    pub fn alerts(&self) -> Vec<(SystemTime, Value)> {
        self.got.lock().expect("lock").clone()
    }
}

/// A test certificate authority.
pub struct Ca {
    pub cert: rcgen::Certificate,
    pub key: rcgen::KeyPair,
}

/// A self-signed CA named `name`.
pub fn ca(name: &str) -> Ca {
    let key = rcgen::KeyPair::generate().expect("test TLS material");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("test TLS material");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    let cert = p.self_signed(&key).expect("test TLS material");
    Ca { cert, key }
}

/// A leaf signed by `ca`, written as `<name>.crt` / `<name>.key`.
pub fn leaf(dir: &Path, ca: &Ca, name: &str, sans: &[&str], client: bool) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("test TLS material");
    let mut p =
        rcgen::CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .expect("test TLS material");
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    p.extended_key_usages = vec![if client {
        rcgen::ExtendedKeyUsagePurpose::ClientAuth
    } else {
        rcgen::ExtendedKeyUsagePurpose::ServerAuth
    }];
    let cert = p
        .signed_by(&key, &ca.cert, &ca.key)
        .expect("test TLS material");
    let (c, k) = (
        dir.join(format!("{name}.crt")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).expect("test TLS material");
    std::fs::write(&k, key.serialize_pem()).expect("test TLS material");
    (c.display().to_string(), k.display().to_string())
}

/// A rustls client trusting `ca_pem`, with a client identity (mTLS) if given.
pub fn client_config(ca_pem: &str, identity: Option<(&str, &str)>) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(c.expect("test TLS material"))
            .expect("test TLS material");
    }
    let b = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("test TLS material")
    .with_root_certificates(roots);
    match identity {
        Some((c, k)) => b
            .with_client_auth_cert(
                CertificateDer::pem_file_iter(c)
                    .expect("test TLS material")
                    .map(|x| x.expect("test TLS material"))
                    .collect(),
                PrivateKeyDer::from_pem_file(k).expect("test TLS material"),
            )
            .expect("test TLS material"),
        None => b.with_no_client_auth(),
    }
}

/// A blocking HTTPS client on `cfg`.
pub fn https(cfg: rustls::ClientConfig) -> reqwest::blocking::Client {
    causeway_core::tls::install_crypto_provider();
    reqwest::blocking::Client::builder()
        .use_preconfigured_tls(cfg)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("test TLS material")
}

/// The page at `url` after its scripts ran for `budget_ms` of virtual time:
/// the DOM, or a screenshot written to `shot`.
pub fn chromium(url: &str, budget_ms: u64, shot: Option<&Path>) -> String {
    let profile = tempfile::tempdir().expect("chromium profile dir");
    let mut c = Command::new("chromium");
    c.args([
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        "--window-size=1500,1000",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("--virtual-time-budget={budget_ms}"));
    match shot {
        Some(p) => c.arg(format!("--screenshot={}", p.display())),
        None => c.arg("--dump-dom"),
    };
    let out = c
        .arg(url)
        .output()
        .expect("chromium (Debian's; scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "chromium {url}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The config of a sink daemon: OTLP/gRPC on `grpc` into the file `file`
/// (under the daemon's directory; `{signal}` names the signal) for each
/// of `pipelines` (`traces`, `logs`, `all`, ...), its telemetry served.
pub fn sink_config(grpc: u16, file: &str, pipelines: &[&str]) -> String {
    let pipelines: String = pipelines
        .iter()
        .map(|p| format!("    {p}: {{ receivers: [otlp], exporters: [file] }}\n"))
        .collect();
    format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{grpc}" }}
exporters:
  file: {{ path: "{{dir}}/{file}" }}
service:
  pipelines:
{pipelines}  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    )
}

/// The incident records of a logs file: (state, attributes by key as text).
pub fn incident_records(path: &Path) -> Vec<std::collections::BTreeMap<String, Value>> {
    log_records(&read_jsonl(path))
        .into_iter()
        .filter(|(_, _, r)| {
            attr(&r["attributes"], "event.name").and_then(|v| v["stringValue"].as_str())
                == Some("causeway.incident")
        })
        .map(|(_, _, r)| {
            r["attributes"]
                .as_array()
                .expect("a record's attributes")
                .iter()
                .map(|kv| {
                    let v = &kv["value"];
                    let v = v
                        .get("stringValue")
                        .cloned()
                        .or_else(|| v.get("doubleValue").cloned())
                        .or_else(|| {
                            v.get("intValue").map(|i| {
                                Value::from(i.as_str().map_or_else(
                                    || i.as_i64().expect("an integer"),
                                    |s| s.parse().expect("an integer"),
                                ))
                            })
                        })
                        .unwrap_or(Value::Null);
                    (kv["key"].as_str().expect("a key").to_string(), v)
                })
                .collect()
        })
        .collect()
}

/// Every number point (of a gauge or a sum) of the OTLP/JSON resource
/// metrics `rm`, with its metric: `f(metric, point)`.
pub fn each_number_point(
    rm: &serde_json::Value,
    mut f: impl FnMut(&serde_json::Value, &serde_json::Value),
) {
    for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
        for m in sm["metrics"].as_array().into_iter().flatten() {
            let data = m.get("gauge").or_else(|| m.get("sum"));
            for p in data
                .and_then(|x| x["dataPoints"].as_array())
                .into_iter()
                .flatten()
            {
                f(m, p);
            }
        }
    }
}

/// A daemon `name` in `dir` whose prometheus receiver scrapes as `config`
/// says (the receiver's `config:` body, indented six spaces) and writes
/// what it scrapes to `{dir}/metrics.jsonl`.
pub fn scraper(dir: &Path, name: &str, config: &str) -> Daemon {
    Daemon::start(
        dir,
        name,
        &format!(
            "receivers:\n  prometheus:\n    config:\n{config}{}",
            causeway_scenarios::config::metrics_to_file("prometheus")
        ),
    )
}

//! The real Go peers `scripts/peers.sh` builds: Jaeger v2 and the
//! OpenTelemetry Collector, each started per test on free 127.0.0.1 ports.
#![allow(dead_code)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, http_get, Proc};

fn peer(var: &str, what: &str) -> PathBuf {
    let p = std::env::var(var).map(PathBuf::from).unwrap_or_default();
    assert!(
        p.is_file(),
        "no {what}: run the tests with scripts/test.sh, or `. scripts/peers.sh` first (it builds it from the Go module proxy and sets {var})"
    );
    p
}

/// The Jaeger v2 binary (`$CAUSEWAY_JAEGER`).
pub fn jaeger_bin() -> PathBuf {
    peer("CAUSEWAY_JAEGER", "Jaeger binary")
}

/// The Collector binary (`$CAUSEWAY_OTELCOL`).
pub fn otelcol_bin() -> PathBuf {
    peer("CAUSEWAY_OTELCOL", "OpenTelemetry Collector binary")
}

/// Wait until `port` on 127.0.0.1 accepts connections, or the process exits.
fn wait_listening(p: &mut Proc, port: u16, log: &Path) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = p.0.try_wait() {
            panic!(
                "{} exited with {status}:\n{}",
                p.1,
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{} not listening on {port} in 60s:\n{}",
            p.1,
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Jaeger v2 with in-memory storage: OTLP in over gRPC and HTTP, its query
/// service (`/api/traces/{id}`, `/api/v3/traces/{id}`, the UI's routes) on
/// `query`.
pub struct Jaeger {
    pub otlp_grpc: u16,
    pub otlp_http: u16,
    pub query: u16,
    pub dir: PathBuf,
    proc: Proc,
}

impl Jaeger {
    pub fn start(dir: &Path) -> Jaeger {
        let (otlp_grpc, otlp_http, query, query_grpc) =
            (free_port(), free_port(), free_port(), free_port());
        let dir = dir.join("jaeger");
        std::fs::create_dir_all(&dir).expect("jaeger dir");
        let config = format!(
            r#"
service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics: {{ level: none }}
    logs: {{ level: info }}
extensions:
  jaeger_query:
    storage: {{ traces: mem }}
    http: {{ endpoint: "127.0.0.1:{query}" }}
    grpc: {{ endpoint: "127.0.0.1:{query_grpc}" }}
  jaeger_storage:
    backends:
      mem: {{ memory: {{ max_traces: 100000 }} }}
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{otlp_grpc}" }}
      http: {{ endpoint: "127.0.0.1:{otlp_http}" }}
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
"#
        );
        let cfg = dir.join("config.yaml");
        std::fs::write(&cfg, config).expect("jaeger config");
        let log = dir.join("jaeger.log");
        let out = std::fs::File::create(&log).expect("jaeger log");
        let child = Command::new(jaeger_bin())
            .arg("--config")
            .arg(&cfg)
            .current_dir(&dir)
            .stdout(Stdio::from(out.try_clone().expect("log")))
            .stderr(Stdio::from(out))
            .process_group(0)
            .spawn()
            .expect("start jaeger");
        let mut proc = Proc(child, "jaeger");
        for port in [otlp_grpc, otlp_http, query] {
            wait_listening(&mut proc, port, &log);
        }
        Jaeger {
            otlp_grpc,
            otlp_http,
            query,
            dir,
            proc,
        }
    }

    /// `127.0.0.1:{query}`.
    pub fn query_addr(&self) -> String {
        format!("127.0.0.1:{}", self.query)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("jaeger.log")).unwrap_or_default()
    }
}

/// An OpenTelemetry Collector run on a config (with `{dir}` replaced).
pub struct Collector {
    pub dir: PathBuf,
    pub name: String,
    proc: Proc,
}

impl Collector {
    /// Start the Collector on `config`; returns when every port in `ports`
    /// accepts connections.
    pub fn start(dir: &Path, name: &str, config: &str, ports: &[u16]) -> Collector {
        Collector::start_with(dir, name, config, ports, &[])
    }

    /// The Collector whose OTLP profiles are causeway's (v0.148.0, OTLP
    /// 1.10's profiles proto), with its profiles feature gate on.
    pub fn start_profiles(dir: &Path, name: &str, config: &str, ports: &[u16]) -> Collector {
        Collector::launch(
            &peer(
                "CAUSEWAY_OTELCOL_PROFILES",
                "OpenTelemetry Collector v0.148.0 binary",
            ),
            &["--feature-gates=service.profilesSupport"],
            dir,
            name,
            config,
            ports,
        )
    }

    /// [`Collector::start`] with more arguments (feature gates).
    pub fn start_with(
        dir: &Path,
        name: &str,
        config: &str,
        ports: &[u16],
        args: &[&str],
    ) -> Collector {
        Collector::launch(&otelcol_bin(), args, dir, name, config, ports)
    }

    /// `bin` on `config` (`{dir}` replaced) in `dir`, once it listens on
    /// `ports`; `args` after the config's.
    fn launch(
        bin: &Path,
        args: &[&str],
        dir: &Path,
        name: &str,
        config: &str,
        ports: &[u16],
    ) -> Collector {
        let cfg = dir.join(format!("{name}.yaml"));
        std::fs::write(&cfg, config.replace("{dir}", &dir.display().to_string()))
            .expect("collector config");
        let log = dir.join(format!("{name}.log"));
        let out = std::fs::File::create(&log).expect("collector log");
        let child = Command::new(bin)
            .arg("--config")
            .arg(&cfg)
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::from(out.try_clone().expect("log")))
            .stderr(Stdio::from(out))
            .process_group(0)
            .spawn()
            .expect("start the collector");
        let mut proc = Proc(child, "otelcol");
        for &port in ports {
            wait_listening(&mut proc, port, &log);
        }
        Collector {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            proc,
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join(format!("{}.log", self.name))).unwrap_or_default()
    }

    /// Stop with SIGTERM (the Collector flushes its exporters) and wait.
    pub fn terminate(mut self) {
        let pid = self.proc.0.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().ok();
        let start = Instant::now();
        while self.proc.0.try_wait().ok().flatten().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "collector did not stop"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// `otelcol validate --config FILE`: Ok, or the Collector's own error text.
pub fn otelcol_validate(config: &Path) -> Result<(), String> {
    let out = Command::new(otelcol_bin())
        .arg("validate")
        .arg("--config")
        .arg(config)
        .output()
        .expect("run otelcol validate");
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// GET `path` from Jaeger's query service until `f` accepts the JSON answer.
pub fn jaeger_get_until(
    addr: &str,
    path: &str,
    timeout: Duration,
    mut f: impl FnMut(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        if let Some((code, body)) = http_get(addr, path) {
            if code == 200 {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body) {
                    if f(&v) {
                        return v;
                    }
                }
            }
            last = format!("{code}: {}", body.chars().take(300).collect::<String>());
        }
        assert!(
            start.elapsed() < timeout,
            "jaeger {path} not as expected in {timeout:?}; last answer {last}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

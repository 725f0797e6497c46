//! Nothing that serves data is open beyond loopback without TLS and
//! credentials unless the config says so (`service.insecure_expose`):
//! the telemetry server (the page, its API with kept traces and their log
//! lines, `/metrics`), zpages and pprof. Through the real binary.

mod common;

use common::{free_port, http_client, http_get, Daemon, BIN};
use std::process::Command;
use std::time::{Duration, Instant};

fn config(telemetry: &str, extra_service: &str, extensions: &str) -> String {
    format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{otlp}" }}
exporters:
  nop:
{extensions}
service:
{extra_service}
  pipelines:
    traces: {{ receivers: [otlp], exporters: [nop] }}
  telemetry:
    metrics: {{ address: "{telemetry}" }}
"#,
        otlp = free_port()
    )
}

fn validate(dir: &std::path::Path, text: &str) -> (bool, String) {
    let path = dir.join("v.yaml");
    std::fs::write(&path, text).expect("write");
    let out = Command::new(BIN)
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .expect("validate");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn an_exposed_page_without_credentials_is_refused_naming_the_key_and_the_opt_out_serves_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let exposed = config(&format!("0.0.0.0:{port}"), "", "");
    let (ok, said) = validate(dir.path(), &exposed);
    assert!(!ok, "validate accepts an exposed page:\n{said}");
    assert!(
        said.contains("service.telemetry.metrics.address")
            && said.contains("service.insecure_expose: true")
            && said.contains("the page and its API"),
        "{said}"
    );
    // `run` refuses too, before binding anything.
    let path = dir.path().join("run.yaml");
    std::fs::write(&path, &exposed).expect("write");
    let start = Instant::now();
    let out = Command::new(BIN)
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .expect("run");
    assert!(
        !out.status.success(),
        "the daemon started with an exposed page"
    );
    assert!(start.elapsed() < Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("service.telemetry.metrics.address"), "{err}");
    assert!(http_get(&format!("127.0.0.1:{port}"), "/healthz").is_none());

    // With TLS and credentials set, or on loopback, nothing to opt out of.
    let (ok, said) = validate(dir.path(), &config(&format!("127.0.0.1:{port}"), "", ""));
    assert!(ok, "{said}");
    assert!(!said.contains("insecure_expose"), "{said}");

    // The explicit opt-out: a warning, and the page is served on every interface.
    let opted = config(&format!("0.0.0.0:{port}"), "  insecure_expose: true", "");
    let (ok, said) = validate(dir.path(), &opted);
    assert!(ok, "{said}");
    assert!(
        said.contains("insecure_expose") && said.contains("without TLS and credentials"),
        "the opt-out is not said: {said}"
    );
    let path = dir.path().join("opted.yaml");
    std::fs::write(&path, &opted).expect("write");
    // Bound on every interface: loopback reaches it too.
    let d = Daemon::spawn(
        dir.path(),
        "opted",
        &["--config", &path.display().to_string()],
        &[],
        format!("127.0.0.1:{port}"),
    );
    assert!(matches!(
        http_get(&d.telemetry, "/api/pipelines"),
        Some((200, _))
    ));
    assert!(d.terminate().success());
}

#[test]
fn zpages_and_pprof_beyond_loopback_are_refused_and_zpages_asks_for_its_credentials() {
    let dir = tempfile::tempdir().expect("tempdir");
    let zp = free_port();
    let pp = free_port();
    let exts = format!(
        "extensions:\n  zpages: {{ endpoint: \"0.0.0.0:{zp}\" }}\n  pprof: {{ endpoint: \"0.0.0.0:{pp}\" }}\n"
    );
    let (ok, said) = validate(
        dir.path(),
        &config("127.0.0.1:0", "  extensions: [zpages, pprof]", &exts),
    );
    assert!(!ok, "{said}");
    for key in ["extensions.zpages.endpoint", "extensions.pprof.endpoint"] {
        assert!(said.contains(key), "{key} not named:\n{said}");
    }
    // On loopback with `auth`, zpages answers only with the token.
    let exts = format!(
        "extensions:\n  zpages: {{ endpoint: \"127.0.0.1:{zp}\", auth: {{ bearer_token: s3cret-zp }} }}\n"
    );
    let d = Daemon::start(
        dir.path(),
        "zp",
        &config("{telemetry}", "  extensions: [zpages]", &exts),
    );
    let url = format!("http://127.0.0.1:{zp}/debug/servicez");
    let c = http_client();
    let without = c.get(&url).send().expect("get").status().as_u16();
    assert_eq!(without, 401);
    let with = c
        .get(&url)
        .bearer_auth("s3cret-zp")
        .send()
        .expect("get")
        .status()
        .as_u16();
    assert_eq!(with, 200);
    assert!(d.terminate().success());
}

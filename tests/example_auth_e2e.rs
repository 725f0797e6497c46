//! Every example that asks for credentials answers a client without them,
//! or with wrong ones, with a refusal that says why: OTLP/HTTP a 401 with
//! its reason over HTTP/1.1 and over HTTP/2 (not a reset stream), OTLP/gRPC
//! `UNAUTHENTICATED`, the telemetry server a 401. Each example runs as
//! shipped, its listeners moved to free ports on 127.0.0.1, its data
//! directory to a temporary one, and its secrets (certificate, tokens)
//! given as a deployment gives them: a TLS directory and environment
//! variables.

#![allow(clippy::unwrap_used)] // test helpers: a failure is the test failing

mod common;

use common::otlp_client::{grpc_export, trace_body};
use common::*;
use std::time::Duration;

const OTLP_TOKEN: &str = "example-otlp-t0ken";
const TELEMETRY_TOKEN: &str = "example-telemetry-t0ken";

/// What an example serves, once started.
struct Running {
    daemon: Daemon,
    ca_pem: String,
    /// `(protocol, port)` of each OTLP listener it has.
    otlp: Vec<(String, u16)>,
    telemetry: String,
    _dir: tempfile::TempDir,
}

/// Start `examples/{name}` with its listeners on free loopback ports.
fn start(name: &str) -> Running {
    causeway_core::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = ca("example CA");
    let (cert, key) = leaf(d, &ca, "server", &["localhost", "127.0.0.1"], false);
    let tls_dir = d.join("tls");
    std::fs::create_dir_all(&tls_dir).unwrap();
    std::fs::copy(&cert, tls_dir.join("tls.crt")).unwrap();
    std::fs::copy(&key, tls_dir.join("tls.key")).unwrap();
    let mut text = std::fs::read_to_string(format!("examples/{name}")).unwrap();
    let mut otlp = Vec::new();
    for (default, protocol) in [("0.0.0.0:4317", "grpc"), ("0.0.0.0:4318", "http")] {
        if text.contains(default) {
            let port = free_port();
            text = text.replace(default, &format!("127.0.0.1:{port}"));
            otlp.push((protocol.to_string(), port));
        }
    }
    let telemetry = format!("127.0.0.1:{}", free_port());
    assert!(
        text.contains("0.0.0.0:8888"),
        "{name}: its telemetry address moved"
    );
    text = text
        .replace("0.0.0.0:8888", &telemetry)
        .replace("/var/lib/causeway", &d.join("data").display().to_string());
    let path = d.join(name);
    std::fs::write(&path, text).unwrap();
    let env = [
        ("CAUSEWAY_TLS_DIR", tls_dir.display().to_string()),
        ("CAUSEWAY_OTLP_TOKEN", OTLP_TOKEN.to_string()),
        ("CAUSEWAY_TELEMETRY_TOKEN", TELEMETRY_TOKEN.to_string()),
        ("CAUSEWAY_DATA_DIR", d.join("data").display().to_string()),
        ("POD_NAME", "example-0".to_string()),
        // Nothing answers there: the example starts without its peers.
        ("KAFKA_BROKERS", format!("127.0.0.1:{}", free_port())),
    ];
    // Ready when /readyz answers over its TLS (without credentials: probes).
    let daemon = Daemon::spawn_unready(
        d,
        "example",
        &["--config", &path.display().to_string()],
        &env,
    );
    let client = https(client_config(&ca.cert.pem(), None));
    wait_for(Duration::from_secs(180), &format!("{name} ready"), || {
        client
            .get(format!("https://{telemetry}/readyz"))
            .send()
            .is_ok_and(|r| r.status() == 200)
    });
    Running {
        daemon,
        ca_pem: ca.cert.pem(),
        otlp,
        telemetry,
        _dir: dir,
    }
}

/// A TLS client for `ca_pem` that offers only `alpn` (`h2` or `http/1.1`).
fn client(ca_pem: &str, alpn: &[u8]) -> reqwest::blocking::Client {
    let mut tls = client_config(ca_pem, None);
    tls.alpn_protocols = vec![alpn.to_vec()];
    let b = reqwest::blocking::Client::builder()
        .use_preconfigured_tls(tls)
        .timeout(Duration::from_secs(30));
    let b = if alpn == b"h2" {
        b.http2_prior_knowledge()
    } else {
        b.http1_only()
    };
    b.build().unwrap()
}

/// Every credential check of the running example refuses with a reason.
fn refuses_with_a_reason(name: &str) {
    let r = start(name);
    assert!(!r.otlp.is_empty(), "{name}: no OTLP listener");
    for (protocol, port) in &r.otlp {
        match protocol.as_str() {
            "http" => {
                for (alpn, version) in [
                    (&b"http/1.1"[..], reqwest::Version::HTTP_11),
                    (b"h2", reqwest::Version::HTTP_2),
                ] {
                    let c = client(&r.ca_pem, alpn);
                    for token in [None, Some("wrong-token")] {
                        let mut req = c
                            .post(format!("https://localhost:{port}/v1/traces"))
                            .header("content-type", "application/x-protobuf")
                            .body(trace_body());
                        if let Some(t) = token {
                            req = req.header("authorization", format!("Bearer {t}"));
                        }
                        let resp = req.send().unwrap_or_else(|e| {
                            panic!("{name}: OTLP/HTTP {version:?} with token {token:?}: no answer: {e:?}")
                        });
                        assert_eq!(resp.version(), version, "{name}");
                        assert_eq!(resp.status(), 401, "{name}: {version:?}, token {token:?}");
                        assert_eq!(
                            resp.headers()
                                .get("www-authenticate")
                                .map(|v| v.to_str().unwrap_or("")),
                            Some("Bearer"),
                            "{name}"
                        );
                        let body = resp.text().unwrap();
                        assert!(
                            body.contains("missing or wrong credentials"),
                            "{name}: {body}"
                        );
                    }
                    // The right token is served.
                    let ok = c
                        .post(format!("https://localhost:{port}/v1/traces"))
                        .header("content-type", "application/x-protobuf")
                        .header("authorization", format!("Bearer {OTLP_TOKEN}"))
                        .body(trace_body())
                        .send()
                        .unwrap();
                    assert_eq!(ok.status(), 200, "{name}: {version:?} with the token");
                }
            }
            "grpc" => {
                let tls = tonic::transport::ClientTlsConfig::new()
                    .ca_certificate(tonic::transport::Certificate::from_pem(&r.ca_pem))
                    .domain_name("localhost");
                let rt = tokio::runtime::Runtime::new().unwrap();
                for token in [None, Some("wrong-token")] {
                    let e = rt
                        .block_on(grpc_export(*port, Some(tls.clone()), token))
                        .expect_err("refused");
                    assert!(
                        e.starts_with("Unauthenticated")
                            && e.contains("missing or wrong credentials"),
                        "{name}: gRPC with token {token:?}: {e}"
                    );
                }
                rt.block_on(grpc_export(*port, Some(tls), Some(OTLP_TOKEN)))
                    .unwrap_or_else(|e| panic!("{name}: gRPC with the token: {e}"));
            }
            other => panic!("{other}"),
        }
    }
    // The telemetry server, which these examples also protect.
    let c = client(&r.ca_pem, b"http/1.1");
    let resp = c
        .get(format!("https://{}/metrics", r.telemetry))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 401, "{name}: /metrics without its token");
    let resp = c
        .get(format!("https://{}/metrics", r.telemetry))
        .header("authorization", format!("Bearer {TELEMETRY_TOKEN}"))
        .send()
        .unwrap();
    assert_eq!(resp.status(), 200, "{name}: /metrics with its token");
    assert!(r.daemon.terminate().success());
}

#[test]
fn gateway_example_refuses_missing_and_wrong_credentials_with_a_reason() {
    refuses_with_a_reason("gateway.yaml");
}

#[test]
fn gateway_tail_sampling_example_refuses_missing_and_wrong_credentials_with_a_reason() {
    refuses_with_a_reason("gateway-tail-sampling.yaml");
}

/// The examples that serve OTLP beyond loopback all ask for credentials,
/// and each has its test above; the others listen on loopback only
/// (`tests/deploy_material.rs` checks that).
#[test]
fn every_example_that_serves_otlp_beyond_loopback_is_tested_here() {
    let tested = ["gateway.yaml", "gateway-tail-sampling.yaml"];
    for e in std::fs::read_dir("examples")
        .unwrap()
        .filter_map(Result::ok)
    {
        let name = e.file_name().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(e.path()).unwrap();
        let exposed = text.contains("0.0.0.0:4317") || text.contains("0.0.0.0:4318");
        assert_eq!(
            exposed,
            tested.contains(&name.as_str()),
            "{name}: serves OTLP beyond loopback: {exposed}; add or remove its test"
        );
    }
}

//! TLS and authentication on the OTLP receiver, through the real binary:
//! a client with the right CA, a client certificate and the token is
//! served over gRPC and HTTP; a plaintext client, a client trusting another
//! CA, a client without a certificate or with one from another CA, and a
//! missing or wrong token are all refused; no secret appears in the
//! daemon's logs (at debug level) or on `/metrics`.

#![allow(clippy::unwrap_used)] // test helpers: a failure is the test failing

mod common;

use common::*;
use std::time::Duration;

const TOKEN: &str = "s3cr3t-t0ken-4f9a2c";

use common::otlp_client::{grpc_export, trace_body as body};

#[tokio::test(flavor = "multi_thread")]
async fn mtls_and_token_admit_the_right_client_and_refuse_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = ca("causeway test CA");
    let other = ca("some other CA");
    let (srv_c, srv_k) = leaf(d, &good, "server", &["localhost", "127.0.0.1"], false);
    let (cli_c, cli_k) = leaf(d, &good, "client", &[], true);
    let (bad_c, bad_k) = leaf(d, &other, "stranger", &[], true);
    let ca_file = d.join("ca.crt");
    std::fs::write(&ca_file, good.cert.pem()).unwrap();
    let (g, h) = (free_port(), free_port());
    let tls = format!(
        "{{ cert_file: \"{srv_c}\", key_file: \"{srv_k}\", client_ca_file: \"{}\", min_version: \"1.2\" }}",
        ca_file.display()
    );
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: "127.0.0.1:{g}"
        tls: {tls}
        auth: {{ bearer_token: "${{env:CW_TOKEN}}" }}
      http:
        endpoint: "127.0.0.1:{h}"
        tls: {tls}
        auth: {{ bearer_token: "${{env:CW_TOKEN}}" }}
exporters:
  file: {{ path: "{{dir}}/out.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [file] }}
  telemetry:
    logs: {{ level: debug }}
    metrics: {{ address: "{{telemetry}}" }}
"#
    );
    let telemetry = format!("127.0.0.1:{}", free_port());
    let path = d.join("tls.yaml");
    std::fs::write(
        &path,
        config
            .replace("{dir}", &d.display().to_string())
            .replace("{telemetry}", &telemetry),
    )
    .unwrap();
    let daemon = Daemon::spawn(
        d,
        "tls",
        &["--config", &path.display().to_string()],
        &[("CW_TOKEN", TOKEN.to_string())],
        telemetry,
    );
    let good_pem = good.cert.pem();
    let other_pem = other.cert.pem();
    let url = format!("https://localhost:{h}/v1/traces");
    let post = move |client: &reqwest::blocking::Client, token: Option<&str>| {
        let mut r = client
            .post(&url)
            .header("content-type", "application/x-protobuf")
            .body(body());
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send()
    };
    let results = {
        let (good_pem, other_pem) = (good_pem.clone(), other_pem.clone());
        let (cli_c, cli_k, bad_c, bad_k) =
            (cli_c.clone(), cli_k.clone(), bad_c.clone(), bad_k.clone());
        let h2 = h;
        tokio::task::spawn_blocking(move || {
            let right = https(client_config(&good_pem, Some((&cli_c, &cli_k))));
            let served = post(&right, Some(TOKEN)).unwrap().status().as_u16();
            let no_token = post(&right, None).unwrap();
            let no_token = (
                no_token.status().as_u16(),
                no_token.headers().get("www-authenticate").cloned(),
            );
            let wrong_token = post(&right, Some("s3cr3t-t0ken-4f9a2d"))
                .unwrap()
                .status()
                .as_u16();
            let wrong_ca = post(
                &https(client_config(&other_pem, Some((&cli_c, &cli_k)))),
                Some(TOKEN),
            )
            .is_err();
            let no_cert = post(&https(client_config(&good_pem, None)), Some(TOKEN)).is_err();
            let foreign_cert = post(
                &https(client_config(&good_pem, Some((&bad_c, &bad_k)))),
                Some(TOKEN),
            )
            .is_err();
            let plaintext = http_client()
                .post(format!("http://127.0.0.1:{h2}/v1/traces"))
                .header("content-type", "application/x-protobuf")
                .bearer_auth(TOKEN)
                .body(body())
                .send()
                .map(|r| r.status().as_u16());
            (
                served,
                no_token,
                wrong_token,
                wrong_ca,
                no_cert,
                foreign_cert,
                plaintext,
            )
        })
        .await
        .unwrap()
    };
    let (served, no_token, wrong_token, wrong_ca, no_cert, foreign_cert, plaintext) = results;
    assert_eq!(served, 200, "the right client is served over HTTPS");
    assert_eq!(no_token.0, 401);
    assert_eq!(
        no_token.1.as_ref().and_then(|v| v.to_str().ok()),
        Some("Bearer")
    );
    assert_eq!(wrong_token, 401);
    assert!(wrong_ca, "a client trusting another CA does not connect");
    assert!(no_cert, "a client without a certificate is refused (mTLS)");
    assert!(foreign_cert, "a certificate from another CA is refused");
    assert!(
        plaintext.is_err() || plaintext.as_ref().is_ok_and(|s| *s >= 400),
        "plaintext is refused: {plaintext:?}"
    );

    // gRPC.
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    let id = Identity::from_pem(
        std::fs::read(&cli_c).unwrap(),
        std::fs::read(&cli_k).unwrap(),
    );
    let right = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&good_pem))
        .identity(id.clone())
        .domain_name("localhost");
    grpc_export(g, Some(right.clone()), Some(TOKEN))
        .await
        .expect("the right client is served over gRPC+TLS");
    let e = grpc_export(g, Some(right.clone()), None)
        .await
        .expect_err("no token");
    assert!(e.starts_with("Unauthenticated"), "{e}");
    let e = grpc_export(g, Some(right), Some("nope"))
        .await
        .expect_err("wrong token");
    assert!(e.starts_with("Unauthenticated"), "{e}");
    let wrong_ca = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&other_pem))
        .identity(id)
        .domain_name("localhost");
    assert!(
        grpc_export(g, Some(wrong_ca), Some(TOKEN)).await.is_err(),
        "another CA"
    );
    let no_cert = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&good_pem))
        .domain_name("localhost");
    assert!(
        grpc_export(g, Some(no_cert), Some(TOKEN)).await.is_err(),
        "no client certificate"
    );
    assert!(
        grpc_export(g, None, Some(TOKEN)).await.is_err(),
        "plaintext gRPC"
    );

    // Both accepted exports arrived; nothing else did.
    let out = d.join("out.jsonl");
    wait_for(Duration::from_secs(10), "two exports written", || {
        spans(&read_jsonl(&out)).len() == 2
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(spans(&read_jsonl(&out)).len(), 2);

    // No secret in the logs or on /metrics.
    let (_, metrics) = http_get(&daemon.telemetry, "/metrics").expect("/metrics");
    assert!(
        metrics.contains("causeway_tls_handshake_failures_total"),
        "failed handshakes are counted"
    );
    let log = daemon.stderr("tls");
    assert!(
        log.contains("TLS handshake failed"),
        "handshake failures are logged at debug"
    );
    let key_body = std::fs::read_to_string(&srv_k).unwrap();
    let key_line = key_body.lines().nth(1).unwrap();
    for (what, text) in [("log", &log), ("metrics", &metrics)] {
        assert!(!text.contains(TOKEN), "the token is in the {what}");
        assert!(!text.contains(key_line), "the private key is in the {what}");
    }
}

#[test]
fn exporters_deliver_over_mtls_with_a_token_to_a_tls_receiver() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = ca("causeway test CA");
    let (srv_c, srv_k) = leaf(d, &good, "server", &["localhost", "127.0.0.1"], false);
    let (cli_c, cli_k) = leaf(d, &good, "client", &[], true);
    let ca_file = d.join("ca.crt");
    std::fs::write(&ca_file, good.cert.pem()).unwrap();
    let ca = ca_file.display();
    let (bg, bh, ah) = (free_port(), free_port(), free_port());
    let server_tls =
        format!("{{ cert_file: \"{srv_c}\", key_file: \"{srv_k}\", client_ca_file: \"{ca}\" }}");
    let b = Daemon::spawn_config(
        d,
        "b",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{bg}", tls: {server_tls}, auth: {{ bearer_token: "${{env:CW_TOKEN}}" }} }}
      http: {{ endpoint: "127.0.0.1:{bh}", tls: {server_tls}, auth: {{ bearer_token: "${{env:CW_TOKEN}}" }} }}
exporters:
  file: {{ path: "{{dir}}/b.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
        &[("CW_TOKEN", TOKEN.to_string())],
    );
    let client_tls = format!("{{ ca_file: \"{ca}\", cert_file: \"{cli_c}\", key_file: \"{cli_k}\", server_name_override: localhost }}");
    let a = Daemon::spawn_config(
        d,
        "a",
        &format!(
            r#"{receivers}exporters:
  otlp/b:
    endpoint: "https://localhost:{bg}"
    tls: {client_tls}
    headers: {{ authorization: "Bearer ${{env:CW_TOKEN}}" }}
  otlphttp/b:
    endpoint: "https://localhost:{bh}"
    tls: {client_tls}
    headers: {{ Authorization: "Bearer ${{env:CW_TOKEN}}" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [otlp/b, otlphttp/b] }}
  telemetry:
    logs: {{ level: debug }}
    metrics: {{ address: "{{telemetry}}" }}
"#,
            receivers = causeway_scenarios::config::otlp_http(ah)
        ),
        &[("CW_TOKEN", TOKEN.to_string())],
    );
    let status = http_client()
        .post(format!("http://127.0.0.1:{ah}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(body())
        .send()
        .unwrap()
        .status();
    assert_eq!(status, 200);
    let out = d.join("b.jsonl");
    wait_for(
        Duration::from_secs(20),
        "both exporters delivered over TLS",
        || spans(&read_jsonl(&out)).len() == 2,
    );
    for (name, daemon) in [("a", &a), ("b", &b)] {
        let log = daemon.stderr(name);
        assert!(!log.contains(TOKEN), "the token is in {name}'s log");
        let (_, metrics) = http_get(&daemon.telemetry, "/metrics").unwrap();
        assert!(!metrics.contains(TOKEN));
    }
}

/// No `ca_file`: the exporters trust the system's roots, as the Collector's
/// do. The system store is pointed at the test CA with `SSL_CERT_FILE` (the
/// OpenSSL convention the native-certs loader honours); a daemon whose
/// system store lacks that CA refuses the same server.
#[test]
fn without_ca_file_exporters_trust_the_system_roots() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let test_ca = ca("causeway system-roots CA");
    let (srv_c, srv_k) = leaf(d, &test_ca, "server", &["localhost"], false);
    let ca_file = d.join("system-ca.pem");
    std::fs::write(&ca_file, test_ca.cert.pem()).unwrap();
    let other = ca("some other CA");
    let other_file = d.join("other-ca.pem");
    std::fs::write(&other_file, other.cert.pem()).unwrap();
    let (bg, bh) = (free_port(), free_port());
    let server_tls = format!("{{ cert_file: \"{srv_c}\", key_file: \"{srv_k}\" }}");
    let _b = Daemon::spawn_config(
        d,
        "b",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{bg}", tls: {server_tls} }}
      http: {{ endpoint: "127.0.0.1:{bh}", tls: {server_tls} }}
exporters:
  file: {{ path: "{{dir}}/b.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
        &[],
    );
    let sender = |name: &str, store: &std::path::Path| {
        let ah = free_port();
        let a = Daemon::spawn_config(
            d,
            name,
            &format!(
                r#"{receivers}exporters:
  otlp/b:
    endpoint: "https://localhost:{bg}"
    retry_on_failure: {{ enabled: false }}
  otlphttp/b:
    endpoint: "https://localhost:{bh}"
    retry_on_failure: {{ enabled: false }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [otlp/b, otlphttp/b] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
                receivers = causeway_scenarios::config::otlp_http(ah)
            ),
            &[
                ("SSL_CERT_FILE", store.display().to_string()),
                ("SSL_CERT_DIR", d.join("no-such-dir").display().to_string()),
            ],
        );
        let status = http_client()
            .post(format!("http://127.0.0.1:{ah}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .body(body())
            .send()
            .unwrap()
            .status();
        assert_eq!(status, 200);
        a
    };
    // The system store holds the server's CA: both exporters deliver.
    let a = sender("a", &ca_file);
    let out = d.join("b.jsonl");
    wait_for(Duration::from_secs(20), "both exporters delivered", || {
        spans(&read_jsonl(&out)).len() == 2
    });
    drop(a);
    // It does not: both fail (and say so), nothing more arrives.
    let c = sender("c", &other_file);
    let failed = |e: &str| {
        c.metric(&format!(
            "causeway_exporter_send_failed_items_total{{component=\"{e}\",signal=\"traces\"}}"
        )) == Some(1.0)
    };
    wait_for(
        Duration::from_secs(20),
        "both exporters refused the server",
        || failed("otlp/b") && failed("otlphttp/b"),
    );
    assert_eq!(spans(&read_jsonl(&out)).len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_telemetry_server_speaks_tls_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let good = ca("causeway test CA");
    let (c, k) = leaf(dir.path(), &good, "server", &["localhost"], false);
    let tls: causeway_core::tls::ServerTls =
        serde_yaml::from_str(&format!("{{ cert_file: \"{c}\", key_file: \"{k}\" }}")).unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let (addr, _h) = causeway_core::telemetry::serve(
        "127.0.0.1:0",
        Some(&tls),
        causeway_core::telemetry::Registry::new(),
        stop.clone(),
    )
    .await
    .unwrap();
    let pem = good.cert.pem();
    let port = addr.port();
    let (ok, plain) = tokio::task::spawn_blocking(move || {
        let ok = https(client_config(&pem, None))
            .get(format!("https://localhost:{port}/healthz"))
            .send()
            .map(|r| r.status().as_u16());
        let plain = http_client()
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .send()
            .map(|r| r.status().as_u16());
        (ok, plain)
    })
    .await
    .unwrap();
    assert_eq!(ok.unwrap(), 200);
    assert!(plain.is_err(), "plaintext is refused: {plain:?}");
    stop.cancel();
}

#[test]
fn the_daemons_own_telemetry_goes_out_over_mtls() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = ca("causeway test CA");
    let (srv_c, srv_k) = leaf(d, &good, "server", &["localhost", "127.0.0.1"], false);
    let (cli_c, cli_k) = leaf(d, &good, "client", &[], true);
    let ca_file = d.join("ca.crt");
    std::fs::write(&ca_file, good.cert.pem()).unwrap();
    let ca = ca_file.display();
    let bg = free_port();
    let _sink = Daemon::spawn_config(
        d,
        "sink",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc: {{ endpoint: "127.0.0.1:{bg}", tls: {{ cert_file: "{srv_c}", key_file: "{srv_k}", client_ca_file: "{ca}" }} }}
exporters:
  file: {{ path: "{{dir}}/self-{{signal}}.jsonl" }}
service:
  pipelines:
    metrics: {{ receivers: [otlp], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
        &[],
    );
    let h = free_port();
    let _observed = Daemon::spawn_config(
        d,
        "observed",
        &format!(
            r#"{receivers}exporters:
  debug: {{ verbosity: basic }}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [debug] }}
  telemetry:
    metrics:
      address: "{{telemetry}}"
      readers:
        - periodic:
            interval: 200
            exporter:
              otlp:
                protocol: grpc
                endpoint: "https://localhost:{bg}"
                tls: {{ ca_file: "{ca}", cert_file: "{cli_c}", key_file: "{cli_k}" }}
"#,
            receivers = causeway_scenarios::config::otlp_http(h)
        ),
        &[],
    );
    let out = d.join("self-metrics.jsonl");
    wait_for(
        Duration::from_secs(20),
        "the daemon's own metrics over mTLS",
        || {
            metrics(&read_jsonl(&out)).iter().any(|(_, m)| {
                m["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("causeway_"))
            })
        },
    );
}

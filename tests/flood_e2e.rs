//! Connection floods against the real binary, with the gateway example's
//! security (OTLP gRPC and HTTP over TLS with a bearer token) and a plain
//! OTLP/HTTP listener and telemetry server beside it: while each flood
//! runs, a legitimate client's request succeeds within 1 s, and the flood's
//! connections are closed by the limit meant for them (counted in
//! `causeway_server_connections_closed_total`). Every flood is a bounded
//! loop from loopback.

#![allow(clippy::unwrap_used)] // test helpers: a failure is the test failing

mod common;

use common::otlp_client::{grpc_export_within, trace_body};
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

const TOKEN: &str = "fl00d-t0ken-8c1e";

/// The daemon and its ports.
struct Bed {
    daemon: Daemon,
    grpc: u16,
    https: u16,
    plain: u16,
    ca_pem: String,
    _dir: tempfile::TempDir,
}

/// Start the daemon; `plain_limits` is the plain OTLP/HTTP listener's
/// `connections:` block (empty: the defaults). `CAUSEWAY_FLOOD_LIMITS`, when
/// set, replaces every listener's limits: how each test was checked to
/// fail with its limit removed (e.g. `{ max: 1000000 }`,
/// `{ handshake_timeout: 1h }`).
fn bed(plain_limits: &str) -> Bed {
    let (plain_limits, limits) = match std::env::var("CAUSEWAY_FLOOD_LIMITS") {
        Ok(l) => (format!("connections: {l}"), format!("connections: {l}")),
        Err(_) => (plain_limits.to_string(), String::new()),
    };
    let telemetry_limits = if limits.is_empty() {
        String::new()
    } else {
        format!(", {limits}")
    };
    causeway_core::tls::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ca = ca("flood CA");
    let (cert, key) = leaf(d, &ca, "server", &["localhost", "127.0.0.1"], false);
    let (grpc, https, plain) = (free_port(), free_port(), free_port());
    let daemon = Daemon::spawn_config(
        d,
        "flooded",
        &format!(
            r#"
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: "127.0.0.1:{grpc}"
        tls: {{ cert_file: "{cert}", key_file: "{key}" }}
        auth: {{ bearer_token: "{TOKEN}" }}
        {limits}
      http:
        endpoint: "127.0.0.1:{https}"
        tls: {{ cert_file: "{cert}", key_file: "{key}" }}
        auth: {{ bearer_token: "{TOKEN}" }}
        {limits}
  otlp/plain:
    protocols:
      http:
        endpoint: "127.0.0.1:{plain}"
        {plain_limits}
exporters:
  file: {{ path: "{{dir}}/out.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp, otlp/plain], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" {telemetry_limits} }} }}
"#
        ),
        &[],
    );
    Bed {
        daemon,
        grpc,
        https,
        plain,
        ca_pem: ca.cert.pem(),
        _dir: dir,
    }
}

impl Bed {
    /// An HTTPS export with the token, 1 s at most.
    fn https_ok(&self) -> Result<(), String> {
        let client = reqwest::blocking::Client::builder()
            .use_preconfigured_tls(client_config(&self.ca_pem, None));
        let url = format!("https://127.0.0.1:{}/v1/traces", self.https);
        ok_within_a_second(client, |c| {
            c.post(url)
                .header("content-type", "application/x-protobuf")
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(trace_body())
        })
    }

    /// A gRPC export over TLS with the token, 1 s at most.
    fn grpc_ok(&self) -> Result<(), String> {
        let tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(&self.ca_pem))
            .domain_name("localhost");
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(grpc_export_within(
                self.grpc,
                Some(tls),
                Some(TOKEN),
                Duration::from_secs(1),
            ))
    }

    /// A plain OTLP/HTTP export, 1 s at most.
    fn plain_ok(&self) -> Result<(), String> {
        let url = format!("http://127.0.0.1:{}/v1/traces", self.plain);
        ok_within_a_second(reqwest::blocking::Client::builder(), |c| {
            c.post(url)
                .header("content-type", "application/x-protobuf")
                .body(trace_body())
        })
    }

    /// `/metrics` on the telemetry server, 1 s at most.
    fn telemetry_ok(&self) -> Result<(), String> {
        let url = format!("http://{}/metrics", self.daemon.telemetry);
        ok_within_a_second(reqwest::blocking::Client::builder(), |c| c.get(url))
    }

    /// Every legitimate client is served within 1 s: each gets three tries
    /// of 1 s (a busy machine may lose one), and must succeed once.
    fn served(&self, during: &str) {
        type Check = fn(&Bed) -> Result<(), String>;
        let checks: [(&str, Check); 4] = [
            ("OTLP/HTTP over TLS", Bed::https_ok),
            ("OTLP/gRPC over TLS", Bed::grpc_ok),
            ("plain OTLP/HTTP", Bed::plain_ok),
            ("the telemetry server", Bed::telemetry_ok),
        ];
        for (what, check) in checks {
            let mut errors = Vec::new();
            let ok = (0..3).any(|_| match check(self) {
                Ok(()) => true,
                Err(e) => {
                    errors.push(e);
                    false
                }
            });
            assert!(
                ok,
                "during {during}, {what} failed 3 of 3 tries: {errors:?}"
            );
        }
    }

    /// Connections the limits closed on `server` for `reason`.
    fn closed(&self, server: &str, reason: &str) -> f64 {
        self.daemon
            .metric(&format!(
                "causeway_server_connections_closed_total{{server=\"{server}\",reason=\"{reason}\"}}"
            ))
            .unwrap_or(0.0)
    }

    /// The daemon's connection metrics, for a failure message.
    fn connection_metrics(&self) -> String {
        http_get(&self.daemon.telemetry, "/metrics")
            .map(|(_, m)| {
                m.lines()
                    .filter(|l| {
                        l.starts_with("causeway_server_conn") || l.starts_with("causeway_tls")
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default()
    }

    /// File descriptors the daemon has open.
    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.daemon.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }
}

/// The request `req` builds, sent by `client` with a 1 s deadline, answered 200.
fn ok_within_a_second(
    client: reqwest::blocking::ClientBuilder,
    req: impl FnOnce(&reqwest::blocking::Client) -> reqwest::blocking::RequestBuilder,
) -> Result<(), String> {
    let client = client
        .timeout(Duration::from_secs(1))
        .build()
        .map_err(|e| e.to_string())?;
    let r = req(&client).send().map_err(|e| format!("{e:?}"))?;
    (r.status() == 200)
        .then_some(())
        .ok_or(format!("status {}", r.status()))
}

/// `n` TCP connections to `port` that send nothing.
fn idle(port: u16, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect()
}

/// Whether the server closed `s` (reading ends or fails), waiting up to `wait`.
fn closed_by_server(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).ok();
    let mut b = [0u8; 4096];
    loop {
        match s.read(&mut b) {
            Ok(0) => return true,
            Ok(_) => continue, // what the server sent before closing
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true, // reset
        }
    }
}

/// 10,000 connections that never send a byte, on each server in turn:
/// the daemon never holds more than `connections.max` (4096 by default) of
/// them, closing the quietest as new ones come and the rest at
/// `header_read_timeout`, and real clients are served all along.
#[test]
fn ten_thousand_idle_connections_do_not_lock_clients_out() {
    let bed = bed("");
    let telemetry_port: u16 = bed
        .daemon
        .telemetry
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap();
    for (name, server, port) in [
        ("OTLP/HTTP over TLS", "otlp/http", bed.https),
        ("OTLP/gRPC over TLS", "otlp/grpc", bed.grpc),
        ("the telemetry server", "telemetry", telemetry_port),
    ] {
        let closed = |b: &Bed| {
            [
                "evicted",
                "header_timeout",
                "handshake_timeout",
                "handshake_failed",
            ]
            .iter()
            .map(|r| b.closed(server, r))
            .sum::<f64>()
        };
        let before = closed(&bed);
        let mut flood = Vec::with_capacity(10_000);
        let mut most_fds = 0;
        while flood.len() < 10_000 {
            flood.extend(idle(port, 500));
            most_fds = most_fds.max(bed.fds());
        }
        assert!(
            most_fds < 4096 + 500,
            "{name}: the daemon held {most_fds} descriptors during the flood"
        );
        bed.served(&format!("10,000 idle connections to {name}"));
        // Every connection beyond the limit was closed by it.
        wait_for_or(
            Duration::from_secs(120),
            &format!("{name}: the flood closed by the limits"),
            || closed(&bed) - before >= 10_000.0 - 4096.0,
            || bed.connection_metrics(),
        );
        drop(flood);
    }
}

/// A slowloris: request headers trickled a byte a second on more
/// connections than the limit. Real clients are served, and each trickling
/// connection is closed once `header_read_timeout` passed.
#[test]
fn a_slowloris_is_cut_off_and_clients_are_served() {
    let bed = bed("connections: { max: 200, header_read_timeout: 3s }");
    let mut flood = idle(bed.plain, 300);
    let request =
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n";
    let mut sent = 0;
    // Trickle until every trickling connection was closed on us.
    let mut open: Vec<usize> = (0..flood.len()).collect();
    let start = std::time::Instant::now();
    while !open.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "{} trickling connections still open after 120 s",
            open.len()
        );
        let byte = [request[sent % request.len()]];
        open.retain(|&i| flood[i].write_all(&byte).is_ok());
        sent += 1;
        if sent == 2 {
            bed.served("a slowloris on plain OTLP/HTTP");
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(sent > 2, "the slowloris ran while clients were served");
}

/// TLS handshakes that never finish (a ClientHello's first bytes, then
/// nothing) on more connections than the default limit: real clients are
/// served, and the stalled handshakes end at `handshake_timeout`.
#[test]
fn tls_handshakes_that_never_finish_do_not_lock_clients_out() {
    let bed = bed("");
    // A TLS record header announcing a ClientHello, and two bytes of it.
    let partial = [0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00];
    let mut flood = idle(bed.grpc, 5_000);
    for s in &mut flood {
        // Those the limit already closed refuse the write: the limit working.
        s.write_all(&partial).ok();
    }
    bed.served("5,000 stalled TLS handshakes on OTLP/gRPC");
    wait_for_or(
        Duration::from_secs(120),
        "stalled handshakes closed at handshake_timeout",
        || {
            bed.closed("otlp/grpc", "handshake_timeout") + bed.closed("otlp/grpc", "evicted")
                >= 5_000.0
        },
        || bed.connection_metrics(),
    );
    // How many were evicted rather than timed out depends on how fast the
    // flood connected; that some reached their deadline does not.
    assert!(bed.closed("otlp/grpc", "handshake_timeout") > 0.0);
    assert!(closed_by_server(&mut flood[4_999], Duration::from_secs(5)));
}

/// One HTTP/2 HEADERS frame of a POST to `/v1/traces` on `stream`, its
/// body announced (100 bytes) and never sent; HPACK without indexing.
fn h2_post_headers(stream: u32, authority: &str) -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    let mut literal = |name_index: &[u8], value: &str| {
        block.extend_from_slice(name_index);
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    };
    literal(&[0x04], "/v1/traces"); // :path
    literal(&[0x01], authority); // :authority
    literal(&[0x0f, 0x10], "application/x-protobuf"); // content-type
    literal(&[0x0f, 0x0d], "100"); // content-length
    let mut frame = Vec::with_capacity(9 + block.len());
    frame.extend_from_slice(&(block.len() as u32).to_be_bytes()[1..]);
    frame.push(0x01); // HEADERS
    frame.push(0x04); // END_HEADERS, not END_STREAM: a body is to follow
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(&block);
    frame
}

/// HTTP/2 connections that open 100 streams each, never send their bodies
/// and never read a byte (no SETTINGS acknowledgement, no PING answer), on
/// more connections than the limit: real clients are served, and the
/// connections are closed when they do not answer the server's pings.
#[test]
fn http2_streams_opened_and_never_read_do_not_lock_clients_out() {
    let bed = bed("connections: { max: 200, keepalive_interval: 2s, keepalive_timeout: 2s }");
    let authority = format!("127.0.0.1:{}", bed.plain);
    let mut flood = idle(bed.plain, 300);
    for s in &mut flood {
        let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        out.extend_from_slice(&[0, 0, 0, 0x04, 0, 0, 0, 0, 0]); // empty SETTINGS
        for i in 0..100u32 {
            out.extend(h2_post_headers(1 + 2 * i, &authority));
        }
        // Refused (evicted) connections fail here: that is the limit working.
        s.write_all(&out).ok();
    }
    bed.served("300 HTTP/2 connections with 100 unread streams each");
    wait_for(
        Duration::from_secs(120),
        "the unread connections closed",
        || {
            flood
                .iter_mut()
                .all(|s| closed_by_server(s, Duration::from_millis(10)))
        },
    );
}

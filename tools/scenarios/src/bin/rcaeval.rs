//! The root-cause evaluation harness: generates scenarios (every fault
//! class on its own routes, hosts and topics, healthy traffic alongside),
//! replays them through the real `causeway` binary over OTLP/HTTP in random
//! arrival orders, reads the annotated traces back from its file exporter,
//! and reports per-cause precision and recall, top-1 accuracy and the
//! false-cause rate on healthy-but-slow traces.
//!
//! ```sh
//! cargo build --release --bin causeway
//! cargo run --release -p causeway-scenarios --bin rcaeval -- --per-cause 150 --healthy 400
//! ```
#![allow(clippy::unwrap_used)]

use causeway_scenarios::send::{random_order, read_annotated, send};
use causeway_scenarios::{case, Case, Rng, CAUSES};
use std::collections::BTreeMap;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
        .unwrap_or_else(|| default.to_string())
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn get(addr: &str, path: &str) -> Option<u16> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    use std::io::Write;
    write!(s, "GET {path} HTTP/1.0\r\n\r\n").ok()?;
    let mut b = String::new();
    s.read_to_string(&mut b).ok()?;
    b.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let bin = arg(&args, "--bin", &format!("{target}/release/causeway"));
    let per_cause: u64 = arg(&args, "--per-cause", "150").parse().unwrap();
    let healthy: u64 = arg(&args, "--healthy", "400").parse().unwrap();
    let seed: u64 = arg(&args, "--seed", "1").parse().unwrap();
    let dir = std::env::temp_dir().join(format!("rcaeval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (http, tel) = (free_port(), free_port());
    let config = format!(
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{http}" }}
processors:
  tail_sampling:
    decision_wait: 2s
    policies: [{{ name: all, type: always_sample }}]
  correlate: {{}}
exporters:
  file/traces: {{ path: "{d}/traces.jsonl" }}
  file/rca: {{ path: "{d}/rca.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [otlp], processors: [correlate], exporters: [file/rca] }}
    metrics: {{ receivers: [otlp], processors: [correlate], exporters: [file/rca] }}
  telemetry: {{ metrics: {{ address: "127.0.0.1:{tel}" }} }}
"#,
        d = dir.display()
    );
    std::fs::write(dir.join("eval.yaml"), config).unwrap();
    let mut child = Command::new(&bin)
        .args([
            "--config",
            &dir.join("eval.yaml").display().to_string(),
            "--log-level",
            "warn",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {bin}: {e}"));
    let tel_addr = format!("127.0.0.1:{tel}");
    let t0 = Instant::now();
    while get(&tel_addr, "/readyz") != Some(200) {
        assert!(t0.elapsed() < Duration::from_secs(30), "daemon not ready");
        std::thread::sleep(Duration::from_millis(50));
    }

    // Scenarios: every class, healthy fast and healthy slow, shuffled.
    let mut rng = Rng::new(seed);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let mut cases: Vec<Case> = Vec::new();
    let mut n = 0;
    for c in CAUSES {
        for _ in 0..per_cause {
            cases.push(case(&mut rng, c, n, now));
            n += 1;
        }
    }
    for i in 0..healthy {
        cases.push(case(
            &mut rng,
            if i % 2 == 0 {
                "healthy"
            } else {
                "healthy_slow"
            },
            n,
            now,
        ));
        n += 1;
    }
    for i in (1..cases.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        cases.swap(i, j);
    }
    let client = {
        rustls::crypto::ring::default_provider()
            .install_default()
            .ok();
        reqwest::blocking::Client::new()
    };
    let base = format!("http://127.0.0.1:{http}");
    let sent = Instant::now();
    for chunk in cases.chunks(20) {
        send(&client, &base, chunk, random_order(&mut rng)).unwrap();
    }
    eprintln!("sent {} traces in {:?}", cases.len(), sent.elapsed());
    let path = dir.join("traces.jsonl");
    let deadline = Instant::now() + Duration::from_secs(120);
    let annotated = loop {
        let a = read_annotated(&path);
        let done = cases
            .iter()
            .filter(|c| {
                a.get(&hex(&c.trace_id))
                    .is_some_and(|x| x.root.contains_key("rca.cause"))
            })
            .count();
        if done == cases.len() || Instant::now() > deadline {
            break a;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    child.kill().ok();
    child.wait().ok();

    // Score.
    let mut tp: BTreeMap<&str, u64> = BTreeMap::new();
    let mut fp: BTreeMap<String, u64> = BTreeMap::new();
    let mut total: BTreeMap<&str, u64> = BTreeMap::new();
    let mut culprit_ok: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut faulty, mut correct, mut missing) = (0u64, 0u64, 0u64);
    let (mut hs, mut hs_false, mut hf, mut hf_false) = (0u64, 0u64, 0u64, 0u64);
    let mut confusion: BTreeMap<(String, String), u64> = BTreeMap::new();
    for c in &cases {
        let Some(a) = annotated.get(&hex(&c.trace_id)) else {
            missing += 1;
            continue;
        };
        let got = a.root.get("rca.cause").cloned().unwrap_or_default();
        if c.cause == "healthy" {
            let false_cause = got != "unknown" && got != "slow_dependency";
            if c.healthy_slow {
                hs += 1;
                hs_false += u64::from(false_cause);
            } else {
                hf += 1;
                hf_false += u64::from(false_cause);
            }
            if false_cause {
                *fp.entry(got.clone()).or_default() += 1;
                *confusion.entry(("healthy".into(), got)).or_default() += 1;
            }
            continue;
        }
        faulty += 1;
        *total.entry(c.cause).or_default() += 1;
        if got == c.cause {
            correct += 1;
            *tp.entry(c.cause).or_default() += 1;
            if a.root.get("rca.culprit.service") == Some(&c.culprit_service) {
                *culprit_ok.entry(c.cause).or_default() += 1;
            }
        } else {
            *fp.entry(got.clone()).or_default() += 1;
            *confusion.entry((c.cause.to_string(), got)).or_default() += 1;
        }
    }
    println!("| cause | traces | recall | precision | culprit service right |");
    println!("|---|---|---|---|---|");
    for c in CAUSES {
        let t = total.get(c).copied().unwrap_or(0);
        let p = tp.get(c).copied().unwrap_or(0);
        let f = fp.get(c).copied().unwrap_or(0);
        let cu = culprit_ok.get(c).copied().unwrap_or(0);
        println!(
            "| {c} | {t} | {:.1}% | {:.1}% | {:.1}% |",
            pct(p, t),
            pct(p, p + f),
            pct(cu, p)
        );
    }
    println!();
    println!(
        "faulty traces: {faulty}, top-1 accuracy {:.2}%",
        pct(correct, faulty)
    );
    println!("healthy-but-slow: {hs}, given a cause other than unknown/slow_dependency: {hs_false} ({:.2}%)", pct(hs_false, hs));
    println!(
        "healthy fast: {hf}, given another cause: {hf_false} ({:.2}%)",
        pct(hf_false, hf)
    );
    println!("not annotated (missing): {missing}");
    if !confusion.is_empty() {
        println!("confusions (planted → stated: count):");
        for ((a, b), n) in &confusion {
            println!("  {a} → {b}: {n}");
        }
    }
    if std::env::var_os("RCAEVAL_KEEP").is_some() {
        eprintln!("kept {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).ok();
    }
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

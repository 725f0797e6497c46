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
use causeway_scenarios::{case, Case, Rng, CAUSES, HARD, OWNER_OPS};
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
        r#"{head}  correlate: {{ evidence_wait: 3s }}
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
        head = causeway_scenarios::config::keep_all(http, "2s"),
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

    let client = {
        rustls::crypto::ring::default_provider()
            .install_default()
            .ok();
        reqwest::blocking::Client::new()
    };
    let base = format!("http://127.0.0.1:{http}");
    let path = dir.join("traces.jsonl");
    let mut rng = Rng::new(seed);
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let wait_for = |ids: &[[u8; 16]], secs: u64| {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let a = read_annotated(&path);
            let done = ids
                .iter()
                .filter(|id| {
                    a.get(&hex(*id))
                        .is_some_and(|x| x.root.contains_key("rca.cause"))
                })
                .count();
            if done == ids.len() || Instant::now() > deadline {
                return a;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    };

    // Warm-up: the normal traffic every operation's baseline learns from
    // (a running daemon has seen it), more of it than faults of any class.
    let mut n = 0;
    let kinds = (8 + OWNER_OPS.len()) as u64;
    let warm: Vec<Case> = (0..kinds * (per_cause * 2 + 40))
        .map(|_| {
            n += 1;
            case(&mut rng, "warmup", n - 1, now())
        })
        .collect();
    for chunk in warm.chunks(50) {
        send(&client, &base, chunk, random_order(&mut rng)).unwrap();
    }
    let ids: Vec<[u8; 16]> = warm.iter().map(|c| c.trace_id).collect();
    wait_for(&ids, 120);
    eprintln!("warm-up: {} traces", warm.len());

    // Scenarios: every class, the hard cases, healthy fast and healthy slow, shuffled.
    let t_now = now();
    let mut cases: Vec<Case> = Vec::new();
    for c in CAUSES {
        for _ in 0..per_cause {
            cases.push(case(&mut rng, c, n, t_now));
            n += 1;
        }
    }
    for (kind, _) in HARD {
        for _ in 0..per_cause / 2 {
            cases.push(case(&mut rng, kind, n, t_now));
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
            t_now,
        ));
        n += 1;
    }
    for i in (1..cases.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        cases.swap(i, j);
    }
    let sent = Instant::now();
    let mut late_senders = Vec::new();
    for chunk in cases.chunks(20) {
        // Metrics scraped late arrive 3 s after their trace (after its decision).
        let mut chunk = chunk.to_vec();
        let mut late = Vec::new();
        for c in chunk.iter_mut().filter(|c| c.late_metrics) {
            late.append(&mut c.metrics);
        }
        send(&client, &base, &chunk, random_order(&mut rng)).unwrap();
        if !late.is_empty() {
            let (client, base) = (client.clone(), base.clone());
            late_senders.push(std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(3));
                let body = prost::Message::encode_to_vec(
                    &opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest {
                        resource_metrics: late,
                    },
                );
                causeway_scenarios::send::post(&client, &format!("{base}/v1/metrics"), body).unwrap();
            }));
        }
    }
    for h in late_senders {
        h.join().unwrap();
    }
    eprintln!("sent {} traces in {:?}", cases.len(), sent.elapsed());
    let ids: Vec<[u8; 16]> = cases.iter().map(|c| c.trace_id).collect();
    let annotated = wait_for(&ids, 180);
    child.kill().ok();
    child.wait().ok();

    // Score. A healthy trace given any cause but `unknown` is a false cause
    // (slow_dependency included); precision counts those against the cause.
    let mut tp: BTreeMap<&str, u64> = BTreeMap::new();
    let mut fp: BTreeMap<String, u64> = BTreeMap::new();
    let mut total: BTreeMap<&str, u64> = BTreeMap::new();
    let mut culprit_ok: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut faulty, mut correct, mut missing, mut culprit_all) = (0u64, 0u64, 0u64, 0u64);
    let (mut hs, mut hs_false, mut hf, mut hf_false) = (0u64, 0u64, 0u64, 0u64);
    let (mut second_total, mut second_found) = (0u64, 0u64);
    let mut confusion: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut examples: BTreeMap<String, String> = BTreeMap::new();
    // The first wrong verdict of each (generator kind, stated cause).
    let mut miss_examples: BTreeMap<(String, String), String> = BTreeMap::new();
    // Calibration: (bin, findings, right).
    let mut calib: BTreeMap<u64, (u64, u64, f64)> = BTreeMap::new();
    let mut by_kind: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for c in &cases {
        let Some(a) = annotated.get(&hex(&c.trace_id)) else {
            missing += 1;
            continue;
        };
        let got = a.root.get("rca.cause").cloned().unwrap_or_default();
        let conf: f64 = a
            .root
            .get("rca.confidence")
            .and_then(|x| x.parse().ok())
            .unwrap_or(0.0);
        let right = got == c.cause;
        // Every finding stated, the verdict's and the alternatives', against
        // the faults the trace really had (a concurrent fault's second too).
        let is_fault = |cause: &str| cause == c.cause || c.second == Some(cause);
        let stated = causeway_scenarios::send::stated_findings(&a.root);
        for (n, (cause, p)) in stated.into_iter().enumerate() {
            let bin = ((p * 10.0).floor() as u64).min(9);
            if std::env::var_os("RCAEVAL_CALIB_DETAIL").is_some() {
                eprintln!(
                    "CALIB {bin} {} {} {cause} {} {} | {conf} {:?} {:?}",
                    if n == 0 && got != "unknown" {
                        "best"
                    } else {
                        "alt"
                    },
                    u64::from(is_fault(&cause)),
                    c.kind,
                    c.cause,
                    a.root.get("rca.alternatives"),
                    a.root.get("rca.reason")
                );
            }
            let e = calib.entry(bin).or_default();
            e.0 += 1;
            e.1 += u64::from(is_fault(&cause));
            e.2 += p;
        }
        let k = by_kind.entry(c.kind).or_default();
        k.0 += 1;
        k.1 += u64::from(right);
        if c.cause == "healthy" {
            let false_cause = got != "unknown";
            if c.healthy_slow {
                hs += 1;
                hs_false += u64::from(false_cause);
            } else {
                hf += 1;
                hf_false += u64::from(false_cause);
            }
            if false_cause {
                miss_examples
                    .entry(("healthy".to_string(), got.clone()))
                    .or_insert_with(|| a.root.get("rca.summary").cloned().unwrap_or_default());
                *fp.entry(got.clone()).or_default() += 1;
                *confusion.entry(("healthy".into(), got)).or_default() += 1;
            }
            continue;
        }
        faulty += 1;
        *total.entry(c.cause).or_default() += 1;
        if let Some(second) = c.second {
            second_total += 1;
            second_found += u64::from(
                a.root
                    .get("rca.alternatives")
                    .is_some_and(|x| x.contains(&format!("{second}:"))),
            );
        }
        if right {
            correct += 1;
            *tp.entry(c.cause).or_default() += 1;
            if a.root.get("rca.culprit.service") == Some(&c.culprit_service) {
                *culprit_ok.entry(c.cause).or_default() += 1;
                culprit_all += u64::from(c.cause != "unknown");
            }
            if let Some(s) = a.root.get("rca.summary") {
                examples
                    .entry(c.cause.to_string())
                    .or_insert_with(|| s.clone());
            }
        } else {
            miss_examples
                .entry((c.kind.to_string(), got.clone()))
                .or_insert_with(|| a.root.get("rca.summary").cloned().unwrap_or_default());
            *fp.entry(got.clone()).or_default() += 1;
            *confusion.entry((c.cause.to_string(), got)).or_default() += 1;
        }
    }
    let mut labels: Vec<&str> = CAUSES.to_vec();
    labels.push("unknown");
    println!("| cause | traces | recall | precision | culprit service right |");
    println!("|---|---|---|---|---|");
    for c in labels {
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
    println!("| generator kind | traces | right |");
    println!("|---|---|---|");
    for (k, (n, r)) in &by_kind {
        println!("| {k} | {n} | {:.1}% |", pct(*r, *n));
    }
    println!();
    println!("| confidence | findings | mean stated | right |");
    println!("|---|---|---|---|");
    for (bin, (n, r, sum)) in &calib {
        println!(
            "| {:.1}–{:.1} | {n} | {:.2} | {:.1}% |",
            *bin as f64 / 10.0,
            (*bin + 1) as f64 / 10.0,
            sum / *n as f64,
            pct(*r, *n)
        );
    }
    println!();
    println!(
        "faulty traces: {faulty}, top-1 accuracy {:.2}%, culprit service right for {:.2}% of correct causes (unknown excepted)",
        pct(correct, faulty),
        pct(culprit_all, correct - tp.get("unknown").copied().unwrap_or(0))
    );
    println!(
        "concurrent faults: the second among the alternatives in {second_found} of {second_total}"
    );
    println!(
        "healthy-but-slow: {hs}, given a cause (unknown excepted): {hs_false} ({:.2}%)",
        pct(hs_false, hs)
    );
    println!(
        "healthy fast: {hf}, given a cause: {hf_false} ({:.2}%)",
        pct(hf_false, hf)
    );
    println!("not annotated (missing): {missing}");
    for ((kind, got), summary) in &miss_examples {
        println!("  first {kind} stated {got}: {summary}");
    }
    if !confusion.is_empty() {
        println!("confusions (planted → stated: count):");
        for ((a, b), n) in &confusion {
            println!("  {a} → {b}: {n}");
        }
    }
    println!("examples of rca.summary:");
    for (c, s) in &examples {
        println!("  {c}: {s}");
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

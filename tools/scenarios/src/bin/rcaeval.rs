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

/// The daemon under evaluation, started on `dir`'s configuration: the
/// child, its OTLP/HTTP port.
fn start_daemon(bin: &str, dir: &std::path::Path) -> (std::process::Child, u16) {
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
    let child = Command::new(bin)
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
    (child, http)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// The annotated traces of `path` once every one of `ids` has a cause, or
/// `secs` have passed.
fn wait_for(path: &std::path::Path, ids: &[[u8; 16]], secs: u64) -> Annotations {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let a = read_annotated(path);
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
}

type Annotations = std::collections::HashMap<String, causeway_scenarios::send::Annotated>;

/// The scenarios: every class, the hard cases, healthy fast and healthy
/// slow, shuffled; numbered from `n`.
fn scenarios(rng: &mut Rng, per_cause: u64, healthy: u64, mut n: u64) -> Vec<Case> {
    let t_now = now();
    let mut cases: Vec<Case> = Vec::new();
    for c in CAUSES {
        for _ in 0..per_cause {
            cases.push(case(rng, c, n, t_now));
            n += 1;
        }
    }
    for (kind, _) in HARD {
        for _ in 0..per_cause / 2 {
            cases.push(case(rng, kind, n, t_now));
            n += 1;
        }
    }
    for i in 0..healthy {
        let kind = if i % 2 == 0 {
            "healthy"
        } else {
            "healthy_slow"
        };
        cases.push(case(rng, kind, n, t_now));
        n += 1;
    }
    for i in (1..cases.len()).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        cases.swap(i, j);
    }
    cases
}

/// Send `cases` 20 at a time; metrics scraped late arrive 3 s after their
/// trace (after its decision).
fn send_all(client: &reqwest::blocking::Client, base: &str, rng: &mut Rng, cases: &[Case]) {
    let mut late_senders = Vec::new();
    for chunk in cases.chunks(20) {
        let mut chunk = chunk.to_vec();
        let mut late = Vec::new();
        for c in chunk.iter_mut().filter(|c| c.late_metrics) {
            late.append(&mut c.metrics);
        }
        send(client, base, &chunk, random_order(rng)).unwrap();
        if !late.is_empty() {
            let (client, base) = (client.clone(), base.to_string());
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
    let (mut child, http) = start_daemon(&bin, &dir);
    let client = {
        rustls::crypto::ring::default_provider()
            .install_default()
            .ok();
        reqwest::blocking::Client::new()
    };
    let base = format!("http://127.0.0.1:{http}");
    let path = dir.join("traces.jsonl");
    let mut rng = Rng::new(seed);

    // Warm-up: the normal traffic every operation's baseline learns from
    // (a running daemon has seen it), more of it than faults of any class.
    let kinds = (8 + OWNER_OPS.len()) as u64;
    let warm: Vec<Case> = (0..kinds * (per_cause * 2 + 40))
        .map(|n| case(&mut rng, "warmup", n, now()))
        .collect();
    for chunk in warm.chunks(50) {
        send(&client, &base, chunk, random_order(&mut rng)).unwrap();
    }
    let ids: Vec<[u8; 16]> = warm.iter().map(|c| c.trace_id).collect();
    wait_for(&path, &ids, 120);
    eprintln!("warm-up: {} traces", warm.len());

    let cases = scenarios(&mut rng, per_cause, healthy, warm.len() as u64);
    let sent = Instant::now();
    send_all(&client, &base, &mut rng, &cases);
    eprintln!("sent {} traces in {:?}", cases.len(), sent.elapsed());
    let ids: Vec<[u8; 16]> = cases.iter().map(|c| c.trace_id).collect();
    let annotated = wait_for(&path, &ids, 180);
    child.kill().ok();
    child.wait().ok();

    let mut score = Score::default();
    for c in &cases {
        score.add(c, annotated.get(&hex(&c.trace_id)));
    }
    score.print();
    if std::env::var_os("RCAEVAL_KEEP").is_some() {
        eprintln!("kept {}", dir.display());
    } else {
        std::fs::remove_dir_all(&dir).ok();
    }
}

/// The score. A healthy trace given any cause but `unknown` is a false
/// cause (slow_dependency included); precision counts those against the
/// cause.
#[derive(Default)]
struct Score {
    tp: BTreeMap<&'static str, u64>,
    fp: BTreeMap<String, u64>,
    total: BTreeMap<&'static str, u64>,
    culprit_ok: BTreeMap<&'static str, u64>,
    faulty: u64,
    correct: u64,
    missing: u64,
    culprit_all: u64,
    /// Healthy-but-slow traces, and those given a cause.
    hs: (u64, u64),
    /// Healthy fast traces, and those given a cause.
    hf: (u64, u64),
    /// Concurrent faults, and those whose second is among the alternatives.
    second: (u64, u64),
    confusion: BTreeMap<(String, String), u64>,
    examples: BTreeMap<String, String>,
    /// The first wrong verdict of each (generator kind, stated cause).
    miss_examples: BTreeMap<(String, String), String>,
    /// Calibration by tenth of stated confidence: findings, right, sum stated.
    calib: BTreeMap<u64, (u64, u64, f64)>,
    /// By generator kind: traces, right.
    by_kind: BTreeMap<&'static str, (u64, u64)>,
}

impl Score {
    fn add(&mut self, c: &Case, a: Option<&causeway_scenarios::send::Annotated>) {
        let Some(a) = a else {
            self.missing += 1;
            return;
        };
        let got = a.root.get("rca.cause").cloned().unwrap_or_default();
        let right = got == c.cause;
        self.calibrate(c, a, &got);
        let k = self.by_kind.entry(c.kind).or_default();
        k.0 += 1;
        k.1 += u64::from(right);
        let summary = || a.root.get("rca.summary").cloned().unwrap_or_default();
        if c.cause == "healthy" {
            let false_cause = got != "unknown";
            let h = if c.healthy_slow {
                &mut self.hs
            } else {
                &mut self.hf
            };
            h.0 += 1;
            h.1 += u64::from(false_cause);
            if false_cause {
                self.miss(("healthy".to_string(), got), summary());
            }
            return;
        }
        self.faulty += 1;
        *self.total.entry(c.cause).or_default() += 1;
        if let Some(second) = c.second {
            self.second.0 += 1;
            self.second.1 += u64::from(
                a.root
                    .get("rca.alternatives")
                    .is_some_and(|x| x.contains(&format!("{second}:"))),
            );
        }
        if !right {
            self.miss_examples
                .entry((c.kind.to_string(), got.clone()))
                .or_insert_with(summary);
            *self.fp.entry(got.clone()).or_default() += 1;
            *self
                .confusion
                .entry((c.cause.to_string(), got))
                .or_default() += 1;
            return;
        }
        self.correct += 1;
        *self.tp.entry(c.cause).or_default() += 1;
        if a.root.get("rca.culprit.service") == Some(&c.culprit_service) {
            *self.culprit_ok.entry(c.cause).or_default() += 1;
            self.culprit_all += u64::from(c.cause != "unknown");
        }
        if let Some(s) = a.root.get("rca.summary") {
            self.examples
                .entry(c.cause.to_string())
                .or_insert_with(|| s.clone());
        }
    }

    /// A healthy trace given `(healthy, got)`: a false cause.
    fn miss(&mut self, key: (String, String), summary: String) {
        let got = key.1.clone();
        self.miss_examples.entry(key).or_insert(summary);
        *self.fp.entry(got.clone()).or_default() += 1;
        *self.confusion.entry(("healthy".into(), got)).or_default() += 1;
    }

    /// Every finding stated, the verdict's and the alternatives', against
    /// the faults the trace really had (a concurrent fault's second too).
    fn calibrate(&mut self, c: &Case, a: &causeway_scenarios::send::Annotated, got: &str) {
        let is_fault = |cause: &str| cause == c.cause || c.second == Some(cause);
        let stated = causeway_scenarios::send::stated_findings(&a.root);
        let detail = std::env::var_os("RCAEVAL_CALIB_DETAIL").is_some();
        for (n, (cause, p)) in stated.into_iter().enumerate() {
            let bin = ((p * 10.0).floor() as u64).min(9);
            if detail {
                let conf = a.root.get("rca.confidence").map_or("0", String::as_str);
                let best = if n == 0 && got != "unknown" {
                    "best"
                } else {
                    "alt"
                };
                eprintln!(
                    "CALIB {bin} {best} {} {cause} {} {} | {conf} {:?} {:?}",
                    u64::from(is_fault(&cause)),
                    c.kind,
                    c.cause,
                    a.root.get("rca.alternatives"),
                    a.root.get("rca.reason")
                );
            }
            let e = self.calib.entry(bin).or_default();
            e.0 += 1;
            e.1 += u64::from(is_fault(&cause));
            e.2 += p;
        }
    }

    fn print(&self) {
        let mut labels: Vec<&str> = CAUSES.to_vec();
        labels.push("unknown");
        let of = |m: &BTreeMap<&'static str, u64>, c: &str| m.get(c).copied().unwrap_or(0);
        println!("| cause | traces | recall | precision | culprit service right |");
        println!("|---|---|---|---|---|");
        for c in labels {
            let (t, p, cu) = (of(&self.total, c), of(&self.tp, c), of(&self.culprit_ok, c));
            let f = self.fp.get(c).copied().unwrap_or(0);
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
        for (k, (n, r)) in &self.by_kind {
            println!("| {k} | {n} | {:.1}% |", pct(*r, *n));
        }
        println!();
        println!("| confidence | findings | mean stated | right |");
        println!("|---|---|---|---|");
        for (bin, (n, r, sum)) in &self.calib {
            println!(
                "| {:.1}–{:.1} | {n} | {:.2} | {:.1}% |",
                *bin as f64 / 10.0,
                (*bin + 1) as f64 / 10.0,
                sum / *n as f64,
                pct(*r, *n)
            );
        }
        println!();
        self.print_totals();
    }

    fn print_totals(&self) {
        let unknown = self.tp.get("unknown").copied().unwrap_or(0);
        println!(
            "faulty traces: {}, top-1 accuracy {:.2}%, culprit service right for {:.2}% of correct causes (unknown excepted)",
            self.faulty,
            pct(self.correct, self.faulty),
            pct(self.culprit_all, self.correct - unknown)
        );
        let (second_total, second_found) = self.second;
        println!(
            "concurrent faults: the second among the alternatives in {second_found} of {second_total}"
        );
        let ((hs, hs_false), (hf, hf_false)) = (self.hs, self.hf);
        println!(
            "healthy-but-slow: {hs}, given a cause (unknown excepted): {hs_false} ({:.2}%)",
            pct(hs_false, hs)
        );
        println!(
            "healthy fast: {hf}, given a cause: {hf_false} ({:.2}%)",
            pct(hf_false, hf)
        );
        println!("not annotated (missing): {}", self.missing);
        for ((kind, got), summary) in &self.miss_examples {
            println!("  first {kind} stated {got}: {summary}");
        }
        if !self.confusion.is_empty() {
            println!("confusions (planted → stated: count):");
            for ((a, b), n) in &self.confusion {
                println!("  {a} → {b}: {n}");
            }
        }
        println!("examples of rca.summary:");
        for (c, s) in &self.examples {
            println!("  {c}: {s}");
        }
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

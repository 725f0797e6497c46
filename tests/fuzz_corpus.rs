//! The fuzz targets' bodies, on stable Rust, as a bounded run in CI: every
//! file of `fuzz/corpus/<target>/` (the seeds and what libFuzzer found
//! worth keeping), then a few seconds of random mutations of them. A
//! panic is a failure. Coverage-guided runs use `cargo +nightly fuzz run`
//! (RELIABILITY.md).

use std::path::Path;
use std::time::{Duration, Instant};

fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("corpus dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    files.sort();
    let out: Vec<Vec<u8>> = files.iter().filter_map(|p| std::fs::read(p).ok()).collect();
    assert!(!out.is_empty(), "{} has no seeds", dir.display());
    out
}

/// xorshift: reproducible mutations.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Flip, insert, delete, duplicate and splice bytes, as libFuzzer's basic mutators do.
fn mutate(rng: &mut Rng, seeds: &[Vec<u8>], mut v: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + rng.below(8) {
        match rng.below(6) {
            0 if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(v.len() + 1);
                v.insert(i, rng.next() as u8);
            }
            2 if !v.is_empty() => {
                let i = rng.below(v.len());
                v.remove(i);
            }
            3 if !v.is_empty() => {
                let (a, b) = (rng.below(v.len()), rng.below(v.len()));
                let (a, b) = (a.min(b), a.max(b));
                let chunk = v[a..b].to_vec();
                let at = rng.below(v.len());
                v.splice(at..at, chunk);
            }
            4 => {
                let other = &seeds[rng.below(seeds.len())];
                if !other.is_empty() {
                    let at = rng.below(v.len() + 1);
                    let from = rng.below(other.len());
                    v.splice(at..at, other[from..].iter().copied());
                }
            }
            _ if !v.is_empty() => {
                let i = rng.below(v.len());
                v[i] = [0, 0xff, 0x7f, 0x80, b'{', b'"', b'\\'][rng.below(7)];
            }
            _ => {}
        }
        v.truncate(1 << 16);
    }
    v
}

fn run(target: &str, budget: Duration, f: impl Fn(&[u8])) {
    let seeds = corpus(target);
    for s in &seeds {
        f(s);
    }
    let mut rng = Rng(0x9e3779b97f4a7c15);
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < budget {
        let base = seeds[rng.below(seeds.len())].clone();
        let input = mutate(&mut rng, &seeds, base);
        f(&input);
        n += 1;
    }
    eprintln!(
        "{target}: {} seeds, {n} mutations in {budget:?}",
        seeds.len()
    );
    assert!(n > 100, "{target}: too few runs ({n})");
}

#[test]
fn otlp_http_body() {
    run(
        "otlp_http",
        Duration::from_secs(4),
        causeway_receivers::fuzzing::otlp_http_body,
    );
}

#[test]
fn gateway_line() {
    run(
        "gateway_line",
        Duration::from_secs(3),
        causeway_receivers::fuzzing::gateway_line,
    );
}

#[test]
fn config_loader() {
    let mut r = causeway_core::registry::Registry::new();
    causeway_receivers::register(&mut r);
    causeway_processors::register(&mut r);
    causeway_exporters::register(&mut r);
    run("config", Duration::from_secs(4), |data| {
        if let Ok(text) = std::str::from_utf8(data) {
            drop(causeway_core::config::load_str(
                text,
                "fuzz.yaml",
                &r,
                &|_| None,
            ));
        }
    });
}

#[test]
fn gateway_presets() {
    run(
        "gateway_preset",
        Duration::from_secs(3),
        causeway_receivers::fuzzing::gateway_preset,
    );
}

#[test]
fn prometheus_text_and_openmetrics() {
    run(
        "prometheus_text",
        Duration::from_secs(3),
        causeway_receivers::fuzzing::prometheus_text,
    );
}

#[test]
fn relabel_engine() {
    run(
        "relabel",
        Duration::from_secs(3),
        causeway_receivers::fuzzing::relabel,
    );
}

#[test]
fn rabbitmq_answers() {
    run(
        "rabbitmq_answer",
        Duration::from_secs(2),
        causeway_receivers::fuzzing::rabbitmq_answer,
    );
}

#[test]
fn nats_jsz_answers() {
    run(
        "nats_jsz",
        Duration::from_secs(2),
        causeway_receivers::fuzzing::nats_jsz,
    );
}

#[test]
fn pprof_profiles() {
    run(
        "pprof",
        Duration::from_secs(3),
        causeway_receivers::fuzzing::pprof_profile,
    );
}

#[test]
fn otlp_profiles_into_correlate() {
    run(
        "otlp_profiles",
        Duration::from_secs(3),
        causeway_processors::correlate::source::profiles::fuzz_otlp_profiles,
    );
}

#[test]
fn kafka_message_framing() {
    run(
        "kafka_message",
        Duration::from_secs(3),
        causeway_receivers::fuzzing::kafka_message,
    );
}

#[test]
fn w3c_tracestate() {
    run(
        "trace_state",
        Duration::from_secs(1),
        causeway_processors::tail_sampling::fuzz_trace_state,
    );
}

//! Parse + convert gateway access-log lines to encoded OTLP log records.

use causeway_receivers::gateway_log::parse::{encode_record, Format, KeyMap};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

fn lines() -> Vec<String> {
    (0..1000u64)
        .map(|i| {
            format!(
                r#"{{"timestamp":"2026-11-29T10:00:{:02}.{:03}Z","trace_id":"{:032x}","span_id":"{:016x}","route_id":"user-service-v2","method":"GET","path":"/api/v2/users/{i}","status_code":{},"duration_ms":{},"rate_limit_rule":"qps-100-per-ip","circuit_state":"HALF_OPEN","upstream":"10.0.3.7:8080","client_ip":"203.0.113.9"}}"#,
                i % 60,
                i % 1000,
                i + 1,
                i + 1,
                [200, 429, 503][i as usize % 3],
                5 + i % 300
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let lines = lines();
    let avg = lines.iter().map(String::len).sum::<usize>() / lines.len();
    let mut g = c.benchmark_group(format!("gateway_json_{avg}B"));
    g.throughput(Throughput::Elements(lines.len() as u64));
    let json = Format::Json(KeyMap::new(&[]));
    g.bench_function("parse_only", |b| {
        b.iter(|| {
            lines
                .iter()
                .filter(|l| json.parse(black_box(l)).is_ok())
                .count()
        })
    });
    let mut buf = Vec::with_capacity(1 << 20);
    g.bench_function("parse_and_encode_record", |b| {
        b.iter(|| {
            buf.clear();
            for l in &lines {
                if let Ok(f) = json.parse(black_box(l)) {
                    encode_record(l, &f, 1, &mut buf);
                }
            }
            buf.len()
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

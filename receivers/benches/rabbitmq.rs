//! One collection of the `rabbitmq` receiver over 1,000 queues: parse the
//! management API's answer (the columns it asks for, shaped as RabbitMQ 3.10
//! answers them) and judge and write every queue.

use causeway_receivers::rabbitmq::{collect, config::RabbitmqConfig, parse_queues, History};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::collections::HashMap;
use std::hint::black_box;

fn answer(n: usize, round: u64) -> String {
    let items: Vec<String> = (0..n)
        .map(|i| {
            format!(
                r#"{{"consumers":{c},"head_message_timestamp":1764650000,"message_stats":{{"ack":{a},"deliver_get":{a},"deliver_get_details":{{"rate":4.2}},"publish":{p},"publish_details":{{"rate":6.5}}}},"messages":{m},"messages_ready":{m},"messages_unacknowledged":0,"name":"orders.shard-{i}.retry","node":"rabbit@mq-{node}","type":"classic","vhost":"/"}}"#,
                c = i % 3,
                a = 1000 * round + i as u64,
                p = 1100 * round + i as u64,
                m = (i as u64 * 7 + round) % 9000,
                node = i % 3,
            )
        })
        .collect();
    format!("[{}]", items.join(","))
}

fn bench(c: &mut Criterion) {
    let cfg: RabbitmqConfig = serde_yaml::from_str("username: monitoring").expect("config");
    let filters = (
        cfg.vhosts.compile().expect("vhosts"),
        cfg.queues.compile().expect("queues"),
        regex::Regex::new(&format!("^(?:{})$", cfg.retry_queues)).expect("retry"),
    );
    let body = answer(1000, 1);
    let mut g = c.benchmark_group(format!("rabbitmq_1000_queues_{}KB", body.len() / 1024));
    g.throughput(Throughput::Elements(1000));
    g.bench_function("parse", |b| {
        b.iter(|| parse_queues(black_box(body.as_bytes())).expect("parse"))
    });
    let queues = parse_queues(body.as_bytes()).expect("parse");
    let mut history: HashMap<(String, String), History> = HashMap::new();
    let mut t = 1_764_650_100.0;
    g.bench_function("judge_and_write", |b| {
        b.iter(|| {
            t += 10.0;
            collect(
                &cfg,
                (&filters.0, &filters.1, &filters.2),
                black_box(&queues),
                &[],
                &mut history,
                t,
                0,
            )
        })
    });
    g.bench_function("round", |b| {
        b.iter(|| {
            t += 10.0;
            let q = parse_queues(black_box(body.as_bytes())).expect("parse");
            collect(
                &cfg,
                (&filters.0, &filters.1, &filters.2),
                &q,
                &[],
                &mut history,
                t,
                0,
            )
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

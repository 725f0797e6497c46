//! One collection of the `rabbitmq` receiver over 1,000 queues: parse the
//! management API's answer (the columns it asks for, shaped as RabbitMQ 3.10
//! answers them) and judge and write every queue.

use causeway_receivers::rabbitmq::{
    collect, config::RabbitmqConfig, parse_bindings, parse_queues, History,
};
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

/// `GET /api/bindings` (each queue bound to one of 10 topic exchanges, plus
/// the default exchange's implicit binding) and `GET /api/exchanges`.
fn bindings(n: usize) -> (String, String) {
    let b: Vec<String> = (0..n)
        .flat_map(|i| {
            [
                format!(r#"{{"source":"","vhost":"/","destination":"orders.shard-{i}.retry","destination_type":"queue","routing_key":"orders.shard-{i}.retry"}}"#),
                format!(r#"{{"source":"orders-{x}","vhost":"/","destination":"orders.shard-{i}.retry","destination_type":"queue","routing_key":"order.{i}.*"}}"#, x = i % 10),
            ]
        })
        .collect();
    let e: Vec<String> = (0..10)
        .map(|x| format!(r#"{{"name":"orders-{x}","vhost":"/","type":"topic"}}"#))
        .collect();
    (format!("[{}]", b.join(",")), format!("[{}]", e.join(",")))
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
    let (bb, eb) = bindings(1000);
    g.bench_function("parse_bindings", |b| {
        b.iter(|| {
            parse_bindings(black_box(bb.as_bytes()), black_box(eb.as_bytes())).expect("parse")
        })
    });
    g.bench_function("round_with_bindings", |b| {
        b.iter(|| {
            t += 10.0;
            let q = parse_queues(black_box(body.as_bytes())).expect("parse");
            let bs =
                parse_bindings(black_box(bb.as_bytes()), black_box(eb.as_bytes())).expect("parse");
            collect(
                &cfg,
                (&filters.0, &filters.1, &filters.2),
                &q,
                &bs,
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

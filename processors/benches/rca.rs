//! Root-cause analysis cost: a decision tick of 1,000 kept traces of 50
//! spans (critical path, join, the built-in rules in DataFusion, the
//! annotations), with the profiles source's samples joined and without,
//! the correlation state taking in gateway log records, the profiles
//! source taking in OTLP profiles (samples per CPU-second), and what the
//! traces a sampler did not keep cost `correlate` to learn from.

/// The daemon's allocator, so that the numbers are those of the binary.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

use causeway_processors::correlate::analysis::trace::traces as rows_of;
use causeway_processors::correlate::analysis::verdict::{verdict, Enough};
use causeway_processors::correlate::annotate::annotate;
use causeway_processors::correlate::config::CorrelateConfig;
use causeway_processors::correlate::model::table::Table;
use causeway_processors::correlate::model::{Rule, TraceRow};
use causeway_processors::correlate::source::{Correlation, Tick};
use causeway_processors::correlate::store::{Limits, Store};
use causeway_processors::correlate::{registry, rules};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use causeway_core::model::attribute as kv;

const T0: u64 = 1_700_000_000_000_000_000;

/// `n` traces of 50 spans: a root, 7 services of 7 spans each (a call and its work).
fn traces(n: usize) -> Vec<ResourceSpans> {
    let mut out = Vec::new();
    for t in 0..n {
        let mut tid = [0u8; 16];
        tid[..8].copy_from_slice(&(t as u64 + 1).to_be_bytes());
        let mut spans = Vec::new();
        let sid = |i: u64| ((t as u64) << 16 | (i + 1)).to_be_bytes().to_vec();
        spans.push(Span {
            trace_id: tid.to_vec(),
            span_id: sid(0),
            name: "POST /orders".into(),
            kind: 2,
            start_time_unix_nano: T0,
            end_time_unix_nano: T0 + 500_000_000,
            attributes: vec![kv(
                "http.route",
                any_value::Value::StringValue(format!("route-{}", t % 20)),
            )],
            ..Default::default()
        });
        for s in 0..7u64 {
            let call = 1 + s * 7;
            let start = T0 + s * 60_000_000;
            spans.push(Span {
                trace_id: tid.to_vec(),
                span_id: sid(call),
                parent_span_id: sid(0),
                name: format!("GET svc-{s}"),
                kind: 3,
                start_time_unix_nano: start,
                end_time_unix_nano: start + 55_000_000,
                attributes: vec![kv(
                    "server.address",
                    any_value::Value::StringValue(format!("svc-{s}")),
                )],
                ..Default::default()
            });
            for w in 1..7u64 {
                let ws = start + w * 7_000_000;
                spans.push(Span {
                    trace_id: tid.to_vec(),
                    span_id: sid(call + w),
                    parent_span_id: sid(call),
                    name: "SELECT items".into(),
                    kind: 3,
                    start_time_unix_nano: ws,
                    end_time_unix_nano: ws + 6_000_000,
                    attributes: vec![kv(
                        "db.system",
                        any_value::Value::StringValue("postgresql".into()),
                    )],
                    ..Default::default()
                });
            }
        }
        out.push(ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv(
                        "service.name",
                        any_value::Value::StringValue("orders".into()),
                    ),
                    kv(
                        "host.name",
                        any_value::Value::StringValue(format!("host-{}", t % 10)),
                    ),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        });
    }
    out
}

fn gateway_logs(n: usize) -> Vec<ResourceLogs> {
    let records = (0..n)
        .map(|t| {
            let mut tid = [0u8; 16];
            tid[..8].copy_from_slice(&(t as u64 + 1).to_be_bytes());
            LogRecord {
                time_unix_nano: T0,
                trace_id: tid.to_vec(),
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(format!(
                        "{{\"route_id\":\"route-{}\",\"status_code\":200}}",
                        t % 20
                    ))),
                }),
                attributes: vec![
                    kv(
                        "route_id",
                        any_value::Value::StringValue(format!("route-{}", t % 20)),
                    ),
                    kv(
                        "http.response.status_code",
                        any_value::Value::IntValue(if t % 10 == 0 { 429 } else { 200 }),
                    ),
                    kv(
                        "gateway.rate_limit_rule",
                        any_value::Value::StringValue("qps-100".into()),
                    ),
                    kv(
                        "http.server.request.duration",
                        any_value::Value::DoubleValue(0.5),
                    ),
                ],
                ..Default::default()
            }
        })
        .collect();
    vec![ResourceLogs {
        resource: Some(Resource::default()),
        scope_logs: vec![ScopeLogs {
            log_records: records,
            ..Default::default()
        }],
        ..Default::default()
    }]
}

/// A Go service's CPU profile of the 1,000 traces of [`traces`]: per trace
/// 20 samples linked to its root (the local root, as otel-profiling-go
/// labels it), their stacks 30 frames deep out of 200 distinct stacks of
/// 300 functions; and a mutex profile of 50 unlinked samples.
fn profiles(
    n: usize,
) -> opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use opentelemetry_proto::tonic::profiles::v1development::{
        Link, Profile, ResourceProfiles, Sample, ScopeProfiles, ValueType,
    };
    let mut d = causeway_scenarios::profiles::go_service_dictionary("orders");
    let mut cpu = Vec::new();
    for t in 0..n {
        d.link_table.push(Link {
            trace_id: vec![0; 16],
            span_id: ((t as u64) << 16 | 1).to_be_bytes().to_vec(),
        });
        let link_index = d.link_table.len() as i32 - 1;
        for k in 0..20 {
            cpu.push(Sample {
                stack_index: 1 + ((t * 20 + k) % 200) as i32,
                link_index,
                values: vec![10_000_000],
                ..Default::default()
            });
        }
    }
    let mutex = (0..50)
        .map(|k| Sample {
            stack_index: 1 + k,
            values: vec![5_000_000],
            ..Default::default()
        })
        .collect();
    let profile = |type_strindex, samples| Profile {
        sample_type: Some(ValueType {
            type_strindex,
            unit_strindex: 2,
        }),
        samples,
        time_unix_nano: T0 - 1_000_000_000,
        duration_nano: 15_000_000_000,
        ..Default::default()
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![kv(
                    "service.name",
                    any_value::Value::StringValue("orders".into()),
                )],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![profile(1, cpu), profile(3, mutex)],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(d),
    }
}

fn store() -> Correlation {
    let cfg: CorrelateConfig = serde_yaml::from_str("{}").expect("defaults");
    let store = Store::new(Limits {
        window_ns: 600_000_000_000,
        max_log_records: 200_000,
        max_series: 50_000,
        max_points: 64,
        max_routes: 10_000,
        max_events: 100_000,
        max_log_bytes: usize::MAX,
        max_analysed: 100_000,
        baseline_window_ns: 3_600_000_000_000,
        baseline_min_samples: 20,
        baseline_max_operations: 10_000,
    });
    Correlation {
        store,
        sources: registry::sources(&cfg),
    }
}

/// The join with logs and every source, as the processor makes it (the
/// config's lookback and lookahead); the sources' tables.
fn join(st: &Correlation, rows: &mut [TraceRow]) -> Vec<Table> {
    st.sources.join_logs(rows, &st.store);
    let tick = Tick {
        store: &st.store,
        now_ns: T0,
        lookback_ns: 120_000_000_000,
        lookahead_ns: 60_000_000_000,
    };
    let joined = st.sources.join(&tick, rows);
    assert!(joined.errors.is_empty(), "{:?}", joined.errors);
    joined.tables
}

/// The built-in rules of the core and of every source.
fn all_rules(st: &Correlation) -> Vec<Rule> {
    let builtin = rules::builtin()
        .into_iter()
        .chain(st.sources.rules())
        .collect();
    rules::assemble(builtin, true, &[])
}

fn bench(c: &mut Criterion) {
    // The daemon's runtime: multi-threaded, one worker per core (2 here).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let one = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    let st = store();
    let rules = all_rules(&st);
    let causes = Rule::causes(&rules);
    let tables = st.sources.tables();
    st.add_logs(&gateway_logs(1000), T0);
    let batch = traces(1000);
    // The same state with the profiles of the batch's 1,000 traces.
    let with_profiles = store();
    with_profiles.add_logs(&gateway_logs(1000), T0);
    {
        use prost::Message;
        let req = profiles(1000);
        with_profiles.add_profiles(&req, req.encoded_len(), T0);
    }
    // Where a tick's time goes, once, without the profiles and with them.
    for (st, what) in [(&st, "without profiles"), (&with_profiles, "with profiles")] {
        eprintln!("{what}:");
        let rs = batch.clone();
        let t = std::time::Instant::now();
        let mut rows = rows_of(&rs, Some(&st.store.baselines), &Default::default());
        let t1 = t.elapsed();
        let joined = join(st, &mut rows);
        let t2 = t.elapsed();
        let core = rules::tables(&rows).expect("tables");
        let t3 = t.elapsed();
        drop(core);
        let (findings, _) =
            one.block_on(rules::Planner::new(&tables).evaluate(&rules, &rows, joined));
        let t4 = t.elapsed();
        let mut rs = rs;
        for tr in &rows {
            let v = verdict(
                tr,
                findings.get(&tr.trace_id),
                &Enough {
                    share: 0.2,
                    ms: 50.0,
                },
                None,
                &causes,
            );
            annotate(&mut rs, tr, &v, st.sources.log_columns());
        }
        let t5 = t.elapsed();
        eprintln!(
            "phases: critical path {:?}, join {:?}, tables {:?}, tables+rules {:?}, annotate {:?}",
            t1,
            t2 - t1,
            t3 - t2,
            t4 - t3,
            t5 - t4
        );
        // Each rule alone, on one thread (its own tables' cost with it).
        for r in rules.iter().filter(|r| {
            what == "without profiles"
                || matches!(
                    r.cause.as_str(),
                    "cpu_hotspot" | "gc_pressure" | "lock_contention"
                )
        }) {
            let t = std::time::Instant::now();
            let joined = join(st, &mut rows);
            let (_, errors) = one.block_on(rules::Planner::new(&tables).evaluate(
                std::slice::from_ref(r),
                &rows,
                joined,
            ));
            assert!(errors.is_empty(), "{errors:?}");
            eprintln!("rule {:<28} {:?} (with its tables)", r.name, t.elapsed());
        }
    }
    let mut g = c.benchmark_group("rca");
    g.sample_size(10);
    g.throughput(Throughput::Elements(1000));
    // One planner per runtime, kept across ticks as the processor keeps its own.
    // One planner per runtime and mode, kept across ticks as the processor
    // keeps its own: physical plans made once (the daemon's), or made at
    // every tick (as before issue #30).
    let planners = std::cell::RefCell::new([
        rules::Planner::new(&tables),
        rules::Planner::new(&tables),
        rules::Planner::with_physical_once(&tables, false),
        rules::Planner::with_physical_once(&tables, false),
    ]);
    let tick_of =
        |st: &Correlation, rt: &tokio::runtime::Runtime, which: usize, rs: Vec<ResourceSpans>| {
            let mut rs = rs;
            let mut rows = rows_of(&rs, Some(&st.store.baselines), &Default::default());
            let joined = join(st, &mut rows);
            let (findings, errors) =
                rt.block_on(planners.borrow_mut()[which].evaluate(&rules, &rows, joined));
            assert!(errors.is_empty(), "{errors:?}");
            for t in &rows {
                let v = verdict(
                    t,
                    findings.get(&t.trace_id),
                    &Enough {
                        share: 0.2,
                        ms: 50.0,
                    },
                    None,
                    &causes,
                );
                annotate(&mut rs, t, &v, st.sources.log_columns());
            }
            rs
        };
    let tick = |rt: &tokio::runtime::Runtime, which: usize, rs: Vec<ResourceSpans>| {
        tick_of(&st, rt, which, rs)
    };
    // On one thread: the CPU a tick costs.
    g.bench_function("tick_1000_traces_x50_spans_one_thread", |b| {
        b.iter_batched(
            || batch.clone(),
            |rs| tick(&one, 0, rs),
            criterion::BatchSize::LargeInput,
        )
    });
    // The profiles source on: each trace's spans joined with its samples
    // (the code table, the code rules, the evidence with its flame graph).
    g.bench_function("tick_1000_traces_x50_spans_one_thread_with_profiles", |b| {
        b.iter_batched(
            || batch.clone(),
            |rs| tick_of(&with_profiles, &one, 0, rs),
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function(
        "tick_1000_traces_x50_spans_one_thread_physical_per_tick",
        |b| {
            b.iter_batched(
                || batch.clone(),
                |rs| tick(&one, 2, rs),
                criterion::BatchSize::LargeInput,
            )
        },
    );
    g.bench_function("tick_1000_traces_x50_spans_physical_per_tick", |b| {
        b.iter_batched(
            || batch.clone(),
            |rs| tick(&rt, 3, rs),
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function("tick_1000_traces_x50_spans", |b| {
        // The batch is decoded already when it reaches the processor: its
        // copy is set-up, not measured.
        b.iter_batched(
            || batch.clone(),
            |rs| tick(&rt, 1, rs),
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
    // Profiles taken in: a request decoded (it reaches the processor
    // encoded) and its samples into the window, on one thread.
    let mut g = c.benchmark_group("profiles");
    let encoded = {
        use prost::Message;
        profiles(1000).encode_to_vec()
    };
    g.throughput(Throughput::Elements(20_050));
    g.bench_function("take_20050_samples", |b| {
        b.iter_batched(
            store,
            |st| {
                use prost::Message;
                let req = opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest::decode(encoded.as_slice()).expect("decodes");
                st.add_profiles(&req, encoded.len(), T0);
                st
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
    incidents(c, &st, &batch);
    let logs = gateway_logs(10_000);
    let mut g = c.benchmark_group("correlation_state");
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("add_10000_gateway_log_records", |b| {
        let st = store();
        let mut now = T0;
        b.iter(|| {
            now += 1_000_000;
            st.add_logs(&logs, now);
        })
    });
    g.finish();
}

/// The incidents' share of a tick: the samples of its 1,000 traces
/// (attributes, levels, weight) fed in; and the evaluation every
/// `incidents.interval` over 10,000 routes (the `max_routes` default),
/// each with a normal and a recent window.
fn incidents(c: &mut Criterion, st: &Correlation, batch: &[ResourceSpans]) {
    use causeway_processors::correlate::incidents::config::IncidentsConfig;
    use causeway_processors::correlate::incidents::sample::{Attr, Sample};
    use causeway_processors::correlate::incidents::Incidents;
    let cfg = IncidentsConfig::default();
    let attrs: Vec<Attr> = cfg
        .attributes
        .iter()
        .filter_map(|a| Attr::parse(a, |n| st.sources.log_column(n)))
        .collect();
    let mut rows = rows_of(batch, Some(&st.store.baselines), &Default::default());
    let _ = join(st, &mut rows);
    let samples = |rows: &[TraceRow], now: u64| -> Vec<Sample> {
        rows.iter()
            .map(|t| Sample::of(batch, t, now, ("unknown", "", "service", t.culprit), &attrs))
            .collect()
    };
    let mut g = c.benchmark_group("incidents");
    g.sample_size(20);
    g.throughput(Throughput::Elements(1000));
    let inc = Incidents::new(&cfg);
    let mut now = T0;
    g.bench_function("samples_and_feed_of_a_1000_trace_tick", |b| {
        b.iter(|| {
            now += 10_000_000;
            inc.feed(samples(&rows, now));
        })
    });
    // 10,000 routes, an hour of normal and a recent window each.
    let inc = Incidents::new(&cfg);
    let one = samples(&rows[..1], T0).remove(0);
    let s = 1_000_000_000u64;
    // Route `r`'s request at `t` (s after T0).
    let request = |r: u64, t: u64| {
        let mut x = one.clone();
        x.route = format!("route-{r}");
        x.time_ns = T0 + t * s;
        x.duration_ms = 100.0 + (r % 50) as f64;
        x
    };
    for t in (0..3600).step_by(10) {
        for r in 0..10_000u64 {
            inc.feed([request(r, t)]);
        }
        inc.tick(T0 + (t + 10) * s);
    }
    // A recent window of 30 requests per route (enough to be compared).
    for t in (3600..3630).step_by(10) {
        for r in 0..10_000u64 {
            inc.feed(std::iter::repeat_n(request(r, t), 10));
        }
    }
    assert_eq!(inc.counts().routes, 10_000);
    assert!(inc.tick(T0 + 3630 * s).is_empty());
    g.throughput(Throughput::Elements(10_000));
    // Evaluated again at the same moment: what each tick costs once the
    // buckets have moved (nothing breaks, as on most ticks).
    g.bench_function("evaluate_10000_routes", |b| {
        b.iter(|| inc.tick(T0 + 3630 * s))
    });
    // The steady state: each interval, every route gets a new bucket and
    // its oldest recent bucket enters its normal (1,000 routes, three
    // requests each per interval, then the evaluation).
    let inc = Incidents::new(&cfg);
    let mut t = 0u64;
    let interval = |inc: &Incidents, t: &mut u64| {
        for r in 0..1_000u64 {
            inc.feed(std::iter::repeat_n(request(r, *t), 3));
        }
        *t += 10;
        inc.tick(T0 + *t * s)
    };
    while t < 3600 {
        interval(&inc, &mut t);
    }
    g.throughput(Throughput::Elements(1_000));
    g.bench_function("interval_of_1000_routes_feed_rotate_evaluate", |b| {
        b.iter(|| interval(&inc, &mut t))
    });
    g.finish();
}

/// What the traces a sampler did not keep cost `correlate`: the request
/// decoded, its rows, the calls, retries and baselines learned (its unkept
/// learner, as the sampler hands it a request), per span.
fn unkept(c: &mut Criterion) {
    use causeway_processors::unkept::Learner;
    use prost::Message;
    let learner = causeway_processors::correlate::stage::unkept::Learn::new(
        std::sync::Arc::new(store()),
        Default::default(),
        usize::MAX,
        (&causeway_core::telemetry::Registry::new(), "correlate"),
    );
    let encoded = bytes::Bytes::from(
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
            resource_spans: traces(1000),
        }
        .encode_to_vec(),
    );
    let mut g = c.benchmark_group("unkept");
    g.sample_size(20);
    g.throughput(Throughput::Elements(50_000));
    g.bench_function("learn_1000_traces_x50_spans", |b| {
        b.iter(|| learner.learn(encoded.clone()))
    });
    g.finish();
}

criterion_group!(benches, bench, unkept);
criterion_main!(benches);

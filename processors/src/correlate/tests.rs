use super::stage::analyse::{AnalysisTime, HeldTraces};
use super::*;
use crate::correlate::analysis::verdict::verdict;
use crate::correlate::analysis::verdict::Enough;
use crate::correlate::annotate::{annotate, kv};
use crate::correlate::model::table::Table;
use crate::correlate::model::TraceRow;
use crate::correlate::model::{Trouble, Verdict};
use crate::correlate::source::deps;
use crate::correlate::source::Tick;
use crate::trouble::TroubleState;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use opentelemetry_proto::tonic::trace::v1::{span, ScopeSpans, Span, Status};

pub(crate) fn attr_s(k: &str, v: &str) -> KeyValue {
    kv(k, v.to_string())
}

pub(crate) fn span(
    tid: u8,
    id: u8,
    parent: Option<u8>,
    name: &str,
    start_ms: u64,
    end_ms: u64,
    attrs: Vec<KeyValue>,
) -> Span {
    Span {
        trace_id: vec![tid; 16],
        span_id: vec![id; 8],
        parent_span_id: parent.map(|p| vec![p; 8]).unwrap_or_default(),
        name: name.into(),
        kind: if parent.is_none() {
            span::SpanKind::Server as i32
        } else {
            span::SpanKind::Client as i32
        },
        start_time_unix_nano: 1_000_000_000_000 + start_ms * 1_000_000,
        end_time_unix_nano: 1_000_000_000_000 + end_ms * 1_000_000,
        attributes: attrs,
        ..Default::default()
    }
}

pub(crate) fn resource_spans(service: &str, spans: Vec<Span>) -> ResourceSpans {
    ResourceSpans {
        resource: Some(Resource {
            attributes: vec![
                attr_s("service.name", service),
                attr_s("host.name", "web-1"),
            ],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn gateway_log(tid: u8, status: i64, extra: Vec<KeyValue>) -> ResourceLogs {
    let mut attrs = vec![
        attr_s("route_id", "order-create"),
        kv("http.response.status_code", status),
    ];
    attrs.extend(extra);
    ResourceLogs {
        resource: Some(Resource {
            attributes: vec![attr_s("service.name", "edge-gateway")],
            ..Default::default()
        }),
        scope_logs: vec![ScopeLogs {
            log_records: vec![LogRecord {
                time_unix_nano: 1_000_000_000_000,
                trace_id: vec![tid; 16],
                attributes: attrs,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A correlation state with these limits and the registered sources (the
/// config's defaults, its window and routes from `limits`).
fn correlation(limits: Limits) -> Arc<Correlation> {
    let mut cfg: CorrelateConfig = serde_yaml::from_str("{}").unwrap();
    cfg.max_routes = limits.max_routes;
    cfg.window = causeway_core::config::Duration::secs(limits.window_ns / 1_000_000_000);
    Arc::new(Correlation {
        store: Store::new(limits),
        sources: registry::sources(&cfg),
    })
}

/// The built-in rules of the core and of every source.
fn all_rules(c: &Correlation) -> Vec<Rule> {
    let builtin = rules::builtin()
        .into_iter()
        .chain(c.sources.rules())
        .collect();
    rules::assemble(builtin, true, &[])
}

/// `Correlation::in_trouble` over these attribute values of a trace:
/// routes, (messaging destinations, RabbitMQ routing keys), hosts.
fn troubled(
    c: &Correlation,
    id: &[u8; 16],
    routes: &[&str],
    (topics, routing_keys): (&[&str], &[&str]),
    hosts: &[&str],
    tr: &Trouble,
) -> bool {
    let values = |k: &str| -> Vec<&str> {
        match k {
            "http.route" => routes.to_vec(),
            "messaging.destination.name" => topics.to_vec(),
            "messaging.rabbitmq.destination.routing_key" => routing_keys.to_vec(),
            "host.name" => hosts.to_vec(),
            _ => Vec::new(),
        }
    };
    c.in_trouble(id, &values, tr)
}

fn store() -> Arc<Correlation> {
    correlation(Limits {
        window_ns: 600_000_000_000,
        max_log_records: 1000,
        max_series: 1000,
        max_points: 64,
        max_routes: 100,
        max_events: 100,
        max_log_bytes: usize::MAX,
        max_analysed: 100_000,
        baseline_window_ns: 3_600_000_000_000,
        baseline_min_samples: 20,
        baseline_max_operations: 10_000,
    })
}

/// The traces of `rs` joined with their logs and every source, with points
/// within `(lookback, lookahead)` ns of them; and the sources' tables.
fn join_within(
    c: &Correlation,
    rs: &[ResourceSpans],
    (lookback_ns, lookahead_ns): (u64, u64),
) -> (Vec<TraceRow>, Vec<Table>) {
    let mut traces = analysis::trace::traces(rs, Some(&c.store.baselines), &Default::default());
    c.sources.join_logs(&mut traces, &c.store);
    c.store.peers.learn_and_fill(&mut traces);
    c.store.refusals.learn_and_mark(&mut traces);
    c.store.retries.learn(&traces);
    c.store.retries.mark(&mut traces);
    let tick = Tick {
        store: &c.store,
        now_ns: 1_000_000_000_000,
        lookback_ns,
        lookahead_ns,
    };
    let joined = c.sources.join(&tick, &mut traces);
    assert!(joined.errors.is_empty(), "{:?}", joined.errors);
    (traces, joined.tables)
}

/// The traces of `rs`, joined with everything the store holds (any time).
fn join_all(c: &Correlation, rs: &[ResourceSpans]) -> (Vec<TraceRow>, Vec<Table>) {
    join_within(c, rs, (u64::MAX / 4, u64::MAX / 4))
}

async fn analyse(c: &Correlation, rs: &mut [ResourceSpans]) -> Vec<(TraceRow, Verdict)> {
    let (traces, tables) = join_all(c, rs);
    let rules = all_rules(c);
    // Planned before any row exists, as the processor does at startup.
    let mut planner = rules::Planner::new(&c.sources.tables());
    planner.prepare(&rules).await;
    assert_eq!(planner.planned(), rules.len(), "every rule planned at once");
    let (findings, errors) = planner.evaluate(&rules, &traces, tables).await;
    assert!(errors.is_empty(), "{errors:?}");
    let causes = Rule::causes(&rules);
    traces
        .into_iter()
        .map(|t| {
            let v = verdict(
                &t,
                findings.get(&t.trace_id),
                &Enough {
                    share: 0.2,
                    ms: 50.0,
                },
                Some(&c.store.peers),
                &causes,
            );
            annotate(rs, &t, &v, c.sources.log_columns());
            (t, v)
        })
        .collect()
}

#[tokio::test]
async fn a_rate_limited_trace_gets_its_cause_summary_and_annotations() {
    let st = store();
    let mut logs = Vec::new();
    // Every attempt was rejected: the request failed with 429.
    for _ in 0..15 {
        logs.push(gateway_log(
            7,
            429,
            vec![attr_s("gateway.rate_limit_rule", "qps-100-per-ip")],
        ));
    }
    st.add_logs(&logs, 1_000_000_000_000);
    let mut rs = vec![resource_spans(
        "orders",
        vec![
            span(
                7,
                1,
                None,
                "POST /orders",
                0,
                900,
                vec![attr_s("http.route", "order-create")],
            ),
            span(
                7,
                2,
                Some(1),
                "INSERT orders",
                100,
                200,
                vec![attr_s("db.system", "postgresql")],
            ),
        ],
    )];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert_eq!(v.best.cause, "rate_limited");
    assert_eq!(v.best.rule, "gateway_429");
    assert_eq!(
        v.best.summary,
        "route order-create rate-limited by qps-100-per-ip: 15 of 15 gateway attempts answered 429"
    );
    assert_eq!(t.route.as_deref(), Some("order-create"));
    let root = &rs[0].scope_spans[0].spans[0];
    let get = |k: &str| {
        root.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.clone())
    };
    assert!(get("rca.cause").is_some());
    assert!(get("rca.evidence").is_some_and(|e| format!("{e:?}").contains("qps-100-per-ip")));
    // The limiter is at fault, not the client it limited: the gateway.
    let text = |k: &str| match get(k).and_then(|v| v.value) {
        Some(any_value::Value::StringValue(x)) => x,
        other => panic!("{k}: {other:?}"),
    };
    assert_eq!(text("rca.culprit.service"), "edge-gateway");
    assert_eq!(text("rca.culprit.kind"), "limiter");
    let child = &rs[0].scope_spans[0].spans[1];
    assert!(child
        .attributes
        .iter()
        .any(|a| a.key == "rca.critical_path"));
    // Self times: root 0..100 and 200..900 = 800, child 100.
    assert!((t.spans[0].self_ms - 800.0).abs() < 1e-6);
    assert!((t.spans[1].self_ms - 100.0).abs() < 1e-6);
}

#[tokio::test]
async fn a_trace_with_no_evidence_is_unknown_and_names_its_largest_self_time() {
    let st = store();
    let mut rs = vec![resource_spans(
        "orders",
        vec![
            span(9, 1, None, "GET /health", 0, 50, vec![]),
            span(9, 2, Some(1), "work", 5, 45, vec![]),
        ],
    )];
    rs[0].scope_spans[0].spans[1].kind = span::SpanKind::Internal as i32;
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "unknown");
    assert!(
        out[0].1.best.summary.contains("orders work"),
        "{}",
        out[0].1.best.summary
    );
    let _ = Status::default();
}

#[test]
fn the_state_stays_within_its_bounds_under_a_flood() {
    let st = correlation(Limits {
        window_ns: 600_000_000_000,
        max_log_records: 1000,
        max_series: 50,
        max_points: 8,
        max_routes: 10,
        max_events: 100,
        max_log_bytes: usize::MAX,
        max_analysed: 100_000,
        baseline_window_ns: 3_600_000_000_000,
        baseline_min_samples: 20,
        baseline_max_operations: 10_000,
    });
    let mut now = 1_000_000_000_000u64;
    for round in 0..50u64 {
        let logs: Vec<ResourceLogs> = (0..200u64)
            .map(|i| {
                let mut l = gateway_log(
                    ((round * 200 + i) % 251) as u8,
                    200,
                    vec![attr_s("route_id", &format!("r{}", i % 40))],
                );
                l.scope_logs[0].log_records[0].trace_id = (round * 200 + i).to_be_bytes().repeat(2);
                l
            })
            .collect();
        st.add_logs(&logs, now);
        now += 1_000_000_000;
    }
    let logs = st.store.logs.len();
    assert!(logs <= 1000, "{logs} log records held");
    let view = source::View {
        store: &st.store,
        now_ns: now,
        window_ns: 600_000_000_000,
    };
    let routes = st.sources.api("routes", &view).unwrap()["routes"]
        .as_array()
        .unwrap()
        .len();
    assert!(routes <= 10, "{routes} routes");
    // The newest are kept, the oldest gone.
    let newest = (49u64 * 200 + 199).to_be_bytes().repeat(2);
    let mut id = [0u8; 16];
    id.copy_from_slice(&newest);
    assert!(st.store.logs.has(&id));
    let oldest = 0u64.to_be_bytes().repeat(2);
    id.copy_from_slice(&oldest);
    assert!(!st.store.logs.has(&id));
    // Older than the window: gone however few there are.
    st.add_logs(&[], now + 700_000_000_000);
    assert!(st.store.logs.is_empty());
}

#[tokio::test]
async fn a_long_http_getconn_phase_is_queueing_for_a_pooled_connection() {
    let st = store();
    let mut rs = vec![resource_spans(
        "checkout",
        vec![
            span(11, 1, None, "POST /checkout", 0, 700, vec![]),
            span(
                11,
                2,
                Some(1),
                "POST payments",
                5,
                690,
                vec![attr_s("server.address", "payments")],
            ),
            span(11, 3, Some(2), "http.getconn", 5, 600, vec![]),
            span(11, 4, Some(2), "http.tls", 600, 610, vec![]),
        ],
    )];
    for sp in &mut rs[0].scope_spans[0].spans[2..] {
        sp.kind = span::SpanKind::Internal as i32;
    }
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "queueing", "{v:?}");
    assert!(
        v.best.summary.contains("waited 595 ms in http.getconn"),
        "{}",
        v.best.summary
    );
    assert_eq!(out[0].0.spans[v.culprit].name, "http.getconn");
}

#[tokio::test]
async fn a_database_span_without_a_statement_before_a_query_is_a_pool_checkout() {
    // SQLAlchemy's instrumentation: `connect` (the system and the database
    // only) around the pool's checkout, then the query on that connection.
    let sqlite = |stmt: Option<&str>| {
        let mut a = vec![attr_s("db.system", "sqlite"), attr_s("db.name", "app.db")];
        a.extend(stmt.map(|q| attr_s("db.statement", q)));
        a
    };
    let trace = |connect_then_query: bool| {
        let (first, second) = if connect_then_query {
            (sqlite(None), sqlite(Some("select 1")))
        } else {
            (sqlite(Some("select 1")), sqlite(None))
        };
        vec![resource_spans(
            "api",
            vec![
                span(12, 1, None, "GET /report", 0, 1510, vec![]),
                span(12, 2, Some(1), "connect", 2, 1500, first),
                span(12, 3, Some(1), "select app.db", 1501, 1505, second),
            ],
        )]
    };
    let st = store();
    let mut rs = trace(true);
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "queueing", "{v:?}");
    assert!(
        v.best
            .summary
            .contains("api waited 1498 ms in connect (a connection pool)"),
        "{}",
        v.best.summary
    );
    assert_eq!(out[0].0.spans[v.culprit].name, "connect");
    // A statement-less span after the query got no connection for it: the
    // layout says nothing, and the time is the span's own.
    let st = store();
    let mut rs = trace(false);
    let out = analyse(&st, &mut rs).await;
    assert_ne!(out[0].1.best.cause, "queueing", "{:?}", out[0].1);
}

#[tokio::test]
async fn kafka_lag_trend_over_the_join_interval_is_a_column_rules_can_use() {
    use opentelemetry_proto::tonic::metrics::v1::{
        metric, number_data_point, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
    };
    let st = store();
    let point = |t_s: u64, v: f64| ResourceMetrics {
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![Metric {
                name: "kafka.consumer_group.lag_sum".into(),
                data: Some(metric::Data::Gauge(Gauge {
                    data_points: vec![NumberDataPoint {
                        attributes: vec![attr_s("topic", "orders"), attr_s("group", "billing")],
                        time_unix_nano: 1_000_000_000_000 + t_s * 1_000_000_000,
                        value: Some(number_data_point::Value::AsDouble(v)),
                        ..Default::default()
                    }],
                })),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    st.add_metrics(
        &[point(0, 100.0), point(15, 900.0), point(30, 2500.0)],
        1_000_000_000_000,
    );
    let mut rs = vec![resource_spans(
        "billing",
        vec![span(
            12,
            1,
            None,
            "orders process",
            0,
            100,
            vec![
                attr_s("messaging.destination.name", "orders"),
                attr_s("messaging.consumer.group.name", "billing"),
            ],
        )],
    )];
    // The config's defaults: points 2 minutes before to 1 minute after.
    let (traces, tables) = join_within(&st, &rs, (120_000_000_000, 60_000_000_000));
    assert_eq!(
        traces[0].joined_metrics("kafka").next().unwrap()["lag_trend"].as_f64(),
        Some(2400.0)
    );
    let growing = Rule {
        name: "lag_growing".into(),
        cause: "consumer_lag".into(),
        sql: "SELECT trace_id, 0.99 AS confidence, concat('lag grew by ', CAST(CAST(max(lag_trend) AS BIGINT) AS VARCHAR)) AS summary FROM kafka_lag WHERE lag_trend > 1000 GROUP BY trace_id".into(),
        user: true,
        described: None,
    };
    let (findings, errors) = rules::Planner::new(&st.sources.tables())
        .evaluate(&[growing], &traces, tables)
        .await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(findings[&traces[0].trace_id][0].summary, "lag grew by 2400");
    let _ = &mut rs;
}

// ---- Evidence as stock instrumentation emits it, and causes by the time they explain.

fn sp(id: u8, parent: Option<u8>, name: &str, kind: span::SpanKind, s: u64, e: u64) -> Span {
    let mut x = span(40, id, parent, name, s, e, vec![]);
    x.kind = kind as i32;
    x
}

fn with(mut x: Span, attrs: Vec<KeyValue>) -> Span {
    x.attributes.extend(attrs);
    x
}

fn failed(mut x: Span, msg: &str) -> Span {
    x.status = Some(Status {
        code: 2,
        message: msg.into(),
    });
    x
}

fn tid(x: u8, mut spans: Vec<Span>) -> Vec<Span> {
    for s in &mut spans {
        s.trace_id = vec![x; 16];
    }
    spans
}

use span::SpanKind::{Client, Consumer, Internal, Producer, Server};

#[tokio::test]
async fn a_stock_redis_cache_aside_miss_is_found_from_the_span_layout() {
    let st = store();
    let redis = |id, s, e, stmt: &str| {
        with(
            sp(id, Some(1), "get", Client, s, e),
            vec![
                attr_s("db.system", "redis"),
                attr_s("db.statement", stmt),
                attr_s("net.peer.name", "cache-1"),
            ],
        )
    };
    let mut rs = vec![resource_spans(
        "shop",
        tid(
            41,
            vec![
                sp(1, None, "GET /item/:id", Server, 0, 1000),
                redis(2, 1, 2, "GET ?"),
                with(
                    sp(3, Some(1), "pg.query:SELECT shop", Client, 3, 990),
                    vec![attr_s("db.system", "postgresql")],
                ),
                redis(4, 991, 993, "SET ? ? ? ?"),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "cache_miss_fallback", "{v:?}");
    assert!(v.best.summary.contains("then SET"), "{}", v.best.summary);
    assert_eq!(out[0].0.spans[v.culprit].name, "pg.query:SELECT shop");
    // A GET followed by a read but no SET is not a (known) miss.
    let mut rs = vec![resource_spans(
        "shop",
        tid(
            42,
            vec![
                sp(1, None, "GET /item/:id", Server, 0, 1000),
                redis(2, 1, 2, "GET ?"),
                with(
                    sp(3, Some(1), "pg.query:SELECT shop", Client, 3, 990),
                    vec![attr_s("db.system", "postgresql")],
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    assert_ne!(out[0].1.best.cause, "cache_miss_fallback");
}

#[tokio::test]
async fn one_requests_retries_are_evidence_on_their_trigger_and_a_storm_is_retries_in_aggregate() {
    let st = store();
    // An explicit retry loop: `n` attempts, `gap` ms apart, answered `status`.
    let attempts_of = |trace: u8, n: u64, gap: u64, status: i64| {
        let mut spans = vec![failed(
            sp(1, None, "POST /checkout", Server, 0, 5 + n * (15 + gap)),
            "503",
        )];
        for k in 0..n {
            let s = 5 + k * (15 + gap);
            spans.push(failed(
                with(
                    sp(2 + k as u8, Some(1), "POST", Client, s, s + 15),
                    vec![
                        attr_s("server.address", "payments"),
                        kv("http.response.status_code", status),
                    ],
                ),
                "",
            ));
        }
        vec![resource_spans("checkout", tid(trace, spans))]
    };
    let attempts = |trace: u8, n: u64, gap: u64| attempts_of(trace, n, gap, 503);
    // Four attempts, backing off 285 ms: the client did the right thing;
    // the cause is what it retried (payments unavailable), the retries are
    // in the summary.
    let mut rs = attempts(43, 4, 285);
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert!(
        v.best
            .summary
            .contains("retried 3 times, backing off 285 ms"),
        "{}",
        v.best.summary
    );
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("payments", "callee")
    );
    assert!(
        v.alternatives.iter().all(|a| a.cause != "retry_storm"),
        "{v:?}"
    );
    // Eight attempts 100 ms apart, one request alone: past the guides'
    // five retries in under a second, still a transient failure being
    // retried: the trigger is the cause, the retries its evidence.
    let mut rs = attempts(46, 8, 100);
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert!(
        v.best.summary.contains("retried 7 times"),
        "{}",
        v.best.summary
    );
    assert!(
        v.alternatives.iter().all(|a| a.cause != "retry_storm"),
        "{v:?}"
    );
    // Answered 500 (no trigger of its own): the callee's error, not a storm.
    let mut rs = attempts_of(48, 8, 100, 500);
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_ne!(v.best.cause, "retry_storm", "{v:?}");
    assert_eq!(v.culprit_service, "payments", "{v:?}");
    // Six attempts backing off 1.5 s each: not a storm either.
    let mut rs = attempts(47, 6, 1500);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(
        out[0].1.best.cause, "upstream_unavailable",
        "{:?}",
        out[0].1
    );

    // urllib3's Retry: one client span, the attempts as server spans under it.
    let mut rs = vec![
        resource_spans(
            "checkout",
            tid(
                44,
                vec![
                    sp(1, None, "POST /checkout", Server, 0, 1000),
                    with(
                        sp(2, Some(1), "POST", Client, 5, 995),
                        vec![kv("http.response.status_code", 200i64)],
                    ),
                ],
            ),
        ),
        resource_spans(
            "payments",
            tid(
                44,
                vec![
                    failed(
                        with(
                            sp(3, Some(2), "POST /charge", Server, 10, 30),
                            vec![kv("http.response.status_code", 503i64)],
                        ),
                        "",
                    ),
                    failed(
                        with(
                            sp(4, Some(2), "POST /charge", Server, 330, 350),
                            vec![kv("http.response.status_code", 503i64)],
                        ),
                        "",
                    ),
                    with(
                        sp(5, Some(2), "POST /charge", Server, 900, 990),
                        vec![kv("http.response.status_code", 200i64)],
                    ),
                ],
            ),
        ),
    ];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    // Two 503s, then success: payments was unavailable; the client's
    // retries (the server attempts under one client span) are the summary's.
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert!(
        v.best.summary.contains("retried 2 times"),
        "{}",
        v.best.summary
    );
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("payments", "callee")
    );
    // Sixty requests retrying into payments at once: 300 retries in one
    // second, more than the guides' 200. Each slow request caught in it is
    // the storm's, with what its attempts met in the evidence.
    let mut storm: Vec<_> = (0..60u8).flat_map(|k| attempts(150 + k, 6, 100)).collect();
    let out = analyse(&st, &mut storm).await;
    assert_eq!(out.len(), 60);
    for (_, v) in &out {
        assert_eq!(v.best.cause, "retry_storm", "{v:?}");
        // The 300 and the single requests' retries before, in that second.
        let rate: u64 = v.best.summary["payments took ".len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(
            (300..=330).contains(&rate)
                && v.best.summary.contains("retries a second (a retry storm)"),
            "{}",
            v.best.summary
        );
        assert!(
            v.reason
                .contains("upstream_unavailable (what the storm's attempts met)"),
            "{}",
            v.reason
        );
        assert_eq!(
            (v.culprit_service.as_str(), v.culprit_kind.as_str()),
            ("payments", "callee")
        );
    }
    // The same storm with a higher bar set: each request is its trigger's.
    let mut strict = rules::builtin_with(
        &rules::RetryStormConfig {
            min_rate: 400.0,
            ..Default::default()
        },
        causeway_core::config::Duration::millis(500),
    );
    assert!(strict.iter().any(|r| r.name == "retry_storm"));
    strict.retain(|r| r.name == "retry_storm");
    let (traces, tables) = join_all(&st, &attempts(149, 6, 100));
    let mut planner = rules::Planner::new(&st.sources.tables());
    planner.prepare(&strict).await;
    let (findings, _) = planner.evaluate(&strict, &traces, tables).await;
    assert!(findings.is_empty(), "{findings:?}");
}

#[tokio::test]
async fn a_failure_retried_once_quickly_is_not_a_cause() {
    let st = store();
    let mut rs = vec![resource_spans(
        "checkout",
        tid(
            45,
            vec![
                sp(1, None, "POST /checkout", Server, 0, 100),
                failed(
                    with(
                        sp(2, Some(1), "POST", Client, 5, 8),
                        vec![
                            attr_s("server.address", "payments"),
                            kv("http.response.status_code", 503i64),
                        ],
                    ),
                    "",
                ),
                with(
                    sp(3, Some(1), "POST", Client, 9, 12),
                    vec![
                        attr_s("server.address", "payments"),
                        kv("http.response.status_code", 200i64),
                    ],
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert!(t.error_origin.is_none(), "the failed attempt was recovered");
    assert!(t.spans[1].recovered);
    assert_eq!(v.best.cause, "unknown", "{v:?}");
}

#[tokio::test]
async fn compute_before_a_call_is_not_queueing_but_a_late_server_span_is() {
    let st = store();
    // The handler computes 900 ms, then queries.
    let mut rs = vec![resource_spans(
        "reports",
        tid(
            46,
            vec![
                sp(1, None, "GET /report", Server, 0, 1000),
                with(
                    sp(2, Some(1), "SELECT", Client, 900, 990),
                    vec![attr_s("db.system", "postgresql")],
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    assert_ne!(out[0].1.best.cause, "queueing", "{:?}", out[0].1);
    // The callee's server span began 800 ms after the call was sent.
    let mut rs = vec![
        resource_spans(
            "front",
            tid(
                47,
                vec![
                    sp(1, None, "GET /orders", Server, 0, 1000),
                    with(
                        sp(2, Some(1), "GET", Client, 5, 995),
                        vec![attr_s("server.address", "orders")],
                    ),
                ],
            ),
        ),
        resource_spans(
            "orders",
            tid(47, vec![sp(3, Some(2), "GET /orders", Server, 805, 990)]),
        ),
    ];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "queueing", "{v:?}");
    assert!(
        v.best.summary.contains("waited 800 ms"),
        "{}",
        v.best.summary
    );
}

#[tokio::test]
async fn consumer_lag_from_kafkametrics_only_and_old_messaging_names() {
    let st = store();
    // lag_sum only, growing point after point (the Collector's kafkametrics receiver).
    let t0 = 1_000_000_000_000u64;
    let pts: Vec<_> = (0..4u64)
        .map(|i| {
            (
                t0 - 60_000_000_000 + i * 20_000_000_000,
                2000.0 + 1500.0 * i as f64,
            )
        })
        .collect();
    st.add_metrics(
        &[ResourceMetrics {
            resource: Some(Resource::default()),
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "kafka.consumer_group.lag_sum".into(),
                    data: Some(metric::Data::Gauge(
                        opentelemetry_proto::tonic::metrics::v1::Gauge {
                            data_points: pts
                                .iter()
                                .map(|(t, v)| NumberDataPoint {
                                    attributes: vec![
                                        attr_s("group", "billing"),
                                        attr_s("topic", "orders"),
                                    ],
                                    time_unix_nano: *t,
                                    value: Some(number_data_point::Value::AsDouble(*v)),
                                    ..Default::default()
                                })
                                .collect(),
                        },
                    )),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        t0,
    );
    // kafka-python: messaging.destination, no group, a zero-length consumer child.
    let mut rs = vec![
        resource_spans(
            "shop",
            tid(
                48,
                vec![
                    sp(1, None, "POST /order", Server, 0, 20),
                    with(
                        sp(2, Some(1), "orders send", Producer, 5, 8),
                        vec![
                            attr_s("messaging.system", "kafka"),
                            attr_s("messaging.destination", "orders"),
                        ],
                    ),
                ],
            ),
        ),
        resource_spans(
            "billing",
            tid(
                48,
                vec![with(
                    sp(3, Some(2), "orders receive", Consumer, 3008, 3008),
                    vec![
                        attr_s("messaging.system", "kafka"),
                        attr_s("messaging.destination", "orders"),
                    ],
                )],
            ),
        ),
    ];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert_eq!(v.best.cause, "consumer_lag", "{v:?}");
    assert_eq!(
        t.joined_metrics("kafka").next().unwrap()["group"],
        "billing",
        "the group found from the metrics"
    );
    assert!(
        v.best.summary.contains("waited 3000 ms"),
        "{}",
        v.best.summary
    );
    assert!(
        !v.alternatives.iter().any(|a| a.cause == "queueing"),
        "{v:?}"
    );
    // A producer whose trace does not wait on a consumer is not lagging.
    let mut rs = vec![resource_spans(
        "shop",
        tid(
            49,
            vec![
                sp(1, None, "POST /order", Server, 0, 900),
                with(
                    sp(2, Some(1), "orders send", Producer, 5, 8),
                    vec![attr_s("messaging.destination", "orders")],
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    assert_ne!(out[0].1.best.cause, "consumer_lag");
}

#[tokio::test]
async fn a_client_429_marked_error_is_rate_limiting_not_an_error() {
    let st = store();
    let mut rs = vec![resource_spans(
        "front",
        tid(
            50,
            vec![
                with(
                    sp(1, None, "GET /x", Server, 0, 100),
                    vec![kv("http.response.status_code", 429i64)],
                ),
                failed(
                    with(
                        sp(2, Some(1), "GET", Client, 5, 95),
                        vec![kv("http.response.status_code", 429i64)],
                    ),
                    "",
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert!(t.error_origin.is_none());
    assert_eq!(v.best.cause, "rate_limited", "{v:?}");
    assert!(!v.alternatives.iter().any(|a| a.cause == "error"), "{v:?}");
}

#[tokio::test]
async fn the_route_is_the_gateways_else_the_entry_spans_never_a_downstream_template() {
    let st = store();
    let trace = |id: u8| {
        vec![
            resource_spans(
                "driver",
                tid(id, vec![sp(1, None, "checkout", Internal, 0, 100)]),
            ),
            resource_spans(
                "front",
                tid(
                    id,
                    vec![
                        with(
                            sp(2, Some(1), "POST /checkout", Server, 1, 99),
                            vec![attr_s("http.route", "/checkout")],
                        ),
                        sp(3, Some(2), "POST", Client, 2, 98),
                    ],
                ),
            ),
            resource_spans(
                "payments",
                tid(
                    id,
                    vec![with(
                        sp(4, Some(3), "POST /charge/:id", Server, 3, 97),
                        vec![attr_s("http.route", "/charge/:id")],
                    )],
                ),
            ),
        ]
    };
    let mut rs = trace(51);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].0.route.as_deref(), Some("/checkout"), "the entry's");
    // With a gateway log, the gateway's route id; and it is learned for the entry route.
    st.add_logs(&[gateway_log(52, 200, vec![])], 1_000_000_000_000);
    let mut rs = trace(52);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].0.route.as_deref(), Some("order-create"));
    let mut rs = trace(53);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(
        out[0].0.route.as_deref(),
        Some("order-create"),
        "learned from the trace that had both"
    );
}

/// Trace `id`: a front's `GET /r` calling the reports service's
/// `GET /report`, which takes `report_ms`.
fn front_and_reports(id: u8, report_ms: u64) -> Vec<ResourceSpans> {
    vec![
        resource_spans(
            "front",
            tid(
                id,
                vec![
                    sp(1, None, "GET /r", Server, 0, report_ms + 10),
                    with(
                        sp(2, Some(1), "GET", Client, 5, report_ms + 5),
                        vec![attr_s("server.address", "reports")],
                    ),
                ],
            ),
        ),
        resource_spans(
            "reports",
            tid(
                id,
                vec![sp(3, Some(2), "GET /report", Server, 6, report_ms + 4)],
            ),
        ),
    ]
}

#[tokio::test]
async fn a_dependency_slow_by_nature_is_not_a_cause_but_one_slower_than_its_normal_is() {
    let st = store();
    let trace = front_and_reports;
    // Before a baseline exists, a downstream span with most of the time is slow_dependency.
    let mut rs = trace(60, 1500);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "slow_dependency");
    assert!(out[0].1.best.summary.contains("no baseline yet"));
    // The report is always about 1.5 s: once learned, it is not a cause.
    st.store.baselines.feed(
        1_000_000_000_000,
        (0..30).map(|i| ("reports", "GET /report", 1400.0 + f64::from(i) * 10.0)),
    );
    let mut rs = trace(61, 1500);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "unknown", "{:?}", out[0].1);
    // Ten times its normal: a cause, and the summary says what normal is.
    let mut rs = trace(62, 15000);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "slow_dependency", "{:?}", out[0].1);
    assert!(
        out[0].1.best.summary.contains("normally"),
        "{}",
        out[0].1.best.summary
    );
}

#[tokio::test]
async fn a_pod_without_host_name_joins_its_nodes_metrics() {
    let st = store();
    let t0 = 1_000_000_000_000u64;
    let idle = |host: &str| ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![attr_s("host.name", host)],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![Metric {
                name: "system.cpu.utilization".into(),
                data: Some(metric::Data::Gauge(
                    opentelemetry_proto::tonic::metrics::v1::Gauge {
                        data_points: vec![NumberDataPoint {
                            attributes: vec![attr_s("cpu.mode", "idle")],
                            time_unix_nano: t0,
                            value: Some(number_data_point::Value::AsDouble(0.02)),
                            ..Default::default()
                        }],
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    st.add_metrics(&[idle("node-7")], t0);
    let mut rs = vec![ResourceSpans {
        resource: Some(Resource {
            attributes: vec![
                attr_s("service.name", "pricing"),
                attr_s("service.instance.id", "6f1c"),
                attr_s("k8s.pod.name", "pricing-7d9f-x2k4"),
                attr_s("k8s.node.name", "node-7"),
            ],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans: tid(63, vec![sp(1, None, "GET /price", Server, 0, 900)]),
            ..Default::default()
        }],
        ..Default::default()
    }];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert_eq!(
        t.joined_metrics("host").count(),
        1,
        "joined by k8s.node.name"
    );
    assert_eq!(v.best.cause, "host_cpu_saturation", "{v:?}");
}

#[tokio::test]
async fn two_concurrent_faults_are_both_reported_the_larger_first() {
    let st = store();
    let redis = |id, s, e, stmt: &str| {
        with(
            sp(id, Some(1), "get", Client, s, e),
            vec![attr_s("db.system", "redis"), attr_s("db.statement", stmt)],
        )
    };
    let mut rs = vec![resource_spans(
        "shop",
        tid(
            64,
            vec![
                sp(1, None, "GET /item", Server, 0, 1500),
                redis(2, 1, 2, "GET ?"),
                with(
                    sp(3, Some(1), "SELECT", Client, 3, 1000),
                    vec![attr_s("db.system", "postgresql")],
                ),
                redis(4, 1001, 1002, "SET ? ?"),
                with(
                    sp(5, Some(1), "POST", Client, 1003, 1495),
                    vec![attr_s("server.address", "payments")],
                ),
                sp(6, Some(5), "http.tls", Internal, 1004, 1390),
            ],
        ),
    )];
    for s in &mut rs[0].scope_spans[0].spans {
        if s.name == "http.tls" {
            s.kind = Internal as i32;
        }
    }
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "cache_miss_fallback", "{v:?}");
    let tls = v
        .alternatives
        .iter()
        .find(|a| a.cause == "tls_handshake")
        .expect("the second fault is an alternative");
    assert!(tls.explained_ms > 300.0 && tls.explained_ms < v.best.explained_ms);
    let root = &rs[0].scope_spans[0].spans[0];
    let alts = root
        .attributes
        .iter()
        .find(|a| a.key == "rca.alternatives")
        .map(|a| format!("{:?}", a.value))
        .unwrap_or_default();
    assert!(alts.contains("tls_handshake:"), "{alts}");
}

#[tokio::test]
async fn hostile_layouts_are_analysed_or_declined_never_a_panic_or_a_loop() {
    let st = store();
    // A parent cycle, a missing parent, a root that ends before its children.
    let mut rs = vec![resource_spans(
        "x",
        tid(
            65,
            vec![
                sp(1, Some(3), "a", Server, 0, 100),
                sp(2, Some(1), "b", Client, 10, 90),
                sp(3, Some(2), "c", Server, 20, 80),
                sp(4, Some(99), "orphan", Client, 5, 500),
                sp(5, None, "root", Server, 0, 50),
                sp(6, Some(5), "late child", Client, 40, 400),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out.len(), 1);
    // Clock skew of ±2 s between hosts: the server span lies outside its client.
    let mut rs = vec![
        resource_spans(
            "front",
            tid(
                66,
                vec![
                    sp(1, None, "GET /", Server, 2000, 2400),
                    sp(2, Some(1), "GET", Client, 2010, 2390),
                ],
            ),
        ),
        resource_spans(
            "back",
            tid(66, vec![sp(3, Some(2), "GET /", Server, 30, 390)]),
        ),
    ];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    let back = t
        .spans
        .iter()
        .find(|s| s.service.as_ref() == "back")
        .expect("back");
    assert!(back.start_ms >= 10.0 && back.end_ms <= 390.0, "{back:?}");
    assert_ne!(v.best.cause, "queueing", "skew is not queueing: {v:?}");
    // 10,000 spans in one chain and a wide fan-out.
    let mut spans = vec![sp(1, None, "root", Server, 0, 100_000)];
    for i in 1..10_000u32 {
        let mut s = span(
            67,
            0,
            None,
            "n",
            u64::from(i),
            100_000 - u64::from(i),
            vec![],
        );
        s.span_id = (u64::from(i) + 1).to_be_bytes().to_vec();
        s.parent_span_id = (u64::from(i)).to_be_bytes().to_vec();
        s.kind = if i % 2 == 0 {
            Server as i32
        } else {
            Client as i32
        };
        spans.push(s);
    }
    spans[0].span_id = 1u64.to_be_bytes().to_vec();
    let mut rs = vec![resource_spans("deep", tid(67, spans))];
    let t = std::time::Instant::now();
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].0.spans.len(), 10_000);
    assert!(t.elapsed() < std::time::Duration::from_secs(20));
}

#[test]
fn late_spans_of_an_analysed_trace_are_recognised_and_log_bytes_are_bounded() {
    let st = correlation(Limits {
        window_ns: 600_000_000_000,
        max_log_records: 1_000_000,
        max_log_bytes: 64 * 1024,
        max_analysed: 100_000,
        baseline_window_ns: 3_600_000_000_000,
        baseline_min_samples: 20,
        baseline_max_operations: 10_000,
        max_series: 100,
        max_points: 8,
        max_routes: 10,
        max_events: 100,
    });
    let now = 1_000_000_000_000;
    assert_eq!(
        st.store.traces.mark(&[[1; 16], [2; 16]], now),
        vec![false, false]
    );
    assert_eq!(
        st.store.traces.mark(&[[2; 16], [3; 16]], now + 1),
        vec![true, false]
    );
    // 64 KiB of logs at most: bodies of 1 KiB evict by bytes, and it is counted.
    let body = "x".repeat(1024);
    for i in 0..200u8 {
        let mut l = gateway_log(i, 200, vec![]);
        l.scope_logs[0].log_records[0].body = Some(AnyValue {
            value: Some(any_value::Value::StringValue(body.clone())),
        });
        st.add_logs(&[l], now);
    }
    let (bytes, _) = st.store.logs.retention(now);
    assert!(bytes <= 64 * 1024, "{bytes}");
    let (by_count, by_bytes) = st.store.logs.evictions();
    assert_eq!(by_count, 0);
    // Bodies are cut to 512 bytes: 768 bytes a record, 85 fit.
    assert!(by_bytes >= 110, "{by_bytes}");
}

#[tokio::test]
async fn express_handler_spans_ms_clock_starts_and_orphans_keep_calls_on_the_path() {
    let st = store();
    // As @opentelemetry/instrumentation-express and -pg leave it (tests/rca_testbed.rs):
    // the calls are children of `request handler`, starts have millisecond
    // resolution, so the SET "starts" 0.03 ms before the query ends.
    let us = |ms: u64, us: u64| 1_000_000_000_000 + ms * 1_000_000 + us * 1000;
    let mk =
        |id: u8, parent: Option<u8>, name: &str, kind: span::SpanKind, s: u64, e: u64, attrs| {
            let mut x = with(sp(id, parent, name, kind, 0, 0), attrs);
            x.start_time_unix_nano = s;
            x.end_time_unix_nano = e;
            x
        };
    let redis = |stmt: &str| vec![attr_s("db.system", "redis"), attr_s("db.statement", stmt)];
    let mut rs = vec![resource_spans(
        "shop",
        tid(
            70,
            vec![
                mk(
                    1,
                    None,
                    "GET /item/:id",
                    Server,
                    us(0, 0),
                    us(405, 0),
                    vec![],
                ),
                mk(
                    2,
                    Some(1),
                    "request handler",
                    Internal,
                    us(0, 0),
                    us(404, 500),
                    vec![],
                ),
                mk(
                    3,
                    Some(2),
                    "get",
                    Client,
                    us(0, 0),
                    us(0, 167),
                    redis("GET ?"),
                ),
                mk(
                    4,
                    Some(2),
                    "pg-pool.connect",
                    Client,
                    us(1, 0),
                    us(1, 46),
                    vec![],
                ),
                mk(
                    5,
                    Some(2),
                    "pg.query:SELECT postgres",
                    Client,
                    us(1, 0),
                    us(402, 29),
                    vec![attr_s("db.system", "postgresql")],
                ),
                mk(
                    6,
                    Some(2),
                    "set",
                    Client,
                    us(402, 0),
                    us(403, 800),
                    redis("SET ? ? ? ?"),
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    let query = t
        .spans
        .iter()
        .find(|s| s.name.starts_with("pg.query"))
        .expect("query");
    assert!(query.critical && query.self_ms > 400.0, "{query:?}");
    assert_eq!(v.best.cause, "cache_miss_fallback", "{v:?}");

    // The handler a framework left as a sibling of the calls it made: it adopts them.
    let mut rs = vec![resource_spans(
        "shop",
        tid(
            71,
            vec![
                sp(1, None, "GET /orders", Server, 0, 640),
                sp(2, Some(1), "request handler", Internal, 1, 638),
                sp(3, Some(1), "pg-pool.connect", Client, 2, 520),
                with(
                    sp(4, Some(1), "pg.query:SELECT postgres", Client, 520, 630),
                    vec![attr_s("db.system", "postgresql")],
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "queueing", "{:?}", out[0].1);

    // A call whose parent never arrived joins the span of its service running then.
    let mut rs = vec![
        resource_spans(
            "driver",
            tid(
                72,
                vec![
                    sp(1, None, "request", Internal, 0, 1000),
                    failed(
                        with(
                            sp(2, Some(1), "GET", Client, 0, 1000),
                            vec![kv("http.response.status_code", 504i64)],
                        ),
                        "",
                    ),
                ],
            ),
        ),
        resource_spans(
            "shop",
            tid(
                72,
                vec![
                    sp(3, Some(2), "GET /report", Server, 10, 990),
                    sp(5, Some(99), "GET", Client, 20, 3000),
                ],
            ),
        ),
        resource_spans(
            "pricing",
            tid(72, vec![sp(6, Some(5), "GET /slow", Server, 25, 2995)]),
        ),
    ];
    st.add_logs(
        &[{
            let mut l = gateway_log(72, 504, vec![]);
            l.scope_logs[0].log_records[0].trace_id = vec![72; 16];
            l
        }],
        1_000_000_000_000,
    );
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert_eq!(
        t.spans[t.root].name, "request",
        "a true root, not the orphan"
    );
    assert_eq!(v.best.cause, "upstream_timeout", "{v:?}");
    // The call that timed out shows it; the callee still running is at fault.
    assert_eq!(v.culprit_service, "pricing", "{v:?}");
    assert_eq!(v.culprit_kind.as_str(), "callee", "{v:?}");
}

/// A span at `base` + milliseconds, of trace 50.
fn at(
    base: u64,
    id: u8,
    parent: Option<u8>,
    name: &str,
    kind: span::SpanKind,
    s: u64,
    e: u64,
) -> Span {
    let mut x = sp(id, parent, name, kind, 0, 0);
    x.trace_id = vec![50; 16];
    x.start_time_unix_nano = base + s * 1_000_000;
    x.end_time_unix_nano = base + e * 1_000_000;
    x
}

fn root_attrs(b: &mut Batch) -> Vec<std::collections::BTreeMap<String, String>> {
    let rs = b.traces_mut().unwrap().unwrap();
    rs.iter()
        .flat_map(|r| r.scope_spans.iter().flat_map(|s| s.spans.iter()))
        .map(|sp| {
            sp.attributes
                .iter()
                .filter(|a| a.key.starts_with("rca."))
                .map(|a| {
                    (
                        a.key.clone(),
                        model::series::s(&a.value).unwrap_or_default(),
                    )
                })
                .collect()
        })
        .collect()
}

#[tokio::test]
async fn a_consumer_span_arriving_after_its_trace_was_analysed_is_measured_from_its_producer() {
    use causeway_core::component::ProcessorFactory;
    let ctx = BuildContext {
        id: "correlate".parse().unwrap(),
        telemetry: causeway_core::telemetry::Registry::new(),
        shared: Default::default(),
        pipeline_signals: SignalSet::ALL,
    };
    let cfg: serde_yaml::Value = serde_yaml::from_str(
        "evidence_wait: 0s\nconsumer_lag: { lag_threshold: 3, sample_interval: 1s }",
    )
    .unwrap();
    let mut p = CorrelateFactory.build(ctx, &cfg).await.unwrap();
    let base = now_ns() - 60_000_000_000;
    // The group's lag while the message waited (a stopped consumer).
    let points = (0..15u64)
        .map(|i| NumberDataPoint {
            attributes: vec![attr_s("group", "billing"), attr_s("topic", "orders")],
            time_unix_nano: base + i * 1_000_000_000,
            value: Some(number_data_point::Value::AsDouble(8.0)),
            ..Default::default()
        })
        .collect();
    let metrics = Batch::from_metrics(vec![ResourceMetrics {
        resource: Some(Resource::default()),
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![Metric {
                name: "kafka.consumer_group.lag".into(),
                data: Some(metric::Data::Gauge(
                    opentelemetry_proto::tonic::metrics::v1::Gauge {
                        data_points: points,
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }]);
    let mut out = Vec::new();
    p.process(metrics, &mut out).await.unwrap();
    let topic = vec![
        attr_s("messaging.system", "kafka"),
        attr_s("messaging.destination.name", "orders"),
    ];
    // The order's trace, decided and analysed before billing consumed the message.
    let producer = Batch::from_traces(vec![resource_spans(
        "shop",
        vec![
            at(base, 1, None, "POST /order", Server, 0, 20),
            with(
                at(base, 2, Some(1), "orders send", Producer, 5, 8),
                topic.clone(),
            ),
        ],
    )]);
    out.clear();
    p.process(producer, &mut out).await.unwrap();
    let first = root_attrs(&mut out[0]);
    assert_eq!(
        first[0].get("rca.cause").map(String::as_str),
        Some("unknown")
    );
    // Twelve seconds later: billing's consumer span, and a late span whose
    // parent sent no message.
    let late = Batch::from_traces(vec![
        resource_spans(
            "billing",
            vec![with(
                at(base, 3, Some(2), "orders process", Consumer, 12_000, 12_006),
                [
                    topic.clone(),
                    vec![attr_s("messaging.consumer.group.name", "billing")],
                ]
                .concat(),
            )],
        ),
        resource_spans(
            "shop",
            vec![at(base, 4, Some(1), "audit", Internal, 30, 40)],
        ),
    ]);
    out.clear();
    p.process(late, &mut out).await.unwrap();
    let spans = root_attrs(&mut out[0]);
    let consumer = &spans[0];
    assert_eq!(
        consumer.get("rca.cause").map(String::as_str),
        Some("consumer_lag"),
        "{consumer:?}"
    );
    assert_eq!(
        consumer.get("rca.continuation").map(String::as_str),
        Some("true")
    );
    assert_eq!(
        consumer.get("rca.culprit.service").map(String::as_str),
        Some("billing")
    );
    let summary = &consumer["rca.summary"];
    assert!(summary.contains("waited 11992 ms"), "{summary}");
    assert!(!spans[1].contains_key("rca.cause"), "{:?}", spans[1]);
}

const CIRCUIT_NOW: u64 = 1_764_000_000_000_000_000;

fn circuit_record(t: u8, status: i64, circuit: Option<&str>) -> ResourceLogs {
    let kv = |k: &str, v: any_value::Value| KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    };
    let mut attributes = vec![
        kv("route_id", any_value::Value::StringValue("orders".into())),
        kv("status_code", any_value::Value::IntValue(status)),
    ];
    if let Some(c) = circuit {
        attributes.push(kv("circuit_state", any_value::Value::StringValue(c.into())));
    }
    ResourceLogs {
        scope_logs: vec![ScopeLogs {
            log_records: vec![LogRecord {
                time_unix_nano: CIRCUIT_NOW,
                trace_id: vec![t; 16],
                attributes,
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn circuit_trouble() -> Trouble {
    Trouble {
        statuses: vec![429, 503, 504],
        route_error_ratio: 0.05,
        cpu_busy: 0.9,
        iowait: 0.2,
        memory_used: 0.95,
    }
}

#[test]
fn one_trip_of_the_breaker_does_not_keep_the_route_open_once_requests_are_answered() {
    let store = store();
    let route_troubled = |store: &Correlation| {
        troubled(
            store,
            &[9; 16],
            &["orders"],
            (&[], &[]),
            &[],
            &circuit_trouble(),
        )
    };
    // 100 answered requests, then one that met an open circuit.
    for _ in 0..100 {
        store.add_logs(&[circuit_record(1, 200, None)], CIRCUIT_NOW);
    }
    assert!(!route_troubled(&store), "no circuit reported yet");
    store.add_logs(&[circuit_record(2, 503, Some("OPEN"))], CIRCUIT_NOW);
    assert!(route_troubled(&store), "open right after the trip");
    // A record without a status says nothing about the breaker.
    store.add_logs(&[circuit_record(3, 0, None)], CIRCUIT_NOW);
    assert!(
        route_troubled(&store),
        "still open: nothing was answered since"
    );
    // The next answered request shows it closed again.
    store.add_logs(&[circuit_record(4, 200, None)], CIRCUIT_NOW);
    assert!(!route_troubled(&store), "closed once a request is answered");
    // The trace that met the open circuit is still in trouble by its own record.
    assert!(troubled(
        &store,
        &[2; 16],
        &["orders"],
        (&[], &[]),
        &[],
        &circuit_trouble()
    ));
}

/// A physical plan made once and run again reads each evaluation's rows,
/// also through a hash join (whose build side a plan keeps between runs
/// until it is reset), a scalar subquery and counts (which a plan over
/// tables with statistics would have answered from the first rows).
#[tokio::test]
async fn physical_plans_made_once_read_each_evaluations_rows_through_joins_and_counts() {
    let st = store();
    let rule = Rule {
        name: "counts".into(),
        cause: "x".into(),
        sql: "SELECT t.trace_id, 0.5 AS confidence, concat(CAST(count(*) AS VARCHAR), ' of ', \
              CAST((SELECT count(*) FROM spans) AS VARCHAR)) AS summary \
              FROM traces t JOIN spans s ON s.trace_id = t.trace_id GROUP BY t.trace_id"
            .into(),
        user: true,
        described: None,
    };
    let rows = |tag: u8, children: u8| {
        let mut spans = vec![sp(1, None, "GET /x", Server, 0, 100)];
        for i in 0..children {
            spans.push(sp(2 + i, Some(1), "child", Client, 10, 20));
        }
        join_all(&st, &[resource_spans("shop", tid(tag, spans))])
    };
    let mut planner = rules::Planner::new(&st.sources.tables());
    for (tag, children) in [(80u8, 0u8), (81, 3), (82, 1), (81, 3)] {
        let (traces, tables) = rows(tag, children);
        let (f, errors) = planner
            .evaluate(std::slice::from_ref(&rule), &traces, tables)
            .await;
        assert!(errors.is_empty(), "{errors:?}");
        let n = u32::from(children) + 1;
        assert_eq!(
            f[&traces[0].trace_id][0].summary,
            format!("{n} of {n}"),
            "trace {tag}"
        );
        assert_eq!(f.len(), 1, "only this evaluation's trace: {f:?}");
    }
}

#[tokio::test]
async fn rules_planned_once_read_each_evaluations_rows() {
    let st = store();
    let mut logs = Vec::new();
    for _ in 0..15 {
        logs.push(gateway_log(
            7,
            429,
            vec![attr_s("gateway.rate_limit_rule", "qps-100-per-ip")],
        ));
    }
    st.add_logs(&logs, 1_000_000_000_000);
    let rows = |tid: u8| {
        let rs = vec![resource_spans(
            "orders",
            vec![span(
                tid,
                1,
                None,
                "POST /orders",
                0,
                900,
                vec![attr_s("http.route", "order-create")],
            )],
        )];
        join_all(&st, &rs)
    };
    let rules = all_rules(&st);
    let mut planner = rules::Planner::new(&st.sources.tables());
    let (first, tables) = rows(7);
    let (f, errors) = planner.evaluate(&rules, &first, tables).await;
    assert!(errors.is_empty(), "{errors:?}");
    let cause = |f: &std::collections::HashMap<String, Vec<model::Finding>>, t: &TraceRow| {
        f.get(&t.trace_id)
            .is_some_and(|v| v.iter().any(|x| x.cause == "rate_limited"))
    };
    assert!(cause(&f, &first[0]));
    // The same plans, new rows: trace 8 has no gateway logs, and trace 7's
    // rows of the first evaluation are gone.
    let (second, tables) = rows(8);
    let (f, errors) = planner.evaluate(&rules, &second, tables).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert!(!cause(&f, &second[0]), "{f:?}");
    assert!(!f.contains_key(&first[0].trace_id), "{f:?}");
    // And back: the cached plans still find what the rows say.
    let (again, tables) = rows(7);
    let (f, _) = planner.evaluate(&rules, &again, tables).await;
    assert!(cause(&f, &first[0]));
}

/// A scraped point as the `prometheus` receiver writes it: `job` and
/// `instance` on the resource.
fn scraped(
    job: &str,
    instance: &str,
    name: &str,
    labels: &[(&str, &str)],
    v: f64,
    t_ms: u64,
) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![
                attr_s("service.name", job),
                attr_s("service.instance.id", instance),
            ],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![Metric {
                name: name.into(),
                data: Some(metric::Data::Gauge(
                    opentelemetry_proto::tonic::metrics::v1::Gauge {
                        data_points: vec![NumberDataPoint {
                            attributes: labels.iter().map(|(k, v)| attr_s(k, v)).collect(),
                            time_unix_nano: 1_000_000_000_000 + t_ms * 1_000_000,
                            value: Some(number_data_point::Value::AsDouble(v)),
                            ..Default::default()
                        }],
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn a_dependency_is_found_by_instance_label_exporter_port_or_configured_address() {
    let st = store();
    let mut rms = Vec::new();
    for t in [0, 500, 1000] {
        // redis_exporter beside its server: the port from redis_instance_info.
        rms.push(scraped(
            "redis",
            "10.0.0.7:9121",
            "redis_instance_info",
            &[("tcp_port", "6380")],
            1.0,
            t,
        ));
        // The multi-target pattern: the instance names the server.
        rms.push(scraped(
            "pg",
            "postgresql://db.shop.svc.cluster.local:5432/app",
            "pg_up",
            &[],
            1.0,
            t,
        ));
        // An exporter somewhere else, mapped in the config.
        rms.push(scraped(
            "cache-b",
            "monitor-3:9121",
            "redis_up",
            &[],
            1.0,
            t,
        ));
        // Not a dependency series: not kept for this join.
        rms.push(scraped("node", "10.0.0.7:9100", "node_load1", &[], 1.0, t));
    }
    st.add_metrics(&rms, 1_000_000_000_000 + 1_000_000_000);
    let series = st.store.series.matching(|s| s.key.get("job").is_some());
    assert!(series.iter().all(|s| s.name != "node_load1"));
    let configured: std::collections::HashMap<String, String> =
        [("cache-b.shop:6379".to_string(), "cache-b".to_string())].into();
    // Each family groups its own series.
    let mut found = deps::dependencies(&deps::redis::Redis, &series, &configured);
    found.extend(deps::dependencies(
        &deps::postgresql::Postgresql,
        &series,
        &configured,
    ));
    let find = |addr: &str, db: Option<&str>| -> Vec<String> {
        found
            .iter()
            .filter(|d| deps::calls(d, &deps::norm(addr), db))
            .map(|d| d.job.clone())
            .collect()
    };
    assert_eq!(find("10.0.0.7:6380", Some("redis")), ["redis"]);
    assert_eq!(
        find("10.0.0.7:6379", Some("redis")),
        Vec::<String>::new(),
        "another port"
    );
    assert_eq!(
        find("10.0.0.7", Some("redis")),
        ["redis"],
        "no port: the host and db.system"
    );
    assert_eq!(find("10.0.0.7", Some("postgresql")), Vec::<String>::new());
    assert_eq!(find("db.shop:5432", Some("postgresql")), ["pg"]);
    assert_eq!(find("DB.shop.svc.cluster.local.:5432", None), ["pg"]);
    assert_eq!(
        find("cache-b.shop.svc.cluster.local:6379", Some("redis")),
        ["cache-b"]
    );
}

/// A queue's series as the `rabbitmq` receiver writes them: depth (ready),
/// consumers and status per collection, and its bindings.
fn rabbit_queue(
    queue: &str,
    t0: u64,
    depths: &[f64],
    consumers: f64,
    status: i64,
    bindings: &[(&str, &str, &str)],
) -> ResourceMetrics {
    let gauge = |name: &str, attrs: Vec<KeyValue>, pts: Vec<(u64, f64)>| Metric {
        name: name.into(),
        data: Some(metric::Data::Gauge(
            opentelemetry_proto::tonic::metrics::v1::Gauge {
                data_points: pts
                    .into_iter()
                    .map(|(t, v)| NumberDataPoint {
                        attributes: attrs.clone(),
                        time_unix_nano: t,
                        value: Some(number_data_point::Value::AsDouble(v)),
                        ..Default::default()
                    })
                    .collect(),
            },
        )),
        ..Default::default()
    };
    let at = |i: usize| t0 - 10_000_000_000 + i as u64 * 2_000_000_000;
    let mut metrics = vec![
        gauge(
            "rabbitmq.message.current",
            vec![attr_s("state", "ready")],
            depths
                .iter()
                .enumerate()
                .map(|(i, d)| (at(i), *d))
                .collect(),
        ),
        gauge(
            "rabbitmq.consumer.count",
            vec![],
            depths
                .iter()
                .enumerate()
                .map(|(i, _)| (at(i), consumers))
                .collect(),
        ),
        gauge(
            "rabbitmq.queue.status",
            vec![attr_s("status", "X")],
            vec![(at(depths.len() - 1), status as f64)],
        ),
    ];
    for (x, kind, key) in bindings {
        metrics.push(gauge(
            "rabbitmq.queue.binding",
            vec![
                attr_s("rabbitmq.exchange.name", x),
                attr_s("rabbitmq.exchange.type", kind),
                attr_s("rabbitmq.binding.routing_key", key),
            ],
            vec![(at(depths.len() - 1), 1.0)],
        ));
    }
    ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![
                attr_s("rabbitmq.queue.name", queue),
                attr_s("rabbitmq.vhost.name", "/"),
                attr_s("messaging.system", "rabbitmq"),
            ],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics,
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn a_slow_rabbitmq_consumer_explains_the_wait_of_its_message_and_the_wait_alone_is_lag_too() {
    let st = store();
    let t0 = 1_000_000_000_000u64;
    st.add_metrics(
        &[
            // A consumer that falls behind: WARN, the depth rising.
            rabbit_queue(
                "billing",
                t0,
                &[200.0, 900.0, 1600.0],
                1.0,
                2,
                &[("orders", "topic", "order.#")],
            ),
            rabbit_queue(
                "audit",
                t0,
                &[0.0, 0.0, 0.0],
                1.0,
                1,
                &[("orders", "topic", "#")],
            ),
        ],
        t0,
    );
    // The messaging conventions since 1.24: publish `{exchange}:{key}`,
    // process `{exchange}:{key}:{queue}`; the message waited 3 s.
    let rabbit = |dest: &str| {
        vec![
            attr_s("messaging.system", "rabbitmq"),
            attr_s("messaging.destination.name", dest),
            attr_s("messaging.rabbitmq.destination.routing_key", "order.paid"),
        ]
    };
    // A publish, and the consumer of `queue` 3 s later.
    let through = |trace: u8, queue: &str| {
        vec![
            resource_spans(
                "shop",
                tid(
                    trace,
                    vec![
                        sp(1, None, "POST /order", Server, 0, 20),
                        with(
                            sp(2, Some(1), "publish orders", Producer, 5, 8),
                            rabbit("orders:order.paid"),
                        ),
                    ],
                ),
            ),
            resource_spans(
                queue,
                tid(
                    trace,
                    vec![with(
                        sp(3, Some(2), "process orders", Consumer, 3008, 3050),
                        rabbit(&format!("orders:order.paid:{queue}")),
                    )],
                ),
            ),
        ]
    };
    let mut rs = through(60, "billing");
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert_eq!(v.best.cause, "consumer_lag", "{v:?}");
    assert_eq!(v.best.rule, "queue_backlog");
    assert!(
        v.best.summary.contains("queue billing grows") && v.best.summary.contains("waited 3000 ms"),
        "{}",
        v.best.summary
    );
    // Both bound queues joined, as publish (the exchange's bindings) and consume.
    let mut joined: Vec<(&str, &str)> = t
        .joined_metrics("queue")
        .map(|q| (q["queue"].as_str().unwrap(), q["role"].as_str().unwrap()))
        .collect();
    joined.sort();
    assert_eq!(
        joined,
        vec![
            ("audit", "publish"),
            ("billing", "consume"),
            ("billing", "publish")
        ]
    );
    // The same trace through the queue whose samples showed no backlog: the
    // message still waited 3 s, which is on the trace: consumer lag from the
    // wait alone (#31), by the consumer, saying no sample showed it.
    let mut rs = through(61, "audit");
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(
        (v.best.cause.as_str(), v.best.rule.as_str()),
        ("consumer_lag", "message_wait"),
        "{v:?}"
    );
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("audit", "consumer")
    );
    assert!(
        v.best.summary.contains(
            "waited 3000 ms before audit consumed it; no lag or backlog sample showed it"
        ),
        "{}",
        v.best.summary
    );
    // The billing verdict names its consumer as the culprit too.
    let mut rs = through(62, "billing");
    let out = analyse(&st, &mut rs).await;
    assert_eq!(
        (
            out[0].1.culprit_service.as_str(),
            out[0].1.culprit_kind.as_str()
        ),
        ("billing", "consumer")
    );
    // The correlated policy: a trace reaching the queue in trouble through
    // the exchange's binding, not one that reaches only the healthy queue.
    let tr = circuit_trouble();
    assert!(troubled(
        &st,
        &[1; 16],
        &[],
        (&["orders"], &["order.paid"]),
        &[],
        &tr
    ));
    assert!(troubled(
        &st,
        &[1; 16],
        &[],
        (&["orders:order.paid:billing"], &[]),
        &[],
        &tr
    ));
    assert!(!troubled(
        &st,
        &[1; 16],
        &[],
        (&["orders:order.paid:audit"], &[]),
        &[],
        &tr
    ));
    assert!(!troubled(
        &st,
        &[1; 16],
        &[],
        (&["invoices"], &["order.paid"]),
        &[],
        &tr
    ));
}

#[tokio::test]
async fn the_page_keeps_the_last_analysed_traces_bounded_and_answers_bad_ids_clearly() {
    use causeway_core::ui::ApiSource;
    let st = store();
    st.store.views.keep(2);
    let api = super::page::Api {
        correlation: st.clone(),
        incidents: None,
        links: [(
            "jaeger".to_string(),
            "http://jaeger:16686/trace/{{ $trace_id }}?route={{ $labels.route_id }}".to_string(),
        )]
        .into_iter()
        .collect(),
        window_ns: 600_000_000_000,
    };
    // Three traces, one with more spans than a view keeps.
    let mut ids = Vec::new();
    for n in 0..3u8 {
        let mut spans = vec![sp(1, None, "GET /x", Server, 0, 1000)];
        if n == 2 {
            for i in 0..(model::view::MAX_SPANS + 20) {
                spans.push(sp(
                    2 + (i % 200) as u8,
                    Some(1),
                    &format!("<b>child {i}</b>"),
                    Client,
                    i as u64,
                    i as u64 + 1,
                ));
            }
        }
        let mut rs = vec![resource_spans("shop", tid(70 + n, spans))];
        let out = analyse(&st, &mut rs).await;
        let (t, v) = &out[0];
        st.store.views.push(model::view::view(
            t,
            v,
            annotate::evidence_json(t, v, st.sources.log_columns()),
            st.sources.log_columns(),
        ));
        ids.push(t.trace_id.clone());
    }
    let (code, body) = api.get("traces").unwrap();
    assert_eq!(code, 200);
    let list: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(list["kept"], 2, "the ring is bounded");
    assert_eq!(
        list["traces"][0]["trace_id"],
        ids[2].as_str(),
        "newest first"
    );
    let (code, body) = api.get(&format!("traces/{}", ids[2])).unwrap();
    assert_eq!(code, 200, "{body}");
    let t: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        t["spans"].as_array().unwrap().len(),
        model::view::MAX_SPANS,
        "spans bounded"
    );
    assert!(t["spans_left_out"].as_u64().unwrap() > 0);
    assert!(t["evidence"].is_object(), "{body}");
    assert_eq!(
        t["links"][0]["url"],
        format!("http://jaeger:16686/trace/{}?route=", ids[2])
    );
    // The oldest left; bad ids get a message.
    let (code, body) = api.get(&format!("traces/{}", ids[0])).unwrap();
    assert_eq!(code, 404, "{body}");
    assert!(
        body.contains("not among the 2 last analysed traces"),
        "{body}"
    );
    for bad in ["traces/xyz", "traces/<script>", "traces/"] {
        let (code, body) = api.get(bad).unwrap();
        assert_eq!(code, 400, "{bad}: {body}");
    }
    assert!(api.get("nothing").is_none(), "not this source's path");
}

/// `evidence_wait` holds unexplained traces for late evidence, at most
/// `max_held_traces` of them: beyond, they leave at once (analysed as they
/// are); the held ones leave at the next flush, analysed again.
#[tokio::test]
async fn evidence_wait_holds_at_most_max_held_traces_and_the_rest_leave_at_once() {
    use causeway_core::component::ProcessorFactory;
    let telemetry = causeway_core::telemetry::Registry::new();
    let ctx = BuildContext {
        id: "correlate".parse().unwrap(),
        telemetry: telemetry.clone(),
        shared: Default::default(),
        pipeline_signals: SignalSet::ALL,
    };
    let cfg: serde_yaml::Value =
        serde_yaml::from_str("evidence_wait: 60s\nmax_held_traces: 3").unwrap();
    let mut p = CorrelateFactory.build(ctx, &cfg).await.unwrap();
    let base = now_ns() - 10_000_000_000;
    // Ten slow traces with nothing to explain them: each one is `unknown`.
    let spans: Vec<Span> = (1..=10u8)
        .map(|i| {
            let mut s = at(base, i, None, "GET /slow", Server, 0, 900);
            s.trace_id = vec![i; 16];
            s
        })
        .collect();
    let mut out = Vec::new();
    p.process(
        Batch::from_traces(vec![resource_spans("web", spans)]),
        &mut out,
    )
    .await
    .unwrap();
    let passed: usize = out.iter().map(|b| b.items()).sum();
    assert_eq!(passed, 7, "all but max_held_traces leave at once");
    let gauge = |t: &causeway_core::telemetry::Registry| {
        t.render()
            .lines()
            .find(|l| l.starts_with(<HeldTraces as causeway_core::telemetry::Metric>::NAME))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    assert_eq!(gauge(&telemetry), Some(3.0));
    let analysing = <AnalysisTime as causeway_core::telemetry::Metric>::NAME;
    let spent = telemetry
        .render()
        .lines()
        .find(|l| l.starts_with(analysing))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok());
    assert!(spent.is_some_and(|us| us > 0.0), "{analysing}: {spent:?}");
    let mut released = Vec::new();
    p.flush(&mut released).await.unwrap();
    let traces: usize = released
        .iter()
        .filter(|b| b.signal() == Signal::Traces)
        .map(|b| b.items())
        .sum();
    assert_eq!(traces, 3, "the held ones leave at the flush");
    assert_eq!(gauge(&telemetry), Some(0.0));
}

/// gRPC as the stock instrumentations write it: Go's otelgrpc (the status
/// code as a number, `context deadline exceeded` as the status message),
/// Java's agent (an `io.grpc.StatusRuntimeException` whose message starts
/// with the code), and an SDK that writes the code by name. A failed call
/// is a timeout, an unavailable upstream or a rate limit by its gRPC code,
/// not a bare `error`.
#[tokio::test]
async fn grpc_status_codes_name_timeouts_unavailable_upstreams_and_rate_limits() {
    let st = store();
    let grpc = |code: KeyValue| {
        vec![
            attr_s("rpc.system", "grpc"),
            attr_s("rpc.service", "shop.Pricing"),
            attr_s("rpc.method", "Quote"),
            attr_s("server.address", "pricing"),
            code,
        ]
    };
    let call = |t: u8, code: KeyValue, status: &str, exception: Option<&str>| {
        let mut c = failed(
            with(
                sp(2, Some(1), "shop.Pricing/Quote", Client, 10, 910),
                grpc(code),
            ),
            status,
        );
        if let Some(msg) = exception {
            c.events.push(span::Event {
                name: "exception".into(),
                attributes: vec![
                    attr_s("exception.type", "io.grpc.StatusRuntimeException"),
                    attr_s("exception.message", msg),
                ],
                ..Default::default()
            });
        }
        let root = failed(sp(1, None, "POST /checkout", Server, 0, 1000), "");
        vec![resource_spans("checkout", tid(t, vec![root, c]))]
    };
    for (t, code, status, exception, cause) in [
        (
            91u8,
            kv("rpc.grpc.status_code", 4i64),
            "context deadline exceeded",
            None,
            "upstream_timeout",
        ),
        (
            92,
            kv("rpc.grpc.status_code", 14i64),
            "",
            Some("UNAVAILABLE: io exception"),
            "upstream_unavailable",
        ),
        (
            93,
            attr_s("rpc.grpc.status_code", "RESOURCE_EXHAUSTED"),
            "",
            None,
            "rate_limited",
        ),
        (
            94,
            attr_s("rpc.response.status_code", "UNAVAILABLE"),
            "",
            None,
            "upstream_unavailable",
        ),
    ] {
        let mut rs = call(t, code, status, exception);
        let out = analyse(&st, &mut rs).await;
        let (row, v) = &out[0];
        assert_eq!(v.best.cause, cause, "trace {t}: {v:?}");
        assert_eq!(
            row.spans[v.culprit].rpc_service.as_deref(),
            Some("shop.Pricing"),
            "trace {t}: the failing call"
        );
    }
}

/// Envoy and NGINX write `-` (or nothing) for a field without a value: it
/// is absent, not a value. A `-` circuit state is not an open circuit, a
/// `-` upstream names no server.
#[tokio::test]
async fn dash_and_empty_gateway_fields_are_absent() {
    let st = store();
    let dash = |tid: u8, status: i64| {
        gateway_log(
            tid,
            status,
            vec![
                attr_s("circuit_state", "-"),
                attr_s("upstream", "-"),
                attr_s("rate_limit_rule", ""),
                attr_s("response_flags", "-"),
            ],
        )
    };
    st.add_logs(&[dash(98, 200), dash(99, 200)], 1_000_000_000_000);
    let logs = st.store.logs.of(&[98; 16]);
    assert_eq!(logs.len(), 1);
    let l = logs[0]
        .parts
        .get::<crate::correlate::source::gateway::Line>()
        .expect("still the gateway's record");
    assert_eq!(
        (
            &l.circuit_state,
            &l.upstream,
            &l.rate_limit_rule,
            &l.response_flags
        ),
        (&None, &None, &None, &None)
    );
    // Not in trouble by its circuit, and no circuit cause.
    assert!(!troubled(
        &st,
        &[98; 16],
        &["order-create"],
        (&[], &[]),
        &[],
        &circuit_trouble()
    ));
    let mut rs = vec![resource_spans(
        "orders",
        vec![span(
            98,
            1,
            None,
            "POST /orders",
            0,
            600,
            vec![attr_s("http.route", "order-create")],
        )],
    )];
    let out = analyse(&st, &mut rs).await;
    assert_ne!(out[0].1.best.cause, "circuit_open", "{:?}", out[0].1);
}

/// The culprit is the service at fault, by the kind of fault: the callee a
/// call could not reach (named by the address it was seen serving before),
/// the innermost callee a timed-out call was waiting on, the callee whose
/// accept queue held a request, a database by its system, an upstream the
/// gateway found dead.
#[tokio::test]
async fn the_culprit_is_the_service_at_fault_and_its_kind() {
    let st = store();
    let http = |addr: &str, port: i64, status: Option<i64>| {
        let mut a = vec![attr_s("server.address", addr), kv("server.port", port)];
        if let Some(x) = status {
            a.push(kv("http.response.status_code", x));
        }
        a
    };
    // Seen once: users calls 10.0.0.7:8080, and `orders` answers there.
    let mut rs = vec![
        resource_spans(
            "users",
            tid(
                70,
                vec![
                    sp(1, None, "GET /me", Server, 0, 30),
                    with(
                        sp(2, Some(1), "GET", Client, 2, 20),
                        http("10.0.0.7", 8080, Some(200)),
                    ),
                ],
            ),
        ),
        resource_spans(
            "orders",
            tid(70, vec![sp(3, Some(2), "GET /orders", Server, 4, 18)]),
        ),
    ];
    analyse(&st, &mut rs).await;
    // A call from users refused at `addr:port`.
    let refused = |trace: u8, addr: &str, port: i64| {
        vec![resource_spans(
            "users",
            tid(
                trace,
                vec![
                    failed(sp(1, None, "GET /me", Server, 0, 400), "502"),
                    failed(
                        with(sp(2, Some(1), "GET", Client, 2, 390), {
                            let mut a = http(addr, port, None);
                            a.push(attr_s("error.type", "ECONNREFUSED"));
                            a
                        }),
                        "connect ECONNREFUSED",
                    ),
                ],
            ),
        )]
    };
    // Later the same call is refused: orders is down, not users.
    let mut rs = refused(71, "10.0.0.7", 8080);
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("orders", "callee")
    );
    assert_eq!(
        out[0].0.spans[v.culprit].name, "GET",
        "the span that shows it is the call"
    );
    // An address never seen served is named as itself.
    let mut rs = refused(72, "10.0.0.9", 9090);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(
        (
            out[0].1.culprit_service.as_str(),
            out[0].1.culprit_kind.as_str()
        ),
        ("10.0.0.9:9090", "callee")
    );
    // A timeout: search gave up on pricing, which was waiting on inventory
    // for the whole time: inventory is where the time went.
    let mut rs = vec![
        resource_spans(
            "search",
            tid(
                73,
                vec![
                    failed(sp(1, None, "GET /search", Server, 0, 1010), "504"),
                    failed(
                        with(sp(2, Some(1), "GET", Client, 5, 1005), {
                            let mut a = http("pricing", 80, None);
                            a.push(attr_s("error.type", "timeout"));
                            a
                        }),
                        "timeout",
                    ),
                ],
            ),
        ),
        resource_spans(
            "pricing",
            tid(
                73,
                vec![
                    sp(3, Some(2), "GET /price", Server, 8, 1004),
                    with(
                        sp(4, Some(3), "GET", Client, 10, 1003),
                        http("inventory", 80, None),
                    ),
                ],
            ),
        ),
        resource_spans(
            "inventory",
            tid(73, vec![sp(5, Some(4), "GET /stock", Server, 12, 1002)]),
        ),
    ];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "upstream_timeout", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("inventory", "callee")
    );
    // The accept queue: the request to pricing waited 900 ms before pricing began it.
    let mut rs = vec![
        resource_spans(
            "search",
            tid(
                74,
                vec![
                    sp(1, None, "GET /search", Server, 0, 1000),
                    with(
                        sp(2, Some(1), "GET", Client, 5, 995),
                        http("pricing", 80, Some(200)),
                    ),
                ],
            ),
        ),
        resource_spans(
            "pricing",
            tid(74, vec![sp(3, Some(2), "GET /price", Server, 905, 990)]),
        ),
    ];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "queueing", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("pricing", "callee")
    );
    // A slow query: the database, by its system, with the system written.
    let mut rs = vec![resource_spans(
        "orders",
        tid(
            75,
            vec![
                sp(1, None, "GET /orders", Server, 0, 1000),
                with(
                    sp(2, Some(1), "SELECT orders", Client, 10, 990),
                    vec![
                        attr_s("db.system", "postgresql"),
                        attr_s("server.address", "db-1"),
                    ],
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "slow_dependency", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("postgresql", "dependency")
    );
    let root = &rs[0].scope_spans[0].spans[0];
    assert!(root
        .attributes
        .iter()
        .any(|a| a.key == "rca.culprit.db_system"));
    // The gateway found its upstream dead: the upstream, by the address the
    // gateway names, mapped to the service seen answering there.
    st.add_logs(
        &[gateway_log(
            76,
            502,
            vec![attr_s("server.address", "10.0.0.7:8080")],
        )],
        1_000_000_000_000,
    );
    let mut rs = vec![resource_spans(
        "client",
        tid(
            76,
            vec![
                sp(1, None, "order", Internal, 0, 50),
                with(
                    sp(2, Some(1), "POST", Client, 1, 49),
                    http("gw", 443, Some(502)),
                ),
            ],
        ),
    )];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("orders", "callee")
    );
}

/// Baselines are kept per operation identity, not per span name: under the
/// stable HTTP conventions every client span is named `GET`, and one
/// median over a slow report and a fast price lookup is wrong for both.
#[tokio::test]
async fn baselines_tell_apart_operations_that_share_a_span_name() {
    let st = store();
    let call = |id: u8, addr: &str, ms: u64| {
        vec![resource_spans(
            "web",
            tid(
                id,
                vec![
                    sp(1, None, "GET /page", Server, 0, ms + 10),
                    with(
                        sp(2, Some(1), "GET", Client, 5, ms + 5),
                        vec![
                            attr_s("server.address", addr),
                            kv("server.port", 80i64),
                            attr_s("http.request.method", "GET"),
                            kv("http.response.status_code", 200i64),
                        ],
                    ),
                ],
            ),
        )]
    };
    // The daemon feeds what it analysed: 30 slow reports, 30 fast prices.
    for i in 0..30u8 {
        for (addr, ms, id) in [("reports", 1500, 100 + i), ("prices", 10, 140 + i)] {
            let (traces, _) = join_all(&st, &call(id, addr, ms));
            st.store.baselines.feed(
                1_000_000_000_000,
                traces[0]
                    .spans
                    .iter()
                    .map(|s| (&*s.service, s.op.as_str(), s.duration_ms))
                    .collect::<Vec<_>>()
                    .into_iter(),
            );
        }
    }
    // A report as slow as ever: its normal, no cause.
    let mut rs = call(200, "reports", 1500);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "unknown", "{:?}", out[0].1);
    assert_eq!(out[0].0.spans[1].op, "client GET reports:80");
    // A price lookup sixty times its normal: slow, by the prices baseline.
    let mut rs = call(201, "prices", 600);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "slow_dependency", "{:?}", out[0].1);
    assert!(
        out[0].1.best.summary.contains("normally 10 ms"),
        "{}",
        out[0].1.best.summary
    );
}

/// Node starts spans on a millisecond clock and ends them on a finer one:
/// a server span that began late in its callee's accept queue may end a
/// fraction of a millisecond after its client. That is rounding, not clock
/// skew: the late start stays, and so does the queue it shows.
#[tokio::test]
async fn a_sub_millisecond_overhang_is_rounding_and_keeps_the_queue() {
    let st = store();
    let mut server = sp(3, Some(2), "GET /spin", Server, 905, 995);
    server.end_time_unix_nano += 400_000; // 0.4 ms past its client's end
    let mut rs = vec![
        resource_spans(
            "shop",
            tid(
                77,
                vec![
                    sp(1, None, "GET /quote", Server, 0, 1000),
                    with(
                        sp(2, Some(1), "GET", Client, 5, 995),
                        vec![
                            attr_s("server.address", "pricing"),
                            kv("http.response.status_code", 200i64),
                        ],
                    ),
                ],
            ),
        ),
        resource_spans("pricing", tid(77, vec![server])),
    ];
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(v.best.cause, "queueing", "{v:?}");
    assert!(
        v.best
            .summary
            .contains("from shop to pricing waited 899 ms"),
        "{}",
        v.best.summary
    );
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("pricing", "callee")
    );
}

/// Gateways in layers: an edge gateway in front of a sidecar. The request's
/// answer and its route are the outermost gateway's, whichever line
/// arrives last; the inner hop's line is evidence of the hop it describes
/// (its upstream is the callee that failed).
#[tokio::test]
async fn with_two_gateway_layers_the_outermost_answers_and_names_the_route() {
    let st = store();
    let line = |service: &str,
                end_ms: u64,
                dur_ms: f64,
                status: i64,
                route: &str,
                extra: Vec<KeyValue>| {
        let mut attrs = vec![
            attr_s("route_id", route),
            kv("http.response.status_code", status),
            kv("duration_ms", dur_ms),
        ];
        attrs.extend(extra);
        ResourceLogs {
            resource: Some(Resource {
                attributes: vec![attr_s("service.name", service)],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    time_unix_nano: 1_000_000_000_000 + end_ms * 1_000_000,
                    trace_id: vec![78; 16],
                    attributes: attrs,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }
    };
    // The sidecar's line is written later (its exporter is slower) but its
    // request began later and ended sooner: it is the inner hop. It found
    // its upstream refusing connections (503 UF); the edge answered 502.
    st.add_logs(
        &[
            line(
                "edge",
                1000,
                1000.0,
                502,
                "api-orders",
                vec![attr_s("gateway.response_flags", "-")],
            ),
            line(
                "sidecar",
                1200,
                990.0,
                503,
                "inbound|8080||orders",
                vec![
                    attr_s("gateway.response_flags", "UF"),
                    attr_s("server.address", "10.1.0.9:8080"),
                ],
            ),
        ],
        1_000_000_000_000,
    );
    let mut rs = vec![resource_spans(
        "web",
        tid(78, vec![sp(1, None, "POST /checkout", Server, 0, 1000)]),
    )];
    let out = analyse(&st, &mut rs).await;
    let (t, v) = &out[0];
    assert_eq!(
        t.final_status,
        Some(502),
        "the edge's answer, not the sidecar's"
    );
    assert_eq!(t.route.as_deref(), Some("api-orders"), "the edge's route");
    assert_eq!(
        crate::correlate::source::gateway::hops(&t.logs)
            .iter()
            .flatten()
            .count(),
        2
    );
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("10.1.0.9:8080", "callee")
    );
}

/// A failure is explained where it began, not where it surfaced: the edge
/// gateway's 503 about shop is the consequence of shop's call to pricing
/// timing out, which a rule constant (503 above timeouts) used to decide.
/// The consequence stays an alternative with a low confidence; the reason
/// says why.
#[tokio::test]
async fn a_failure_is_explained_at_its_origin_not_where_it_surfaced() {
    let st = store();
    let mut rs = vec![
        resource_spans(
            "shop",
            tid(
                110,
                vec![
                    with(
                        failed(sp(1, None, "GET /quote", Server, 0, 1000), ""),
                        vec![kv("http.response.status_code", 503i64)],
                    ),
                    with(
                        failed(sp(2, Some(1), "GET", Client, 10, 990), "timeout"),
                        vec![
                            attr_s("error.type", "timeout"),
                            attr_s("server.address", "pricing"),
                        ],
                    ),
                ],
            ),
        ),
        resource_spans(
            "pricing",
            tid(110, vec![sp(3, Some(2), "GET /price", Server, 20, 1400)]),
        ),
    ];
    st.add_logs(
        &[gateway_log(110, 503, vec![attr_s("upstream", "shop")])],
        1_000_000_000_000,
    );
    let out = analyse(&st, &mut rs).await;
    let (_, v) = &out[0];
    assert_eq!(v.best.cause, "upstream_timeout", "{v:?}");
    assert_eq!(v.culprit_service, "pricing", "{v:?}");
    assert!(v.reason.contains("where it began"), "{}", v.reason);
    let gw = v
        .alternatives
        .iter()
        .find(|a| a.cause == "upstream_unavailable")
        .expect("the gateway's 503 stays an alternative");
    assert!(
        v.reason
            .contains("upstream_unavailable (closer to the response"),
        "{}",
        v.reason
    );
    assert!(
        v.best.confidence >= 0.8 && gw.confidence <= 0.2,
        "origin {} against its consequence {}",
        v.best.confidence,
        gw.confidence
    );
}

/// The server a caller cancelled after its deadline (gRPC `CANCELLED`) is
/// not where the failure began: the deadline is, and the callee that was
/// still working is at fault.
#[tokio::test]
async fn a_call_cancelled_after_the_callers_deadline_is_the_timeout() {
    let st = store();
    let grpc = |code: i64| {
        vec![
            attr_s("rpc.system", "grpc"),
            attr_s("rpc.service", "shop.Pricing"),
            attr_s("rpc.method", "Quote"),
            kv("rpc.grpc.status_code", code),
        ]
    };
    let mut rs = vec![
        resource_spans(
            "checkout",
            tid(
                111,
                vec![
                    failed(sp(1, None, "POST /checkout", Server, 0, 1000), ""),
                    failed(
                        with(
                            sp(2, Some(1), "shop.Pricing/Quote", Client, 10, 910),
                            grpc(4),
                        ),
                        "context deadline exceeded",
                    ),
                ],
            ),
        ),
        resource_spans(
            "pricing",
            tid(
                111,
                vec![failed(
                    with(
                        sp(3, Some(2), "shop.Pricing/Quote", Server, 15, 912),
                        grpc(1),
                    ),
                    "context canceled",
                )],
            ),
        ),
    ];
    let out = analyse(&st, &mut rs).await;
    let (row, v) = &out[0];
    assert_eq!(
        row.error_origin.map(|e| row.spans[e].kind.as_str()),
        Some("client"),
        "the cancelled server span is not the origin: {v:?}"
    );
    assert_eq!(v.best.cause, "upstream_timeout", "{v:?}");
    assert_eq!(v.culprit_service, "pricing", "{v:?}");
    assert_eq!(v.culprit_kind.as_str(), "callee", "{v:?}");
    assert!(
        v.alternatives
            .iter()
            .all(|a| a.cause != "error" || a.confidence < 0.2),
        "{v:?}"
    );
}

/// An open circuit shows to the caller as a 503: the gateway's line about
/// the upstream sits between the caller's call and the upstream it
/// answered for, so the circuit explains the 503 (not a per-rule priority:
/// the same line without the circuit state is `upstream_unavailable`).
#[tokio::test]
async fn an_open_circuit_explains_the_503_its_caller_saw() {
    let st = store();
    for (t, circuit, cause) in [
        (112u8, Some("OPEN"), "circuit_open"),
        (113, None, "upstream_unavailable"),
    ] {
        let mut rs = vec![resource_spans(
            "frontend",
            tid(
                t,
                vec![
                    with(
                        failed(sp(1, None, "POST /buy", Server, 0, 100), ""),
                        vec![kv("http.response.status_code", 502i64)],
                    ),
                    with(
                        failed(sp(2, Some(1), "POST", Client, 10, 90), ""),
                        vec![
                            kv("http.response.status_code", 503i64),
                            attr_s("server.address", "notifier"),
                        ],
                    ),
                ],
            ),
        )];
        let mut extra = vec![attr_s("upstream", "notifier")];
        if let Some(c) = circuit {
            extra.push(attr_s("circuit_state", c));
        }
        st.add_logs(&[gateway_log(t, 503, extra)], 1_000_000_000_000);
        let out = analyse(&st, &mut rs).await;
        let (_, v) = &out[0];
        assert_eq!(v.best.cause, cause, "trace {t}: {v:?}");
        assert_eq!(v.culprit_service, "notifier", "trace {t}: {v:?}");
        // The gateway answered in the upstream's place: its line sits just
        // below the caller's call, nearer the origin than the 503 it saw.
        assert!(
            v.reason.contains("the gateway's answer to frontend POST"),
            "{}",
            v.reason
        );
    }
}

/// Independent rules that agree on a cause strengthen it: a Kafka lag
/// sample and the message's own wait are two signals; the stated
/// confidence is computed from them, not a rule's constant.
#[tokio::test]
async fn agreeing_rules_are_named_and_the_confidence_is_computed() {
    let st = store();
    let mut rs = vec![resource_spans(
        "shop",
        tid(
            114,
            vec![
                sp(1, None, "POST /orders", Server, 0, 1000),
                with(
                    sp(2, Some(1), "GET", Client, 10, 400),
                    vec![kv("http.response.status_code", 504i64)],
                ),
            ],
        ),
    )];
    st.add_logs(&[gateway_log(114, 200, vec![])], 1_000_000_000_000);
    let out = analyse(&st, &mut rs).await;
    let (_, v) = &out[0];
    assert_eq!(v.best.cause, "upstream_timeout", "{v:?}");
    // One rule alone, the request answered: the support is its strength ×
    // its share of the time (39%, under the 60% that covers it fully).
    let alone = v.best.confidence;
    assert!(alone > 0.5 && alone < 1.0, "{v:?}");
    let mut rs2 = vec![resource_spans(
        "shop",
        tid(
            115,
            vec![
                with(
                    failed(sp(1, None, "POST /orders", Server, 0, 1000), ""),
                    vec![kv("http.response.status_code", 504i64)],
                ),
                with(
                    failed(sp(2, Some(1), "GET", Client, 10, 990), ""),
                    vec![kv("http.response.status_code", 504i64)],
                ),
            ],
        ),
    )];
    st.add_logs(
        &[gateway_log(115, 504, vec![attr_s("upstream", "shop")])],
        1_000_000_000_000,
    );
    let out = analyse(&st, &mut rs2).await;
    let (_, v) = &out[0];
    assert_eq!(v.best.cause, "upstream_timeout", "{v:?}");
    assert!(
        v.best
            .evidence
            .as_deref()
            .is_some_and(|e| e.contains("agreeing rules")),
        "{v:?}"
    );
    assert!(
        v.best.confidence > alone,
        "{} vs {alone}",
        v.best.confidence
    );
}

/// A client limited by the gateway in front of its callee: the limiter is
/// the gateway (its line names the rule), whether the request failed with
/// the 429 or the client retried through it. The client's own finding
/// agrees on the cause; the gateway's line sits below the client's call.
#[tokio::test]
async fn a_rate_limit_names_the_gateway_that_limited_not_the_callee_behind_it() {
    let st = store();
    for (t, retried) in [(116u8, false), (117, true)] {
        let mut spans = vec![sp(1, None, "request", Internal, 0, 1000)];
        let attempt = |id: u8, s: u64, e: u64, status: i64| {
            let c = with(
                sp(id, Some(1), "GET", Client, s, e),
                vec![
                    kv("http.response.status_code", status),
                    attr_s("server.address", "127.0.0.1"),
                    kv("server.port", 8081i64),
                ],
            );
            if status >= 400 {
                failed(c, "")
            } else {
                c
            }
        };
        if retried {
            spans.push(attempt(2, 0, 3, 429));
            spans.push(attempt(3, 500, 503, 429));
            spans.push(attempt(4, 1000, 1003, 200));
        } else {
            spans[0] = failed(sp(1, None, "request", Internal, 0, 5), "");
            spans.push(attempt(2, 0, 5, 429));
        }
        // The address is known to answer as shop (learned from other
        // traces): the client's own finding names shop, the gateway's line
        // the limiter.
        for s in spans.iter_mut().skip(1) {
            s.attributes.push(attr_s("peer.service", "shop"));
        }
        let mut rs = vec![resource_spans("load-driver", tid(t, spans))];
        let mut line = gateway_log(
            t,
            429,
            vec![attr_s("gateway.rate_limit_rule", "perip-2rps")],
        );
        line.resource = Some(Resource {
            attributes: vec![attr_s("service.name", "nginx-gateway")],
            ..Default::default()
        });
        let mut lines = vec![line.clone()];
        if retried {
            lines.push(line.clone());
            let mut ok = gateway_log(t, 200, vec![attr_s("upstream", "127.0.0.1:9001")]);
            ok.resource = line.resource.clone();
            lines.push(ok);
        }
        st.add_logs(&lines, 1_000_000_000_000);
        let out = analyse(&st, &mut rs).await;
        let (_, v) = &out[0];
        assert_eq!(v.best.cause, "rate_limited", "trace {t}: {v:?}");
        assert_eq!(
            (v.culprit_service.as_str(), v.culprit_kind.as_str()),
            ("nginx-gateway", "limiter"),
            "trace {t}: {v:?}"
        );
    }
}

/// The `correlated` sampling policy reads `trouble::ATTRIBUTES` of a trace:
/// every attribute a source's `in_trouble` reads must be among them.
#[test]
fn every_source_trouble_key_is_read_by_the_correlated_policy() {
    let cfg: CorrelateConfig =
        serde_yaml::from_value(serde_yaml::Value::Mapping(Default::default())).expect("defaults");
    let keys = registry::sources(&cfg).trouble_keys();
    assert!(keys.contains(&"http.route"), "{keys:?}");
    for k in keys {
        assert!(
            crate::trouble::ATTRIBUTES.contains(&k),
            "a source reads {k:?} in in_trouble: add it to trouble::ATTRIBUTES"
        );
    }
}

/// Each settings section checks itself, and its errors carry the section's
/// path; RabbitMQ and NATS read their own `sample_interval`.
#[test]
fn each_settings_section_reports_its_own_errors_with_its_path() {
    let errors = causeway_core::config::decode::<CorrelateConfig>(
        &serde_yaml::from_str(
            "retry_storm: {min_attempts: 1}\nconsumer_lag: {lag_threshold: 0}\nrabbitmq: {sample_interval: 0s}\nnats: {sample_interval: 0s}\ndependencies: {sample_interval: 0s}\nbaseline: {window: 0s}",
        )
        .expect("yaml"),
    )
    .expect_err("invalid");
    let paths: Vec<&str> = errors.iter().map(|e| e.path.as_str()).collect();
    for p in [
        "retry_storm.min_attempts",
        "consumer_lag.lag_threshold",
        "rabbitmq.sample_interval",
        "nats.sample_interval",
        "dependencies.sample_interval",
        "baseline.window",
    ] {
        assert!(paths.contains(&p), "{p} missing from {paths:?}");
    }
    let ok: CorrelateConfig = causeway_core::config::decode(
        &serde_yaml::from_str("rabbitmq: {sample_interval: 15s}\nnats: {sample_interval: 5s}")
            .expect("yaml"),
    )
    .expect("valid");
    assert_eq!(
        ok.rabbitmq.sample_interval.map(|d| d.get().as_secs()),
        Some(15)
    );
    assert_eq!(ok.nats.sample_interval.map(|d| d.get().as_secs()), Some(5));
}

/// The `logs` table has the core's columns and each source's; an incident
/// discriminator `log.<field>` names one of them or is refused with the
/// columns there are.
#[test]
fn the_logs_table_takes_its_columns_from_the_sources() {
    use causeway_core::config::Validate;
    let cfg: CorrelateConfig = serde_yaml::from_str("{}").unwrap();
    let sources = registry::sources(&cfg);
    let (_, logs) = sources
        .tables()
        .into_iter()
        .find(|(n, _)| *n == "logs")
        .expect("a logs table");
    let names: Vec<&str> = logs.fields().iter().map(|f| f.name().as_str()).collect();
    for col in [
        "trace_id", "body", "gateway", "hop", "route", "status", "upstream",
    ] {
        assert!(names.contains(&col), "{col} in {names:?}");
    }
    let cfg: CorrelateConfig =
        serde_yaml::from_str("incidents: {attributes: [log.status, log.nosuch]}").unwrap();
    let errors: Vec<String> = cfg.validate().iter().map(|e| e.to_string()).collect();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0].contains("incidents.attributes[1]") && errors[0].contains("rate_limit_rule"),
        "{errors:?}"
    );
}

/// A declared span attribute reaches the rules: the table a PostgreSQL
/// call touched (`db.collection.name`) is named in the lock's verdict, and
/// a call without it is described as before.
#[tokio::test]
async fn the_table_a_call_waiting_on_a_lock_touched_is_named_in_its_verdict() {
    let st = store();
    let rms: Vec<ResourceMetrics> = [0, 500, 1000]
        .into_iter()
        .map(|t| {
            scraped(
                "pg",
                "db.shop:5432",
                "pg_locks_count",
                &[("datname", "app"), ("mode", "accessexclusivelock")],
                1.0,
                t,
            )
        })
        .collect();
    st.add_metrics(&rms, 1_000_000_000_000 + 1_000_000_000);
    let call = |id: u8, table: Option<&str>| {
        let mut attrs = vec![
            attr_s("db.system", "postgresql"),
            attr_s("server.address", "db.shop"),
            kv("server.port", 5432i64),
        ];
        attrs.extend(table.map(|t| attr_s("db.collection.name", t)));
        resource_spans(
            "shop",
            tid(
                id,
                vec![
                    sp(1, None, "POST /order", Server, 0, 900),
                    with(sp(2, Some(1), "UPDATE", Client, 10, 890), attrs),
                ],
            ),
        )
    };
    let mut rs = vec![call(91, Some("orders")), call(92, None)];
    let out = analyse(&st, &mut rs).await;
    let summary = |id: u8| {
        let (_, v) = out
            .iter()
            .find(|(t, _)| t.id == [id; 16])
            .expect("analysed");
        assert_eq!(v.best.cause, "db_lock_contention", "{v:?}");
        v.best.summary.clone()
    };
    assert!(
        summary(91).contains("on PostgreSQL db.shop:5432 (table orders) while"),
        "{}",
        summary(91)
    );
    assert!(!summary(92).contains("(table"), "{}", summary(92));
}

/// An `exception` event on `x`.
fn raised(mut x: Span, kind: &str, message: &str) -> Span {
    x.events.push(span::Event {
        name: "exception".into(),
        attributes: vec![
            attr_s("exception.type", kind),
            attr_s("exception.message", message),
        ],
        ..Default::default()
    });
    x
}

#[tokio::test]
async fn a_grpc_call_to_nothing_names_the_service_or_address_it_meant_to_reach() {
    let st = store();
    // grpcio's client span: no server.address; the target is in the
    // exception's text and rpc.service.
    let call = |t: u8, port: u16| {
        let c = raised(
            failed(
                with(
                    sp(2, Some(1), "/reservations.Book/Hold", Client, 5, 8),
                    vec![
                        attr_s("rpc.system", "grpc"),
                        attr_s("rpc.service", "reservations.Book"),
                        attr_s("rpc.method", "Hold"),
                        kv("rpc.grpc.status_code", 14i64),
                    ],
                ),
                "StatusCode.UNAVAILABLE",
            ),
            "grpc._channel._InactiveRpcError",
            &format!("<_InactiveRpcError of RPC that terminated with:\n\tstatus = StatusCode.UNAVAILABLE\n\tdetails = \"failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:{port}: Failed to connect to remote host: Connection refused\"\n>"),
        );
        let root = failed(sp(1, None, "POST /hold", Server, 0, 10), "");
        vec![resource_spans("api", tid(t, vec![root, c]))]
    };
    // Nothing ever served it: the address it meant to reach, never the caller.
    let mut rs = call(120, 45123);
    let v = &analyse(&st, &mut rs).await[0].1;
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("127.0.0.1:45123", "callee"),
        "{v:?}"
    );
    // Once a server span of `reservations` served the RPC service, a call
    // to it that reached nothing names reservations.
    let served = with(
        sp(3, None, "reservations.Book/Hold", Server, 0, 2),
        vec![
            attr_s("rpc.system", "grpc"),
            attr_s("rpc.service", "reservations.Book"),
        ],
    );
    let mut rs = vec![resource_spans("reservations", tid(121, vec![served]))];
    analyse(&st, &mut rs).await;
    let mut rs = call(122, 45124);
    let v = &analyse(&st, &mut rs).await[0].1;
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("reservations", "callee"),
        "{v:?}"
    );
}

#[tokio::test]
async fn a_breaker_no_rule_knows_by_name_is_found_by_what_it_did() {
    let st = store();
    // api's calls to pricing fail: nothing listens at pricing's address,
    // which a server span of pricing answered before.
    let call = |t: u8, at: u64, status: i64| {
        let c = with(
            sp(2, Some(1), "GET", Client, at + 1, at + 3),
            vec![
                attr_s("server.address", "10.0.0.7"),
                kv("server.port", 8080i64),
                kv("http.response.status_code", status),
            ],
        );
        let c = if status >= 500 { failed(c, "") } else { c };
        let root = sp(1, None, "GET /quote", Server, at, at + 4);
        let root = if status >= 500 {
            failed(root, "")
        } else {
            root
        };
        resource_spans("api", tid(t, vec![root, c]))
    };
    let answered = with(
        sp(3, Some(2), "GET /price", Server, 2, 3),
        vec![kv("http.response.status_code", 200i64)],
    );
    let mut rs = vec![
        call(130, 0, 200),
        resource_spans("pricing", tid(130, vec![answered])),
    ];
    analyse(&st, &mut rs).await;
    let mut rs = vec![call(131, 100, 503), call(132, 200, 503)];
    analyse(&st, &mut rs).await;
    // Then api fails in a millisecond with nothing under it: a Python
    // breaker's exception, in words no rule lists.
    let refused = |t: u8, at: u64, kind: &str| {
        let root = raised(
            failed(sp(1, None, "GET /quote", Server, at, at + 1), ""),
            kind,
            "Circuit \"get_price\" OPEN until 2026-12-05 05:20:00 (2 failures, 30 sec remaining)",
        );
        vec![resource_spans("api", tid(t, vec![root]))]
    };
    let mut rs = refused(133, 300, "circuitbreaker.CircuitBreakerError");
    let v = &analyse(&st, &mut rs).await[0].1;
    assert_eq!(v.best.cause, "circuit_open", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("pricing", "callee"),
        "{v:?}"
    );
    assert!(
        v.best.summary.contains("refused its own call to pricing"),
        "{}",
        v.best.summary
    );
    // The same fast failure in a service whose calls never failed is an
    // error of its own.
    let mut rs = vec![resource_spans(
        "checkout",
        tid(
            134,
            vec![raised(
                failed(sp(1, None, "GET /quote", Server, 300, 301), ""),
                "ValueError",
                "bad sku",
            )],
        ),
    )];
    let v = &analyse(&st, &mut rs).await[0].1;
    assert_eq!(v.best.cause, "error", "{v:?}");
}

#[tokio::test]
async fn retries_that_met_a_drain_and_recovered_are_the_drain() {
    let st = store();
    // A client (an internal span) retrying a draining server 100 ms apart:
    // seven 503s, then a 200; each attempt answered by the server's span.
    let mut client = vec![sp(1, None, "request", Internal, 0, 800)];
    let mut server = Vec::new();
    for k in 0..8u8 {
        let s = u64::from(k) * 100;
        let status = if k < 7 { 503i64 } else { 200 };
        let call = with(
            sp(2 + k, Some(1), "GET", Client, s, s + 4),
            vec![kv("http.response.status_code", status)],
        );
        let answer = with(
            sp(20 + k, Some(2 + k), "GET /busy", Server, s + 1, s + 3),
            vec![kv("http.response.status_code", status)],
        );
        if status == 503 {
            client.push(failed(call, ""));
            server.push(failed(answer, ""));
        } else {
            client.push(call);
            server.push(answer);
        }
    }
    let mut rs = vec![
        resource_spans("load-driver", tid(140, client)),
        resource_spans("pricing", tid(140, server)),
    ];
    let v = &analyse(&st, &mut rs).await[0].1;
    assert_eq!(v.best.cause, "upstream_unavailable", "{v:?}");
    assert_eq!(
        (v.culprit_service.as_str(), v.culprit_kind.as_str()),
        ("pricing", "callee"),
        "{v:?}"
    );
}

/// A CPU profile of `api`: 80% in `main.parseAST` (under `main.handle`),
/// 20% in `main.handle` itself, its samples linked to `span` (if any),
/// covering the second from the spans' base time.
pub(crate) fn cpu_profile_of_api(
    span: Option<u8>,
) -> opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use opentelemetry_proto::tonic::profiles::v1development::{
        Function, Line, Link, Location, Profile, ProfilesDictionary, ResourceProfiles, Sample,
        ScopeProfiles, Stack, ValueType,
    };
    let strings = [
        "",
        "cpu",
        "nanoseconds",
        "main.parseAST",
        "main.handle",
        "parse.go",
        "main.go",
    ];
    let loc = |f: i32, line: i64| Location {
        lines: vec![Line {
            function_index: f,
            line,
            column: 0,
        }],
        ..Default::default()
    };
    let link_index = i32::from(span.is_some());
    let sample = |stack_index: i32, v: i64| Sample {
        stack_index,
        link_index,
        values: vec![v],
        ..Default::default()
    };
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![attr_s("service.name", "api")],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: vec![Profile {
                    sample_type: Some(ValueType {
                        type_strindex: 1,
                        unit_strindex: 2,
                    }),
                    samples: vec![sample(1, 640_000_000), sample(2, 160_000_000)],
                    time_unix_nano: 1_000_000_000_000,
                    duration_nano: 1_000_000_000,
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(ProfilesDictionary {
            location_table: vec![Default::default(), loc(1, 42), loc(2, 20)],
            function_table: vec![
                Default::default(),
                Function {
                    name_strindex: 3,
                    filename_strindex: 5,
                    ..Default::default()
                },
                Function {
                    name_strindex: 4,
                    filename_strindex: 6,
                    ..Default::default()
                },
            ],
            link_table: vec![
                Default::default(),
                Link {
                    trace_id: vec![31; 16],
                    span_id: vec![span.unwrap_or(0); 8],
                },
            ],
            stack_table: vec![
                Default::default(),
                Stack {
                    location_indices: vec![1, 2],
                },
                Stack {
                    location_indices: vec![2],
                },
            ],
            string_table: strings.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }),
    }
}

/// The root span's `rca.code.*` attributes.
fn code_attributes(rs: &[ResourceSpans]) -> std::collections::HashMap<String, String> {
    let root = rs
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .find(|s| s.parent_span_id.is_empty())
        .unwrap();
    root.attributes
        .iter()
        .filter(|a| a.key.starts_with("rca.code."))
        .map(|a| {
            let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                Some(any_value::Value::DoubleValue(d)) => d.to_string(),
                Some(any_value::Value::IntValue(i)) => i.to_string(),
                other => format!("{other:?}"),
            };
            (a.key.clone(), v)
        })
        .collect()
}

#[tokio::test]
async fn the_code_that_held_the_culprits_time_is_named_by_the_best_join() {
    use prost::Message;
    // (a) The samples linked to the culprit span itself.
    let trace = |internal_child: bool| {
        let mut spans = vec![span(31, 1, None, "POST /parse", 0, 500, vec![])];
        if internal_child {
            let mut s = span(31, 3, Some(1), "parse", 5, 495, vec![]);
            s.kind = span::SpanKind::Internal as i32;
            spans.push(s);
        } else {
            spans.push(span(
                31,
                2,
                Some(1),
                "GET db",
                10,
                20,
                vec![attr_s("server.address", "db")],
            ));
        }
        vec![resource_spans("api", spans)]
    };
    for (linked, internal_child, join) in [
        (Some(1), false, "span"),
        (Some(1), true, "local_root"),
        (None, false, "time"),
    ] {
        let st = store();
        let req = cpu_profile_of_api(linked);
        st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
        let mut rs = trace(internal_child);
        let out = analyse(&st, &mut rs).await;
        let v = &out[0].1;
        let culprit = &out[0].0.spans[v.culprit];
        assert_eq!(
            culprit.name,
            if internal_child {
                "parse"
            } else {
                "POST /parse"
            }
        );
        let code = code_attributes(&rs);
        assert_eq!(
            code["rca.code.function"], "main.parseAST",
            "{join}: {code:?}"
        );
        assert_eq!(code["rca.code.location"], "parse.go:42");
        assert_eq!(code["rca.code.share"], "0.8");
        assert_eq!(code["rca.code.kind"], "cpu");
        assert_eq!(code["rca.code.join"], join);
        // The top frames are the evidence's.
        let root = rs[0].scope_spans[0]
            .spans
            .iter()
            .find(|s| s.parent_span_id.is_empty())
            .unwrap();
        let ev = root
            .attributes
            .iter()
            .find(|a| a.key == "rca.evidence")
            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(s) => {
                    serde_json::from_str::<serde_json::Value>(s).ok()
                }
                _ => None,
            })
            .unwrap();
        assert_eq!(
            ev["code"]["top_inclusive"][0]["function"], "main.handle",
            "{ev}"
        );
        assert_eq!(ev["code"]["top_inclusive"][0]["share"], 1.0);
    }
    // Samples of another service, or of another time, say nothing.
    let st = store();
    let mut req = cpu_profile_of_api(None);
    req.resource_profiles[0].scope_profiles[0].profiles[0].time_unix_nano = 5_000_000_000_000;
    st.add_profiles(&req, req.encoded_len(), 5_001_000_000_000);
    let mut rs = trace(false);
    analyse(&st, &mut rs).await;
    assert!(code_attributes(&rs).is_empty());
}

/// A profiles request of `service`: per profile its sample type, unit and
/// samples (function names leaf first, value, linked span's byte), over
/// `[1000 s, 1000 s + 2 s]`.
type ProfileSpec<'a> = (&'a str, &'a str, Vec<(Vec<&'a str>, i64, Option<u8>)>);
pub(crate) fn profiles_of(
    service: &str,
    profiles: &[ProfileSpec<'_>],
) -> opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest {
    use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
    use opentelemetry_proto::tonic::profiles::v1development::{
        Function, Line, Link, Location, Profile, ProfilesDictionary, ResourceProfiles, Sample,
        ScopeProfiles, Stack, ValueType,
    };
    let mut d = ProfilesDictionary {
        string_table: vec![String::new()],
        location_table: vec![Default::default()],
        function_table: vec![Default::default()],
        link_table: vec![Default::default()],
        stack_table: vec![Default::default()],
        ..Default::default()
    };
    fn str_of(d: &mut ProfilesDictionary, x: &str) -> i32 {
        match d.string_table.iter().position(|s| s == x) {
            Some(i) => i as i32,
            None => {
                d.string_table.push(x.to_string());
                d.string_table.len() as i32 - 1
            }
        }
    }
    let mut out = Vec::new();
    // One stack per list of frames, shared by the profiles (as pprof's
    // sample types share a sample).
    let mut stacks: std::collections::HashMap<Vec<&str>, i32> = Default::default();
    for (ty, unit, samples) in profiles {
        let sample_type = Some(ValueType {
            type_strindex: str_of(&mut d, ty),
            unit_strindex: str_of(&mut d, unit),
        });
        let mut ss = Vec::new();
        for (frames, v, link) in samples {
            if let Some(&stack_index) = stacks.get(frames) {
                ss.push(Sample {
                    stack_index,
                    values: vec![*v],
                    ..Default::default()
                });
                continue;
            }
            let mut locs = Vec::new();
            for f in frames {
                let name = str_of(&mut d, f);
                let file = str_of(
                    &mut d,
                    if f.starts_with("runtime.") || f.starts_with("sync.") {
                        "/usr/lib/go/src/runtime/x.go"
                    } else if f.starts_with(char::is_uppercase) {
                        // A Java class's method.
                        "Ledger.java"
                    } else {
                        "/src/shop/main.go"
                    },
                );
                d.function_table.push(Function {
                    name_strindex: name,
                    filename_strindex: file,
                    ..Default::default()
                });
                d.location_table.push(Location {
                    lines: vec![Line {
                        function_index: d.function_table.len() as i32 - 1,
                        line: 10,
                        column: 0,
                    }],
                    ..Default::default()
                });
                locs.push(d.location_table.len() as i32 - 1);
            }
            d.stack_table.push(Stack {
                location_indices: locs,
            });
            stacks.insert(frames.clone(), d.stack_table.len() as i32 - 1);
            let link_index = match link {
                Some(b) => {
                    d.link_table.push(Link {
                        trace_id: vec![0; 16],
                        span_id: vec![*b; 8],
                    });
                    d.link_table.len() as i32 - 1
                }
                None => 0,
            };
            ss.push(Sample {
                stack_index: d.stack_table.len() as i32 - 1,
                link_index,
                values: vec![*v],
                ..Default::default()
            });
        }
        out.push(Profile {
            sample_type,
            samples: ss,
            time_unix_nano: 1_000_000_000_000,
            duration_nano: 2_000_000_000,
            ..Default::default()
        });
    }
    ExportProfilesServiceRequest {
        resource_profiles: vec![ResourceProfiles {
            resource: Some(Resource {
                attributes: vec![attr_s("service.name", service)],
                ..Default::default()
            }),
            scope_profiles: vec![ScopeProfiles {
                profiles: out,
                ..Default::default()
            }],
            ..Default::default()
        }],
        dictionary: Some(d),
    }
}

/// A front calling the shop's `GET /{op}`, the shop's server span (byte
/// `tid + 1`) taking `ms`.
fn front_and_shop(tid: u8, op: &str, ms: u64) -> Vec<ResourceSpans> {
    let mut server = span(
        tid,
        tid.wrapping_add(1),
        Some(tid.wrapping_add(2)),
        &format!("GET /{op}"),
        1,
        1 + ms,
        vec![],
    );
    server.kind = span::SpanKind::Server as i32;
    vec![
        resource_spans(
            "front",
            vec![
                span(
                    tid,
                    tid.wrapping_add(3),
                    None,
                    &format!("GET /api/{op}"),
                    0,
                    ms + 2,
                    vec![],
                ),
                span(
                    tid,
                    tid.wrapping_add(2),
                    Some(tid.wrapping_add(3)),
                    "GET",
                    0,
                    ms + 2,
                    vec![attr_s("server.address", "shop")],
                ),
            ],
        ),
        resource_spans("shop", vec![server]),
    ]
}

/// A front calling the shop's `GET /{op}` (trace `tid`, the shop's span
/// `ms` long), analysed after the shop's `profiles`, on the routes'
/// normals (2 ms at the shop): its verdict and its spans, annotated.
async fn shop_with(
    profiles: &[ProfileSpec<'_>],
    tid: u8,
    op: &str,
    ms: u64,
) -> (Verdict, Vec<ResourceSpans>) {
    use prost::Message;
    let st = store();
    st.store.baselines.feed(
        1_000_000_000_000,
        (0..30).flat_map(|_| {
            [
                ("shop", "GET /parse", 2.0),
                ("shop", "GET /symbols", 2.0),
                ("shop", "GET /render", 2.0),
                ("front", "GET /api/parse", 4.0),
                ("front", "GET /api/symbols", 4.0),
                ("front", "GET /api/render", 4.0),
                ("front", "GET", 4.0),
            ]
        }),
    );
    let req = profiles_of("shop", profiles);
    st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
    let mut rs = front_and_shop(tid, op, ms);
    let v = analyse(&st, &mut rs).await.remove(0).1;
    (v, rs)
}

/// Before the shop's operations have a baseline, the code is named by
/// absolute evidence: a function holding the span's own CPU time, a lock
/// whose contentions waited as long as the span was off CPU; with less
/// confidence than once the baseline says the span was slow, and saying so.
#[tokio::test]
async fn before_a_baseline_the_code_is_named_by_absolute_evidence_with_less_confidence() {
    use prost::Message;
    let analysed = |profiles: Vec<ProfileSpec<'static>>, tid: u8, op: &'static str, ms: u64| async move {
        let st = store();
        let req = profiles_of("shop", &profiles);
        st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
        let mut rs = front_and_shop(tid, op, ms);
        analyse(&st, &mut rs).await.remove(0).1
    };
    let hot = vec![(
        "cpu",
        "nanoseconds",
        vec![(
            vec!["main.parseAST", "main.handleParse"],
            280_000_000,
            Some(11),
        )],
    )];
    let v = analysed(hot.clone(), 10, "parse", 300).await;
    assert_eq!(v.best.cause, "cpu_hotspot", "{v:?}");
    assert_eq!(v.culprit_service, "shop");
    assert!(
        v.best.summary.contains("main.parseAST") && v.best.summary.contains("no baseline yet"),
        "{}",
        v.best.summary
    );
    let (learned, _) = shop_with(&hot, 10, "parse", 300).await;
    assert_eq!(learned.best.cause, "cpu_hotspot");
    assert!(!learned.best.summary.contains("no baseline yet"));
    assert!(
        v.best.confidence < learned.best.confidence,
        "{} < {}",
        v.best.confidence,
        learned.best.confidence
    );
    // The lock, by the length of the wait (eight contentions of 200 ms
    // for a span 250 ms off CPU).
    let unlock = vec!["sync.(*Mutex).Unlock", "main.refreshSymbols", "main.loop"];
    let lock = vec![
        (
            "cpu",
            "nanoseconds",
            vec![(vec!["main.parseAST"], 30_000_000, Some(99))],
        ),
        ("contentions", "count", vec![(unlock.clone(), 8, None)]),
        (
            "delay",
            "nanoseconds",
            vec![(unlock.clone(), 1_600_000_000, None)],
        ),
    ];
    let v = analysed(lock.clone(), 50, "symbols", 250).await;
    assert_eq!(v.best.cause, "lock_contention", "{v:?}");
    assert!(
        v.best.summary.contains("main.refreshSymbols"),
        "{}",
        v.best.summary
    );
    // A short span is no cause without a baseline: 40 ms of CPU in a 45 ms
    // span is under `profiles.min_time`.
    let short = vec![(
        "cpu",
        "nanoseconds",
        vec![(vec!["main.parseAST"], 40_000_000, Some(31))],
    )];
    let v = analysed(short, 30, "parse", 45).await;
    assert_ne!(v.best.cause, "cpu_hotspot", "{v:?}");
}

/// The shop's profiles with a span's own little CPU and the contention
/// profiles (contentions, delay) of `stacks`: (stack, contentions, delay
/// in ms), as Go's mutex and block profiles carry them.
fn contended(stacks: &[(&Vec<&'static str>, i64, i64)]) -> Vec<ProfileSpec<'static>> {
    vec![
        (
            "cpu",
            "nanoseconds",
            vec![(vec!["main.parseAST"], 5_000_000, Some(99))],
        ),
        (
            "contentions",
            "count",
            stacks
                .iter()
                .map(|(f, c, _)| ((*f).clone(), *c, None))
                .collect(),
        ),
        (
            "delay",
            "nanoseconds",
            stacks
                .iter()
                .map(|(f, _, ms)| ((*f).clone(), ms * 1_000_000, None))
                .collect(),
        ),
    ]
}

/// Another request's lock, held at random: its contentions in the window
/// are many short waits and a few long ones, so their mean is far below a
/// long waiter's wait. The delay of all of them covering the wait names the
/// holder (one sample can be the span's wait); a delay short of it names
/// nothing.
#[tokio::test]
async fn a_long_wait_among_many_short_ones_is_named_by_the_delay_that_covers_it() {
    let unlock = vec!["sync.(*Mutex).Unlock", "main.repriceTariffs", "main.serve"];
    // Fifty contentions, 1.2 s in all (24 ms on average), a span 400 ms
    // off CPU.
    let (v, _) = shop_with(&contended(&[(&unlock, 50, 1200)]), 60, "symbols", 400).await;
    assert_eq!(v.best.cause, "lock_contention", "{v:?}");
    assert!(
        v.best.summary.contains("main.repriceTariffs")
            && v.best.summary.contains("(1200 ms in all)"),
        "{}",
        v.best.summary
    );
    // Their delay, 300 ms in all, cannot hold a 400 ms wait.
    let (v, _) = shop_with(&contended(&[(&unlock, 50, 300)]), 61, "symbols", 400).await;
    assert_ne!(v.best.cause, "lock_contention", "{v:?}");
}

/// Go's block profile read with its mutex profile: its waits to take a
/// `sync.Mutex` are the waiter's side of the lock the mutex profile charges
/// to the holder (the holder named, the waiter beside it), its waits on a
/// channel are no lock; with the block profile alone, the waiter is named.
#[tokio::test]
async fn the_block_profile_is_the_waiters_side_of_the_mutex_profiles_lock() {
    let unlock = vec!["sync.(*Mutex).Unlock", "main.repriceTariffs", "main.serve"];
    let lock = vec![
        "sync.runtime_SemacquireMutex",
        "internal/sync.(*Mutex).lockSlow",
        "sync.(*Mutex).Lock",
        "main.lookupTariffs",
        "main.serve",
    ];
    let chan = vec!["runtime.chanrecv1", "main.awaitJob", "main.worker"];
    // Both profiles, and the workers' long waits on their channel: the
    // holder is named, the waiter beside it, the channel nowhere.
    let (v, rs) = shop_with(
        &contended(&[(&unlock, 50, 1200), (&lock, 50, 1200), (&chan, 400, 60_000)]),
        70,
        "symbols",
        400,
    )
    .await;
    assert_eq!(v.best.cause, "lock_contention", "{v:?}");
    assert!(
        v.best.summary.contains("main.repriceTariffs")
            && v.best.summary.contains("it waited in main.lookupTariffs"),
        "{}",
        v.best.summary
    );
    let code = code_attributes(&rs);
    assert_eq!(code["rca.code.function"], "main.repriceTariffs", "{code:?}");
    assert_eq!(
        code["rca.code.waiter_function"], "main.lookupTariffs",
        "{code:?}"
    );
    assert_eq!(code["rca.code.waiter_delay_ms"], "1200", "{code:?}");
    // The block profile alone: the function that waited is named...
    let (v, _) = shop_with(
        &contended(&[(&lock, 50, 1200), (&chan, 400, 60_000)]),
        71,
        "symbols",
        400,
    )
    .await;
    assert_eq!(v.best.cause, "lock_contention", "{v:?}");
    assert!(
        v.best.summary.contains("main.lookupTariffs"),
        "{}",
        v.best.summary
    );
    // ...and waits on a channel alone are no lock.
    let (v, _) = shop_with(&contended(&[(&chan, 400, 60_000)]), 72, "symbols", 400).await;
    assert_ne!(v.best.cause, "lock_contention", "{v:?}");
}

#[tokio::test]
async fn the_code_is_the_cause_where_its_profile_covers_a_slow_spans_time() {
    use prost::Message;
    let cpu = |frames: Vec<&'static str>, ms: i64, span: u8| {
        (
            "cpu",
            "nanoseconds",
            vec![(frames, ms * 1_000_000, Some(span))],
        )
    };
    let verdict_of = |v: &Verdict| {
        (
            v.best.cause.clone(),
            v.culprit_service.clone(),
            v.culprit_kind.as_str(),
            v.best.summary.clone(),
        )
    };
    // CPU in the service's own function, on the span's own samples.
    let (v, rs) = shop_with(
        &[cpu(
            vec!["crypto/sha256.block", "main.parseAST", "main.handleParse"],
            280,
            11,
        )],
        10,
        "parse",
        300,
    )
    .await;
    let (cause, service, kind, summary) = verdict_of(&v);
    assert_eq!(
        (cause.as_str(), service.as_str(), kind),
        ("cpu_hotspot", "shop", "code"),
        "{summary}"
    );
    assert!(
        summary.contains("main.parseAST") && summary.contains("span join"),
        "{summary}"
    );
    assert_eq!(code_attributes(&rs)["rca.code.function"], "main.parseAST");
    // On a starved host: on CPU 100 ms of a 300 ms span (the rest in the
    // run queue), 50 times the route's normal: the work grew.
    let (v, rs) = shop_with(&[cpu(vec!["main.parseAST"], 100, 81)], 80, "parse", 300).await;
    let (cause, _, _, summary) = verdict_of(&v);
    assert_eq!(cause, "cpu_hotspot", "{:?}", v);
    assert!(
        summary.contains("on CPU 100 ms of its 300 ms (50× the normal of the whole span"),
        "{summary}"
    );
    assert_eq!(code_attributes(&rs)["rca.code.function"], "main.parseAST");
    // The same third of a span whose normal is longer than its CPU: the
    // work did not grow, its time went elsewhere.
    let st = store();
    st.store.baselines.feed(
        1_000_000_000_000,
        (0..30).flat_map(|_| {
            [
                ("shop", "GET /parse", 60.0),
                ("front", "GET /api/parse", 62.0),
                ("front", "GET", 62.0),
            ]
        }),
    );
    let req = profiles_of("shop", &[cpu(vec!["main.parseAST"], 100, 91)]);
    st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
    let mut rs = front_and_shop(90, "parse", 300);
    let v = analyse(&st, &mut rs).await.remove(0).1;
    assert_ne!(verdict_of(&v).0, "cpu_hotspot", "{:?}", v);
    // The same span at its normal length: its code is no cause.
    let (v, _) = shop_with(&[cpu(vec!["main.parseAST"], 10, 21)], 20, "parse", 5).await;
    assert_eq!(verdict_of(&v).0, "unknown", "{:?}", v);
    // Too little time to say: 40 ms on CPU (four samples at 100 Hz) do not
    // make a hotspot.
    let (v, _) = shop_with(&[cpu(vec!["main.parseAST"], 40, 31)], 30, "parse", 60).await;
    assert_ne!(verdict_of(&v).0, "cpu_hotspot", "{:?}", v);
    // Allocation: the allocator and the collector hold the time, driven by
    // the service's function.
    let (v, _) = shop_with(
        &[(
            "cpu",
            "nanoseconds",
            vec![
                (
                    vec![
                        "runtime.memclrNoHeapPointers",
                        "runtime.mallocgc",
                        "main.renderPage",
                    ],
                    200_000_000,
                    Some(41),
                ),
                (
                    vec![
                        "runtime.gcAssistAlloc",
                        "runtime.mallocgc",
                        "main.renderPage",
                    ],
                    60_000_000,
                    Some(41),
                ),
                (vec!["main.renderPage"], 40_000_000, Some(41)),
            ],
        )],
        40,
        "render",
        320,
    )
    .await;
    let (cause, service, kind, summary) = verdict_of(&v);
    assert_eq!(
        (cause.as_str(), service.as_str(), kind),
        ("gc_pressure", "shop", "code"),
        "{summary}"
    );
    assert!(
        summary.contains("main.renderPage") && summary.contains("87% allocating"),
        "{summary}"
    );
    // A lock: the span's process labels its CPU samples and the span has
    // none (it was off CPU); the mutex profile (no labels, by time) says
    // who held the lock and how long its contentions waited.
    let unlock = vec!["sync.(*Mutex).Unlock", "main.refreshSymbols", "main.loop"];
    let contentions = ("contentions", "count", vec![(unlock.clone(), 8, None)]);
    let delay = (
        "delay",
        "nanoseconds",
        vec![(unlock.clone(), 1_600_000_000, None)],
    );
    let (v, rs) = shop_with(
        &[
            cpu(vec!["main.parseAST"], 30, 99),
            contentions.clone(),
            delay.clone(),
        ],
        50,
        "symbols",
        250,
    )
    .await;
    let (cause, service, kind, summary) = verdict_of(&v);
    assert_eq!(
        (cause.as_str(), service.as_str(), kind),
        ("lock_contention", "shop", "code"),
        "{summary}"
    );
    assert!(
        summary.contains("main.refreshSymbols") && summary.contains("200 ms on average"),
        "{summary}"
    );
    let code = code_attributes(&rs);
    assert_eq!(code["rca.code.function"], "main.refreshSymbols");
    assert_eq!(code["rca.code.kind"], "lock");
    assert_eq!(code["rca.code.join"], "time");
    // The same span with its own CPU samples covering it: not the lock.
    let (v, _) = shop_with(
        &[
            cpu(vec!["main.parseAST"], 240, 61),
            contentions.clone(),
            delay.clone(),
        ],
        60,
        "symbols",
        250,
    )
    .await;
    assert_eq!(verdict_of(&v).0, "cpu_hotspot", "{:?}", v);
    // Half off CPU while allocating, beside a lock's window: its own CPU
    // is mostly the collector's, so its time off CPU is the collector's
    // (an assist parks), not the lock's.
    let (v, _) = shop_with(
        &[
            (
                "cpu",
                "nanoseconds",
                vec![
                    (
                        vec![
                            "runtime.gcAssistAlloc",
                            "runtime.mallocgc",
                            "main.renderPage",
                        ],
                        100_000_000,
                        Some(71),
                    ),
                    (vec!["main.renderPage"], 40_000_000, Some(71)),
                ],
            ),
            contentions.clone(),
            delay.clone(),
        ],
        70,
        "render",
        300,
    )
    .await;
    assert_eq!(verdict_of(&v).0, "gc_pressure", "{:?}", v);
    // On a starved host, the parse's own CPU grew fifty-fold and it was
    // off CPU (in the run queue) more than half its time, beside a lock's
    // window: its work, not the lock.
    let (v, _) = shop_with(
        &[
            cpu(vec!["main.parseAST"], 100, 111),
            contentions.clone(),
            delay.clone(),
        ],
        110,
        "parse",
        300,
    )
    .await;
    assert_eq!(verdict_of(&v).0, "cpu_hotspot", "{:?}", v);
    // No profile: the slow callee is named as before.
    let (v, _) = shop_with(&[], 100, "parse", 300).await;
    assert_eq!(verdict_of(&v).0, "slow_dependency", "{:?}", v);
}

/// async-profiler's samples converted by its own converter (`jfrconv -o
/// otlp`): no links; each sample names its thread (`[name tid=N]`) and has
/// a timestamp per event, with no values (a count of 1 each, a CPU sample
/// every period) or one per event (a lock's wait, ns). `spec`: per
/// profile its type, unit, period (ns; 0 for none) and samples (frames leaf
/// first, thread, event times in ms after 1000 s, values).
type JfrSpec<'a> = (
    &'a str,
    &'a str,
    i64,
    Vec<(Vec<&'a str>, &'a str, Vec<u64>, Vec<i64>)>,
);
fn jfr_profiles(
    service: &str,
    spec: &[JfrSpec<'_>],
) -> opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest {
    use opentelemetry_proto::tonic::profiles::v1development::{KeyValueAndUnit, ValueType};
    let shape: Vec<ProfileSpec<'_>> = spec
        .iter()
        .map(|(ty, unit, _, samples)| {
            (
                *ty,
                *unit,
                samples.iter().map(|(f, ..)| (f.clone(), 0, None)).collect(),
            )
        })
        .collect();
    let mut req = profiles_of(service, &shape);
    let d = req.dictionary.as_mut().unwrap();
    let idx = |d: &mut opentelemetry_proto::tonic::profiles::v1development::ProfilesDictionary,
               x: &str| {
        d.string_table.push(x.to_string());
        d.string_table.len() as i32 - 1
    };
    d.attribute_table = vec![Default::default()];
    let key = idx(d, "thread.name");
    let (cpu, ns) = (idx(d, "cpu"), idx(d, "nanoseconds"));
    for (p, (_, _, period, samples)) in req.resource_profiles[0].scope_profiles[0]
        .profiles
        .iter_mut()
        .zip(spec)
    {
        if *period > 0 {
            p.period = *period;
            p.period_type = Some(ValueType {
                type_strindex: cpu,
                unit_strindex: ns,
            });
        }
        for (x, (_, thread, at, values)) in p.samples.iter_mut().zip(samples) {
            d.attribute_table.push(KeyValueAndUnit {
                key_strindex: key,
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(format!(
                        "[{thread} tid=4242]"
                    ))),
                }),
                ..Default::default()
            });
            x.attribute_indices = vec![d.attribute_table.len() as i32 - 1];
            x.timestamps_unix_nano = at
                .iter()
                .map(|ms| 1_000_000_000_000 + ms * 1_000_000)
                .collect();
            x.values = values.clone();
        }
    }
    req
}

#[tokio::test]
async fn a_jvms_samples_join_a_span_by_its_thread_and_time() {
    use prost::Message;
    let st_of = || {
        let st = store();
        st.store.baselines.feed(
            1_000_000_000_000,
            (0..30).flat_map(|_| {
                [
                    ("ledger", "GET /parse", 2.0),
                    ("ledger", "GET /symbols", 2.0),
                    ("front", "GET /api/parse", 4.0),
                    ("front", "GET /api/symbols", 4.0),
                    ("front", "GET", 4.0),
                ]
            }),
        );
        st
    };
    // The ledger's server span on its pool's thread 3 (the Java agent's
    // `thread.name`).
    let on_thread = |tid: u8, op: &str, ms: u64| {
        let mut rs = front_and_shop(tid, op, ms);
        rs[1].resource.as_mut().unwrap().attributes = vec![attr_s("service.name", "ledger")];
        rs[1].scope_spans[0].spans[0]
            .attributes
            .push(attr_s("thread.name", "pool-1-thread-3"));
        rs
    };
    let every = |from: u64, to: u64, step: u64| (from..to).step_by(step as usize).collect();
    // CPU: thread 3 in parseAst within the span (25 samples, 10 ms each);
    // thread 4 rendering at the same time, and thread 3 after the span,
    // are not its.
    let st = st_of();
    let req = jfr_profiles(
        "ledger",
        &[(
            "cpu",
            "count",
            10_000_000,
            vec![
                (
                    vec!["Ledger.parseAst", "Ledger.handle"],
                    "pool-1-thread-3",
                    every(20, 270, 10),
                    vec![],
                ),
                (
                    vec!["Ledger.renderPage", "Ledger.handle"],
                    "pool-1-thread-4",
                    every(5, 300, 5),
                    vec![],
                ),
                (
                    vec!["Ledger.renderPage", "Ledger.handle"],
                    "pool-1-thread-3",
                    every(320, 900, 5),
                    vec![],
                ),
            ],
        )],
    );
    st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
    let mut rs = on_thread(10, "parse", 300);
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(
        (
            v.best.cause.as_str(),
            v.culprit_service.as_str(),
            v.culprit_kind.as_str()
        ),
        ("cpu_hotspot", "ledger", "code"),
        "{}",
        v.best.summary
    );
    assert!(
        v.best.summary.contains("on CPU 250 ms of its 300 ms"),
        "{}",
        v.best.summary
    );
    let code = code_attributes(&rs);
    assert_eq!(code["rca.code.function"], "Ledger.parseAst");
    assert_eq!(code["rca.code.join"], "thread");
    assert_eq!(code["rca.code.share"], "1");
    // A lock: thread 3 waited 200 ms entering the monitor in lookupSymbols
    // (one event, its wait as its value) and was on CPU 20 ms; thread 4's
    // long waits at the same time are not its.
    let st = st_of();
    let req = jfr_profiles(
        "ledger",
        &[
            (
                "cpu",
                "count",
                10_000_000,
                vec![(
                    vec!["Ledger.parseAst", "Ledger.lookupSymbols"],
                    "pool-1-thread-3",
                    vec![230, 240],
                    vec![],
                )],
            ),
            (
                "locks",
                "nanoseconds",
                0,
                vec![
                    (
                        vec!["Ledger.lookupSymbols", "Ledger.handle"],
                        "pool-1-thread-3",
                        vec![25],
                        vec![200_000_000],
                    ),
                    (
                        vec!["Ledger.refreshSymbols", "Ledger.loop"],
                        "pool-1-thread-4",
                        vec![10, 30],
                        vec![900_000_000, 900_000_000],
                    ),
                ],
            ),
        ],
    );
    st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
    let mut rs = on_thread(20, "symbols", 250);
    let out = analyse(&st, &mut rs).await;
    let v = &out[0].1;
    assert_eq!(
        (
            v.best.cause.as_str(),
            v.culprit_service.as_str(),
            v.culprit_kind.as_str()
        ),
        ("lock_contention", "ledger", "code"),
        "{}",
        v.best.summary
    );
    assert!(
        v.best.summary.contains("waited 200 ms on average")
            && v.best.summary.contains("at Ledger.lookupSymbols"),
        "{}",
        v.best.summary
    );
    let code = code_attributes(&rs);
    assert_eq!(code["rca.code.join"], "thread");
    assert_eq!(code["rca.code.kind"], "lock");
    // The span's thread had no samples in its time: it was off CPU, and no
    // other thread's samples are its (no cause of its code).
    let st = st_of();
    let req = jfr_profiles(
        "ledger",
        &[(
            "cpu",
            "count",
            10_000_000,
            vec![(
                vec!["Ledger.parseAst"],
                "pool-1-thread-4",
                every(5, 300, 5),
                vec![],
            )],
        )],
    );
    st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
    let mut rs = on_thread(30, "parse", 300);
    let out = analyse(&st, &mut rs).await;
    assert_ne!(out[0].1.best.cause, "cpu_hotspot", "{:?}", out[0].1);
    assert!(
        code_attributes(&rs).is_empty(),
        "{:?}",
        code_attributes(&rs)
    );
}

#[tokio::test]
async fn a_slow_dependencys_verdict_stays_and_gains_the_code_only_where_it_explains_the_time() {
    use prost::Message;
    let st = store();
    st.store.baselines.feed(
        1_000_000_000_000,
        (0..30).flat_map(|_| {
            [
                ("shop", "GET /parse", 2.0),
                ("front", "GET /api/parse", 4.0),
                ("front", "GET", 4.0),
            ]
        }),
    );
    // 20 ms of CPU in a 300 ms span: the profile does not explain it.
    let req = profiles_of(
        "shop",
        &[(
            "cpu",
            "nanoseconds",
            vec![(vec!["main.parseAST"], 20_000_000, Some(11))],
        )],
    );
    st.add_profiles(&req, req.encoded_len(), 1_001_000_000_000);
    let mut rs = front_and_shop(10, "parse", 300);
    let out = analyse(&st, &mut rs).await;
    assert_eq!(out[0].1.best.cause, "slow_dependency", "{:?}", out[0].1);
    assert!(
        code_attributes(&rs).is_empty(),
        "{:?}",
        code_attributes(&rs)
    );
}

/// llama.cpp's `/metrics` (counters and gauges as the `prometheus`
/// receiver keeps them) of one server at `instance`: `(t_ms, prompt tokens
/// processed, cached, prompt seconds, tokens predicted, predict seconds,
/// deferred)` per scrape.
fn llama_scrapes(
    instance: &str,
    points: &[(u64, f64, f64, f64, f64, f64, f64)],
) -> Vec<ResourceMetrics> {
    let mut rms = Vec::new();
    for &(t, prompt, cached, prompt_s, predicted, predicted_s, deferred) in points {
        for (name, v) in [
            ("llamacpp:prompt_tokens_total", prompt),
            ("llamacpp:prompt_tokens_cached_total", cached),
            ("llamacpp:prompt_seconds_total", prompt_s),
            ("llamacpp:tokens_predicted_total", predicted),
            ("llamacpp:tokens_predicted_seconds_total", predicted_s),
            ("llamacpp:requests_deferred", deferred),
            // Two slots busy while some wait, one otherwise.
            (
                "llamacpp:requests_processing",
                if deferred > 0.0 { 2.0 } else { 1.0 },
            ),
        ] {
            rms.push(scraped("llama-server", instance, name, &[], v, t));
        }
    }
    rms
}

/// A chat call through the OpenAI instrumentation to llama.cpp at `port`,
/// inside `POST /assist`: its tokens as the instrumentation writes them.
fn llama_call(id: u8, port: i64, (input, output): (i64, i64), ms: u64) -> ResourceSpans {
    resource_spans(
        "assistant",
        tid(
            id,
            vec![
                sp(1, None, "POST /assist", Server, 0, ms + 20),
                with(
                    sp(2, Some(1), "chat tiny", Client, 10, 10 + ms),
                    vec![
                        attr_s("gen_ai.operation.name", "chat"),
                        attr_s("gen_ai.request.model", "tiny"),
                        attr_s("gen_ai.provider.name", "openai"),
                        attr_s("server.address", "127.0.0.1"),
                        kv("server.port", port),
                        kv("gen_ai.usage.input_tokens", input),
                        kv("gen_ai.usage.output_tokens", output),
                    ],
                ),
            ],
        ),
    )
}

/// llama.cpp writes no spans: a call's wait for a slot, its prefill and its
/// decode are read from the client's tokens against the server's own rates
/// over the call, and each names its cause with the numbers.
#[tokio::test]
async fn a_llama_cpp_calls_wait_prefill_and_decode_come_from_its_counters_and_the_tokens() {
    let st = store();
    let mut rms = Vec::new();
    // :8080, slots full: 100 of 2000 prompt tokens processed at 0.1 ms,
    // 64 generated at 4 ms, four requests deferred.
    rms.extend(llama_scrapes(
        "127.0.0.1:8080",
        &[
            (0, 5000.0, 9000.0, 0.5, 400.0, 1.6, 0.0),
            (500, 5050.0, 9950.0, 0.505, 432.0, 1.728, 4.0),
            (1000, 5100.0, 10900.0, 0.51, 464.0, 1.856, 0.0),
        ],
    ));
    // :8081, the prefix broken: 2000 tokens processed, none cached.
    rms.extend(llama_scrapes(
        "127.0.0.1:8081",
        &[
            (0, 5000.0, 9000.0, 0.5, 400.0, 1.6, 0.0),
            (1000, 7000.0, 9000.0, 0.7, 416.0, 1.664, 0.0),
        ],
    ));
    // :8082, one long prompt: 9000 tokens in 3 s.
    rms.extend(llama_scrapes(
        "127.0.0.1:8082",
        &[
            (0, 5000.0, 9000.0, 0.5, 400.0, 1.6, 0.0),
            (3500, 14000.0, 9001.0, 3.5, 416.0, 1.664, 0.0),
        ],
    ));
    // :8083, healthy: 95% of the prompt cached.
    rms.extend(llama_scrapes(
        "127.0.0.1:8083",
        &[
            (0, 5000.0, 9000.0, 0.5, 400.0, 1.6, 0.0),
            (1000, 5100.0, 10900.0, 0.51, 416.0, 1.664, 0.0),
        ],
    ));
    // :8084, a neighbour's miss around a quick call: the server processed
    // 2000 tokens meanwhile, but the call had no time to prefill them.
    rms.extend(llama_scrapes(
        "127.0.0.1:8084",
        &[
            (0, 5000.0, 9000.0, 0.5, 400.0, 1.6, 0.0),
            (1000, 7000.0, 9000.0, 0.7, 432.0, 1.728, 0.0),
        ],
    ));
    // :8085, a miss that ended as a burst of cached prompts began: the
    // scrape after it shows the burst's queue, none while it ran.
    rms.extend(llama_scrapes(
        "127.0.0.1:8085",
        &[
            (0, 5000.0, 9000.0, 0.5, 400.0, 1.6, 0.0),
            (1000, 7200.0, 12800.0, 0.72, 432.0, 1.728, 4.0),
        ],
    ));
    st.add_metrics(&rms, 1_000_000_000_000 + 4_000_000_000);
    let mut rs = vec![
        llama_call(107, 8085, (2000, 16), 300),
        llama_call(101, 8080, (2000, 64), 900),
        llama_call(102, 8081, (2000, 16), 300),
        llama_call(103, 8082, (9000, 16), 3300),
        llama_call(104, 8083, (2000, 16), 100),
        llama_call(105, 8084, (2000, 16), 110),
        // A streaming client that measured its time to first chunk (the
        // conventions' attribute): that, not the estimate, is what came
        // before the first token.
        {
            let mut r = llama_call(106, 8080, (2000, 64), 900);
            r.scope_spans[0].spans[1]
                .attributes
                .push(kv("gen_ai.response.time_to_first_chunk", 0.7f64));
            r
        },
    ];
    let out = analyse(&st, &mut rs).await;
    let v = |id: u8| {
        out.iter()
            .find(|(t, _)| t.id == [id; 16])
            .map(|(_, v)| v.clone())
            .expect("analysed")
    };
    let queued = v(101);
    assert_eq!(queued.best.cause, "inference_queueing", "{queued:?}");
    assert_eq!(queued.culprit_service, "llama-server", "{queued:?}");
    assert_eq!(queued.culprit_kind.as_str(), "dependency", "{queued:?}");
    for part in [
        "waited ~634 ms of 900 ms for a slot",
        "llamacpp:requests_deferred 4",
        "prefill ~10 ms (~100 of 2000 prompt tokens not cached)",
        "decode ~256 ms (64 tokens, 4.0 ms each)",
    ] {
        assert!(
            queued.best.summary.contains(part),
            "{part}: {}",
            queued.best.summary
        );
    }
    let streamed = v(106);
    assert_eq!(streamed.best.cause, "inference_queueing", "{streamed:?}");
    assert!(
        streamed
            .best
            .summary
            .contains("first token after 700 ms; waited ~690 ms, prefill ~10 ms"),
        "{}",
        streamed.best.summary
    );
    let missed = v(102);
    assert_eq!(missed.best.cause, "cache_miss_fallback", "{missed:?}");
    assert_eq!(missed.culprit_service, "llama-server", "{missed:?}");
    assert!(
        missed
            .best
            .summary
            .contains("served 0 of 2000 prompt tokens (0% of all prompt tokens meanwhile")
            && missed
                .best
                .summary
                .contains("recomputed them in ~236 ms of 300 ms"),
        "{}",
        missed.best.summary
    );
    let before_burst = v(107);
    assert_eq!(
        before_burst.best.cause, "cache_miss_fallback",
        "{before_burst:?}"
    );
    let long = v(103);
    assert_eq!(long.best.cause, "long_prompt", "{long:?}");
    assert_eq!(long.culprit_service, "assistant", "{long:?}");
    assert!(
        long.best.summary.contains(
            "a prompt of 9000 tokens to tiny (over 8192): prefill took ~3236 ms of 3300 ms"
        ),
        "{}",
        long.best.summary
    );
    // Healthy: no llama.cpp cause (no baseline yet here: the fallback).
    for id in [104, 105] {
        let healthy = v(id);
        assert_eq!(healthy.best.cause, "slow_dependency", "{healthy:?}");
        assert!(healthy.alternatives.is_empty(), "{healthy:?}");
    }
}

/// A host's CPU readings at `(t_ns, idle)`.
fn cpu_idle(host: &str, points: &[(u64, f64)]) -> ResourceMetrics {
    ResourceMetrics {
        resource: Some(Resource {
            attributes: vec![attr_s("host.name", host)],
            ..Default::default()
        }),
        scope_metrics: vec![ScopeMetrics {
            metrics: vec![Metric {
                name: "system.cpu.utilization".into(),
                data: Some(metric::Data::Gauge(
                    opentelemetry_proto::tonic::metrics::v1::Gauge {
                        data_points: points
                            .iter()
                            .map(|&(t, v)| NumberDataPoint {
                                attributes: vec![attr_s("cpu.mode", "idle")],
                                time_unix_nano: t,
                                value: Some(number_data_point::Value::AsDouble(v)),
                                ..Default::default()
                            })
                            .collect(),
                    },
                )),
                ..Default::default()
            }],
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// A host's pressure is read over the trace (the readings during it and
/// the first after it): a hog that ended a minute before a request did not
/// slow it, one that ran through it did (found by the LLM bed's long run,
/// where a slot queue after a hog was called the host's saturation).
#[tokio::test]
async fn a_hosts_cpu_is_read_over_the_trace_not_the_minute_before() {
    let st = store();
    let t0 = 1_000_000_000_000u64;
    let s = 1_000_000_000u64;
    st.add_metrics(
        &[
            // Read every 10 s: saturated until 50 s before the trace, calm
            // since.
            cpu_idle(
                "node-8",
                &[
                    (t0 - 60 * s, 0.0),
                    (t0 - 50 * s, 0.0),
                    (t0 - 40 * s, 0.6),
                    (t0 - 30 * s, 0.6),
                    (t0 - 20 * s, 0.6),
                    (t0 - 10 * s, 0.6),
                    (t0 + 5 * s, 0.6),
                ],
            ),
            // Calm before, saturated over it.
            cpu_idle(
                "node-9",
                &[(t0 - 60 * s, 0.6), (t0 - 50 * s, 0.6), (t0 + 5 * s, 0.0)],
            ),
        ],
        t0 + 5 * s,
    );
    let on = |host: &str, id: u8| ResourceSpans {
        resource: Some(Resource {
            attributes: vec![attr_s("service.name", "pricing"), attr_s("host.name", host)],
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans: tid(id, vec![sp(1, None, "GET /price", Server, 0, 900)]),
            ..Default::default()
        }],
        ..Default::default()
    };
    let mut rs = vec![on("node-8", 65), on("node-9", 66)];
    let out = analyse(&st, &mut rs).await;
    let cause = |id: u8| {
        out.iter()
            .find(|(t, _)| t.id == [id; 16])
            .map(|(_, v)| v.best.cause.clone())
            .expect("analysed")
    };
    assert_ne!(cause(65), "host_cpu_saturation");
    assert_eq!(cause(66), "host_cpu_saturation");
}

/// The README's wiring: `tail_sampling` keeping the slow (latency over
/// 1 s), then `correlate`. Thirty ordinary requests (a 100 ms report) are
/// not kept; the one slow request (1.5 s) is. The baseline of the report
/// comes from the requests that were not kept: the slow one is measured
/// against its normal. With the learning off, the kept share alone has no
/// baseline to offer.
#[tokio::test]
async fn behind_a_sampler_the_baselines_learn_from_the_traces_it_did_not_keep() {
    use crate::tail_sampling::{config::TailSamplingConfig, TailSampling};
    use causeway_core::component::{PipelineInfo, Processor, ProcessorFactory, ServiceInfo};
    let trace = front_and_reports;
    for (per_second, learned) in [(20_000usize, true), (0, false)] {
        let shared = causeway_core::shared::Shared::default();
        shared.get_or_init(causeway_core::component::SERVICE_KEY, || ServiceInfo {
            pipelines: vec![PipelineInfo {
                id: "traces".into(),
                processors: vec!["tail_sampling".into(), "correlate".into()],
                ..Default::default()
            }],
            ..Default::default()
        });
        let telemetry = causeway_core::telemetry::Registry::new();
        let ctx = BuildContext {
            id: "correlate".parse().unwrap(),
            telemetry: telemetry.clone(),
            shared: shared.clone(),
            pipeline_signals: SignalSet::ALL,
        };
        let cfg: serde_yaml::Value = serde_yaml::from_str(&format!(
            "evidence_wait: 0s\nbaseline: {{ unkept_spans_per_second: {per_second} }}"
        ))
        .unwrap();
        let mut correlate = CorrelateFactory.build(ctx, &cfg).await.unwrap();
        let sampling: TailSamplingConfig = decode(
            &serde_yaml::from_str(
                "decision_wait: 1s\npolicies: [{ name: slow, type: latency, latency: { threshold_ms: 1000 } }]",
            )
            .unwrap(),
        )
        .unwrap();
        let mut sampler =
            TailSampling::with_shared(sampling, "tail_sampling", &telemetry, shared.clone())
                .unwrap();
        let mut input: Vec<ResourceSpans> = (1..=30u8).flat_map(|id| trace(id, 100)).collect();
        input.extend(trace(99, 1500));
        let mut kept = Vec::new();
        sampler
            .process(Batch::from_traces(input), &mut kept)
            .await
            .unwrap();
        let later = Instant::now() + Duration::from_secs(5);
        sampler.on_tick(later, &mut kept).await.unwrap();
        sampler
            .on_tick(later + Duration::from_secs(5), &mut kept)
            .await
            .unwrap();
        let mut analysed = Vec::new();
        for b in kept {
            correlate.process(b, &mut analysed).await.unwrap();
        }
        let verdicts: Vec<_> = analysed
            .iter_mut()
            .flat_map(root_attrs)
            .filter(|a| a.contains_key("rca.cause"))
            .collect();
        assert_eq!(
            verdicts.len(),
            1,
            "the slow trace alone is kept: {verdicts:?}"
        );
        let v = &verdicts[0];
        assert_eq!(v["rca.cause"], "slow_dependency", "{v:?}");
        assert_eq!(v["rca.culprit.service"], "reports", "{v:?}");
        let summary = &v["rca.summary"];
        assert_eq!(summary.contains("normally"), learned, "{summary}");
        assert_eq!(summary.contains("no baseline yet"), !learned, "{summary}");
    }
}

/// Profiles flow for the shop, but the window covering a kept trace's
/// spans ends after them: the trace waits for it (out of the batch), and
/// is analysed with it once it arrives; a window that never comes holds
/// it no longer than `profiles.wait`.
#[tokio::test]
async fn a_kept_trace_waits_for_the_profile_window_that_covers_its_spans() {
    use causeway_core::component::ProcessorFactory;
    use prost::Message;
    let build = |wait: &str| {
        let shared = causeway_core::shared::Shared::default();
        let ctx = BuildContext {
            id: "correlate".parse().unwrap(),
            telemetry: causeway_core::telemetry::Registry::new(),
            shared: shared.clone(),
            pipeline_signals: SignalSet::ALL,
        };
        let cfg: serde_yaml::Value =
            serde_yaml::from_str(&format!("profiles: {{ wait: {wait} }}")).unwrap();
        async move {
            let p = CorrelateFactory.build(ctx, &cfg).await.unwrap();
            let c = shared
                .slot::<Correlation>("correlate")
                .get()
                .cloned()
                .unwrap();
            (p, c)
        }
    };
    // The request ran five seconds ago (its spans moved to now).
    let t0 = now_ns() - 5_000_000_000;
    let trace = |tid: u8, t0: u64| {
        let mut rs = front_and_shop(tid, "parse", 300);
        for sp in rs
            .iter_mut()
            .flat_map(|r| r.scope_spans.iter_mut())
            .flat_map(|s| s.spans.iter_mut())
        {
            sp.start_time_unix_nano += t0 - 1_000_000_000_000;
            sp.end_time_unix_nano += t0 - 1_000_000_000_000;
        }
        Batch::from_traces(rs)
    };
    let window = |from: u64, samples: Vec<(Vec<&'static str>, i64, Option<u8>)>| {
        let mut req = profiles_of("shop", &[("cpu", "nanoseconds", samples)]);
        for p in req
            .resource_profiles
            .iter_mut()
            .flat_map(|r| r.scope_profiles.iter_mut())
            .flat_map(|s| s.profiles.iter_mut())
        {
            p.time_unix_nano = from;
            p.duration_nano = 15_000_000_000;
        }
        req
    };
    let second = Duration::from_secs(1);
    let (mut p, c) = build("20s").await;
    // The window before the request: the shop's profiles flow.
    let before = window(
        t0 - 20 * 1_000_000_000,
        vec![(vec!["main.idle"], 10_000_000, None)],
    );
    c.add_profiles(&before, before.encoded_len(), now_ns());
    let mut out = Vec::new();
    let traces_of = |out: &mut Vec<Batch>| -> Vec<Batch> {
        let (t, _): (Vec<Batch>, Vec<Batch>) = std::mem::take(out)
            .into_iter()
            .partition(|b| b.signal() == Signal::Traces);
        t
    };
    p.process(trace(10, t0), &mut out).await.unwrap();
    assert!(
        traces_of(&mut out).is_empty(),
        "held for the window that covers it"
    );
    p.on_tick(Instant::now() + second + second / 2, &mut out)
        .await
        .unwrap();
    assert!(traces_of(&mut out).is_empty(), "still waiting");
    // The window covering it arrives.
    let covering = window(
        t0 - 1_000_000_000,
        vec![(
            vec!["main.parseAST", "main.handleParse"],
            280_000_000,
            Some(11),
        )],
    );
    c.add_profiles(&covering, covering.encoded_len(), now_ns());
    p.on_tick(Instant::now() + 3 * second, &mut out)
        .await
        .unwrap();
    let mut out = traces_of(&mut out);
    assert_eq!(out.len(), 1, "analysed once its window arrived");
    let rs = out[0].traces_mut().unwrap().unwrap().clone();
    let attrs = root_attrs(&mut out[0]);
    let root = attrs.iter().find(|a| a.contains_key("rca.cause")).unwrap();
    assert_eq!(root["rca.cause"], "cpu_hotspot", "{root:?}");
    assert_eq!(code_attributes(&rs)["rca.code.function"], "main.parseAST");
    // A window that never comes: held no longer than `profiles.wait` (a
    // request a second ago, the shop's last window ending as it began).
    let (mut p, c) = build("4s").await;
    let t1 = now_ns() - 1_000_000_000;
    let before = window(
        t1 - 15 * 1_000_000_000,
        vec![(vec!["main.idle"], 10_000_000, None)],
    );
    c.add_profiles(&before, before.encoded_len(), now_ns());
    let mut out = Vec::new();
    p.process(trace(20, t1), &mut out).await.unwrap();
    assert!(traces_of(&mut out).is_empty());
    p.on_tick(Instant::now() + second + second / 2, &mut out)
        .await
        .unwrap();
    assert!(traces_of(&mut out).is_empty(), "within the bound");
    p.on_tick(Instant::now() + 5 * second, &mut out)
        .await
        .unwrap();
    let mut out = traces_of(&mut out);
    assert_eq!(out.len(), 1, "the bound passed");
    let attrs = root_attrs(&mut out[0]);
    let root = attrs.iter().find(|a| a.contains_key("rca.cause")).unwrap();
    assert_ne!(root["rca.cause"], "cpu_hotspot", "{root:?}");
    // Without profiles flowing, nothing waits.
    let (mut p, _) = build("20s").await;
    let mut out = Vec::new();
    p.process(trace(30, t0), &mut out).await.unwrap();
    assert_eq!(traces_of(&mut out).len(), 1);
    // An idle service's recording (no sample in it, as async-profiler's
    // JFR of a JVM doing nothing) still says its profiles flow and how
    // far: a trace after it waits for the next.
    let (mut p, c) = build("20s").await;
    let t2 = now_ns() - 1_000_000_000;
    let idle = window(t2 - 16 * 1_000_000_000, vec![]);
    c.add_profiles(&idle, idle.encoded_len(), now_ns());
    let mut out = Vec::new();
    p.process(trace(40, t2), &mut out).await.unwrap();
    assert!(traces_of(&mut out).is_empty(), "held after an idle window");
}

/// A callee's SDK exports its spans seconds after the caller's root (a
/// batch every 5 s): a kept trace whose call to an instrumented service
/// has no span of that service yet waits for it (`callee_wait`), is
/// analysed whole once it comes, and no longer than the bound when it
/// never does.
#[tokio::test]
async fn a_kept_trace_waits_for_the_spans_of_an_instrumented_callee() {
    use causeway_core::component::ProcessorFactory;
    let ctx = BuildContext {
        id: "correlate".parse().unwrap(),
        telemetry: causeway_core::telemetry::Registry::new(),
        shared: Default::default(),
        pipeline_signals: SignalSet::only(Signal::Traces),
    };
    let mut p = CorrelateFactory
        .build(ctx, &serde_yaml::Value::Null)
        .await
        .unwrap();
    let traces_of = |out: &mut Vec<Batch>| -> Vec<Batch> {
        std::mem::take(out)
            .into_iter()
            .filter(|b| b.signal() == Signal::Traces)
            .collect()
    };
    let mut out = Vec::new();
    // A whole trace: the reports service is seen answering at `reports`.
    p.process(Batch::from_traces(front_and_reports(1, 10)), &mut out)
        .await
        .unwrap();
    assert_eq!(traces_of(&mut out).len(), 1, "complete: analysed at once");
    // The caller's spans first; the callee's come later.
    let mut slow = front_and_reports(2, 1500);
    let callee = slow.pop().unwrap();
    p.process(Batch::from_traces(slow), &mut out).await.unwrap();
    assert!(
        traces_of(&mut out).is_empty(),
        "waiting for the callee's spans"
    );
    p.process(Batch::from_traces(vec![callee]), &mut out)
        .await
        .unwrap();
    assert!(traces_of(&mut out).is_empty(), "joined to the held trace");
    p.on_tick(Instant::now() + Duration::from_secs(2), &mut out)
        .await
        .unwrap();
    let mut got = traces_of(&mut out);
    assert_eq!(got.len(), 1);
    let attrs = root_attrs(&mut got[0]);
    let root = attrs.iter().find(|a| a.contains_key("rca.cause")).unwrap();
    assert_eq!(root["rca.cause"], "slow_dependency", "{root:?}");
    assert_eq!(root["rca.culprit.service"], "reports", "{root:?}");
    // A callee whose spans never come: analysed once the bound passed.
    let mut lone = front_and_reports(3, 1500);
    lone.pop();
    p.process(Batch::from_traces(lone), &mut out).await.unwrap();
    assert!(traces_of(&mut out).is_empty());
    p.on_tick(Instant::now() + Duration::from_secs(2), &mut out)
        .await
        .unwrap();
    assert!(traces_of(&mut out).is_empty(), "within callee_wait");
    p.on_tick(Instant::now() + Duration::from_secs(7), &mut out)
        .await
        .unwrap();
    assert_eq!(traces_of(&mut out).len(), 1, "the bound passed");
}

/// What a sampler hands on is bounded and checked: a learner takes spans
/// up to its budget a second (the rest counted, not learned), and a request
/// that does not decode is counted and learned from not at all, the
/// learner going on with the next.
#[test]
fn the_unkept_learner_keeps_to_its_budget_and_counts_bad_input() {
    use crate::correlate::stage::unkept::{Learn, UnkeptSpans};
    use crate::unkept::Learner;
    use prost::Message;
    let st = store();
    let reg = causeway_core::telemetry::Registry::new();
    let learn = Learn::new(st.clone(), RouteMap::default(), 5, (&reg, "c"));
    let count = |outcome: &str| {
        reg.counter(UnkeptSpans, &[("component", "c"), ("outcome", outcome)])
            .get()
    };
    // Within one second (tried again if a second began in between).
    let second = || now_ns() / 1_000_000_000;
    loop {
        let at = second();
        let fresh = Learn::new(st.clone(), RouteMap::default(), 5, (&reg, "c"));
        let (first, again) = (fresh.wants(3), fresh.wants(3));
        if second() != at {
            continue;
        }
        assert!(first && !again, "3 + 3 spans over a budget of 5");
        break;
    }
    assert!(count("over_budget") >= 3);
    learn.learn(bytes::Bytes::from_static(b"\xff\xff not a request"));
    assert_eq!(count("bad_input"), 1);
    assert_eq!(count("learned"), 0);
    let good = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
        resource_spans: front_and_reports(7, 100),
    };
    learn.learn(bytes::Bytes::from(good.encode_to_vec()));
    assert_eq!(count("learned"), 3);
    assert_eq!(count("bad_input"), 1);
}

/// The README's list of the tables the rules read is the one their
/// declarations make, and every source's column says what it holds: a
/// column added, renamed or documented changes the list, and a stale
/// README fails here (`CAUSEWAY_BLESS=1 cargo test -p causeway-processors
/// tables_reference` rewrites it).
#[test]
fn tables_reference_in_the_readme_is_current() {
    let cfg: CorrelateConfig = serde_yaml::from_str("{}").unwrap();
    let sources = crate::correlate::registry::sources(&cfg);
    for t in sources.about() {
        for (name, _, doc) in &t.columns {
            assert!(
                !doc.is_empty(),
                "{}.{name} does not say what it holds",
                t.name
            );
        }
    }
    let want = format!("\n{}\n", rules::reference(&sources));
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/correlate/README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (open, close) = ("<!-- tables -->\n", "<!-- /tables -->");
    let from = readme.find(open).expect("the README's tables marker") + open.len();
    let to = readme.find(close).expect("the README's tables end marker");
    if readme[from..to] == want {
        return;
    }
    if std::env::var_os("CAUSEWAY_BLESS").is_some() {
        let fresh = format!("{}{want}{}", &readme[..from], &readme[to..]);
        std::fs::write(&path, fresh).unwrap();
        return;
    }
    panic!(
        "src/correlate/README.md's table list is stale: run \
         `CAUSEWAY_BLESS=1 cargo test -p causeway-processors tables_reference`"
    );
}

/// A user's rule reads the error ratio of the trace's route at the
/// gateway (`route_stats.error_ratio`): 6 of its 10 answers were 503.
#[tokio::test]
async fn a_users_rule_reads_the_error_ratio_of_the_traces_route() {
    let st = store();
    for i in 0..10u8 {
        let status = if i < 6 { 503 } else { 200 };
        st.add_logs(&[gateway_log(100 + i, status, vec![])], 1_000_000_000_000);
    }
    let rs = vec![resource_spans(
        "api",
        vec![span(100, 1, None, "POST /orders", 0, 100, vec![])],
    )];
    let (traces, tables) = join_all(&st, &rs);
    let rule = Rule {
        name: "route_errors".into(),
        cause: "upstream_unavailable".into(),
        sql: "SELECT trace_id, 0.9 AS confidence, concat('route ', route, ' answered ', \
              CAST(CAST(round(error_ratio * 100) AS BIGINT) AS VARCHAR), '% 5xx') AS summary \
              FROM route_stats WHERE error_ratio >= 0.5"
            .into(),
        user: true,
        described: None,
    };
    let (findings, errors) = rules::Planner::new(&st.sources.tables())
        .evaluate(&[rule], &traces, tables)
        .await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(
        findings[&traces[0].trace_id][0].summary,
        "route order-create answered 60% 5xx"
    );
}

use super::*;
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
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

fn store() -> Arc<Store> {
    Arc::new(Store::new(Limits {
        window_ns: 600_000_000_000,
        max_log_records: 1000,
        max_series: 1000,
        max_points: 64,
        max_routes: 100,
        max_events: 100,
    }))
}

async fn analyse(store: &Store, rs: &mut [ResourceSpans]) -> Vec<(TraceRow, Verdict)> {
    let mut traces = features::traces(rs);
    features::join(
        &mut traces,
        store,
        u64::MAX / 4,
        u64::MAX / 4,
        1_000_000_000_000,
    );
    let (findings, errors) = rules::evaluate(&rules::assemble(true, &[]), &traces).await;
    assert!(errors.is_empty(), "{errors:?}");
    traces
        .into_iter()
        .map(|t| {
            let v = verdict(&t, findings.get(&t.trace_id));
            annotate(rs, &t, &v);
            (t, v)
        })
        .collect()
}

#[tokio::test]
async fn a_rate_limited_trace_gets_its_cause_summary_and_annotations() {
    let st = store();
    let mut logs = Vec::new();
    for _ in 0..14 {
        logs.push(gateway_log(
            7,
            429,
            vec![attr_s("gateway.rate_limit_rule", "qps-100-per-ip")],
        ));
    }
    logs.push(gateway_log(7, 201, vec![]));
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
        "route order-create rate-limited by qps-100-per-ip: 14 of 15 gateway attempts answered 429"
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
    let st = Store::new(Limits {
        window_ns: 600_000_000_000,
        max_log_records: 1000,
        max_series: 50,
        max_points: 8,
        max_routes: 10,
        max_events: 100,
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
    let (logs, _, routes) = st.sizes();
    assert!(logs <= 1000, "{logs} log records held");
    assert!(routes <= 10, "{routes} routes");
    // The newest are kept, the oldest gone.
    let newest = (49u64 * 200 + 199).to_be_bytes().repeat(2);
    let mut id = [0u8; 16];
    id.copy_from_slice(&newest);
    assert!(st.has_logs(&id));
    let oldest = 0u64.to_be_bytes().repeat(2);
    id.copy_from_slice(&oldest);
    assert!(!st.has_logs(&id));
    // Older than the window: gone however few there are.
    st.add_logs(&[], now + 700_000_000_000);
    assert_eq!(st.sizes().0, 0);
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
        v.best.summary.contains("from its pool (http.getconn)"),
        "{}",
        v.best.summary
    );
    assert_eq!(out[0].0.spans[v.culprit].name, "http.getconn");
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
    let mut traces = features::traces(&rs);
    features::join(
        &mut traces,
        &st,
        120_000_000_000,
        60_000_000_000,
        1_000_000_000_000,
    );
    assert_eq!(traces[0].kafka[0].lag_trend, Some(2400.0));
    let growing = rules::Rule {
        name: "lag_growing".into(),
        cause: "consumer_lag".into(),
        sql: "SELECT trace_id, 0.99 AS confidence, concat('lag grew by ', CAST(CAST(max(lag_trend) AS BIGINT) AS VARCHAR)) AS summary FROM kafka_lag WHERE lag_trend > 1000 GROUP BY trace_id".into(),
        user: true,
    };
    let (findings, errors) = rules::evaluate(&[growing], &traces).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(findings[&traces[0].trace_id][0].summary, "lag grew by 2400");
    let _ = &mut rs;
}

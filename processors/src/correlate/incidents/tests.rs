use super::config::{BurnWindow, IncidentsConfig, SloConfig};
use super::sample::{from_record, record_attributes, Sample};
use super::*;
use causeway_core::config::Duration;
use opentelemetry_proto::tonic::common::v1::KeyValue;

const S: u64 = 1_000_000_000;

fn sample(t_s: u64, route: &str, ms: f64) -> Sample {
    Sample {
        time_ns: t_s * S,
        start_ns: t_s * S - (ms * 1e6) as u64,
        trace_id: format!("{:032x}", t_s * 1000 + (ms as u64 % 1000)),
        route: route.into(),
        duration_ms: ms,
        weight: 1.0,
        cause: "unknown".into(),
        attrs: vec![
            ("service.version".into(), "2.4.0".into()),
            ("host.name".into(), "node-1".into()),
        ],
        levels: vec![("dependency redis 10.0.0.5:6379 miss_ratio".into(), 0.03)],
        ..Default::default()
    }
}

/// A bad request of the cold-cache fault: version 2.4.1, a cache miss.
fn cold(t_s: u64, route: &str) -> Sample {
    let mut s = sample(t_s, route, 2400.0);
    s.attrs
        .push(("log.upstream".into(), "10.0.0.9:8080".into()));
    s.cause = "cache_miss_fallback".into();
    s.culprit_service = "redis".into();
    s.culprit_kind = "dependency".into();
    s.at_service = "catalog".into();
    s.attrs[0].1 = "2.4.1".into();
    s.levels[0].1 = 0.89;
    s
}

/// Ten requests a second on `route` from `from` to `to` (s), each made by
/// `f`, with a tick every 10 s; the changes seen.
fn run(
    inc: &Incidents,
    routes: &[&str],
    from: u64,
    to: u64,
    f: &dyn Fn(u64, usize, &str) -> Sample,
) -> Vec<Change> {
    let mut out = Vec::new();
    for t in from..to {
        for route in routes {
            inc.feed((0..10).map(|k| f(t, k, route)));
        }
        if t % 10 == 9 {
            out.extend(inc.tick((t + 1) * S));
        }
    }
    out
}

fn healthy(t: u64, k: usize, route: &str) -> Sample {
    // 100–140 ms, p95 about 135 ms.
    sample(t, route, 100.0 + (k as f64) * 4.0)
}

#[test]
fn a_twentyfold_p95_opens_one_incident_explained_and_resolved() {
    let inc = Incidents::new(&IncidentsConfig::default());
    // Twenty minutes of normal.
    assert!(run(&inc, &["checkout"], 1000, 2200, &healthy).is_empty());
    // Two minutes in which 8 of 10 requests hit the cold cache of 2.4.1.
    let fault = |t: u64, k: usize, r: &str| if k < 8 { cold(t, r) } else { healthy(t, k, r) };
    let during = run(&inc, &["checkout"], 2200, 2320, &fault);
    let opened: Vec<&Change> = during.iter().filter(|c| c.state == "open").collect();
    assert_eq!(opened.len(), 1, "{during:?}");
    let c = opened[0];
    assert!(
        c.incident.opened_ns <= 2220 * S,
        "opened within two ticks of the fault"
    );
    assert!(c.incident.started_ns >= 2197 * S && c.incident.started_ns < 2210 * S);
    assert!(c.incident.reasons.contains(&"latency".to_string()));
    // Updates while open (every 30 s), nothing else.
    assert!(during.iter().filter(|c| c.state == "update").count() >= 2);
    let e = &during.last().unwrap().explanation;
    assert_eq!(e.causes[0].cause, "cache_miss_fallback");
    assert_eq!(e.causes[0].at_service, "catalog");
    assert_eq!(e.causes[0].culprit_service, "redis");
    assert!(e.causes[0].share > 0.95, "{e:?}");
    let d = &e.discriminators[0];
    assert_eq!(
        (d.attribute.as_str(), d.value.as_str()),
        ("service.version", "2.4.1")
    );
    assert!(d.share_in > 0.95 && d.share_out == 0.0, "{d:?}");
    // log.upstream (the canary's address) sets apart the same requests:
    // it ties, and the version, listed first, comes first.
    assert_eq!(e.discriminators[1].attribute, "log.upstream");
    // host.name is on every request: no discriminator.
    assert!(e.discriminators.iter().all(|d| d.attribute != "host.name"));
    let m = &e.moved[0];
    assert_eq!(m.series, "dependency redis 10.0.0.5:6379 miss_ratio");
    assert!((m.before - 0.03).abs() < 1e-9 && m.during > 0.7, "{m:?}");
    assert!(e.p99_ms > 2000.0);
    let summary = c.incident.summary(&c.explanation);
    assert!(summary.starts_with("checkout p95 2."), "{summary}");
    assert!(summary.contains("(normal 14"), "{summary}");
    assert!(
        summary.contains("cache_miss_fallback in catalog (culprit redis dependency)"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "100% of the slow or failed requests come from service.version=2.4.1 (0% of normal traffic)"
        ),
        "{summary}"
    );
    assert!(summary.contains("miss_ratio 0.03 → 0.89"), "{summary}");
    // Back to normal: resolved within recent window + a tick, once.
    let after = run(&inc, &["checkout"], 2320, 2500, &healthy);
    let resolved: Vec<&Change> = after.iter().filter(|c| c.state == "resolved").collect();
    assert_eq!(resolved.len(), 1, "{after:?}");
    assert_eq!(resolved[0].incident.id, c.incident.id);
    assert!(resolved[0].incident.resolved_ns.unwrap() <= 2400 * S);
    assert!(after.iter().all(|c| c.state != "open"));
    // The incident's traffic stayed out of the normal: the same fault opens again.
    let again = run(&inc, &["checkout"], 2500, 2560, &fault);
    assert_eq!(again.iter().filter(|c| c.state == "open").count(), 1);
}

#[test]
fn a_route_slow_by_nature_and_a_small_wobble_open_nothing() {
    let inc = Incidents::new(&IncidentsConfig::default());
    // Always 2–3 s, with an odd 6 s one; a fast route going 2 → 12 ms.
    let f = |t: u64, k: usize, r: &str| {
        if r == "report" {
            sample(
                t,
                r,
                if k == 0 && t.is_multiple_of(7) {
                    6000.0
                } else {
                    2000.0 + 100.0 * k as f64
                },
            )
        } else {
            sample(t, r, if t > 2000 { 12.0 } else { 2.0 })
        }
    };
    let changes = run(&inc, &["report", "ping"], 1000, 2600, &f);
    assert!(changes.is_empty(), "{changes:?}");
}

#[test]
fn the_error_share_opens_one_and_a_new_route_has_no_normal_to_break() {
    let inc = Incidents::new(&IncidentsConfig::default());
    let f = |t: u64, k: usize, r: &str| {
        let mut s = healthy(t, k, r);
        // From 2000 s, 4 of 10 fail fast (a rate limit).
        s.failed = t >= 2000 && k < 4;
        if s.failed {
            s.duration_ms = 3.0;
            s.cause = "rate_limited".into();
            s.attrs
                .push(("log.rate_limit_rule".into(), "perip-2rps".into()));
        }
        s
    };
    // `fresh` starts failing at once: no normal yet, nothing opens on it.
    let changes = run(&inc, &["search"], 1000, 2100, &f);
    let changes2 = run(&inc, &["fresh"], 2100, 2130, &|t, k, r| {
        let mut s = healthy(t, k, r);
        s.failed = true;
        s
    });
    assert!(
        changes2.iter().all(|c| c.incident.route != "fresh"),
        "{changes2:?}"
    );
    let opened: Vec<&Change> = changes.iter().filter(|c| c.state == "open").collect();
    assert_eq!(opened.len(), 1);
    let i = &opened[0].incident;
    assert_eq!(i.reasons, vec!["errors".to_string()]);
    let e = &opened[0].explanation;
    assert_eq!(e.causes[0].cause, "rate_limited");
    assert_eq!(e.discriminators[0].attribute, "log.rate_limit_rule");
    assert!((e.error_share - 0.4).abs() < 0.1, "{e:?}");
}

#[test]
fn two_routes_breaking_together_are_two_incidents() {
    let inc = Incidents::new(&IncidentsConfig::default());
    run(&inc, &["a", "b"], 1000, 1500, &healthy);
    let changes = run(&inc, &["a", "b"], 1500, 1540, &|t, k, r| {
        if r == "a" {
            cold(t, r)
        } else {
            let mut s = healthy(t, k, r);
            s.failed = k < 5;
            s
        }
    });
    let mut opened: Vec<(String, Vec<String>)> = changes
        .iter()
        .filter(|c| c.state == "open")
        .map(|c| (c.incident.route.clone(), c.incident.reasons.clone()))
        .collect();
    opened.sort();
    assert_eq!(
        opened,
        vec![
            ("a".to_string(), vec!["latency".to_string()]),
            ("b".to_string(), vec!["errors".to_string()])
        ]
    );
}

fn slo_config(dir: &std::path::Path) -> IncidentsConfig {
    IncidentsConfig {
        state_file: Some(dir.join("incidents.json").display().to_string()),
        slos: vec![SloConfig {
            name: "pay-fast".into(),
            route: "pay".into(),
            latency: Some(Duration::millis(300)),
            objective: 99.0,
            period: Duration::secs(86_400),
            windows: vec![BurnWindow {
                severity: "page".into(),
                burn_rate: 14.4,
                long: Duration::secs(60),
                short: Duration::secs(20),
            }],
        }],
        ..Default::default()
    }
}

#[test]
fn an_slo_burn_opens_a_page_on_a_new_route_which_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = slo_config(dir.path());
    let inc = Incidents::new(&cfg);
    // A new route (no normal): 30% over 300 ms burns 30× a 1% budget.
    let f = |t: u64, k: usize, r: &str| sample(t, r, if k < 3 { 900.0 } else { 50.0 });
    let changes = run(&inc, &["pay"], 1000, 1030, &f);
    let open: Vec<&Change> = changes.iter().filter(|c| c.state == "open").collect();
    assert_eq!(open.len(), 1, "{changes:?}");
    let i = &open[0].incident;
    assert_eq!(i.severity, "page");
    assert_eq!(i.reasons, vec!["slo".to_string()]);
    let b = i.burn.as_ref().unwrap();
    assert_eq!(b.slo, "pay-fast");
    assert!((b.burn_rate - 30.0).abs() < 1.0, "{b:?}");
    assert!(b.budget_left < 0.0);
    let rec = record(open[0], 1030 * S);
    let attr = |k: &str| {
        rec.attributes
            .iter()
            .find(|a| a.key == k)
            .and_then(|a| a.value.clone())
            .and_then(|v| v.value)
    };
    assert_eq!(
        attr("incident.slo"),
        Some(any_value::Value::StringValue("pay-fast".into()))
    );
    assert!(
        matches!(attr("incident.burn_rate"), Some(any_value::Value::DoubleValue(x)) if x > 14.4)
    );
    let a = alert(open[0], 1030 * S, 120 * S, &IndexMap::new());
    assert!(a.firing);
    assert_eq!(a.labels["severity"], "page");
    assert_eq!(a.labels["alertname"], ALERT_NAME);
    assert!(a.annotations["summary"].contains("SLO pay-fast burning"));
    let id = i.id.clone();
    drop(inc);
    // A restart while it is open: the same incident, still open.
    let inc = Incidents::new(&cfg);
    assert_eq!(inc.list()[0].0.id, id);
    assert_eq!(inc.counts().open, 1);
    let changes = run(&inc, &["pay"], 1030, 1060, &f);
    assert!(changes.iter().all(|c| c.state != "open"), "{changes:?}");
    // It stops burning: resolved, once, the same id.
    let changes = run(&inc, &["pay"], 1060, 1200, &|t, _, r| sample(t, r, 50.0));
    let resolved: Vec<&Change> = changes.iter().filter(|c| c.state == "resolved").collect();
    assert_eq!(resolved.len(), 1, "{changes:?}");
    assert_eq!(resolved[0].incident.id, id);
    assert!(!alert(resolved[0], 1200 * S, 0, &IndexMap::new()).firing);
    // Nothing open is left in the file.
    let kept: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(dir.path().join("incidents.json")).unwrap()).unwrap();
    assert!(kept.is_empty());
}

#[test]
fn routes_with_absurd_cardinality_are_bounded_and_counted() {
    let cfg = IncidentsConfig {
        max_routes: 1000,
        ..Default::default()
    };
    let inc = Incidents::new(&cfg);
    // An established route first.
    run(&inc, &["checkout"], 1000, 1200, &healthy);
    // Then a trace id in the path: 100,000 routes of one request each.
    for i in 0..100_000u64 {
        inc.feed([sample(1200 + i / 1000, &format!("/t/{i:032x}"), 5.0)]);
    }
    let c = inc.counts();
    assert!(c.routes <= 1000, "{c:?}");
    assert!(c.evicted >= 99_000, "{c:?}");
    // The established route kept its normal: a fault on it still opens one.
    let changes = run(&inc, &["checkout"], 1300, 1340, &|t, _, r| cold(t, r));
    assert_eq!(changes.iter().filter(|c| c.state == "open").count(), 1);
}

#[test]
fn routes_are_refused_when_every_one_is_established() {
    let cfg = IncidentsConfig {
        max_routes: 3,
        ..Default::default()
    };
    let inc = Incidents::new(&cfg);
    run(&inc, &["a", "b", "c"], 1000, 1100, &healthy);
    inc.feed([sample(1100, "d", 5.0)]);
    let c = inc.counts();
    assert_eq!((c.routes, c.refused, c.evicted), (3, 1, 0));
}

#[test]
fn a_sample_travels_on_its_rca_record() {
    let mut s = cold(1000, "checkout");
    s.trace_id = "0af7651916cd43dd8448eb211c80319c".into();
    s.weight = 10.0;
    s.failed = true;
    s.attrs.push(("service.version".into(), "2.4.0".into()));
    let mut attributes = vec![
        kv(
            "event.name",
            any_value::Value::StringValue("causeway.rca".into()),
        ),
        kv(
            "rca.route_id",
            any_value::Value::StringValue("checkout".into()),
        ),
        kv("rca.cause", any_value::Value::StringValue(s.cause.clone())),
        kv(
            "rca.culprit.service",
            any_value::Value::StringValue("redis".into()),
        ),
        kv(
            "rca.culprit.kind",
            any_value::Value::StringValue("dependency".into()),
        ),
    ];
    attributes.extend(record_attributes(&s));
    let r = LogRecord {
        time_unix_nano: s.start_ns + (s.duration_ms * 1e6) as u64,
        attributes,
        trace_id: hex::decode(&s.trace_id).unwrap(),
        ..Default::default()
    };
    let mut back = from_record(&r, s.time_ns).unwrap();
    let mut want = s.clone();
    for x in [&mut back, &mut want] {
        x.attrs.sort();
        x.levels.sort_by(|a, b| a.0.cmp(&b.0));
    }
    assert_eq!(back, want);
    // Not an RCA record, or one without a route: no sample.
    let mut other = r.clone();
    other.attributes[0] = kv("event.name", any_value::Value::StringValue("x".into()));
    assert!(from_record(&other, 0).is_none());
}

#[test]
fn a_corrupt_state_file_starts_empty_and_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = slo_config(dir.path());
    std::fs::write(dir.path().join("incidents.json"), b"{not json").unwrap();
    let inc = Incidents::new(&cfg);
    assert_eq!(inc.counts().open, 0);
    let changes = run(&inc, &["pay"], 1000, 1030, &|t, _, r| sample(t, r, 900.0));
    assert_eq!(changes.iter().filter(|c| c.state == "open").count(), 1);
    let kept: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(dir.path().join("incidents.json")).unwrap()).unwrap();
    assert_eq!(kept.len(), 1);
}

#[test]
fn a_trace_gives_its_weight_attributes_and_levels() {
    use crate::correlate::analysis::trace::{traces, RouteMap};
    use crate::correlate::model::{Joined, LogEvidence};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    let s = |k: &str, v: &str| kv(k, any_value::Value::StringValue(v.into()));
    let i = |k: &str, v: i64| kv(k, any_value::Value::IntValue(v));
    let tid = vec![7u8; 16];
    let span = |id: u8, parent: u8, kind: i32, attrs: Vec<KeyValue>| Span {
        trace_id: tid.clone(),
        span_id: vec![0, 0, 0, 0, 0, 0, 0, id],
        parent_span_id: if parent == 0 {
            vec![]
        } else {
            vec![0, 0, 0, 0, 0, 0, 0, parent]
        },
        name: format!("s{id}"),
        kind,
        start_time_unix_nano: 1_000_000_000,
        end_time_unix_nano: 1_500_000_000,
        attributes: attrs,
        ..Default::default()
    };
    let res = |attrs: Vec<KeyValue>, spans: Vec<Span>| ResourceSpans {
        resource: Some(Resource {
            attributes: attrs,
            ..Default::default()
        }),
        scope_spans: vec![ScopeSpans {
            spans,
            ..Default::default()
        }],
        ..Default::default()
    };
    let rs = vec![
        res(
            vec![s("service.name", "catalog"), s("service.version", "2.4.1")],
            vec![span(
                1,
                0,
                2,
                vec![
                    s("http.request.method", "GET"),
                    s("http.route", "/item/:id"),
                    kv(
                        "sampling.adjusted_count",
                        any_value::Value::DoubleValue(10.0),
                    ),
                ],
            )],
        ),
        res(
            vec![s("service.name", "chat"), s("host.name", "gpu-3")],
            vec![span(
                2,
                1,
                3,
                vec![
                    s("gen_ai.request.model", "llama-3"),
                    i("gen_ai.usage.input_tokens", 3000),
                    s("http.request.method", "GET"),
                ],
            )],
        ),
    ];
    let mut t = traces(&rs, None, &RouteMap::default()).remove(0);
    let mut line = LogEvidence::default();
    line.parts.put(
        crate::correlate::source::gateway::Line {
            upstream: Some("10.0.0.9:8080".into()),
            rate_limit_rule: Some("-".into()),
            status: Some(200),
            ..Default::default()
        },
        0,
    );
    t.logs.push(std::sync::Arc::new(line));
    t.joined.push(Joined::Metric(
        "dependency",
        serde_json::json!({"span_id": "ab", "system": "redis", "address": "10.0.0.5:6379",
            "miss_ratio": 0.8, "up": 1.0, "time_unix_nano": 5, "locks_by_mode": "x=1"}),
    ));
    t.joined.push(Joined::Metric(
        "dependency",
        serde_json::json!({"system": "redis", "address": "10.0.0.5:6379", "miss_ratio": 0.9}),
    ));
    assert_eq!(sample::weight(&rs, &t), 10.0);
    let sources = crate::correlate::registry::sources(&serde_yaml::from_str("{}").unwrap());
    let column = |n: &str| sources.log_column(n);
    let wanted: Vec<sample::Attr> = config::attributes()
        .iter()
        .filter_map(|a| sample::Attr::parse(a, column))
        .collect();
    let mut attrs = sample::attributes(&rs, &t, &wanted);
    attrs.sort();
    let pairs: Vec<(&str, &str)> = attrs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        pairs,
        vec![
            ("gen_ai.request.model", "llama-3"),
            ("gen_ai.usage.input_tokens", "2048-4095"),
            ("host.name", "gpu-3"),
            ("http.request.method", "GET"),
            ("log.status", "200"),
            ("log.upstream", "10.0.0.9:8080"),
            ("service.version", "2.4.1"),
        ],
        "each pair once, `-` is no value"
    );
    let mut levels = sample::levels(&t);
    levels.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        levels,
        vec![
            ("dependency redis 10.0.0.5:6379 miss_ratio".to_string(), 0.9),
            ("dependency redis 10.0.0.5:6379 up".to_string(), 1.0),
        ],
        "identity fields name a level, per-trace detail does not; the larger of two"
    );
    assert!(sample::Attr::parse("log.client", column).is_none());
    assert!(sample::Attr::parse("span.", column).is_none());
    assert!(!sample::Attr::well_formed("span."));
    assert!(IncidentsConfig {
        attributes: vec!["service.version".into()],
        ..Default::default()
    }
    .validate()
    .iter()
    .any(|e| e.to_string().contains("incidents.attributes[0]")));
}

#[test]
fn the_recent_window_kept_as_buckets_come_and_go_equals_its_buckets() {
    use super::route::{Route, Shape};
    let shape = Shape {
        recent: 6,
        generation: 180,
        quantile: 0.95,
        min_normal: 100.0,
        max_values: 32,
    };
    let mut r = Route::default();
    let mut all: Vec<(u64, Sample)> = Vec::new();
    for b in 0..40u64 {
        for k in 0..7u64 {
            let mut s = sample(1000 + b * 10, "x", (1 + (b * 7 + k) % 97) as f64 * 13.0);
            s.failed = k == 3;
            s.weight = 1.0 + (k % 3) as f64 * 0.5;
            r.add(b, &s, &shape);
            all.push((b, s));
        }
        // A late one for a bucket that left the window is not counted.
        if b >= 10 {
            r.add(b - 10, &sample(1000 + b * 10, "x", 5.0), &shape);
        }
        r.rotate(b, false, &shape);
        let inside: Vec<&Sample> = all
            .iter()
            .filter(|(x, _)| x + 6 > b && *x <= b)
            .map(|(_, s)| s)
            .collect();
        let n: f64 = inside.iter().map(|s| s.weight).sum();
        let f: f64 = inside.iter().filter(|s| s.failed).map(|s| s.weight).sum();
        let mut h = super::hist::Hist::default();
        inside.iter().for_each(|s| h.add(s.duration_ms, s.weight));
        let (rn, rf) = r.recent_counts();
        assert!(
            (rn - n).abs() < 1e-6 && (rf - f).abs() < 1e-6,
            "bucket {b}: {rn} {rf} vs {n} {f}"
        );
        assert_eq!(
            r.recent_hist().quantile(0.95),
            h.quantile(0.95),
            "bucket {b}"
        );
    }
}

#[test]
fn the_functions_whose_time_moved_explain_an_incident_of_the_code() {
    let inc = Incidents::new(&IncidentsConfig::default());
    let code = |t: u64, k: usize, r: &str| {
        let mut s = healthy(t, k, r);
        s.levels.push(("code shop fn main.parseAST ms".into(), 2.0));
        s
    };
    assert!(run(&inc, &["symbols"], 1000, 2200, &code).is_empty());
    // The symbol table's lock, held by a function the normal never showed.
    let fault = |t: u64, k: usize, r: &str| {
        if k < 8 {
            let mut s = sample(t, r, 2400.0);
            s.cause = "lock_contention".into();
            s.levels = vec![
                ("code shop fn main.refreshSymbols ms".into(), 2300.0),
                ("code shop fn main.parseAST ms".into(), 2.0),
                // Another address, never seen in the normal.
                ("dependency redis 10.0.0.9:6379 miss_ratio".into(), 0.5),
            ];
            s
        } else {
            code(t, k, r)
        }
    };
    let during = run(&inc, &["symbols"], 2200, 2320, &fault);
    let e = &during.last().unwrap().explanation;
    assert_eq!(
        e.moved[0].series, "code shop fn main.refreshSymbols ms",
        "{e:?}"
    );
    assert_eq!(e.moved[0].before, 0.0);
    assert_eq!(e.moved[0].during, 2300.0);
    // The function that did not move is not listed; a level of another kind
    // absent before is not taken for a zero.
    assert!(
        e.moved
            .iter()
            .all(|m| m.series != "code shop fn main.parseAST ms"),
        "{e:?}"
    );
    assert!(
        e.moved.iter().all(|m| !m.series.starts_with("dependency")),
        "{e:?}"
    );
}

/// A request slow in the route's normal way a few seconds before the fault
/// is not taken for the incident's start: it starts with the fault's run
/// of slow requests.
#[test]
fn an_incident_starts_with_its_run_of_slow_requests_not_an_earlier_stray_one() {
    let inc = Incidents::new(&IncidentsConfig::default());
    assert!(run(&inc, &["checkout"], 1000, 2190, &healthy).is_empty());
    // One stray slow request at 2195, then healthy traffic until the fault.
    let stray = |t: u64, k: usize, r: &str| {
        if t == 2195 && k == 0 {
            sample(t, r, 900.0)
        } else {
            healthy(t, k, r)
        }
    };
    assert!(run(&inc, &["checkout"], 2190, 2200, &stray).is_empty());
    let fault = |t: u64, k: usize, r: &str| if k < 8 { cold(t, r) } else { healthy(t, k, r) };
    let during = run(&inc, &["checkout"], 2200, 2320, &fault);
    let opened: Vec<&Change> = during.iter().filter(|c| c.state == "open").collect();
    assert_eq!(opened.len(), 1, "{during:?}");
    // The fault's first requests started 2.4 s before they ended at 2200.
    let started = opened[0].incident.started_ns;
    assert!(
        (2197 * S..2201 * S).contains(&started),
        "started at {} s",
        started as f64 / S as f64
    );
}

/// A host's near-idle levels that fall to zero during an incident do not
/// crowd out the dependency that moved with it.
#[test]
fn what_moved_lists_each_thing_that_moved_before_more_levels_of_one() {
    let inc = Incidents::new(&IncidentsConfig::default());
    const HOST: [&str; 5] = ["iowait", "disk_util", "psi_io", "steal", "psi_memory"];
    let levels = |host: f64, prompt: f64| {
        let mut l: Vec<(String, f64)> = HOST
            .iter()
            .map(|k| (format!("host vm {k}"), host))
            .collect();
        l.push((
            "dependency llamacpp 10.0.0.7:8080 prompt_tokens".into(),
            prompt,
        ));
        l
    };
    let normal = |t: u64, k: usize, r: &str| {
        let mut s = healthy(t, k, r);
        s.levels = levels(0.01, 110.0);
        s
    };
    assert!(run(&inc, &["assist"], 1000, 2200, &normal).is_empty());
    let fault = |t: u64, k: usize, r: &str| {
        if k < 8 {
            let mut s = sample(t, r, 2400.0);
            s.cause = "long_prompt".into();
            s.levels = levels(0.0, 8500.0);
            s
        } else {
            normal(t, k, r)
        }
    };
    let during = run(&inc, &["assist"], 2200, 2320, &fault);
    let e = &during.last().unwrap().explanation;
    assert_eq!(e.moved.len(), 5, "{e:?}");
    assert!(
        e.moved.iter().any(
            |m| m.series == "dependency llamacpp 10.0.0.7:8080 prompt_tokens"
                && m.during > 10.0 * m.before
        ),
        "{e:?}"
    );
    assert_eq!(
        e.moved
            .iter()
            .filter(|m| m.series.starts_with("host vm"))
            .count(),
        4,
        "the host fills what the dependency leaves: {e:?}"
    );
}

/// A route's normal is made from buckets that left the recent window; a
/// fault that comes before it exists (a new route, a pulse soon after
/// start) opens an incident once it does, explained by the fault's own
/// slow requests.
#[test]
fn a_fault_before_the_routes_normal_exists_is_explained_when_it_opens() {
    let inc = Incidents::new(&IncidentsConfig::default());
    // Twenty seconds of normal traffic (200 requests, still in the recent
    // window: no normal yet), then twenty of the fault, ticks every 10 s.
    assert!(run(&inc, &["checkout"], 1000, 1020, &healthy).is_empty());
    let fault = |t: u64, k: usize, r: &str| if k < 3 { cold(t, r) } else { healthy(t, k, r) };
    let mut changes = run(&inc, &["checkout"], 1020, 1040, &fault);
    // Then healthy traffic: the normal is made as the first buckets age out.
    changes.extend(run(&inc, &["checkout"], 1040, 1080, &healthy));
    let opened: Vec<&Change> = changes.iter().filter(|c| c.state == "open").collect();
    assert_eq!(opened.len(), 1, "{changes:?}");
    let e = &opened[0].explanation;
    assert_eq!(
        e.causes.first().map(|c| c.cause.as_str()),
        Some("cache_miss_fallback"),
        "{e:?}"
    );
    assert_eq!(e.discriminators[0].value, "2.4.1", "{e:?}");
}

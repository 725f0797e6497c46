use super::*;
use causeway_core::telemetry::Registry;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{status, ResourceSpans, ScopeSpans, Span, Status};
use prost::Message;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const MS: u64 = 1_000_000;
const T0: u64 = 1_764_000_000_000_000_000;

#[derive(Clone)]
struct S {
    trace: u64,
    span: u64,
    parent: u64,
    start_ms: u64,
    dur_ms: u64,
    error: bool,
    attrs: Vec<(&'static str, any_value::Value)>,
    trace_state: &'static str,
}

fn s(trace: u64, span: u64, parent: u64, dur_ms: u64) -> S {
    S {
        trace,
        span,
        parent,
        start_ms: 0,
        dur_ms,
        error: false,
        attrs: vec![],
        trace_state: "",
    }
}

fn tid(t: u64) -> Vec<u8> {
    [t.to_be_bytes(), (t ^ 0xdead_beef).to_be_bytes()].concat()
}

fn batch(spans: &[S]) -> Batch {
    let req = request(spans);
    Batch::from_encoded(Signal::Traces, req.encode_to_vec().into(), spans.len())
}

fn request(spans: &[S]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "service.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("svc".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: spans
                    .iter()
                    .map(|x| Span {
                        trace_id: tid(x.trace),
                        span_id: x.span.to_be_bytes().to_vec(),
                        parent_span_id: if x.parent == 0 {
                            vec![]
                        } else {
                            x.parent.to_be_bytes().to_vec()
                        },
                        name: format!("span-{}-{}", x.trace, x.span),
                        trace_state: x.trace_state.into(),
                        start_time_unix_nano: T0 + x.start_ms * MS,
                        end_time_unix_nano: T0 + (x.start_ms + x.dur_ms) * MS,
                        attributes: x
                            .attrs
                            .iter()
                            .map(|(k, v)| KeyValue {
                                key: (*k).into(),
                                value: Some(AnyValue {
                                    value: Some(v.clone()),
                                }),
                                ..Default::default()
                            })
                            .collect(),
                        status: Some(Status {
                            code: if x.error {
                                status::StatusCode::Error as i32
                            } else {
                                0
                            },
                            message: String::new(),
                        }),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A processor that releases kept spans as soon as they are decided (the
/// outbox is tested on its own: `kept_traces_leave_together_while_every_trace_is_decided_on_time`).
fn processor(yaml: &str) -> (TailSampling, Registry) {
    let (mut p, reg) = processor_with_outbox(yaml);
    p.release_every = Duration::ZERO;
    (p, reg)
}

fn processor_with_outbox(yaml: &str) -> (TailSampling, Registry) {
    let cfg: TailSamplingConfig =
        decode(&serde_yaml::from_str(yaml).expect("yaml")).expect("valid config");
    let reg = Registry::new();
    (
        TailSampling::new(cfg, "tail_sampling", &reg).expect("build"),
        reg,
    )
}

/// Kept spans: trace number -> (span names, sampling.policy values, adjusted counts).
#[derive(Default, Debug)]
struct Kept {
    spans: BTreeMap<u64, BTreeSet<u64>>,
    policy: BTreeMap<u64, String>,
    adjusted: BTreeMap<u64, f64>,
}

fn collect(out: &[Batch], kept: &mut Kept) {
    for b in out {
        let req = b.to_traces_request().expect("output decodes");
        let n: usize = req
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        assert_eq!(n, b.items(), "item count matches the encoded spans");
        for rs in &req.resource_spans {
            assert!(
                rs.resource
                    .as_ref()
                    .is_some_and(|r| !r.attributes.is_empty()),
                "resource kept"
            );
            for ss in &rs.scope_spans {
                for sp in &ss.spans {
                    let t = u64::from_be_bytes(sp.trace_id[..8].try_into().expect("8"));
                    let id = u64::from_be_bytes(sp.span_id[..8].try_into().expect("8"));
                    assert!(
                        kept.spans.entry(t).or_default().insert(id),
                        "span {t}/{id} emitted twice"
                    );
                    for kv in &sp.attributes {
                        match (
                            kv.key.as_str(),
                            kv.value.as_ref().and_then(|v| v.value.as_ref()),
                        ) {
                            ("sampling.policy", Some(any_value::Value::StringValue(p))) => {
                                kept.policy.insert(t, p.clone());
                            }
                            ("sampling.adjusted_count", Some(any_value::Value::DoubleValue(a))) => {
                                kept.adjusted.insert(t, *a);
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

async fn feed(p: &mut TailSampling, spans: &[S], kept: &mut Kept) {
    let mut out = vec![];
    p.process(batch(spans), &mut out).await.expect("process");
    collect(&out, kept);
}

async fn tick(p: &mut TailSampling, kept: &mut Kept) {
    let mut out = vec![];
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    collect(&out, kept);
}

/// Run every trace (one root + one child each) through `yaml` and return the kept ones.
async fn decide_all(yaml: &str, traces: Vec<Vec<S>>) -> Kept {
    let (mut p, _) = processor(yaml);
    let mut kept = Kept::default();
    for t in &traces {
        feed(&mut p, t, &mut kept).await;
    }
    tokio::time::advance(Duration::from_secs(31)).await;
    tick(&mut p, &mut kept).await;
    assert_eq!(p.traces.len(), 0, "all decided");
    kept
}

/// The trace numbers kept.
fn ids(k: &Kept) -> Vec<u64> {
    k.spans.keys().copied().collect()
}

fn policy(yaml_policy: &str) -> String {
    format!("always_keep_errors: false\npolicies:\n  - {yaml_policy}\n")
}

fn str_attr(k: &'static str, v: &str) -> (&'static str, any_value::Value) {
    (k, any_value::Value::StringValue(v.into()))
}

#[tokio::test(start_paused = true)]
async fn latency_policy_uses_earliest_start_to_latest_end() {
    let mut a = s(1, 1, 0, 100);
    a.start_ms = 0;
    let mut b = s(1, 2, 1, 100);
    b.start_ms = 450; // trace lasts 550 ms although no span is longer than 100
    let kept = decide_all(
        &policy(
            "{name: slow, type: latency, latency: {threshold_ms: 500, upper_threshold_ms: 1000}}",
        ),
        vec![vec![a, b], vec![s(2, 1, 0, 200)], vec![s(3, 1, 0, 5000)]],
    )
    .await;
    assert_eq!(kept.spans.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(kept.spans[&1].len(), 2, "all spans of a kept trace");
    assert_eq!(kept.policy[&1], "slow");
}

#[tokio::test(start_paused = true)]
async fn status_code_and_always_keep_errors() {
    let mut e = s(1, 2, 1, 1);
    e.error = true;
    let traces = vec![vec![s(1, 1, 0, 1), e], vec![s(2, 1, 0, 1)]];
    let kept = decide_all(
        &policy("{name: err, type: status_code, status_code: {status_codes: [ERROR]}}"),
        traces.clone(),
    )
    .await;
    assert_eq!(kept.spans.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(kept.policy[&1], "err");
    // With no policy keeping it, the default still keeps errors.
    let kept = decide_all(
        "policies: [{name: never, type: span_count, span_count: {min_spans: 100}}]",
        traces,
    )
    .await;
    assert_eq!(kept.spans.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(kept.policy[&1], "errors");
}

#[tokio::test(start_paused = true)]
async fn attribute_policies() {
    let mut a = s(1, 1, 0, 1);
    a.attrs = vec![str_attr("http.route", "/payment/charge")];
    let mut b = s(2, 1, 0, 1);
    b.attrs = vec![str_attr("http.route", "/health")];
    let mut c = s(3, 1, 0, 1);
    c.attrs = vec![("http.response.status_code", any_value::Value::IntValue(503))];
    let mut d = s(4, 1, 0, 1);
    d.attrs = vec![("cache.hit", any_value::Value::BoolValue(false))];
    let traces = vec![vec![a], vec![b], vec![c], vec![d]];
    let ids = |k: &Kept| k.spans.keys().copied().collect::<Vec<_>>();

    let k = decide_all(&policy("{name: p, type: string_attribute, string_attribute: {key: http.route, values: [/payment/charge]}}"), traces.clone()).await;
    assert_eq!(ids(&k), vec![1]);
    let k = decide_all(&policy("{name: p, type: string_attribute, string_attribute: {key: http.route, values: ['/pay.*'], enabled_regex_matching: true}}"), traces.clone()).await;
    assert_eq!(ids(&k), vec![1]);
    let k = decide_all(&policy("{name: p, type: string_attribute, string_attribute: {key: http.route, values: [/health], invert_match: true}}"), traces.clone()).await;
    assert_eq!(ids(&k), vec![1, 3, 4]);
    let k = decide_all(&policy("{name: p, type: numeric_attribute, numeric_attribute: {key: http.response.status_code, min_value: 500, max_value: 599}}"), traces.clone()).await;
    assert_eq!(ids(&k), vec![3]);
    let k = decide_all(
        &policy(
            "{name: p, type: boolean_attribute, boolean_attribute: {key: cache.hit, value: false}}",
        ),
        traces.clone(),
    )
    .await;
    assert_eq!(ids(&k), vec![4]);
    // Resource attributes count too.
    let k = decide_all(&policy("{name: p, type: string_attribute, string_attribute: {key: service.name, values: [svc]}}"), traces).await;
    assert_eq!(ids(&k), vec![1, 2, 3, 4]);
}

#[tokio::test(start_paused = true)]
async fn trace_state_matches_a_member_exactly_as_the_collector_does() {
    let with = |t: u64, ts: &'static str| {
        let mut x = s(t, 2, 1, 1);
        x.trace_state = ts;
        vec![s(t, 1, 0, 1), x]
    };
    let traces = vec![
        with(1, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
        with(2, " congo=ucfJifl5GOE , rojo=00f067aa0ba902b7"),
        with(3, "rojo=1,congo"),             // does not parse: skipped
        with(4, "xcongo=t61rcWkgMzE"),       // another key
        with(5, "congo=t61rcWkgMzE-suffix"), // not equal
        vec![s(6, 1, 0, 1)],                 // none
    ];
    let ids = |k: &Kept| k.spans.keys().copied().collect::<Vec<_>>();
    let k = decide_all(
        &policy("{name: p, type: trace_state, trace_state: {key: congo, values: [t61rcWkgMzE, ucfJifl5GOE, '']}}"),
        traces.clone(),
    )
    .await;
    assert_eq!(ids(&k), vec![1, 2]);
    // Inside `and`, with another policy.
    let k = decide_all(
        &policy("{name: p, type: and, and: {and_sub_policy: [{name: a, type: trace_state, trace_state: {key: rojo, values: [00f067aa0ba902b7]}}, {name: b, type: span_count, span_count: {min_spans: 2}}]}}"),
        traces,
    )
    .await;
    assert_eq!(ids(&k), vec![1, 2]);
}

#[test]
fn ottl_condition_is_refused_with_what_to_use_instead() {
    let cfg: serde_yaml::Value = serde_yaml::from_str(&format!(
        "policies: [{}]",
        "{name: o, type: ottl_condition, ottl_condition: {error_mode: ignore, span: ['attributes[\"k\"] == \"v\"']}}"
    ))
    .expect("yaml");
    let errs = TailSamplingFactory.validate(&cfg).expect_err("unsupported");
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].path, "policies[0].type");
    assert!(
        errs[0]
            .message
            .contains("`ottl_condition` policy is not supported"),
        "{errs:?}"
    );
    assert!(errs[0].message.contains("string_attribute"), "{errs:?}");
}

#[test]
fn collector_numbers_with_underscores_load() {
    let cfg: serde_yaml::Value = serde_yaml::from_str(
        "decision_wait: 10s\nnum_traces: 50_000\nexpected_new_traces_per_sec: 1_000\ndecision_cache: {sampled_cache_size: 100_000, non_sampled_cache_size: '200000'}\npolicies: [{name: r, type: rate_limiting, rate_limiting: {spans_per_second: 1_000}}]",
    )
    .expect("yaml");
    let c: config::TailSamplingConfig = causeway_core::config::decode(&cfg).expect("valid");
    assert_eq!(c.num_traces, 50_000);
    assert_eq!(c.decision_cache.sampled_cache_size, 100_000);
    assert_eq!(c.decision_cache.non_sampled_cache_size, 200_000);
    let bad: serde_yaml::Value = serde_yaml::from_str("num_traces: lots").expect("yaml");
    let errs = TailSamplingFactory.validate(&bad).expect_err("invalid");
    assert!(
        errs[0].path == "num_traces" && errs[0].message.contains("invalid number \"lots\""),
        "{errs:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn probabilistic_is_deterministic_by_trace_id_and_annotates_adjusted_count() {
    let traces: Vec<Vec<S>> = (1..=4000).map(|t| vec![s(t, 1, 0, 1)]).collect();
    let yaml = policy("{name: base, type: probabilistic, probabilistic: {sampling_percentage: 10, hash_salt: s1}}");
    let a = decide_all(&yaml, traces.clone()).await;
    let b = decide_all(&yaml, traces).await;
    assert_eq!(
        a.spans.keys().collect::<Vec<_>>(),
        b.spans.keys().collect::<Vec<_>>(),
        "two instances agree"
    );
    let n = a.spans.len();
    assert!((320..=480).contains(&n), "about 10% of 4000, got {n}");
    for t in a.spans.keys() {
        let expected = policy::trace_hash(b"s1", &tid(*t)) <= (0.10 * u64::MAX as f64) as u64;
        assert!(expected, "trace {t} kept against the hash");
        assert_eq!(a.adjusted[t], 10.0);
    }
}

#[tokio::test(start_paused = true)]
async fn rate_limiting_and_span_count() {
    // 10 traces of 3 spans decided in the same second; budget 10 spans/s -> 3 traces.
    let traces: Vec<Vec<S>> = (1..=10)
        .map(|t| vec![s(t, 1, 0, 1), s(t, 2, 1, 1), s(t, 3, 1, 1)])
        .collect();
    let k = decide_all(
        &policy("{name: rl, type: rate_limiting, rate_limiting: {spans_per_second: 10}}"),
        traces.clone(),
    )
    .await;
    assert_eq!(k.spans.len(), 3);
    let mut mixed = traces[..2].to_vec();
    mixed.push(vec![s(99, 1, 0, 1)]);
    let k = decide_all(
        &policy("{name: sc, type: span_count, span_count: {min_spans: 2, max_spans: 3}}"),
        mixed,
    )
    .await;
    assert_eq!(k.spans.keys().copied().collect::<Vec<_>>(), vec![1, 2]);
}

#[tokio::test(start_paused = true)]
async fn and_drop_and_combination_rules() {
    let mut a = s(1, 1, 0, 900);
    a.attrs = vec![str_attr("http.route", "/checkout")];
    let mut b = s(2, 1, 0, 900);
    b.attrs = vec![str_attr("http.route", "/health")];
    b.error = true;
    let c = s(3, 1, 0, 10);
    let traces = vec![vec![a], vec![b], vec![c]];
    let yaml = r#"
policies:
  - name: slow-checkout
    type: and
    and:
      and_sub_policy:
        - {name: slow, type: latency, latency: {threshold_ms: 500}}
        - {name: checkout, type: string_attribute, string_attribute: {key: http.route, values: [/checkout]}}
  - name: no-health
    type: drop
    drop:
      drop_sub_policy:
        - {name: health, type: string_attribute, string_attribute: {key: http.route, values: [/health]}}
"#;
    let k = decide_all(yaml, traces).await;
    // 1: kept by `and`; 2: an error, but `drop` wins over every sample; 3: nothing keeps it.
    assert_eq!(k.spans.keys().copied().collect::<Vec<_>>(), vec![1]);
    assert_eq!(k.policy[&1], "slow-checkout");
}

#[tokio::test(start_paused = true)]
async fn composite_shares_a_budget_in_priority_order() {
    // 20 error traces and 20 slow traces of 1 span, all decided in one second; budget 25 spans/s,
    // "errors-first" may use 60% (15), "slow" the rest.
    // Trace 1 is both failed and slow: the first sub-policy in order claims it.
    let mut traces = vec![];
    for t in 1..=20 {
        let mut e = s(t, 1, 0, if t == 1 { 2000 } else { 1 });
        e.error = true;
        traces.push(vec![e]);
    }
    for t in 1..=20 {
        traces.push(vec![s(100 + t, 1, 0, 2000)]);
    }
    let yaml = r#"
always_keep_errors: false
policies:
  - name: budget
    type: composite
    composite:
      max_total_spans_per_second: 25
      policy_order: [errors-first, slow]
      composite_sub_policy:
        - {name: errors-first, type: status_code, status_code: {status_codes: [ERROR]}}
        - {name: slow, type: latency, latency: {threshold_ms: 1000}}
      rate_allocation:
        - {policy: errors-first, percent: 60}
        - {policy: slow, percent: 40}
"#;
    let k = decide_all(yaml, traces.clone()).await;
    let errors = k.spans.keys().filter(|t| **t <= 20).count();
    let slow = k.spans.keys().filter(|t| **t > 100).count();
    assert_eq!((errors, slow), (15, 10));
    assert_eq!(k.policy[&1], "budget/errors-first");
    assert!(k.policy.values().any(|p| p == "budget/slow"));
    // As in the Collector, a sub-policy without an allocation keeps nothing.
    let without = yaml.replace("        - {policy: slow, percent: 40}\n", "");
    let k = decide_all(&without, traces).await;
    let errors = k.spans.keys().filter(|t| **t <= 20).count();
    let slow = k.spans.keys().filter(|t| **t > 100).count();
    assert_eq!((errors, slow), (15, 0));
}

#[tokio::test(start_paused = true)]
async fn decisions_wait_for_decision_wait_or_the_root() {
    let yaml = "decision_wait: 10s\ndecision_wait_after_root_received: 2s\npolicies: [{name: all, type: always_sample}]";
    let (mut p, _) = processor(yaml);
    let mut kept = Kept::default();
    feed(&mut p, &[s(1, 2, 1, 5)], &mut kept).await; // child first: no root yet
    feed(&mut p, &[s(2, 2, 1, 5)], &mut kept).await;
    assert_eq!(
        p.next_deadline(),
        Some(Instant::now() + Duration::from_secs(10))
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    feed(&mut p, &[s(1, 1, 0, 50)], &mut kept).await; // root of trace 1 arrives at t=1s
    tokio::time::advance(Duration::from_millis(1990)).await;
    tick(&mut p, &mut kept).await;
    assert!(kept.spans.is_empty(), "nothing before the root deadline");
    tokio::time::advance(Duration::from_millis(10)).await; // t = 3s = root + 2s
    tick(&mut p, &mut kept).await;
    assert_eq!(kept.spans.keys().copied().collect::<Vec<_>>(), vec![1]);
    tokio::time::advance(Duration::from_millis(6990)).await;
    tick(&mut p, &mut kept).await;
    assert_eq!(
        kept.spans.len(),
        1,
        "trace 2 waits for its full decision_wait"
    );
    tokio::time::advance(Duration::from_millis(10)).await;
    tick(&mut p, &mut kept).await;
    assert_eq!(kept.spans.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn kept_traces_leave_together_while_every_trace_is_decided_on_time() {
    let yaml = "decision_wait: 1s\npolicies: [{name: all, type: always_sample}]";
    let (mut p, _) = processor_with_outbox(yaml);
    let start = Instant::now();
    let mut out = vec![];
    for (i, t) in [1u64, 2, 3].iter().enumerate() {
        if i > 0 {
            tokio::time::advance(Duration::from_millis(30)).await;
        }
        p.process(batch(&[s(*t, 1, 0, 5)]), &mut out)
            .await
            .expect("process");
    }
    // Each trace is decided at its own deadline, and freed then.
    for (t, pending) in [(1000, 2), (1030, 1), (1060, 0)] {
        assert_eq!(p.next_deadline(), Some(start + Duration::from_millis(t)));
        tokio::time::advance(start + Duration::from_millis(t) - Instant::now()).await;
        p.on_tick(Instant::now(), &mut out).await.expect("tick");
        assert_eq!(p.traces.len(), pending);
        assert!(out.is_empty(), "kept spans wait in the outbox");
    }
    // A second after the first was kept, all three leave in one batch.
    assert_eq!(p.next_deadline(), Some(start + Duration::from_millis(2000)));
    tokio::time::advance(Duration::from_millis(900)).await;
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    assert!(out.is_empty(), "not due before the second has passed");
    tokio::time::advance(Duration::from_millis(40)).await;
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    assert_eq!(out.len(), 1, "one batch for the three traces");
    let mut kept = Kept::default();
    collect(&out, &mut kept);
    assert_eq!(kept.spans.len(), 3);
    assert_eq!(p.next_deadline(), None);
    // Shutdown sends what the outbox holds at once.
    p.process(batch(&[s(4, 1, 0, 5)]), &mut out)
        .await
        .expect("process");
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut out = vec![];
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    assert!(out.is_empty());
    p.flush(&mut out).await.expect("flush");
    assert_eq!(out.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn late_spans_follow_the_decision() {
    let yaml =
        "decision_wait: 5s\npolicies: [{name: slow, type: latency, latency: {threshold_ms: 100}}]";
    let (mut p, reg) = processor(yaml);
    let mut kept = Kept::default();
    feed(&mut p, &[s(1, 1, 0, 500), s(2, 1, 0, 5)], &mut kept).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    tick(&mut p, &mut kept).await;
    assert_eq!(kept.spans.keys().copied().collect::<Vec<_>>(), vec![1]);
    // Late: a child of the kept trace and one of the dropped trace.
    feed(&mut p, &[s(1, 7, 1, 1), s(2, 7, 1, 1)], &mut kept).await;
    assert_eq!(
        kept.spans[&1].len(),
        2,
        "late span of a kept trace forwarded at once"
    );
    assert_eq!(kept.policy[&1], "slow");
    assert!(!kept.spans.contains_key(&2));
    assert_eq!(p.traces.len(), 0, "late spans do not start new traces");
    let late = |d: &str| {
        reg.counter(
            LateSpans,
            &[("component", "tail_sampling"), ("decision", d)],
        )
        .get()
    };
    assert_eq!((late("sampled"), late("not_sampled")), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn bounds_decide_the_oldest_early_by_the_same_policies() {
    let yaml = "decision_wait: 30s\nnum_traces: 100\npolicies: [{name: slow, type: latency, latency: {threshold_ms: 1000}}]";
    let (mut p, reg) = processor(yaml);
    let mut kept = Kept::default();
    let mut slow = BTreeSet::new();
    for t in 1..=1000u64 {
        let mut sp = s(t, 1, 0, if t % 10 == 0 { 2000 } else { 10 });
        if t % 37 == 0 {
            sp.error = true;
        }
        if t % 10 == 0 || t % 37 == 0 {
            slow.insert(t);
        }
        feed(&mut p, &[sp], &mut kept).await;
        assert!(p.traces.len() <= 100);
    }
    let early = reg
        .counter(
            EarlyDecisions,
            &[("component", "tail_sampling"), ("reason", "num_traces")],
        )
        .get();
    assert_eq!(early, 900);
    let mut out = vec![];
    p.flush(&mut out).await.expect("flush");
    collect(&out, &mut kept);
    assert_eq!(
        kept.spans.keys().copied().collect::<BTreeSet<_>>(),
        slow,
        "every slow or failed trace kept"
    );

    // max_memory: the measured bytes stay under the bound.
    let (mut p, reg) = processor("decision_wait: 30s\nmax_memory: 1MiB\npolicies: [{name: slow, type: latency, latency: {threshold_ms: 1000}}]");
    let mut kept = Kept::default();
    for t in 1..=5000u64 {
        feed(&mut p, &[s(t, 1, 0, 10), s(t, 2, 1, 10)], &mut kept).await;
        assert!(p.pending_bytes() <= 1 << 20);
    }
    let early = reg
        .counter(
            EarlyDecisions,
            &[("component", "tail_sampling"), ("reason", "max_memory")],
        )
        .get();
    assert!(early > 1000, "{early}");
}

#[tokio::test(start_paused = true)]
async fn a_giant_trace_is_decided_at_once_and_others_on_time() {
    let yaml = "decision_wait: 5s\nmax_spans_per_trace: 10000\npolicies: [{name: all, type: always_sample}]";
    let (mut p, reg) = processor(yaml);
    let mut kept = Kept::default();
    for t in 2..=50 {
        feed(&mut p, &[s(t, 1, 0, 1)], &mut kept).await;
    }
    let giant: Vec<S> = (1..=100_000)
        .map(|i| s(1, i, if i == 1 { 0 } else { 1 }, 1))
        .collect();
    let started = std::time::Instant::now();
    for chunk in giant.chunks(500) {
        feed(&mut p, chunk, &mut kept).await;
    }
    let too_large = reg
        .counter(
            EarlyDecisions,
            &[
                ("component", "tail_sampling"),
                ("reason", "trace_too_large"),
            ],
        )
        .get();
    assert!(too_large >= 1);
    assert_eq!(
        kept.spans[&1].len(),
        100_000,
        "every span of the giant trace forwarded (the first 10000 at once, the rest as late spans)"
    );
    assert!(!kept.spans.contains_key(&2), "the others still wait");
    tokio::time::advance(Duration::from_secs(5)).await;
    tick(&mut p, &mut kept).await;
    assert_eq!(
        kept.spans.len(),
        50,
        "the other 49 traces decided in the first tick at their deadline"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "processing 100k spans took {:?}",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn full_recall_of_slow_and_failed_traces_under_many_concurrent_traces() {
    // 20,000 traces of 4-8 spans, interleaved across batches, arriving over 20 s;
    // 5% slow, 2% failed; some spans arrive after their trace's decision.
    let yaml = "decision_wait: 5s\npolicies:\n  - {name: slow, type: latency, latency: {threshold_ms: 1000}}\n  - {name: base, type: probabilistic, probabilistic: {sampling_percentage: 1}}";
    let (mut p, _) = processor(yaml);
    let mut kept = Kept::default();
    let mut must: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut pending: Vec<(u64, S)> = vec![]; // (arrival ms, span)
    for t in 1..=20_000u64 {
        let n = 4 + next() % 5;
        let slow = next() % 100 < 5;
        let failed = next() % 100 < 2;
        let arrive = t; // one new trace per ms
        for i in 1..=n {
            let mut sp = s(
                t,
                i,
                if i == 1 { 0 } else { 1 },
                if slow && i == 1 { 1500 } else { 20 },
            );
            sp.error = failed && i == 2;
            // 10% of the last spans (never the root nor the failed one) come 8 s late: after the 5 s decision.
            let late = i == n && next() % 10 == 0;
            pending.push((arrive + if late { 8000 } else { next() % 300 }, sp));
            if slow || failed {
                must.entry(t).or_default().insert(i);
            }
        }
    }
    pending.sort_by_key(|(at, _)| *at);
    let mut now_ms = 0;
    for chunk in pending.chunks(400) {
        let at = chunk[0].0;
        if at > now_ms {
            tokio::time::advance(Duration::from_millis(at - now_ms)).await;
            now_ms = at;
            tick(&mut p, &mut kept).await;
        }
        let spans: Vec<S> = chunk.iter().map(|(_, s)| s.clone()).collect();
        feed(&mut p, &spans, &mut kept).await;
    }
    tokio::time::advance(Duration::from_secs(10)).await;
    tick(&mut p, &mut kept).await;
    for (t, spans) in &must {
        assert_eq!(
            kept.spans.get(t),
            Some(spans),
            "trace {t} must be kept whole"
        );
    }
    let baseline = kept.spans.len() - must.len();
    assert!(
        baseline > 50 && baseline < 400,
        "about 1% of healthy traces as baseline: {baseline}"
    );
}

#[tokio::test(start_paused = true)]
async fn adaptive_latency_keeps_each_routes_slowest_tail() {
    let yaml = "decision_wait: 1s\nalways_keep_errors: false\npolicies:\n  - name: adaptive\n    type: adaptive_latency\n    adaptive_latency: {quantile: 0.99, window: 5m, warmup_count: 500, min_threshold_ms: 5}";
    let (mut p, _) = processor(yaml);
    let mut kept = Kept::default();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut uniform = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng >> 11) as f64 / (1u64 << 53) as f64
    };
    // Log-normal latencies: median 20 ms (route A) and 800 ms (route B), sigma 0.5.
    let mut normal = || {
        let (u1, u2) = (uniform().max(1e-12), uniform());
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    };
    let (mut a_ids, mut b_ids) = (BTreeSet::new(), BTreeSet::new());
    let n = 30_000u64;
    for t in 1..=n {
        let route_b = t % 2 == 0;
        let median: f64 = if route_b { 800.0 } else { 20.0 };
        let ms = (median * (0.5 * normal()).exp()).max(1.0) as u64;
        let mut sp = s(t, 1, 0, ms);
        sp.attrs = vec![str_attr("http.route", if route_b { "/b" } else { "/a" })];
        if t > 2000 {
            if route_b {
                b_ids.insert(t);
            } else {
                a_ids.insert(t);
            }
        }
        feed(&mut p, &[sp], &mut kept).await;
        if t % 100 == 0 {
            tokio::time::advance(Duration::from_millis(100)).await;
            tick(&mut p, &mut kept).await;
        }
    }
    tokio::time::advance(Duration::from_secs(2)).await;
    tick(&mut p, &mut kept).await;
    let share = |ids: &BTreeSet<u64>| {
        ids.iter().filter(|t| kept.spans.contains_key(t)).count() as f64 / ids.len() as f64
    };
    let (a, b) = (share(&a_ids), share(&b_ids));
    assert!(
        (0.005..=0.02).contains(&a),
        "route /a keeps {:.2}% (want ~1%)",
        a * 100.0
    );
    assert!(
        (0.005..=0.02).contains(&b),
        "route /b keeps {:.2}% (want ~1%)",
        b * 100.0
    );
}

#[tokio::test(start_paused = true)]
async fn shutdown_decides_pending_traces_unless_told_to_drop() {
    let (mut p, _) = processor("policies: [{name: all, type: always_sample}]");
    let mut kept = Kept::default();
    feed(&mut p, &[s(1, 1, 0, 1), s(2, 1, 0, 1)], &mut kept).await;
    let mut out = vec![];
    p.flush(&mut out).await.expect("flush");
    collect(&out, &mut kept);
    assert_eq!(kept.spans.len(), 2);
    let (mut p, _) = processor(
        "drop_pending_traces_on_shutdown: true\npolicies: [{name: all, type: always_sample}]",
    );
    let mut kept = Kept::default();
    feed(&mut p, &[s(1, 1, 0, 1)], &mut kept).await;
    let mut out = vec![];
    p.flush(&mut out).await.expect("flush");
    assert!(out.is_empty());
}

#[test]
fn memory_accounting_is_within_twice_the_encoded_size() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("rt");
    rt.block_on(async {
        let (mut p, _) = processor(
            "num_traces: 1000000\nmax_memory: 1GiB\npolicies: [{name: all, type: always_sample}]",
        );
        let mut kept = Kept::default();
        let mut encoded = 0;
        for t in 1..=2000u64 {
            let spans: Vec<S> = (1..=5)
                .map(|i| {
                    let mut x = s(t, i, if i == 1 { 0 } else { 1 }, 10);
                    x.attrs = (0..10)
                        .map(|a| {
                            (
                                ["a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9"][a],
                                any_value::Value::StringValue("value".into()),
                            )
                        })
                        .collect();
                    x
                })
                .collect();
            let b = batch(&spans);
            encoded += b.encoded_len();
            let mut out = vec![];
            p.process(b, &mut out).await.expect("process");
            collect(&out, &mut kept);
        }
        let ratio = p.pending_bytes() as f64 / encoded as f64;
        assert!(
            ratio < 2.0,
            "accounted {} bytes for {encoded} encoded: {ratio:.2}x",
            p.pending_bytes()
        );
    });
}

#[test]
fn config_errors_name_the_policy_path() {
    let cfg: Result<TailSamplingConfig, _> = decode(
        &serde_yaml::from_str(
            "policies:\n  - {name: a, type: latency}\n  - {name: a, type: probabilistic, probabilistic: {sampling_percentage: 120}}\n  - {name: r, type: string_attribute, string_attribute: {key: k, values: ['('], enabled_regex_matching: true}}",
        )
        .expect("yaml"),
    );
    let errs = cfg.expect_err("invalid");
    let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"policies[0].latency"), "{paths:?}");
    assert!(paths.contains(&"policies[1].name"), "{paths:?}");
    assert!(
        paths.contains(&"policies[1].probabilistic.sampling_percentage"),
        "{paths:?}"
    );
    assert!(
        paths.contains(&"policies[2].string_attribute.values[0]"),
        "{paths:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_late_error_span_is_kept_and_turns_the_decision() {
    let (mut p, _) = processor(
        "decision_wait: 5s\npolicies: [{name: slow, type: latency, latency: {threshold_ms: 1000}}]",
    );
    let mut kept = Kept::default();
    feed(&mut p, &[s(1, 1, 0, 10)], &mut kept).await;
    tokio::time::advance(Duration::from_secs(5)).await;
    tick(&mut p, &mut kept).await;
    assert!(kept.spans.is_empty(), "healthy and fast: dropped");
    let mut e = s(1, 2, 1, 10);
    e.error = true;
    feed(&mut p, &[e, s(1, 3, 1, 10)], &mut kept).await;
    assert_eq!(
        kept.spans[&1],
        BTreeSet::from([2, 3]),
        "the late error and what follows it are kept"
    );
    assert_eq!(kept.policy[&1], "errors-late");
}

/// Acknowledgements ride with pending traces: a message's fires only once
/// every trace holding its spans is decided (and, if kept, once the output
/// carrying them is gone); a revoked source's traces are dropped without a
/// decision; and a trace whose source re-reads it starts over whole.
#[tokio::test(start_paused = true)]
async fn acknowledgements_wait_for_decisions_and_revoked_traces_start_over() {
    let (mut p, reg) =
        processor("decision_wait: 1s\npolicies: [{ name: all, type: always_sample }]\n");
    // Message 1 carries traces 1 and 2; message 2 the rest of trace 2.
    let (a1, mut r1) = Ack::new();
    let (a2, mut r2) = Ack::new();
    let mut out = vec![];
    p.process(
        batch(&[s(1, 1, 0, 5), s(2, 1, 0, 5)]).with_ack(a1),
        &mut out,
    )
    .await
    .expect("process");
    p.process(batch(&[s(2, 2, 1, 5)]).with_ack(a2), &mut out)
        .await
        .expect("process");
    assert!(out.is_empty());
    assert!(r1.try_recv().is_err(), "fired while its traces are pending");
    tokio::time::advance(Duration::from_secs(2)).await;
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    assert!(!out.is_empty());
    assert!(r1.try_recv().is_err(), "fired before the kept spans left");
    drop(out);
    // Held one more decision_wait, while late spans of the trace may come.
    assert!(
        r1.try_recv().is_err(),
        "fired while late spans may still come"
    );
    tokio::time::advance(Duration::from_secs(1)).await;
    let mut out = vec![];
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    assert_eq!(r1.try_recv(), Ok(true));
    assert_eq!(r2.try_recv(), Ok(true));

    // Revoked: trace 3's source gives it up; it is dropped undecided and
    // not remembered, so the same trace read again is decided afresh.
    let (a3, mut r3) = Ack::new();
    let weak = a3.downgrade();
    let mut out = vec![];
    p.process(
        batch(&[s(3, 1, 0, 5), s(3, 2, 1, 5)]).with_ack(a3),
        &mut out,
    )
    .await
    .expect("process");
    weak.cancel();
    // Read again from the committed offset (a live acknowledgement): the
    // stale copy is dropped and the trace starts over with what is re-read.
    let (a4, mut r4) = Ack::new();
    p.process(batch(&[s(3, 1, 0, 5)]).with_ack(a4.clone()), &mut out)
        .await
        .expect("process");
    assert_eq!(
        r3.try_recv(),
        Ok(true),
        "the stale copy released its message"
    );
    p.process(batch(&[s(3, 2, 1, 5)]).with_ack(a4), &mut out)
        .await
        .expect("process");
    tokio::time::advance(Duration::from_secs(2)).await;
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    let mut kept = Kept::default();
    collect(&out, &mut kept);
    assert_eq!(
        kept.spans.get(&3).map(|s| s.len()),
        Some(2),
        "the re-read trace is whole, each span once"
    );
    drop(out);
    tokio::time::advance(Duration::from_secs(1)).await;
    p.on_tick(Instant::now(), &mut vec![]).await.expect("tick");
    assert_eq!(r4.try_recv(), Ok(true));

    // A trace still pending when its source is revoked is not decided.
    let (a5, _r5) = Ack::new();
    let weak = a5.downgrade();
    let mut out = vec![];
    p.process(batch(&[s(5, 1, 0, 5)]).with_ack(a5), &mut out)
        .await
        .expect("process");
    weak.cancel();
    tokio::time::advance(Duration::from_secs(2)).await;
    p.on_tick(Instant::now(), &mut out).await.expect("tick");
    assert!(out.is_empty(), "a revoked trace was decided");
    let text = reg.render();
    assert!(
        text.contains("causeway_tail_sampling_traces_total{component=\"tail_sampling\",decision=\"revoked\"} 2"),
        "{text}"
    );
}

/// Decisions combine as the Collector combines them: an inverted match
/// that turns a trace away wins over another policy keeping it, and one
/// that accepts it keeps it only when no other policy said no.
#[tokio::test(start_paused = true)]
async fn inverted_matches_combine_as_in_the_collector() {
    let traces = || {
        let mut a = s(1, 1, 0, 2000);
        a.attrs.push(str_attr("env", "test"));
        let mut b = s(2, 1, 0, 2000);
        b.attrs.push(str_attr("env", "prod"));
        let c = s(3, 1, 0, 5);
        vec![vec![a], vec![b], vec![c]]
    };
    let not_test = "{name: not-test, type: string_attribute, string_attribute: {key: env, values: [test], invert_match: true}}";
    let slow = "{name: slow, type: latency, latency: {threshold_ms: 1000}}";
    // Trace 1 is slow, but `env: test` turns it away; 2 is kept by `slow`
    // (the first to keep it); 3 is accepted by the inverted match alone,
    // and `slow` said no.
    let k = decide_all(
        &format!("always_keep_errors: false\npolicies:\n  - {not_test}\n  - {slow}\n"),
        traces(),
    )
    .await;
    assert_eq!(ids(&k), vec![2]);
    assert_eq!(k.policy[&2], "slow");
    // Alone, the inverted match keeps what does not match.
    let k = decide_all(&policy(not_test), traces()).await;
    assert_eq!(ids(&k), vec![2, 3]);
    assert_eq!(k.policy[&3], "not-test");
}

/// The Collector's arithmetic: whole milliseconds, an exclusive lower bound
/// when an upper one is set; an unanchored regular expression; a span
/// budget that must stay strictly under its limit.
#[tokio::test(start_paused = true)]
async fn thresholds_and_patterns_count_as_in_the_collector() {
    let durations = [1000, 1001, 1999, 2000, 2001];
    let traces = || {
        durations
            .iter()
            .enumerate()
            .map(|(i, d)| vec![s(i as u64 + 1, 1, 0, *d)])
            .collect::<Vec<_>>()
    };
    let k = decide_all(
        &policy(
            "{name: l, type: latency, latency: {threshold_ms: 1000, upper_threshold_ms: 2000}}",
        ),
        traces(),
    )
    .await;
    assert_eq!(
        ids(&k),
        vec![2, 3, 4],
        "1000 ms is not above the lower bound"
    );
    let k = decide_all(
        &policy("{name: l, type: latency, latency: {threshold_ms: 1000}}"),
        traces(),
    )
    .await;
    assert_eq!(ids(&k), vec![1, 2, 3, 4, 5]);

    let mut a = s(1, 1, 0, 1);
    a.attrs
        .push(str_attr("http.url", "https://shop/api/v2/cart"));
    let mut b = s(2, 1, 0, 1);
    b.attrs.push(str_attr("http.url", "https://shop/health"));
    let k = decide_all(
        &policy("{name: r, type: string_attribute, string_attribute: {key: http.url, values: ['/api/'], enabled_regex_matching: true}}"),
        vec![vec![a], vec![b]],
    )
    .await;
    assert_eq!(ids(&k), vec![1], "a pattern matches anywhere in the value");

    // 3 traces of 2 spans under a budget of 4 spans a second: 2 + 2 is not under 4.
    let pair = |t: u64| vec![s(t, 1, 0, 1), s(t, 2, 1, 1)];
    let k = decide_all(
        &policy("{name: r, type: rate_limiting, rate_limiting: {spans_per_second: 4}}"),
        vec![pair(1), pair(2), pair(3)],
    )
    .await;
    assert_eq!(k.spans.len(), 1);
}

#[test]
fn unknown_types_and_stray_settings_are_named() {
    let cfg: Result<TailSamplingConfig, _> = decode(
        &serde_yaml::from_str(
            "policies:\n  - {name: a, type: latencyy, latency: {threshold_ms: 1}}\n  - {name: b, type: always_sample, latency: {threshold_ms: 1}, colour: red}\n  - {name: c, type: latency, latency: {threshold_ms: 1, upper: 2}}\n  - {name: d, type: latency, latency: {threshold_ms: 10, upper_threshold_ms: 5, colour: 1}}",
        )
        .expect("yaml"),
    );
    let errs = cfg.expect_err("invalid");
    let at = |p: &str| errs.iter().find(|e| e.path == p).map(|e| e.message.clone());
    assert!(
        at("policies[0].type").is_some_and(|m| m.contains("unknown policy type \"latencyy\"")),
        "{errs:?}"
    );
    assert!(
        at("policies[1].latency").is_some_and(|m| m.contains("does not belong")),
        "{errs:?}"
    );
    assert!(
        at("policies[1].colour").is_some_and(|m| m.contains("unknown field")),
        "{errs:?}"
    );
    assert!(
        at("policies[2].latency.upper").is_some_and(|m| m.contains("unknown field")),
        "{errs:?}"
    );
    // A stray key and a bad value in one policy's settings, in the same run.
    assert!(
        at("policies[3].latency.colour").is_some_and(|m| m.contains("unknown field")),
        "{errs:?}"
    );
    assert!(
        at("policies[3].latency.upper_threshold_ms")
            .is_some_and(|m| m.contains("must not be less than threshold_ms")),
        "{errs:?}"
    );
}

/// `bytes_limiting` keeps traces while its bucket of bytes allows: a burst
/// of three and a half spans' bytes keeps three one-span traces of ten.
#[tokio::test(start_paused = true)]
async fn bytes_limiting_keeps_what_its_bucket_of_bytes_allows() {
    let one = |t: u64| vec![s(t, 1, 0, 1)];
    let req = request(&one(10));
    let size = req.resource_spans[0].scope_spans[0].spans[0].encoded_len() as u64;
    let traces = || (10..20).map(one).collect::<Vec<_>>();
    let yaml = |burst: u64| {
        policy(&format!(
            "{{name: b, type: bytes_limiting, bytes_limiting: {{bytes_per_second: 1, burst_capacity: {burst}}}}}"
        ))
    };
    let k = decide_all(&yaml(size * 7 / 2), traces()).await;
    assert_eq!(k.spans.len(), 3, "a span is {size} bytes");
    let k = decide_all(&yaml(size / 2), traces()).await;
    assert_eq!(k.spans.len(), 0);
}

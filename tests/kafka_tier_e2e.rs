//! A scaled-out tier on a real Apache Kafka broker: sidecar
//! instances of causeway write spans and gateway logs to Kafka with the
//! `kafka` exporter (keyed by trace id), gateway instances read them with
//! the `kafka` receiver in one consumer group, sample, join and analyse.
//! Each trace's spans go through different sidecars, out of order.
//!
//! What is checked: every trace is decided by exactly one gateway while the
//! group is stable, whole (every span) and with its gateway logs joined
//! (`rca.*`); a gateway joining while traces are pending splits none; a
//! gateway killed with SIGKILL and not replaced loses none (the survivors
//! take its partitions after the session timeout and read from the last
//! safe offset; the duplicates are bounded by what was uncommitted at the
//! kill); a rolling restart with static membership rebalances nothing; a
//! message that is not OTLP is skipped, counted and committed.

mod common;

use causeway_scenarios::send::post;
use causeway_scenarios::{case, Case, Rng, CAUSES};
use common::kafka::Broker;
use common::*;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::trace::v1::{ScopeSpans, Span};
use prost::Message;
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const PARTITIONS: i32 = 6;

fn sidecar(dir: &Path, name: &str, broker: &str) -> (Daemon, String) {
    sidecar_with(dir, name, broker, "")
}

/// A sidecar whose `kafka` exporter has `extra` keys (YAML lines under it).
fn sidecar_with(dir: &Path, name: &str, broker: &str, extra: &str) -> (Daemon, String) {
    let http = free_port();
    let config = format!(
        r#"{receivers}exporters:
  kafka:
    brokers: ["{broker}"]
    partition_traces_by_id: true
    partition_logs_by_trace_id: true
{extra}
service:
  pipelines:
    traces: {{ receivers: [otlp], exporters: [kafka] }}
    logs: {{ receivers: [otlp], exporters: [kafka] }}
    metrics: {{ receivers: [otlp], exporters: [kafka] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        receivers = causeway_scenarios::config::otlp_http(http)
    );
    (
        Daemon::start(dir, name, &config),
        format!("http://127.0.0.1:{http}"),
    )
}

fn gateway(dir: &Path, name: &str, broker: &str) -> Daemon {
    gateway_with(dir, name, broker, "")
}

/// A gateway whose `correlate` also has `alerts` (YAML under `correlate:`).
fn gateway_with(dir: &Path, name: &str, broker: &str, alerts: &str) -> Daemon {
    gateway_conf(
        dir,
        name,
        broker,
        r#"    settings: { session.timeout.ms: "6000", heartbeat.interval.ms: "500" }"#,
        alerts,
    )
}

/// A gateway whose `kafka` receiver has `receiver` (YAML lines under it)
/// and whose `correlate` has `alerts`.
fn gateway_conf(dir: &Path, name: &str, broker: &str, receiver: &str, alerts: &str) -> Daemon {
    let config = format!(
        r#"
receivers:
  kafka:
    brokers: ["{broker}"]
    group_id: tier
    initial_offset: earliest
    commit_interval: 500ms
{receiver}
  kafka/metrics:
    brokers: ["{broker}"]
    group_id: metrics-{name}
    initial_offset: earliest
    commit_interval: 500ms
processors:
  tail_sampling:
    decision_wait: 3s
    policies: [{{ name: all, type: always_sample }}]
  correlate:
    evidence_wait: 1s
{alerts}
exporters:
  file/traces: {{ path: "{{dir}}/{name}-traces.jsonl" }}
  file/logs: {{ path: "{{dir}}/{name}-logs.jsonl" }}
  file/metrics: {{ path: "{{dir}}/{name}-metrics.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [kafka], processors: [tail_sampling, correlate], exporters: [file/traces] }}
    logs: {{ receivers: [kafka], processors: [correlate], exporters: [file/logs] }}
    metrics: {{ receivers: [kafka/metrics], processors: [correlate], exporters: [file/metrics] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
    );
    Daemon::start(dir, name, &config)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn cases(rng: &mut Rng, n: u64, first: u64) -> Vec<Case> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_nanos() as u64;
    (first..first + n)
        .map(|i| {
            let mut c = case(rng, CAUSES[(i as usize) % CAUSES.len()], i, now);
            pad(rng, &mut c);
            c
        })
        .collect()
}

/// Grow a case to 5–50 spans: short internal children of its root, in a
/// resource of their own (a service the trace also passes through), so a
/// trace's spans come in more requests and sizes.
fn pad(rng: &mut Rng, c: &mut Case) {
    let have: usize = c
        .spans
        .iter()
        .flat_map(|r| r.scope_spans.iter())
        .map(|s| s.spans.len())
        .sum();
    let want = rng.range(5, 50) as usize;
    let Some(root) = c
        .spans
        .iter()
        .flat_map(|r| r.scope_spans.iter())
        .flat_map(|s| s.spans.iter())
        .find(|s| s.parent_span_id.is_empty())
        .cloned()
    else {
        return;
    };
    let mut extra = Vec::new();
    for k in have..want {
        let mut id = [0u8; 8];
        id[..2].copy_from_slice(&[0xfa, 0xd0]);
        id[2..].copy_from_slice(&(k as u64).to_be_bytes()[2..]);
        let start = root.start_time_unix_nano + (k as u64) * 1_000;
        extra.push(Span {
            trace_id: root.trace_id.clone(),
            span_id: id.to_vec(),
            parent_span_id: root.span_id.clone(),
            name: format!("cache lookup {k}"),
            kind: 1,
            start_time_unix_nano: start,
            end_time_unix_nano: start + 50_000,
            ..Default::default()
        });
    }
    if !extra.is_empty() {
        let mut rs = c.spans[0].clone();
        rs.scope_spans = vec![ScopeSpans {
            spans: extra,
            ..Default::default()
        }];
        c.spans.push(rs);
    }
}

/// Send cases through the sidecars: each trace's resources (services) are
/// spread over the sidecars at random and shuffled; its logs go through one.
fn send(rng: &mut Rng, sidecars: &[String], cases: &[Case]) {
    let client = http_client();
    for chunk in cases.chunks(20) {
        let mut spans = vec![Vec::new(); sidecars.len()];
        let mut logs = vec![Vec::new(); sidecars.len()];
        let mut metrics = vec![Vec::new(); sidecars.len()];
        for c in chunk {
            metrics[rng.range(0, sidecars.len() as u64 - 1) as usize].extend(c.metrics.clone());
            for rs in &c.spans {
                spans[rng.range(0, sidecars.len() as u64 - 1) as usize].push(rs.clone());
            }
            logs[rng.range(0, sidecars.len() as u64 - 1) as usize].extend(c.logs.clone());
        }
        for (i, base) in sidecars.iter().enumerate() {
            let mut rs = std::mem::take(&mut spans[i]);
            // Out of order: children before parents, traces interleaved.
            for k in (1..rs.len()).rev() {
                rs.swap(k, rng.range(0, k as u64) as usize);
            }
            let body = ExportTraceServiceRequest { resource_spans: rs }.encode_to_vec();
            post(&client, &format!("{base}/v1/traces"), body).expect("send spans");
            let body = ExportLogsServiceRequest {
                resource_logs: std::mem::take(&mut logs[i]),
            }
            .encode_to_vec();
            post(&client, &format!("{base}/v1/logs"), body).expect("send logs");
            let body = ExportMetricsServiceRequest {
                resource_metrics: std::mem::take(&mut metrics[i]),
            }
            .encode_to_vec();
            post(&client, &format!("{base}/v1/metrics"), body).expect("send metrics");
        }
    }
}

/// One gateway's copy of a trace: (gateway, span ids, the verdict's rca attributes).
type TraceCopy = (String, BTreeSet<String>, HashMap<String, String>);
/// Span ids and the verdict's rca attributes.
type Written = (BTreeSet<String>, HashMap<String, String>);

/// What each gateway wrote: trace id → its copies.
struct Seen {
    by_trace: HashMap<String, Vec<TraceCopy>>,
}

fn seen(dir: &Path, gateways: &[&str]) -> Seen {
    let mut by_trace: HashMap<String, HashMap<String, Written>> = HashMap::new();
    for g in gateways {
        let lines = read_jsonl(&dir.join(format!("{g}-traces.jsonl")));
        for (_, _, sp) in spans(&lines) {
            let tid = sp["traceId"].as_str().unwrap_or_default().to_lowercase();
            let sid = sp["spanId"].as_str().unwrap_or_default().to_lowercase();
            let e = by_trace
                .entry(tid)
                .or_default()
                .entry(g.to_string())
                .or_default();
            e.0.insert(sid);
            // The verdict is written on the span the analysis started from
            // (the root, or the innermost server span holding most of the time).
            let verdict = attr(&sp["attributes"], "rca.cause").is_some();
            if verdict {
                for a in sp["attributes"].as_array().into_iter().flatten() {
                    let k = a["key"].as_str().unwrap_or_default();
                    if k.starts_with("rca.") {
                        let v = &a["value"];
                        let s = v["stringValue"]
                            .as_str()
                            .map(str::to_string)
                            .unwrap_or_else(|| v.to_string());
                        e.1.insert(k.to_string(), s);
                    }
                }
            }
        }
    }
    Seen {
        by_trace: by_trace
            .into_iter()
            .map(|(t, m)| (t, m.into_iter().map(|(g, (s, r))| (g, s, r)).collect()))
            .collect(),
    }
}

fn span_ids(c: &Case) -> BTreeSet<String> {
    c.spans
        .iter()
        .flat_map(|rs| rs.scope_spans.iter())
        .flat_map(|ss| ss.spans.iter())
        .map(|s| hex(&s.span_id))
        .collect()
}

/// Wait until every span of every case was written: `whole` asks for one
/// gateway holding all of a trace's spans, else the gateways together.
fn wait_written(
    dir: &Path,
    gateways: &[&str],
    cases: &[Case],
    timeout: Duration,
    whole: bool,
) -> Seen {
    let mut missing = 0;
    let start = std::time::Instant::now();
    while start.elapsed() < timeout {
        let s = seen(dir, gateways);
        missing = cases
            .iter()
            .filter(|c| {
                let want = span_ids(c);
                let Some(v) = s.by_trace.get(&hex(&c.trace_id)) else {
                    return true;
                };
                if whole {
                    !v.iter().any(|(_, got, _)| *got == want)
                } else {
                    let all: BTreeSet<String> =
                        v.iter().flat_map(|(_, got, _)| got.clone()).collect();
                    all != want
                }
            })
            .count();
        if missing == 0 {
            return s;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!(
        "{missing} of {} traces not written {} in {timeout:?}",
        cases.len(),
        if whole { "whole" } else { "in full" }
    );
}

/// After partitions moved: every copy holds only the trace's own spans.
/// Returns the copies beyond one per trace, and the traces no single
/// gateway holds whole (decided before their last spans arrived, the rest
/// read by another owner after the move).
fn tally(s: &Seen, cases: &[Case]) -> (usize, usize) {
    let (mut extra, mut split) = (0, 0);
    for c in cases {
        let want = span_ids(c);
        let copies = &s.by_trace[&hex(&c.trace_id)];
        for (g, got, _) in copies {
            assert!(got.is_subset(&want), "{g} wrote spans foreign to the trace");
        }
        split += usize::from(!copies.iter().any(|(_, got, _)| *got == want));
        extra += copies.len() - 1;
    }
    (extra, split)
}

/// Sum of one series over daemons.
fn total(ds: &[&Daemon], series: &str) -> f64 {
    ds.iter().map(|d| d.metric(series).unwrap_or(0.0)).sum()
}

/// Wait until the group's assignment is complete: every partition of both
/// topics owned, and every gateway owning some.
fn wait_assigned(ds: &[&Daemon]) {
    let series = "causeway_kafka_receiver_assigned_partitions{receiver=\"kafka\"}";
    let mut each = Vec::new();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(60) {
        each = ds.iter().map(|d| d.metric(series).unwrap_or(0.0)).collect();
        if each.iter().all(|&n| n > 0.0) && each.iter().sum::<f64>() == f64::from(2 * PARTITIONS) {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the group's assignment is not complete in 60s: partitions owned {each:?}");
}

/// The tier's topics: spans and logs co-partitioned, metrics on two partitions.
fn tier_topics(broker: &Broker) {
    broker.create_topic("otlp_spans", PARTITIONS);
    broker.create_topic("otlp_logs", PARTITIONS);
    broker.create_topic("otlp_metrics", 2);
}

/// A broker with the three topics, two sidecars and three gateways, the
/// group's assignment complete.
struct Tier {
    broker: Broker,
    sidecars: [String; 2],
    _sidecar_daemons: [Daemon; 2],
    gateways: [Daemon; 3],
}

fn tier(dir: &Path, alerts: &str) -> Tier {
    let broker = Broker::start(dir);
    tier_topics(&broker);
    let b = broker.addr();
    let (s1, u1) = sidecar(dir, "sidecar1", &b);
    let (s2, u2) = sidecar(dir, "sidecar2", &b);
    let gateways = [
        gateway_with(dir, "gw1", &b, alerts),
        gateway_with(dir, "gw2", &b, alerts),
        gateway_with(dir, "gw3", &b, alerts),
    ];
    wait_assigned(&gateways.iter().collect::<Vec<_>>());
    Tier {
        broker,
        sidecars: [u1, u2],
        _sidecar_daemons: [s1, s2],
        gateways,
    }
}

fn check_whole_once_and_joined(s: &Seen, cases: &[Case]) {
    for c in cases {
        let t = hex(&c.trace_id);
        let copies = &s.by_trace[&t];
        assert_eq!(
            copies.len(),
            1,
            "trace {t} written by {:?}",
            copies.iter().map(|c| &c.0).collect::<Vec<_>>()
        );
        let (_, got, rca) = &copies[0];
        assert_eq!(*got, span_ids(c), "trace {t} not whole");
        assert!(
            rca.contains_key("rca.cause"),
            "trace {t}: no rca.cause in {rca:?}"
        );
    }
}

#[test]
fn gateways_behind_kafka_decide_each_trace_once_whole_and_joined_across_rebalances() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng::new(17);
    let first = cases(&mut rng, 10_000, 0);
    // An alert on the tier's whole gateway traffic: 90% of what is sent.
    // Each gateway sees about a third, so only an instance that reads every
    // log record (the alerts instance, a group of its own) can fire it.
    let requests: usize = first
        .iter()
        .flat_map(|c| c.logs.iter())
        .flat_map(|r| r.scope_logs.iter())
        .flat_map(|s| s.log_records.iter())
        .filter(|r| is_gateway_record(&r.attributes))
        .count();
    let alerts = format!(
        r#"    alerts:
      interval: 1s
      window: 30m
      rules:
        - alert: TierTraffic
          expr: SELECT scope, value FROM (SELECT 'tier' AS scope, sum(requests) AS value FROM routes) WHERE value >= {}
          for: 0s"#,
        requests * 9 / 10
    );
    let Tier {
        broker,
        sidecars,
        gateways: [g1, g2, g3],
        _sidecar_daemons: _running,
    } = tier(dir.path(), &alerts);
    let b = broker.addr();
    let _alerts = Daemon::start(
        dir.path(),
        "alerts",
        &format!(
            r#"
receivers:
  kafka:
    brokers: ["{b}"]
    group_id: alerts
    initial_offset: earliest
    group_rebalance_strategy: roundrobin
    logs: {{ topic: otlp_logs }}
    metrics: {{ topic: otlp_metrics }}
processors:
  correlate:
{alerts}
exporters:
  file: {{ path: "{{dir}}/alerts-{{signal}}.jsonl" }}
service:
  pipelines:
    logs: {{ receivers: [kafka], processors: [correlate], exporters: [file] }}
    metrics: {{ receivers: [kafka], processors: [correlate], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );

    // A stable group: each trace decided by exactly one gateway.
    send(&mut rng, &sidecars, &first);
    let names = ["gw1", "gw2", "gw3", "gw4"];
    let s = wait_written(dir.path(), &names, &first, Duration::from_secs(180), true);
    check_whole_once_and_joined(&s, &first);
    // The work was shared: every gateway decided some traces.
    for g in &names[..3] {
        let n = s
            .by_trace
            .values()
            .filter(|v| v.iter().any(|(w, _, _)| w == g))
            .count();
        assert!(n > 100, "{g} decided only {n} traces");
    }
    // Logs were keyed alike: each trace's gateway log records went to the
    // gateway that has its spans (co-partitioning), and none was lost.
    let mut log_home: HashMap<String, BTreeSet<&str>> = HashMap::new();
    let mut logs = 0;
    for g in &names {
        let lines = read_jsonl(&dir.path().join(format!("{g}-logs.jsonl")));
        for (res, _, r) in log_records(&lines) {
            // causeway's own records (the RCA events) are not input.
            if attr(&res["attributes"], "service.name").and_then(|v| v["stringValue"].as_str())
                == Some("causeway")
            {
                continue;
            }
            logs += 1;
            if let Some(t) = r["traceId"].as_str().filter(|t| !t.is_empty()) {
                log_home.entry(t.to_lowercase()).or_default().insert(*g);
            }
        }
    }
    let sent_logs: usize = first
        .iter()
        .flat_map(|c| c.logs.iter())
        .flat_map(|r| r.scope_logs.iter())
        .map(|s| s.log_records.len())
        .sum();
    assert_eq!(logs, sent_logs);
    let mut with_logs = 0;
    for c in &first {
        let t = hex(&c.trace_id);
        if let Some(homes) = log_home.get(&t) {
            with_logs += 1;
            let span_home = s.by_trace[&t][0].0.as_str();
            assert_eq!(
                homes.iter().copied().collect::<Vec<_>>(),
                [span_home],
                "trace {t}: logs at {homes:?}, spans at {span_home}"
            );
        }
    }
    assert!(
        with_logs > first.len() / 2,
        "only {with_logs} traces had logs"
    );

    // Metrics are not keyed by trace: every gateway read every point (a
    // group of its own), so each can join any trace with them.
    let sent_points: usize = first
        .iter()
        .flat_map(|c| c.metrics.iter())
        .flat_map(|r| r.scope_metrics.iter())
        .flat_map(|s| s.metrics.iter())
        .map(|m| points(m.data.as_ref()))
        .sum();
    assert!(sent_points > 0);
    for g in &names[..3] {
        wait_for(
            Duration::from_secs(60),
            "every metric point at every gateway",
            || {
                let lines = read_jsonl(&dir.path().join(format!("{g}-metrics.jsonl")));
                let got: usize = metrics(&lines)
                    .iter()
                    .filter(|(res, _)| {
                        attr(&res["attributes"], "service.name")
                            .and_then(|v| v["stringValue"].as_str())
                            != Some("causeway")
                    })
                    .map(|(_, m)| {
                        [
                            "gauge",
                            "sum",
                            "histogram",
                            "summary",
                            "exponentialHistogram",
                        ]
                        .iter()
                        .map(|k| m[*k]["dataPoints"].as_array().map_or(0, Vec::len))
                        .sum::<usize>()
                    })
                    .sum();
                got >= sent_points
            },
        );
    }

    // Alerts in a tier: the alerts instance fires on the whole traffic; no
    // gateway, seeing a third of it, does.
    let fired = |name: &str| {
        log_records(&read_jsonl(&dir.path().join(name)))
            .iter()
            .any(|(_, _, r)| {
                attr(&r["attributes"], "alert.name").and_then(|v| v["stringValue"].as_str())
                    == Some("TierTraffic")
            })
    };
    wait_for(
        Duration::from_secs(60),
        "the alerts instance to fire",
        || fired("alerts-logs.jsonl"),
    );
    for g in &names[..3] {
        assert!(
            !fired(&format!("{g}-logs.jsonl")),
            "{g} fired on a third of the traffic"
        );
    }

    // A fourth gateway joins while traces are pending: a rebalance moves
    // partitions mid-flight. No span is lost; traces pending at the move
    // are decided whole by their new owner. Extra copies (the part of a
    // decided trace that sat in a message read again) and split traces (a
    // trace decided before its last spans came, those read by the new
    // owner) come only with a revocation, and are counted.
    let second = cases(&mut rng, 1500, 20_000);
    let (a, rest) = second.split_at(600);
    send(&mut rng, &sidecars, a);
    let g4 = gateway(dir.path(), "gw4", &b);
    send(&mut rng, &sidecars, rest);
    wait_assigned(&[&g1, &g2, &g3, &g4]);
    let s = wait_written(dir.path(), &names, &second, Duration::from_secs(180), false);
    let (duplicated, split) = tally(&s, &second);
    let gws = [&g1, &g2, &g3, &g4];
    let revoked = total(
        &gws,
        "causeway_kafka_receiver_redelivered_messages_total{receiver=\"kafka\"}",
    );
    let rebalances = total(
        &gws,
        "causeway_kafka_receiver_rebalances_total{receiver=\"kafka\",kind=\"revoke\"}",
    );
    eprintln!(
        "rebalance mid-run: no span lost; {duplicated} extra copies, {split} of {} traces split (late spans read by another owner); {revoked} messages given up at {rebalances} revocations",
        second.len()
    );
    assert!(rebalances >= 3.0, "the fourth gateway caused no revocation");
    assert!(
        duplicated + split == 0 || revoked > 0.0,
        "traces decided twice or split without a revocation giving them up"
    );
    // A split needs late spans (a trace decided before its last spans came).
    let late: f64 = ["sampled", "not_sampled"]
        .iter()
        .map(|d| {
            total(
                &gws,
                &format!(
                    "causeway_tail_sampling_late_spans_total{{component=\"tail_sampling\",decision=\"{d}\"}}"
                ),
            )
        })
        .sum();
    assert!(
        split == 0 || late > 0.0,
        "{split} traces split with no late span"
    );
}

#[test]
fn a_gateway_killed_or_stopped_mid_run_loses_no_trace_and_bad_messages_are_skipped() {
    let dir = tempfile::tempdir().expect("tempdir");
    let Tier {
        broker,
        sidecars,
        gateways: [g1, mut g2, g3],
        _sidecar_daemons: _running,
    } = tier(dir.path(), "");
    let mut rng = Rng::new(23);

    // A message that is not OTLP, on every partition of the spans topic.
    let p = broker.producer();
    for part in 0..PARTITIONS {
        p.send(
            rdkafka::producer::BaseRecord::<(), [u8]>::to("otlp_spans")
                .partition(part)
                .payload(&b"\x0a\xffnot a protobuf request"[..]),
        )
        .expect("produce");
    }
    rdkafka::producer::Producer::flush(&p, Duration::from_secs(10)).expect("flush");

    let all = cases(&mut rng, 3000, 0);
    let (a, rest) = all.split_at(1200);
    send(&mut rng, &sidecars, a);
    // SIGKILL while traces are pending in gw2, then a new gateway.
    wait_for(
        Duration::from_secs(60),
        "gw2 to hold pending traces",
        || {
            g2.metric("causeway_tail_sampling_pending_traces{component=\"tail_sampling\"}")
                .unwrap_or(0.0)
                > 0.0
        },
    );
    let revokes = "causeway_kafka_receiver_rebalances_total{receiver=\"kafka\",kind=\"revoke\"}";
    let before = total(&[&g1, &g3], revokes);
    g2.child.kill().expect("kill -9");
    g2.child.wait().expect("wait");
    // What can come out twice or in pieces is what the group had not
    // committed when gw2 died: the traces in the messages past each
    // partition's committed offset (gw2 commits no more; the survivors'
    // commits only move forward, so whatever is read again lies there).
    let mut uncommitted = uncommitted_traces(&broker, "tier", "otlp_spans");
    assert!(
        !uncommitted.is_empty(),
        "gw2 held pending traces, so something was uncommitted at the kill"
    );
    // No replacement: Kafka notices the dead member after the session
    // timeout (6 s) and gives its partitions to the survivors.
    wait_for(
        Duration::from_secs(60),
        "the group to notice gw2's death",
        || total(&[&g1, &g3], revokes) > before,
    );
    // The rebalance revokes the survivors' own partitions too (eager
    // assignment): each commits what is safe as it gives them up, and the
    // traces it still held are read again by their next owner. Those,
    // uncommitted at the revoke, may be written twice as well.
    uncommitted.extend(uncommitted_traces(&broker, "tier", "otlp_spans"));
    wait_assigned(&[&g1, &g3]);
    send(&mut rng, &sidecars, rest);
    let names = ["gw1", "gw2", "gw3"];
    // gw2's last line may be cut by the kill: read_jsonl skips it.
    let s = wait_written(dir.path(), &names, &all, Duration::from_secs(240), true);
    let (duplicated, split) = tally(&s, &all);
    let repeated: BTreeSet<String> = all
        .iter()
        .map(|c| hex(&c.trace_id))
        .filter(|t| s.by_trace[t].len() > 1)
        .collect();
    eprintln!(
        "kill -9 mid-run, no replacement: no span of {} traces lost, each whole in one gateway; {duplicated} extra copies and {split} traces split, of {} traces uncommitted at the kill or the rebalance",
        all.len(),
        uncommitted.len()
    );
    assert!(
        repeated.is_subset(&uncommitted),
        "traces written twice that were committed at the kill and at the rebalance: {:?}",
        repeated
            .difference(&uncommitted)
            .take(5)
            .collect::<Vec<_>>()
    );
    assert!(
        duplicated <= uncommitted.len(),
        "{duplicated} extra copies, more than the {} traces uncommitted at the kill",
        uncommitted.len()
    );
    assert_eq!(split, 0, "every trace whole in some gateway");

    // The bad messages: counted once each, logged with where they are, and committed past.
    let live = [&g1, &g3];
    let invalid = total(
        &live,
        "causeway_kafka_receiver_messages_total{receiver=\"kafka\",outcome=\"invalid\"}",
    );
    // gw2 may have skipped some of them before it was killed; if it did not
    // commit past them, their next owner skipped them again.
    assert!(
        invalid <= f64::from(PARTITIONS),
        "invalid messages counted {invalid} times"
    );
    let logged: String = ["gw1", "gw2", "gw3"]
        .iter()
        .map(|n| {
            std::fs::read_to_string(dir.path().join(format!("{n}.stderr"))).unwrap_or_default()
        })
        .collect();
    for part in 0..PARTITIONS {
        assert!(
            logged
                .lines()
                .any(|l| l.contains("not a valid OTLP request")
                    && l.contains("topic=otlp_spans")
                    && l.contains(&format!("partition={part}"))
                    && l.contains("offset=0")),
            "no log line for the bad message on partition {part}"
        );
    }
    let c = broker.consumer("tier");
    wait_for(
        Duration::from_secs(30),
        "commits past every bad message",
        || {
            let mut tpl = rdkafka::TopicPartitionList::new();
            for part in 0..PARTITIONS {
                tpl.add_partition("otlp_spans", part);
            }
            let committed =
                rdkafka::consumer::Consumer::committed_offsets(&c, tpl, Duration::from_secs(10))
                    .expect("committed");
            committed
                .elements()
                .iter()
                .all(|e| matches!(e.offset(), rdkafka::Offset::Offset(o) if o >= 1))
        },
    );

    // A rolling restart: gw3 stops with SIGTERM while it holds pending
    // traces. It commits what is safe, gives up the rest and leaves the
    // group; the survivors take its partitions over and read what it gave
    // up. Nothing is lost.
    let more = cases(&mut rng, 1000, 50_000);
    send(&mut rng, &sidecars, &more[..500]);
    wait_for(
        Duration::from_secs(60),
        "gw3 to hold pending traces",
        || {
            g3.metric("causeway_tail_sampling_pending_traces{component=\"tail_sampling\"}")
                .unwrap_or(0.0)
                > 0.0
        },
    );
    assert!(g3.terminate().success(), "gw3 stops cleanly");
    send(&mut rng, &sidecars, &more[500..]);
    wait_assigned(&[&g1]);
    let s = wait_written(dir.path(), &names, &more, Duration::from_secs(240), false);
    let (duplicated, split) = tally(&s, &more);
    eprintln!(
        "SIGTERM mid-run: no span of {} traces lost; {duplicated} extra copies, {split} traces split",
        more.len()
    );
}

/// The trace ids in the messages of `topic` past `group`'s committed
/// offsets, up to each partition's end now.
fn uncommitted_traces(broker: &Broker, group: &str, topic: &str) -> BTreeSet<String> {
    use rdkafka::consumer::Consumer;
    use rdkafka::Message as _;
    let c = broker.consumer(group);
    let mut tpl = rdkafka::TopicPartitionList::new();
    for part in 0..PARTITIONS {
        tpl.add_partition(topic, part);
    }
    let committed = c
        .committed_offsets(tpl, Duration::from_secs(10))
        .expect("committed");
    let reader = broker.consumer(&format!("{group}-audit"));
    let mut out = BTreeSet::new();
    for e in committed.elements() {
        let from = match e.offset() {
            rdkafka::Offset::Offset(o) => o,
            _ => 0,
        };
        let (_, high) = reader
            .fetch_watermarks(topic, e.partition(), Duration::from_secs(10))
            .expect("watermarks");
        if from >= high {
            continue;
        }
        let mut assign = rdkafka::TopicPartitionList::new();
        assign
            .add_partition_offset(topic, e.partition(), rdkafka::Offset::Offset(from))
            .expect("assign");
        reader.assign(&assign).expect("assign");
        let mut next = from;
        while next < high {
            match reader.poll(Duration::from_secs(10)) {
                Some(Ok(m)) => {
                    next = m.offset() + 1;
                    let Ok(req) =
                        ExportTraceServiceRequest::decode(m.payload().unwrap_or_default())
                    else {
                        continue; // the bad message of the test
                    };
                    for rs in &req.resource_spans {
                        for ss in &rs.scope_spans {
                            out.extend(ss.spans.iter().map(|sp| hex(&sp.trace_id)));
                        }
                    }
                }
                Some(Err(e)) => panic!("audit read: {e}"),
                None => panic!(
                    "audit read of {topic}/{} stalled at {next} of {high}",
                    e.partition()
                ),
            }
        }
    }
    out
}

/// A rolling restart of the gateways with static membership
/// (`group_instance_id`): each comes back within the session timeout as the
/// same member, so the group never rebalances (the member that stays up is
/// neither revoked nor assigned anything), and what the restarting member
/// held pending is read again by its next incarnation: nothing is lost.
/// (The receiver offers `range` and `roundrobin` only: cooperative-sticky
/// would not keep the spans and logs topics co-partitioned.)
#[test]
fn a_rolling_restart_with_static_membership_rebalances_nothing_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let broker = Broker::start(d);
    tier_topics(&broker);
    let b = broker.addr();
    let (_s1, u1) = sidecar(d, "sidecar1", &b);
    let (_s2, u2) = sidecar(d, "sidecar2", &b);
    let sidecars = [u1, u2];
    let gw = |name: &str, instance: &str| {
        gateway_conf(
            d,
            name,
            &b,
            &format!(
                "    group_instance_id: {instance}\n    settings: {{ session.timeout.ms: \"45000\", heartbeat.interval.ms: \"1000\" }}"
            ),
            "",
        )
    };
    let revokes = "causeway_kafka_receiver_rebalances_total{receiver=\"kafka\",kind=\"revoke\"}";
    let assigns = "causeway_kafka_receiver_rebalances_total{receiver=\"kafka\",kind=\"assign\"}";
    let pending = "causeway_tail_sampling_pending_traces{component=\"tail_sampling\"}";
    let ga = gw("gwA", "gw-a");
    let gb = gw("gwB", "gw-b");
    wait_assigned(&[&ga, &gb]);
    // The assignment settled: from here on, any rebalance shows as a count.
    let settled = |d: &Daemon| {
        (
            d.metric(revokes).unwrap_or(0.0),
            d.metric(assigns).unwrap_or(0.0),
        )
    };
    let b_before = settled(&gb);

    let mut rng = Rng::new(31);
    let all = cases(&mut rng, 1500, 0);
    send(&mut rng, &sidecars, &all[..500]);
    wait_for(
        Duration::from_secs(60),
        "gwA to hold pending traces",
        || ga.metric(pending).unwrap_or(0.0) > 0.0,
    );
    assert!(ga.terminate().success(), "gwA stops cleanly");
    let ga2 = gw("gwA2", "gw-a");
    wait_assigned(&[&ga2, &gb]);
    send(&mut rng, &sidecars, &all[500..1000]);
    assert_eq!(
        settled(&gb),
        b_before,
        "gwB saw a rebalance (revokes, assigns) while gwA restarted as the same static member"
    );
    assert_eq!(
        ga2.metric(assigns),
        Some(1.0),
        "gwA's new incarnation assigned once"
    );

    let a_before = settled(&ga2);
    wait_for(
        Duration::from_secs(60),
        "gwB to hold pending traces",
        || gb.metric(pending).unwrap_or(0.0) > 0.0,
    );
    assert!(gb.terminate().success(), "gwB stops cleanly");
    let gb2 = gw("gwB2", "gw-b");
    wait_assigned(&[&ga2, &gb2]);
    send(&mut rng, &sidecars, &all[1000..]);
    let names = ["gwA", "gwA2", "gwB", "gwB2"];
    let s = wait_written(d, &names, &all, Duration::from_secs(240), true);
    assert_eq!(
        settled(&ga2),
        a_before,
        "gwA saw a rebalance while gwB restarted as the same static member"
    );
    let (duplicated, split) = tally(&s, &all);
    eprintln!(
        "rolling restart, static membership: no span of {} traces lost; {duplicated} extra copies, {split} traces split",
        all.len()
    );
    assert_eq!(split, 0, "every trace whole in some gateway");
}

/// Mixed tiers through Kafka, with the real Collector on the other side:
/// the Collector's `kafka` exporter (keyed by trace id) produces to topics
/// two causeway gateways consume with the `kafka` receiver, and causeway's
/// `kafka` exporter produces to a topic the Collector's `kafka` receiver
/// consumes (forwarding to a causeway sink over OTLP/gRPC). Each trace
/// comes out whole (all its spans at one gateway, decided once) and nothing
/// is lost, in both directions.
#[test]
fn the_collectors_kafka_exporter_and_receiver_speak_causeways_wire_format_both_ways() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let broker = Broker::start(d);
    tier_topics(&broker);
    broker.create_topic("to_collector", PARTITIONS);
    let b = broker.addr();

    // Collector → Kafka → causeway.
    let http = free_port();
    let _front = common::peers::Collector::start(
        d,
        "otelcol-producer",
        &format!(
            r#"{receivers}exporters:
  kafka:
    brokers: ["{b}"]
    partition_traces_by_id: true
    traces: {{ topic: otlp_spans, encoding: otlp_proto }}
    logs: {{ topic: otlp_logs, encoding: otlp_proto }}
    metrics: {{ topic: otlp_metrics, encoding: otlp_proto }}
    producer: {{ compression: zstd, required_acks: -1 }}
service:
  telemetry: {{ metrics: {{ level: none }} }}
  pipelines:
    traces: {{ receivers: [otlp], exporters: [kafka] }}
    logs: {{ receivers: [otlp], exporters: [kafka] }}
    metrics: {{ receivers: [otlp], exporters: [kafka] }}
"#,
            receivers = causeway_scenarios::config::otlp_http(http)
        ),
        &[http],
    );
    let gateways = [gateway(d, "gw1", &b), gateway(d, "gw2", &b)];
    wait_assigned(&gateways.iter().collect::<Vec<_>>());
    let mut rng = Rng::new(41);
    let all = cases(&mut rng, 400, 0);
    send(&mut rng, &[format!("http://127.0.0.1:{http}")], &all);
    let s = wait_written(d, &["gw1", "gw2"], &all, Duration::from_secs(120), true);
    check_whole_once_and_joined(&s, &all);
    let read = total(
        &gateways.iter().collect::<Vec<_>>(),
        "causeway_kafka_receiver_messages_total{receiver=\"kafka\",outcome=\"invalid\"}",
    );
    assert_eq!(
        read, 0.0,
        "every message the Collector wrote is valid OTLP to causeway"
    );

    // causeway → Kafka → Collector → causeway sink.
    let sink_grpc = free_port();
    let _sink = Daemon::start(
        d,
        "sink",
        &sink_config(sink_grpc, "sink-traces.jsonl", &["traces"]),
    );
    let _consumer = common::peers::Collector::start(
        d,
        "otelcol-consumer",
        &format!(
            r#"
receivers:
  kafka:
    brokers: ["{b}"]
    group_id: otelcol
    initial_offset: earliest
    traces: {{ topic: to_collector, encoding: otlp_proto }}
exporters:
  otlp:
    endpoint: "127.0.0.1:{sink_grpc}"
    tls: {{ insecure: true }}
service:
  telemetry: {{ metrics: {{ level: none }} }}
  pipelines:
    traces: {{ receivers: [kafka], exporters: [otlp] }}
"#
        ),
        &[],
    );
    let (_sc, url) = sidecar_with(
        d,
        "sidecar-out",
        &b,
        "    traces: { topic: to_collector }\n    producer: { compression: lz4 }",
    );
    let back = cases(&mut rng, 300, 10_000);
    send(&mut rng, &[url], &back);
    wait_for(
        Duration::from_secs(120),
        "every span through the Collector",
        || {
            let s = seen(d, &["sink"]);
            back.iter().all(|c| {
                s.by_trace
                    .get(&hex(&c.trace_id))
                    .is_some_and(|v| v.iter().any(|(_, got, _)| *got == span_ids(c)))
            })
        },
    );
}

/// The compression codec of every record batch in a partition's log
/// segments, as the broker stored them (the batch header's attributes:
/// 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
fn stored_codecs(data: &Path, topic: &str) -> BTreeSet<u8> {
    let mut out = BTreeSet::new();
    for part in 0..PARTITIONS {
        let dir = data.join(format!("{topic}-{part}"));
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = e.path();
            if p.extension().is_none_or(|x| x != "log") {
                continue;
            }
            let b = std::fs::read(&p).expect("segment");
            let mut at = 0usize;
            // baseOffset i64, batchLength i32, then (within the length)
            // partitionLeaderEpoch i32, magic i8, crc u32, attributes i16.
            while at + 23 <= b.len() {
                let len = i32::from_be_bytes(b[at + 8..at + 12].try_into().expect("4")) as usize;
                if len == 0 || at + 12 + len > b.len() {
                    break;
                }
                assert_eq!(b[at + 16], 2, "record batch magic");
                let attrs = u16::from_be_bytes(b[at + 21..at + 23].try_into().expect("2"));
                out.insert((attrs & 7) as u8);
                at += 12 + len;
            }
        }
    }
    out
}

/// Producer compression end to end: three sidecars compress with gzip,
/// lz4 and zstd; the broker keeps each batch as the producer compressed it
/// (read from its log segments on disk); one gateway reads all three topics
/// and every trace comes out whole.
#[test]
fn producer_compression_gzip_lz4_and_zstd_end_to_end() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let broker = Broker::start(d);
    for codec in ["gzip", "lz4", "zstd"] {
        broker.create_topic(&format!("spans_{codec}"), PARTITIONS);
    }
    broker.create_topic("otlp_logs", PARTITIONS);
    broker.create_topic("otlp_metrics", 2);
    let b = broker.addr();
    let receivers: String = ["gzip", "lz4", "zstd"]
        .iter()
        .map(|c| {
            format!(
                "  kafka/{c}:\n    brokers: [\"{b}\"]\n    group_id: gw-{c}\n    initial_offset: earliest\n    traces: {{ topic: spans_{c} }}\n"
            )
        })
        .collect();
    let _gw = Daemon::start(
        d,
        "gwc",
        &format!(
            r#"
receivers:
{receivers}
processors:
  tail_sampling:
    decision_wait: 2s
    policies: [{{ name: all, type: always_sample }}]
exporters:
  file/traces: {{ path: "{{dir}}/gwc-traces.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [kafka/gzip, kafka/lz4, kafka/zstd], processors: [tail_sampling], exporters: [file/traces] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let mut rng = Rng::new(5);
    let mut all = Vec::new();
    let mut running = Vec::new();
    for (i, codec) in ["gzip", "lz4", "zstd"].iter().enumerate() {
        let (sc, url) = sidecar_with(
            d,
            &format!("sidecar-{codec}"),
            &b,
            &format!(
                "    traces: {{ topic: spans_{codec} }}\n    producer: {{ compression: {codec} }}"
            ),
        );
        let cs = cases(&mut rng, 150, 1000 * i as u64);
        send(&mut rng, &[url], &cs);
        all.extend(cs);
        running.push(sc);
    }
    wait_written(d, &["gwc"], &all, Duration::from_secs(120), true);
    for (codec, id) in [("gzip", 1u8), ("lz4", 3), ("zstd", 4)] {
        assert_eq!(
            stored_codecs(&broker.data_dir(), &format!("spans_{codec}")),
            BTreeSet::from([id]),
            "batches of spans_{codec} as the broker stored them"
        );
    }
}

/// SASL/SCRAM-SHA-512 over TLS, against the broker's own SASL_SSL listener
/// (its certificate from a test CA, the user's credentials stored at format
/// time): sidecars and gateways authenticate with librdkafka `settings` and
/// traces flow; a sidecar with a wrong password is refused by the broker,
/// says so, and no password appears in anything either daemon wrote.
#[test]
fn sasl_scram_over_tls_against_the_brokers_own_listener() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let ca = common::ca("kafka-test-ca");
    std::fs::write(d.join("ca.pem"), ca.cert.pem()).expect("ca");
    let (crt, key) = common::leaf(d, &ca, "broker", &["127.0.0.1", "localhost"], false);
    let pem = d.join("broker-keystore.pem");
    std::fs::write(
        &pem,
        std::fs::read_to_string(&key).expect("key") + &std::fs::read_to_string(&crt).expect("crt"),
    )
    .expect("keystore");
    let sasl = free_port();
    let extra = format!(
        "listeners=PLAINTEXT://127.0.0.1:{{port}},CONTROLLER://127.0.0.1:{{controller_port}},SASL_SSL://127.0.0.1:{sasl}
advertised.listeners=PLAINTEXT://127.0.0.1:{{port}},SASL_SSL://127.0.0.1:{sasl}
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location={}
",
        pem.display()
    );
    let broker = Broker::start_formatted(
        d,
        &extra,
        &[
            "--add-scram",
            "SCRAM-SHA-512=[name=alice,password=alice-s3cret-pw]",
        ],
    );
    tier_topics(&broker);
    let secure = format!("127.0.0.1:{sasl}");
    let settings = |password: &str| {
        format!(
            "    settings: {{ security.protocol: SASL_SSL, sasl.mechanisms: SCRAM-SHA-512, sasl.username: alice, sasl.password: \"{password}\", ssl.ca.location: \"{}\" }}",
            d.join("ca.pem").display()
        )
    };
    let gw = Daemon::start(
        d,
        "gw-sasl",
        &format!(
            r#"
receivers:
  kafka:
    brokers: ["{secure}"]
    group_id: tier
    initial_offset: earliest
    commit_interval: 500ms
{}
processors:
  tail_sampling:
    decision_wait: 2s
    policies: [{{ name: all, type: always_sample }}]
exporters:
  file/traces: {{ path: "{{dir}}/gw-sasl-traces.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [kafka], processors: [tail_sampling], exporters: [file/traces] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
            settings("alice-s3cret-pw")
        ),
    );
    let wait_owned = |d: &Daemon, n: f64| {
        wait_for(Duration::from_secs(60), "the partitions assigned", || {
            d.metric("causeway_kafka_receiver_assigned_partitions{receiver=\"kafka\"}") == Some(n)
        })
    };
    wait_owned(&gw, f64::from(PARTITIONS));
    let (_ok, url) = sidecar_with(d, "sidecar-sasl", &secure, &settings("alice-s3cret-pw"));
    let (bad, bad_url) = sidecar_with(d, "sidecar-bad", &secure, &settings("not-the-pw-9f2"));
    let mut rng = Rng::new(13);
    let cs = cases(&mut rng, 200, 0);
    send(&mut rng, &[url], &cs);
    wait_written(d, &["gw-sasl"], &cs, Duration::from_secs(120), true);
    // The wrong password: the broker refuses the handshake, the sidecar says so.
    let more = cases(&mut rng, 5, 90_000);
    send(&mut rng, &[bad_url], &more);
    wait_for(
        Duration::from_secs(60),
        "the refused login reported",
        || {
            bad.stderr("sidecar-bad")
                .to_lowercase()
                .contains("authentication")
        },
    );
    // No password in anything the daemons wrote: logs, /metrics.
    for name in ["gw-sasl", "sidecar-sasl", "sidecar-bad"] {
        let mut all = std::fs::read_to_string(d.join(format!("{name}.stderr"))).unwrap_or_default();
        all += &std::fs::read_to_string(d.join(format!("{name}.stdout"))).unwrap_or_default();
        for secret in ["alice-s3cret-pw", "not-the-pw-9f2"] {
            assert!(!all.contains(secret), "{name} wrote a password");
        }
    }
    for dm in [&gw, &bad] {
        let (_, metrics) = http_get(&dm.telemetry, "/metrics").expect("metrics");
        assert!(!metrics.contains("s3cret") && !metrics.contains("not-the-pw"));
    }
}

/// A three-broker cluster (each node broker and controller), topics with
/// replication factor 3 and `min.insync.replicas` 2, sidecars producing
/// with `acks=all`: one broker killed with SIGKILL mid-run, the sidecars and
/// gateways carry on against the other two, and nothing is lost.
#[test]
fn a_broker_killed_in_a_three_broker_cluster_loses_nothing_with_acks_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let mut cluster = common::kafka::Cluster::start(d, 3);
    cluster.create_topic("otlp_spans", PARTITIONS, 3, 2);
    cluster.create_topic("otlp_logs", PARTITIONS, 3, 2);
    cluster.create_topic("otlp_metrics", 2, 3, 2);
    let b = cluster.bootstrap();
    let acks =
        "    producer: { required_acks: -1 }\n    retry_on_failure: { max_elapsed_time: 120s }";
    let (_s1, u1) = sidecar_with(d, "sidecar1", &b, acks);
    let (_s2, u2) = sidecar_with(d, "sidecar2", &b, acks);
    let sidecars = [u1, u2];
    let gateways = [gateway(d, "gw1", &b), gateway(d, "gw2", &b)];
    wait_assigned(&gateways.iter().collect::<Vec<_>>());
    let mut rng = Rng::new(17);
    let all = cases(&mut rng, 1200, 0);
    send(&mut rng, &sidecars, &all[..400]);
    // Kill the broker that leads the most partitions of the spans topic.
    let victim = {
        use rdkafka::consumer::Consumer;
        let c = cluster.brokers[0].consumer("leaders");
        let md = c
            .fetch_metadata(Some("otlp_spans"), Duration::from_secs(10))
            .expect("metadata");
        let mut by_leader = [0usize; 3];
        for p in md.topics()[0].partitions() {
            by_leader[(p.leader() as usize).saturating_sub(1).min(2)] += 1;
        }
        by_leader
            .iter()
            .enumerate()
            .max_by_key(|(_, n)| **n)
            .map(|(i, _)| i)
            .expect("a leader")
    };
    cluster.brokers[victim].stop();
    send(&mut rng, &sidecars, &all[400..]);
    let s = wait_written(d, &["gw1", "gw2"], &all, Duration::from_secs(240), false);
    let (duplicated, split) = tally(&s, &all);
    eprintln!(
        "broker {} of 3 killed: no span of {} traces lost; {duplicated} extra copies, {split} traces split",
        victim + 1,
        all.len()
    );
}

fn points(d: Option<&Data>) -> usize {
    match d {
        Some(Data::Gauge(g)) => g.data_points.len(),
        Some(Data::Sum(g)) => g.data_points.len(),
        Some(Data::Histogram(g)) => g.data_points.len(),
        Some(Data::ExponentialHistogram(g)) => g.data_points.len(),
        Some(Data::Summary(g)) => g.data_points.len(),
        None => 0,
    }
}

/// One topic for every signal, in OTLP/JSON: the `causeway.signal` header
/// tells the receiver what each message is.
#[test]
fn one_topic_in_otlp_json_carries_every_signal_by_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    broker.create_topic("otlp_all", 3);
    let b = broker.addr();
    let (_side, url) = sidecar_with(
        dir.path(),
        "sidecar",
        &b,
        "    topic: otlp_all\n    encoding: otlp_json",
    );
    let gw = Daemon::start(
        dir.path(),
        "gw",
        &format!(
            r#"
receivers:
  kafka:
    brokers: ["{b}"]
    topic: otlp_all
    encoding: otlp_json
    initial_offset: earliest
    commit_interval: 200ms
exporters:
  file: {{ path: "{{dir}}/gw-{{signal}}.jsonl" }}
service:
  pipelines:
    traces: {{ receivers: [kafka], exporters: [file] }}
    logs: {{ receivers: [kafka], exporters: [file] }}
    metrics: {{ receivers: [kafka], exporters: [file] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#
        ),
    );
    let mut rng = Rng::new(5);
    let cs = cases(&mut rng, 40, 0);
    send(&mut rng, &[url], &cs);
    let want_spans: usize = cs.iter().map(|c| span_ids(c).len()).sum();
    let want_logs: usize = cs
        .iter()
        .flat_map(|c| c.logs.iter())
        .flat_map(|r| r.scope_logs.iter())
        .map(|s| s.log_records.len())
        .sum();
    let want_metrics: usize = cs
        .iter()
        .flat_map(|c| c.metrics.iter())
        .flat_map(|r| r.scope_metrics.iter())
        .map(|s| s.metrics.len())
        .sum();
    wait_for(
        Duration::from_secs(60),
        "every item of every signal",
        || {
            spans(&read_jsonl(&dir.path().join("gw-traces.jsonl"))).len() == want_spans
                && log_records(&read_jsonl(&dir.path().join("gw-logs.jsonl"))).len() == want_logs
                && metrics(&read_jsonl(&dir.path().join("gw-metrics.jsonl"))).len() == want_metrics
        },
    );
    assert_eq!(
        gw.metric("causeway_kafka_receiver_messages_total{receiver=\"kafka\",outcome=\"invalid\"}"),
        Some(0.0)
    );
}

/// Whether `correlate` counts a log record as gateway traffic (a status and
/// a route, or a rate-limit rule, circuit state or response flags).
fn is_gateway_record(a: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> bool {
    let has = |keys: &[&str]| a.iter().any(|kv| keys.contains(&kv.key.as_str()));
    has(&[
        "gateway.rate_limit_rule",
        "rate_limit_rule",
        "gateway.circuit_state",
        "circuit_state",
        "gateway.response_flags",
        "response_flags",
    ]) || (has(&["http.response.status_code", "status_code", "status"])
        && has(&["route_id", "http.route", "gateway.route_id"]))
}

//! A scaled-out tier on a real Kafka-protocol broker (tansu): sidecar
//! instances of causeway write spans and gateway logs to Kafka with the
//! `kafka` exporter (keyed by trace id), gateway instances read them with
//! the `kafka` receiver in one consumer group, sample, join and analyse.
//! Each trace's spans go through different sidecars, out of order.
//!
//! What is checked: every trace is decided by exactly one gateway while the
//! group is stable, whole (every span) and with its gateway logs joined
//! (`rca.*`); a gateway joining while traces are pending splits none; a
//! gateway killed with SIGKILL loses none (the partitions' next owner reads
//! from the last safe offset; the duplicates are counted); a message that
//! is not OTLP is skipped, counted and committed.

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
        r#"
receivers:
  otlp:
    protocols:
      http: {{ endpoint: "127.0.0.1:{http}" }}
exporters:
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
"#
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
    let config = format!(
        r#"
receivers:
  kafka:
    brokers: ["{broker}"]
    group_id: tier
    initial_offset: earliest
    commit_interval: 500ms
    settings: {{ session.timeout.ms: "6000", heartbeat.interval.ms: "500" }}
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
    broker.create_topic("otlp_spans", PARTITIONS);
    broker.create_topic("otlp_logs", PARTITIONS);
    broker.create_topic("otlp_metrics", 2);
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
    let b = broker.addr();
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
    // The broker notices after the session timeout and tells the group to
    // rebalance. (tansu 0.6.0 then keeps the dead member's partitions
    // unassigned until the next member joins, where Kafka would give them
    // to the survivors at once: the replacement started next is that join.)
    wait_for(
        Duration::from_secs(60),
        "the group to notice gw2's death",
        || total(&[&g1, &g3], revokes) > before,
    );
    send(&mut rng, &sidecars, rest);
    let g4 = gateway(dir.path(), "gw4", &b);
    wait_assigned(&[&g1, &g3, &g4]);
    let names = ["gw1", "gw2", "gw3", "gw4"];
    // gw2's last line may be cut by the kill: read_jsonl skips it.
    let s = wait_written(dir.path(), &names, &all, Duration::from_secs(240), false);
    let (duplicated, split) = tally(&s, &all);
    eprintln!(
        "kill -9 mid-run: no span of {} traces lost; {duplicated} extra copies (read again from the last safe offset), {split} traces split",
        all.len()
    );

    // The bad messages: counted once each, logged with where they are, and committed past.
    let live = [&g1, &g3, &g4];
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
    let logged: String = ["gw1", "gw2", "gw3", "gw4"]
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
    wait_assigned(&[&g1, &g4]);
    let s = wait_written(dir.path(), &names, &more, Duration::from_secs(240), false);
    let (duplicated, split) = tally(&s, &more);
    eprintln!(
        "SIGTERM mid-run: no span of {} traces lost; {duplicated} extra copies, {split} traces split",
        more.len()
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

//! The deployment material is checked, not just shipped:
//! - the Kubernetes manifests embed the example pipelines verbatim, probe
//!   `/healthz` and `/readyz` on the telemetry port the pipeline opens, set
//!   memory limits, and (sidecar) share the gateway's log volume with the
//!   directory the `gateway_log` receiver tails;
//! - every metric the Grafana dashboard and the Prometheus/vmalert rules
//!   query is one the daemon really exports: a daemon with the gateway
//!   pipeline's parts (OTLP, `kafka_lag` against a real broker, `correlate`,
//!   remote write to an in-test server that decodes snappy protobuf) runs a
//!   scenario, and the names seen on the wire and on `/metrics` are the
//!   reference.

mod common;

use causeway_exporters::victoriametrics::proto::WriteRequest;
use causeway_scenarios::send::{send, Order};
use causeway_scenarios::{case, Rng};
use common::kafka::Broker;
use common::*;
use prost::Message;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn docs(path: &str) -> Vec<serde_yaml::Value> {
    let text = std::fs::read_to_string(root().join(path)).expect(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).expect(path))
        .collect()
}

fn kind<'a>(docs: &'a [serde_yaml::Value], k: &str) -> Vec<&'a serde_yaml::Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(k))
        .collect()
}

fn container<'a>(deploy: &'a serde_yaml::Value, name: &str) -> &'a serde_yaml::Value {
    deploy["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers")
        .iter()
        .find(|c| c["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("container {name}"))
}

/// Checks shared by both manifests; returns the embedded pipeline.
fn check_manifest(
    path: &str,
    example: &str,
    deployment: &str,
) -> (Vec<serde_yaml::Value>, serde_yaml::Value) {
    let d = docs(path);
    let cm = kind(&d, "ConfigMap");
    assert_eq!(cm.len(), 1, "{path}: one ConfigMap");
    let embedded = cm[0]["data"]["pipeline.yaml"]
        .as_str()
        .expect("pipeline.yaml");
    let file = std::fs::read_to_string(root().join(example)).expect(example);
    assert_eq!(embedded, file, "{path} embeds {example} verbatim");
    let pipeline: serde_yaml::Value = serde_yaml::from_str(&file).expect(example);
    let dep = kind(&d, "Deployment")
        .into_iter()
        .find(|x| x["metadata"]["name"].as_str() == Some(deployment))
        .expect("deployment");
    let c = container(dep, "causeway");
    let args: Vec<&str> = c["args"]
        .as_sequence()
        .expect("a list")
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args, ["--config", "/etc/causeway/pipeline.yaml"]);
    let mounts = c["volumeMounts"].as_sequence().expect("volumeMounts");
    let config_vol = mounts
        .iter()
        .find(|m| m["mountPath"].as_str() == Some("/etc/causeway"))
        .expect("config mount")["name"]
        .clone();
    let vols = dep["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .expect("a list");
    let v = vols
        .iter()
        .find(|v| v["name"] == config_vol)
        .expect("config volume");
    assert_eq!(
        v["configMap"]["name"], cm[0]["metadata"]["name"],
        "{path}: mounts its ConfigMap"
    );
    // The kubelet probes the pod IP: the telemetry server on all
    // interfaces (then behind TLS and credentials, probed over HTTPS), or,
    // when the telemetry server stays on loopback, the health_check extension.
    let addr = pipeline["service"]["telemetry"]["metrics"]["address"]
        .as_str()
        .expect("telemetry address");
    let port_of = |addr: &str| -> i64 {
        addr.rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port")
    };
    let (port_name, port, paths) = if addr.starts_with("0.0.0.0:") {
        let m = &pipeline["service"]["telemetry"]["metrics"];
        assert!(
            m["tls"]["cert_file"].as_str().is_some() && !m["auth"].is_null(),
            "{example}: the telemetry server beyond loopback has TLS and credentials"
        );
        for p in ["readinessProbe", "livenessProbe"] {
            assert_eq!(c[p]["httpGet"]["scheme"], "HTTPS", "{p}");
        }
        ("telemetry", port_of(addr), ["/readyz", "/healthz"])
    } else {
        assert!(
            addr.starts_with("127.0.0.1:"),
            "{example}: telemetry on loopback: {addr}"
        );
        let hc = pipeline["extensions"]["health_check"]["endpoint"]
            .as_str()
            .expect("a health_check extension for the probes");
        assert!(
            hc.starts_with("0.0.0.0:"),
            "{example}: health_check on the pod IP"
        );
        ("health", port_of(hc), ["/", "/"])
    };
    let named = c["ports"]
        .as_sequence()
        .expect("a list")
        .iter()
        .find(|p| p["name"].as_str() == Some(port_name))
        .expect("the probed port");
    assert_eq!(named["containerPort"].as_i64(), Some(port));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], paths[0]);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], paths[1]);
    for p in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[p]["httpGet"]["port"], port_name);
    }
    assert!(
        c["resources"]["limits"]["memory"].as_str().is_some(),
        "{path}: a memory limit"
    );
    // State where the pipeline writes it.
    assert!(mounts
        .iter()
        .any(|m| m["mountPath"].as_str() == Some("/var/lib/causeway")));
    assert!(
        file.contains("/var/lib/causeway/"),
        "{example} keeps state under /var/lib/causeway"
    );
    (d, pipeline)
}

#[test]
fn kubernetes_manifests_embed_the_examples_and_probe_the_daemon() {
    let (d, pipeline) = check_manifest(
        "deploy/kubernetes/gateway.yaml",
        "examples/gateway.yaml",
        "causeway-gateway",
    );
    let svc = kind(&d, "Service");
    assert_eq!(svc.len(), 1);
    let ports: BTreeSet<i64> = svc[0]["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|p| p["port"].as_i64())
        .collect();
    assert_eq!(ports, BTreeSet::from([4317, 4318, 8888]));
    for (proto, port) in [("grpc", "4317"), ("http", "4318")] {
        let ep = pipeline["receivers"]["otlp"]["protocols"][proto]["endpoint"]
            .as_str()
            .unwrap();
        assert_eq!(
            ep,
            format!("0.0.0.0:{port}"),
            "the gateway listens where the Service sends"
        );
        // Reachable beyond the pod: TLS from the mounted Secret, and a token.
        let p = &pipeline["receivers"]["otlp"]["protocols"][proto];
        assert!(
            p["tls"]["cert_file"]
                .as_str()
                .is_some_and(|f| f.contains("/etc/causeway-tls")),
            "{proto}: TLS by default"
        );
        assert!(
            p["auth"]["bearer_token"].as_str().is_some(),
            "{proto}: a bearer token by default"
        );
    }
    assert!(
        pipeline["service"]["telemetry"]["metrics"]["tls"]["cert_file"]
            .as_str()
            .is_some()
    );
    let dep = kind(&d, "Deployment")[0];
    let c = container(dep, "causeway");
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(c[probe]["httpGet"]["scheme"], "HTTPS", "{probe}");
    }
    let tls_mount = c["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|m| m["mountPath"].as_str() == Some("/etc/causeway-tls"))
        .expect("the TLS Secret mounted")["name"]
        .clone();
    assert!(dep["spec"]["template"]["spec"]["volumes"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|v| v["name"] == tls_mount && v["secret"]["secretName"].as_str().is_some()));
    assert!(c["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "CAUSEWAY_OTLP_TOKEN"
            && e["valueFrom"]["secretKeyRef"]["name"].as_str().is_some()));

    let (d, pipeline) = check_manifest(
        "deploy/kubernetes/sidecar.yaml",
        "examples/sidecar.yaml",
        "checkout",
    );
    let dep = kind(&d, "Deployment")[0];
    let include = pipeline["receivers"]["gateway_log"]["include"][0]
        .as_str()
        .unwrap();
    let dir = Path::new(include).parent().unwrap().to_str().unwrap();
    let mount_of = |c: &str| {
        container(dep, c)["volumeMounts"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"].as_str() == Some(dir))
            .unwrap_or_else(|| panic!("{c} mounts {dir}"))["name"]
            .clone()
    };
    assert_eq!(
        mount_of("gateway"),
        mount_of("causeway"),
        "the gateway's log volume is shared"
    );
    assert_eq!(
        pipeline["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].as_str(),
        Some("127.0.0.1:4317"),
        "the sidecar takes OTLP from its pod only"
    );
    let app_env = container(dep, "app")["env"].as_sequence().unwrap();
    assert!(app_env
        .iter()
        .any(|e| e["value"].as_str() == Some("http://127.0.0.1:4318")));
}

/// Every listener an example or a manifest opens beyond loopback, but the
/// probes' (`health_check`), has TLS and credentials: the OTLP receivers'
/// protocols, the telemetry server (the page, its API, `/metrics`), zpages
/// and pprof. Each config is also given to the real binary's `validate`
/// (which refuses an exposed telemetry server, zpages or pprof), with the
/// Secrets a deployment mounts stood in for by throwaway ones.
/// Every example (and so every manifest, which embeds them) runs the
/// memory limiter, first in every pipeline: one memory budget for the
/// process whatever the pipeline (issue #34).
#[test]
fn every_example_runs_the_memory_limiter_first_in_every_pipeline() {
    let mut n = 0;
    for e in std::fs::read_dir(root().join("examples"))
        .unwrap()
        .flatten()
    {
        let p = e.path();
        if p.extension().is_none_or(|x| x != "yaml") {
            continue;
        }
        let v: serde_yaml::Value =
            serde_yaml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let ml = &v["processors"]["memory_limiter"];
        assert!(
            ml["check_interval"].as_str().is_some() && ml["limit_percentage"].as_u64().is_some(),
            "{}: no memory_limiter with a limit",
            p.display()
        );
        for (name, pipe) in v["service"]["pipelines"].as_mapping().unwrap() {
            assert_eq!(
                pipe["processors"][0].as_str(),
                Some("memory_limiter"),
                "{}: pipeline {name:?} does not start with memory_limiter",
                p.display()
            );
        }
        n += 1;
    }
    assert!(n >= 10, "{n} examples");
}

#[test]
fn no_example_or_manifest_serves_beyond_loopback_without_tls_and_credentials() {
    let mut configs: Vec<(String, String)> = Vec::new();
    let mut names: Vec<_> = std::fs::read_dir(root().join("examples"))
        .expect("examples")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    names.sort();
    for p in names {
        configs.push((
            p.display().to_string(),
            std::fs::read_to_string(&p).expect("example"),
        ));
    }
    for m in [
        "deploy/kubernetes/gateway.yaml",
        "deploy/kubernetes/sidecar.yaml",
        "deploy/kubernetes/gateway-kafka.yaml",
    ] {
        for (i, cm) in kind(&docs(m), "ConfigMap").iter().enumerate() {
            let text = cm["data"]["pipeline.yaml"].as_str().expect("pipeline.yaml");
            configs.push((format!("{m} ConfigMap {i}"), text.to_string()));
        }
    }
    assert!(configs.len() >= 13, "{} configs", configs.len());
    let beyond = causeway_core::exposure::beyond_loopback;
    // The Secret a deployment mounts, stood in for: tls.crt and tls.key.
    let tls = tempfile::tempdir().expect("tempdir");
    leaf(tls.path(), &ca("deploy-test"), "tls", &["localhost"], false);
    let mut problems = Vec::new();
    for (name, text) in &configs {
        let v: serde_yaml::Value = serde_yaml::from_str(text).expect("yaml");
        let mut listeners: Vec<(String, &serde_yaml::Value)> = Vec::new();
        if let Some(rs) = v["receivers"].as_mapping() {
            for (id, r) in rs {
                let id = id.as_str().unwrap_or("");
                if id == "otlp" || id.starts_with("otlp/") {
                    for proto in ["grpc", "http"] {
                        let p = &r["protocols"][proto];
                        if !p.is_null() {
                            listeners.push((format!("receivers.{id}.protocols.{proto}"), p));
                        }
                    }
                }
            }
        }
        for ext in ["zpages", "pprof"] {
            if !v["extensions"][ext].is_null() {
                listeners.push((format!("extensions.{ext}"), &v["extensions"][ext]));
            }
        }
        let m = &v["service"]["telemetry"]["metrics"];
        let tel = m["address"]
            .as_str()
            .unwrap_or("127.0.0.1:8888")
            .to_string();
        for (what, l) in listeners {
            let ep = l["endpoint"].as_str().unwrap_or("localhost:0");
            if beyond(ep) && (l["tls"].is_null() || l["auth"].is_null()) {
                problems.push(format!(
                    "{name}: {what} at {ep} without TLS and credentials"
                ));
            }
        }
        if beyond(&tel) && (m["tls"].is_null() || m["auth"].is_null()) {
            problems.push(format!(
                "{name}: the telemetry server at {tel} without TLS and credentials"
            ));
        }
        if let Some(host) = m["readers"][0]["pull"]["exporter"]["prometheus"]["host"].as_str() {
            if beyond(host) && (m["tls"].is_null() || m["auth"].is_null()) {
                problems.push(format!(
                    "{name}: the telemetry server on {host} without TLS and credentials"
                ));
            }
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("pipeline.yaml");
        std::fs::write(&file, text).expect("write");
        let out = std::process::Command::new(BIN)
            .args(["validate", "--config"])
            .arg(&file)
            .env("CAUSEWAY_TLS_DIR", tls.path())
            .env("CAUSEWAY_OTLP_TOKEN", "t")
            .env("CAUSEWAY_TELEMETRY_TOKEN", "t")
            .env("POD_NAME", "p")
            .output()
            .expect("validate");
        if !out.status.success() {
            problems.push(format!(
                "{name}: validate refuses it: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The metric names a PromQL expression reads: identifiers that are not
/// functions, keywords, label names in `by (…)` / matchers, or numbers.
fn metric_names(expr: &str) -> BTreeSet<String> {
    // Aggregations may put `by (…)` between their name and their argument.
    const KEYWORDS: [&str; 26] = [
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "bool",
        "and",
        "or",
        "unless",
        "offset",
        "inf",
        "nan",
        "atan2",
        "sum",
        "avg",
        "min",
        "max",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
    ];
    let mut out = BTreeSet::new();
    let b = expr.as_bytes();
    let mut i = 0;
    let mut skip_group = false;
    while i < b.len() {
        let c = b[i] as char;
        match c {
            '"' | '\'' | '`' => {
                i += 1;
                while i < b.len() && b[i] as char != c {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            '{' | '[' => {
                let close = if c == '{' { '}' } else { ']' };
                while i < b.len() && b[i] as char != close {
                    if b[i] == b'"' {
                        i += 1;
                        while i < b.len() && b[i] != b'"' {
                            i += if b[i] == b'\\' { 2 } else { 1 };
                        }
                    }
                    i += 1;
                }
                i += 1;
            }
            '(' if skip_group => {
                while i < b.len() && b[i] != b')' {
                    i += 1;
                }
                skip_group = false;
                i += 1;
            }
            '$' => {
                i += 1;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
            c if c.is_ascii_alphabetic() || c == '_' || c == ':' => {
                let s = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b':')
                {
                    i += 1;
                }
                let word = &expr[s..i];
                let mut j = i;
                while j < b.len() && b[j] == b' ' {
                    j += 1;
                }
                let call = j < b.len() && b[j] == b'(';
                if matches!(
                    word,
                    "by" | "without" | "on" | "ignoring" | "group_left" | "group_right"
                ) {
                    skip_group = true;
                } else if !call && !KEYWORDS.contains(&word.to_ascii_lowercase().as_str()) {
                    out.insert(word.to_string());
                }
            }
            c if c.is_ascii_digit() => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                    i += 1;
                }
            }
            _ => i += 1,
        }
    }
    out
}

#[test]
fn promql_metric_names_are_extracted() {
    assert_eq!(
        metric_names(
            r#"sum by (route_id, cause) (rate(causeway_rca_traces_total{cause!="unknown",route_id=~"$route"}[$__rate_interval])) * 60 > 10"#
        ),
        BTreeSet::from(["causeway_rca_traces_total".to_string()])
    );
    assert_eq!(
        metric_names("max by (component) (a_size / b_capacity) > 0.8 and on (x) c"),
        BTreeSet::from([
            "a_size".to_string(),
            "b_capacity".to_string(),
            "c".to_string()
        ])
    );
}

/// A remote-write endpoint that decodes snappy protobuf and keeps the names.
fn remote_write_sink() -> (String, Arc<Mutex<BTreeSet<String>>>) {
    let names: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let n = names.clone();
    let app = axum::Router::new().route(
        "/api/v1/write",
        axum::routing::post(move |body: axum::body::Bytes| {
            let n = n.clone();
            async move {
                let Ok(raw) = snap::raw::Decoder::new().decompress_vec(&body) else {
                    return axum::http::StatusCode::BAD_REQUEST;
                };
                let Ok(req) = WriteRequest::decode(raw.as_slice()) else {
                    return axum::http::StatusCode::BAD_REQUEST;
                };
                let mut n = n.lock().expect("lock");
                for ts in req.timeseries {
                    if let Some(l) = ts.labels.iter().find(|l| l.name == "__name__") {
                        n.insert(l.value.clone());
                    }
                }
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let url = serve_in_thread(app);
    (url, names)
}

#[test]
fn dashboard_and_rule_files_query_metrics_the_daemon_exports() {
    // What the material queries.
    let dash: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("deploy/grafana/causeway-dashboard.json"))
            .expect("dashboard"),
    )
    .expect("the dashboard is JSON");
    assert!(dash["title"].is_string() && dash["uid"].is_string());
    let mut queried: BTreeSet<String> = BTreeSet::new();
    let panels = dash["panels"].as_array().expect("panels");
    let mut n_targets = 0;
    for p in panels {
        for t in p["targets"].as_array().into_iter().flatten() {
            let e = t["expr"].as_str().expect("expr");
            let names = metric_names(e);
            assert!(!names.is_empty(), "panel {:?}: {e}", p["title"]);
            queried.extend(names);
            n_targets += 1;
        }
    }
    assert!(n_targets >= 10, "{n_targets} queries");
    for v in dash["templating"]["list"].as_array().unwrap() {
        if let Some(q) = v["definition"].as_str() {
            let inner = q
                .trim_start_matches("label_values(")
                .split(',')
                .next()
                .unwrap();
            queried.insert(inner.trim().to_string());
        }
    }
    let rules = docs("deploy/prometheus/causeway-alerts.yaml");
    let mut n_rules = 0;
    for g in rules[0]["groups"].as_sequence().expect("groups") {
        assert!(g["name"].is_string());
        for r in g["rules"].as_sequence().expect("rules") {
            let alert = r["alert"].as_str().expect("alert");
            let expr = r["expr"].as_str().expect("expr");
            assert!(
                r["for"].is_string() && r["labels"]["severity"].is_string(),
                "{alert}"
            );
            assert!(r["annotations"]["summary"].is_string(), "{alert}");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{alert}: {expr}");
            queried.extend(names);
            n_rules += 1;
        }
    }
    assert!(n_rules >= 5);

    // What the daemon exports: a broker with a lagging group, a scenario
    // through OTLP, remote write to the in-test sink, and /metrics.
    let dir = tempfile::tempdir().expect("tempdir");
    let broker = Broker::start(dir.path());
    broker.create_topic("orders", 1);
    let p = broker.producer();
    broker.produce(&p, "orders", 0, 20);
    let c = broker.consumer("shipping");
    broker.consume(&c, "orders", 0, 5);
    broker.create_topic("orders-retry", 1);
    let (vm, names) = remote_write_sink();
    let http = free_port();
    let am = AlertSink::start();
    let config = format!(
        r#"{receivers}  kafka_lag:
    brokers: ["{broker}"]
    interval: 300ms
    retry_topics: '.*-retry'
processors:
  tail_sampling:
    decision_wait: 300ms
    policies: [{{ name: all, type: always_sample }}]
  correlate:
    alerts:
      interval: 200ms
      rules:
        - alert: Any
          expr: SELECT route_id, count(*) AS value FROM rca GROUP BY route_id
exporters:
  file: {{ path: "{{dir}}/out-{{signal}}.jsonl" }}
  victoriametrics: {{ endpoint: "{vm}" }}
  alertmanager: {{ endpoint: "{am}" }}
service:
  pipelines:
    traces: {{ receivers: [otlp], processors: [tail_sampling, correlate], exporters: [file] }}
    logs: {{ receivers: [otlp], processors: [correlate], exporters: [file, alertmanager] }}
    metrics: {{ receivers: [otlp, kafka_lag], processors: [correlate], exporters: [victoriametrics] }}
  telemetry: {{ metrics: {{ address: "{{telemetry}}" }} }}
"#,
        receivers = causeway_scenarios::config::otlp_http(http),
        broker = broker.addr(),
        am = am.url
    );
    let d = Daemon::start(dir.path(), "exports", &config);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let client = http_client();
    let mut rng = Rng::new(3);
    let cases = vec![
        case(&mut rng, "circuit_open", 0, now),
        case(&mut rng, "consumer_lag", 1, now),
    ];
    send(
        &client,
        &format!("http://127.0.0.1:{http}"),
        &cases,
        Order::LogsFirst,
    )
    .expect("send");
    let exported = |d: &Daemon| -> BTreeSet<String> {
        let mut all = names.lock().unwrap().clone();
        if let Some((_, body)) = http_get(&d.telemetry, "/metrics") {
            for l in body.lines().filter(|l| !l.starts_with('#')) {
                if let Some(name) = l.split(['{', ' ']).next() {
                    all.insert(name.to_string());
                }
            }
        }
        all
    };
    let start = std::time::Instant::now();
    while !queried.is_subset(&exported(&d)) && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let seen = exported(&d);
    let missing: Vec<&String> = queried.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "queried but never exported: {missing:?}\nexported: {:?}",
        exported(&d)
    );
}

/// The scaled-out tier: the manifest embeds the tier-2 examples verbatim,
/// the gateway pods share one group for traces and logs but each reads the
/// metrics with a group of its own, exactly one pod evaluates alerts, the
/// tier-2 queues stay in memory (Kafka is the buffer), and the sidecar
/// example keys what it writes by trace id on the topics tier 2 reads.
#[test]
fn kafka_tier_manifest_and_examples_fit_together() {
    let d = docs("deploy/kubernetes/gateway-kafka.yaml");
    let deploys = kind(&d, "Deployment");
    let maps = kind(&d, "ConfigMap");
    let mut pipelines = Vec::new();
    for (name, example) in [
        (
            "causeway-gateway-kafka",
            "examples/tier2-gateway-kafka.yaml",
        ),
        ("causeway-alerts-kafka", "examples/tier2-alerts-kafka.yaml"),
    ] {
        let cm = maps
            .iter()
            .find(|m| m["metadata"]["name"].as_str() == Some(name))
            .expect("ConfigMap");
        let file = std::fs::read_to_string(root().join(example)).expect(example);
        assert_eq!(
            cm["data"]["pipeline.yaml"].as_str(),
            Some(file.as_str()),
            "{name} embeds {example}"
        );
        let dep = deploys
            .iter()
            .find(|x| x["metadata"]["name"].as_str() == Some(name))
            .expect("Deployment");
        let c = container(dep, "causeway");
        assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
        assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
        assert_eq!(c["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
        assert!(c["resources"]["limits"]["memory"].as_str().is_some());
        let p: serde_yaml::Value = serde_yaml::from_str(&file).expect(example);
        assert_eq!(
            p["service"]["telemetry"]["metrics"]["address"],
            "0.0.0.0:8888"
        );
        assert!(
            !file.contains("storage:"),
            "{example}: no disk queue (Kafka is the buffer; an emptyDir would lose what it counted as safe)"
        );
        pipelines.push((dep, c, p));
    }
    let (gw_dep, gw_c, gw) = &pipelines[0];
    assert!(gw_dep["spec"]["replicas"].as_i64().unwrap_or(0) >= 2);
    assert!(gw_c["env"]
        .as_sequence()
        .expect("env")
        .iter()
        .any(|e| e["name"] == "POD_NAME"
            && e["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"));
    let shared = gw["receivers"]["kafka"]["group_id"]
        .as_str()
        .expect("group");
    assert!(
        !shared.contains("${"),
        "the traces/logs group is shared by the tier"
    );
    assert_eq!(
        gw["receivers"]["kafka"]["group_rebalance_strategy"]
            .as_str()
            .unwrap_or("range"),
        "range",
        "co-partitioning needs range assignment"
    );
    let own = gw["receivers"]["kafka/metrics"]["group_id"]
        .as_str()
        .expect("group");
    assert!(
        own.contains("${env:POD_NAME}"),
        "metrics: one group per pod ({own})"
    );
    assert!(
        gw["processors"]["correlate"]["alerts"].is_null(),
        "the gateways evaluate no alerts (each sees 1/N)"
    );
    let (al_dep, _, al) = &pipelines[1];
    assert_eq!(al_dep["spec"]["replicas"].as_i64(), Some(1));
    assert!(al["processors"]["correlate"]["alerts"]["rules"]
        .as_sequence()
        .is_some_and(|r| !r.is_empty()));
    assert_ne!(
        al["receivers"]["kafka"]["group_id"],
        gw["receivers"]["kafka"]["group_id"]
    );

    let side: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(root().join("examples/tier1-sidecar-kafka.yaml"))
            .expect("sidecar"),
    )
    .expect("yaml");
    let k = &side["exporters"]["kafka"];
    assert_eq!(k["partition_traces_by_id"], true);
    assert_eq!(k["partition_logs_by_trace_id"], true);
    for s in ["traces", "logs"] {
        assert_eq!(
            k[s]["topic"], gw["receivers"]["kafka"][s]["topic"],
            "{s} topic"
        );
    }
    assert_eq!(
        k["metrics"]["topic"],
        gw["receivers"]["kafka/metrics"]["metrics"]["topic"]
    );
}

/// The image's default pipeline (deploy/docker/pipeline.yaml, as the
/// Dockerfile copies it) answers on an address beyond loopback, as `docker
/// run -p 4318:4318` needs (the repository's pipeline.yaml binds 127.0.0.1,
/// which a published port never reaches), and the trace lands in its data
/// directory. The build context leaves the test beds' modules out.
#[test]
fn the_images_default_pipeline_is_reachable_beyond_loopback() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    assert!(dockerfile.contains("COPY deploy/docker/pipeline.yaml /etc/causeway/pipeline.yaml"));
    assert!(dockerfile.contains("--profile dist"));
    let ignore = std::fs::read_to_string(root().join(".dockerignore")).expect(".dockerignore");
    assert!(ignore
        .lines()
        .any(|l| l.trim() == "tests/testbed/node_modules"));
    // This host's address on its default route (a UDP "connect" sends nothing).
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").expect("udp");
    let ip = sock
        .connect("192.0.2.1:9")
        .and_then(|_| sock.local_addr())
        .map(|a| a.ip())
        .expect("a non-loopback address on this machine");
    assert!(!ip.is_loopback(), "{ip}");
    let dir = tempfile::tempdir().expect("dir");
    let (grpc, http, tel) = (free_port(), free_port(), free_port());
    let data = dir.path().join("data");
    let d = Daemon::spawn(
        dir.path(),
        "docker-default",
        &[
            "--config",
            &root()
                .join("deploy/docker/pipeline.yaml")
                .display()
                .to_string(),
        ],
        &[
            ("CAUSEWAY_OTLP_GRPC_ENDPOINT", format!("0.0.0.0:{grpc}")),
            ("CAUSEWAY_OTLP_HTTP_ENDPOINT", format!("0.0.0.0:{http}")),
            ("CAUSEWAY_TELEMETRY_ENDPOINT", format!("0.0.0.0:{tel}")),
            ("CAUSEWAY_DATA_DIR", data.display().to_string()),
            ("CAUSEWAY_DECISION_WAIT", "200ms".to_string()),
        ],
        format!("127.0.0.1:{tel}"),
    );
    let trace = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"docker-try"}}]},"scopeSpans":[{"spans":[{"traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174","name":"GET /","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]}"#;
    // A plain HTTP/1.1 POST to the host's own address, as a published port forwards it.
    use std::io::{Read, Write};
    let mut conn =
        std::net::TcpStream::connect((ip, http)).expect("OTLP/HTTP reachable beyond loopback");
    write!(
        conn,
        "POST /v1/traces HTTP/1.1\r\nhost: {ip}:{http}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{trace}",
        trace.len()
    )
    .expect("send");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    wait_for(Duration::from_secs(60), "the trace in traces.jsonl", || {
        std::fs::read_to_string(data.join("traces.jsonl"))
            .is_ok_and(|t| t.contains("5b8efff798038103d269b633813fc60c"))
    });
    assert!(d.terminate().success());
}

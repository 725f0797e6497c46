//! What the root-cause test beds share (`tests/rca_testbed.rs`, Node.js;
//! `tests/rca_testbed_polyglot.rs`, Java and Go): starting real servers in
//! process groups, PostgreSQL as the `postgres` user, NGINX from a
//! configuration, and the score of verdicts against the ground truth.

use super::{read_jsonl, spans, Proc};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Start `cmd` in its own process group, its output in `<log>/<name>.log`.
pub fn spawn(name: &'static str, cmd: &mut Command, log: &Path) -> Proc {
    let out = std::fs::File::create(log.join(format!("{name}.log"))).expect("log file");
    let err = out.try_clone().expect("log file");
    use std::os::unix::process::CommandExt;
    let child = cmd
        .process_group(0)
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e} (scripts/test.sh installs it)"));
    Proc(child, name)
}

pub fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
}

/// Wait until `port` accepts; the process's log in the panic if it exits first.
pub fn wait_port(port: u16, what: &str, p: &mut Proc, dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !port_open(port) {
        if let Ok(Some(st)) = p.0.try_wait() {
            let log = std::fs::read_to_string(dir.join(format!("{}.log", p.1))).unwrap_or_default();
            panic!("{what} exited with {st}: {log}");
        }
        assert!(Instant::now() < deadline, "{what} did not open port {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub fn which(candidates: &[&str]) -> PathBuf {
    for c in candidates {
        let p = Path::new(c);
        if p.exists() {
            return p.to_path_buf();
        }
    }
    panic!("none of {candidates:?} exists: scripts/test.sh installs it");
}

fn postgres_bin(name: &str) -> PathBuf {
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("/usr/lib/postgresql: scripts/test.sh installs postgresql")
        .filter_map(|e| e.ok().map(|e| e.path().join("bin").join(name)))
        .filter(|p| p.exists())
        .collect();
    versions.sort();
    versions.pop().expect("a PostgreSQL server binary")
}

/// A PostgreSQL server on `port`, its data in `<d>/pg`, owned by `postgres`
/// (it refuses to run as root); `settings` are `-c` options.
pub fn postgres(d: &Path, port: u16, settings: &[&str]) -> Proc {
    let pgdata = d.join("pg");
    std::fs::create_dir(&pgdata).expect("pg dir");
    let as_postgres = |bin: PathBuf| {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin);
        c
    };
    let chown = Command::new("chown")
        .args(["postgres:postgres", &pgdata.display().to_string()])
        .status()
        .expect("chown");
    assert!(chown.success());
    let chmod = Command::new("chmod")
        .args(["755", &d.display().to_string()])
        .status()
        .expect("chmod");
    assert!(chmod.success());
    let st = as_postgres(postgres_bin("initdb"))
        .args([
            "-D",
            &pgdata.display().to_string(),
            "-A",
            "trust",
            "-U",
            "postgres",
        ])
        .stdout(Stdio::null())
        .status()
        .expect("initdb");
    assert!(st.success(), "initdb failed");
    let mut cmd = as_postgres(postgres_bin("postgres"));
    cmd.args([
        "-D",
        &pgdata.display().to_string(),
        "-p",
        &port.to_string(),
        "-k",
        &pgdata.display().to_string(),
        "-c",
        "listen_addresses=127.0.0.1",
    ]);
    for s in settings {
        cmd.args(["-c", s]);
    }
    let mut pg = spawn("postgres", &mut cmd, d);
    wait_port(port, "postgres", &mut pg, d);
    pg
}

/// A Redis server (Debian's) on `port`, without persistence.
pub fn redis(d: &Path, port: u16) -> Proc {
    redis_with(d, "redis", port, &[])
}

/// A Redis server (Debian's) named `name` on `port`, without persistence,
/// with `more` arguments (`--replicaof host port`), working in `d` (a
/// replica writes the snapshot it syncs from there).
pub fn redis_with(d: &Path, name: &'static str, port: u16, more: &[&str]) -> Proc {
    let mut p = spawn(
        name,
        Command::new(which(&["/usr/bin/redis-server"]))
            .current_dir(d)
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(more),
        d,
    );
    wait_port(port, name, &mut p, d);
    p
}

/// Debian's PostgreSQL exporter in front of the server on `pg_port`,
/// listening on `port`.
pub fn postgres_exporter(d: &Path, pg_port: u16, port: u16) -> Proc {
    let mut p = spawn(
        "postgres_exporter",
        Command::new(which(&["/usr/bin/prometheus-postgres-exporter"]))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .env(
                "DATA_SOURCE_NAME",
                format!("postgresql://postgres@127.0.0.1:{pg_port}/postgres?sslmode=disable"),
            ),
        d,
    );
    wait_port(port, "postgres_exporter", &mut p, d);
    p
}

/// A peer `scripts/peers.sh` built or fetched, by the variable it exports.
pub fn peer(var: &str) -> PathBuf {
    PathBuf::from(std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run through scripts/test.sh (it sources scripts/peers.sh)")
    }))
}

/// Wait for a load driver to finish; its log in the panic if it failed.
/// A test bed's directory; `CAUSEWAY_TESTBED_KEEP` keeps it (logs, truth,
/// verdicts), pass or fail.
pub fn bed_dir() -> tempfile::TempDir {
    let mut dir = tempfile::tempdir().expect("tempdir");
    if std::env::var_os("CAUSEWAY_TESTBED_KEEP").is_some() {
        dir.disable_cleanup(true);
        eprintln!("test bed directory: {}", dir.path().display());
    }
    dir
}

/// The annotated traces of `traces` once every one of `ids` has its verdict
/// (within 90 s).
pub fn verdicts<'a>(
    traces: &Path,
    ids: impl Iterator<Item = &'a String> + Clone,
) -> HashMap<String, causeway_scenarios::send::Annotated> {
    super::wait_for(Duration::from_secs(90), "every trace analysed", || {
        let a = causeway_scenarios::send::read_annotated(traces);
        ids.clone()
            .all(|id| a.get(id).is_some_and(|x| x.root.contains_key("rca.cause")))
    });
    causeway_scenarios::send::read_annotated(traces)
}

pub fn wait_driver(driver: &mut Proc, d: &Path) {
    let st = loop {
        if let Some(st) = driver.0.try_wait().expect("driver") {
            break st;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        st.success(),
        "driver: {}",
        std::fs::read_to_string(d.join(format!("{}.log", driver.1))).unwrap_or_default()
    );
}

/// An NGINX configuration for a gateway in `d`: one worker in the
/// foreground, its temporary paths in `d`, the `gateway` JSON access log
/// format (with `traceparent`, `route_id` and `rate_limit_rule`), and `http`
/// (rate-limit zones, upstreams, servers) inside the `http` block.
pub fn nginx_gateway_conf(d: &Path, connections: u32, http: &str) -> String {
    format!(
        r#"
daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/nginx-error.log;
events {{ worker_connections {connections}; }}
http {{
  client_body_temp_path {d}/nginx-body;
  proxy_temp_path {d}/nginx-proxy;
  fastcgi_temp_path {d}/nginx-fastcgi;
  uwsgi_temp_path {d}/nginx-uwsgi;
  scgi_temp_path {d}/nginx-scgi;
  log_format gateway escape=json '{{"time_iso8601":"$time_iso8601","traceparent":"$http_traceparent",'
    '"route_id":"$route_id","status_code":$status,"request_time":"$request_time",'
    '"upstream_response_time":"$upstream_response_time","upstream_addr":"$upstream_addr",'
    '"request_method":"$request_method","request_uri":"$request_uri","rate_limit_rule":"$rate_limit_rule"}}';
{http}
}}
"#,
        d = d.display()
    )
}

/// An NGINX (Debian's) running `conf`, written to `<d>/<name>.conf`;
/// `port` is where it listens.
pub fn nginx(name: &'static str, d: &Path, conf: &str, port: u16) -> Proc {
    let path = d.join(format!("{name}.conf"));
    std::fs::write(&path, conf).expect("nginx conf");
    let mut p = spawn(
        name,
        Command::new(which(&["/usr/sbin/nginx"])).args([
            "-c",
            &path.display().to_string(),
            "-p",
            &d.display().to_string(),
        ]),
        d,
    );
    wait_port(port, name, &mut p, d);
    p
}

/// Per cause: traces, top-1 right, culprit (service and kind) right.
#[derive(Default)]
pub struct Score {
    pub per: BTreeMap<String, (u64, u64, u64)>,
    pub confusion: BTreeMap<(String, String), u64>,
    pub examples: BTreeMap<String, String>,
}

/// Score each labelled trace's verdict (`rca.*` on its root) against its
/// label: the cause, and the culprit `culprit_of(cause, trace id)` names
/// (first checking that the culprit is never the trace's only service).
/// Prints the tables BENCHMARKS.md keeps (per cause, confusion, examples,
/// the reliability of the stated confidence) and the spans of the first
/// miss of each cause, for whoever reads a failure.
pub fn score(
    label: &BTreeMap<String, String>,
    got: &HashMap<String, causeway_scenarios::send::Annotated>,
    culprit_of: &dyn Fn(&str, &str) -> (String, &'static str),
    traces: &Path,
) -> Score {
    // A culprit assertion can fail: every faulty trace has a service other
    // than the expected culprit in it (a trace of the culprit alone would
    // be named right by any rule).
    let mut services: HashMap<String, std::collections::BTreeSet<String>> = HashMap::new();
    for (res, _, sp) in spans(&read_jsonl(traces)) {
        let service =
            super::attr(&res["attributes"], "service.name").and_then(|v| v["stringValue"].as_str());
        if let (Some(id), Some(s)) = (sp["traceId"].as_str(), service) {
            services
                .entry(id.to_lowercase())
                .or_default()
                .insert(s.to_string());
        }
    }
    for (id, want) in label.iter().filter(|(_, l)| *l != "healthy") {
        let (culprit, _) = culprit_of(want, id);
        let services = &services[id];
        assert!(
            services.iter().any(|s| *s != culprit),
            "{want} {id}: only {culprit} in the trace ({services:?})"
        );
    }
    let mut s = Score::default();
    let dump = |id: &str| {
        for (_, _, sp) in spans(&read_jsonl(traces)) {
            if sp["traceId"].as_str() == Some(id) {
                eprintln!(
                    "    {id}: {} {} {} kind={} parent={} {}..{} {}",
                    sp["spanId"],
                    sp["name"],
                    sp["attributes"]
                        .as_array()
                        .map(|a| a.len())
                        .unwrap_or_default(),
                    sp["kind"],
                    sp["parentSpanId"],
                    sp["startTimeUnixNano"],
                    sp["endTimeUnixNano"],
                    sp["status"]
                );
            }
        }
    };
    for (id, want) in label {
        let a = &got[id].root;
        let cause = a["rca.cause"].clone();
        let e = s.per.entry(want.clone()).or_default();
        e.0 += 1;
        if want == "healthy" {
            if cause == "unknown" {
                e.1 += 1;
            } else {
                eprintln!("    healthy {id} given {cause}: {}", a["rca.summary"]);
                *s.confusion.entry((want.clone(), cause)).or_default() += 1;
            }
            continue;
        }
        if cause != *want {
            if !s.confusion.keys().any(|(w, _)| w == want) {
                eprintln!("    first miss of {want}:");
                dump(id);
            }
            let k = (want.clone(), format!("{cause} ({})", a["rca.summary"]));
            *s.confusion.entry(k).or_default() += 1;
            continue;
        }
        e.1 += 1;
        let (service, kind) = culprit_of(want, id);
        let right = a.get("rca.culprit.service") == Some(&service)
            && a.get("rca.culprit.kind").map(String::as_str) == Some(kind);
        e.2 += u64::from(right);
        s.examples
            .entry(want.clone())
            .or_insert_with(|| a["rca.summary"].clone());
        if !right {
            eprintln!(
                "    culprit of {want} {id}: {:?} {:?} (want {service} {kind}) rule {:?} evidence {}",
                a.get("rca.culprit.service"),
                a.get("rca.culprit.kind"),
                a.get("rca.rule"),
                a.get("rca.evidence")
                    .map_or(String::new(), |e| e.chars().take(300).collect())
            );
            if e.1 == e.2 + 1 {
                dump(id);
            }
        }
    }
    // The reliability of the stated confidence: every finding stated, the
    // verdict's and its alternatives', against the cause produced (healthy
    // traces' findings all wrong), binned by tenths.
    let mut bins: BTreeMap<u32, (u64, u64, f64)> = BTreeMap::new();
    for (id, want) in label {
        for (cause, conf) in causeway_scenarios::send::stated_findings(&got[id].root) {
            let b = bins
                .entry(((conf * 10.0).floor() as u32).min(9))
                .or_default();
            b.0 += 1;
            b.1 += u64::from(cause == *want);
            b.2 += conf;
        }
    }
    eprintln!("| stated confidence | findings | mean stated | right |");
    for (b, (n, r, sum)) in &bins {
        eprintln!(
            "| {:.1}-{:.1} | {n} | {:.2} | {:.0}% |",
            f64::from(*b) / 10.0,
            f64::from(*b + 1) / 10.0,
            sum / *n as f64,
            100.0 * *r as f64 / *n as f64
        );
    }
    eprintln!("| cause | traces | right | culprit (service and kind) right |");
    for (c, (n, r, cu)) in &s.per {
        eprintln!("| {c} | {n} | {r} | {cu} |");
    }
    for ((w, g), n) in &s.confusion {
        eprintln!("  {w} → {g}: {n}");
    }
    for (c, ex) in &s.examples {
        eprintln!("  example {c}: {ex}");
    }
    s
}

impl Score {
    /// The issue's bounds: every listed cause produced at least `min` times
    /// and ≥ 90% right, ≥ 95% right overall, the culprit right for ≥ 95%
    /// of the right verdicts, ≤ 2% of (at least 20) healthy traces given a cause.
    pub fn assert_bounds(&self, causes: &[&str], min: u64) {
        for cause in causes {
            let (n, r, _) = self.per.get(*cause).copied().unwrap_or_default();
            assert!(
                n >= min,
                "{cause}: only {n} traces caused (≥ {min} required)"
            );
            assert!(
                r * 10 >= n * 9,
                "{cause}: {r} of {n} right (≥ 90% required)"
            );
        }
        self.assert_overall(20);
    }

    /// ≥ 95% right overall, the culprit right for ≥ 95% of the right
    /// verdicts, ≤ 2% of (at least `min_healthy`) healthy traces given a
    /// cause.
    fn assert_overall(&self, min_healthy: u64) {
        let (n, r, cu) = self
            .per
            .iter()
            .filter(|(c, _)| *c != "healthy")
            .fold((0, 0, 0), |a, (_, x)| (a.0 + x.0, a.1 + x.1, a.2 + x.2));
        assert!(n > 0, "no fault scored");
        assert!(r * 100 >= n * 95, "top-1: {r} of {n} (≥ 95% required)");
        assert!(
            cu * 100 >= r * 95,
            "culprit (service and kind): {cu} of {r} (≥ 95% required)"
        );
        let (hn, hr, _) = self.per.get("healthy").copied().unwrap_or_default();
        assert!(hn >= min_healthy, "healthy traces: {hn}");
        assert!(
            (hn - hr) * 100 <= hn * 2,
            "healthy given a cause: {} of {hn} (≤ 2%)",
            hn - hr
        );
    }
}

/// How a bed's kept traces are chosen.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Wiring {
    /// Every trace kept (`always_sample`): every request is scored.
    KeepAll,
    /// `examples/gateway.yaml`'s `tail_sampling` section as shipped (its
    /// 10 s `decision_wait`, errors, over 2 s, each route's p99 after 100
    /// requests, trouble, 1%): what it keeps is scored (a fault it drops
    /// was the sampler's choice, counted and printed, not the analysis's).
    Shipped,
}

impl Wiring {
    /// The `tail_sampling` section, as flow YAML.
    pub fn sampler(self) -> String {
        match self {
            Wiring::KeepAll => "{ policies: [{ name: all, type: always_sample }] }".into(),
            Wiring::Shipped => {
                let path =
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gateway.yaml");
                let text = std::fs::read_to_string(&path).expect("examples/gateway.yaml");
                let gateway: serde_yaml::Value =
                    serde_yaml::from_str(&text).expect("examples/gateway.yaml is YAML");
                let section = &gateway["processors"]["tail_sampling"];
                assert!(section.is_mapping(), "{}: no tail_sampling", path.display());
                serde_json::to_string(section).expect("the section as JSON")
            }
        }
    }
}

impl Wiring {
    /// The `tail_sampling` section: `keep_all` (a bed's own `always_sample`
    /// with its `decision_wait`) or the shipped one.
    pub fn sampler_or(self, keep_all: &str) -> String {
        match self {
            Wiring::KeepAll => keep_all.to_string(),
            Wiring::Shipped => self.sampler(),
        }
    }
}

/// Traces the `tail_sampling` processor decided (kept or not).
pub fn decided(d: &super::Daemon) -> f64 {
    ["sampled", "not_sampled"]
        .iter()
        .filter_map(|x| {
            d.metric(&format!(
                "causeway_tail_sampling_traces_total{{component=\"tail_sampling\",decision=\"{x}\"}}"
            ))
        })
        .sum()
}

/// Traces the `tail_sampling` processor kept.
pub fn kept(d: &super::Daemon) -> f64 {
    d.metric(
        "causeway_tail_sampling_traces_total{component=\"tail_sampling\",decision=\"sampled\"}",
    )
    .unwrap_or(0.0)
}

/// Labels by trace id.
pub type Labels = BTreeMap<String, String>;

/// The annotated traces by trace id.
pub type Verdicts = HashMap<String, causeway_scenarios::send::Annotated>;

/// Behind a sampler: once `sent` requests are decided and every kept trace
/// analysed, the labelled traces it kept (analysed) and, per label, how
/// many it did not keep.
pub fn kept_labels(
    daemon: &super::Daemon,
    traces: &Path,
    label: Labels,
    sent: usize,
) -> (Labels, BTreeMap<String, usize>, Verdicts) {
    let analysed = || {
        causeway_scenarios::send::read_annotated(traces)
            .values()
            .filter(|a| a.root.contains_key("rca.cause"))
            .count() as f64
    };
    super::wait_for(
        Duration::from_secs(180),
        "every request decided and every kept one analysed",
        || decided(daemon) >= sent as f64 && analysed() >= kept(daemon),
    );
    let got = causeway_scenarios::send::read_annotated(traces);
    let mut scored = BTreeMap::new();
    let mut dropped: BTreeMap<String, usize> = BTreeMap::new();
    for (id, l) in label {
        if got
            .get(&id)
            .is_some_and(|a| a.root.contains_key("rca.cause"))
        {
            scored.insert(id, l);
        } else {
            *dropped.entry(l).or_default() += 1;
        }
    }
    eprintln!(
        "not kept by the sampler: {dropped:?}; spans after their trace's analysis: {:?}",
        daemon.metric("causeway_correlate_late_spans_total{component=\"correlate\"}")
    );
    (scored, dropped, got)
}

/// The wiring a bed runs, from `CAUSEWAY_TESTBED_WIRING`: `keep_all` (the
/// default: every request scored) or `shipped` (`examples/gateway.yaml`'s
/// sampler: what it keeps scored).
pub fn wiring() -> Wiring {
    match std::env::var("CAUSEWAY_TESTBED_WIRING").as_deref() {
        Ok("shipped") => Wiring::Shipped,
        _ => Wiring::KeepAll,
    }
}

/// The labelled traces to score and their verdicts: behind `always_sample`
/// every one (once each is analysed); behind the shipped sampler, once
/// `sent` requests are decided, those it kept.
pub fn judged(
    wiring: Wiring,
    daemon: &super::Daemon,
    traces: &Path,
    label: Labels,
    sent: usize,
) -> (Labels, Verdicts) {
    match wiring {
        Wiring::KeepAll => {
            let got = verdicts(traces, label.keys());
            (label, got)
        }
        Wiring::Shipped => {
            let (kept, _, got) = kept_labels(daemon, traces, label, sent);
            (kept, got)
        }
    }
}

impl Score {
    /// [`Score::assert_bounds`] behind `always_sample`; behind the shipped
    /// sampler the same bounds on what it kept: each listed cause kept at
    /// least `min` times ≥ 90% right (one kept fewer times is printed),
    /// ≥ 95% right overall, the culprit right for ≥ 95% of the right
    /// verdicts, and ≤ 2% of the healthy traces it kept given a cause.
    pub fn assert_bounds_for(&self, wiring: Wiring, causes: &[&str], min: u64) {
        if wiring == Wiring::KeepAll {
            return self.assert_bounds(causes, min);
        }
        for cause in causes {
            let (n, r, _) = self.per.get(*cause).copied().unwrap_or_default();
            if n < min {
                eprintln!("{cause}: {n} kept by the shipped sampler (not bounded)");
                continue;
            }
            assert!(
                r * 10 >= n * 9,
                "{cause}: {r} of {n} right (≥ 90% required)"
            );
        }
        self.assert_overall(0);
    }
}

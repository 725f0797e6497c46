//! The servers a trace called, by their own metrics: Redis, PostgreSQL,
//! NGINX, Envoy and LLM inference servers (vLLM, Triton), as their
//! exporters expose them and the `prometheus` receiver scrapes them, and
//! the GPUs of DCGM. Each family is an evidence source of its own, one file
//! here implementing [`Family`] (its metrics, the row it makes of them, its
//! rules), registered by one line; this module is what they share: the
//! grouping of series into servers and their addresses, the join with the
//! client spans, and the `dependency` table they all add rows to.
//!
//! **Which series.** Only the series the causes read are kept in the
//! correlation state (each family names its own); everything else a scrape brings
//! passes through untouched. Each is keyed by its scrape `job`
//! (`service.name`) and `instance` (`service.instance.id`). Histograms are
//! kept as their `_sum` and `_count`.
//!
//! **Which server a series describes** — its addresses:
//! - the scrape `instance` itself (vLLM serves `/metrics` on its API port;
//!   set a target's `instance` label to the server's address in the
//!   Prometheus multi-target pattern);
//! - an `addr`, `server` or `target` label on its points (multi-target exporters);
//! - what the exporter reports of the server beside it: redis_exporter's
//!   `redis_instance_info{tcp_port}`, postgres_exporter's `pg_settings_port`,
//!   on the instance's host (an exporter next to its server, as Debian's
//!   packages and Kubernetes sidecars run);
//! - `correlate.dependencies.addresses`: address → job or instance.
//!
//! **Which spans.** A span's `server.address` (`net.peer.name`) and
//! `server.port` (`net.peer.port`) against those addresses, after both
//! are normalised ([`norm`]): lower case, scheme, user and path removed,
//! `localhost` and `::1` as `127.0.0.1`, a trailing dot and the Kubernetes
//! cluster domain (`.svc.cluster.local`, `.svc`) removed, so
//! `redis.shop.svc.cluster.local:6379` and `redis.shop:6379` are one
//! server. A span without a port matches on the host when its `db.system`
//! is the dependency's. Envoy's series describe its upstream clusters: a
//! span joins the cluster whose `envoy_cluster_name` names its host (Istio's
//! `outbound|9080||reviews.default.svc.cluster.local`). GPU series of
//! DCGM (`DCGM_FI_DEV_*`) describe a machine: they join by their
//! `Hostname` label as host metrics do (see the `host` table).
//!
//! One row per (trace, server): the values over the longest span to that
//! server, widened by `dependencies.sample_interval` on each side.
//!
//! - rules' table `dependency` (server the trace called) and alerts' table
//!   `dependencies` (each scraped server, and each Envoy cluster, over the
//!   window): the shared columns declared in [`DEPENDENCY`] and
//!   [`DEPENDENCIES`], then each family's own ([`Family::columns`]).
//!
//! The families share those two tables: each adds its rows and its columns
//! (a family's rows have nulls in the others' columns).

use causeway_core::config::{ConfigError, Duration, Validate};
use datafusion::arrow::datatypes::SchemaRef;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};

use super::capabilities;
use super::{json, Join, Source, Tick, View, JOIN_ATTRS};
use super::{KeepsMetrics, ShowsState};
use crate::correlate::model::series::{find, host_key, s as attr_s, Kept, Offer};
use crate::correlate::model::table::{s, schema, About, Cols, Column, Purpose, Table, V};
use crate::correlate::model::{Hex16, Joined, Key, Rule, Series, TraceRow};
use datafusion::arrow::array::RecordBatch;

pub mod dcgm;
pub mod envoy;
pub mod llm;
pub mod nginx;
pub mod postgresql;
pub mod redis;
pub mod sentinel;

/// One dependency family: the servers of one kind, by their exporters' metrics.
pub trait Family: Send + Sync + 'static {
    /// Its measurements of a server: the columns it adds to the
    /// `dependency` and `dependencies` tables, and the fields of the
    /// `dependency` evidence on a trace.
    type Row: Default + serde::Serialize + Send + Sync + 'static;
    /// Its name: the source's.
    fn name(&self) -> &'static str;
    /// Its measured columns, each declared once.
    fn columns(&self) -> &'static [Column<Self::Row>];
    /// The system a metric of it describes, by the metric's name without
    /// `_total` (and a kept histogram's `_sum`/`_count`); `None`: not its metric.
    fn system(&self, base: &str) -> Option<&'static str>;
    /// Its histograms, kept as `<name>_sum` and `<name>_count`.
    fn histograms(&self) -> &'static [&'static str] {
        &[]
    }
    /// Its series describe a machine and join by host (as host metrics do),
    /// not by the spans' addresses.
    fn by_host(&self) -> bool {
        false
    }
    /// The port of the server beside the exporter that a series tells of
    /// (redis_exporter's `redis_instance_info{tcp_port}`, ...).
    fn beside(&self, _s: &Series) -> Option<String> {
        None
    }
    /// Its sub-units a span to `host` (normalised, no port) reaches, when it
    /// joins by them rather than by address (Envoy's upstream clusters).
    fn units(&self, _d: &Dependency<'_>, _host: &str) -> Option<Vec<String>> {
        None
    }
    /// Every sub-unit of `d` (for the alert table).
    fn all_units(&self, _d: &Dependency<'_>) -> Option<Vec<String>> {
        None
    }
    /// Whether series `s` describes the sub-unit `unit`.
    fn in_unit(&self, _s: &Series, _unit: &str) -> bool {
        true
    }
    /// Fill `r` from the points of `d`'s series (each bracketed to the window).
    fn fill(&self, r: &mut DepRow<Self::Row>, points: &[Points<'_>], w: &Window);
    /// Its built-in rules.
    fn rules(&self) -> Vec<Rule> {
        Vec::new()
    }
}

/// The interval a row covers.
#[derive(Debug, Clone)]
pub struct Window {
    /// The span's start and end (ns).
    pub start: u64,
    /// See `start`.
    pub end: u64,
    /// Widened by the sampling interval on each side (ns).
    pub from: u64,
    /// See `from`.
    pub to: u64,
    /// The command the span ran (`db.operation`, lower case).
    pub command: Option<String>,
    /// The sub-unit the row is of (an Envoy cluster).
    pub unit: Option<String>,
}

/// A series with its points in a window, the last before and first after included.
pub struct Points<'a> {
    /// The series.
    pub series: &'a Series,
    /// Its points, bracketed.
    pub pts: Vec<(u64, f64)>,
}

impl Points<'_> {
    /// The name without `_total`.
    pub fn name(&self) -> &str {
        self.series
            .name
            .strip_suffix("_total")
            .unwrap_or(&self.series.name)
    }
    /// The largest value inside the window (else around it).
    pub fn inside(&self, w: &Window) -> Option<f64> {
        self.series
            .points
            .iter()
            .filter(|(t, _)| *t >= w.from && *t <= w.to)
            .map(|p| p.1)
            .reduce(f64::max)
            .or_else(|| self.pts.iter().map(|p| p.1).reduce(f64::max))
    }
    /// A gauge over the span itself: the largest reading taken while it
    /// ran; when none was, the smaller of the last before it and the first
    /// after it (what both sides agree on, so that a burst that began just
    /// after a short call is not read as its neighbours).
    pub fn during(&self, w: &Window) -> Option<f64> {
        let inside = self
            .series
            .points
            .iter()
            .filter(|(t, _)| *t >= w.start && *t <= w.end)
            .map(|p| p.1)
            .reduce(f64::max);
        inside.or_else(|| {
            let before = self.series.points.iter().rfind(|(t, _)| *t < w.start);
            let after = self.series.points.iter().find(|(t, _)| *t > w.end);
            match (before, after) {
                (Some(b), Some(a)) => Some(b.1.min(a.1)),
                (Some(p), None) | (None, Some(p)) => Some(p.1),
                (None, None) => None,
            }
        })
    }
    /// A counter's increase over the window.
    pub fn increase(&self) -> Option<f64> {
        increase(&self.pts)
    }
    /// The lowest value (an `up` series).
    pub fn lowest(&self) -> Option<f64> {
        self.pts.iter().map(|p| p.1).reduce(f64::min)
    }
}

/// The mean of a kept histogram over the window: its sum's increase over its count's.
pub fn mean(points: &[Points<'_>], histogram: &str) -> Option<f64> {
    let inc = |suffix: &str| {
        points
            .iter()
            .find(|p| {
                p.series
                    .name
                    .strip_prefix(histogram)
                    .is_some_and(|rest| rest == suffix)
            })
            .and_then(Points::increase)
    };
    match (inc("_sum"), inc("_count")) {
        (Some(sum), Some(count)) if count > 0.0 => Some(sum / count),
        _ => None,
    }
}

/// An `up` series: the lowest seen.
pub fn up<M>(r: &mut DepRow<M>, p: &Points<'_>) {
    if let Some(v) = p.lowest() {
        r.c.up = Some(r.c.up.map_or(v, |x| x.min(v)));
    }
}

/// An address as `host[:port]`, normalised for comparison (see the module doc).
pub fn norm(addr: &str) -> String {
    let mut a = addr.trim().to_ascii_lowercase();
    if let Some(i) = a.find("://") {
        a = a[i + 3..].to_string();
    }
    if let Some(i) = a.find(['/', '?']) {
        a.truncate(i);
    }
    if let Some(i) = a.rfind('@') {
        a = a[i + 1..].to_string();
    }
    // host and port: `[v6]:p`, `v4:p`, `name:p`, or a bare v6 address.
    let (host, port) = if let Some(rest) = a.strip_prefix('[') {
        match rest.split_once(']') {
            Some((h, p)) => (h.to_string(), p.strip_prefix(':').map(str::to_string)),
            None => (rest.to_string(), None),
        }
    } else if a.matches(':').count() == 1 {
        let (h, p) = a.split_once(':').unwrap_or((&a, ""));
        (h.to_string(), Some(p.to_string()))
    } else {
        (a.clone(), None)
    };
    let mut host = host.trim_end_matches('.').to_string();
    if matches!(host.as_str(), "localhost" | "::1" | "0:0:0:0:0:0:0:1") {
        host = "127.0.0.1".into();
    }
    for suffix in [".svc.cluster.local", ".svc"] {
        if let Some(h) = host.strip_suffix(suffix) {
            host = h.to_string();
            break;
        }
    }
    match port.filter(|p| !p.is_empty()) {
        Some(p) => format!("{host}:{p}"),
        None => host,
    }
}

fn host_part(a: &str) -> &str {
    match a.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => a,
    }
}

/// The servers the scraped series describe.
#[derive(Debug, Clone)]
pub struct Dependency<'a> {
    /// `redis`, `postgresql`, `nginx`, `envoy`, `vllm`, `triton`, `genai`.
    pub system: &'static str,
    /// Scrape job.
    pub job: String,
    /// Scrape instance.
    pub instance: String,
    /// The addresses it answers at (normalised).
    pub addresses: Vec<String>,
    /// Its series.
    pub series: Vec<&'a Series>,
}

/// Group a family's series by (system, job, instance) and work out the
/// addresses of each (see the module doc). `configured`: address → job or
/// instance.
pub fn dependencies<'a, F: Family>(
    family: &F,
    series: &'a [Series],
    configured: &HashMap<String, String>,
) -> Vec<Dependency<'a>> {
    let mut groups: BTreeMap<(&'static str, &str, &str), Vec<&'a Series>> = BTreeMap::new();
    for s in series {
        let Some(system) = system_of(family, &s.name) else {
            continue;
        };
        // Pushed over OTLP without `service.instance.id`: the service is the key.
        let (Some(job), Some(inst)) =
            (s.key.get("job"), s.key.get("instance").or(s.key.get("job")))
        else {
            continue;
        };
        groups.entry((system, job, inst)).or_default().push(s);
    }
    groups
        .into_iter()
        .map(|((system, job, instance), series)| {
            let inst = norm(instance);
            let mut addresses = vec![inst.clone()];
            for s in &series {
                for k in ["addr", "server", "target"] {
                    if let Some(v) = s.attr(k) {
                        addresses.push(norm(v));
                    }
                }
                // The GenAI conventions put the server on the points.
                if let Some(host) = s
                    .attr("server.address")
                    .or_else(|| s.attr("server_address"))
                {
                    addresses.push(
                        match s.attr("server.port").or_else(|| s.attr("server_port")) {
                            Some(port) => norm(&format!("{host}:{port}")),
                            None => norm(host),
                        },
                    );
                }
                if let Some(port) = family.beside(s) {
                    addresses.push(format!("{}:{port}", host_part(&inst)));
                }
            }
            for (addr, target) in configured {
                if target == job || norm(target) == inst {
                    addresses.push(norm(addr));
                }
            }
            addresses.sort();
            addresses.dedup();
            Dependency {
                system,
                job: job.to_string(),
                instance: instance.to_string(),
                addresses,
                series,
            }
        })
        .collect()
}

/// The system a metric of `family` describes (its kept histograms' parts included).
pub fn system_of<F: Family>(family: &F, name: &str) -> Option<&'static str> {
    let base = name.strip_suffix("_total").unwrap_or(name);
    let base = hist_part(family, base).map_or(base, |(b, _)| b);
    family.system(base)
}

/// A kept histogram's `_sum` or `_count` series: (histogram, is the sum).
fn hist_part<'a, F: Family>(family: &F, name: &'a str) -> Option<(&'a str, bool)> {
    let (base, sum) = match name.strip_suffix("_sum") {
        Some(b) => (b, true),
        None => (name.strip_suffix("_count")?, false),
    };
    family.histograms().contains(&base).then_some((base, sum))
}

/// Whether a span calling `addr` (normalised `host[:port]`) with `db.system`
/// `db` calls `d`.
pub fn calls(d: &Dependency<'_>, addr: &str, db: Option<&str>) -> bool {
    if d.addresses.iter().any(|a| a == addr) {
        return true;
    }
    // No port on the span: the host, when the span says what it talks to.
    let has_port = addr != host_part(addr);
    !has_port
        && db.is_some_and(|db| db.eq_ignore_ascii_case(d.system))
        && d.addresses.iter().any(|a| host_part(a) == addr)
}

/// A server a trace called, with its numbers while the trace called it
/// (counters are increases over the interval, gauges their largest value):
/// what every family has, and the family's own measurements `M`.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct DepRow<M> {
    /// What every family has.
    #[serde(flatten)]
    pub c: Common,
    /// The family's own.
    #[serde(flatten)]
    pub m: M,
}

/// The columns every dependency row has.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Common {
    /// The trace (rules' table only).
    #[serde(skip)]
    pub trace_id: String,
    /// The longest span to it (hex id).
    pub span_id: String,
    /// `redis`, `postgresql`, `nginx`, `envoy`, `vllm`, `triton`.
    pub system: &'static str,
    /// The address the span called.
    pub address: String,
    /// Scrape job.
    pub job: String,
    /// Scrape instance.
    pub instance: String,
    /// Every address it answers at (alerts' table only).
    #[serde(skip)]
    pub addresses: String,
    /// Latest point used (ns).
    #[serde(rename = "time_unix_nano")]
    pub time_ns: u64,
    /// `redis_up`, `pg_up`, `nginx_up`: the lowest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub up: Option<f64>,
}

fn time_ms(c: &Common) -> V<'static> {
    V::F(Some(c.time_ns as f64 / 1e6))
}

/// The rules' `dependency` table's own columns; each family adds its own.
static DEPENDENCY: &[Column<Common>] = &[
    Column::<Common>::text("trace_id", |c, _| s(&c.trace_id)).doc("The trace."),
    Column::<Common>::text("span_id", |c, _| s(&c.span_id)).doc("The span that called the server."),
    Column::<Common>::text("system", |c, _| s(c.system))
        .doc("The family's system: `redis`, `postgresql`, `nginx`, `envoy`, `vllm`, `gpu`…"),
    Column::<Common>::text("address", |c, _| s(&c.address)).doc("The address the span called."),
    Column::<Common>::text("job", |c, _| s(&c.job)).doc("The scrape job of the server's series."),
    Column::<Common>::text("instance", |c, _| s(&c.instance)).doc("Their scrape instance."),
    Column::<Common>::float("time_ms", |c, _| time_ms(c))
        .doc("The latest point used (ms since the epoch)."),
    Column::<Common>::float("up", |c, _| V::F(c.up))
        .doc("The exporter's `up` (`redis_up`, `pg_up`, `nginx_up`): the lowest."),
];

/// The alerts' `dependencies` table's own columns; each family adds its own.
static DEPENDENCIES: &[Column<Common>] = &[
    Column::<Common>::text("system", |c, _| s(c.system)).doc("The family's system."),
    Column::<Common>::text("job", |c, _| s(&c.job)).doc("The scrape job of the server's series."),
    Column::<Common>::text("instance", |c, _| s(&c.instance)).doc("Their scrape instance."),
    Column::<Common>::text("addresses", |c, _| s(&c.addresses))
        .doc("Every address it answers at, comma-separated."),
    Column::<Common>::float("time_ms", |c, _| time_ms(c))
        .doc("The latest point used (ms since the epoch)."),
    Column::<Common>::float("up", |c, _| V::F(c.up)).doc("The exporter's `up`: the lowest."),
];

/// A family's declared table: the shared columns, then the family's own.
fn family_about<F: Family>(
    family: &F,
    (name, doc, purpose): (&'static str, &'static str, Purpose),
    common: &[Column<Common>],
) -> About {
    About {
        name,
        doc,
        purpose,
        columns: common
            .iter()
            .map(|c| (c.name, c.ty, c.doc))
            .chain(family.columns().iter().map(|c| (c.name, c.ty, c.doc)))
            .collect(),
    }
}

/// A family's table: the shared columns, then the family's own.
fn family_schema<F: Family>(family: &F, common: &[Column<Common>]) -> SchemaRef {
    schema(
        common
            .iter()
            .map(Column::field)
            .chain(family.columns().iter().map(Column::field))
            .collect(),
    )
}

/// The batch of a family's table over `rows`.
fn family_batch<F: Family>(
    family: &F,
    common: &[Column<Common>],
    rows: &[DepRow<F::Row>],
) -> Result<(SchemaRef, RecordBatch), String> {
    let sch = family_schema(family, common);
    let mut c = Cols::new(&sch, rows.len());
    let shared: Vec<(&Common, usize)> = rows.iter().map(|r| (&r.c, 0)).collect();
    let own: Vec<(&F::Row, usize)> = rows.iter().map(|r| (&r.m, 0)).collect();
    for (i, col) in common.iter().enumerate() {
        c.fill(i, col, &shared);
    }
    for (i, col) in family.columns().iter().enumerate() {
        c.fill(common.len() + i, col, &own);
    }
    Ok((sch.clone(), c.finish(sch)?))
}

/// Points of `s` in `[from, to]`, with the last one before and the first
/// one after (a counter's increase over a span shorter than the scrape
/// interval needs the scrapes around it).
fn bracket(s: &Series, from: u64, to: u64) -> Vec<(u64, f64)> {
    let mut out = Vec::new();
    let mut before = None;
    for &(t, v) in &s.points {
        if t < from {
            before = Some((t, v));
        } else if t <= to {
            if let Some(b) = before.take() {
                out.push(b);
            }
            out.push((t, v));
        } else {
            if let Some(b) = before.take() {
                out.push(b);
            }
            out.push((t, v));
            break;
        }
    }
    out
}

/// A counter's increase over the points (resets counted as a restart from 0).
fn increase(points: &[(u64, f64)]) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    Some(
        points
            .windows(2)
            .map(|w| {
                if w[1].1 >= w[0].1 {
                    w[1].1 - w[0].1
                } else {
                    w[1].1
                }
            })
            .sum(),
    )
}

/// Add to a sum.
pub fn add(a: &mut Option<f64>, v: f64) {
    *a = Some(a.unwrap_or(0.0) + v);
}

/// Keep the largest.
pub fn maxed(a: &mut Option<f64>, v: f64) {
    *a = Some(a.map_or(v, |x| x.max(v)));
}

/// The row of `d` for a span over `[start, end]` that ran `command` (its
/// `db.operation`, e.g. `GET`), its points taken over that widened by
/// `widen` on each side, for the sub-unit `unit` (an Envoy cluster).
pub fn row<F: Family>(
    family: &F,
    d: &Dependency<'_>,
    unit: Option<&str>,
    command: Option<&str>,
    (start, end): (u64, u64),
    widen: u64,
) -> DepRow<F::Row> {
    let w = Window {
        start,
        end,
        from: start.saturating_sub(widen),
        to: end.saturating_add(widen),
        command: command.map(str::to_ascii_lowercase),
        unit: unit.map(str::to_string),
    };
    let mut r = DepRow {
        c: Common {
            system: d.system,
            job: d.job.clone(),
            instance: d.instance.clone(),
            ..Default::default()
        },
        m: F::Row::default(),
    };
    let mut points = Vec::with_capacity(d.series.len());
    for s in &d.series {
        if unit.is_some_and(|u| !family.in_unit(s, u)) {
            continue;
        }
        let pts = bracket(s, w.from, w.to);
        let Some(&(t, _)) = pts.last() else { continue };
        r.c.time_ns = r.c.time_ns.max(t);
        points.push(Points { series: s, pts });
    }
    family.fill(&mut r, &points, &w);
    r
}

/// `processors.correlate.dependencies`: a dependency's metrics (Redis,
/// PostgreSQL, NGINX, Envoy, vLLM, Triton, DCGM; see the module doc) join
/// the client spans that called it by address.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DependenciesConfig {
    /// How often the dependencies are scraped: a client span joins the
    /// points within this of its start and end. Set it to
    /// your `scrape_interval`.
    #[serde(default = "dep_sample_interval")]
    pub sample_interval: Duration,
    /// Addresses spans call → the scrape `job` or `instance` whose metrics
    /// describe that server, for what the automatic mapping cannot know,
    /// e.g. `{"redis.shop:6379": redis-cache}` when the exporter runs
    /// elsewhere than the server it watches.
    #[serde(default)]
    pub addresses: HashMap<String, String>,
}

impl Validate for DependenciesConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.sample_interval.get().is_zero() {
            e.push(ConfigError::new("sample_interval", "must be more than 0"));
        }
        e
    }
}

impl Default for DependenciesConfig {
    fn default() -> Self {
        DependenciesConfig {
            sample_interval: dep_sample_interval(),
            addresses: HashMap::new(),
        }
    }
}

fn dep_sample_interval() -> Duration {
    Duration::secs(15)
}

/// One row per server of `family` the trace called.
fn dependency_rows<F: Family>(
    family: &F,
    t: &TraceRow,
    dependencies: &[Dependency<'_>],
    sample_ns: u64,
) -> Vec<DepRow<F::Row>> {
    if dependencies.is_empty() {
        return Vec::new();
    }
    // (dependency, unit) → the longest span to it.
    let mut longest: BTreeMap<(usize, Option<String>), usize> = BTreeMap::new();
    for (i, s) in t.spans.iter().enumerate() {
        let Some(host) = s.server_address.as_deref() else {
            continue;
        };
        let addr = match s.server_port {
            Some(port) => norm(&format!("{host}:{port}")),
            None => norm(host),
        };
        let bare = norm(host);
        for (di, d) in dependencies.iter().enumerate() {
            let keys: Vec<Option<String>> = match family.units(d, &bare) {
                Some(units) => units.into_iter().map(Some).collect(),
                None if calls(d, &addr, s.db_system.as_deref()) => vec![None],
                None => Vec::new(),
            };
            for k in keys {
                let e = longest.entry((di, k)).or_insert(i);
                if t.spans[*e].duration_ms < s.duration_ms {
                    *e = i;
                }
            }
        }
    }
    longest
        .into_iter()
        .filter_map(|((di, unit), i)| {
            let s = &t.spans[i];
            let start = t.start_ns + (s.start_ms * 1e6) as u64;
            let end = t.start_ns + (s.end_ms * 1e6) as u64;
            let mut r = row(
                family,
                &dependencies[di],
                unit.as_deref(),
                s.db_operation.as_deref(),
                (start, end),
                sample_ns,
            );
            (r.c.time_ns > 0).then(|| {
                r.c.trace_id = t.trace_id.clone();
                r.c.span_id = Hex16::of(s.span_id).as_str().to_string();
                r.c.address = match s.server_port {
                    Some(port) => format!("{}:{port}", s.server_address.as_deref().unwrap_or("")),
                    None => s.server_address.clone().unwrap_or_default(),
                };
                r
            })
        })
        .collect()
}

/// A dependency family as an evidence source (see [`source`]).
pub struct Deps<F> {
    family: F,
    cfg: DependenciesConfig,
}

/// The source of a family, with `correlate.dependencies`.
pub fn source<F: Family>(family: F, cfg: &DependenciesConfig) -> Deps<F> {
    Deps {
        family,
        cfg: cfg.clone(),
    }
}

impl<F: Family> Source for Deps<F> {
    fn name(&self) -> &'static str {
        self.family.name()
    }

    fn tables(&self) -> Vec<About> {
        vec![
            family_about(
                &self.family,
                (
                    "dependency",
                    "A server the trace called, by its own metrics over the longest span \
                     to it (widened by `dependencies.sample_interval`): one row per trace \
                     and server; a family's rows have nulls in the others' columns.",
                    Purpose::Rules,
                ),
                DEPENDENCY,
            ),
            family_about(
                &self.family,
                (
                    "dependencies",
                    "Each scraped server, and each Envoy cluster, over the window: \
                     counters as increases, gauges at their largest.",
                    Purpose::Alerts,
                ),
                DEPENDENCIES,
            ),
        ]
    }

    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        let mut rows = Vec::new();
        if !self.family.by_host() {
            let name = self.family.name();
            let series = tick
                .store
                .series
                .matching(|s| s.key.source == name && s.key.get("job").is_some());
            let dependencies = dependencies(&self.family, &series, &self.cfg.addresses);
            let sample_ns =
                u64::try_from(self.cfg.sample_interval.get().as_nanos()).unwrap_or(u64::MAX);
            for t in traces.iter_mut() {
                for d in dependency_rows(&self.family, t, &dependencies, sample_ns) {
                    t.joined.push(Joined::Metric("dependency", json(&d)));
                    rows.push(d);
                }
            }
        }
        let (sch, batch) = family_batch(&self.family, DEPENDENCY, &rows)?;
        Ok(Join {
            tables: vec![("dependency", sch, batch)],
            misses: 0,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        self.family.rules()
    }

    capabilities!(metrics, state);
}

impl<F: Family> KeepsMetrics for Deps<F> {
    fn keep(&self, o: &Offer<'_>) -> Option<Kept> {
        system_of(&self.family, o.metric)?;
        let key = if self.family.by_host() {
            // A machine's: joined by host, as host metrics are.
            Key::new(self.family.name()).with(
                "host",
                find(o.attrs, &["Hostname"])
                    .and_then(attr_s)
                    .or_else(|| host_key(o.resource)),
            )
        } else {
            Key::new(self.family.name())
                .with("job", find(o.resource, &["service.name"]).and_then(attr_s))
                .with(
                    "instance",
                    find(o.resource, &["service.instance.id"]).and_then(attr_s),
                )
        };
        Some(Kept {
            key,
            drop: JOIN_ATTRS,
            add: Vec::new(),
        })
    }

    fn dims(&self) -> &'static [&'static str] {
        if self.family.by_host() {
            &["host"]
        } else {
            &["job", "instance"]
        }
    }
}

impl<F: Family> ShowsState for Deps<F> {
    fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        // Each server's numbers over the window.
        let name = self.family.name();
        let series = match view {
            Some(v) if !self.family.by_host() => v
                .store
                .series
                .matching(|x| x.key.source == name && x.key.get("job").is_some()),
            _ => Vec::new(),
        };
        let deps = dependencies(&self.family, &series, &HashMap::new());
        let window = view.map_or((0, 0), |v| (v.now_ns.saturating_sub(v.window_ns), v.now_ns));
        let mut rows = Vec::new();
        for d in &deps {
            let units: Vec<Option<String>> = match self.family.all_units(d) {
                Some(u) => u.into_iter().map(Some).collect(),
                None => vec![None],
            };
            for u in units {
                let mut r = row(&self.family, d, u.as_deref(), None, window, 0);
                if r.c.time_ns > 0 {
                    r.c.addresses = d.addresses.join(",");
                    rows.push(r);
                }
            }
        }
        let (sch, batch) = family_batch(&self.family, DEPENDENCIES, &rows)?;
        Ok(vec![("dependencies", sch, batch)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_normalise_to_one_server() {
        for (a, want) in [
            (
                "redis://:secret@Redis.Shop.svc.cluster.local:6379/0",
                "redis.shop:6379",
            ),
            (
                "postgresql://postgres@127.0.0.1:5432/postgres?sslmode=disable",
                "127.0.0.1:5432",
            ),
            ("localhost:6379", "127.0.0.1:6379"),
            ("[::1]:8000", "127.0.0.1:8000"),
            ("::1", "127.0.0.1"),
            ("reviews.default.svc.", "reviews.default"),
            ("10.1.2.3", "10.1.2.3"),
            ("[2001:db8::1]:9121", "2001:db8::1:9121"),
        ] {
            assert_eq!(norm(a), want, "{a}");
        }
    }

    #[test]
    fn counters_increase_across_resets_and_need_two_points() {
        assert_eq!(increase(&[(1, 5.0)]), None);
        assert_eq!(
            increase(&[(1, 5.0), (2, 9.0), (3, 2.0), (4, 4.0)]),
            Some(8.0)
        );
    }
}

//! The gateway source: per-route statistics of the gateway's access logs
//! (requests, answers by status, the rate-limit rule that answered, the
//! circuit breaker, latency quantiles) over ten-second buckets, and the
//! rules that read the gateway's own answer to a trace (its log record,
//! joined by `trace_id`).
//!
//! - series: metric points that carry a route (`route_id`, `http.route`);
//! - rules' table `route_stats` (trace with a known route, declared in
//!   [`ROUTE_STATS`]); its rules read the gateway's records in `logs`;
//! - alerts' table `routes` (route with gateway traffic in the window; [`ROUTES`]);
//! - page: `GET /api/routes`, every route with traffic in the window, worst first;
//! - trouble: a gateway answer among the policy's statuses or a circuit not
//!   closed on the trace's own records, or its route open or answering
//!   those statuses at `route_error_ratio`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use super::capabilities;
use super::{json, Asked, Join, Source, Tick, View, JOIN_ATTRS};
use super::{KeepsMetrics, ReadsLogs, ShowsState, ShowsTrouble};
use crate::correlate::model::cause::{
    CIRCUIT_OPEN, RATE_LIMITED, UNKNOWN, UPSTREAM_TIMEOUT, UPSTREAM_UNAVAILABLE,
};
use crate::correlate::model::series::{find, num, s, Kept, Offer, PointKind, ROUTE_KEYS};
use crate::correlate::model::table::{
    count, s as s_, so, About, Column, Declared, Purpose, Table, Traced, V,
};
use crate::correlate::model::{Joined, Key, LogEvidence, Rule, TraceRow};
use crate::correlate::store::lock;
use crate::sketch::Sketch;
use opentelemetry_proto::tonic::common::v1::KeyValue;

/// Ten-second buckets of a route's gateway traffic.
#[derive(Debug, Clone, Default)]
struct Bucket {
    start_s: u64,
    requests: u64,
    s4xx: u64,
    s5xx: u64,
    s429: u64,
    s503: u64,
    s504: u64,
    not_closed: u64,
    rules: BTreeMap<String, u64>,
    latency: Sketch,
}

#[derive(Debug, Clone, Default)]
struct RouteWindow {
    buckets: VecDeque<Bucket>,
    circuit_state: Option<String>,
    circuit_changes: u64,
}

/// A route's statistics over the window.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RouteStats {
    /// Requests.
    pub requests: u64,
    /// 4xx answers.
    pub s4xx: u64,
    /// 5xx answers.
    pub s5xx: u64,
    /// 429 answers.
    pub s429: u64,
    /// 503 answers.
    pub s503: u64,
    /// 504 answers.
    pub s504: u64,
    /// Records whose circuit state was not CLOSED.
    pub not_closed: u64,
    /// The most frequent rate-limit rule.
    pub top_rule: Option<String>,
    /// Latest circuit state.
    pub circuit_state: Option<String>,
    /// Circuit state changes seen.
    pub circuit_changes: u64,
    /// Median latency (ms).
    pub p50_ms: Option<f64>,
    /// 99th percentile latency (ms).
    pub p99_ms: Option<f64>,
}

impl RouteStats {
    /// 5xx answers ÷ requests (0 without requests).
    pub fn error_ratio(&self) -> f64 {
        if self.requests > 0 {
            self.s5xx as f64 / self.requests as f64
        } else {
            0.0
        }
    }
}

/// One ten-second bucket of a route's gateway traffic, for a chart.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BucketPoint {
    /// Bucket start (s since the epoch).
    pub t: u64,
    /// Requests.
    pub requests: u64,
    /// 4xx answers.
    pub s4xx: u64,
    /// 5xx answers.
    pub s5xx: u64,
    /// 429 answers.
    pub s429: u64,
    /// Median latency (ms).
    pub p50_ms: Option<f64>,
    /// 99th percentile (ms).
    pub p99_ms: Option<f64>,
}

/// What a gateway's access-log line says of the request it answered: the
/// gateway source's part of a log record (a record is a gateway's when it
/// carries a rate-limit rule, a circuit state, response flags, or a status
/// beside a route).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Line {
    /// Route.
    pub route: Option<Arc<str>>,
    /// HTTP status.
    pub status: Option<i64>,
    /// Rate-limit rule that answered.
    pub rate_limit_rule: Option<Arc<str>>,
    /// Circuit-breaker state (CLOSED, OPEN, HALF_OPEN).
    pub circuit_state: Option<Arc<str>>,
    /// Envoy response flags (UT, UF, UO, UH, URX, RL, ...).
    pub response_flags: Option<Arc<str>>,
    /// Upstream (`server.address`).
    pub upstream: Option<Arc<str>>,
    /// Request duration at the gateway (ms).
    pub duration_ms: Option<f64>,
}

impl Line {
    /// The line of a record's attributes, when they are a gateway's, its
    /// texts taken from `texts`.
    fn read(a: &[KeyValue], texts: &Texts) -> Option<Line> {
        const RULE: [&str; 2] = ["gateway.rate_limit_rule", "rate_limit_rule"];
        const CIRCUIT: [&str; 2] = ["gateway.circuit_state", "circuit_state"];
        const FLAGS: [&str; 2] = ["gateway.response_flags", "response_flags"];
        let raw = |keys: &[&str]| find(a, keys).and_then(s);
        let status = find(a, &["http.response.status_code", "status_code", "status"])
            .and_then(num)
            .map(|x| x as i64);
        let (rule, circuit, flags) = (raw(&RULE), raw(&CIRCUIT), raw(&FLAGS));
        // A field written but saying "none" (`-`) still marks a gateway's
        // line; an application's record is left before anything is copied.
        let gateway = rule.is_some()
            || circuit.is_some()
            || flags.is_some()
            || (status.is_some() && find(a, &ROUTE_KEYS).is_some());
        if !gateway {
            return None;
        }
        let boxed = |v: Option<String>| present(v).map(|v| texts.get(v));
        Some(Line {
            route: boxed(raw(&ROUTE_KEYS)),
            status,
            rate_limit_rule: boxed(rule),
            circuit_state: boxed(circuit),
            response_flags: boxed(flags),
            upstream: boxed(raw(&["server.address", "upstream"])),
            duration_ms: find(a, &["http.server.request.duration"])
                .and_then(num)
                .map(|sec| sec * 1000.0)
                .or_else(|| find(a, &["duration_ms"]).and_then(num)),
        })
    }

    /// The bytes it is counted at.
    fn bytes(&self) -> usize {
        [
            &self.route,
            &self.rate_limit_rule,
            &self.circuit_state,
            &self.response_flags,
            &self.upstream,
        ]
        .iter()
        .map(|x| x.as_ref().map_or(0, |s| s.len()))
        .sum::<usize>()
            + std::mem::size_of::<Line>()
    }
}

/// A gateway field's value, unless it says "none": access logs write `-`
/// (Envoy, NGINX) or nothing for a field with no value.
fn present(v: Option<String>) -> Option<String> {
    v.filter(|x| !x.trim().is_empty() && x.trim() != "-")
}

/// The texts of gateway lines (routes, rules, circuit states, flags,
/// upstreams: few distinct values), one allocation each shared by every
/// line that has it, at most `MAX_TEXTS` of them; past that a line's text
/// is its own.
#[derive(Default)]
struct Texts(Mutex<HashSet<Arc<str>>>);

/// The most texts shared.
const MAX_TEXTS: usize = 4096;

impl Texts {
    fn get(&self, v: String) -> Arc<str> {
        let mut g = lock(&self.0);
        if let Some(t) = g.get(v.as_str()) {
            return Arc::clone(t);
        }
        let t: Arc<str> = v.into();
        if g.len() < MAX_TEXTS {
            g.insert(Arc::clone(&t));
        }
        t
    }
}

/// The gateway's line of a record, if it is one.
fn line(ev: &LogEvidence) -> Option<&Line> {
    ev.parts.get::<Line>()
}

/// Each record's gateway hop in a trace (the gateway's part of the trace).
#[derive(Debug, Default)]
struct Hops(Vec<Option<i64>>);

fn cell<'a>(t: &'a TraceRow, i: usize, f: impl FnOnce(&'a Line) -> V<'a>, none: V<'a>) -> V<'a> {
    line(&t.logs[i]).map_or(none, f)
}

/// The gateway's columns of `logs` (null on a record that is not a gateway's).
static LOG_COLUMNS: &[Column<TraceRow>] = &[
    Column::<TraceRow>::bool("gateway", |t, i| V::B(Some(line(&t.logs[i]).is_some())))
        .doc("Whether the record is a gateway's access-log line."),
    Column::<TraceRow>::int("hop", |t, i| {
        V::I(
            t.parts
                .get::<Hops>()
                .and_then(|h| h.0.get(i).copied().flatten()),
        )
    })
    .doc("Which gateway hop of the trace the line is (1: the outermost)."),
    Column::<TraceRow>::text("route", |t, i| {
        cell(t, i, |l| V::S(l.route.as_deref()), V::S(None))
    })
    .doc("The line's route (`route_id`)."),
    Column::<TraceRow>::int("status", |t, i| cell(t, i, |l| V::I(l.status), V::I(None)))
        .doc("The status the gateway answered."),
    Column::<TraceRow>::text("rate_limit_rule", |t, i| {
        cell(t, i, |l| V::S(l.rate_limit_rule.as_deref()), V::S(None))
    })
    .doc("The rate-limit rule that turned the request away, if one did."),
    Column::<TraceRow>::text("circuit_state", |t, i| {
        cell(t, i, |l| V::S(l.circuit_state.as_deref()), V::S(None))
    })
    .doc("The circuit breaker's state (`CLOSED`, `OPEN`, `HALF_OPEN`)."),
    Column::<TraceRow>::text("response_flags", |t, i| {
        cell(t, i, |l| V::S(l.response_flags.as_deref()), V::S(None))
    })
    .doc("Envoy's response flags (`UO`, `UF`, `URX`, …)."),
    Column::<TraceRow>::text("upstream", |t, i| {
        cell(t, i, |l| V::S(l.upstream.as_deref()), V::S(None))
    })
    .doc("The upstream the gateway sent the request to."),
    Column::<TraceRow>::float("duration_ms", |t, i| {
        cell(t, i, |l| V::F(l.duration_ms), V::F(None))
    })
    .doc("The request's time at the gateway (ms)."),
];

/// The hop of each gateway record of a trace: 0 for the outermost gateway
/// (an edge gateway or ingress), 1 for the one it forwarded to (an API
/// gateway, a sidecar), … (`None` for application records). A gateway is a
/// `service.name`; the outermost is the one whose request began first (its
/// record's time less its duration), the longer one on a tie: it holds the
/// others inside it.
pub fn hops(logs: &[Arc<LogEvidence>]) -> Vec<Option<i64>> {
    let start = |l: &LogEvidence, g: &Line| {
        let d = g
            .duration_ms
            .filter(|d| d.is_finite() && *d >= 0.0)
            .unwrap_or(0.0);
        (l.time_ns as f64 / 1e6 - d, -d)
    };
    // Each gateway's earliest start.
    let mut firsts: Vec<(&str, (f64, f64))> = Vec::new();
    for (l, g) in logs.iter().filter_map(|l| Some((l, line(l)?))) {
        let s = start(l, g);
        match firsts.iter_mut().find(|(svc, _)| *svc == &*l.service) {
            Some((_, f)) if s.partial_cmp(f) == Some(std::cmp::Ordering::Less) => *f = s,
            Some(_) => {}
            None => firsts.push((&l.service, s)),
        }
    }
    firsts.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal));
    logs.iter()
        .map(|l| {
            line(l)
                .and_then(|_| firsts.iter().position(|(svc, _)| *svc == &*l.service))
                .map(|i| i as i64)
        })
        .collect()
}

/// The gateway source.
pub struct Gateway {
    window_ns: u64,
    max_routes: usize,
    routes: Mutex<HashMap<String, RouteWindow>>,
    /// Entry route → gateway route id, learned from traces that had both.
    learned: Mutex<HashMap<String, String>>,
    texts: Texts,
}

impl Gateway {
    /// Statistics over `window_ns` of at most `max_routes` routes.
    pub fn new(window_ns: u64, max_routes: usize) -> Self {
        Gateway {
            window_ns,
            max_routes,
            routes: Mutex::new(HashMap::new()),
            learned: Mutex::new(HashMap::new()),
            texts: Texts::default(),
        }
    }

    /// Remember the gateway route id of an entry route (at most `max_routes`).
    fn learn_route(&self, entry: &str, route_id: &str) {
        let mut g = lock(&self.learned);
        if g.get(entry).map(String::as_str) == Some(route_id)
            || (g.len() >= self.max_routes && !g.contains_key(entry))
        {
            return;
        }
        g.insert(entry.to_string(), route_id.to_string());
    }

    /// The gateway route id learned for an entry route.
    fn learned_route(&self, entry: &str) -> Option<String> {
        lock(&self.learned).get(entry).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RouteWindow>> {
        lock(&self.routes)
    }

    /// A route's statistics over the window ending at `now_ns`.
    pub fn route_stats(&self, route: &str, now_ns: u64) -> Option<RouteStats> {
        let g = self.lock();
        let w = g.get(route)?;
        Some(stats_over(w, now_ns, self.window_ns))
    }

    /// Every route's statistics over the `window_ns` ending at `now_ns`
    /// (10-second buckets: a bucket counts when any of it is in the window).
    pub fn routes_over(&self, now_ns: u64, window_ns: u64) -> Vec<(String, RouteStats)> {
        let g = self.lock();
        let from_s = now_ns.saturating_sub(window_ns) / 1_000_000_000;
        routes_since(&g, from_s)
            .map(|(r, w)| (r.clone(), stats_over(w, now_ns, window_ns)))
            .collect()
    }

    /// Routes with statistics.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no route has statistics.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `/api/routes`: every route with gateway traffic in the window, worst first.
    fn routes_page(&self, view: &View<'_>) -> serde_json::Value {
        let now = view.now_ns;
        // Per route: causes counted, and the latest trace of each.
        let mut by_route: HashMap<String, BTreeMap<String, (u64, [u8; 16])>> = HashMap::new();
        view.store
            .outbox
            .visit(now.saturating_sub(view.window_ns), |_, e| {
                let causes = match by_route.get_mut(e.route.as_str()) {
                    Some(c) => c,
                    None => by_route.entry(e.route.clone()).or_default(),
                };
                match causes.get_mut(e.cause.as_str()) {
                    Some(c) => {
                        c.0 += 1;
                        c.1 = e.trace_id;
                    }
                    None => {
                        causes.insert(e.cause.clone(), (1, e.trace_id));
                    }
                }
            });
        let mut rows: Vec<serde_json::Value> = self
            .routes_detail(now, view.window_ns)
            .into_iter()
            .map(|(route, st, points)| {
                let causes = by_route.get(route.as_str());
                let analysed: u64 = causes.map_or(0, |c| c.values().map(|x| x.0).sum());
                // The dominant cause among those that name one.
                let top = causes.and_then(|c| {
                    c.iter()
                        .filter(|(cause, _)| cause.as_str() != UNKNOWN.name)
                        .max_by_key(|(_, x)| x.0)
                        .or_else(|| c.iter().max_by_key(|(_, x)| x.0))
                });
                let bad = st.s5xx + st.s429;
                serde_json::json!({
                    "route": route,
                    "requests": st.requests,
                    "s4xx": st.s4xx, "s5xx": st.s5xx, "s429": st.s429, "s503": st.s503, "s504": st.s504,
                    "error_ratio": if st.requests > 0 { bad as f64 / st.requests as f64 } else { 0.0 },
                    "p50_ms": st.p50_ms, "p99_ms": st.p99_ms,
                    "circuit_state": st.circuit_state,
                    "rate_limit_rule": st.top_rule,
                    "analysed": analysed,
                    "cause": top.map(|(c, _)| c),
                    "cause_share": top.map(|(_, x)| if analysed > 0 { x.0 as f64 / analysed as f64 } else { 0.0 }),
                    "exemplar": top.map(|(_, x)| hex::encode(x.1)),
                    "points": points,
                })
            })
            .collect();
        // The worst first: most failing answers, then the slowest.
        rows.sort_by(|a, b| {
            let key = |v: &serde_json::Value| {
                (
                    v["error_ratio"].as_f64().unwrap_or(0.0),
                    v["p99_ms"].as_f64().unwrap_or(0.0),
                )
            };
            let (ka, kb) = (key(a), key(b));
            kb.0.total_cmp(&ka.0).then(kb.1.total_cmp(&ka.1))
        });
        serde_json::json!({ "window_s": view.window_ns / 1_000_000_000, "routes": rows })
    }

    /// Every route with traffic in the `window_ns` ending at `now_ns`: its
    /// statistics and its ten-second buckets.
    pub fn routes_detail(
        &self,
        now_ns: u64,
        window_ns: u64,
    ) -> Vec<(String, RouteStats, Vec<BucketPoint>)> {
        let g = self.lock();
        let from_s = now_ns.saturating_sub(window_ns) / 1_000_000_000;
        routes_since(&g, from_s)
            .map(|(r, w)| {
                let points = w
                    .buckets
                    .iter()
                    .filter(|b| b.start_s + 10 >= from_s)
                    .map(|b| BucketPoint {
                        t: b.start_s,
                        requests: b.requests,
                        s4xx: b.s4xx,
                        s5xx: b.s5xx,
                        s429: b.s429,
                        p50_ms: b.latency.quantile(0.5),
                        p99_ms: b.latency.quantile(0.99),
                    })
                    .collect();
                (r.clone(), stats_over(w, now_ns, window_ns), points)
            })
            .collect()
    }
}

/// A route's statistics over the window, as a row of a table.
#[derive(Debug)]
pub struct RouteRow {
    /// The route.
    pub route: String,
    /// Its statistics.
    pub stats: RouteStats,
}

/// The rules' table of each trace's route.
static ROUTE_STATS: Declared<Traced<RouteRow>> = Declared {
    name: "route_stats",
    doc: "The gateway's traffic on the trace's route over the window: one row per trace with \
          a known route. Its rules read the gateway's own records in `logs`.",
    purpose: Purpose::Rules,
    columns: &[
        Column::<Traced<RouteRow>>::text("trace_id", |r, _| s_(&r.trace_id)).doc("The trace."),
        Column::<Traced<RouteRow>>::text("route", |r, _| s_(&r.row.route))
            .doc("The route (`route_id`)."),
        Column::<Traced<RouteRow>>::int("requests", |r, _| count(r.row.stats.requests))
            .doc("Requests."),
        Column::<Traced<RouteRow>>::int("s4xx", |r, _| count(r.row.stats.s4xx)).doc("4xx answers."),
        Column::<Traced<RouteRow>>::int("s5xx", |r, _| count(r.row.stats.s5xx)).doc("5xx answers."),
        Column::<Traced<RouteRow>>::int("s429", |r, _| count(r.row.stats.s429)).doc("429 answers."),
        Column::<Traced<RouteRow>>::int("s503", |r, _| count(r.row.stats.s503)).doc("503 answers."),
        Column::<Traced<RouteRow>>::int("s504", |r, _| count(r.row.stats.s504)).doc("504 answers."),
        Column::<Traced<RouteRow>>::float("error_ratio", |r, _| {
            V::F(Some(r.row.stats.error_ratio()))
        })
        .doc("5xx answers ÷ requests (0 without requests)."),
        Column::<Traced<RouteRow>>::int("not_closed", |r, _| count(r.row.stats.not_closed))
            .doc("Records whose circuit state was not CLOSED."),
        Column::<Traced<RouteRow>>::text("top_rule", |r, _| so(&r.row.stats.top_rule))
            .doc("The most frequent rate-limit rule."),
        Column::<Traced<RouteRow>>::text("circuit_state", |r, _| so(&r.row.stats.circuit_state))
            .doc("The latest circuit state."),
        Column::<Traced<RouteRow>>::int("circuit_changes", |r, _| {
            count(r.row.stats.circuit_changes)
        })
        .doc("Circuit state changes seen."),
        Column::<Traced<RouteRow>>::float("p50_ms", |r, _| V::F(r.row.stats.p50_ms))
            .doc("Median latency (ms)."),
        Column::<Traced<RouteRow>>::float("p99_ms", |r, _| V::F(r.row.stats.p99_ms))
            .doc("99th percentile latency (ms)."),
    ],
};

/// The alerts' table of routes.
static ROUTES: Declared<RouteRow> = Declared {
    name: "routes",
    doc: "A route with gateway traffic in the window: one row per route.",
    purpose: Purpose::Alerts,
    columns: &[
        Column::<RouteRow>::text("route_id", |r, _| s_(&r.route)).doc("The route."),
        Column::<RouteRow>::int("requests", |r, _| count(r.stats.requests)).doc("Requests."),
        Column::<RouteRow>::int("s4xx", |r, _| count(r.stats.s4xx)).doc("4xx answers."),
        Column::<RouteRow>::int("s5xx", |r, _| count(r.stats.s5xx)).doc("5xx answers."),
        Column::<RouteRow>::int("s429", |r, _| count(r.stats.s429)).doc("429 answers."),
        Column::<RouteRow>::int("s503", |r, _| count(r.stats.s503)).doc("503 answers."),
        Column::<RouteRow>::int("s504", |r, _| count(r.stats.s504)).doc("504 answers."),
        Column::<RouteRow>::float("error_ratio", |r, _| V::F(Some(r.stats.error_ratio())))
            .doc("5xx answers ÷ requests (0 without requests)."),
        Column::<RouteRow>::int("not_closed", |r, _| count(r.stats.not_closed))
            .doc("Records whose circuit state was not CLOSED."),
        Column::<RouteRow>::text("top_rule", |r, _| so(&r.stats.top_rule))
            .doc("The most frequent rate-limit rule."),
        Column::<RouteRow>::text("circuit_state", |r, _| so(&r.stats.circuit_state))
            .doc("The latest circuit state."),
        Column::<RouteRow>::int("circuit_changes", |r, _| count(r.stats.circuit_changes))
            .doc("Circuit state changes seen."),
        Column::<RouteRow>::float("p50_ms", |r, _| V::F(r.stats.p50_ms))
            .doc("Median latency (ms)."),
        Column::<RouteRow>::float("p99_ms", |r, _| V::F(r.stats.p99_ms))
            .doc("99th percentile latency (ms)."),
    ],
};

/// A route's statistics as evidence.
#[derive(serde::Serialize)]
struct EvRoute<'a> {
    route: &'a str,
    #[serde(flatten)]
    stats: &'a RouteStats,
}

impl Source for Gateway {
    fn name(&self) -> &'static str {
        "gateway"
    }

    fn tables(&self) -> Vec<About> {
        vec![ROUTE_STATS.about(), ROUTES.about()]
    }

    fn join(&self, tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        // A route's statistics are the same for every trace of the tick:
        // computed, and written as evidence, once.
        type Stats = Option<(RouteStats, Arc<serde_json::Value>)>;
        let mut stats: HashMap<String, Stats> = HashMap::new();
        let none = Arc::new(serde_json::Value::Null);
        let mut rows = Vec::new();
        for t in traces.iter_mut() {
            let st = t.route.as_ref().and_then(|route| {
                stats
                    .entry(route.clone())
                    .or_insert_with(|| {
                        let s = self.route_stats(route, tick.now_ns)?;
                        let ev = Arc::new(json(&EvRoute { route, stats: &s }));
                        Some((s, ev))
                    })
                    .as_ref()
                    .map(|(s, ev)| (route.clone(), s.clone(), ev.clone()))
            });
            let ev = st.as_ref().map_or_else(|| none.clone(), |x| x.2.clone());
            t.joined.push(Joined::Field("route_stats", ev));
            if let Some((route, stats, _)) = st {
                let trace_id = t.trace_id.clone();
                let row = RouteRow { route, stats };
                rows.push(Traced { trace_id, row });
            }
        }
        Ok(Join {
            tables: vec![ROUTE_STATS.batch(&rows)?],
            misses: 0,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        vec![
            r(
                "gateway_429",
                &RATE_LIMITED,
                r#"
SELECT l.trace_id, 1.0 AS confidence,
  concat('route ', coalesce(max(l.route), '?'), ' rate-limited by ', coalesce(max(l.rate_limit_rule), 'a rate limit'), ': ',
         CAST(sum(CASE WHEN l.status = 429 THEN 1 ELSE 0 END) AS VARCHAR), ' of ', CAST(count(*) AS VARCHAR),
         ' gateway attempts answered 429') AS summary,
  concat('rate_limit_rule=', coalesce(max(l.rate_limit_rule), '')) AS evidence,
  max(CASE WHEN l.status = 429 THEN l.span_id END) AS at_span_id,
  -- The gateway is the limiter when its own rule answered; a 429 it
  -- passed on came from the callee that answered it.
  max(CASE WHEN l.rate_limit_rule IS NOT NULL THEN l.service END) AS culprit_service,
  CASE WHEN max(t.final_status) = 429 OR (bool_or(t.failed) AND bool_or(NOT c.recovered)) THEN max(t.duration_ms)
       ELSE least(max(t.duration_ms), greatest(0.0, max(CASE WHEN l.status = 429 THEN l.time_ms END) - max(t.start_unix_ms),
                                               coalesce(max(r.window_ms), 0.0))) END AS explained_ms,
  -- The request failed with the 429, or an inner gateway's 429s failed the
  -- call they answered (its client gave up) and so the request.
  coalesce(max(t.final_status) = 429, false) OR coalesce(bool_or(t.failed) AND bool_or(NOT c.recovered), false) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id
  LEFT JOIN spans c ON c.trace_id = l.trace_id AND c.span_id = l.span_id AND l.status = 429 AND c.kind = 'client'
  -- A client that retried after the 429s: the time until it got through.
  LEFT JOIN (SELECT trace_id, max(retry_window_ms) AS window_ms FROM spans
             WHERE retry_trigger = '429' GROUP BY trace_id) r ON r.trace_id = l.trace_id
WHERE l.gateway
GROUP BY l.trace_id, l.service
HAVING sum(CASE WHEN l.status = 429 THEN 1 ELSE 0 END) > 0"#,
            ),
            r(
                "gateway_circuit_open",
                &CIRCUIT_OPEN,
                r#"
SELECT l.trace_id, 1.0 AS confidence,
  concat('circuit breaker ', coalesce(max(upper(l.circuit_state)), 'OPEN'), ' for ', coalesce(max(CASE WHEN (upper(l.circuit_state) IN ('OPEN', 'HALF_OPEN', 'HALF-OPEN') OR l.response_flags LIKE '%UO%') THEN l.upstream END), 'the upstream'),
         ' on route ', coalesce(max(l.route), '?'), ': ',
         CAST(sum(CASE WHEN l.status = 503 THEN 1 ELSE 0 END) AS VARCHAR), ' of ', CAST(count(*) AS VARCHAR),
         ' gateway attempts answered 503 without reaching it') AS summary,
  concat('circuit_state=', coalesce(max(l.circuit_state), ''), ' response_flags=', coalesce(max(l.response_flags), '')) AS evidence,
  max(CASE WHEN upper(l.circuit_state) IN ('OPEN', 'HALF_OPEN', 'HALF-OPEN') OR l.response_flags LIKE '%UO%' THEN l.span_id END) AS at_span_id,
  max(CASE WHEN (upper(l.circuit_state) IN ('OPEN', 'HALF_OPEN', 'HALF-OPEN') OR l.response_flags LIKE '%UO%') THEN l.upstream END) AS culprit_service,
  CASE WHEN bool_or(t.failed) THEN max(t.duration_ms) ELSE coalesce(sum(l.duration_ms), 0.0) END AS explained_ms,
  bool_or(t.failed) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id WHERE l.gateway
GROUP BY l.trace_id, l.service
HAVING sum(CASE WHEN upper(l.circuit_state) IN ('OPEN', 'HALF_OPEN', 'HALF-OPEN') OR l.response_flags LIKE '%UO%' THEN 1 ELSE 0 END) > 0"#,
            ),
            r(
                "gateway_504",
                &UPSTREAM_TIMEOUT,
                r#"
SELECT l.trace_id, 1.0 AS confidence,
  concat('upstream ', coalesce(max(CASE WHEN l.status = 504 OR l.response_flags LIKE '%UT%' THEN l.upstream END), '?'), ' timed out on route ', coalesce(max(l.route), '?'), ': ',
         CAST(sum(CASE WHEN l.status = 504 OR l.response_flags LIKE '%UT%' THEN 1 ELSE 0 END) AS VARCHAR), ' of ',
         CAST(count(*) AS VARCHAR), ' gateway attempts answered 504 after ',
         CAST(CAST(max(l.duration_ms) AS BIGINT) AS VARCHAR), ' ms') AS summary,
  max(CASE WHEN l.status = 504 OR l.response_flags LIKE '%UT%' THEN l.span_id END) AS at_span_id,
  -- The upstream that did not answer in time (the service seen serving
  -- its address): named even when its own span ends after the decision.
  max(CASE WHEN l.status = 504 OR l.response_flags LIKE '%UT%' THEN l.upstream END) AS culprit_service,
  CASE WHEN max(t.final_status) = 504 THEN max(t.duration_ms) ELSE coalesce(max(l.duration_ms), 0.0) END AS explained_ms,
  coalesce(max(t.final_status) = 504, false) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id WHERE l.gateway
GROUP BY l.trace_id, l.service
HAVING sum(CASE WHEN l.status = 504 OR l.response_flags LIKE '%UT%' THEN 1 ELSE 0 END) > 0"#,
            ),
            r(
                "gateway_503",
                &UPSTREAM_UNAVAILABLE,
                r#"
SELECT l.trace_id, 1.0 AS confidence,
  concat('upstream ', coalesce(max(CASE WHEN l.status IN (502, 503) OR l.response_flags LIKE '%UF%' OR l.response_flags LIKE '%UH%' THEN l.upstream END), '?'), ' unavailable on route ', coalesce(max(l.route), '?'), ': ',
         CAST(sum(CASE WHEN l.status IN (502, 503) THEN 1 ELSE 0 END) AS VARCHAR), ' of ', CAST(count(*) AS VARCHAR),
         ' gateway attempts answered ', CAST(max(l.status) AS VARCHAR),
         CASE WHEN max(l.response_flags) IS NULL THEN '' ELSE concat(' (', max(l.response_flags), ')') END) AS summary,
  max(CASE WHEN l.status IN (502, 503) OR l.response_flags LIKE '%UF%' OR l.response_flags LIKE '%UH%' THEN l.upstream END) AS culprit_service,
  max(CASE WHEN l.status IN (502, 503) OR l.response_flags LIKE '%UF%' OR l.response_flags LIKE '%UH%' THEN l.span_id END) AS at_span_id,
  CASE WHEN max(t.final_status) IN (502, 503) THEN max(t.duration_ms) ELSE coalesce(sum(l.duration_ms), 0.0) END AS explained_ms,
  coalesce(max(t.final_status) IN (502, 503), false) AS explains_failure
FROM logs l JOIN traces t ON t.trace_id = l.trace_id WHERE l.gateway
GROUP BY l.trace_id, l.service
HAVING sum(CASE WHEN (l.status IN (502, 503) OR l.response_flags LIKE '%UF%' OR l.response_flags LIKE '%UH%')
                 AND coalesce(upper(l.circuit_state), 'CLOSED') = 'CLOSED' THEN 1 ELSE 0 END) > 0"#,
            ),
        ]
    }

    capabilities!(metrics, logs, state, trouble);
}

impl KeepsMetrics for Gateway {
    fn keep(&self, o: &Offer<'_>) -> Option<Kept> {
        if o.kind != PointKind::Number {
            return None;
        }
        let route = find(o.attrs, &ROUTE_KEYS).and_then(s)?;
        Some(Kept {
            key: Key::new("gateway").with("route_id", Some(route)),
            drop: JOIN_ATTRS,
            add: Vec::new(),
        })
    }

    fn dims(&self) -> &'static [&'static str] {
        &["route_id"]
    }
}

impl ReadsLogs for Gateway {
    fn read_log(&self, attrs: &[KeyValue], record: &mut LogEvidence) {
        if let Some(l) = Line::read(attrs, &self.texts) {
            let bytes = l.bytes();
            record.parts.put(l, bytes);
        }
    }

    fn observe(&self, ev: &LogEvidence, _clock_ns: u64) {
        let Some(l) = line(ev) else { return };
        if let Some(route) = &l.route {
            add_route(
                &mut self.lock(),
                (self.window_ns, self.max_routes),
                route,
                (ev.time_ns, l),
            );
        }
    }

    /// Gateways in layers: the request's answer and its route are the
    /// outermost gateway's; an inner hop's lines are evidence of the hop.
    /// The gateway's own route id is the route; the service route it maps
    /// to is learned, so a trace whose gateway line is missing still gets it.
    fn join_logs(&self, t: &mut TraceRow) {
        let entry_route = t.route.clone();
        let hop = hops(&t.logs);
        let mut outer: Vec<(u64, &Line)> = t
            .logs
            .iter()
            .zip(&hop)
            .filter(|(_, h)| **h == Some(0))
            .filter_map(|(l, _)| Some((l.time_ns, line(l)?)))
            .collect();
        // The last answer is the request's.
        if let Some((_, g)) = outer.iter().max_by_key(|(at, _)| *at) {
            if let Some(st) = g.status {
                t.final_status = Some(st);
                t.failed |= st >= 500 || st == 429;
            }
        }
        outer.sort_by_key(|(at, _)| *at);
        let gw_route = outer
            .iter()
            .find_map(|(_, l)| l.route.as_deref().map(str::to_string));
        t.route = match (gw_route, entry_route) {
            (Some(gw), Some(entry)) => {
                self.learn_route(&entry, &gw);
                Some(gw)
            }
            (Some(gw), None) => Some(gw),
            (None, Some(entry)) => Some(self.learned_route(&entry).unwrap_or(entry)),
            (None, None) => None,
        };
        if hop.iter().any(Option::is_some) {
            t.parts.put(Hops(hop), 0);
        }
        // Where each line forwarded its caller's call: `Peers` names the
        // upstream address after the server span that answered it.
        t.proxied = t
            .logs
            .iter()
            .filter_map(|l| {
                let span = u64::from_str_radix(l.span_id.as_deref()?, 16).ok()?;
                Some((span, line(l)?.upstream.clone()?))
            })
            .collect();
    }

    fn log_columns(&self) -> &'static [Column<TraceRow>] {
        LOG_COLUMNS
    }
}

impl ShowsState for Gateway {
    fn alert_tables(&self, view: Option<&View<'_>>) -> Result<Vec<Table>, String> {
        let routes: Vec<RouteRow> = view
            .map(|v| self.routes_over(v.now_ns, v.window_ns))
            .unwrap_or_default()
            .into_iter()
            .map(|(route, stats)| RouteRow { route, stats })
            .collect();
        Ok(vec![ROUTES.batch(&routes)?])
    }

    fn api(&self, path: &str, view: &View<'_>) -> Option<serde_json::Value> {
        (path == "routes").then(|| self.routes_page(view))
    }
}

impl ShowsTrouble for Gateway {
    fn trouble_keys(&self) -> &'static [&'static str] {
        &["http.route", "route_id"]
    }

    fn in_trouble(&self, asked: &Asked<'_, '_>) -> bool {
        let Asked {
            store,
            values,
            trace_id,
            trouble: tr,
        } = *asked;
        let bad = store
            .logs
            .of(trace_id)
            .iter()
            .filter_map(|l| line(l))
            .any(|l| {
                l.status.is_some_and(|s| tr.statuses.contains(&s))
                    || l.circuit_state
                        .as_deref()
                        .is_some_and(|c| !c.eq_ignore_ascii_case("CLOSED"))
            });
        if bad {
            return true;
        }
        let now_s = store.clock() / 1_000_000_000;
        let horizon = now_s.saturating_sub(self.window_ns / 1_000_000_000);
        let g = self.lock();
        let routes: Vec<&str> = self.trouble_keys().iter().flat_map(|k| values(k)).collect();
        for r in routes {
            if let Some(w) = g.get(r) {
                if w.circuit_state.as_deref().is_some_and(|c| c != "CLOSED") {
                    return true;
                }
                let (mut req, mut bad) = (0u64, 0u64);
                for b in w.buckets.iter().filter(|b| b.start_s + 10 >= horizon) {
                    req += b.requests;
                    for st in &tr.statuses {
                        bad += match st {
                            429 => b.s429,
                            503 => b.s503,
                            504 => b.s504,
                            _ => 0,
                        };
                    }
                }
                if req > 0 && bad as f64 / req as f64 >= tr.route_error_ratio {
                    return true;
                }
            }
        }
        false
    }
}
/// The routes with a ten-second bucket reaching into `[from_s, …)`.
fn routes_since(
    g: &HashMap<String, RouteWindow>,
    from_s: u64,
) -> impl Iterator<Item = (&String, &RouteWindow)> {
    g.iter()
        .filter(move |(_, w)| w.buckets.iter().any(|b| b.start_s + 10 >= from_s))
}

fn stats_over(w: &RouteWindow, now_ns: u64, window_ns: u64) -> RouteStats {
    let horizon = now_ns.saturating_sub(window_ns) / 1_000_000_000;
    let mut st = RouteStats {
        circuit_state: w.circuit_state.clone(),
        circuit_changes: w.circuit_changes,
        ..Default::default()
    };
    let mut rules: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sketch = Sketch::default();
    for b in w.buckets.iter().filter(|b| b.start_s + 10 >= horizon) {
        st.requests += b.requests;
        st.s4xx += b.s4xx;
        st.s5xx += b.s5xx;
        st.s429 += b.s429;
        st.s503 += b.s503;
        st.s504 += b.s504;
        st.not_closed += b.not_closed;
        for (r, n) in &b.rules {
            *rules.entry(r).or_default() += n;
        }
        sketch.merge(&b.latency);
    }
    st.top_rule = rules
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(r, _)| r.to_string());
    st.p50_ms = sketch.quantile(0.5);
    st.p99_ms = sketch.quantile(0.99);
    st
}

fn add_route(
    g: &mut HashMap<String, RouteWindow>,
    (window_ns, max_routes): (u64, usize),
    route: &str,
    (time_ns, ev): (u64, &Line),
) {
    if !g.contains_key(route) && g.len() >= max_routes {
        return;
    }
    let w = g.entry(route.to_string()).or_default();
    let start_s = time_ns / 1_000_000_000 / 10 * 10;
    if w.buckets.back().is_none_or(|b| b.start_s < start_s) {
        w.buckets.push_back(Bucket {
            start_s,
            ..Default::default()
        });
    }
    let window_buckets = (window_ns / 10_000_000_000).max(1) as usize + 1;
    while w.buckets.len() > window_buckets {
        w.buckets.pop_front();
    }
    // A record older than the newest bucket goes to the bucket of its time if kept.
    let Some(b) = w.buckets.iter_mut().rev().find(|b| b.start_s <= start_s) else {
        return;
    };
    b.requests += 1;
    if let Some(st) = ev.status {
        b.s4xx += u64::from((400..500).contains(&st));
        b.s5xx += u64::from((500..600).contains(&st));
        b.s429 += u64::from(st == 429);
        b.s503 += u64::from(st == 503);
        b.s504 += u64::from(st == 504);
    }
    if let Some(r) = &ev.rate_limit_rule {
        if ev.status == Some(429) {
            *b.rules.entry(r.to_string()).or_default() += 1;
        }
    }
    if let Some(d) = ev.duration_ms {
        b.latency.add(d);
    }
    // A record without a circuit state whose request reached the upstream
    // and was answered (status below 500) says the circuit is closed now:
    // gateways that report the breaker only when it trips (Envoy's `UO`
    // flag, a 503 with `circuit_state: OPEN`) would otherwise leave the
    // route open for the whole window after one trip, and every trace of
    // the route would look troubled.
    let answered = ev.circuit_state.is_none()
        && ev
            .status
            .is_some_and(|st| (100..500).contains(&st) && st != 429);
    let closed = answered.then_some("CLOSED");
    if let Some(cs) = ev.circuit_state.as_deref().or(closed) {
        let cs_up = cs.to_ascii_uppercase();
        if cs_up != "CLOSED" {
            b.not_closed += 1;
        }
        if answered && w.circuit_state.is_none() {
            // Never reported open: nothing to close.
            return;
        }
        if w.circuit_state.as_deref().is_some_and(|prev| prev != cs_up) {
            w.circuit_changes += 1;
        }
        w.circuit_state = Some(cs_up);
    }
}

//! The `correlate` processor's part of the built-in page's JSON API (see
//! `causeway_core::ui`): routes, causes, the last analysed traces, Kafka
//! groups and RabbitMQ queues, read from the correlation state when asked.
//!
//! - `GET /api/routes`: every route with gateway traffic in the window, worst first.
//! - `GET /api/causes`: analysed traces per cause over time, top culprit
//!   services and top routes per cause.
//! - `GET /api/traces`: the last analysed traces (newest first, at most 200).
//! - `GET /api/traces/{trace_id}`: one of them with its spans, verdict and evidence.
//! - `GET /api/kafka`, `GET /api/queues`: consumer groups and queues as last seen.

use indexmap::IndexMap;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::features::{Hex16, TraceRow};
use super::store::Store;
use super::Verdict;

/// Spans kept per trace for the waterfall (the critical ones first).
pub const MAX_SPANS: usize = 300;
/// Log records kept per trace.
pub const MAX_LOGS: usize = 50;

/// One span of a kept trace.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SpanView {
    /// Span id (hex).
    pub span_id: String,
    /// Parent id (hex, "" for a root).
    pub parent_id: String,
    /// `service.name`.
    pub service: Arc<str>,
    /// Span name.
    pub name: String,
    /// server, client, producer, consumer, internal.
    pub kind: &'static str,
    /// Start relative to the trace (ms).
    pub start_ms: f64,
    /// Duration (ms).
    pub duration_ms: f64,
    /// Self time on the critical path (ms).
    pub self_ms: f64,
    /// On the critical path.
    pub critical: bool,
    /// unset, ok, error.
    pub status: &'static str,
}

/// A log record of a kept trace, as written.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LogView {
    /// Time relative to the trace's start (ms).
    pub at_ms: f64,
    /// From a gateway.
    pub gateway: bool,
    /// `service.name`.
    pub service: String,
    /// HTTP status.
    pub status: Option<i64>,
    /// The body.
    pub body: String,
}

/// An analysed trace as the page shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TraceView {
    /// Trace id (hex).
    pub trace_id: String,
    /// Start (ms since the epoch).
    pub start_unix_ms: f64,
    /// Duration (ms).
    pub duration_ms: f64,
    /// Route.
    pub route: Option<String>,
    /// The request failed.
    pub failed: bool,
    /// The final status.
    pub final_status: Option<i64>,
    /// Cause.
    pub cause: String,
    /// Rule.
    pub rule: String,
    /// Summary.
    pub summary: String,
    /// Confidence.
    pub confidence: f64,
    /// Culprit span id (hex).
    pub culprit_span_id: String,
    /// Culprit service.
    pub culprit_service: Arc<str>,
    /// Spans (at most [`MAX_SPANS`]).
    pub spans: Vec<SpanView>,
    /// Spans left out.
    pub spans_left_out: usize,
    /// Log records (at most [`MAX_LOGS`]).
    pub logs: Vec<LogView>,
    /// `rca.evidence` (JSON text; parsed when the trace is asked for).
    #[serde(skip)]
    pub evidence: String,
}

/// The view of an analysed trace, with the evidence written on it.
pub fn view(t: &TraceRow, v: &Verdict, evidence: String) -> TraceView {
    let mut order: Vec<usize> = (0..t.spans.len())
        .filter(|&i| t.spans[i].at != super::features::NOT_IN_BATCH)
        .collect();
    // The critical spans first, then the longest, when a trace is too big.
    if order.len() > MAX_SPANS {
        order.sort_by(|&a, &b| {
            t.spans[b]
                .critical
                .cmp(&t.spans[a].critical)
                .then(t.spans[b].duration_ms.total_cmp(&t.spans[a].duration_ms))
        });
    }
    let left_out = order.len().saturating_sub(MAX_SPANS);
    order.truncate(MAX_SPANS);
    order.sort_by(|&a, &b| t.spans[a].start_ms.total_cmp(&t.spans[b].start_ms));
    let hex = |id: u64| {
        if id == 0 {
            String::new()
        } else {
            Hex16::of(id).as_str().to_string()
        }
    };
    let culprit = &t.spans[v.culprit];
    let start_ns = t.start_ns as f64;
    TraceView {
        trace_id: t.trace_id.clone(),
        start_unix_ms: t.start_unix_ms,
        duration_ms: t.duration_ms,
        route: t.route.clone(),
        failed: t.failed,
        final_status: t.final_status,
        cause: v.best.cause.clone(),
        rule: v.best.rule.clone(),
        summary: v.best.summary.clone(),
        confidence: v.best.confidence,
        culprit_span_id: hex(culprit.span_id),
        culprit_service: culprit.service.clone(),
        spans: order
            .into_iter()
            .map(|i| {
                let s = &t.spans[i];
                SpanView {
                    span_id: hex(s.span_id),
                    parent_id: hex(s.parent_id),
                    service: s.service.clone(),
                    name: s.name.clone(),
                    kind: s.kind,
                    start_ms: s.start_ms,
                    duration_ms: s.duration_ms,
                    self_ms: s.self_ms,
                    critical: s.critical,
                    status: s.status,
                }
            })
            .collect(),
        spans_left_out: left_out,
        logs: t
            .logs
            .iter()
            .take(MAX_LOGS)
            .map(|l| LogView {
                at_ms: (l.time_ns as f64 - start_ns) / 1e6,
                gateway: l.gateway,
                service: l.service.clone(),
                status: l.status,
                body: l.body.clone(),
            })
            .collect(),
        evidence,
    }
}

/// The API source of one correlation state.
pub struct Api {
    /// The state.
    pub store: Arc<Store>,
    /// `alerts.links`, for the trace view's links out.
    pub links: IndexMap<String, String>,
    /// The window the routes and causes cover (ns).
    pub window_ns: u64,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn json(v: serde_json::Value) -> Option<(u16, String)> {
    Some((200, v.to_string()))
}

impl causeway_core::ui::ApiSource for Api {
    fn get(&self, path: &str) -> Option<(u16, String)> {
        match path {
            "routes" => json(self.routes(now_ns())),
            "causes" => json(self.causes(now_ns())),
            "traces" => json(self.traces()),
            "kafka" | "queues" => {
                let (groups, queues) = super::alerts::brokers(&self.store.latest_points());
                json(if path == "kafka" {
                    serde_json::json!(groups)
                } else {
                    serde_json::json!(queues)
                })
            }
            _ => {
                let id = path.strip_prefix("traces/")?;
                Some(self.trace(id))
            }
        }
    }
}

impl Api {
    fn routes(&self, now: u64) -> serde_json::Value {
        // Per route: causes counted, and the latest trace of each.
        let mut by_route: HashMap<String, BTreeMap<String, (u64, [u8; 16])>> = HashMap::new();
        self.store
            .visit_rca(now.saturating_sub(self.window_ns), |_, e| {
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
            .store
            .routes_detail(now, self.window_ns)
            .into_iter()
            .map(|(route, st, points)| {
                let causes = by_route.get(route.as_str());
                let analysed: u64 = causes.map_or(0, |c| c.values().map(|x| x.0).sum());
                // The dominant cause among those that name one.
                let top = causes.and_then(|c| {
                    c.iter()
                        .filter(|(cause, _)| cause.as_str() != "unknown")
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
        serde_json::json!({ "window_s": self.window_ns / 1_000_000_000, "routes": rows })
    }

    fn causes(&self, now: u64) -> serde_json::Value {
        // Ten-second buckets of analysis time; per cause its services and routes.
        let mut buckets: BTreeMap<u64, BTreeMap<String, u64>> = BTreeMap::new();
        let mut totals: BTreeMap<String, u64> = BTreeMap::new();
        let mut services: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        let mut routes: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        fn bump(m: &mut BTreeMap<String, u64>, k: &str) {
            match m.get_mut(k) {
                Some(n) => *n += 1,
                None => {
                    m.insert(k.to_string(), 1);
                }
            }
        }
        // The map under `k`, made on first use (no allocation when it exists).
        fn within<'a>(
            m: &'a mut BTreeMap<String, BTreeMap<String, u64>>,
            k: &str,
        ) -> Option<&'a mut BTreeMap<String, u64>> {
            if !m.contains_key(k) {
                m.insert(k.to_string(), BTreeMap::new());
            }
            m.get_mut(k)
        }
        self.store
            .visit_rca(now.saturating_sub(self.window_ns), |t, e| {
                let c = e.cause.as_str();
                bump(buckets.entry(t / 10_000_000_000 * 10).or_default(), c);
                bump(&mut totals, c);
                if let Some(m) = within(&mut services, c) {
                    bump(m, &e.service);
                }
                if let Some(m) = within(&mut routes, c).filter(|_| !e.route.is_empty()) {
                    bump(m, &e.route);
                }
            });
        let top = |m: Option<&BTreeMap<String, u64>>| -> Vec<serde_json::Value> {
            let mut v: Vec<(&str, u64)> = m
                .map(|m| m.iter().map(|(k, n)| (k.as_str(), *n)).collect())
                .unwrap_or_default();
            v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
            v.into_iter()
                .take(5)
                .map(|(k, n)| serde_json::json!({ "name": k, "traces": n }))
                .collect()
        };
        let mut causes: Vec<(&str, u64)> = totals.iter().map(|(k, n)| (k.as_str(), *n)).collect();
        causes.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        let mut all_services: BTreeMap<String, u64> = BTreeMap::new();
        for m in services.values() {
            for (s, n) in m {
                *all_services.entry(s.clone()).or_default() += n;
            }
        }
        serde_json::json!({
            "window_s": self.window_ns / 1_000_000_000,
            "buckets": buckets.iter().map(|(t, m)| serde_json::json!({ "t": t, "causes": m })).collect::<Vec<_>>(),
            "causes": causes.iter().map(|(c, n)| serde_json::json!({
                "cause": c,
                "traces": n,
                "services": top(services.get(*c)),
                "routes": top(routes.get(*c)),
            })).collect::<Vec<_>>(),
            "top_services": top(Some(&all_services)),
        })
    }

    fn traces(&self) -> serde_json::Value {
        let views = self.store.trace_views();
        let rows: Vec<serde_json::Value> = views
            .iter()
            .rev()
            .take(200)
            .map(|v| {
                serde_json::json!({
                    "trace_id": v.trace_id, "route": v.route, "cause": v.cause,
                    "duration_ms": v.duration_ms, "start_unix_ms": v.start_unix_ms,
                    "failed": v.failed, "final_status": v.final_status,
                    "summary": v.summary, "culprit_service": v.culprit_service,
                })
            })
            .collect();
        serde_json::json!({ "kept": views.len(), "traces": rows })
    }

    fn trace(&self, id: &str) -> (u16, String) {
        let id = id.trim().to_ascii_lowercase();
        if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return (
                400,
                causeway_core::ui::error(
                    "a trace id is 32 hexadecimal digits (as Jaeger and the OTLP JSON encoding write it)",
                ),
            );
        }
        let views = self.store.trace_views();
        let Some(v) = views.iter().rev().find(|v| v.trace_id == id) else {
            return (
                404,
                causeway_core::ui::error(&format!(
                    "trace {id} is not among the {} last analysed traces kept here (it may not have been kept by sampling, or it is older)",
                    views.len()
                )),
            );
        };
        let mut out = match serde_json::to_value(v.as_ref()) {
            Ok(x) => x,
            Err(e) => return (500, causeway_core::ui::error(&e.to_string())),
        };
        out["evidence"] = serde_json::from_str(&v.evidence).unwrap_or(serde_json::Value::Null);
        out["links"] = super::alerts::trace_links(
            &self.links,
            &v.trace_id,
            v.route.as_deref().unwrap_or(""),
            &v.cause,
        )
        .into_iter()
        .map(|(name, url)| serde_json::json!({ "name": name, "url": url }))
        .collect();
        (200, out.to_string())
    }
}

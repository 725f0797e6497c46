//! The `correlate` processor's part of the built-in page's JSON API (see
//! `causeway_core::ui`): causes and the last analysed traces, read from the
//! correlation state when asked, and what the evidence sources serve.
//!
//! - `GET /api/causes`: analysed traces per cause over time, top culprit
//!   services and top routes per cause.
//! - `GET /api/traces`: the last analysed traces (newest first, at most 200).
//! - `GET /api/traces/{trace_id}`: one of them with its spans, verdict and evidence.
//! - `GET /api/incidents`: open incidents first, then the last resolved ones,
//!   each with its timeline, causes, discriminators, what moved, exemplars and links.
//! - `GET /api/sources`: the tables the page draws of the sources (path,
//!   title, columns); each source answers its own paths (`/api/routes`,
//!   `/api/kafka`, `/api/queues`, `/api/nats`; see `super::source`).

use indexmap::IndexMap;
use std::collections::BTreeMap;
use std::sync::Arc;

use super::incidents::Incidents;
use super::source::{Correlation, View};

/// The API source of one correlation state.
pub struct Api {
    /// The state and its sources.
    pub correlation: Arc<Correlation>,
    /// The incidents (`None`: `incidents.enabled: false`).
    pub incidents: Option<Arc<Incidents>>,
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
            "causes" => json(self.causes(now_ns())),
            "traces" => json(self.traces()),
            "sources" => json(serde_json::json!(self.correlation.sources.pages())),
            "incidents" => json(self.incidents.as_ref().map_or_else(
                || serde_json::json!({ "incidents": [], "disabled": true }),
                |i| i.api(&self.links),
            )),
            _ => match path.strip_prefix("traces/") {
                Some(id) => Some(self.trace(id)),
                None => {
                    let view = View {
                        store: &self.correlation.store,
                        now_ns: now_ns(),
                        window_ns: self.window_ns,
                    };
                    json(self.correlation.sources.api(path, &view)?)
                }
            },
        }
    }
}

impl Api {
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
        let mut healthy = 0u64;
        self.correlation
            .store
            .outbox
            .visit(now.saturating_sub(self.window_ns), |t, e| {
                if e.healthy {
                    // Nothing to explain: counted apart, not as a cause.
                    healthy += 1;
                    return;
                }
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
                // A span without `service.name` (the SDK's default missing).
                .map(|(k, n)| serde_json::json!({ "name": if k.is_empty() { "(no service.name)" } else { k }, "traces": n }))
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
            "healthy_traces": healthy,
        })
    }

    fn traces(&self) -> serde_json::Value {
        let views = self.correlation.store.views.all();
        let rows: Vec<serde_json::Value> = views
            .iter()
            .rev()
            .take(200)
            .map(|v| {
                serde_json::json!({
                    "trace_id": v.trace_id, "route": v.route, "cause": v.cause,
                    "duration_ms": v.duration_ms, "start_unix_ms": v.start_unix_ms,
                    "failed": v.failed, "final_status": v.final_status,
                    "summary": v.summary, "reason": v.reason, "culprit_service": v.culprit_service, "culprit_kind": v.culprit_kind,
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
        let views = self.correlation.store.views.all();
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

//! Incidents per route: when a route's latency or errors break from its own
//! normal, or an SLO of it burns its error budget, an incident opens. It
//! says since when and how bad, which causes account for how much of the
//! slow or failed requests (with the culprit of each), which attribute
//! values set those requests apart from the route's normal traffic
//! (discriminators), and which joined evidence moved with it. It is written
//! as a `causeway.incident` log record when it opens, every
//! `update_every` while open, and when it resolves, and as one alert (a
//! `causeway.alert` record, which the `alertmanager` exporter sends).
//!
//! **Detection.** Every analysed trace is a [`sample::Sample`] of its route,
//! weighted by the sampler's `sampling.adjusted_count` (so a route's
//! shares and quantiles stand for all of its requests, not only the kept
//! ones). Each route keeps a recent window (`recent_window`, in buckets of
//! `interval`) and a normal (`normal_window`, two halves) that the buckets
//! leaving the recent window enter, unless an incident is open on the
//! route. Every `interval` the recent window is compared with the normal:
//! the `quantile` above `latency_factor` × normal and `min_latency_increase`
//! over it, or the failed share above normal by `error_margin`, with at
//! least `min_requests` recent and `min_normal_requests` normal requests.
//! A new route has no normal until it has seen `min_normal_requests`: only
//! its SLOs can open an incident on it. A route slow by nature is slow in
//! its normal too, so it opens none.
//!
//! **Resolution.** An open incident keeps the normal it was opened against;
//! it resolves when the recent window has `min_requests` and is within that
//! normal, and no SLO of the route fires (or when the route had no request
//! for five recent windows).
//!
//! **Restarts.** With `state_file`, open incidents (their normal and what
//! they have counted) are written on every change and read at start: an
//! incident open at a restart is the same incident after it, and resolves
//! as above. Route normals and SLO counts are not kept: they are learned
//! again.
//!
//! **Scaled out.** In a tier, each gateway analyses 1/N of the traces; the
//! alerts instance reads every log record, the `causeway.rca` records
//! included, which carry the sample (`rca.duration_ms`, `rca.failed`,
//! `rca.weight`, `rca.attributes`, `rca.levels`). With `from_records:
//! true` it takes its samples from them and sees the whole tier's traffic;
//! the gateways set `enabled: false`.

pub mod config;
pub mod hist;
pub mod incident;
pub mod route;
pub mod sample;
pub mod slo;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use indexmap::IndexMap;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;

use super::alerts::{trace_links, Alert};
use super::annotate::kv;
use config::IncidentsConfig;
use incident::{BurnState, Explanation, Incident};
use route::{Route, Shape};
use sample::Sample;
use slo::Slo;

/// The `event.name` of incident records.
pub const INCIDENT_EVENT: &str = "causeway.incident";
/// The alert name of incidents.
pub const ALERT_NAME: &str = "CausewayIncident";
/// Candidate slow or failed samples kept for an incident that opens (its first requests).
const MAX_CANDIDATES: usize = 20_000;
/// Resolved incidents kept for the page.
const KEEP_RESOLVED: usize = 100;

/// What changed at a tick.
#[derive(Debug, Clone)]
pub struct Change {
    /// `open`, `update`, `resolved`.
    pub state: &'static str,
    /// The incident.
    pub incident: Incident,
    /// Its explanation.
    pub explanation: Explanation,
}

/// Counts for self-telemetry.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Routes with statistics.
    pub routes: usize,
    /// Routes evicted for room (never had a normal, no incident).
    pub evicted: u64,
    /// Routes refused (no room).
    pub refused: u64,
    /// Open incidents.
    pub open: usize,
}

struct Engine {
    routes: HashMap<String, Route>,
    /// Open incidents by route.
    open: BTreeMap<String, Incident>,
    resolved: VecDeque<Incident>,
    /// Recent slow or failed samples (by the route's normal or an SLO), for
    /// an incident that opens.
    candidates: VecDeque<Arc<Sample>>,
    slos: Vec<Slo>,
    evicted: u64,
    refused: u64,
    persisted_error: Option<String>,
}

/// The incident state of one `correlate` id.
pub struct Incidents {
    cfg: IncidentsConfig,
    /// The discriminators' names, in their configured order.
    attr_order: Vec<String>,
    interval_ns: u64,
    shape: Shape,
    inner: Mutex<Engine>,
}

fn ns(d: causeway_core::config::Duration) -> u64 {
    u64::try_from(d.get().as_nanos()).unwrap_or(u64::MAX)
}

impl Incidents {
    /// The state, with the open incidents of `state_file` read back.
    pub fn new(cfg: &IncidentsConfig) -> Self {
        let interval_ns = ns(cfg.interval).max(1);
        let buckets = |d| (ns(d) / interval_ns).max(1);
        let mut open = BTreeMap::new();
        if let Some(path) = &cfg.state_file {
            match std::fs::read(path) {
                Ok(bytes) => match serde_json::from_slice::<Vec<Incident>>(&bytes) {
                    Ok(v) => {
                        tracing::info!(path = %path, open = v.len(), "Open incidents read back.");
                        open.extend(v.into_iter().map(|i| (i.route.clone(), i)));
                    }
                    Err(e) => {
                        tracing::warn!(path = %path, error = %e, "The incident state file is not readable; starting with none open.")
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path, error = %e, "The incident state file could not be read; starting with none open.")
                }
            }
        }
        Incidents {
            shape: Shape {
                recent: buckets(cfg.recent_window),
                generation: (buckets(cfg.normal_window) / 2).max(1),
                quantile: cfg.quantile,
                min_normal: cfg.min_normal_requests,
                max_values: cfg.max_values,
            },
            interval_ns,
            attr_order: cfg
                .attributes
                .iter()
                .filter_map(|a| sample::Attr::name_of(a))
                .collect(),
            inner: Mutex::new(Engine {
                routes: HashMap::new(),
                open,
                resolved: VecDeque::new(),
                candidates: VecDeque::new(),
                slos: cfg.slos.iter().cloned().map(Slo::new).collect(),
                evicted: 0,
                refused: 0,
                persisted_error: None,
            }),
            cfg: cfg.clone(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &IncidentsConfig {
        &self.cfg
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Engine> {
        crate::correlate::model::lock(&self.inner)
    }

    /// The threshold (ms) above which a request of a route with `normal` is slow.
    fn slow_ms(&self, normal_q: f64) -> f64 {
        (normal_q * self.cfg.latency_factor)
            .max(normal_q + self.cfg.min_latency_increase.get().as_secs_f64() * 1000.0)
    }

    /// Take in analysed traces.
    pub fn feed(&self, samples: impl IntoIterator<Item = Sample>) {
        let mut g = self.lock();
        let e = &mut *g;
        for s in samples {
            if s.route.is_empty() || s.duration_ms.is_nan() || s.duration_ms < 0.0 {
                continue;
            }
            let b = s.time_ns / self.interval_ns;
            let mut slo_bad = false;
            for slo in e.slos.iter_mut().filter(|x| x.cfg.route == s.route) {
                slo.add(&s);
                slo_bad |= slo.bad(&s);
            }
            if !e.routes.contains_key(&s.route) && !self.make_room(e) {
                e.refused += 1;
                continue;
            }
            let r = e.routes.entry(s.route.clone()).or_default();
            r.add(b, &s, &self.shape);
            if let Some(i) = e.open.get_mut(&s.route) {
                i.add(&s, self.cfg.max_values, self.cfg.exemplars);
                continue;
            }
            // A route with no normal yet keeps every request as a candidate:
            // its normal may be made (from older buckets) only after a
            // fault's slow requests came in, and an incident opening then
            // is explained by them (the incident counts only those slow by
            // the normal it opens against).
            let slow = match &r.normal {
                Some(n) => s.duration_ms >= self.slow_ms(n.q_ms),
                None => !r.established,
            };
            if s.failed || slow || slo_bad {
                e.candidates.push_back(Arc::new(s));
                if e.candidates.len() > MAX_CANDIDATES {
                    e.candidates.pop_front();
                }
            }
        }
    }

    /// Room for one more route: evict the tenth of the routes that never
    /// had a normal and have no incident, least recently seen first.
    fn make_room(&self, e: &mut Engine) -> bool {
        if e.routes.len() < self.cfg.max_routes {
            return true;
        }
        let mut idle: Vec<(u64, String)> = e
            .routes
            .iter()
            .filter(|(k, r)| !r.established && !e.open.contains_key(*k))
            .map(|(k, r)| (r.last_seen, k.clone()))
            .collect();
        if idle.is_empty() {
            return false;
        }
        idle.sort_unstable();
        let n = (self.cfg.max_routes / 10).max(1).min(idle.len());
        for (_, k) in idle.into_iter().take(n) {
            e.routes.remove(&k);
            e.evicted += 1;
        }
        true
    }

    /// Evaluate every route at `now_ns`: incidents that open, are written
    /// again, or resolve.
    pub fn tick(&self, now_ns: u64) -> Vec<Change> {
        let mut g = self.lock();
        let e = &mut *g;
        let b = now_ns / self.interval_ns;
        let recent_ns = self.shape.recent * self.interval_ns;
        while e
            .candidates
            .front()
            .is_some_and(|s| s.time_ns + recent_ns < now_ns)
        {
            e.candidates.pop_front();
        }
        let mut burns: HashMap<String, slo::Burn> = HashMap::new();
        for slo in e.slos.iter_mut() {
            slo.expire(now_ns);
            if let Some(burn) = slo.firing(now_ns) {
                burns.entry(slo.cfg.route.clone()).or_insert(burn);
            }
        }
        let mut out = Vec::new();
        let idle_after = 2 * self.shape.generation + self.shape.recent;
        let mut gone = Vec::new();
        for (name, r) in e.routes.iter_mut() {
            let open = e.open.contains_key(name);
            r.rotate(b, open, &self.shape);
            if !open && r.last_seen + idle_after < b && !burns.contains_key(name) {
                gone.push(name.clone());
                continue;
            }
            let (n, failed) = r.recent_counts();
            let burn = burns.get(name);
            if !open && burn.is_none() && (n < self.cfg.min_requests || r.normal.is_none()) {
                // Nothing to compare (most routes, most ticks): no histogram merged.
                continue;
            }
            let hist = r.recent_hist();
            if let Some(i) = e.open.get_mut(name) {
                if let Some(bu) = burn {
                    i.burn = Some(BurnState::from(bu));
                }
                let quiet = r.last_seen + 5 * self.shape.recent <= b;
                let breaking = self.breaks(
                    n,
                    failed,
                    hist,
                    i.normal_q_ms,
                    i.normal_error_share,
                    i.normal_n,
                );
                if quiet || (n >= self.cfg.min_requests && breaking.is_empty() && burn.is_none()) {
                    i.resolved_ns = Some(now_ns);
                } else if now_ns >= i.written_ns + ns(self.cfg.update_every) {
                    i.written_ns = now_ns;
                    let explanation = i.explain();
                    out.push(Change {
                        state: "update",
                        incident: i.clone(),
                        explanation,
                    });
                }
                continue;
            }
            let (nq, ne, nn) = r
                .normal
                .as_ref()
                .map_or((0.0, 0.0, 0.0), |x| (x.q_ms, x.error_share, x.n));
            let reasons = self.breaks(n, failed, hist, nq, ne, nn);
            if reasons.is_empty() && burn.is_none() {
                continue;
            }
            let i = self.open(name, r, &e.candidates, (nq, nn), reasons, burn, now_ns);
            out.push(Change {
                state: "open",
                explanation: i.explain(),
                incident: i.clone(),
            });
            e.open.insert(name.clone(), i);
        }
        for k in gone {
            e.routes.remove(&k);
        }
        resolve(e, now_ns, 5 * recent_ns, &mut out);
        if !out.is_empty() {
            self.persist(e);
        }
        out
    }

    /// An incident opening on route `name` now: its normal (quantile `nq`
    /// over `nn` requests), why it broke, its SLO burn, the slow requests
    /// seen recently and the rest of its requests since it began.
    #[allow(clippy::too_many_arguments)]
    fn open(
        &self,
        name: &str,
        r: &route::Route,
        candidates: &VecDeque<Arc<Sample>>,
        (nq, nn): (f64, f64),
        reasons: Vec<&'static str>,
        burn: Option<&slo::Burn>,
        now_ns: u64,
    ) -> Incident {
        let mut slow_ms = if nn > 0.0 {
            self.slow_ms(nq)
        } else {
            f64::INFINITY
        };
        if let Some(l) = burn.and_then(|bu| bu.latency_ms) {
            slow_ms = slow_ms.min(l);
        }
        let mut i = Incident::open(
            name,
            now_ns,
            r.normal
                .as_ref()
                .map(|n| (n, r.detail(self.cfg.max_values))),
            slow_ms,
        );
        i.quantile = self.cfg.quantile;
        i.attr_order = self.attr_order.clone();
        i.reasons = reasons.iter().map(|s| s.to_string()).collect();
        i.severity = self.cfg.severity.clone();
        if let Some(bu) = burn {
            i.reasons.push("slo".into());
            i.burn = Some(BurnState::from(bu));
            i.severity = bu.severity.clone();
        }
        for s in candidates.iter().filter(|s| s.route == *name) {
            i.add(s, self.cfg.max_values, self.cfg.exemplars);
        }
        let bad = candidates
            .iter()
            .filter(|s| s.route == *name && i.is_bad(s));
        if let Some((started, first_seen)) = run_start(bad) {
            i.started_ns = started;
            i.first_seen_ns = first_seen;
        }
        // The requests since it began that were not slow count too.
        let (n, failed, hist) = r.recent_since(i.first_seen_ns / self.interval_ns);
        if n > i.n {
            i.n = n;
            i.failed = i.failed.max(failed);
            i.hist = hist;
        }
        i.id = format!("{:016x}", fnv1a(&format!("{name}\u{0}{}", i.started_ns)));
        i.written_ns = now_ns;
        let explanation = i.explain();
        i.opening_cause = i.cause(&explanation);
        i
    }

    /// What breaks: `latency`, `errors` (none: within normal, or too few requests).
    fn breaks(
        &self,
        n: f64,
        failed: f64,
        h: &hist::Hist,
        nq: f64,
        ne: f64,
        nn: f64,
    ) -> Vec<&'static str> {
        let mut out = Vec::new();
        if n < self.cfg.min_requests || nn < self.cfg.min_normal_requests {
            return out;
        }
        if let Some(q) = h.quantile(self.cfg.quantile) {
            if q > nq * self.cfg.latency_factor
                && q - nq >= self.cfg.min_latency_increase.get().as_secs_f64() * 1000.0
            {
                out.push("latency");
            }
        }
        if failed / n >= ne + self.cfg.error_margin {
            out.push("errors");
        }
        out
    }

    fn persist(&self, e: &mut Engine) {
        let Some(path) = &self.cfg.state_file else {
            return;
        };
        let open: Vec<&Incident> = e.open.values().collect();
        let r = serde_json::to_vec(&open)
            .map_err(|x| x.to_string())
            .and_then(|bytes| {
                let tmp = format!("{path}.tmp");
                if let Some(dir) = std::path::Path::new(path)
                    .parent()
                    .filter(|d| !d.as_os_str().is_empty())
                {
                    std::fs::create_dir_all(dir).map_err(|x| x.to_string())?;
                }
                std::fs::write(&tmp, bytes)
                    .and_then(|_| std::fs::rename(&tmp, path))
                    .map_err(|x| x.to_string())
            });
        match r {
            Ok(()) => e.persisted_error = None,
            Err(x) => {
                if e.persisted_error.as_deref() != Some(&x) {
                    tracing::warn!(path = %path, error = %x, "Open incidents could not be written; they will not survive a restart.");
                }
                e.persisted_error = Some(x);
            }
        }
    }

    /// Counts for self-telemetry.
    pub fn counts(&self) -> Counts {
        let g = self.lock();
        Counts {
            routes: g.routes.len(),
            evicted: g.evicted,
            refused: g.refused,
            open: g.open.len(),
        }
    }

    /// Open incidents first (newest first), then resolved ones (newest first).
    pub fn list(&self) -> Vec<(Incident, Explanation)> {
        let g = self.lock();
        let mut out: Vec<(Incident, Explanation)> =
            g.open.values().map(|i| (i.clone(), i.explain())).collect();
        out.sort_by_key(|x| std::cmp::Reverse(x.0.opened_ns));
        out.extend(g.resolved.iter().rev().map(|i| (i.clone(), i.explain())));
        out
    }

    /// The page's `GET /api/incidents`.
    pub fn api(&self, links: &IndexMap<String, String>) -> serde_json::Value {
        let rows: Vec<serde_json::Value> = self
            .list()
            .into_iter()
            .map(|(i, e)| {
                let mut v = json_of(&i, &e);
                v["links"] = link_list(links, &i, &e)
                    .into_iter()
                    .map(|(name, url)| serde_json::json!({ "name": name, "url": url }))
                    .collect();
                v
            })
            .collect();
        serde_json::json!({ "incidents": rows })
    }
}

/// A stable 64-bit hash (FNV-1a) for incident ids.
fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn link_list(
    links: &IndexMap<String, String>,
    i: &Incident,
    e: &Explanation,
) -> Vec<(String, String)> {
    let exemplar = e.exemplars.first().map_or("", String::as_str);
    trace_links(links, exemplar, &i.route, &i.cause(e))
}

/// An incident as JSON (the page's rows and the record's explanation).
pub fn json_of(i: &Incident, e: &Explanation) -> serde_json::Value {
    serde_json::json!({
        "id": i.id,
        "route": i.route,
        "state": if i.resolved_ns.is_some() { "resolved" } else { "open" },
        "severity": i.severity,
        "reasons": i.reasons,
        "started_at": i.started_ns / 1_000_000,
        "opened_at": i.opened_ns / 1_000_000,
        "resolved_at": i.resolved_ns.map(|x| x / 1_000_000),
        "summary": i.summary(e),
        "cause": i.cause(e),
        "p99_ms": e.p99_ms,
        "quantile": i.quantile,
        "q_ms": e.q_ms,
        "normal_q_ms": i.normal_q_ms,
        "normal_p99_ms": i.normal_p99_ms,
        "error_share": e.error_share,
        "normal_error_share": i.normal_error_share,
        "requests": i.n,
        "slow_or_failed": i.bad,
        "slo": i.burn,
        "causes": e.causes,
        "discriminators": e.discriminators,
        "moved": e.moved,
        "exemplars": e.exemplars,
    })
}

/// An incident change as its `causeway.incident` log record.
pub fn record(c: &Change, now_ns: u64) -> LogRecord {
    use any_value::Value::{DoubleValue, StringValue};
    let (i, e) = (&c.incident, &c.explanation);
    let s = |v: String| StringValue(v);
    let top = e.causes.first();
    let mut attributes = vec![
        kv("event.name", s(INCIDENT_EVENT.into())),
        kv("incident.id", s(i.id.clone())),
        kv("incident.state", s(c.state.into())),
        kv("incident.route", s(i.route.clone())),
        kv(
            "incident.started_at",
            any_value::Value::IntValue(i64::try_from(i.started_ns / 1_000_000).unwrap_or(i64::MAX)),
        ),
        kv("incident.severity", s(i.severity.clone())),
        kv("incident.cause", s(i.cause(e))),
        kv(
            "incident.cause_share",
            DoubleValue(top.map_or(0.0, |c| c.share)),
        ),
        kv(
            "incident.culprit.service",
            s(top.map_or_else(String::new, |c| c.culprit_service.clone())),
        ),
        kv(
            "incident.culprit.kind",
            s(top.map_or_else(String::new, |c| c.culprit_kind.clone())),
        ),
        kv(
            "incident.culprit.at_service",
            s(top.map_or_else(String::new, |c| c.at_service.clone())),
        ),
        kv("incident.p99_ms", DoubleValue(e.p99_ms)),
        kv("incident.normal_p99_ms", DoubleValue(i.normal_p99_ms)),
        kv("incident.error_share", DoubleValue(e.error_share)),
        kv(
            "incident.causes",
            s(serde_json::json!(e.causes).to_string()),
        ),
        kv(
            "incident.discriminators",
            s(serde_json::json!(e.discriminators).to_string()),
        ),
        kv("incident.moved", s(serde_json::json!(e.moved).to_string())),
        kv("incident.exemplars", s(e.exemplars.join(","))),
        kv("incident.summary", s(i.summary(e))),
    ];
    if let Some(b) = &i.burn {
        attributes.push(kv("incident.slo", s(b.slo.clone())));
        attributes.push(kv("incident.burn_rate", DoubleValue(b.burn_rate)));
        attributes.push(kv("incident.error_budget_left", DoubleValue(b.budget_left)));
    }
    if let Some(r) = i.resolved_ns {
        attributes.push(kv(
            "incident.resolved_at",
            any_value::Value::IntValue(i64::try_from(r / 1_000_000).unwrap_or(i64::MAX)),
        ));
    }
    let trace_id = e
        .exemplars
        .first()
        .and_then(|t| hex::decode(t).ok())
        .filter(|b| b.len() == 16)
        .unwrap_or_default();
    LogRecord {
        time_unix_nano: now_ns,
        observed_time_unix_nano: now_ns,
        severity_number: if c.state == "resolved" { 9 } else { 17 },
        severity_text: if c.state == "resolved" {
            "INFO"
        } else {
            "ERROR"
        }
        .into(),
        body: Some(AnyValue {
            value: Some(StringValue(i.summary(e))),
        }),
        attributes,
        trace_id,
        ..Default::default()
    }
}

/// An incident change as its alert: labels `alertname`, `route_id`,
/// `cause` (the dominant cause when it opened), `severity`, `incident_id`;
/// annotations `summary`, `description` and the links. Firing until it
/// resolves, valid for `valid_ns` past `now_ns` unless written again.
pub fn alert(c: &Change, now_ns: u64, valid_ns: u64, links: &IndexMap<String, String>) -> Alert {
    let (i, e) = (&c.incident, &c.explanation);
    let labels = BTreeMap::from([
        ("alertname".to_string(), ALERT_NAME.to_string()),
        ("route_id".to_string(), i.route.clone()),
        ("cause".to_string(), i.opening_cause.clone()),
        ("severity".to_string(), i.severity.clone()),
        ("incident_id".to_string(), i.id.clone()),
    ]);
    let mut annotations = BTreeMap::from([
        ("summary".to_string(), i.summary(e)),
        (
            "description".to_string(),
            serde_json::json!({
                "causes": e.causes, "discriminators": e.discriminators,
                "moved": e.moved, "exemplars": e.exemplars, "slo": i.burn,
            })
            .to_string(),
        ),
    ]);
    let links = link_list(links, i, e);
    for (name, url) in &links {
        annotations.insert(format!("{name}_url"), url.clone());
    }
    let firing = c.state != "resolved";
    Alert {
        labels,
        annotations,
        starts_ns: i.started_ns,
        ends_ns: if firing {
            now_ns.saturating_add(valid_ns)
        } else {
            i.resolved_ns.unwrap_or(now_ns)
        },
        firing,
        generator_url: links.first().map(|l| l.1.clone()).unwrap_or_default(),
        trace_id: e.exemplars.first().cloned().unwrap_or_default(),
    }
}

/// A gap between two slow or failed requests longer than this many times
/// the median gap between them ends the run an incident opens on...
const RUN_GAP: u64 = 10;
/// ...and never one shorter than this.
const RUN_MIN_GAP_NS: u64 = 1_000_000_000;

/// When the run of slow or failed requests an incident opens on began
/// (the earliest start, and the earliest arrival, of its requests):
/// walking back from the latest, the run ends at a gap much longer than
/// its requests' usual one, so that a request slow in the route's normal
/// way a while before the fault is not taken for its start.
fn run_start<'a>(bad: impl Iterator<Item = &'a Arc<Sample>>) -> Option<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = bad.map(|s| (s.start_ns.max(1), s.time_ns.max(1))).collect();
    v.sort_unstable();
    let mut gaps: Vec<u64> = v.windows(2).map(|w| w[1].0 - w[0].0).collect();
    gaps.sort_unstable();
    let median = gaps.get(gaps.len() / 2).copied().unwrap_or(0);
    let limit = median.saturating_mul(RUN_GAP).max(RUN_MIN_GAP_NS);
    let mut at = v.len().checked_sub(1)?;
    while at > 0 && v[at].0 - v[at - 1].0 <= limit {
        at -= 1;
    }
    let first_seen = v[at..].iter().map(|x| x.1).min()?;
    Some((v[at].0, first_seen))
}

#[cfg(test)]
mod tests;

/// Resolve the incidents marked resolved, and those read back at a restart
/// whose route has not come back.
fn resolve(e: &mut Engine, now_ns: u64, quiet_ns: u64, out: &mut Vec<Change>) {
    // Incidents read back at a restart whose route has not come back yet
    // (`quiet_ns` after they were last written).
    for (name, i) in e.open.iter_mut() {
        if !e.routes.contains_key(name)
            && now_ns >= i.written_ns + quiet_ns
            && i.resolved_ns.is_none()
        {
            i.resolved_ns = Some(now_ns);
        }
    }
    let resolved: Vec<String> = e
        .open
        .iter()
        .filter(|(_, i)| i.resolved_ns.is_some())
        .map(|(k, _)| k.clone())
        .collect();
    for k in resolved {
        if let Some(i) = e.open.remove(&k) {
            let explanation = i.explain();
            out.push(Change {
                state: "resolved",
                incident: i.clone(),
                explanation,
            });
            e.resolved.push_back(i);
            if e.resolved.len() > KEEP_RESOLVED {
                e.resolved.pop_front();
            }
        }
    }
}

//! `processors.correlate.incidents`: when a route's latency or errors break
//! from its own normal, and the SLOs a site declares.

use causeway_core::config::{ConfigError, Duration};
use serde::Deserialize;

/// `correlate.incidents`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IncidentsConfig {
    /// Detect incidents at all.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The time step of a route's statistics and of the evaluation.
    #[serde(default = "bucket")]
    pub interval: Duration,
    /// The recent window compared with the route's normal. An
    /// open incident resolves when this window is within normal again.
    #[serde(default = "recent_window")]
    pub recent_window: Duration,
    /// How much history a route's normal covers (two halves).
    /// Traffic during an open incident never enters the normal.
    #[serde(default = "normal_window")]
    pub normal_window: Duration,
    /// The latency quantile compared.
    #[serde(default = "quantile")]
    pub quantile: f64,
    /// An incident opens when the recent quantile is above this multiple of
    /// the normal one (5: a twenty-fold p95 opens one) ...
    #[serde(default = "latency_factor")]
    pub latency_factor: f64,
    /// ... and at least this much above it (100ms: a 2 ms route at
    /// 12 ms pages nobody).
    #[serde(default = "min_latency_increase")]
    pub min_latency_increase: Duration,
    /// Or when the recent error share (5xx, 429, failed root or entry span)
    /// is above the normal one by this margin.
    #[serde(default = "error_margin")]
    pub error_margin: f64,
    /// Requests (weighted by `sampling.adjusted_count`) the recent window
    /// needs before it is compared.
    #[serde(default = "min_requests")]
    pub min_requests: f64,
    /// Requests the normal needs before the route is compared with it
    ///. A new route has no normal until then: only its SLOs
    /// can open an incident on it.
    #[serde(default = "min_normal_requests")]
    pub min_normal_requests: f64,
    /// An open incident is written again (`update`) this often.
    #[serde(default = "update_every")]
    pub update_every: Duration,
    /// Routes with statistics at most. Past it, routes that
    /// never had a normal and have no incident are evicted oldest first;
    /// when there are none, a new route is refused; both are counted.
    #[serde(default = "max_routes")]
    pub max_routes: usize,
    /// The attributes whose values are compared between an incident's slow
    /// or failed requests and the route's normal traffic (discriminators):
    /// `resource.<key>`, `span.<key>` (any span of the trace) or
    /// `log.<field>` (the gateway's line: `upstream`, `rate_limit_rule`,
    /// `status`, `response_flags`, `circuit_state`).
    /// `span.gen_ai.usage.input_tokens` is bucketed by powers of two.
    #[serde(default = "attributes")]
    pub attributes: Vec<String>,
    /// Distinct values per attribute and route at most (the
    /// rest count as `(other)`).
    #[serde(default = "max_values")]
    pub max_values: usize,
    /// Exemplar traces per incident, worst first.
    #[serde(default = "exemplars")]
    pub exemplars: usize,
    /// Where open incidents are kept across restarts (a JSON file written
    /// on every change; default none: they are lost with the process).
    #[serde(default)]
    pub state_file: Option<String>,
    /// Take the samples from the `causeway.rca` log records of other
    /// instances (a scaled-out tier's alerts instance, which holds no
    /// traces) instead of from the traces analysed here.
    #[serde(default)]
    pub from_records: bool,
    /// Severity label of an incident opened by detection;
    /// one opened by an SLO burn takes the burn window's.
    #[serde(default = "severity")]
    pub severity: String,
    /// Service level objectives.
    #[serde(default)]
    pub slos: Vec<SloConfig>,
}

/// One SLO: good = not failed and faster than `latency`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SloConfig {
    /// Its name (`incident.slo`).
    pub name: String,
    /// The route it covers (as `rca.route_id` names it).
    pub route: String,
    /// A request slower than this is bad (none: only failures are).
    #[serde(default)]
    pub latency: Option<Duration>,
    /// The objective, in percent of good requests (e.g. 99.5).
    pub objective: f64,
    /// The period the error budget covers.
    #[serde(default = "period")]
    pub period: Duration,
    /// Multi-window, multi-burn-rate alerts (default the Google SRE
    /// workbook's: page 14.4× over 1h and 5m, page 6× over 6h and 30m,
    /// ticket 1× over 3d and 6h).
    #[serde(default = "burn_windows")]
    pub windows: Vec<BurnWindow>,
}

/// A burn alert: the burn rate over both windows at least `burn_rate`.
#[derive(Debug, Clone, Deserialize, PartialEq, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BurnWindow {
    /// `severity` label (`page`, `ticket`).
    pub severity: String,
    /// The burn rate (1 spends the budget exactly over the period).
    pub burn_rate: f64,
    /// The long window.
    pub long: Duration,
    /// The short window (the alert resolves soon after the burn stops).
    pub short: Duration,
}

impl Default for IncidentsConfig {
    fn default() -> Self {
        // An empty mapping decodes to every default.
        serde_yaml::from_value(serde_yaml::Value::Mapping(Default::default()))
            .unwrap_or_else(|_| unreachable!("every field of IncidentsConfig has a default"))
    }
}

impl IncidentsConfig {
    /// Every error, with its path below `incidents`.
    pub fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        let at = |k: &str| format!("incidents.{k}");
        for (k, d) in [
            ("interval", self.interval),
            ("recent_window", self.recent_window),
            ("normal_window", self.normal_window),
            ("update_every", self.update_every),
        ] {
            if d.get().is_zero() {
                e.push(ConfigError::new(at(k), "must be more than 0"));
            }
        }
        if self.recent_window.get() < self.interval.get() {
            e.push(ConfigError::new(
                at("recent_window"),
                "must be at least `interval`",
            ));
        }
        if self.normal_window.get() < self.recent_window.get() * 2 {
            e.push(ConfigError::new(
                at("normal_window"),
                "must be at least twice `recent_window`",
            ));
        }
        if !(self.quantile > 0.0 && self.quantile < 1.0) {
            e.push(ConfigError::new(at("quantile"), "must be between 0 and 1"));
        }
        if self.latency_factor.is_nan() || self.latency_factor < 1.0 {
            e.push(ConfigError::new(at("latency_factor"), "must be at least 1"));
        }
        if !(self.error_margin > 0.0 && self.error_margin < 1.0) {
            e.push(ConfigError::new(
                at("error_margin"),
                "must be between 0 and 1",
            ));
        }
        if self.min_requests.is_nan() || self.min_requests < 1.0 {
            e.push(ConfigError::new(at("min_requests"), "must be at least 1"));
        }
        if self.min_normal_requests.is_nan() || self.min_normal_requests < 1.0 {
            e.push(ConfigError::new(
                at("min_normal_requests"),
                "must be at least 1",
            ));
        }
        if self.max_routes == 0 {
            e.push(ConfigError::new(at("max_routes"), "must be at least 1"));
        }
        if self.max_values == 0 {
            e.push(ConfigError::new(at("max_values"), "must be at least 1"));
        }
        for (i, a) in self.attributes.iter().enumerate() {
            if !crate::correlate::incidents::sample::Attr::well_formed(a) {
                e.push(ConfigError::new(
                    format!("incidents.attributes[{i}]"),
                    format!("`{a}`: an attribute is `resource.<key>`, `span.<key>` or `log.<column of logs>` (upstream, rate_limit_rule, status, response_flags, circuit_state, ...)"),
                ));
            }
        }
        if matches!(&self.state_file, Some(p) if p.trim().is_empty()) {
            e.push(ConfigError::new(at("state_file"), "must be a file path"));
        }
        self.slo_errors(&mut e);
        e
    }
}

impl IncidentsConfig {
    /// The SLOs' errors.
    fn slo_errors(&self, e: &mut Vec<ConfigError>) {
        let mut names = std::collections::HashSet::new();
        for (i, s) in self.slos.iter().enumerate() {
            let at = |k: &str| format!("incidents.slos[{i}].{k}");
            if s.name.trim().is_empty() {
                e.push(ConfigError::new(at("name"), "must not be empty"));
            } else if !names.insert(s.name.as_str()) {
                e.push(ConfigError::new(
                    at("name"),
                    format!("`{}` names two SLOs", s.name),
                ));
            }
            if s.route.trim().is_empty() {
                e.push(ConfigError::new(at("route"), "must not be empty"));
            }
            if !(s.objective > 0.0 && s.objective < 100.0) {
                e.push(ConfigError::new(
                    at("objective"),
                    "is a percentage of good requests, between 0 and 100 (e.g. 99.5)",
                ));
            }
            if s.period.get().is_zero() {
                e.push(ConfigError::new(at("period"), "must be more than 0"));
            }
            if s.windows.is_empty() {
                e.push(ConfigError::new(
                    at("windows"),
                    "must name at least one burn window",
                ));
            }
            for (j, w) in s.windows.iter().enumerate() {
                let at = |k: &str| format!("incidents.slos[{i}].windows[{j}].{k}");
                if w.burn_rate.is_nan() || w.burn_rate <= 0.0 {
                    e.push(ConfigError::new(at("burn_rate"), "must be more than 0"));
                }
                if w.short.get().is_zero() || w.short.get() > w.long.get() {
                    e.push(ConfigError::new(
                        at("short"),
                        "must be more than 0 and at most `long`",
                    ));
                }
                if w.severity.trim().is_empty() {
                    e.push(ConfigError::new(at("severity"), "must not be empty"));
                }
            }
        }
    }
}

fn yes() -> bool {
    true
}
fn bucket() -> Duration {
    Duration::secs(10)
}
fn recent_window() -> Duration {
    Duration::secs(60)
}
fn normal_window() -> Duration {
    Duration::secs(3600)
}
fn quantile() -> f64 {
    0.95
}
fn latency_factor() -> f64 {
    5.0
}
fn min_latency_increase() -> Duration {
    Duration::millis(100)
}
fn error_margin() -> f64 {
    0.1
}
fn min_requests() -> f64 {
    20.0
}
fn min_normal_requests() -> f64 {
    100.0
}
fn update_every() -> Duration {
    Duration::secs(30)
}
fn max_routes() -> usize {
    10_000
}
fn max_values() -> usize {
    32
}
fn exemplars() -> usize {
    5
}
fn severity() -> String {
    "warning".into()
}
fn period() -> Duration {
    Duration::secs(30 * 86_400)
}

/// The default discriminators.
pub fn attributes() -> Vec<String> {
    [
        "resource.service.version",
        "resource.host.name",
        "resource.k8s.node.name",
        "resource.k8s.pod.name",
        "resource.cloud.availability_zone",
        "span.http.request.method",
        "span.http.method",
        "span.http.response.status_code",
        "span.http.status_code",
        "span.rpc.method",
        "span.db.operation.name",
        "span.gen_ai.request.model",
        "span.gen_ai.usage.input_tokens",
        "log.upstream",
        "log.rate_limit_rule",
        "log.status",
    ]
    .into_iter()
    .map(String::from)
    .collect()
}

/// The Google SRE workbook's burn windows.
pub fn burn_windows() -> Vec<BurnWindow> {
    let w = |severity: &str, burn_rate, long, short| BurnWindow {
        severity: severity.into(),
        burn_rate,
        long: Duration::secs(long),
        short: Duration::secs(short),
    };
    vec![
        w("page", 14.4, 3600, 300),
        w("page", 6.0, 6 * 3600, 1800),
        w("ticket", 1.0, 3 * 86_400, 6 * 3600),
    ]
}

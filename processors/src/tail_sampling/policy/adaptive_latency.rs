//! `adaptive_latency` (causeway's): keep traces slower than a rolling
//! quantile of their own route's durations.

use super::{Check, Decision, Evaluator, Keys, Kind, TraceView};
use crate::sketch::Rolling;
use causeway_core::config::Duration;
use serde::Deserialize;
use std::collections::HashMap;

/// The policy type.
pub struct AdaptiveLatency;

/// `adaptive_latency`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveLatencyConfig {
    /// Keep traces slower than this quantile of their route.
    #[serde(default = "default_quantile")]
    pub quantile: f64,
    /// The rolling window.
    #[serde(default = "default_window")]
    pub window: Duration,
    /// Never keep a trace faster than this, whatever its route's quantile.
    #[serde(default)]
    pub min_threshold_ms: u64,
    /// Traces a route must have seen in the window before the policy keeps any.
    #[serde(default = "default_warmup")]
    pub warmup_count: u64,
    /// Span attributes naming the route, first found wins; without one the
    /// root span's name is the route.
    #[serde(default = "default_route_attributes")]
    pub route_attributes: Vec<String>,
    /// Routes tracked; further routes share one bucket.
    #[serde(default = "default_max_routes")]
    pub max_routes: usize,
}

fn default_quantile() -> f64 {
    0.99
}
fn default_window() -> Duration {
    Duration::secs(300)
}
fn default_warmup() -> u64 {
    100
}
fn default_max_routes() -> usize {
    1000
}
/// The default route attributes.
pub fn default_route_attributes() -> Vec<String> {
    vec!["http.route".into(), "route_id".into()]
}

struct RouteState {
    rolling: Rolling,
    threshold_ms: Option<f64>,
    computed_at: u64,
    adds: u32,
}

struct Adaptive {
    quantile: f64,
    window_secs: u64,
    min_ms: f64,
    warmup: u64,
    max_routes: usize,
    routes: HashMap<Box<str>, RouteState>,
}

impl Kind for AdaptiveLatency {
    const NAME: &'static str = "adaptive_latency";
    type Settings = AdaptiveLatencyConfig;
    fn check(s: &AdaptiveLatencyConfig, c: &mut Check<'_>) {
        if !(0.5..1.0).contains(&s.quantile) {
            c.error("quantile", "must be in [0.5, 1)");
        }
        if s.window.get() < std::time::Duration::from_secs(10) {
            c.error("window", "must be at least 10s");
        }
        if s.max_routes == 0 {
            c.error("max_routes", "must be at least 1");
        }
    }
    fn build(s: AdaptiveLatencyConfig, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
        keys.set_route_attributes(&s.route_attributes);
        Ok(Box::new(Adaptive {
            quantile: s.quantile,
            window_secs: s.window.get().as_secs(),
            min_ms: s.min_threshold_ms as f64,
            warmup: s.warmup_count,
            max_routes: s.max_routes,
            routes: HashMap::new(),
        }))
    }
}

impl Evaluator for Adaptive {
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        let route = t.route.unwrap_or("");
        let route: &str =
            if self.routes.len() >= self.max_routes && !self.routes.contains_key(route) {
                "\u{0}other"
            } else {
                route
            };
        let window = self.window_secs;
        let st = self
            .routes
            .entry(route.into())
            .or_insert_with(|| RouteState {
                rolling: Rolling::new(window),
                threshold_ms: None,
                computed_at: u64::MAX,
                adds: 0,
            });
        if st.computed_at != now || st.adds >= 256 {
            let merged = st.rolling.merged(now);
            st.threshold_ms = if merged.count() >= self.warmup {
                merged.quantile(self.quantile)
            } else {
                None
            };
            st.computed_at = now;
            st.adds = 0;
        }
        let ms = t.duration_ns as f64 / 1e6;
        let keep = st
            .threshold_ms
            .is_some_and(|th| ms > th && ms >= self.min_ms);
        st.rolling.add(now, ms);
        st.adds += 1;
        Decision::keep_if(keep)
    }
}

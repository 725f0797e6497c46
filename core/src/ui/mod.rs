//! The built-in page: why requests are slow right now.
//!
//! Served by the telemetry server at `/` (`service.telemetry.ui`, default
//! on), with its assets embedded in the binary (no CDN, no build step) and a
//! JSON API under `/api/` that scripts can use too:
//! - `/api/pipelines`: every self-metric sample (`name`, `labels`, `value`);
//!   the page turns counters into rates between two polls;
//! - the rest is answered by the components that registered an
//!   [`ApiSource`] (the `correlate` processor: `/api/routes`, `/api/causes`,
//!   `/api/traces`, `/api/traces/{trace_id}`, `/api/kafka`, `/api/queues`).
//!
//! Nothing is computed unless a request asks: the sources read the state
//! their component keeps anyway.

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

pub use crate::telemetry::api::{ApiSource, Cache};
use crate::telemetry::registry::Registry;

const INDEX: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// `GET /`.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /ui/app.js`.
pub async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /ui/app.css`.
pub async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, kind),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; base-uri 'none'; frame-ancestors 'none'",
            ),
        ],
        body,
    )
        .into_response()
}

/// `GET /api/{*path}`.
pub async fn api(State(registry): State<Registry>, Path(path): Path<String>) -> Response {
    let (status, body) = answer(&registry, &path);
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        body,
    )
        .into_response()
}

/// How long an answer is served again to other pages asking for the same
/// path: ten open pages polling cost about what one does.
pub const CACHE_FOR: std::time::Duration = std::time::Duration::from_secs(1);
/// Answers kept for [`CACHE_FOR`] at most.
const CACHE_ENTRIES: usize = 64;

/// The answer to `GET /api/{path}`, from the cache when another request
/// for the same path got it less than [`CACHE_FOR`] ago.
pub fn answer(registry: &Registry, path: &str) -> (u16, String) {
    let path = path.trim_matches('/');
    let cache = registry.api_cache();
    let now = std::time::Instant::now();
    {
        let mut g = match cache.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if let Some((at, st, body)) = g.get(path) {
            if now.duration_since(*at) < CACHE_FOR {
                return (*st, body.clone());
            }
        }
        g.retain(|_, (at, _, _)| now.duration_since(*at) < CACHE_FOR);
    }
    let (st, body) = compute(registry, path);
    let mut g = match cache.0.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    if g.len() < CACHE_ENTRIES {
        g.insert(path.to_string(), (now, st, body.clone()));
    }
    (st, body)
}

fn compute(registry: &Registry, path: &str) -> (u16, String) {
    if path == "pipelines" {
        return (200, pipelines(registry));
    }
    for source in registry.api_sources() {
        if let Some(a) = source.get(path) {
            return a;
        }
    }
    let why = if registry.api_sources().is_empty() && is_correlate_path(path) {
        "no correlate processor runs in this daemon: routes, causes and traces come from its state"
            .to_string()
    } else {
        format!("no such endpoint: /api/{path}")
    };
    (404, error(&why))
}

fn is_correlate_path(path: &str) -> bool {
    ["routes", "causes", "traces", "kafka", "queues"]
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// `{"error": why}`.
pub fn error(why: &str) -> String {
    serde_json::json!({ "error": why }).to_string()
}

fn pipelines(registry: &Registry) -> String {
    let samples: Vec<serde_json::Value> = registry
        .snapshot()
        .into_iter()
        .map(|s| {
            let labels: serde_json::Map<String, serde_json::Value> = s
                .labels
                .iter()
                .map(|(k, v)| (k.to_string(), serde_json::Value::String(v.clone())))
                .collect();
            serde_json::json!({ "name": s.name, "labels": labels, "value": s.value })
        })
        .collect();
    serde_json::json!({
        "uptime_s": registry.uptime().as_secs_f64(),
        "resident_bytes": crate::memory::resident_bytes(),
        "samples": samples,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    struct Echo;
    impl ApiSource for Echo {
        fn get(&self, path: &str) -> Option<(u16, String)> {
            (path == "routes").then(|| (200, "[]".to_string()))
        }
    }

    crate::metrics! {
        /// A counter of the test.
        X: counter = "causeway_x_total";
    }

    #[test]
    fn the_api_dispatches_to_sources_and_says_what_is_missing() {
        let r = Registry::new();
        let c = r.counter(X, &[("component", "a")]);
        c.add(3);
        let (st, body) = answer(&r, "pipelines");
        assert_eq!(st, 200);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["samples"][0]["labels"]["component"], "a");
        assert_eq!(v["samples"][0]["value"], 3.0);
        // Asked again within CACHE_FOR: the same answer, not computed again.
        c.add(1);
        assert_eq!(answer(&r, "pipelines").1, body);
        assert!(compute(&r, "pipelines").1.contains("\"value\":4.0"));
        let (st, body) = compute(&r, "routes");
        assert_eq!(st, 404);
        assert!(body.contains("no correlate processor"), "{body}");
        r.add_api_source(Arc::new(Echo));
        assert_eq!(compute(&r, "routes"), (200, "[]".to_string()));
        let (st, body) = answer(&r, "nothing<script>");
        assert_eq!(st, 404);
        assert!(body.contains("no such endpoint"), "{body}");
    }
}

//! `health_check`: the Collector's health endpoint on its own port.
//!
//! `GET <path>` answers 200 with `{"status":"Server available","upSince":…,
//! "uptime":…}` while the pipelines run, and 503 with `Server not available`
//! before they have started and once shutdown has begun, as the Collector's
//! extension does (so liveness/readiness probes and load balancers written
//! for it work unchanged). `response_body` replaces the JSON with fixed text.

mod config;
#[cfg(test)]
mod tests;

pub use config::HealthCheckConfig;

use async_trait::async_trait;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use causeway_core::component::{BuildContext, Extension, ExtensionFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::error::BoxError;
use causeway_core::telemetry::Registry;
use std::time::SystemTime;

/// Builds `health_check` extensions.
pub struct HealthCheckFactory;

#[async_trait]
impl ExtensionFactory for HealthCheckFactory {
    fn kind(&self) -> &'static str {
        "health_check"
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<HealthCheckConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<HealthCheckConfig>(cfg).map(|_| ())
    }
    fn warnings(&self, cfg: &serde_yaml::Value) -> Vec<String> {
        match decode::<HealthCheckConfig>(cfg) {
            Ok(c) if c.check_collector_pipeline.as_ref().is_some_and(|p| p.enabled) => vec![
                "check_collector_pipeline is not used: the status is 200 while the pipelines run and 503 before they start and once shutdown begins; exporter failures are in /metrics (causeway_exporter_send_failed_items_total)".into(),
            ],
            _ => Vec::new(),
        }
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Extension>, BoxError> {
        let cfg: HealthCheckConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let ext = start(&ctx.id.to_string(), &cfg, ctx.telemetry).await?;
        tracing::info!(extension = %ctx.id, address = %ext.local_addr, path = %cfg.path, "Health check listening.");
        Ok(Box::new(ext))
    }
}

/// A running HealthCheck server.
pub type HealthCheck = crate::HttpServer;

#[derive(Clone)]
struct State {
    telemetry: Registry,
    body: Option<config::ResponseBody>,
}

/// Bind and serve; the status follows `telemetry`'s readiness.
pub async fn start(
    name: &str,
    cfg: &HealthCheckConfig,
    telemetry: Registry,
) -> Result<HealthCheck, BoxError> {
    let state = State {
        telemetry: telemetry.clone(),
        body: cfg.response_body.clone(),
    };
    let app = Router::new()
        .route(&cfg.path, get(status))
        .with_state(state);
    crate::HttpServer::start(name, &cfg.endpoint, cfg.tls.as_ref(), app, telemetry).await
}

async fn status(axum::extract::State(s): axum::extract::State<State>) -> Response {
    let since = s.telemetry.ready_since().filter(|_| s.telemetry.is_ready());
    let code = if since.is_some() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    if let Some(b) = &s.body {
        let text = if since.is_some() {
            &b.healthy
        } else {
            &b.unhealthy
        };
        return (code, text.clone()).into_response();
    }
    let body = match since {
        Some(t) => serde_json::json!({
            "status": "Server available",
            "upSince": humantime::format_rfc3339_nanos(t).to_string(),
            "uptime": go_duration(SystemTime::now().duration_since(t).unwrap_or_default()),
        }),
        None => serde_json::json!({
            "status": "Server not available",
            "upSince": "0001-01-01T00:00:00Z",
            "uptime": "",
        }),
    };
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A duration as Go's `time.Duration.String` writes it (`1h2m3.5s`, `250ms`).
pub fn go_duration(d: std::time::Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    let trim = |whole: u128, frac: u128, digits: usize, unit: &str| {
        let f = format!("{frac:0digits$}");
        let f = f.trim_end_matches('0');
        if f.is_empty() {
            format!("{whole}{unit}")
        } else {
            format!("{whole}.{f}{unit}")
        }
    };
    if ns < 1_000 {
        return format!("{ns}ns");
    }
    if ns < 1_000_000 {
        return trim(ns / 1_000, ns % 1_000, 3, "µs");
    }
    if ns < 1_000_000_000 {
        return trim(ns / 1_000_000, ns % 1_000_000, 6, "ms");
    }
    let secs = ns / 1_000_000_000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&trim(s, ns % 1_000_000_000, 9, "s"));
    out
}

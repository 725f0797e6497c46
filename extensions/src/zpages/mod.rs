//! `zpages`: the Collector's `/debug/*z` pages, filled from causeway's state.
//!
//! - `/debug/servicez`: version, start time, uptime, readiness, links;
//! - `/debug/pipelinez`: every pipeline with its receivers, processors and
//!   exporters, each with its live counts (accepted, refused, sent, failed,
//!   dropped, queue fill), read from the daemon's own metrics;
//! - `/debug/extensionz`: the extensions running;
//! - `/debug/featurez`: causeway has no feature gates (an empty table);
//! - `/debug/expvarz`: the daemon's metrics in the Prometheus text format;
//! - `/debug/tracez`: causeway keeps no in-process span samples; the page
//!   says where its own traces go instead.

mod config;
#[cfg(test)]
mod tests;

pub use config::ZPagesConfig;

use async_trait::async_trait;
use axum::http::header;
use axum::response::{Html, IntoResponse};
use axum::routing::get;
use axum::Router;
use causeway_core::component::{BuildContext, Extension, ExtensionFactory, ServiceInfo};
use causeway_core::config::{decode, ConfigError};
use causeway_core::error::BoxError;
use causeway_core::telemetry::{Registry, Sample};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::SystemTime;

/// Builds `zpages` extensions.
pub struct ZPagesFactory;

#[async_trait]
impl ExtensionFactory for ZPagesFactory {
    fn kind(&self) -> &'static str {
        "zpages"
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<ZPagesConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<ZPagesConfig>(cfg).map(|_| ())
    }
    fn exposes(&self, cfg: &serde_yaml::Value) -> Vec<causeway_core::exposure::Exposed> {
        decode::<ZPagesConfig>(cfg)
            .map(|c| {
                vec![causeway_core::exposure::Exposed {
                    key: "endpoint".into(),
                    protected: c.tls.is_some() && c.auth.is_some(),
                    address: c.endpoint,
                    serves: "zpages (the pipelines, their counts and the daemon's metrics)".into(),
                }]
            })
            .unwrap_or_default()
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Extension>, BoxError> {
        let cfg: ZPagesConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let info = ctx
            .shared
            .get_or_init(causeway_core::component::SERVICE_KEY, ServiceInfo::default);
        let z = start(&ctx.id.to_string(), &cfg, ctx.telemetry, info).await?;
        tracing::info!(extension = %ctx.id, address = %z.local_addr, "zPages listening (/debug/servicez, /debug/pipelinez).");
        Ok(Box::new(z))
    }
}

/// A running ZPages server.
pub type ZPages = crate::HttpServer;

#[derive(Clone)]
struct State {
    telemetry: Registry,
    info: Arc<ServiceInfo>,
}

/// Bind and serve.
pub async fn start(
    name: &str,
    cfg: &ZPagesConfig,
    telemetry: Registry,
    info: Arc<ServiceInfo>,
) -> Result<ZPages, BoxError> {
    let mut app = Router::new()
        .route("/", get(index))
        .route("/debug", get(index))
        .route("/debug/servicez", get(servicez))
        .route("/debug/pipelinez", get(pipelinez))
        .route("/debug/extensionz", get(extensionz))
        .route("/debug/featurez", get(featurez))
        .route("/debug/tracez", get(tracez))
        .route("/debug/expvarz", get(expvarz))
        .with_state(State {
            telemetry: telemetry.clone(),
            info,
        });
    if let Some(auth) = cfg
        .auth
        .as_ref()
        .map(|a| a.authenticator())
        .transpose()?
        .flatten()
    {
        app = causeway_core::telemetry::guard(app, auth);
    }
    crate::HttpServer::start(name, &cfg.endpoint, cfg.tls.as_ref(), app, telemetry).await
}

/// Text for HTML.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>{t}</title>\
         <style>body{{font-family:sans-serif;margin:1.5em}}table{{border-collapse:collapse;margin-bottom:1.5em}}\
         td,th{{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}}th{{background:#eee}}</style>\
         </head><body><p><a href=\"/debug/servicez\">servicez</a> · <a href=\"/debug/pipelinez\">pipelinez</a> · \
         <a href=\"/debug/extensionz\">extensionz</a> · <a href=\"/debug/featurez\">featurez</a> · \
         <a href=\"/debug/tracez\">tracez</a> · <a href=\"/debug/expvarz\">expvarz</a></p><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    ))
}

async fn index() -> impl IntoResponse {
    page(
        "causeway zPages",
        "<p>The OpenTelemetry Collector's zPages, served by causeway from its own state.</p>",
    )
}

async fn servicez(axum::extract::State(s): axum::extract::State<State>) -> impl IntoResponse {
    let now = SystemTime::now();
    let time = |t: Option<SystemTime>| {
        t.map(|t| {
            format!(
                "{} ({} ago)",
                humantime::format_rfc3339_seconds(t),
                crate::health_check::go_duration(std::time::Duration::from_secs(
                    now.duration_since(t).unwrap_or_default().as_secs()
                ))
            )
        })
        .unwrap_or_else(|| "—".into())
    };
    let mut b = String::from("<table>");
    let rows = [
        ("Program", "causeway".to_string()),
        ("Version", env!("CARGO_PKG_VERSION").to_string()),
        ("Started", time(s.info.started)),
        (
            "Ready",
            match s.telemetry.ready_since().filter(|_| s.telemetry.is_ready()) {
                Some(t) => format!("yes, since {}", time(Some(t))),
                None => "no (starting or shutting down)".into(),
            },
        ),
        ("Pipelines", s.info.pipelines.len().to_string()),
        ("Extensions", s.info.extensions.join(", ")),
    ];
    for (k, v) in rows {
        b.push_str(&format!(
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(k),
            escape(&v)
        ));
    }
    b.push_str("</table>");
    page("Service", &b)
}

/// Sums of a component's series by metric name (signals added up), for
/// the series labelled with `component`.
fn counts(samples: &[Sample], component: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for s in samples {
        if s.labels
            .iter()
            .any(|(k, v)| *k == "component" && v == component)
        {
            let name = s
                .name
                .trim_start_matches("causeway_")
                .trim_end_matches("_total")
                .to_string();
            *out.entry(name).or_insert(0.0) += s.value;
        }
    }
    out
}

fn counts_cell(c: &BTreeMap<String, f64>) -> String {
    if c.is_empty() {
        return "—".into();
    }
    c.iter()
        .map(|(k, v)| format!("{}: {v}", escape(k)))
        .collect::<Vec<_>>()
        .join("<br>")
}

async fn pipelinez(axum::extract::State(s): axum::extract::State<State>) -> impl IntoResponse {
    let samples = s.telemetry.snapshot();
    let mut b = String::new();
    for pl in &s.info.pipelines {
        let (pid, receivers, processors, exporters) =
            (&pl.id, &pl.receivers, &pl.processors, &pl.exporters);
        b.push_str(&format!(
            "<h2>Pipeline {}</h2><table><tr><th>Kind</th><th>Component</th><th>Counts</th></tr>",
            escape(pid)
        ));
        for r in receivers {
            b.push_str(&format!(
                "<tr><td>receiver</td><td>{}</td><td>{}</td></tr>",
                escape(r),
                counts_cell(&counts(&samples, r))
            ));
        }
        for p in processors {
            b.push_str(&format!(
                "<tr><td>processor</td><td>{}</td><td>{}</td></tr>",
                escape(p),
                counts_cell(&counts(&samples, &format!("{pid}/{p}")))
            ));
        }
        for e in exporters {
            b.push_str(&format!(
                "<tr><td>exporter</td><td>{}</td><td>{}</td></tr>",
                escape(e),
                counts_cell(&counts(&samples, e))
            ));
        }
        b.push_str("</table>");
    }
    if s.info.pipelines.is_empty() {
        b.push_str("<p>No pipeline is running.</p>");
    }
    page("Pipelines", &b)
}

async fn extensionz(axum::extract::State(s): axum::extract::State<State>) -> impl IntoResponse {
    let mut b = String::from("<table><tr><th>Extension</th></tr>");
    for e in &s.info.extensions {
        b.push_str(&format!("<tr><td>{}</td></tr>", escape(e)));
    }
    b.push_str("</table>");
    page("Extensions", &b)
}

async fn featurez() -> impl IntoResponse {
    page(
        "Feature Gates",
        "<table><tr><th>ID</th><th>Enabled</th><th>Description</th></tr></table>\
         <p>causeway has no feature gates: behaviour is set in the pipeline file.</p>",
    )
}

async fn tracez() -> impl IntoResponse {
    page(
        "Trace Spans",
        "<p>causeway keeps no in-process samples of its own spans. Send them to a tracing \
         backend with <code>service.telemetry.traces.processors</code> (an OTLP batch \
         processor), and read its pipelines' live counts on <a href=\"/debug/pipelinez\">pipelinez</a>.</p>",
    )
}

async fn expvarz(axum::extract::State(s): axum::extract::State<State>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s.telemetry.render(),
    )
}

//! `pprof`: accepted so that Collector configs load, but causeway is not a
//! Go program and has no Go runtime profiles to serve. The endpoint answers
//! every `/debug/pprof/…` request with 501 and how to profile causeway
//! instead (Linux `perf`, as BENCHMARKS.md does for its flame graphs), and
//! `validate` and startup say so once.

use async_trait::async_trait;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Router;
use causeway_core::component::{BuildContext, Extension, ExtensionFactory};
use causeway_core::config::{decode, ConfigError, Validate};
use causeway_core::error::BoxError;
use serde::Deserialize;

/// What the endpoint and the warning say.
pub const HOW_TO_PROFILE: &str = "causeway is not a Go program: it serves no Go pprof profiles. Profile it with Linux perf instead, e.g. `perf record -F 999 -g -p $(pidof causeway) -- sleep 30` then `perf script | inferno-collapse-perf | inferno-flamegraph > causeway.svg` (BENCHMARKS.md shows the flame graphs made this way).";

/// `extensions.pprof`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PprofConfig {
    /// Where to listen (default `localhost:1777`, as in the Collector).
    #[serde(default = "default_endpoint")]
    pub endpoint: String,
    /// Go's block profile rate; accepted, no effect.
    #[serde(default)]
    pub block_profile_fraction: i64,
    /// Go's mutex profile rate; accepted, no effect.
    #[serde(default)]
    pub mutex_profile_fraction: i64,
    /// Where the Collector writes a CPU profile; accepted, nothing is written.
    #[serde(default)]
    pub save_to_file: Option<String>,
}

impl Default for PprofConfig {
    fn default() -> Self {
        PprofConfig {
            endpoint: default_endpoint(),
            block_profile_fraction: 0,
            mutex_profile_fraction: 0,
            save_to_file: None,
        }
    }
}

fn default_endpoint() -> String {
    "localhost:1777".into()
}

impl Validate for PprofConfig {
    fn validate(&self) -> Vec<ConfigError> {
        if self.endpoint.trim().is_empty() {
            vec![ConfigError::new("endpoint", "must not be empty")]
        } else {
            Vec::new()
        }
    }
}

/// Builds `pprof` extensions.
pub struct PprofFactory;

#[async_trait]
impl ExtensionFactory for PprofFactory {
    fn kind(&self) -> &'static str {
        "pprof"
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<PprofConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<PprofConfig>(cfg).map(|_| ())
    }
    fn exposes(&self, cfg: &serde_yaml::Value) -> Vec<causeway_core::exposure::Exposed> {
        decode::<PprofConfig>(cfg)
            .map(|c| {
                vec![causeway_core::exposure::Exposed {
                    key: "endpoint".into(),
                    protected: false, // no TLS, no credentials: loopback, or the opt-out
                    address: c.endpoint,
                    serves: "pprof".into(),
                }]
            })
            .unwrap_or_default()
    }
    fn warnings(&self, cfg: &serde_yaml::Value) -> Vec<String> {
        let mut w = vec![HOW_TO_PROFILE.to_string()];
        if let Ok(PprofConfig {
            save_to_file: Some(f),
            ..
        }) = decode::<PprofConfig>(cfg)
        {
            w.push(format!("save_to_file: no profile is written to {f:?}"));
        }
        w
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Extension>, BoxError> {
        let cfg: PprofConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let p = start(&ctx.id.to_string(), &cfg, ctx.telemetry).await?;
        tracing::warn!(extension = %ctx.id, address = %p.local_addr, "{HOW_TO_PROFILE}");
        Ok(Box::new(p))
    }
}

/// A running Pprof server.
pub type Pprof = crate::HttpServer;

/// Bind and serve.
pub async fn start(
    name: &str,
    cfg: &PprofConfig,
    telemetry: causeway_core::telemetry::Registry,
) -> Result<Pprof, BoxError> {
    let app = Router::new().fallback(|| async {
        (StatusCode::NOT_IMPLEMENTED, format!("{HOW_TO_PROFILE}\n")).into_response()
    });
    crate::HttpServer::start(name, &cfg.endpoint, None, app, telemetry).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_profile_request_says_how_to_profile_causeway() {
        let cfg: PprofConfig =
            decode(&serde_yaml::from_str("endpoint: 127.0.0.1:0").expect("yaml")).expect("valid");
        let p = start("pprof", &cfg, Default::default())
            .await
            .expect("start");
        let (code, text) = crate::get(&format!(
            "http://{}/debug/pprof/profile?seconds=30",
            p.local_addr()
        ))
        .await;
        assert_eq!(code, 501);
        assert!(text.contains("perf record"), "{text}");
    }

    #[test]
    fn the_collector_keys_load_with_a_warning() {
        let cfg: serde_yaml::Value = serde_yaml::from_str(
            "endpoint: localhost:1777\nblock_profile_fraction: 3\nmutex_profile_fraction: 5\nsave_to_file: /tmp/cpu.prof",
        )
        .expect("yaml");
        assert!(PprofFactory.validate(&cfg).is_ok());
        let w = PprofFactory.warnings(&cfg);
        assert!(w[0].contains("not a Go program"), "{w:?}");
        assert!(w[1].contains("/tmp/cpu.prof"), "{w:?}");
    }
}

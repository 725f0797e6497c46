//! `basicauth`: the Collector's basic authenticator, client side. Exporters
//! that name it in `auth.authenticator` send `Authorization: Basic …` with
//! the `client_auth` user and password.

use async_trait::async_trait;
use causeway_core::auth::ClientAuth;
use causeway_core::component::{BuildContext, Extension, ExtensionFactory};
use causeway_core::config::{decode, ConfigError, Validate};
use causeway_core::error::BoxError;
use causeway_core::tls::Secret;
use serde::Deserialize;
use std::sync::Arc;

/// `extensions.basicauth`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicAuthConfig {
    /// The user and password sent by exporters.
    #[serde(default)]
    pub client_auth: Option<ClientCredentials>,
    /// The Collector's server side: not supported here.
    #[serde(default)]
    #[schemars(with = "Option<serde_json::Value>")]
    pub htpasswd: Option<serde_yaml::Value>,
}

/// `client_auth`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCredentials {
    /// User name.
    pub username: String,
    /// Password.
    pub password: Secret,
}

impl Validate for BasicAuthConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.htpasswd.is_some() {
            e.push(ConfigError::new(
                "htpasswd",
                "server-side basic auth is not supported here: set the receiver's own `auth.basic` (username and password or password_file)",
            ));
        }
        if self.client_auth.is_none() {
            e.push(ConfigError::new(
                "client_auth",
                "set client_auth.username and client_auth.password",
            ));
        }
        e
    }
}

struct Basic(http::HeaderValue);

impl ClientAuth for Basic {
    fn header(&self) -> Result<(http::HeaderName, http::HeaderValue), String> {
        Ok((http::header::AUTHORIZATION, self.0.clone()))
    }
}

/// Builds `basicauth` extensions.
pub struct BasicAuthFactory;

#[async_trait]
impl ExtensionFactory for BasicAuthFactory {
    fn kind(&self) -> &'static str {
        "basicauth"
    }
    fn authenticates(&self) -> bool {
        true
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<BasicAuthConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<BasicAuthConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Extension>, BoxError> {
        let cfg: BasicAuthConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let c = cfg.client_auth.ok_or("client_auth is required")?;
        let mut v = http::HeaderValue::from_str(&format!(
            "Basic {}",
            causeway_core::tls::base64(
                format!("{}:{}", c.username, c.password.expose()).as_bytes()
            )
        ))?;
        v.set_sensitive(true);
        crate::publish(&ctx, Arc::new(Basic(v)));
        Ok(Box::new(crate::Idle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_header_is_rfc_7617_basic() {
        let ctx = BuildContext {
            id: "basicauth/client".parse().expect("id"),
            telemetry: Default::default(),
            shared: Default::default(),
            pipeline_signals: causeway_core::SignalSet::ALL,
        };
        let cfg = serde_yaml::from_str("client_auth: {username: Aladdin, password: open sesame}")
            .expect("yaml");
        BasicAuthFactory
            .build(ctx.clone(), &cfg)
            .await
            .expect("build");
        let auth = causeway_core::auth::AuthRef {
            authenticator: "basicauth/client".into(),
        }
        .resolve(&ctx.shared)
        .expect("published");
        let (k, v) = auth.header().expect("header");
        assert_eq!(k, http::header::AUTHORIZATION);
        // RFC 7617's example.
        assert_eq!(
            v.to_str().expect("ascii"),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
        let e = BasicAuthFactory
            .validate(&serde_yaml::from_str("htpasswd: {inline: 'u:p'}").expect("yaml"))
            .expect_err("server side");
        assert!(e.iter().any(|e| e.path == "htpasswd"), "{e:?}");
    }
}

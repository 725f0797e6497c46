//! Client authenticators: extensions (`bearertokenauth`, `basicauth`) that
//! give exporters a header to send, as the Collector's `auth.authenticator`
//! does. An exporter names one with `auth: {authenticator: <extension id>}`;
//! the extension, built before any exporter, leaves its [`Authenticator`] in
//! the topology's shared state under [`shared_key`], and the exporter asks
//! it for the header of every request (so a token file rotated on disk is
//! picked up without a restart).

use serde::Deserialize;
use std::sync::Arc;

use crate::shared::Shared;

/// Something that authenticates requests with a header.
pub trait ClientAuth: Send + Sync {
    /// The header for the next request.
    fn header(&self) -> Result<(http::HeaderName, http::HeaderValue), String>;
}

/// An authenticator in the shared state.
#[derive(Clone)]
pub struct Authenticator(pub Arc<dyn ClientAuth>);

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Authenticator")
    }
}

/// Where the authenticator of extension `id` is found in the shared state.
pub fn shared_key(id: &str) -> String {
    format!("auth/{id}")
}

/// `auth` of an exporter, in the Collector's shape.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AuthRef {
    /// The id of an authenticator extension listed in `service.extensions`
    /// (`bearertokenauth`, `basicauth`).
    pub authenticator: String,
}

impl AuthRef {
    /// The running authenticator this names.
    pub fn resolve(&self, shared: &Shared) -> Result<Arc<dyn ClientAuth>, String> {
        shared
            .slot::<Authenticator>(&shared_key(&self.authenticator))
            .get()
            .map(|a| a.0.clone())
            .ok_or_else(|| {
                format!(
                    "auth.authenticator {:?} is not a running authenticator extension (define it under `extensions` and list it in service.extensions)",
                    self.authenticator
                )
            })
    }
}

/// Add the authenticator's header to `headers` (replacing one of that name).
pub fn apply(
    auth: Option<&Arc<dyn ClientAuth>>,
    headers: &mut http::HeaderMap,
) -> Result<(), String> {
    if let Some(a) = auth {
        let (k, v) = a.header()?;
        headers.insert(k, v);
    }
    Ok(())
}

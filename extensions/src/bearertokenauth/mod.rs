//! `bearertokenauth`: the Collector's bearer-token authenticator, client
//! side. Exporters that name it in `auth.authenticator` send
//! `<header>: <scheme> <token>` with every request. A token in `filename` is
//! read again when the file changes (checked at most once a second), so a
//! rotated Kubernetes service-account token is picked up without a restart.

use async_trait::async_trait;
use causeway_core::auth::ClientAuth;
use causeway_core::component::{BuildContext, Extension, ExtensionFactory};
use causeway_core::config::{decode, ConfigError, Validate};
use causeway_core::error::BoxError;
use causeway_core::tls::Secret;
use serde::Deserialize;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// `extensions.bearertokenauth`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BearerTokenConfig {
    /// The header carrying the token.
    #[serde(default = "default_header")]
    pub header: String,
    /// Written before the token (empty: the token alone).
    #[serde(default = "default_scheme")]
    pub scheme: String,
    /// The token.
    #[serde(default)]
    pub token: Option<Secret>,
    /// A file holding the token (trailing whitespace trimmed); wins over `token`.
    #[serde(default)]
    pub filename: Option<PathBuf>,
    /// The Collector's server-side token list: not supported here (the
    /// receivers authenticate with their own `auth`).
    #[serde(default)]
    pub tokens: Option<Vec<Secret>>,
}

fn default_header() -> String {
    "Authorization".into()
}
fn default_scheme() -> String {
    "Bearer".into()
}

impl Validate for BearerTokenConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if http::HeaderName::from_bytes(self.header.as_bytes()).is_err() {
            e.push(ConfigError::new(
                "header",
                format!("{:?} is not a header name", self.header),
            ));
        }
        if self.tokens.is_some() {
            e.push(ConfigError::new(
                "tokens",
                "server-side tokens are not supported: causeway's receivers check tokens themselves (`auth.bearer_token` or `auth.bearer_token_file` of the otlp receiver)",
            ));
        }
        match (&self.token, &self.filename) {
            (None, None) => e.push(ConfigError::new("token", "set `token` or `filename`")),
            (_, Some(f)) => {
                if let Err(err) = std::fs::metadata(f) {
                    e.push(ConfigError::new(
                        "filename",
                        format!("{}: {err}", f.display()),
                    ));
                }
            }
            _ => {}
        }
        e
    }
}

/// The authenticator.
pub struct BearerToken {
    header: http::HeaderName,
    scheme: String,
    source: Source,
}

enum Source {
    Static(String),
    File {
        path: PathBuf,
        /// (last check, file's modification time, token).
        state: Mutex<(Instant, Option<SystemTime>, String)>,
    },
}

fn read_token(path: &std::path::Path) -> Result<(Option<SystemTime>, String), String> {
    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let token = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .trim_end()
        .to_string();
    Ok((modified, token))
}

impl BearerToken {
    /// From a validated config (a token file is read now).
    pub fn new(cfg: &BearerTokenConfig) -> Result<Self, String> {
        let header =
            http::HeaderName::from_bytes(cfg.header.as_bytes()).map_err(|e| e.to_string())?;
        let source = match (&cfg.filename, &cfg.token) {
            (Some(path), _) => {
                let (modified, token) = read_token(path)?;
                Source::File {
                    path: path.clone(),
                    state: Mutex::new((Instant::now(), modified, token)),
                }
            }
            (None, Some(t)) => Source::Static(t.expose().to_string()),
            (None, None) => return Err("set `token` or `filename`".into()),
        };
        Ok(BearerToken {
            header,
            scheme: cfg.scheme.clone(),
            source,
        })
    }

    fn token(&self) -> Result<String, String> {
        match &self.source {
            Source::Static(t) => Ok(t.clone()),
            Source::File { path, state } => {
                let mut st = match state.lock() {
                    Ok(g) => g,
                    Err(p) => p.into_inner(),
                };
                if st.0.elapsed() >= Duration::from_secs(1) {
                    st.0 = Instant::now();
                    let modified = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                    if modified != st.1 {
                        match read_token(path) {
                            Ok((m, t)) => {
                                st.1 = m;
                                st.2 = t;
                                tracing::info!(file = %path.display(), "Bearer token file changed; the new token is used.");
                            }
                            // Keep the last good token while the file is being replaced.
                            Err(error) => {
                                tracing::warn!(%error, "Cannot read the bearer token file again; the previous token is used.")
                            }
                        }
                    }
                }
                Ok(st.2.clone())
            }
        }
    }
}

impl ClientAuth for BearerToken {
    fn header(&self) -> Result<(http::HeaderName, http::HeaderValue), String> {
        let token = self.token()?;
        let value = if self.scheme.is_empty() {
            token
        } else {
            format!("{} {token}", self.scheme)
        };
        let mut v = http::HeaderValue::from_str(&value)
            .map_err(|_| "the bearer token is not a valid header value".to_string())?;
        v.set_sensitive(true);
        Ok((self.header.clone(), v))
    }
}

/// Builds `bearertokenauth` extensions.
pub struct BearerTokenFactory;

#[async_trait]
impl ExtensionFactory for BearerTokenFactory {
    fn kind(&self) -> &'static str {
        "bearertokenauth"
    }
    fn authenticates(&self) -> bool {
        true
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<BearerTokenConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<BearerTokenConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Extension>, BoxError> {
        let cfg: BearerTokenConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let auth = BearerToken::new(&cfg)?;
        crate::publish(&ctx, Arc::new(auth));
        Ok(Box::new(crate::Idle))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(y: &str) -> Result<BearerTokenConfig, Vec<ConfigError>> {
        decode(&serde_yaml::from_str(y).expect("yaml"))
    }

    #[test]
    fn the_header_is_the_scheme_and_the_token() {
        let a = BearerToken::new(&cfg("token: s3cr3t").expect("valid")).expect("new");
        let (k, v) = a.header().expect("header");
        assert_eq!(k, http::header::AUTHORIZATION);
        assert_eq!(v.to_str().expect("ascii"), "Bearer s3cr3t");
        assert!(v.is_sensitive());
        let a = BearerToken::new(&cfg("token: k\nscheme: ''\nheader: X-API-Key").expect("valid"))
            .expect("new");
        let (k, v) = a.header().expect("header");
        assert_eq!((k.as_str(), v.to_str().expect("ascii")), ("x-api-key", "k"));
    }

    #[test]
    fn a_token_file_is_read_again_when_it_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("token");
        std::fs::write(&path, "first\n").expect("write");
        let a = BearerToken::new(
            &cfg(&format!("filename: {}\ntoken: ignored", path.display())).expect("valid"),
        )
        .expect("new");
        assert_eq!(
            a.header().expect("h").1.to_str().expect("s"),
            "Bearer first"
        );
        std::fs::write(&path, "second\n").expect("write");
        // A different modification time, whatever the file system's clock granularity.
        let later = SystemTime::now() + Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_modified(later))
            .expect("set mtime");
        if let Source::File { state, .. } = &a.source {
            // As if the last check were a second ago.
            state.lock().expect("lock").0 = Instant::now() - Duration::from_secs(2);
        }
        assert_eq!(
            a.header().expect("h").1.to_str().expect("s"),
            "Bearer second"
        );
    }

    #[test]
    fn mistakes_are_named() {
        let e = cfg("scheme: Bearer").expect_err("no token");
        assert_eq!(e[0].path, "token");
        let e = cfg("tokens: [a, b]\ntoken: x").expect_err("server side");
        assert!(
            e[0].path == "tokens" && e[0].message.contains("not supported"),
            "{e:?}"
        );
        let e = cfg("filename: /nonexistent/token").expect_err("missing file");
        assert!(
            e[0].path == "filename" && e[0].message.contains("/nonexistent/token"),
            "{e:?}"
        );
    }
}

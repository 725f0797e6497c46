//! TLS (rustls) and authentication settings shared by receivers and
//! exporters, and secrets that never print.
//!
//! - [`ServerTls`]: a listener's certificate and key, optionally the CA
//!   whose client certificates it requires (mTLS), and the minimum version.
//! - [`ClientTls`]: a client's CA bundle, optional client certificate, the
//!   minimum version.
//! - [`ServerAuth`]: bearer-token or basic authentication of requests.
//! - [`Secret`]: a value from the file (usually `${env:…}`) or from a
//!   `*_file`; its `Debug` and `Display` print `<redacted>`.
//!
//! Listeners, their TLS handshakes and their limits are in the `conn` module.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::ConfigError;

/// A secret: never printed.
#[derive(Clone, Deserialize, PartialEq, Eq, schemars::JsonSchema)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// The value, for use (never for logs).
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The lowest TLS version accepted.
#[derive(
    Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, serde::Serialize, schemars::JsonSchema,
)]
pub enum TlsVersion {
    /// TLS 1.2.
    #[default]
    #[serde(rename = "1.2")]
    V1_2,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    V1_3,
}

impl TlsVersion {
    fn versions(self) -> &'static [&'static rustls::SupportedProtocolVersion] {
        static BOTH: [&rustls::SupportedProtocolVersion; 2] =
            [&rustls::version::TLS13, &rustls::version::TLS12];
        static TLS13: [&rustls::SupportedProtocolVersion; 1] = [&rustls::version::TLS13];
        match self {
            TlsVersion::V1_2 => &BOTH,
            TlsVersion::V1_3 => &TLS13,
        }
    }
}

/// `tls` of a listener.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerTls {
    /// PEM certificate chain served.
    pub cert_file: PathBuf,
    /// PEM private key of the certificate.
    pub key_file: PathBuf,
    /// PEM CA bundle: when set, clients must present a certificate it signed (mTLS).
    #[serde(default)]
    pub client_ca_file: Option<PathBuf>,
    /// Lowest version accepted: `"1.2"` or `"1.3"`.
    #[serde(default)]
    pub min_version: TlsVersion,
}

/// `tls` of a client (exporter).
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientTls {
    /// Plaintext (no TLS) for `host:port` endpoints of gRPC exporters.
    #[serde(default)]
    pub insecure: bool,
    /// PEM CA bundle that signs the server's certificate. Without it the
    /// system's roots are used (`/etc/ssl/certs`, or `SSL_CERT_FILE` /
    /// `SSL_CERT_DIR`), as the Collector does.
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// Trust the system's roots as well as `ca_file` (the
    /// system's roots are always used when `ca_file` is not set).
    #[serde(default)]
    pub include_system_ca_certs_pool: bool,
    /// PEM client certificate chain (mTLS).
    #[serde(default)]
    pub cert_file: Option<PathBuf>,
    /// PEM private key of the client certificate.
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// The name the server certificate must carry, when not the endpoint's host.
    #[serde(default)]
    pub server_name_override: Option<String>,
    /// Lowest version accepted: `"1.2"` or `"1.3"`.
    #[serde(default)]
    pub min_version: TlsVersion,
}

/// Make ring the process's default rustls provider (idempotent). HTTP
/// clients (reqwest, built without a provider of its own) need it: call
/// before building one.
pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // Already installed by someone else: that one is used.
        rustls::crypto::ring::default_provider()
            .install_default()
            .ok();
    });
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no PEM certificate in it", path.display()));
    }
    Ok(certs)
}

fn key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    // Never print the key: only its path and what was wrong.
    PrivateKeyDer::from_pem_file(path)
        .map_err(|e| format!("{}: no usable PEM private key ({e})", path.display()))
}

/// The system's trusted roots (read once): the OS store, or the files named
/// by `SSL_CERT_FILE` / `SSL_CERT_DIR`. Unreadable entries are skipped (and
/// logged once): a container without CA certificates simply trusts none.
pub fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: std::sync::OnceLock<Vec<CertificateDer<'static>>> = std::sync::OnceLock::new();
    ROOTS.get_or_init(|| {
        let r = rustls_native_certs::load_native_certs();
        for error in &r.errors {
            tracing::warn!(%error, "Cannot read part of the system's CA certificates.");
        }
        r.certs
    })
}

fn roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    let mut roots = rustls::RootCertStore::empty();
    for c in certs(path)? {
        roots
            .add(c)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(roots)
}

impl ServerTls {
    /// The rustls configuration (files read now).
    pub fn server_config(&self, alpn: &[&[u8]]) -> Result<Arc<rustls::ServerConfig>, String> {
        let builder = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(self.min_version.versions())
            .map_err(|e| e.to_string())?;
        let builder = match &self.client_ca_file {
            Some(ca) => {
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots(ca)?),
                    provider(),
                )
                .build()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut cfg = builder
            .with_single_cert(certs(&self.cert_file)?, key(&self.key_file)?)
            .map_err(|e| format!("{}: {e}", self.cert_file.display()))?;
        cfg.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(cfg))
    }

    /// Errors found by reading the files, with paths under `at`.
    pub fn errors(&self, at: &str) -> Vec<ConfigError> {
        match self.server_config(&[]) {
            Ok(_) => Vec::new(),
            Err(m) => vec![ConfigError::new(at, m)],
        }
    }
}

impl ClientTls {
    /// Whether the system's roots are trusted (no `ca_file`, or
    /// `include_system_ca_certs_pool`).
    pub fn uses_system_roots(&self) -> bool {
        self.ca_file.is_none() || self.include_system_ca_certs_pool
    }

    /// The trusted roots besides `ca_file`, as PEM (for clients that take
    /// PEM, such as tonic's).
    pub fn system_roots_pem(&self) -> Vec<String> {
        if !self.uses_system_roots() {
            return Vec::new();
        }
        system_roots()
            .iter()
            .map(|c| {
                let b64 = base64(c.as_ref());
                let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
                for line in b64.as_bytes().chunks(64) {
                    pem.push_str(&String::from_utf8_lossy(line));
                    pem.push('\n');
                }
                pem.push_str("-----END CERTIFICATE-----\n");
                pem
            })
            .collect()
    }

    /// Whether TLS is configured (a CA or a client certificate).
    pub fn enabled(&self) -> bool {
        self.ca_file.is_some() || self.cert_file.is_some()
    }

    /// The rustls configuration (files read now).
    pub fn client_config(&self) -> Result<rustls::ClientConfig, String> {
        let builder = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(self.min_version.versions())
            .map_err(|e| e.to_string())?;
        let mut roots = match &self.ca_file {
            Some(ca) => roots(ca)?,
            None => rustls::RootCertStore::empty(),
        };
        if self.uses_system_roots() {
            roots.add_parsable_certificates(system_roots().iter().cloned());
        }
        let builder = builder.with_root_certificates(roots);
        match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => builder
                .with_client_auth_cert(certs(c)?, key(k)?)
                .map_err(|e| format!("{}: {e}", c.display())),
            (None, None) => Ok(builder.with_no_client_auth()),
            _ => Err("cert_file and key_file go together".to_string()),
        }
    }

    /// Errors found by reading the files, with paths under `at`.
    pub fn errors(&self, at: &str) -> Vec<ConfigError> {
        if !self.enabled() {
            return Vec::new();
        }
        match self.client_config() {
            Ok(_) => Vec::new(),
            Err(m) => vec![ConfigError::new(at, m)],
        }
    }
}

/// `auth` of a listener: one of a bearer token or a user and password.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerAuth {
    /// Requests must carry `Authorization: Bearer <token>`.
    #[serde(default)]
    pub bearer_token: Option<Secret>,
    /// The token, read from a file (trailing whitespace trimmed).
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    /// Requests must carry `Authorization: Basic …` with this user and password.
    #[serde(default)]
    pub basic: Option<BasicAuth>,
}

/// `auth.basic`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// User name.
    pub username: String,
    /// Password.
    #[serde(default)]
    pub password: Option<Secret>,
    /// The password, read from a file.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

fn read_secret(path: &Path) -> Result<Secret, String> {
    std::fs::read_to_string(path)
        .map(|s| Secret(s.trim_end().to_string()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

/// What a request's `Authorization` header must be, ready to compare.
#[derive(Clone)]
pub struct Authenticator {
    expected: Secret,
    scheme: &'static str,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Authenticator({})", self.scheme)
    }
}

/// Standard base64 with padding (for `Authorization: Basic`).
pub fn base64(input: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in input.chunks(3) {
        let b = [c[0], *c.get(1).unwrap_or(&0), *c.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

impl ServerAuth {
    /// Whether any method is set.
    pub fn enabled(&self) -> bool {
        self.bearer_token.is_some() || self.bearer_token_file.is_some() || self.basic.is_some()
    }

    /// The authenticator (secret files read now).
    pub fn authenticator(&self) -> Result<Option<Authenticator>, String> {
        let token = match (&self.bearer_token, &self.bearer_token_file) {
            (Some(t), None) => Some(t.clone()),
            (None, Some(p)) => Some(read_secret(p)?),
            (None, None) => None,
            (Some(_), Some(_)) => {
                return Err("set bearer_token or bearer_token_file, not both".into())
            }
        };
        match (token, &self.basic) {
            (Some(_), Some(_)) => Err("set a bearer token or basic, not both".into()),
            (Some(t), None) => {
                if t.0.is_empty() {
                    return Err("the bearer token is empty".into());
                }
                Ok(Some(Authenticator {
                    expected: Secret(format!("Bearer {}", t.0)),
                    scheme: "Bearer",
                }))
            }
            (None, Some(b)) => {
                let pw = match (&b.password, &b.password_file) {
                    (Some(p), None) => p.clone(),
                    (None, Some(f)) => read_secret(f)?,
                    _ => return Err("basic: set password or password_file (one of them)".into()),
                };
                Ok(Some(Authenticator {
                    expected: Secret(format!(
                        "Basic {}",
                        base64(format!("{}:{}", b.username, pw.0).as_bytes())
                    )),
                    scheme: "Basic",
                }))
            }
            (None, None) => Ok(None),
        }
    }

    /// Errors, with paths under `at`.
    pub fn errors(&self, at: &str) -> Vec<ConfigError> {
        match self.authenticator() {
            Ok(_) => Vec::new(),
            Err(m) => vec![ConfigError::new(at, m)],
        }
    }
}

impl Authenticator {
    /// Whether an `Authorization` header value is the expected one
    /// (compared in constant time).
    pub fn check(&self, header: Option<&[u8]>) -> bool {
        let Some(h) = header else { return false };
        let want = self.expected.0.as_bytes();
        if h.len() != want.len() {
            return false;
        }
        h.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }

    /// The scheme, for `WWW-Authenticate`.
    pub fn scheme(&self) -> &'static str {
        self.scheme
    }
}

/// Warn when a listener binds beyond loopback without TLS.
pub fn warn_if_exposed(component: &str, protocol: &str, addr: std::net::SocketAddr, tls: bool) {
    if !tls && !addr.ip().is_loopback() {
        tracing::warn!(receiver = %component, protocol, %addr, "Listening beyond loopback without TLS: data and credentials travel in clear text. Set `tls` on this protocol.");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print_and_basic_auth_is_encoded() {
        let s = Secret("hunter2".into());
        assert_eq!(format!("{s:?} {s}"), "<redacted> <redacted>");
        let auth: ServerAuth =
            serde_yaml::from_str("basic: {username: Aladdin, password: open sesame}").unwrap();
        assert!(!format!("{auth:?}").contains("sesame"));
        let a = auth.authenticator().unwrap().unwrap();
        // RFC 7617's example.
        assert!(a.check(Some(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==")));
        assert!(!a.check(Some(b"Basic QWxhZGRpbjpvcGVuIHNlc2FtZR==")));
        assert!(!a.check(None));
        let bearer: ServerAuth = serde_yaml::from_str("bearer_token: abc").unwrap();
        let b = bearer.authenticator().unwrap().unwrap();
        assert!(b.check(Some(b"Bearer abc")));
        assert!(!b.check(Some(b"Bearer abd")));
        assert!(!b.check(Some(b"Bearer ab")));
    }
}

//! Pieces shared by the HTTP exporters.

use causeway_core::component::ExportError;
use std::time::Duration;

use crate::ExporterError;

/// The server's `Retry-After`, in seconds (the HTTP-date form is not used by these backends).
pub(crate) fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let v = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    v.trim().parse::<u64>().ok().map(Duration::from_secs)
}

/// A request that did not reach the server: retryable.
pub(crate) fn transport_error(endpoint: &str, e: reqwest::Error) -> ExportError {
    // The whole chain: "error sending request" alone does not say that the
    // server's certificate is signed by an unknown CA, or the connection was refused.
    let message = causeway_core::error::cause_chain(&e);
    ExportError::Retryable {
        source: Box::new(ExporterError::Transport {
            endpoint: endpoint.to_string(),
            message,
        }),
        retry_after: None,
    }
}

/// An HTTP client builder with the exporter's TLS settings: its CA bundle
/// or the system's roots, and a client certificate when it has one.
pub(crate) fn client_builder(
    tls: &causeway_core::tls::ClientTls,
) -> Result<reqwest::ClientBuilder, String> {
    causeway_core::tls::install_crypto_provider();
    Ok(reqwest::Client::builder().use_preconfigured_tls(tls.client_config()?))
}

/// Errors of an HTTP exporter's `endpoint` and `tls`: an http:// or https://
/// URL, and TLS files that can be read.
pub(crate) fn endpoint_errors(
    endpoint: &str,
    tls: &causeway_core::tls::ClientTls,
) -> Vec<causeway_core::config::ConfigError> {
    use causeway_core::config::ConfigError;
    let mut e = Vec::new();
    if !endpoint.starts_with("http://") && !endpoint.starts_with("https://") {
        e.push(ConfigError::new(
            "endpoint",
            "must be an http:// or https:// URL",
        ));
    }
    e.extend(tls.errors("tls"));
    e
}

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

/// What a server answered a request.
pub(crate) struct Answer {
    /// Its status.
    pub status: reqwest::StatusCode,
    /// Its `Retry-After`.
    pub retry_after: Option<Duration>,
    /// Its body, as text.
    pub text: String,
}

/// Send `req` to `endpoint`: a request that did not reach the server is a
/// retryable error; any answer is returned, with its body.
pub(crate) async fn send(
    req: reqwest::RequestBuilder,
    endpoint: &str,
) -> Result<Answer, ExportError> {
    let resp = req.send().await.map_err(|e| transport_error(endpoint, e))?;
    let status = resp.status();
    let retry_after = retry_after(resp.headers());
    let text = if status.is_success() {
        String::new()
    } else {
        resp.text().await.unwrap_or_default()
    };
    Ok(Answer {
        status,
        retry_after,
        text,
    })
}

impl Answer {
    /// The server's refusal, its first 1,024 characters kept.
    pub fn server_error(&self, endpoint: &str) -> Box<ExporterError> {
        Box::new(ExporterError::Server {
            endpoint: endpoint.to_string(),
            status: self.status.to_string(),
            message: self.text.chars().take(1024).collect(),
        })
    }

    /// The error of an answer that is not a success: retryable for 429, a
    /// 5xx and the statuses in `also` (after its `Retry-After`), else
    /// permanent.
    pub fn error(&self, endpoint: &str, also: &[u16]) -> ExportError {
        let source = self.server_error(endpoint);
        let code = self.status.as_u16();
        if code == 429 || self.status.is_server_error() || also.contains(&code) {
            ExportError::Retryable {
                source,
                retry_after: self.retry_after,
            }
        } else {
            ExportError::Permanent { source }
        }
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

/// How long an exporter's request may take.
pub(crate) enum Within {
    /// Its connection (the exporter bounds the rest itself).
    Connect(Duration),
    /// The whole request.
    Whole(Duration),
}

/// An exporter's HTTP client to `endpoint`: its TLS (see [`client_builder`]),
/// its requests bounded by `within`.
pub(crate) fn client(
    endpoint: &str,
    tls: &causeway_core::tls::ClientTls,
    within: Within,
) -> Result<reqwest::Client, ExporterError> {
    let refused = |reason: String| ExporterError::Endpoint {
        endpoint: endpoint.to_string(),
        reason,
    };
    let b = client_builder(tls).map_err(refused)?;
    match within {
        Within::Connect(d) => b.connect_timeout(d),
        Within::Whole(d) => b.timeout(d),
    }
    .build()
    .map_err(|e| refused(e.to_string()))
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

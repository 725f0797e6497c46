//! Bounded HTTP reads for the receivers that poll an HTTP API (`rabbitmq`,
//! `nats`): a request bounded by a timeout, an answer bounded in size, and
//! each failure with the reason it is counted under.

/// Why a read failed: the reason it is counted under, and what happened.
#[derive(Debug)]
pub struct Failure {
    /// `connect`, `timeout`, `http_status`, `read`, `body_size_limit`, ...
    pub reason: &'static str,
    /// What happened.
    pub detail: String,
}

impl Failure {
    /// A failure for `reason`.
    pub fn new(reason: &'static str, detail: impl Into<String>) -> Self {
        Failure {
            reason,
            detail: detail.into(),
        }
    }
}

/// Send `req`, bounded by `timeout`.
pub async fn send(
    req: reqwest::RequestBuilder,
    timeout: std::time::Duration,
) -> Result<reqwest::Response, Failure> {
    req.timeout(timeout).send().await.map_err(|e| {
        if e.is_timeout() {
            Failure::new("timeout", e.to_string())
        } else {
            Failure::new("connect", e.to_string())
        }
    })
}

/// The answer's body, each chunk within `timeout`, at most `limit` bytes.
pub async fn body(
    mut resp: reqwest::Response,
    timeout: std::time::Duration,
    limit: usize,
) -> Result<Vec<u8>, Failure> {
    let mut body = Vec::new();
    loop {
        match tokio::time::timeout(timeout, resp.chunk()).await {
            Err(_) => return Err(Failure::new("timeout", "the answer did not arrive in time")),
            Ok(Err(e)) => return Err(Failure::new("read", e.to_string())),
            Ok(Ok(None)) => return Ok(body),
            Ok(Ok(Some(c))) => {
                if body.len() + c.len() > limit {
                    return Err(Failure::new(
                        "body_size_limit",
                        format!("the answer is over body_size_limit ({limit} bytes)"),
                    ));
                }
                body.extend_from_slice(&c);
            }
        }
    }
}

/// An HTTP client with `tls` (the system's roots unless it says otherwise).
pub fn client(
    tls: &causeway_core::tls::ClientTls,
) -> Result<reqwest::Client, causeway_core::BoxError> {
    causeway_core::tls::install_crypto_provider();
    Ok(reqwest::Client::builder()
        .use_preconfigured_tls(tls.client_config()?)
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))?)
}

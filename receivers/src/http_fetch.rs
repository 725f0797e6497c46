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

/// An answer's body, and its bytes in the memory limiter's count until
/// it is dropped.
pub struct Body {
    /// The bytes.
    pub bytes: Vec<u8>,
    _held: Option<causeway_core::memory::Permit>,
}

impl std::ops::Deref for Body {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

/// The answer's body, each chunk within `timeout`, at most `limit` bytes.
/// With a `limiter`, each chunk is admitted before it is kept (a refusal
/// fails the read with reason `memory_limit`: the next collection reads
/// the state again, nothing is lost), and the bytes stay counted while the
/// body lives.
pub async fn body(
    mut resp: reqwest::Response,
    timeout: std::time::Duration,
    limit: usize,
    limiter: Option<(&causeway_core::memory::MemoryLimiter, &str)>,
) -> Result<Body, Failure> {
    let declared = resp.content_length().unwrap_or(0).min(limit as u64);
    let mut held: Option<causeway_core::memory::Permit> = None;
    let mut admit = |n: u64| -> Result<(), Failure> {
        let Some((l, receiver)) = limiter else {
            return Ok(());
        };
        let p = l.admit(receiver, n).map_err(|_| {
            Failure::new(
                "memory_limit",
                "memory is over the memory limiter's soft limit: the answer was not read",
            )
        })?;
        match &mut held {
            Some(h) => h.absorb(p),
            None => held = Some(p),
        }
        Ok(())
    };
    // A declared length is admitted (and allocated) at once.
    admit(declared)?;
    let mut admitted = declared;
    let mut body = Vec::with_capacity(declared as usize);
    loop {
        match tokio::time::timeout(timeout, resp.chunk()).await {
            Err(_) => return Err(Failure::new("timeout", "the answer did not arrive in time")),
            Ok(Err(e)) => return Err(Failure::new("read", e.to_string())),
            Ok(Ok(None)) => {
                return Ok(Body {
                    bytes: body,
                    _held: held,
                })
            }
            Ok(Ok(Some(c))) => {
                if body.len() + c.len() > limit {
                    return Err(Failure::new(
                        "body_size_limit",
                        format!("the answer is over body_size_limit ({limit} bytes)"),
                    ));
                }
                let len = (body.len() + c.len()) as u64;
                if len > admitted {
                    admit(len - admitted)?;
                    admitted = len;
                }
                body.extend_from_slice(&c);
            }
        }
    }
}

/// Each element of the JSON array in `body`, parsed and handed to `f` one
/// at a time: the answer is never one tree in memory, only the element
/// being read. `what` names the array in errors ("a JSON array of queues").
pub fn each_in_array(
    body: &[u8],
    what: &'static str,
    f: impl FnMut(usize, serde_json::Value) -> Result<(), String>,
) -> Result<(), String> {
    use serde::de::{DeserializeSeed, Error, SeqAccess, Visitor};
    struct Each<F>(F, &'static str);
    impl<'de, F: FnMut(usize, serde_json::Value) -> Result<(), String>> Visitor<'de> for Each<F> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.1)
        }
        fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            while let Some(v) = seq.next_element::<serde_json::Value>()? {
                (self.0)(i, v).map_err(A::Error::custom)?;
                i += 1;
            }
            Ok(())
        }
    }
    impl<'de, F: FnMut(usize, serde_json::Value) -> Result<(), String>> DeserializeSeed<'de>
        for Each<F>
    {
        type Value = ();
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_seq(self)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    Each(f, what)
        .deserialize(&mut de)
        .and_then(|()| de.end())
        .map_err(|e| e.to_string())
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

/// The error of `endpoint` when it is no http:// or https:// URL; `what`
/// says what it should point at.
pub fn endpoint_error(endpoint: &str, what: &str) -> Option<causeway_core::config::ConfigError> {
    (!(endpoint.starts_with("http://") || endpoint.starts_with("https://"))).then(|| {
        causeway_core::config::ConfigError::new(
            "endpoint",
            format!("{endpoint:?}: an http:// or https:// URL of {what}"),
        )
    })
}

//! OTLP/HTTP client.

use async_trait::async_trait;
use bytes::Bytes;
use causeway_core::component::{Delivered, ExportError, Exporter};
use causeway_core::compress::Transport;
use causeway_core::rpc::RpcStatus;
use causeway_core::{Batch, Signal};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

use super::config::{Compression, HttpEncoding, OtlpHttpConfig};
use crate::ExporterError;

pub(crate) struct HttpExporter {
    client: reqwest::Client,
    /// By signal (`Signal as usize`).
    urls: [String; 4],
    encoding: HttpEncoding,
    compression: Compression,
    headers: reqwest::header::HeaderMap,
    /// An authenticator's header, added to every request.
    auth: Option<std::sync::Arc<dyn causeway_core::auth::ClientAuth>>,
}

impl HttpExporter {
    pub(crate) fn new(
        cfg: &OtlpHttpConfig,
        auth: Option<std::sync::Arc<dyn causeway_core::auth::ClientAuth>>,
    ) -> Result<Self, ExporterError> {
        let base = cfg.endpoint.clone().unwrap_or_default();
        let base = base.trim_end_matches('/');
        let url = |over: &Option<String>, path: &str| {
            over.clone().unwrap_or_else(|| format!("{base}{path}"))
        };
        let urls = [
            url(&cfg.traces_endpoint, "/v1/traces"),
            url(&cfg.logs_endpoint, "/v1/logs"),
            url(&cfg.metrics_endpoint, "/v1/metrics"),
            url(&cfg.profiles_endpoint, "/v1development/profiles"),
        ];
        let mut headers = reqwest::header::HeaderMap::new();
        for (k, v) in &cfg.headers {
            let bad = |e: String| ExporterError::Endpoint {
                endpoint: base.to_string(),
                reason: format!("header {k:?}: {e}"),
            };
            let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| bad(e.to_string()))?;
            let value = reqwest::header::HeaderValue::from_str(v.expose())
                .map_err(|e| bad(e.to_string()))?;
            headers.insert(name, value);
        }
        let client = crate::http_util::client(
            base,
            &cfg.tls,
            crate::http_util::Within::Connect(cfg.timeout.get()),
        )?;
        Ok(HttpExporter {
            client,
            urls,
            encoding: cfg.encoding,
            compression: cfg.compression,
            headers,
            auth,
        })
    }

    /// The request body, compressed. A protobuf body is the batch's own
    /// bytes, compressed once whatever the number of exporters sending it.
    async fn body(&self, batch: &Batch) -> Result<Bytes, ExporterError> {
        let enc = |e: causeway_core::CoreError| ExporterError::Encode(e.to_string());
        let json = |e: serde_json::Error| ExporterError::Encode(e.to_string());
        let comp = |e: causeway_core::compress::CompressError| ExporterError::Encode(e.to_string());
        let json = match self.encoding {
            HttpEncoding::Proto => {
                return match self.compression {
                    Compression::None => Ok(batch.to_encoded()),
                    codec => batch.compressed(codec, Transport::Http).await.map_err(comp),
                }
            }
            HttpEncoding::Json => match batch.signal() {
                Signal::Traces => {
                    serde_json::to_vec(&batch.to_traces_request().map_err(enc)?).map_err(json)
                }
                Signal::Logs => {
                    serde_json::to_vec(&batch.to_logs_request().map_err(enc)?).map_err(json)
                }
                Signal::Metrics => {
                    serde_json::to_vec(&batch.to_metrics_request().map_err(enc)?).map_err(json)
                }
                // Refused by validation (`cannot_export`): protobuf only.
                Signal::Profiles => Err(ExporterError::Encode(
                    "profiles are sent as protobuf only".into(),
                )),
            }?,
        };
        self.compression
            .compress(Transport::Http, &[Bytes::from(json)])
            .map_err(comp)
    }
}

fn rejected(signal: Signal, encoding: HttpEncoding, body: &[u8]) -> (i64, String) {
    if body.is_empty() {
        return (0, String::new());
    }
    macro_rules! parse {
        ($t:ty, $field:ident) => {{
            let r: Option<$t> = match encoding {
                HttpEncoding::Proto => <$t>::decode(body).ok(),
                HttpEncoding::Json => serde_json::from_slice(body).ok(),
            };
            r.and_then(|r| r.partial_success)
                .map(|p| (p.$field, p.error_message))
                .unwrap_or_default()
        }};
    }
    match signal {
        Signal::Traces => parse!(ExportTraceServiceResponse, rejected_spans),
        Signal::Logs => parse!(ExportLogsServiceResponse, rejected_log_records),
        Signal::Metrics => parse!(ExportMetricsServiceResponse, rejected_data_points),
        Signal::Profiles => parse!(ExportProfilesServiceResponse, rejected_profiles),
    }
}

#[async_trait]
impl Exporter for HttpExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let signal = batch.signal();
        let url = &self.urls[signal as usize];
        let body = self.body(batch).await.map_err(|e| ExportError::Permanent {
            source: Box::new(e),
        })?;
        let mut headers = self.headers.clone();
        causeway_core::auth::apply(self.auth.as_ref(), &mut headers).map_err(|e| {
            ExportError::Retryable {
                source: e.into(),
                retry_after: None,
            }
        })?;
        let mut req = self.client.post(url).headers(headers).header(
            reqwest::header::CONTENT_TYPE,
            match self.encoding {
                HttpEncoding::Proto => "application/x-protobuf",
                HttpEncoding::Json => "application/json",
            },
        );
        if let Some(name) = self.compression.name() {
            req = req.header(reqwest::header::CONTENT_ENCODING, name);
        }
        let resp = req
            .body(body)
            .send()
            .await
            .map_err(|e| crate::http_util::transport_error(url, e))?;
        let status = resp.status();
        let hint = crate::http_util::retry_after(resp.headers());
        let body = resp.bytes().await.unwrap_or_default();
        if status.is_success() {
            let (rejected, message) = rejected(signal, self.encoding, &body);
            if rejected > 0 || !message.is_empty() {
                tracing::warn!(endpoint = %url, rejected, message, "Server accepted the request partially.");
            }
            return Ok(Delivered {
                rejected: u64::try_from(rejected).unwrap_or(0),
            });
        }
        let message = match self.encoding {
            HttpEncoding::Proto => RpcStatus::decode(body.as_ref()).map(|s| s.message).ok(),
            HttpEncoding::Json => None,
        }
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(512)]).into_owned());
        let source = Box::new(ExporterError::Server {
            endpoint: url.clone(),
            status: status.to_string(),
            message,
        });
        // OTLP spec: only 429, 502, 503 and 504 are retryable.
        if matches!(status.as_u16(), 429 | 502 | 503 | 504) {
            Err(ExportError::Retryable {
                source,
                retry_after: hint,
            })
        } else {
            Err(ExportError::Permanent { source })
        }
    }
}

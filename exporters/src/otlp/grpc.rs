//! OTLP/gRPC client.

use async_trait::async_trait;
use causeway_core::component::{Delivered, ExportError, Exporter};
use causeway_core::compress::{Codec, Transport};
use causeway_core::grpc::{export_path, unary, unary_headers, UnaryError};
use causeway_core::rpc::RpcStatus;
use causeway_core::{Batch, Signal};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::config::OtlpGrpcConfig;
use crate::ExporterError;

pub(crate) struct GrpcExporter {
    endpoint: String,
    channel: Channel,
    compression: Codec,
    /// `content-type`, `te`, `grpc-accept-encoding` and the configured headers.
    headers: ::http::HeaderMap,
    /// An authenticator's header, added to every request.
    auth: Option<std::sync::Arc<dyn causeway_core::auth::ClientAuth>>,
}

impl GrpcExporter {
    pub(crate) fn new(
        cfg: &OtlpGrpcConfig,
        auth: Option<std::sync::Arc<dyn causeway_core::auth::ClientAuth>>,
    ) -> Result<Self, ExporterError> {
        let bad = |reason: String| ExporterError::Endpoint {
            endpoint: cfg.endpoint.clone(),
            reason,
        };
        let tls = cfg.tls.enabled() || cfg.endpoint.starts_with("https://");
        let endpoint = if tls && !cfg.endpoint.contains("://") {
            format!("https://{}", cfg.endpoint)
        } else {
            cfg.endpoint.clone()
        };
        let uri = super::grpc_uri(&endpoint).map_err(bad)?;
        let mut ep = Endpoint::from(uri)
            .connect_timeout(cfg.timeout.get())
            .tcp_nodelay(true);
        if tls {
            let read = |p: &std::path::Path| {
                std::fs::read(p).map_err(|e| bad(format!("{}: {e}", p.display())))
            };
            let mut t = tonic::transport::ClientTlsConfig::new();
            if let Some(ca) = &cfg.tls.ca_file {
                t = t.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
            }
            // No CA bundle: the system's roots, as the Collector does.
            t = t.ca_certificates(
                cfg.tls
                    .system_roots_pem()
                    .into_iter()
                    .map(tonic::transport::Certificate::from_pem),
            );
            if let (Some(c), Some(k)) = (&cfg.tls.cert_file, &cfg.tls.key_file) {
                t = t.identity(tonic::transport::Identity::from_pem(read(c)?, read(k)?));
            }
            if let Some(name) = &cfg.tls.server_name_override {
                t = t.domain_name(name.clone());
            }
            ep = ep.tls_config(t).map_err(|e| bad(e.to_string()))?;
        }
        let channel = ep.connect_lazy();
        let mut metadata = MetadataMap::new();
        for (k, v) in &cfg.headers {
            let key = MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes())
                .map_err(|e| bad(format!("header {k:?}: {e}")))?;
            let value = MetadataValue::try_from(v.expose())
                .map_err(|e| bad(format!("header {k:?}: {e}")))?;
            metadata.insert(key, value);
        }
        Ok(GrpcExporter {
            endpoint: cfg.endpoint.clone(),
            channel,
            compression: cfg.compression,
            headers: unary_headers(metadata.into_headers()),
            auth,
        })
    }

    pub(crate) fn classify(&self, status: tonic::Status) -> ExportError {
        let retry_after = RpcStatus::decode(status.details())
            .ok()
            .and_then(|s| s.retry_delay());
        let source = Box::new(ExporterError::Server {
            endpoint: self.endpoint.clone(),
            status: format!("{:?}", status.code()),
            message: status.message().to_string(),
        });
        // OTLP spec: these codes are retryable; RESOURCE_EXHAUSTED only with RetryInfo.
        let retryable = matches!(
            status.code(),
            Code::Cancelled
                | Code::DeadlineExceeded
                | Code::Aborted
                | Code::OutOfRange
                | Code::Unavailable
                | Code::DataLoss
        ) || (status.code() == Code::ResourceExhausted && retry_after.is_some());
        if retryable {
            ExportError::Retryable {
                source,
                retry_after,
            }
        } else {
            ExportError::Permanent { source }
        }
    }

    fn transport_error(&self, message: String) -> ExportError {
        ExportError::Retryable {
            source: Box::new(ExporterError::Transport {
                endpoint: self.endpoint.clone(),
                message,
            }),
            retry_after: None,
        }
    }

    /// One Export call: the batch compressed on this task, once per batch
    /// and codec whatever the number of exporters ([`Batch::compressed`]).
    async fn call<R: Message + Default + Send + 'static>(
        &self,
        signal: Signal,
        batch: &Batch,
    ) -> Result<R, ExportError> {
        let parts = match self.compression {
            Codec::None => batch.encoded_parts(),
            codec => vec![batch
                .compressed(codec, Transport::Grpc)
                .await
                .map_err(|e| ExportError::Permanent {
                    source: Box::new(ExporterError::Encode(e.to_string())),
                })?],
        };
        let authed;
        let headers = match &self.auth {
            None => &self.headers,
            Some(a) => {
                let mut h = self.headers.clone();
                causeway_core::auth::apply(Some(a), &mut h).map_err(|e| {
                    ExportError::Retryable {
                        source: e.into(),
                        retry_after: None,
                    }
                })?;
                authed = h;
                &authed
            }
        };
        let msg = unary(
            &self.channel,
            export_path(signal),
            headers,
            self.compression,
            parts,
        )
        .await
        .map_err(|e| match e {
            UnaryError::Transport(m) => self.transport_error(m),
            UnaryError::Status(s) => self.classify(s),
        })?;
        R::decode(msg)
            .map_err(|e| self.classify(tonic::Status::internal(format!("invalid response: {e}"))))
    }
}

#[async_trait]
impl Exporter for GrpcExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let (rejected, message) = match batch.signal() {
            Signal::Traces => {
                let r: ExportTraceServiceResponse = self.call(Signal::Traces, batch).await?;
                r.partial_success
                    .map(|p| (p.rejected_spans, p.error_message))
                    .unwrap_or_default()
            }
            Signal::Logs => {
                let r: ExportLogsServiceResponse = self.call(Signal::Logs, batch).await?;
                r.partial_success
                    .map(|p| (p.rejected_log_records, p.error_message))
                    .unwrap_or_default()
            }
            Signal::Metrics => {
                let r: ExportMetricsServiceResponse = self.call(Signal::Metrics, batch).await?;
                r.partial_success
                    .map(|p| (p.rejected_data_points, p.error_message))
                    .unwrap_or_default()
            }
            Signal::Profiles => {
                let r: ExportProfilesServiceResponse = self.call(Signal::Profiles, batch).await?;
                r.partial_success
                    .map(|p| (p.rejected_profiles, p.error_message))
                    .unwrap_or_default()
            }
        };
        if rejected > 0 || !message.is_empty() {
            tracing::warn!(endpoint = %self.endpoint, rejected, message, "Server accepted the request partially.");
        }
        Ok(Delivered {
            rejected: u64::try_from(rejected).unwrap_or(0),
        })
    }
}

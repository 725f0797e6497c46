//! OTLP/gRPC client.

use async_trait::async_trait;
use bytes::Bytes;
use causeway_core::component::{Delivered, ExportError, Exporter};
use causeway_core::grpc::{export_path, ClientCodec};
use causeway_core::rpc::RpcStatus;
use causeway_core::{Batch, Signal};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceResponse;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tonic::codec::CompressionEncoding;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::config::{Compression, OtlpGrpcConfig};
use crate::ExporterError;

pub(crate) struct GrpcExporter {
    endpoint: String,
    channel: Channel,
    compression: Compression,
    metadata: MetadataMap,
}

impl GrpcExporter {
    pub(crate) fn new(cfg: &OtlpGrpcConfig) -> Result<Self, ExporterError> {
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
            metadata,
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

    async fn call<R: Message + Default + Send + 'static>(
        &self,
        signal: Signal,
        parts: Vec<Bytes>,
    ) -> Result<R, ExportError> {
        let mut client = tonic::client::Grpc::new(self.channel.clone());
        if self.compression == Compression::Gzip {
            client = client.send_compressed(CompressionEncoding::Gzip);
        }
        client = client.accept_compressed(CompressionEncoding::Gzip);
        client.ready().await.map_err(|e| ExportError::Retryable {
            source: Box::new(ExporterError::Transport {
                endpoint: self.endpoint.clone(),
                message: e.to_string(),
            }),
            retry_after: None,
        })?;
        let mut req = tonic::Request::new(parts);
        *req.metadata_mut() = self.metadata.clone();
        let path = ::http::uri::PathAndQuery::from_static(export_path(signal));
        client
            .unary::<Vec<Bytes>, R, _>(req, path, ClientCodec::<R>::default())
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| self.classify(s))
    }
}

#[async_trait]
impl Exporter for GrpcExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let parts = batch.encoded_parts();
        let (rejected, message) = match batch.signal() {
            Signal::Traces => {
                let r: ExportTraceServiceResponse = self.call(Signal::Traces, parts).await?;
                r.partial_success
                    .map(|p| (p.rejected_spans, p.error_message))
                    .unwrap_or_default()
            }
            Signal::Logs => {
                let r: ExportLogsServiceResponse = self.call(Signal::Logs, parts).await?;
                r.partial_success
                    .map(|p| (p.rejected_log_records, p.error_message))
                    .unwrap_or_default()
            }
            Signal::Metrics => {
                let r: ExportMetricsServiceResponse = self.call(Signal::Metrics, parts).await?;
                r.partial_success
                    .map(|p| (p.rejected_data_points, p.error_message))
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

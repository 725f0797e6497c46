//! The daemon's own telemetry: logs through `tracing`, and optionally its
//! traces and metrics exported by OTLP (`service.telemetry`), built with the
//! `opentelemetry` SDK.

use anyhow::Context as _;
use causeway_core::config::{OtlpTelemetryEndpoint, TelemetryConfig};
use causeway_core::telemetry::{Kind, Registry};
use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use std::collections::BTreeSet;
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object a line.
    Json,
}

/// Providers to flush at exit.
#[derive(Default)]
pub struct Providers {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

fn resource(cfg: &TelemetryConfig) -> Resource {
    let mut b = Resource::builder().with_service_name("causeway");
    b = b.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    for (k, v) in &cfg.resource {
        b = b.with_attribute(KeyValue::new(k.clone(), v.clone()));
    }
    b.build()
}

fn is_http(ep: &OtlpTelemetryEndpoint) -> bool {
    matches!(ep.protocol.as_deref(), Some("http/protobuf") | Some("http"))
}

/// Install the global subscriber; build the OTLP trace pipeline if configured.
pub fn init_logging(
    level: &str,
    format: LogFormat,
    cfg: &TelemetryConfig,
) -> anyhow::Result<Providers> {
    let filter =
        EnvFilter::try_new(level).with_context(|| format!("invalid log level {level:?}"))?;
    let fmt = match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .boxed(),
    };
    let mut providers = Providers::default();
    let otel = match cfg.traces.processors.iter().find_map(|p| p.batch.as_ref()) {
        Some(batch) => {
            let ep = &batch.exporter.otlp;
            let exporter = if is_http(ep) {
                let mut b = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_endpoint(format!("{}/v1/traces", ep.endpoint.trim_end_matches('/')))
                    .with_headers(Default::default());
                if let Some(c) = http_client(ep)? {
                    b = b.with_http_client(c);
                }
                b.build()
            } else {
                let mut b = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_endpoint(&ep.endpoint);
                if let Some(t) = grpc_tls(ep)? {
                    b = b.with_tls_config(t);
                }
                b.build()
            }
            .context("service.telemetry.traces: cannot build the OTLP span exporter")?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource(cfg))
                .build();
            let tracer = provider.tracer("causeway");
            providers.tracer = Some(provider);
            // Only causeway's own spans: the exporter's HTTP/gRPC stack must not trace itself.
            let only_ours =
                tracing_subscriber::filter::filter_fn(|m| m.target().starts_with("causeway"));
            Some(
                tracing_opentelemetry::layer()
                    .with_tracer(tracer)
                    .with_filter(only_ours),
            )
        }
        None => None,
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .context("cannot install the log subscriber")?;
    Ok(providers)
}

impl Providers {
    /// Export the registry's series by OTLP on the configured periodic readers.
    pub fn start_metrics(
        &mut self,
        cfg: &TelemetryConfig,
        registry: &Registry,
    ) -> anyhow::Result<()> {
        let Some(periodic) = cfg.metrics.readers.iter().find_map(|r| r.periodic.as_ref()) else {
            return Ok(());
        };
        let ep = &periodic.exporter.otlp;
        let exporter = if is_http(ep) {
            let mut b = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_endpoint(format!("{}/v1/metrics", ep.endpoint.trim_end_matches('/')));
            if let Some(c) = http_client(ep)? {
                b = b.with_http_client(c);
            }
            b.build()
        } else {
            let mut b = opentelemetry_otlp::MetricExporter::builder()
                .with_tonic()
                .with_endpoint(&ep.endpoint);
            if let Some(t) = grpc_tls(ep)? {
                b = b.with_tls_config(t);
            }
            b.build()
        }
        .context("service.telemetry.metrics: cannot build the OTLP metric exporter")?;
        let reader = PeriodicReader::builder(exporter)
            .with_interval(Duration::from_millis(periodic.interval.unwrap_or(60_000)))
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource(cfg))
            .build();
        let meter = provider.meter("causeway");
        let names: BTreeSet<(&'static str, &'static str, Kind)> = registry
            .snapshot()
            .into_iter()
            .map(|s| (s.name, s.help, s.kind))
            .collect();
        for (name, help, kind) in names {
            let reg = registry.clone();
            let observe = move |name: &str| {
                reg.snapshot()
                    .into_iter()
                    .filter(|s| s.name == name)
                    .map(|s| {
                        let attrs: Vec<KeyValue> = s
                            .labels
                            .into_iter()
                            .map(|(k, v)| KeyValue::new(k, v))
                            .collect();
                        (s.value, attrs)
                    })
                    .collect::<Vec<_>>()
            };
            match kind {
                Kind::Counter => {
                    meter
                        .u64_observable_counter(name)
                        .with_description(help)
                        .with_callback(move |o| {
                            for (v, attrs) in observe(name) {
                                o.observe(v as u64, &attrs);
                            }
                        })
                        .build();
                }
                Kind::Gauge => {
                    meter
                        .i64_observable_gauge(name)
                        .with_description(help)
                        .with_callback(move |o| {
                            for (v, attrs) in observe(name) {
                                o.observe(v as i64, &attrs);
                            }
                        })
                        .build();
                }
            }
        }
        self.meter = Some(provider);
        Ok(())
    }

    /// Flush and stop.
    pub fn shutdown(self) {
        if let Some(m) = self.meter {
            if let Err(error) = m.shutdown() {
                tracing::warn!(%error, "Self-telemetry metrics shutdown failed.");
            }
        }
        if let Some(t) = self.tracer {
            if let Err(error) = t.shutdown() {
                tracing::warn!(%error, "Self-telemetry traces shutdown failed.");
            }
        }
    }
}

/// The gRPC TLS settings of a telemetry endpoint, when it has any.
fn grpc_tls(
    ep: &OtlpTelemetryEndpoint,
) -> anyhow::Result<Option<tonic::transport::ClientTlsConfig>> {
    let t = &ep.tls;
    if !t.enabled() && !ep.endpoint.starts_with("https://") {
        return Ok(None);
    }
    let read = |p: &std::path::Path| {
        std::fs::read(p).with_context(|| format!("service.telemetry: {}", p.display()))
    };
    let mut c = tonic::transport::ClientTlsConfig::new();
    if let Some(ca) = &t.ca_file {
        c = c.ca_certificate(tonic::transport::Certificate::from_pem(read(ca)?));
    }
    c = c.ca_certificates(
        t.system_roots_pem()
            .into_iter()
            .map(tonic::transport::Certificate::from_pem),
    );
    if let (Some(cert), Some(key)) = (&t.cert_file, &t.key_file) {
        c = c.identity(tonic::transport::Identity::from_pem(
            read(cert)?,
            read(key)?,
        ));
    }
    if let Some(name) = &t.server_name_override {
        c = c.domain_name(name.clone());
    }
    Ok(Some(c))
}

/// A blocking HTTP client with a telemetry endpoint's TLS settings, when it has any.
fn http_client(ep: &OtlpTelemetryEndpoint) -> anyhow::Result<Option<reqwest::blocking::Client>> {
    if !ep.tls.enabled() && !ep.endpoint.starts_with("https://") {
        return Ok(None);
    }
    let cfg = ep
        .tls
        .client_config()
        .map_err(|e| anyhow::anyhow!("service.telemetry: {e}"))?;
    causeway_core::tls::install_crypto_provider();
    Ok(Some(
        reqwest::blocking::Client::builder()
            .use_preconfigured_tls(cfg)
            .build()
            .context("service.telemetry: cannot build the HTTP client")?,
    ))
}

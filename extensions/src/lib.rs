//! causeway extensions: services beside the pipelines, in the OpenTelemetry
//! Collector's shape so that its configs carry over.
//!
//! - `health_check`: the Collector's health endpoint (JSON status, 200 when
//!   the pipelines run, 503 before and during shutdown) on its own port.
//! - `zpages`: the Collector's `/debug/*z` pages, filled from causeway's own
//!   state (pipelines and their live counts, extensions).
//! - `pprof`: accepted so that configs load; causeway is not a Go program and
//!   serves no Go profiles. The endpoint says how to profile it instead.

pub mod basicauth;
pub mod bearertokenauth;
pub mod health_check;
pub mod pprof;
pub mod zpages;

use causeway_core::registry::Registry;

/// Register every extension of this crate.
pub fn register(registry: &mut Registry) {
    registry.add_extension(health_check::HealthCheckFactory);
    registry.add_extension(zpages::ZPagesFactory);
    registry.add_extension(pprof::PprofFactory);
    registry.add_extension(bearertokenauth::BearerTokenFactory);
    registry.add_extension(basicauth::BasicAuthFactory);
    use causeway_core::registry::Kind::Extension;
    registry.add_instead(
        Extension,
        "oauth2client",
        "causeway has no OAuth2 client; put a token in the exporter's `headers`",
    );
    registry.add_instead(Extension, "file_storage", "give the exporter's `sending_queue.storage` a directory (causeway's persistent queue) instead of a storage extension id");
    registry.add_instead(Extension, "memory_limiter", "use the `memory_limiter` processor or `service.memory_limiter`: causeway refuses data at the receivers, before decoding, either way");
    registry.add_instead(Extension, "healthcheckv2", "use `health_check`");
}

/// Leave an authenticator where exporters naming this extension find it.
pub(crate) fn publish(
    ctx: &causeway_core::component::BuildContext,
    auth: std::sync::Arc<dyn causeway_core::auth::ClientAuth>,
) {
    ctx.shared.get_or_init(
        &causeway_core::auth::shared_key(&ctx.id.to_string()),
        || causeway_core::auth::Authenticator(auth),
    );
}

/// An extension that is an HTTP server (health check, zPages, pprof): bound
/// when built, stopped when the service stops.
pub struct HttpServer {
    local_addr: std::net::SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    server: tokio::task::JoinHandle<()>,
}

impl HttpServer {
    /// Bind `endpoint` and serve `app` (over TLS when `tls` is set).
    pub async fn start(
        name: &str,
        endpoint: &str,
        tls: Option<&causeway_core::tls::ServerTls>,
        app: axum::Router,
        telemetry: causeway_core::telemetry::Registry,
    ) -> Result<Self, causeway_core::error::BoxError> {
        let stop = tokio_util::sync::CancellationToken::new();
        let (local_addr, server) = causeway_core::telemetry::serve_router(
            name,
            endpoint,
            tls,
            causeway_core::conn::ConnectionLimits::default(),
            app,
            telemetry,
            stop.clone(),
        )
        .await?;
        Ok(HttpServer {
            local_addr,
            stop,
            server,
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> std::net::SocketAddr {
        self.local_addr
    }
}

#[async_trait::async_trait]
impl causeway_core::component::Extension for HttpServer {
    async fn run(
        self: Box<Self>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<(), causeway_core::error::BoxError> {
        shutdown.cancelled().await;
        self.stop.cancel();
        self.server.await?;
        Ok(())
    }
}

/// An extension with nothing to run (its work is done where it is used).
pub(crate) struct Idle;

#[async_trait::async_trait]
impl causeway_core::component::Extension for Idle {
    async fn run(
        self: Box<Self>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<(), causeway_core::error::BoxError> {
        shutdown.cancelled().await;
        Ok(())
    }
}

/// `GET url` for the tests: status and body.
#[cfg(test)]
pub(crate) async fn get(url: &str) -> (u16, String) {
    causeway_core::tls::install_crypto_provider();
    let r = reqwest::Client::new().get(url).send().await.expect("GET");
    (r.status().as_u16(), r.text().await.expect("body"))
}

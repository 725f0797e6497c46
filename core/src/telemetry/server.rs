//! The telemetry server: `/metrics`, `/healthz` and `/readyz`, the page and
//! its API, over TLS and behind credentials when configured.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::net::SocketAddr;
use tokio_util::sync::CancellationToken;

use super::registry::Registry;
use crate::error::CoreError;

/// Bind the telemetry server; serve until `shutdown`.
pub async fn serve(
    addr: &str,
    tls: Option<&crate::tls::ServerTls>,
    registry: Registry,
    shutdown: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), CoreError> {
    serve_with(addr, tls, registry, shutdown, Serve::default()).await
}

/// What the telemetry server serves beyond `/metrics`, `/healthz`, `/readyz`.
#[derive(Debug, Clone, Default)]
pub struct Serve {
    /// The page (`/`) and its API (`/api/…`).
    pub ui: bool,
    /// Credentials required on everything but `/healthz` and `/readyz`.
    pub auth: Option<crate::tls::Authenticator>,
    /// Limits under a connection flood.
    pub connections: crate::conn::ConnectionLimits,
}

/// Bind the telemetry server with `opts`; serve until `shutdown`.
pub async fn serve_with(
    addr: &str,
    tls: Option<&crate::tls::ServerTls>,
    registry: Registry,
    shutdown: CancellationToken,
    opts: Serve,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), CoreError> {
    let mut guarded = Router::new().route("/metrics", get(metrics));
    if opts.ui {
        guarded = guarded
            .route("/", get(crate::ui::index))
            .route("/ui/app.js", get(crate::ui::app_js))
            .route("/ui/app.css", get(crate::ui::app_css))
            .route("/api/{*path}", get(crate::ui::api));
    }
    if let Some(auth) = opts.auth {
        guarded = guard(guarded, auth);
    }
    let app = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .merge(guarded)
        .with_state(registry.clone());
    serve_router(
        "telemetry",
        addr,
        tls,
        opts.connections,
        app,
        registry,
        shutdown,
    )
    .await
}

/// Every route of `router` answers 401 (with `WWW-Authenticate`) to a
/// request without the credentials `auth` checks. Used by the telemetry
/// server and the extensions that serve data (zpages).
pub fn guard<S: Clone + Send + Sync + 'static>(
    router: Router<S>,
    auth: crate::tls::Authenticator,
) -> Router<S> {
    router.layer(axum::middleware::from_fn(
        move |req: axum::extract::Request, next: axum::middleware::Next| {
            let auth = auth.clone();
            async move {
                let given = req
                    .headers()
                    .get(header::AUTHORIZATION)
                    .map(|v| v.as_bytes().to_vec());
                if auth.check(given.as_deref()) {
                    next.run(req).await
                } else {
                    (
                        StatusCode::UNAUTHORIZED,
                        [(
                            header::WWW_AUTHENTICATE,
                            format!("{} realm=\"causeway\"", auth.scheme()),
                        )],
                        "unauthorized\n",
                    )
                        .into_response()
                }
            }
        },
    ))
}

/// Bind `addr` and serve `app` on it (HTTP/1.1 and h2, over TLS when `tls`
/// is set, under the connection `limits`) until `shutdown`; `what` names the server in errors and logs.
/// Used by the telemetry server and the extensions.
pub async fn serve_router(
    what: &str,
    addr: &str,
    tls: Option<&crate::tls::ServerTls>,
    limits: crate::conn::ConnectionLimits,
    app: Router,
    registry: Registry,
    shutdown: CancellationToken,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), CoreError> {
    let bind_err = |source| CoreError::Bind {
        what: format!("{what} server"),
        addr: addr.into(),
        source,
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    let tls = match tls.map(|t| t.server_config(&[b"h2", b"http/1.1"])) {
        Some(Ok(c)) => Some(c),
        Some(Err(e)) => return Err(bind_err(std::io::Error::other(e))),
        None => None,
    };
    crate::tls::warn_if_exposed(what, "http", local, tls.is_some());
    let conns = crate::conn::accept(what, listener, tls, limits, &registry, shutdown.clone());
    let handle = tokio::spawn(crate::conn::serve_http(conns, app, limits, shutdown));
    Ok((local, handle))
}

async fn metrics(State(registry): State<Registry>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        registry.render(),
    )
}

async fn readyz(State(registry): State<Registry>) -> impl IntoResponse {
    if registry.is_ready() {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

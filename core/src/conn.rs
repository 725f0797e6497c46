//! Connections under pressure: every server causeway runs (OTLP gRPC and
//! HTTP, the telemetry server, the extensions) accepts through a [`Guard`],
//! so that a flood of connections that send nothing, trickle their headers,
//! never finish their TLS handshake or open HTTP/2 streams they never read
//! cannot lock legitimate clients out.
//!
//! - Accepting never waits for anything: TLS handshakes run on tasks of
//!   their own, with a deadline (`handshake_timeout`).
//! - At most `max` connections are open at once, handshakes included. At
//!   the limit, a new connection closes the one that has been quiet longest
//!   (the longest since it last sent a byte): a client that is talking is
//!   never the one closed, while idle or stalled connections are, oldest first.
//! - A connection must send its first bytes (an HTTP/1 request line, the
//!   HTTP/2 preface) within `header_read_timeout` of being ready, HTTP/1
//!   request headers must arrive within it (hyper's timer), and a
//!   connection that sends nothing for `idle_timeout` is closed.
//! - HTTP/2 connections are pinged every `keepalive_interval`; one that
//!   does not answer within `keepalive_timeout` (a client that stopped
//!   reading) is closed.
//!
//! Closed connections are counted by reason in
//! `causeway_server_connections_closed_total{server,reason}`, and open ones
//! in `causeway_server_connections{server}`.

use crate::config::Duration;
use crate::telemetry::registry::{Counter, Gauge, Registry};
use futures::task::AtomicWaker;
use serde::Deserialize;
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

crate::metrics! {
    /// Connections open on a server, TLS handshakes included.
    pub Connections: gauge = "causeway_server_connections";
    /// TLS handshakes that failed, by receiver.
    pub HandshakeFailures: counter = "causeway_tls_handshake_failures_total";
    /// Connections closed by a server's limits (connections.max, its timeouts), by server and reason.
    pub Closed: counter = "causeway_server_connections_closed_total";
}

/// Bytes a connection must have sent within `header_read_timeout`: the
/// HTTP/2 client preface, shorter than any HTTP/1 request line with headers.
const OPENING_BYTES: u64 = 24;

/// `connections:` of a server: its limits under a connection flood.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionLimits {
    /// Connections open at once at most, TLS handshakes in progress
    /// included. At the limit, a new connection closes the
    /// one that has been quiet longest, counted as `reason="evicted"`.
    pub max: usize,
    /// Deadline of a TLS handshake.
    pub handshake_timeout: Duration,
    /// Deadline of a connection's first bytes once it is ready (after its
    /// TLS handshake), and of each HTTP/1 request's headers.
    pub header_read_timeout: Duration,
    /// A connection that sends nothing for this long is closed (default
    /// 5m; HTTP/2 clients that answer pings are never idle that long).
    pub idle_timeout: Duration,
    /// HTTP/2 pings to each connection this often...
    pub keepalive_interval: Duration,
    /// ...and a connection that does not answer within this is closed
    ///.
    pub keepalive_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max: 4096,
            handshake_timeout: Duration::secs(5),
            header_read_timeout: Duration::secs(10),
            idle_timeout: Duration::secs(300),
            keepalive_interval: Duration::secs(30),
            keepalive_timeout: Duration::secs(20),
        }
    }
}

impl ConnectionLimits {
    /// Every problem with these limits, as `(key, message)` under `path`.
    pub fn problems(&self, path: &str) -> Vec<(String, String)> {
        let mut out = Vec::new();
        if self.max == 0 {
            out.push((format!("{path}.max"), "must be at least 1".into()));
        }
        for (k, v) in [
            ("handshake_timeout", self.handshake_timeout),
            ("header_read_timeout", self.header_read_timeout),
            ("idle_timeout", self.idle_timeout),
            ("keepalive_interval", self.keepalive_interval),
            ("keepalive_timeout", self.keepalive_timeout),
        ] {
            if v.get().is_zero() {
                out.push((format!("{path}.{k}"), "must be more than 0".into()));
            }
        }
        out
    }
}

/// One connection as its [`Guard`] sees it.
struct Slot {
    /// Milliseconds since the guard started, when it last received a byte.
    last_rx: AtomicU64,
    /// When it became ready for its protocol (after TLS), in the same unit.
    ready_at: AtomicU64,
    /// Bytes received since it became ready (up to `OPENING_BYTES`).
    opening: AtomicU64,
    closed: AtomicBool,
    /// Why it was closed, for the count (set once, by whoever closes it).
    reason: Mutex<Option<&'static str>>,
    read_waker: AtomicWaker,
    write_waker: AtomicWaker,
}

impl Slot {
    fn close(&self, reason: &'static str) -> bool {
        if self.closed.swap(true, Ordering::SeqCst) {
            return false;
        }
        if let Ok(mut r) = self.reason.lock() {
            *r = Some(reason);
        }
        self.read_waker.wake();
        self.write_waker.wake();
        true
    }
}

/// The connections of one server.
#[derive(Clone)]
pub struct Guard {
    inner: Arc<GuardInner>,
}

struct GuardInner {
    name: String,
    limits: ConnectionLimits,
    started: Instant,
    next: AtomicU64,
    slots: Mutex<HashMap<u64, Arc<Slot>>>,
    open: Gauge,
    registry: Registry,
}

impl GuardInner {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn closed(&self, reason: &str) -> Counter {
        self.registry
            .counter(Closed, &[("server", &self.name), ("reason", reason)])
    }
}

impl Guard {
    /// The guard of server `name` (`otlp/grpc`, `telemetry`, …); its
    /// watchdog (timeouts) runs until `shutdown`.
    pub fn new(
        name: &str,
        limits: ConnectionLimits,
        registry: &Registry,
        shutdown: CancellationToken,
    ) -> Guard {
        let inner = Arc::new(GuardInner {
            name: name.to_string(),
            limits,
            started: Instant::now(),
            next: AtomicU64::new(0),
            slots: Mutex::new(HashMap::new()),
            open: registry.gauge(Connections, &[("server", name)]),
            registry: registry.clone(),
        });
        let weak = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let Some(g) = weak.upgrade() else { return };
                watchdog(&g);
            }
        });
        Guard { inner }
    }

    /// The limits it applies.
    pub fn limits(&self) -> &ConnectionLimits {
        &self.inner.limits
    }

    /// Take a new connection: at the limit, the quietest open one is closed
    /// first.
    pub fn admit(&self, io: TcpStream) -> Conn {
        let g = &self.inner;
        let now = g.now_ms();
        let slot = Arc::new(Slot {
            last_rx: AtomicU64::new(now),
            ready_at: AtomicU64::new(u64::MAX),
            opening: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            reason: Mutex::new(None),
            read_waker: AtomicWaker::new(),
            write_waker: AtomicWaker::new(),
        });
        let id = g.next.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut slots) = g.slots.lock() {
            // Closed ones leave when their task drops them; they do not count.
            let live = slots
                .values()
                .filter(|s| !s.closed.load(Ordering::Relaxed))
                .count();
            if live >= g.limits.max {
                let quietest = slots
                    .values()
                    .filter(|s| !s.closed.load(Ordering::Relaxed))
                    .min_by_key(|s| s.last_rx.load(Ordering::Relaxed))
                    .cloned();
                if let Some(s) = quietest {
                    if s.close("evicted") {
                        tracing::debug!(server = %g.name, "Connection limit reached; the quietest connection closed.");
                    }
                }
            }
            slots.insert(id, slot.clone());
            g.open.set(slots.len() as i64);
        }
        Conn {
            io,
            slot,
            id,
            guard: self.inner.clone(),
        }
    }
}

/// Close what overran its deadline, and count what was closed.
fn watchdog(g: &GuardInner) {
    let now = g.now_ms();
    let limits = g.limits;
    let ms = |d: Duration| d.get().as_millis() as u64;
    let Ok(slots) = g.slots.lock() else { return };
    for s in slots.values() {
        if s.closed.load(Ordering::Relaxed) {
            continue;
        }
        let last = s.last_rx.load(Ordering::Relaxed);
        let ready = s.ready_at.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= ms(limits.idle_timeout) {
            s.close("idle_timeout");
        } else if ready != u64::MAX
            && s.opening.load(Ordering::Relaxed) < OPENING_BYTES
            && now.saturating_sub(ready) >= ms(limits.header_read_timeout)
        {
            s.close("header_timeout");
        }
    }
}

/// A connection held by a [`Guard`]: reads and writes fail once the guard
/// closed it, which ends whatever serves it. A connection the guard closed
/// is reset (no TIME_WAIT left on the server for a flood's connections).
pub struct Conn {
    io: TcpStream,
    slot: Arc<Slot>,
    id: u64,
    guard: Arc<GuardInner>,
}

impl Conn {
    /// The protocol starts now (the TLS handshake is done, or there is
    /// none): its first bytes are due within `header_read_timeout`.
    pub fn ready(&self) {
        self.slot.opening.store(0, Ordering::Relaxed);
        self.slot
            .ready_at
            .store(self.guard.now_ms(), Ordering::Relaxed);
    }

    /// Close it for `reason` (counted once).
    pub fn close(&self, reason: &'static str) {
        self.slot.close(reason);
    }

    /// The stream it wraps.
    pub fn get_ref(&self) -> &TcpStream {
        &self.io
    }

    /// Closed by the guard: reset rather than closed in order.
    fn aborted(&self) -> std::io::Error {
        #[allow(deprecated)] // a zero linger does not block (the deprecation is about others)
        self.io.set_linger(Some(std::time::Duration::ZERO)).ok();
        std::io::Error::new(
            std::io::ErrorKind::ConnectionAborted,
            "closed by the server's connection limits",
        )
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Ok(mut slots) = self.guard.slots.lock() {
            slots.remove(&self.id);
            self.guard.open.set(slots.len() as i64);
        }
        let mut reason = self.slot.reason.lock().ok().and_then(|r| *r);
        if reason.is_none() && self.slot.ready_at.load(Ordering::Relaxed) == u64::MAX {
            // Dropped before it was ready: its TLS handshake failed.
            reason = Some("handshake_failed");
        }
        if let Some(reason) = reason {
            self.aborted();
            self.guard.closed(reason).add(1);
        }
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        self.slot.read_waker.register(cx.waker());
        if self.slot.closed.load(Ordering::SeqCst) {
            return Poll::Ready(Err(self.aborted()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        let n = buf.filled().len() - before;
        if n > 0 {
            let now = self.guard.now_ms();
            self.slot.last_rx.store(now, Ordering::Relaxed);
            if self.slot.opening.load(Ordering::Relaxed) < OPENING_BYTES {
                self.slot.opening.fetch_add(n as u64, Ordering::Relaxed);
            }
        }
        r
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.slot.write_waker.register(cx.waker());
        if self.slot.closed.load(Ordering::SeqCst) {
            return Poll::Ready(Err(self.aborted()));
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.slot.write_waker.register(cx.waker());
        if self.slot.closed.load(Ordering::SeqCst) {
            return Poll::Ready(Err(self.aborted()));
        }
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// A connection ready for its protocol: plain TCP, or TLS over TCP.
pub enum Stream {
    /// Plain TCP.
    Plain(Conn),
    /// TLS over TCP, the handshake done.
    Tls(Box<tokio_rustls::server::TlsStream<Conn>>),
}

impl Stream {
    /// The TCP connection under it.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            Stream::Plain(c) => c.get_ref(),
            Stream::Tls(t) => t.get_ref().0.get_ref(),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_read(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_write(cx, buf),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_write_vectored(cx, bufs),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(c) => c.is_write_vectored(),
            Stream::Tls(t) => t.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_flush(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(c) => Pin::new(c).poll_shutdown(cx),
            Stream::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tonic::transport::server::Connected for Stream {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp().connect_info()
    }
}

/// Accept on `listener` for server `name` until `shutdown`: each connection
/// is admitted by a [`Guard`] with `limits`, its TLS handshake (when `tls`)
/// run on a task of its own with its deadline, and handed out ready.
/// Accepting never waits for a handshake.
pub fn accept(
    name: &str,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: ConnectionLimits,
    registry: &Registry,
    shutdown: CancellationToken,
) -> tokio::sync::mpsc::Receiver<(Stream, std::net::SocketAddr)> {
    let guard = Guard::new(name, limits, registry, shutdown.clone());
    let registry = registry.clone();
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let name = name.to_string();
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                _ = shutdown.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of file descriptors, most often: wait a little
                        // (connections close meanwhile) instead of spinning.
                        tracing::warn!(server = %name, error = %e, "Accept failed.");
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            if tx.is_closed() {
                return;
            }
            tcp.set_nodelay(true).ok();
            let conn = guard.admit(tcp);
            let Some(acceptor) = acceptor.clone() else {
                conn.ready();
                if tx.send((Stream::Plain(conn), peer)).await.is_err() {
                    return;
                }
                continue;
            };
            let (tx, name, deadline, registry) = (
                tx.clone(),
                name.clone(),
                guard.limits().handshake_timeout.get(),
                registry.clone(),
            );
            tokio::spawn(async move {
                let closer = conn.slot.clone();
                // The deadline closes the connection (counting why) before
                // the handshake, which owns it, is dropped.
                let expired = async {
                    tokio::time::sleep(deadline).await;
                    closer.close("handshake_timeout");
                };
                tokio::select! {
                    r = acceptor.accept(conn) => match r {
                        Ok(tls) => {
                            tls.get_ref().0.ready();
                            tx.send((Stream::Tls(Box::new(tls)), peer)).await.ok();
                        }
                        Err(e) => {
                            // A failed handshake (its connection, dropped with
                            // it, is counted as `handshake_failed`), or one the
                            // guard closed (counted with the guard's reason).
                            if !closer.closed.load(Ordering::SeqCst) {
                                registry
                                    .counter(HandshakeFailures, &[("receiver", &name)],
                                    )
                                    .add(1);
                            }
                            tracing::debug!(server = %name, %peer, error = %e, "TLS handshake failed.");
                        }
                    },
                    _ = expired => {
                        tracing::debug!(server = %name, %peer, "TLS handshake timed out.");
                    }
                }
            });
        }
    });
    rx
}

/// Serve `app` over HTTP/1.1 and HTTP/2 on the connections of [`accept`]
/// until `shutdown`, with the limits' header deadline and HTTP/2 pings;
/// connections in flight get `grace` to finish after `shutdown`.
pub async fn serve_http(
    mut conns: tokio::sync::mpsc::Receiver<(Stream, std::net::SocketAddr)>,
    app: axum::Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout.get());
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(limits.keepalive_interval.get())
        .keep_alive_timeout(limits.keepalive_timeout.get());
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            c = conns.recv() => match c {
                Some(c) => c,
                None => break,
            },
        };
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc);
        let conn = graceful.watch(conn.into_owned());
        tokio::spawn(async move {
            if let Err(error) = conn.await {
                tracing::debug!(%peer, %error, "HTTP connection ended with an error.");
            }
        });
    }
    // In-flight requests finish (a few seconds at most); idle ones close.
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(std::time::Duration::from_secs(5)) => {}
    }
}

//! The `loadbalancing` exporter: OTLP/gRPC to a set of backends, each item
//! routed by its trace id (or service) on a consistent-hash ring, for sites
//! that shard a gateway tier without Kafka (README "Scaling out").
//!
//! Built against what users of the Collector's exporter report losing
//! during rescales (REFERENCE.md §8.2):
//! - one queue and one retry loop in front of the routing, none per
//!   backend: a backend that goes away takes nothing with it;
//! - a part a backend failed is split again on the ring as it is at the
//!   retry, so once the resolver has dropped the backend its data goes to
//!   the backends that now own it (only its ~1/N of the keys move);
//! - every backend's part of a batch is sent at once, not one after
//!   another;
//! - batches are split by key on the wire, never decoded.
//!
//! The ring is the Collector's ([`ring::Ring`]): a causeway tier and a
//! Collector tier in front of the same backends agree on where a trace goes.

pub mod config;
pub mod ring;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{
    BuildContext, BuiltExporter, Delivered, ExportError, Exporter, ExporterFactory,
};
use causeway_core::config::{decode, ConfigError, DeliveryConfig, RetryConfig};
use causeway_core::partition::{split_with, By};
use causeway_core::telemetry::{Counter, Gauge, Registry};
use causeway_core::{Batch, BoxError, SignalSet};
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use crate::otlp::grpc::GrpcExporter;
use config::{LoadBalancingConfig, RoutingKey};
use ring::Ring;

causeway_core::metrics! {
    /// Backends on the ring.
    pub NumBackends: gauge = "causeway_loadbalancer_num_backends";
    /// Backend resolutions, by resolver and outcome.
    pub Resolutions: counter = "causeway_loadbalancer_num_resolutions_total";
    /// Times the backend list changed.
    pub BackendUpdates: counter = "causeway_loadbalancer_num_backend_updates_total";
    /// Items sent again after a failed attempt, routed on the ring as it then was.
    pub Rerouted: counter = "causeway_loadbalancer_rerouted_items_total";
}

/// Factory of the `loadbalancing` exporter.
pub struct LoadBalancingExporterFactory;

#[async_trait]
impl ExporterFactory for LoadBalancingExporterFactory {
    fn kind(&self) -> &'static str {
        "loadbalancing"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::ALL
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<LoadBalancingConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<LoadBalancingConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<BuiltExporter, BoxError> {
        let cfg: LoadBalancingConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        // The runner does not retry: this exporter retries each failed part
        // itself, re-routed, within retry_on_failure.max_elapsed_time.
        let outer = RetryConfig {
            enabled: false,
            ..Default::default()
        };
        let max = cfg.retry_on_failure.max_elapsed_time.get();
        let delivery = DeliveryConfig {
            timeout: if cfg.retry_on_failure.enabled && max.is_zero() {
                Duration::from_secs(365 * 24 * 3600)
            } else {
                max + cfg.timeout.get() * 2 + Duration::from_secs(1)
            },
            retry: outer,
            queue: cfg.sending_queue.clone(),
        };
        // `protocol.otlp.auth`: one authenticator for every backend.
        let auth = cfg
            .backend("authenticator.check:1")
            .ok()
            .and_then(|b| b.auth)
            .map(|a| a.resolve(&ctx.shared))
            .transpose()?;
        let e = Arc::new(LoadBalancingExporter::new(
            cfg,
            &ctx.id.to_string(),
            &ctx.telemetry,
            auth,
        )?);
        e.start_resolver();
        Ok(BuiltExporter {
            exporter: e,
            delivery,
        })
    }
}

/// The backends now: endpoints (sorted), their exporters and the ring.
struct Backends {
    /// The listed backends first (`listed` of them: the ring's), then those
    /// removed less than `trace_affinity` ago: draining, they still get the
    /// traces already under way on them, and no new one.
    endpoints: Vec<Arc<str>>,
    listed: usize,
    /// When each draining backend stops getting traces (`None`: listed).
    until: Vec<Option<tokio::time::Instant>>,
    index: std::collections::HashMap<Arc<str>, usize>,
    exporters: Vec<Arc<GrpcExporter>>,
    ring: Ring,
}

/// Where recent trace ids went (`trace_affinity`).
type AffinityMap = std::collections::HashMap<
    [u8; 16],
    (Arc<str>, tokio::time::Instant),
    foldhash::fast::RandomState,
>;

#[derive(Default)]
struct Affinity {
    map: AffinityMap,
}

impl Affinity {
    /// Forget what is older than `ttl`; if still over `max`, forget all
    /// (the ring takes over; a trace in flight may then split).
    fn trim(&mut self, now: tokio::time::Instant, ttl: Duration, max: usize) {
        if self.map.len() <= max {
            return;
        }
        self.map
            .retain(|_, (_, at)| now.saturating_duration_since(*at) < ttl);
        if self.map.len() > max {
            self.map.clear();
        }
    }
}

struct Metrics {
    backends: Gauge,
    updates: Counter,
    rerouted: Counter,
}

/// The exporter.
pub struct LoadBalancingExporter {
    id: String,
    cfg: LoadBalancingConfig,
    state: RwLock<Arc<Backends>>,
    metrics: Metrics,
    resolutions: [Counter; 2],
    /// Wakes the resolver early (a backend failed).
    wake: Arc<tokio::sync::Notify>,
    affinity: std::sync::Mutex<Affinity>,
    /// `protocol.otlp.auth`, for every backend's requests.
    auth: Option<Arc<dyn causeway_core::auth::ClientAuth>>,
}

impl LoadBalancingExporter {
    /// Build; with a static resolver the ring is ready at once.
    pub fn new(
        cfg: LoadBalancingConfig,
        id: &str,
        telemetry: &Registry,
        auth: Option<Arc<dyn causeway_core::auth::ClientAuth>>,
    ) -> Result<Self, BoxError> {
        let kind = if cfg.resolver.dns.is_some() {
            "dns"
        } else if cfg.resolver.file.is_some() {
            "file"
        } else {
            "static"
        };
        let res = |ok: &str| {
            telemetry.counter(
                Resolutions,
                &[("exporter", id), ("resolver", kind), ("success", ok)],
            )
        };
        let e = LoadBalancingExporter {
            id: id.to_string(),
            state: RwLock::new(Arc::new(Backends {
                endpoints: Vec::new(),
                listed: 0,
                until: Vec::new(),
                index: Default::default(),
                exporters: Vec::new(),
                ring: Ring::default(),
            })),
            metrics: Metrics {
                backends: telemetry.gauge(NumBackends, &[("exporter", id)]),
                updates: telemetry.counter(BackendUpdates, &[("exporter", id)]),
                rerouted: telemetry.counter(Rerouted, &[("exporter", id)]),
            },
            resolutions: [res("true"), res("false")],
            wake: Arc::new(tokio::sync::Notify::new()),
            affinity: Default::default(),
            auth,
            cfg,
        };
        if let Some(s) = &e.cfg.resolver.static_ {
            e.update(s.hostnames.clone())?;
        }
        Ok(e)
    }

    /// Put `endpoints` on the ring (kept exporters are reused).
    fn update(&self, mut endpoints: Vec<String>) -> Result<(), BoxError> {
        endpoints.sort();
        endpoints.dedup();
        let old = self.backends();
        if old.endpoints[..old.listed]
            .iter()
            .map(|e| &**e)
            .eq(endpoints.iter().map(String::as_str))
        {
            return Ok(());
        }
        let now = tokio::time::Instant::now();
        let ttl = self.cfg.trace_affinity.get();
        let listed = endpoints.len();
        let mut all: Vec<(String, Option<tokio::time::Instant>)> =
            endpoints.iter().map(|e| (e.clone(), None)).collect();
        if !ttl.is_zero() {
            // Removed now, or still draining from an earlier change.
            for (i, e) in old.endpoints.iter().enumerate() {
                let until = old.until[i].unwrap_or(now + ttl);
                if until > now && !all.iter().any(|(x, _)| **x == **e) {
                    all.push((e.to_string(), Some(until)));
                }
            }
        }
        let mut exporters = Vec::with_capacity(all.len());
        for (ep, _) in &all {
            match old.index.get(ep.as_str()).copied() {
                Some(i) => exporters.push(old.exporters[i].clone()),
                None => {
                    let cfg = self
                        .cfg
                        .backend(ep)
                        .map_err(|e| format!("backend {ep}: {e:?}"))?;
                    exporters.push(Arc::new(GrpcExporter::new(&cfg, self.auth.clone())?));
                }
            }
        }
        let draining: Vec<&str> = all[listed..].iter().map(|(e, _)| e.as_str()).collect();
        tracing::info!(exporter = %self.id, backends = ?endpoints, ?draining, "Load-balancing backends changed.");
        let ring = Ring::new(&endpoints);
        self.metrics.backends.set(listed as i64);
        self.metrics.updates.add(1);
        let until = all.iter().map(|(_, u)| *u).collect();
        let endpoints: Vec<Arc<str>> = all.into_iter().map(|(e, _)| Arc::from(e)).collect();
        let index = endpoints
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, e)| (e, i))
            .collect();
        if let Ok(mut s) = self.state.write() {
            *s = Arc::new(Backends {
                endpoints,
                listed,
                until,
                index,
                exporters,
                ring,
            });
        }
        Ok(())
    }

    fn backends(&self) -> Arc<Backends> {
        match self.state.read() {
            Ok(s) => s.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The backends the resolver names now.
    async fn resolve(&self) -> Result<Vec<String>, String> {
        if let Some(d) = &self.cfg.resolver.dns {
            let addrs = tokio::time::timeout(
                d.timeout.get(),
                tokio::net::lookup_host((d.hostname.as_str(), d.port)),
            )
            .await
            .map_err(|_| format!("resolving {} timed out", d.hostname))?
            .map_err(|e| format!("resolving {}: {e}", d.hostname))?;
            return Ok(addrs.map(|a| a.to_string()).collect());
        }
        if let Some(f) = &self.cfg.resolver.file {
            let text = tokio::fs::read_to_string(&f.path)
                .await
                .map_err(|e| format!("{}: {e}", f.path))?;
            return Ok(text
                .lines()
                .map(|l| l.split('#').next().unwrap_or("").trim())
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect());
        }
        Ok(self
            .cfg
            .resolver
            .static_
            .as_ref()
            .map(|s| s.hostnames.clone())
            .unwrap_or_default())
    }

    /// Resolve on the resolver's interval (and at once after a failure).
    fn start_resolver(self: &Arc<Self>) {
        let interval = match (&self.cfg.resolver.dns, &self.cfg.resolver.file) {
            (Some(d), _) => d.interval.get(),
            (_, Some(f)) => f.interval.get(),
            _ => return,
        };
        let weak: Weak<Self> = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let Some(me) = weak.upgrade() else { return };
                match me.resolve().await {
                    Ok(eps) if !eps.is_empty() => {
                        me.resolutions[0].add(1);
                        if let Err(e) = me.update(eps) {
                            tracing::warn!(exporter = %me.id, error = %e, "Cannot use the resolved backends; keeping the previous ones.");
                        }
                    }
                    Ok(_) => {
                        me.resolutions[1].add(1);
                        tracing::warn!(exporter = %me.id, "The resolver named no backend; keeping the previous ones.");
                    }
                    Err(e) => {
                        me.resolutions[1].add(1);
                        tracing::warn!(exporter = %me.id, error = %e, "Resolving the backends failed; keeping the previous ones.");
                    }
                }
                let wake = me.wake.clone();
                drop(me);
                let woken = tokio::select! {
                    _ = wake.notified() => true,
                    _ = tokio::time::sleep(interval) => false,
                };
                if woken {
                    // At most one early resolution a tenth of the interval.
                    tokio::time::sleep(interval / 10).await;
                }
            }
        });
    }
}

impl LoadBalancingExporter {
    /// Split `pending` over the backends: per backend, its request body and
    /// item count. A trace id goes to the backend it went to less than
    /// `trace_affinity` ago (listed, or draining and not past its time),
    /// unless that backend is in `failed`; else where the ring puts it.
    fn route(
        &self,
        b: &Backends,
        pending: &[bytes::Bytes],
        signal: causeway_core::Signal,
        by: By,
        failed: &std::collections::HashSet<Arc<str>>,
    ) -> Result<(Vec<Vec<u8>>, Vec<usize>), ExportError> {
        let n = b.endpoints.len();
        let mut bodies: Vec<Vec<u8>> = vec![Vec::new(); n];
        let mut items = vec![0usize; n];
        let ttl = self.cfg.trace_affinity.get();
        let sticky = by == By::TraceId && !ttl.is_zero();
        let now = tokio::time::Instant::now();
        let mut aff = match self.affinity.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut backend_of = |k: &causeway_core::partition::Key| -> usize {
            let causeway_core::partition::Key::Trace(id) = k else {
                return b.ring.backend(k);
            };
            if !sticky {
                return b.ring.backend(k);
            }
            if let Some((ep, at)) = aff.map.get_mut(id) {
                let usable = |i: usize| b.until[i].is_none_or(|u| now < u);
                if now.saturating_duration_since(*at) < ttl && !failed.contains(ep) {
                    if let Some(&i) = b.index.get(ep).filter(|i| usable(**i)) {
                        *at = now;
                        return i;
                    }
                }
            }
            let i = b.ring.backend(k);
            aff.map.insert(*id, (b.endpoints[i].clone(), now));
            i
        };
        for part in pending {
            let parts = split_with(signal, part, by, &mut backend_of).map_err(|e| {
                ExportError::Permanent {
                    source: format!("a {signal:?} request cannot be split by key: {e}").into(),
                }
            })?;
            for (i, p) in parts.into_iter().enumerate() {
                if p.items > 0 {
                    bodies[i].extend_from_slice(&p.bytes);
                    items[i] += p.items;
                }
            }
        }
        aff.trim(now, ttl, self.cfg.max_affinity_traces);
        Ok((bodies, items))
    }
}

#[async_trait]
impl Exporter for LoadBalancingExporter {
    async fn export(&self, batch: &Batch) -> Result<Delivered, ExportError> {
        let signal = batch.signal();
        let by = match self.cfg.routing_key {
            RoutingKey::TraceId => By::TraceId,
            RoutingKey::Service => By::Service,
        };
        let retry = self.cfg.retry_on_failure;
        let started = tokio::time::Instant::now();
        let mut backoff = causeway_core::retry::Backoff::new(retry);
        let mut pending: Vec<bytes::Bytes> = batch.encoded_parts();
        let mut first = true;
        // Items a backend refused as invalid: not sent again, counted.
        let mut rejected = 0u64;
        // Backends that failed the last attempt: their traces go by the ring.
        let mut failed: std::collections::HashSet<Arc<str>> = Default::default();
        loop {
            let b = self.backends();
            let mut failure: Option<ExportError> = None;
            if b.ring.is_empty() {
                failure = Some(ExportError::Retryable {
                    source: "no backend resolved yet".into(),
                    retry_after: None,
                });
            } else {
                // Every pending part split on the ring as it is now.
                let (bodies, items) = self.route(&b, &pending, signal, by, &failed)?;
                failed.clear();
                if !first {
                    self.metrics
                        .rerouted
                        .add(items.iter().sum::<usize>() as u64);
                }
                let timeout = self.cfg.timeout.get();
                let sends = bodies
                    .into_iter()
                    .enumerate()
                    .filter(|(_, body)| !body.is_empty())
                    .map(|(i, body)| {
                        let exporter = b.exporters[i].clone();
                        let count = items[i];
                        async move {
                            let bytes = bytes::Bytes::from(body);
                            let part = Batch::from_encoded(signal, bytes.clone(), count);
                            let r =
                                match tokio::time::timeout(timeout, exporter.export(&part)).await {
                                    Ok(r) => r,
                                    Err(_) => Err(ExportError::Retryable {
                                        source: format!("no answer in {timeout:?}").into(),
                                        retry_after: None,
                                    }),
                                };
                            (i, bytes, r)
                        }
                    });
                let mut next = Vec::new();
                for (i, bytes, r) in futures::future::join_all(sends).await {
                    match r {
                        Ok(_) => {}
                        Err(e @ ExportError::Permanent { .. }) => {
                            rejected += items[i] as u64;
                            tracing::warn!(exporter = %self.id, backend = %b.endpoints[i], error = %e, "A backend refused data as invalid; it is not sent again.");
                        }
                        Err(e) => {
                            tracing::debug!(exporter = %self.id, backend = %b.endpoints[i], error = %e, "A backend failed; its part is routed again.");
                            failed.insert(b.endpoints[i].clone());
                            next.push(bytes);
                            failure = Some(e);
                        }
                    }
                }
                pending = next;
            }
            let Some(err) = failure else {
                return Ok(Delivered { rejected });
            };
            first = false;
            self.wake.notify_one();
            let max = retry.max_elapsed_time.get();
            let wait = backoff.next_wait();
            if !retry.enabled || (!max.is_zero() && started.elapsed() + wait > max) {
                // Given up: counted by the runner as failed.
                return Err(ExportError::Permanent {
                    source: format!("given up after {:?}: {err}", started.elapsed()).into(),
                });
            }
            let hint = match &err {
                ExportError::Retryable {
                    retry_after: Some(d),
                    ..
                } => Some(*d),
                _ => None,
            };
            tokio::time::sleep(hint.unwrap_or(wait)).await;
        }
    }
}

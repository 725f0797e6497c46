//! `pprof` receiver: profiles pulled from runtimes that serve pprof over
//! HTTP (Go's `net/http/pprof`: `/debug/pprof/profile?seconds=N` for CPU,
//! `mutex`, `block`, `allocs` as deltas over N seconds, `goroutine`), sent
//! on as OTLP profiles.
//!
//! Every `collection_interval`, each profile of `profiles` is taken of
//! each target of each service (static or from `file_sd_configs` files,
//! as the `prometheus` receiver's), at once. An answer is read within
//! `seconds` + `timeout`, at most `body_size_limit` bytes inflated, each
//! chunk admitted by the memory limiter; it is converted (`convert.rs`):
//! one OTLP profile per sample type, the labels that name a span (Go's
//! `span_id` from otel-profiling-go, Datadog's `span id`, Pyroscope's
//! `profile_id`) as the sample's link, every label an attribute. The
//! resource is `service.name` (the job's `service`), `service.instance.id`
//! (the target's address) and the target's labels.
//!
//! A target down, slow, answering an error, garbage, a profile with a
//! dangling id, or over a limit is counted in
//! `causeway_pprof_errors_total{receiver,reason}` and logged once per
//! reason until it answers again; the other targets go on.

pub mod config;
pub mod convert;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Registry;
use causeway_core::topology::Output;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use std::collections::HashMap;
use tokio_util::sync::CancellationToken;

use crate::http_fetch::{self, Failure};
use crate::prometheus::config::ScrapeConfig;
use config::{Job, Kind, PprofConfig};
use convert::{kv, Limits};

causeway_core::metrics! {
    /// Failed collections, by reason.
    pub Errors: counter = "causeway_pprof_errors_total";
}

/// The deepest stack `max_depth` may allow (the receivers' check's limit).
pub const MAX_DEPTH: usize = causeway_core::wire::MAX_STACK_DEPTH;

/// Registers the `pprof` receiver.
#[derive(Debug)]
pub struct PprofFactory;

#[async_trait]
impl ReceiverFactory for PprofFactory {
    fn kind(&self) -> &'static str {
        "pprof"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Profiles)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<PprofConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<PprofConfig>(cfg).map(|_| ())
    }
    /// A window is answered at its end, within the timeout.
    fn delivery_lag(&self, cfg: &serde_yaml::Value) -> Option<std::time::Duration> {
        let c = decode::<PprofConfig>(cfg).ok()?;
        Some(c.seconds.get() + c.timeout.get())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: PprofConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let client = http_fetch::client(&cfg.tls)?;
        let jobs = cfg
            .targets
            .iter()
            .map(scrape_job)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(Pprof {
            id: ctx.id.to_string(),
            jobs,
            cfg,
            client,
            limiter: causeway_core::memory::MemoryLimiter::shared(&ctx.shared),
            telemetry: ctx.telemetry,
        }))
    }
}

/// A job as the `prometheus` receiver's discovery reads it.
fn scrape_job(j: &Job) -> Result<ScrapeConfig, String> {
    let v = serde_yaml::to_value(serde_json::json!({
        "job_name": j.service,
        "scheme": j.scheme,
        "static_configs": j.static_configs.iter().map(|s| serde_json::json!({
            "targets": s.targets, "labels": s.labels,
        })).collect::<Vec<_>>(),
        "file_sd_configs": j.file_sd_configs.iter().map(|f| serde_json::json!({
            "files": f.files, "refresh_interval": format!("{}ms", f.refresh_interval.get().as_millis()),
        })).collect::<Vec<_>>(),
    }))
    .map_err(|e| e.to_string())?;
    serde_yaml::from_value(v).map_err(|e| format!("targets of {}: {e}", j.service))
}

struct Pprof {
    id: String,
    cfg: PprofConfig,
    jobs: Vec<ScrapeConfig>,
    client: reqwest::Client,
    /// `service.memory_limiter`: every answer is admitted before it is kept.
    limiter: Option<std::sync::Arc<causeway_core::memory::MemoryLimiter>>,
    telemetry: Registry,
}

/// One process to profile.
#[derive(Debug, Clone)]
struct Target {
    /// Its job's index.
    job: usize,
    /// `scheme://host:port`.
    base: String,
    /// `host:port`.
    address: String,
    /// Its labels (resource attributes).
    labels: Vec<(String, String)>,
}

impl Pprof {
    /// Every target now, and what went wrong reading the target files.
    fn targets(&self) -> (Vec<Target>, Vec<String>) {
        let mut out = Vec::new();
        let mut errors = Vec::new();
        for (i, job) in self.jobs.iter().enumerate() {
            let (specs, e) = crate::prometheus::discovery::discover(job, &[]);
            errors.extend(e);
            out.extend(specs.into_iter().map(|s| Target {
                job: i,
                base: format!("{}://{}", s.scheme, s.address),
                address: s.address.clone(),
                labels: s.labels.into_iter().collect(),
            }));
        }
        (out, errors)
    }

    fn resource(&self, t: &Target) -> Resource {
        let mut attributes = vec![
            kv("service.name", &self.cfg.targets[t.job].service),
            kv("service.instance.id", &t.address),
        ];
        let labels = t.labels.iter().map(|(k, v)| (k, v));
        for (k, v) in labels.chain(&self.cfg.resource_attributes) {
            if !attributes.iter().any(|a| &a.key == k) {
                attributes.push(kv(k, v));
            }
        }
        Resource {
            attributes,
            ..Default::default()
        }
    }

    /// Take one profile of one target: the request and its samples.
    async fn take(&self, t: &Target, kind: Kind) -> Result<(Vec<u8>, usize), Failure> {
        let seconds = self.cfg.seconds.get().as_secs();
        let url = format!(
            "{}{}{}",
            t.base,
            self.cfg.targets[t.job].path_prefix,
            kind.path(seconds)
        );
        // A CPU or delta profile answers after its window.
        let wait = self.cfg.seconds.get() + self.cfg.timeout.get();
        let resp = http_fetch::send(self.client.get(&url), wait).await?;
        if !resp.status().is_success() {
            return Err(Failure::new(
                "http_status",
                format!("{url} answered {}", resp.status()),
            ));
        }
        let limit = usize::try_from(self.cfg.body_size_limit.0).unwrap_or(usize::MAX);
        let body = http_fetch::body(
            resp,
            wait,
            limit,
            self.limiter.as_deref().map(|l| (l, self.id.as_str())),
        )
        .await?;
        // Go serves pprof gzipped; other servers may not.
        let raw = if body.starts_with(&[0x1f, 0x8b]) {
            causeway_core::compress::Codec::Gzip
                .decompress(&body, limit)
                .map_err(|e| Failure::new("body_size_limit", format!("{url}: {e}")))?
        } else {
            bytes::Bytes::copy_from_slice(&body)
        };
        let limits = Limits {
            max_samples: self.cfg.max_samples,
            max_depth: self.cfg.max_depth,
        };
        let (mut req, samples) = convert::convert(&raw, self.resource(t), limits).map_err(|e| {
            let reason = match e {
                convert::ConvertError::TooLarge(_) => "too_large",
                _ => "invalid",
            };
            Failure::new(reason, format!("{url}: {e}"))
        })?;
        // OTLP's time is the window's start: a delta's stamp is its end.
        if kind.is_delta() {
            for p in req
                .resource_profiles
                .iter_mut()
                .flat_map(|rp| &mut rp.scope_profiles)
                .flat_map(|sp| &mut sp.profiles)
            {
                p.time_unix_nano = p.time_unix_nano.saturating_sub(p.duration_nano);
            }
        }
        Ok((req.encode_to_vec(), samples))
    }
}

#[async_trait]
impl Receiver for Pprof {
    async fn run(
        self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let mut failures: HashMap<String, crate::polling::Failures<Errors>> = HashMap::new();
        let mut tick = crate::polling::rounds(self.cfg.collection_interval.get());
        let mut file_errors_seen = std::collections::HashSet::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tick.tick() => {}
            }
            let (targets, errors) = self.targets();
            for e in errors {
                if file_errors_seen.insert(e.clone()) {
                    tracing::warn!(receiver = %self.id, error = %e, "A target file could not be read; its targets are skipped.");
                }
            }
            // Every profile of every target at once: a CPU profile takes
            // its window whatever the number of targets.
            let this: &Pprof = &self;
            let jobs = targets.iter().flat_map(|t| {
                this.cfg
                    .profiles
                    .iter()
                    .map(move |&k| async move { (t, k, this.take(t, k).await) })
            });
            let taken = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                r = futures::future::join_all(jobs) => r,
            };
            for (t, kind, r) in taken {
                let key = format!("{} {}", t.address, kind.as_str());
                let f = failures.entry(key.clone()).or_insert_with(|| {
                    crate::polling::Failures::new(
                        &self.telemetry,
                        Errors,
                        (&self.id, &key),
                        "A pprof collection",
                        "The pprof endpoint answers again.",
                    )
                });
                match r {
                    Ok((_, 0)) => f.succeeded(),
                    Ok((bytes, samples)) => {
                        f.succeeded();
                        let batch = Batch::from_encoded(Signal::Profiles, bytes.into(), samples);
                        if !out.send_until_stopped(batch, &shutdown).await {
                            return Ok(());
                        }
                    }
                    Err(e) => f.failed(&e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;

//! The `prometheus` receiver: scrapes Prometheus endpoints (exporters,
//! `/metrics` of servers) in the Collector's shape and maps what it reads to
//! OTLP as the Collector's prometheus receiver does:
//! - `job` → `service.name`, `instance` → `service.instance.id` (with
//!   `server.address`, `server.port`, `url.scheme`) on the resource;
//! - counters → monotonic cumulative sums, gauges and untyped → gauges,
//!   histograms → explicit-bucket histograms, summaries → summaries;
//!   `_created` → the start time;
//! - per target and scrape, `up` (1 or 0), `scrape_duration_seconds` and
//!   `scrape_samples_scraped`;
//! - a series that vanished since the previous scrape (or every series of a
//!   target that went down) gets a point flagged "no recorded value", the
//!   OTLP form of Prometheus' staleness marker.
//!
//! Bodies are read up to `body_size_limit` and at most `sample_limit`
//! samples; a target over either fails its scrape, counted in
//! `causeway_prometheus_scrape_errors_total{job,reason}` and logged once per
//! target and reason.

pub mod config;
pub(crate) mod discovery;
pub mod parse;
pub mod relabel;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, Receiver, ReceiverFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::telemetry::Registry;
use causeway_core::topology::Output;
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, summary_data_point, AggregationTemporality, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio_util::sync::CancellationToken;

use crate::metric_builder::{kv, kv_int};
use config::{PrometheusReceiverConfig, ScrapeConfig};
use parse::{Family, Type};

causeway_core::metrics! {
    /// Failed scrapes of Prometheus targets, by job and reason.
    pub ScrapeErrors: counter = "causeway_prometheus_scrape_errors_total";
}

/// OTLP's "no recorded value" data point flag (a staleness marker).
const NO_RECORDED_VALUE: u32 = 1;

/// Factory of the `prometheus` receiver.
pub struct PrometheusReceiverFactory;

#[async_trait]
impl ReceiverFactory for PrometheusReceiverFactory {
    fn kind(&self) -> &'static str {
        "prometheus"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Metrics)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<PrometheusReceiverConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<PrometheusReceiverConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Receiver>, BoxError> {
        let cfg: PrometheusReceiverConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        causeway_core::tls::install_crypto_provider();
        Ok(Box::new(PrometheusReceiver {
            id: ctx.id.to_string(),
            cfg,
            telemetry: ctx.telemetry,
        }))
    }
}

struct PrometheusReceiver {
    id: String,
    cfg: PrometheusReceiverConfig,
    telemetry: Registry,
}

/// Seconds since the epoch (a `_created` value) in ns, without the
/// rounding error of multiplying the whole float.
fn seconds_ns(v: f64) -> u64 {
    if !v.is_finite() || v <= 0.0 {
        return 0;
    }
    let whole = v.trunc();
    (whole as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(((v - whole) * 1e9).round() as u64)
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[async_trait]
impl Receiver for PrometheusReceiver {
    async fn run(
        self: Box<Self>,
        out: Output,
        shutdown: CancellationToken,
    ) -> Result<(), BoxError> {
        let mut jobs = tokio::task::JoinSet::new();
        for job in &self.cfg.config.scrape_configs {
            let (interval, timeout) = job.timing(&self.cfg.config.global);
            let tls = job.tls_config.clone().unwrap_or_default().client();
            let client = reqwest::Client::builder()
                .use_preconfigured_tls(tls.client_config()?)
                .build()
                .map_err(|e| format!("job {}: cannot build the HTTP client: {e}", job.job_name))?;
            let base = Target {
                receiver: self.id.clone(),
                job: job.clone(),
                spec: discovery::Spec {
                    address: String::new(),
                    scheme: String::new(),
                    path: String::new(),
                    params: Vec::new(),
                    job: String::new(),
                    instance: String::new(),
                    labels: indexmap::IndexMap::new(),
                },
                interval,
                timeout,
                client,
                auth: job.authorization()?,
                rules: std::sync::Arc::new(relabel::compile(&job.metric_relabel_configs)?),
                telemetry: self.telemetry.clone(),
            };
            let target_rules = relabel::compile(&job.relabel_configs)?;
            jobs.spawn(manage(base, target_rules, out.clone(), shutdown.clone()));
        }
        drop(out);
        while jobs.join_next().await.is_some() {}
        Ok(())
    }
}

/// Run a job: scrape each of its targets, and follow its files (checked
/// every second, read again when they change or every `refresh_interval`),
/// starting new targets and stopping those that went away.
async fn manage(base: Target, rules: Vec<relabel::Rule>, out: Output, shutdown: CancellationToken) {
    let refresh = base
        .job
        .file_sd_configs
        .iter()
        .map(|f| f.refresh_interval.get())
        .min();
    let mut tasks = tokio::task::JoinSet::new();
    let mut running: std::collections::HashMap<String, CancellationToken> = Default::default();
    let mut seen_files = None;
    let mut last_read = std::time::Instant::now();
    let mut last_errors: Vec<String> = Vec::new();
    loop {
        let files = discovery::fingerprint(&base.job);
        let due = refresh.is_some_and(|r| last_read.elapsed() >= r);
        if seen_files.as_ref() != Some(&files) || due {
            seen_files = Some(files);
            last_read = std::time::Instant::now();
            let (specs, errors) = discovery::discover(&base.job, &rules);
            if errors != last_errors {
                for e in &errors {
                    tracing::warn!(receiver = %base.receiver, job = %base.job.job_name, error = %e, "Target discovery: a file or target was skipped.");
                }
                last_errors = errors;
            }
            let want: std::collections::HashMap<String, discovery::Spec> =
                specs.into_iter().map(|s| (s.key(), s)).collect();
            running.retain(|k, stop| {
                let keep = want.contains_key(k);
                if !keep {
                    stop.cancel();
                }
                keep
            });
            for (k, spec) in want {
                if running.contains_key(&k) {
                    continue;
                }
                let stop = shutdown.child_token();
                let t = Target {
                    spec,
                    ..base.clone()
                };
                tasks.spawn(t.run(out.clone(), stop.clone(), shutdown.clone()));
                running.insert(k, stop);
            }
        }
        if refresh.is_none() {
            break;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            // Finished target tasks are reaped as they end.
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    drop(out);
    while tasks.join_next().await.is_some() {}
}

#[derive(Clone)]
struct Target {
    receiver: String,
    job: ScrapeConfig,
    spec: discovery::Spec,
    interval: Duration,
    timeout: Duration,
    client: reqwest::Client,
    auth: Option<String>,
    rules: std::sync::Arc<Vec<relabel::Rule>>,
    telemetry: Registry,
}

/// Why a scrape failed.
#[derive(Debug)]
struct Failure {
    reason: &'static str,
    detail: String,
}

impl Target {
    fn url(&self) -> String {
        self.spec.url()
    }

    fn scrape(&self, time_ns: u64, start_ns: u64) -> Scrape<'_> {
        Scrape {
            job: &self.spec.job,
            instance: &self.spec.instance,
            scheme: &self.spec.scheme,
            honor_labels: self.job.honor_labels,
            extra: &self.spec.labels,
            time_ns,
            start_ns,
        }
    }

    /// The body, and whether it is OpenMetrics (by its `Content-Type`).
    async fn fetch(&self) -> Result<(String, bool), Failure> {
        let fail = |reason, detail: String| Failure { reason, detail };
        let mut req = self
            .client
            .get(self.url())
            .header("accept", self.job.accept());
        if let Some(a) = &self.auth {
            req = req.header("authorization", a);
        }
        let resp = req.timeout(self.timeout).send().await.map_err(|e| {
            if e.is_timeout() {
                fail("timeout", e.to_string())
            } else {
                fail("connect", e.to_string())
            }
        })?;
        if !resp.status().is_success() {
            return Err(fail("http_status", format!("answered {}", resp.status())));
        }
        let openmetrics = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().starts_with("application/openmetrics-text"));
        let limit = self.job.body_size_limit.0 as usize;
        let mut body = Vec::new();
        let mut resp = resp;
        loop {
            match tokio::time::timeout(self.timeout, resp.chunk()).await {
                Err(_) => return Err(fail("timeout", "the body did not arrive in time".into())),
                Ok(Err(e)) => return Err(fail("read", e.to_string())),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(c))) => {
                    if body.len() + c.len() > limit {
                        return Err(fail(
                            "body_size_limit",
                            format!("the body is over body_size_limit ({limit} bytes)"),
                        ));
                    }
                    body.extend_from_slice(&c);
                }
            }
        }
        String::from_utf8(body)
            .map(|b| (b, openmetrics))
            .map_err(|_| fail("parse", "the body is not UTF-8".into()))
    }

    /// Scrape until `stop`; a target stopped while the daemon runs (it left
    /// discovery) has its series, `up` included, marked stale.
    async fn run(self, out: Output, stop: CancellationToken, shutdown: CancellationToken) {
        let shutdown_all = shutdown;
        let shutdown = stop;
        let start_ns = now_ns();
        let mut previous: BTreeSet<SeriesKey> = BTreeSet::new();
        let mut reported: HashSet<&'static str> = HashSet::new();
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + self.offset(), self.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => {
                    if !shutdown_all.is_cancelled() {
                        let rm = self.gone(&previous, start_ns);
                        out.send_until_stopped(Batch::from_metrics(vec![rm]), &shutdown_all).await;
                    }
                    return;
                }
                _ = tick.tick() => {}
            }
            let began = std::time::Instant::now();
            let time_ns = now_ns();
            let scraped = self.families().await;
            let scrape = self.scrape(time_ns, start_ns);
            let (rm, now) = match scraped {
                Ok(mut families) => {
                    self.keep(&mut families, &mut reported);
                    let samples = families.iter().map(|f| f.samples.len()).sum::<usize>();
                    scrape.to_metrics(&families, &previous, Some((began.elapsed(), samples)))
                }
                Err(f) => {
                    self.failed(&f, &mut reported);
                    scrape.to_metrics(&[], &previous, None)
                }
            };
            previous = now;
            if !out
                .send_until_stopped(Batch::from_metrics(vec![rm]), &shutdown)
                .await
            {
                return;
            }
        }
    }

    /// Where in the interval the target is scraped: targets spread over
    /// the interval by a hash of their identity, as Prometheus spreads
    /// them, so that a job's scrapes (and their memory) do not all land at
    /// once; a target keeps its offset.
    fn offset(&self) -> Duration {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.spec.key().bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        let n = self.interval.as_nanos().max(1) as u64;
        Duration::from_nanos(h % n)
    }

    /// The target gone from discovery: every series it had, `up` included,
    /// marked stale.
    fn gone(&self, previous: &BTreeSet<SeriesKey>, start_ns: u64) -> ResourceMetrics {
        let scrape = self.scrape(now_ns(), start_ns);
        let (mut rm, _) = scrape.to_metrics(&[], previous, None);
        for m in rm
            .scope_metrics
            .iter_mut()
            .flat_map(|s| s.metrics.iter_mut())
        {
            if m.name == "up" {
                if let Some(metric::Data::Gauge(g)) = &mut m.data {
                    for p in &mut g.data_points {
                        p.flags = NO_RECORDED_VALUE;
                        p.value = Some(number_data_point::Value::AsDouble(0.0));
                    }
                }
            }
        }
        tracing::info!(receiver = %self.receiver, job = %self.job.job_name, target = %self.spec.address, "Target gone from discovery; its series are marked stale.");
        rm
    }

    /// One scrape's families, within the job's sample and label limits.
    async fn families(&self) -> Result<Vec<Family>, Failure> {
        let (text, openmetrics) = self.fetch().await?;
        let families =
            parse::parse(&text, self.job.sample_limit, openmetrics).map_err(|e| Failure {
                reason: if e.message.contains("sample_limit") {
                    "sample_limit"
                } else {
                    "parse"
                },
                detail: e.to_string(),
            })?;
        let most = self.job.label_limit;
        if let Some(s) = families
            .iter()
            .flat_map(|f| &f.samples)
            .find(|s| s.labels.len() > most)
        {
            return Err(Failure {
                reason: "label_limit",
                detail: format!(
                    "{}: a series has {} labels, more than label_limit ({most})",
                    s.name,
                    s.labels.len()
                ),
            });
        }
        let limit = self.job.label_value_length_limit;
        if let Some(s) = families
            .iter()
            .flat_map(|f| &f.samples)
            .find(|s| s.labels.iter().any(|(_, v)| v.len() > limit))
        {
            return Err(Failure {
                reason: "label_value_length_limit",
                detail: format!(
                    "{}: a label value is longer than label_value_length_limit ({limit} bytes)",
                    s.name
                ),
            });
        }
        Ok(families)
    }

    /// A series written twice: the first is kept, as Prometheus does; then
    /// the job's relabelling.
    fn keep(&self, families: &mut Vec<Family>, reported: &mut HashSet<&'static str>) {
        let mut dups = 0u64;
        for f in families.iter_mut() {
            let mut seen = HashSet::new();
            f.samples.retain(|s| {
                let new = seen.insert((s.name.clone(), s.labels.clone()));
                dups += u64::from(!new);
                new
            });
        }
        if dups > 0 {
            self.telemetry
                .counter(
                    ScrapeErrors,
                    &[("job", &self.job.job_name), ("reason", "duplicate_series")],
                )
                .add(dups);
            if reported.insert("duplicate_series") {
                tracing::warn!(receiver = %self.receiver, job = %self.job.job_name, target = %self.spec.address, duplicates = dups, "Series written twice in one scrape; the first of each is kept.");
            }
        }
        if !self.rules.is_empty() {
            for f in families.iter_mut() {
                f.samples = std::mem::take(&mut f.samples)
                    .into_iter()
                    .filter_map(|mut s| {
                        let (name, labels) = relabel::apply(&self.rules, &s.name, &s.labels)?;
                        s.name = name;
                        s.labels = labels;
                        Some(s)
                    })
                    .collect();
            }
            families.retain(|f| !f.samples.is_empty());
        }
    }

    /// A failed scrape counted by its reason, and said once per reason.
    fn failed(&self, f: &Failure, reported: &mut HashSet<&'static str>) {
        self.telemetry
            .counter(
                ScrapeErrors,
                &[("job", &self.job.job_name), ("reason", f.reason)],
            )
            .add(1);
        if reported.insert(f.reason) {
            tracing::warn!(receiver = %self.receiver, job = %self.job.job_name, target = %self.spec.address, reason = f.reason, error = %f.detail, "Scrape failed; up=0, and the next round tries again.");
        }
    }
}

/// A histogram's or summary's parts under one label set: (bucket bound or
/// quantile, value) pairs, the sum and the count.
type Group = (Vec<(f64, f64)>, f64, f64);

/// A series' identity, for staleness: metric name and attributes.
type SeriesKey = (String, Vec<(String, String)>);

/// One scrape of one target, turned into OTLP.
struct Scrape<'a> {
    job: &'a str,
    instance: &'a str,
    scheme: &'a str,
    honor_labels: bool,
    extra: &'a indexmap::IndexMap<String, String>,
    time_ns: u64,
    start_ns: u64,
}

impl Scrape<'_> {
    /// The attributes of a sample: its labels (minus `le`/`quantile` when
    /// `skip`), `job`/`instance` renamed unless `honor_labels`, then the
    /// target's static labels.
    fn attrs(&self, labels: &[(String, String)], skip: &str) -> Vec<(String, String)> {
        let mut out: BTreeMap<String, String> = BTreeMap::new();
        for (k, v) in self.extra {
            out.insert(k.clone(), v.clone());
        }
        for (k, v) in labels {
            if k == skip {
                continue;
            }
            let k = match k.as_str() {
                "job" | "instance" if !self.honor_labels => format!("exported_{k}"),
                _ => k.clone(),
            };
            out.insert(k, v.clone());
        }
        out.into_iter().collect()
    }

    fn number(
        &self,
        attrs: &[(String, String)],
        v: f64,
        start: u64,
        flags: u32,
    ) -> NumberDataPoint {
        NumberDataPoint {
            attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
            start_time_unix_nano: start,
            time_unix_nano: self.time_ns,
            value: Some(number_data_point::Value::AsDouble(if flags == 0 {
                v
            } else {
                0.0
            })),
            flags,
            ..Default::default()
        }
    }

    /// The target's resource metrics, and the series it holds now. With no
    /// families and no `scraped` the target was down: `up` 0 and every
    /// previous series marked stale.
    fn to_metrics(
        &self,
        families: &[Family],
        previous: &BTreeSet<SeriesKey>,
        scraped: Option<(Duration, usize)>,
    ) -> (ResourceMetrics, BTreeSet<SeriesKey>) {
        let mut metrics: Vec<Metric> = Vec::new();
        let mut now: BTreeSet<SeriesKey> = BTreeSet::new();
        for f in families {
            match f.kind {
                Type::Counter | Type::Gauge | Type::Untyped => {
                    self.numbers(f, &mut now, &mut metrics);
                }
                Type::Histogram => metrics.push(self.histogram(f, &mut now)),
                Type::Summary => metrics.push(self.summary(f, &mut now)),
            }
        }
        // Staleness: what was there last time and is not now.
        let mut stale: BTreeMap<&str, Vec<NumberDataPoint>> = BTreeMap::new();
        for (name, attrs) in previous.difference(&now) {
            stale.entry(name.as_str()).or_default().push(self.number(
                attrs,
                0.0,
                self.start_ns,
                NO_RECORDED_VALUE,
            ));
        }
        for (name, data_points) in stale {
            metrics.push(Metric {
                name: name.to_string(),
                data: Some(metric::Data::Gauge(Gauge { data_points })),
                ..Default::default()
            });
        }
        let gauge = |name: &str, v: f64| Metric {
            name: name.to_string(),
            data: Some(metric::Data::Gauge(Gauge {
                data_points: vec![self.number(&[], v, self.start_ns, 0)],
            })),
            ..Default::default()
        };
        metrics.push(gauge("up", if scraped.is_some() { 1.0 } else { 0.0 }));
        if let Some((took, samples)) = scraped {
            metrics.push(gauge("scrape_duration_seconds", took.as_secs_f64()));
            metrics.push(gauge("scrape_samples_scraped", samples as f64));
        }
        let (host, port) = self
            .instance
            .rsplit_once(':')
            .unwrap_or((self.instance, ""));
        let mut resource: Vec<KeyValue> = vec![
            kv("service.name", self.job),
            kv("service.instance.id", self.instance),
            kv("server.address", host),
            kv("url.scheme", self.scheme),
        ];
        if let Ok(p) = port.parse::<i64>() {
            resource.push(kv_int("server.port", p));
        }
        (
            ResourceMetrics {
                resource: Some(Resource {
                    attributes: resource,
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: "causeway.prometheus".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            },
            now,
        )
    }

    /// A counter's, gauge's or untyped family's metrics: one per sample name.
    fn numbers(&self, f: &Family, now: &mut BTreeSet<SeriesKey>, metrics: &mut Vec<Metric>) {
        // `_created` samples are start times, not series.
        let created: BTreeMap<Vec<(String, String)>, u64> = f
            .samples
            .iter()
            .filter(|s| s.name.ends_with("_created"))
            .map(|s| (self.attrs(&s.labels, ""), seconds_ns(s.value)))
            .collect();
        let mut points = Vec::new();
        for s in f.samples.iter().filter(|s| !s.name.ends_with("_created")) {
            let attrs = self.attrs(&s.labels, "");
            let start = created.get(&attrs).copied().unwrap_or(self.start_ns);
            now.insert((s.name.clone(), attrs.clone()));
            points.push((s.name.clone(), self.number(&attrs, s.value, start, 0)));
        }
        // A counter's samples may carry `_total`; one metric per sample name.
        let mut by_name: BTreeMap<String, Vec<NumberDataPoint>> = BTreeMap::new();
        for (n, p) in points {
            by_name.entry(n).or_default().push(p);
        }
        for (name, data_points) in by_name {
            metrics.push(Metric {
                name,
                description: f.help.clone(),
                unit: f.unit.clone(),
                data: Some(if f.kind == Type::Counter {
                    metric::Data::Sum(Sum {
                        data_points,
                        aggregation_temporality: AggregationTemporality::Cumulative as i32,
                        is_monotonic: true,
                    })
                } else {
                    metric::Data::Gauge(Gauge { data_points })
                }),
                ..Default::default()
            });
        }
    }

    /// A histogram family's metric (cumulative buckets made per bucket).
    fn histogram(&self, f: &Family, now: &mut BTreeSet<SeriesKey>) -> Metric {
        let mut groups: BTreeMap<parse::Labels, Group> = BTreeMap::new();
        for s in &f.samples {
            let attrs = self.attrs(&s.labels, "le");
            let g = groups.entry(attrs).or_default();
            if s.name.ends_with("_bucket") {
                let le =
                    s.labels
                        .iter()
                        .find(|(k, _)| k == "le")
                        .and_then(|(_, v)| match v.as_str() {
                            "+Inf" => Some(f64::INFINITY),
                            v => v.parse().ok(),
                        });
                if let Some(le) = le {
                    g.0.push((le, s.value));
                }
            } else if s.name.ends_with("_sum") {
                g.1 = s.value;
            } else if s.name.ends_with("_count") {
                g.2 = s.value;
            }
        }
        let mut data_points = Vec::new();
        for (attrs, (mut buckets, sum, count)) in groups {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            let bounds: Vec<f64> = buckets
                .iter()
                .map(|b| b.0)
                .filter(|b| b.is_finite())
                .collect();
            let mut counts = Vec::with_capacity(bounds.len() + 1);
            let mut prev = 0.0;
            for (le, c) in &buckets {
                if le.is_finite() {
                    counts.push((c - prev).max(0.0) as u64);
                    prev = *c;
                }
            }
            counts.push((count - prev).max(0.0) as u64);
            now.insert((f.name.clone(), attrs.clone()));
            data_points.push(HistogramDataPoint {
                attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
                start_time_unix_nano: self.start_ns,
                time_unix_nano: self.time_ns,
                count: count as u64,
                sum: Some(sum),
                bucket_counts: counts,
                explicit_bounds: bounds,
                ..Default::default()
            });
        }
        Metric {
            name: f.name.clone(),
            description: f.help.clone(),
            unit: f.unit.clone(),
            data: Some(metric::Data::Histogram(Histogram {
                data_points,
                aggregation_temporality: AggregationTemporality::Cumulative as i32,
            })),
            ..Default::default()
        }
    }

    /// A summary family's metric.
    fn summary(&self, f: &Family, now: &mut BTreeSet<SeriesKey>) -> Metric {
        let mut groups: BTreeMap<parse::Labels, Group> = BTreeMap::new();
        for s in &f.samples {
            let attrs = self.attrs(&s.labels, "quantile");
            let g = groups.entry(attrs).or_default();
            if s.name.ends_with("_sum") {
                g.1 = s.value;
            } else if s.name.ends_with("_count") {
                g.2 = s.value;
            } else if let Some(q) = s
                .labels
                .iter()
                .find(|(k, _)| k == "quantile")
                .and_then(|(_, v)| v.parse::<f64>().ok())
            {
                g.0.push((q, s.value));
            }
        }
        let data_points = groups
            .into_iter()
            .map(|(attrs, (qs, sum, count))| {
                now.insert((f.name.clone(), attrs.clone()));
                SummaryDataPoint {
                    attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
                    start_time_unix_nano: self.start_ns,
                    time_unix_nano: self.time_ns,
                    count: count as u64,
                    sum,
                    quantile_values: qs
                        .into_iter()
                        .map(|(quantile, value)| summary_data_point::ValueAtQuantile {
                            quantile,
                            value,
                        })
                        .collect(),
                    ..Default::default()
                }
            })
            .collect();
        Metric {
            name: f.name.clone(),
            description: f.help.clone(),
            unit: f.unit.clone(),
            data: Some(metric::Data::Summary(Summary { data_points })),
            ..Default::default()
        }
    }
}

//! The `correlate` processor: joins kept traces with logs and metrics and
//! annotates each with its root cause.
//!
//! Put the same `correlate` id in the logs and metrics pipelines and in the
//! traces pipeline after `tail_sampling`. Every instance of one id (one per
//! pipeline, as in the Collector) shares one correlation state
//! ([`store::Store`]): in logs pipelines it takes in log records, in metrics
//! pipelines metric points, both passed on unchanged; in traces pipelines it
//! analyses each batch of kept traces (one decision tick of the sampler) —
//! critical path, self times, culprit, the join with the state, and the
//! rules (SQL over Arrow tables, run with DataFusion) — and writes the
//! `rca.*` attributes. The first logs pipeline it is in also emits an RCA
//! log record per analysed trace, and the first metrics pipeline the
//! `causeway.rca.traces` counter.
//!
//! The flow, and the layers (each module imports only those below it):
//! trace → features → findings → verdict → annotations.
//! 1. [`model`]: trace rows, findings, verdicts, series, tables;
//! 2. [`analysis`]: spans to trace rows (critical path, layout, baselines)
//!    and the verdict; [`annotate`]: the verdict on the spans;
//! 3. [`store`]: the state, which knows no source;
//! 4. [`source`]: the evidence sources, each one file, behind one trait
//!    (what each reads of a log record, and the join with the records, too);
//! 5. [`rules`], [`alerts`], [`incidents`], [`page`]: the rule engine, the
//!    alert rules, incidents per route and the page's API, handed the
//!    sources' tables;
//! 6. [`config`] and [`registry`] (the sources, one line each);
//! 7. this module: the processor.

pub mod alerts;
pub mod analysis;
pub mod annotate;
pub mod config;
pub mod incidents;
pub mod model;
pub mod page;
pub mod registry;
pub mod rules;
pub mod source;
pub mod stage;
pub mod store;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, ProcessError, Processor, ProcessorFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use analysis::trace::RouteMap;
use analysis::verdict::Enough;
use config::CorrelateConfig;
use model::cause::Causes;
use model::Rule;
use model::{nanos, now_ns};
use source::Correlation;
use stage::analyse::{Analysed, AnalysisTime};
use stage::RuleErrors;
use stage::Stage;
use store::{Limits, Store};

/// Factory of the `correlate` processor.
pub struct CorrelateFactory;

#[async_trait]
impl ProcessorFactory for CorrelateFactory {
    fn kind(&self) -> &'static str {
        "correlate"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<CorrelateConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<CorrelateConfig>(cfg).map(|_| ())
    }
    /// Kept traces wait for the profile windows that cover them.
    fn late_data_wait(&self, cfg: &serde_yaml::Value) -> Option<(Duration, &'static str)> {
        let c = decode::<CorrelateConfig>(cfg).ok()?;
        Some((c.profiles.wait.get(), "profiles.wait"))
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Processor>, BoxError> {
        let cfg: CorrelateConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        let id = ctx.id.to_string();
        let correlation = ctx.shared.get_or_init(&id, || Correlation {
            store: Store::new(limits(&cfg)),
            sources: registry::sources(&cfg),
        });
        // The `correlated` sampling policy reads it through the narrow interface.
        ctx.shared
            .get_or_init::<crate::trouble::Published>(&id, || Box::new(correlation.clone()));
        // A sampler before it hands on the traces it did not keep.
        if cfg.baseline.unkept_spans_per_second > 0 {
            ctx.shared.get_or_init::<crate::unkept::Published>(&id, || {
                Box::new(stage::unkept::Learn::new(
                    correlation.clone(),
                    RouteMap {
                        fixed: cfg.route_map.clone().into_iter().collect(),
                    },
                    cfg.baseline.unkept_spans_per_second,
                    (&ctx.telemetry, &id),
                ))
            });
        }
        let incidents = cfg.incidents.enabled.then(|| {
            ctx.shared
                .get_or_init(&id, || incidents::Incidents::new(&cfg.incidents))
        });
        let store = &correlation.store;
        store.views.keep(cfg.recent_traces);
        if store.views.claim_ui() {
            ctx.telemetry.add_api_source(Arc::new(page::Api {
                correlation: correlation.clone(),
                incidents: incidents.clone(),
                links: cfg.alerts.links.clone(),
                window_ns: nanos(cfg.window.get()),
            }));
        }
        let emit_logs = cfg.events
            && ctx.pipeline_signals.contains(Signal::Logs)
            && store.outbox.claim_log_events();
        let emit_metrics = cfg.events
            && ctx.pipeline_signals.contains(Signal::Metrics)
            && store.outbox.claim_metric_events();
        if incidents.is_some() && !cfg.events {
            tracing::warn!(processor = %id, "Incidents are written as log records with the RCA records: with `events: false` none is written.");
        }
        // Alerts are evaluated by the instance that emits the RCA log records.
        let alerting =
            (emit_logs && !cfg.alerts.rules.is_empty()).then(|| alerts::Alerting::new(&cfg.alerts));
        if !cfg.alerts.rules.is_empty() && !ctx.pipeline_signals.contains(Signal::Logs) {
            tracing::debug!(processor = %id, "Alert rules are evaluated by this processor's instance in a logs pipeline.");
        }
        let shared = || (id.clone(), ctx.telemetry.clone(), correlation.clone());
        let mut analyse =
            analyse_stage(&cfg, &ctx, &id, &correlation, incidents.clone(), emit_logs);
        // Only the instance in a traces pipeline analyses: its rules are
        // planned now, not when the first kept traces arrive.
        if ctx.pipeline_signals.contains(Signal::Traces) {
            analyse.planner.prepare(&analyse.rules).await;
        }
        let mut stages: Vec<Box<dyn stage::Stage>> = vec![Box::new(stage::emit::Emit::new(
            shared(),
            emit_logs,
            emit_metrics,
        ))];
        if let Some(alerting) = alerting {
            let (id, telemetry, correlation) = shared();
            stages.push(Box::new(stage::alert::Alert {
                id,
                telemetry,
                correlation,
                alerting,
                alert_every: cfg.alerts.interval.get(),
                next_alert: Instant::now(),
                rule_errors_logged: std::collections::HashSet::new(),
            }));
        }
        // Incidents are evaluated by the instance that emits the RCA log
        // records, as the alerts are.
        if let Some(i) = incidents.as_ref().filter(|_| emit_logs) {
            stages.push(Box::new(stage::incident::IncidentTicks::new(
                (id.clone(), ctx.telemetry.clone()),
                i.clone(),
                &cfg.incidents,
                cfg.alerts.links.clone(),
            )));
        }
        Ok(Box::new(Correlate {
            record_incidents: incidents.filter(|_| cfg.incidents.from_records),
            analyse,
            stages,
            correlation,
            id,
        }))
    }
}

/// The stage that analyses kept traces, as `cfg` sets it.
fn analyse_stage(
    cfg: &CorrelateConfig,
    ctx: &BuildContext,
    id: &str,
    correlation: &Arc<Correlation>,
    incidents: Option<Arc<incidents::Incidents>>,
    emit_logs: bool,
) -> stage::analyse::Analyse {
    let (rules, causes) = rules_of(cfg, correlation, ctx, id, emit_logs);
    stage::analyse::Analyse {
        id: id.to_string(),
        telemetry: ctx.telemetry.clone(),
        correlation: correlation.clone(),
        causes,
        lookback_ns: nanos(cfg.metric_lookback.get()),
        lookahead_ns: nanos(cfg.metric_lookahead.get()),
        enough: Enough {
            share: cfg.min_explained_share,
            ms: nanos(cfg.min_explained.get()) as f64 / 1e6,
        },
        route_map: RouteMap {
            fixed: cfg.route_map.clone().into_iter().collect(),
        },
        evidence_wait: cfg.evidence_wait.get(),
        callee_wait: cfg.callee_wait.get(),
        max_held: cfg.max_held_traces,
        held: Vec::new(),
        sample_attrs: cfg
            .incidents
            .attributes
            .iter()
            .filter_map(|a| {
                incidents::sample::Attr::parse(a, |n| correlation.sources.log_column(n))
            })
            .collect(),
        feed_incidents: incidents.filter(|_| !cfg.incidents.from_records),
        rules,
        planner: rules::Planner::new(&correlation.sources.tables()),
        rule_errors_logged: std::collections::HashSet::new(),
        analysed: ctx.telemetry.counter(Analysed, &[("component", id)]),
        analysis_time: ctx.telemetry.counter(AnalysisTime, &[("component", id)]),
    }
}

/// The rules a config runs (the built-ins, unless disabled, and the
/// user's) and what each built-in cause is. Every rule's error counter
/// exists from the start (at 0), so dashboards and alert rules on it see a
/// series before the first failure.
fn rules_of(
    cfg: &CorrelateConfig,
    correlation: &Correlation,
    ctx: &BuildContext,
    id: &str,
    emit_logs: bool,
) -> (Vec<Rule>, Causes) {
    let builtin: Vec<Rule> = rules::builtin_with(&cfg.retry_storm, cfg.min_message_wait)
        .into_iter()
        .chain(correlation.sources.rules())
        .collect();
    // Every built-in cause is described, whichever rules run.
    let causes = Rule::causes(&builtin);
    let rules = rules::assemble(builtin, cfg.builtin_rules, &cfg.rules);
    let names = rules
        .iter()
        .map(|r| r.name.as_str())
        .chain(cfg.alerts.rules.iter().map(|r| r.alert.as_str()));
    if emit_logs || ctx.pipeline_signals.contains(Signal::Traces) {
        for rule in names {
            ctx.telemetry
                .counter(RuleErrors, &[("component", id), ("rule", rule)])
                .add(0);
        }
    }
    (rules, causes)
}

/// The store limits of a config.
pub fn limits(cfg: &CorrelateConfig) -> Limits {
    Limits {
        window_ns: nanos(cfg.window.get()),
        max_log_records: cfg.max_log_records,
        max_log_bytes: usize::try_from(cfg.max_log_bytes.0).unwrap_or(usize::MAX),
        max_analysed: 200_000,
        baseline_window_ns: nanos(cfg.baseline.window.get()),
        baseline_min_samples: cfg.baseline.min_samples,
        baseline_max_operations: cfg.baseline.max_operations,
        max_series: cfg.max_series,
        max_points: 64,
        max_routes: cfg.max_routes,
        max_events: 100_000,
    }
}

struct Correlate {
    id: String,
    /// The incident state fed by `causeway.rca` records (`from_records`).
    record_incidents: Option<Arc<incidents::Incidents>>,
    correlation: Arc<Correlation>,
    /// The analysis (and the traces it holds).
    analyse: stage::analyse::Analyse,
    /// The other stages, run in this order when due.
    stages: Vec<Box<dyn stage::Stage>>,
}

#[async_trait]
impl Processor for Correlate {
    fn accepts(&self) -> SignalSet {
        SignalSet::WITH_PROFILES
    }

    async fn process(
        &mut self,
        mut batch: Batch,
        out: &mut Vec<Batch>,
    ) -> Result<(), ProcessError> {
        match batch.signal() {
            Signal::Logs => match batch.to_logs_request() {
                Ok(req) => {
                    let now = now_ns();
                    self.correlation.add_logs(&req.resource_logs, now);
                    if let Some(i) = &self.record_incidents {
                        i.feed(
                            req.resource_logs
                                .iter()
                                .flat_map(|r| r.scope_logs.iter())
                                .flat_map(|sc| sc.log_records.iter())
                                .filter_map(|r| incidents::sample::from_record(r, now)),
                        );
                    }
                }
                Err(e) => {
                    tracing::warn!(processor = %self.id, error = %e, "Logs not taken into the correlation state; passed on.")
                }
            },
            Signal::Metrics => match batch.to_metrics_request() {
                Ok(req) => self
                    .correlation
                    .add_metrics(&req.resource_metrics, now_ns()),
                Err(e) => {
                    tracing::warn!(processor = %self.id, error = %e, "Metrics not taken into the correlation state; passed on.")
                }
            },
            Signal::Traces => {
                self.analyse
                    .analyse(&mut batch, stage::analyse::Pass::New)
                    .await?;
                if batch.is_empty() {
                    // Every trace of it is held by `evidence_wait`.
                    return Ok(());
                }
            }
            // The samples joined to the traces that follow; the request
            // passes on as it came.
            Signal::Profiles => match batch.to_profiles_request() {
                Ok(Some(req)) => self
                    .correlation
                    .add_profiles(&req, batch.encoded_len(), now_ns()),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(processor = %self.id, error = %e, "Profiles not taken into the correlation state; passed on.")
                }
            },
        }
        out.push(batch);
        Ok(())
    }

    fn next_deadline(&self) -> Option<Instant> {
        std::iter::once(self.analyse.due())
            .chain(self.stages.iter().map(|st| st.due()))
            .flatten()
            .min()
    }

    async fn on_tick(&mut self, now: Instant, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        if self.analyse.due().is_some_and(|d| d <= now) {
            self.analyse.run(now, out).await;
        }
        for st in &mut self.stages {
            if st.due().is_some_and(|d| d <= now) {
                st.run(now, out).await;
            }
        }
        Ok(())
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        self.analyse.flush(out).await;
        for st in &mut self.stages {
            st.flush(out).await;
        }
        Ok(())
    }
}

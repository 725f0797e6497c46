//! The analysis stage: each kept trace joined with its logs and every
//! source, the rules run, the verdict written on it and recorded; a trace
//! whose cause may still arrive held by `evidence_wait` (its schedule:
//! the held traces come due).

use async_trait::async_trait;
use causeway_core::component::ProcessError;
use causeway_core::telemetry::{Counter, Registry};
use causeway_core::Batch;
use opentelemetry_proto::tonic::trace::v1::ResourceSpans;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use super::Stage;
use crate::correlate::analysis;
use crate::correlate::analysis::trace::RouteMap;
use crate::correlate::analysis::verdict::{verdict, Enough};
use crate::correlate::annotate::annotate;
use crate::correlate::incidents;
use crate::correlate::model::cause::{Causes, UNKNOWN};
use crate::correlate::model::now_ns;
use crate::correlate::model::trace::SpanKind;
use crate::correlate::model::trace::{SpanRef, SpanRow, NOT_IN_BATCH};
use crate::correlate::model::{self, Finding, Hex16, RcaEvent, Rule, TraceRow, Verdict};
use crate::correlate::rules;
use crate::correlate::source::{Correlation, Tick};

causeway_core::metrics! {
    /// Kept traces analysed by correlate.
    pub Analysed: counter = "causeway_correlate_analysed_traces_total";
    /// Spans of traces analysed already, passed on without a second analysis.
    pub LateSpans: counter = "causeway_correlate_late_spans_total";
    /// Traces whose join with an evidence source (host, Kafka, RabbitMQ, ...) found nothing while its metrics flow.
    pub JoinMisses: counter = "causeway_correlate_join_misses_total";
    /// Traces held by evidence_wait, or for the profile windows that cover them.
    pub HeldTraces: gauge = "causeway_correlate_held_traces";
    /// Wall time spent analysing kept traces (µs): its rate is the share of a core correlate's analysis takes.
    pub AnalysisTime: counter = "causeway_correlate_analysis_microseconds_total";
}

/// Traces held by `evidence_wait`, analysed again when it has passed; or
/// (`awaiting`) held before their analysis for what is still to come (a
/// profile window a source awaits, an instrumented callee's spans), asked
/// again once a second, analysed when it has come or the bound has passed.
pub(crate) struct Held {
    due: Instant,
    batch: Batch,
    traces: usize,
    ids: std::collections::HashSet<[u8; 16]>,
    since: Instant,
    awaiting: bool,
}

/// How often traces held for awaited evidence are looked at again.
const AWAIT_CHECK: Duration = Duration::from_secs(1);

/// Which analysis of a batch this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// Kept traces as they arrive: they may be held for awaited evidence
    /// or, unexplained, for `evidence_wait`.
    New,
    /// Traces that were held for awaited evidence: they may still be held
    /// for `evidence_wait`.
    Awaited,
    /// Traces held by `evidence_wait`: analysed whatever they find.
    Again,
}

/// The span at `at` of `rs` alone in a resource (its resource and scope kept).
fn one_span(rs: &[ResourceSpans], (ri, si, pi): SpanRef) -> Option<ResourceSpans> {
    let r = rs.get(ri)?;
    let sc = r.scope_spans.get(si)?;
    let span = sc.spans.get(pi)?;
    Some(ResourceSpans {
        resource: r.resource.clone(),
        scope_spans: vec![opentelemetry_proto::tonic::trace::v1::ScopeSpans {
            scope: sc.scope.clone(),
            spans: vec![span.clone()],
            schema_url: sc.schema_url.clone(),
        }],
        schema_url: r.schema_url.clone(),
    })
}

/// Move the spans of the traces in `ids` out of `rs` (resources and scopes
/// kept), dropping what is left empty.
fn split_traces(
    rs: &mut Vec<ResourceSpans>,
    ids: &std::collections::HashSet<[u8; 16]>,
) -> Vec<ResourceSpans> {
    let mut out = Vec::new();
    for r in rs.iter_mut() {
        let mut scopes = Vec::new();
        for sc in r.scope_spans.iter_mut() {
            let (h, keep): (Vec<_>, Vec<_>) =
                std::mem::take(&mut sc.spans).into_iter().partition(|sp| {
                    <[u8; 16]>::try_from(sp.trace_id.as_slice()).is_ok_and(|id| ids.contains(&id))
                });
            sc.spans = keep;
            if !h.is_empty() {
                scopes.push(opentelemetry_proto::tonic::trace::v1::ScopeSpans {
                    scope: sc.scope.clone(),
                    spans: h,
                    schema_url: sc.schema_url.clone(),
                });
            }
        }
        r.scope_spans.retain(|sc| !sc.spans.is_empty());
        if !scopes.is_empty() {
            out.push(ResourceSpans {
                resource: r.resource.clone(),
                scope_spans: scopes,
                schema_url: r.schema_url.clone(),
            });
        }
    }
    rs.retain(|r| !r.scope_spans.is_empty());
    out
}

/// The analysis, with its slice of the config.
pub struct Analyse {
    pub(crate) id: String,
    pub(crate) telemetry: Registry,
    pub(crate) correlation: Arc<Correlation>,
    /// The discriminators read of each analysed trace.
    pub(crate) sample_attrs: Vec<incidents::sample::Attr>,
    /// The incident state fed by the traces analysed here.
    pub(crate) feed_incidents: Option<Arc<incidents::Incidents>>,
    pub(crate) lookback_ns: u64,
    pub(crate) lookahead_ns: u64,
    /// How much of a trace a cause must explain.
    pub(crate) enough: Enough,
    pub(crate) route_map: RouteMap,
    pub(crate) evidence_wait: Duration,
    /// How long a kept trace waits for an instrumented callee's spans.
    pub(crate) callee_wait: Duration,
    pub(crate) max_held: usize,
    pub(crate) held: Vec<Held>,
    pub(crate) rules: Vec<Rule>,
    /// What each cause is.
    pub(crate) causes: Causes,
    /// The rules' plans, made once.
    pub(crate) planner: rules::Planner,
    pub(crate) rule_errors_logged: std::collections::HashSet<String>,
    pub(crate) analysed: Counter,
    /// `causeway_correlate_analysis_microseconds_total`.
    pub(crate) analysis_time: Counter,
}

impl Analyse {
    /// Analyse the kept traces of a batch and annotate them (see [`Pass`]).
    pub async fn analyse(&mut self, batch: &mut Batch, pass: Pass) -> Result<(), ProcessError> {
        let started = std::time::Instant::now();
        let r = self.analyse_spans(batch, pass).await;
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.analysis_time.add(us);
        // Held spans may have left it.
        batch.recount();
        r
    }

    async fn analyse_spans(&mut self, batch: &mut Batch, pass: Pass) -> Result<(), ProcessError> {
        let again = pass == Pass::Again;
        let now = now_ns();
        let rs = match batch.traces_mut() {
            Ok(Some(rs)) => rs,
            Ok(None) => return Ok(()),
            Err(e) => return Err(ProcessError(Box::new(e))),
        };
        if !again && !self.held.is_empty() {
            self.join_held(rs);
        }
        let mut traces =
            analysis::trace::traces(rs, Some(&self.correlation.store.baselines), &self.route_map);
        if pass == Pass::New {
            // Learned as the spans arrive, whether the trace is analysed
            // now or held: a refusal analysed now is judged on the failures
            // of a trace held meanwhile.
            self.correlation.store.learn_calls(&mut traces);
        }
        if pass == Pass::New && self.hold_awaiting(batch, &traces, now) {
            // The rows point into the batch, which the held traces left.
            let Ok(Some(rs)) = batch.traces_mut() else {
                return Ok(());
            };
            traces = analysis::trace::traces(
                rs,
                Some(&self.correlation.store.baselines),
                &self.route_map,
            );
        }
        let Ok(Some(rs)) = batch.traces_mut() else {
            return Ok(());
        };
        if traces.is_empty() {
            return Ok(());
        }
        if !again {
            self.pass_late(rs, &mut traces, now);
            if traces.is_empty() {
                return Ok(());
            }
        }
        let findings = self.findings(&mut traces, now).await;
        let mut hold: std::collections::HashSet<[u8; 16]> = std::collections::HashSet::new();
        let held_now: usize = self.held.iter().map(|h| h.traces).sum();
        let mut fed: Vec<(&str, &str, f64)> = Vec::new();
        let mut samples = Vec::new();
        for t in &traces {
            let v = verdict(
                t,
                findings.get(&t.trace_id),
                &self.enough,
                Some(&self.correlation.store.peers),
                &self.causes,
            );
            // Unexplained: no cause, or only the fallback that gateway logs or
            // metrics arriving later could replace; or a timeout, whose callee
            // was still running when the caller gave up: its spans come later.
            let unexplained = self.causes.get(&v.best.cause).waits;
            if unexplained
                && !again
                && !t.continuation
                && !self.evidence_wait.is_zero()
                && held_now + hold.len() < self.max_held
            {
                hold.insert(t.id);
                continue;
            }
            self.learn(rs, t, now, &mut fed);
            samples.push(self.record(rs, t, &v, now));
        }
        self.correlation.store.baselines.feed(now, fed.into_iter());
        if let Some(i) = &self.feed_incidents {
            i.feed(samples);
        }
        if !hold.is_empty() {
            // The held traces leave this batch for one of their own.
            let held_rs = split_traces(rs, &hold);
            let held = batch.sibling_traces(held_rs);
            self.hold(held, hold);
        }
        Ok(())
    }

    /// Late spans of a trace still held join it: it is analysed whole when
    /// the hold ends (the spans of one trace leave an SDK in several
    /// exports, and a sampler may decide between them).
    fn join_held(&mut self, rs: &mut Vec<ResourceSpans>) {
        let in_batch: std::collections::HashSet<[u8; 16]> = rs
            .iter()
            .flat_map(|r| r.scope_spans.iter().flat_map(|sc| sc.spans.iter()))
            .filter_map(|sp| <[u8; 16]>::try_from(sp.trace_id.as_slice()).ok())
            .collect();
        for h in &mut self.held {
            let mine: std::collections::HashSet<[u8; 16]> =
                h.ids.intersection(&in_batch).copied().collect();
            if mine.is_empty() {
                continue;
            }
            let moved = split_traces(rs, &mine);
            // Late spans joining a held trace are learned as they arrive,
            // like the rest of the batch (see `analyse_spans`).
            let mut late = analysis::trace::traces(&moved, None, &self.route_map);
            self.correlation.store.learn_calls(&mut late);
            if let Ok(Some(held_rs)) = h.batch.traces_mut() {
                held_rs.extend(moved);
            }
            h.batch.recount();
        }
    }

    /// Late spans of a trace analysed already are passed on as they are:
    /// never analysed as a new (fragment of a) trace; except a consumer
    /// span whose message a remembered producer span of the trace sent (the
    /// message's wait is measured from there).
    fn pass_late(&self, rs: &[ResourceSpans], traces: &mut Vec<TraceRow>, now: u64) {
        let ids: Vec<[u8; 16]> = traces.iter().map(|t| t.id).collect();
        // Except a consumer span whose message a remembered producer span
        // of the trace sent: the message's wait is measured from there.
        let late = self.correlation.store.traces.mark(&ids, now);
        let mut n = 0u64;
        let mut continued = Vec::new();
        let mut k = 0;
        traces.retain(|t| {
            let keep = !late[k];
            k += 1;
            if !keep {
                match self.continuation(rs, t) {
                    Some(c) => {
                        let analysed = c.spans.iter().filter(|s| s.at != NOT_IN_BATCH).count();
                        n += t.spans.len().saturating_sub(analysed) as u64;
                        continued.push(c);
                    }
                    None => n += t.spans.len() as u64,
                }
            }
            keep
        });
        traces.extend(continued);
        if n > 0 {
            self.correlation.store.traces.count_late(n);
            self.telemetry
                .counter(LateSpans, &[("component", &self.id)])
                .add(n);
        }
    }

    /// Join the traces with the logs and every source, and run the rules.
    async fn findings(
        &mut self,
        traces: &mut [TraceRow],
        now: u64,
    ) -> HashMap<String, Vec<Finding>> {
        self.correlation
            .sources
            .join_logs(traces, &self.correlation.store);
        self.correlation.store.peers.learn_and_fill(traces);
        // Learned as the spans arrived (`analyse_spans`).
        self.correlation.store.refusals.mark(traces);
        self.correlation.store.retries.mark(traces);
        let tick = Tick {
            store: &self.correlation.store,
            now_ns: now,
            lookback_ns: self.lookback_ns,
            lookahead_ns: self.lookahead_ns,
        };
        let joined = self.correlation.sources.join(&tick, traces);
        for (join, n) in joined.misses {
            self.telemetry
                .counter(JoinMisses, &[("component", &self.id), ("join", join)])
                .add(n);
        }
        for (source, error) in joined.errors {
            if self.rule_errors_logged.insert(format!("source:{source}")) {
                tracing::warn!(processor = %self.id, %source, %error, "An evidence source's join failed; the others still ran.");
            }
        }
        let (findings, errors) = self
            .planner
            .evaluate(&self.rules, traces, joined.tables)
            .await;
        for failed in errors {
            super::rule_failed(
                (&self.telemetry, &self.id),
                &mut self.rule_errors_logged,
                failed,
                "root-cause",
            );
        }
        findings
    }

    /// What an analysed trace's spans teach: the baselines' samples (into
    /// `fed`) and the producer spans whose messages a later consumer may wait for.
    fn learn<'a>(
        &self,
        rs: &[ResourceSpans],
        t: &'a TraceRow,
        now: u64,
        fed: &mut Vec<(&'a str, &'a str, f64)>,
    ) {
        analysis::baseline::samples_of(t, fed);
        for s in t.spans.iter().filter(|s| s.at != NOT_IN_BATCH) {
            if s.kind == SpanKind::Producer
                || (s.destination.is_some()
                    && matches!(s.kind, SpanKind::Client | SpanKind::Internal))
            {
                if let Some(one) = one_span(rs, s.at) {
                    self.correlation
                        .store
                        .traces
                        .remember_producer(t.id, s.span_id, one, now);
                }
            }
        }
    }

    /// Write a trace's verdict: on its spans, in the page's views, as an
    /// RCA event; its incident sample.
    fn record(
        &self,
        rs: &mut [ResourceSpans],
        t: &TraceRow,
        v: &Verdict,
        now: u64,
    ) -> incidents::sample::Sample {
        let sample = incidents::sample::Sample::of(
            rs,
            t,
            now,
            (
                &v.best.cause,
                &v.culprit_service,
                v.culprit_kind.as_str(),
                v.culprit,
            ),
            &self.sample_attrs,
        );
        let mut extra = incidents::sample::record_attributes(&sample);
        extra.extend(crate::correlate::annotate::culprit_attributes(
            t, v.culprit, true,
        ));
        let healthy = v.best.cause == UNKNOWN.name && !sample.failed;
        let evidence = annotate(rs, t, v, self.correlation.sources.log_columns());
        if self.correlation.store.views.keeps() {
            self.correlation.store.views.push(model::view::view(
                t,
                v,
                evidence,
                self.correlation.sources.log_columns(),
            ));
        }
        self.analysed.add(1);
        self.correlation.store.outbox.push(
            RcaEvent {
                time_ns: t.end_ns.max(1),
                trace_id: t.id,
                span_id: t.spans[t.root].span_id.to_be_bytes(),
                cause: v.best.cause.clone(),
                summary: v.best.summary.clone(),
                route: t.route.clone().unwrap_or_default(),
                service: v.culprit_service.clone(),
                culprit_kind: v.culprit_kind,
                culprit_span_id: Hex16::of(t.spans[v.culprit].span_id).as_str().to_string(),
                confidence: v.best.confidence,
                rule: v.best.rule.clone(),
                healthy,
                extra,
            },
            now,
        );
        sample
    }

    /// Hold traces (`held`, a batch of their own that shares the
    /// acknowledgements of the one they left) for `evidence_wait`.
    fn hold(&mut self, held: Batch, hold: std::collections::HashSet<[u8; 16]>) {
        self.push_held(held, hold, self.evidence_wait, false);
    }

    /// Hold the traces `ids` of `batch`, due `after` from now.
    fn push_held(
        &mut self,
        batch: Batch,
        ids: std::collections::HashSet<[u8; 16]>,
        after: Duration,
        awaiting: bool,
    ) {
        let now = Instant::now();
        self.held.push(Held {
            due: now + after,
            batch,
            traces: ids.len(),
            ids,
            since: now,
            awaiting,
        });
        self.set_held_gauge();
    }

    /// Whether a trace, held `waited` so far, awaits what is still to
    /// come: a profile window a source awaits, or the spans of an
    /// instrumented callee (a client span with no server span under it,
    /// whose address a service was seen serving at), within `callee_wait`.
    fn awaits(&self, t: &TraceRow, now: u64, waited: Duration) -> bool {
        if t.continuation {
            return false;
        }
        if self.correlation.sources.awaits(t, now, waited) {
            return true;
        }
        if waited >= self.callee_wait {
            return false;
        }
        let mut answered = vec![false; t.spans.len()];
        for s in t.spans.iter().filter(|s| s.kind == SpanKind::Server) {
            if let Some(p) = s.parent {
                answered[p] = true;
            }
        }
        let peers = &self.correlation.store.peers;
        t.spans.iter().enumerate().any(|(i, s)| {
            s.kind == SpanKind::Client
                && s.at != NOT_IN_BATCH
                && !answered[i]
                && analysis::peers::address_of(s)
                    .and_then(|a| peers.resolve(&a))
                    .is_some_and(|callee| callee != s.service)
        })
    }

    /// Hold, before their analysis, the traces that await what is still
    /// to come ([`Analyse::awaits`]), within `max_held_traces`; they leave
    /// the batch. Returns whether any was held.
    fn hold_awaiting(&mut self, batch: &mut Batch, traces: &[TraceRow], now: u64) -> bool {
        let held_now: usize = self.held.iter().map(|h| h.traces).sum();
        let room = self.max_held.saturating_sub(held_now);
        let mut ids = std::collections::HashSet::new();
        for t in traces.iter() {
            if ids.len() < room && self.awaits(t, now, Duration::ZERO) {
                ids.insert(t.id);
            }
        }
        if ids.is_empty() {
            return false;
        }
        let Ok(Some(rs)) = batch.traces_mut() else {
            return false;
        };
        let held_rs = split_traces(rs, &ids);
        let held = batch.sibling_traces(held_rs);
        self.push_held(held, ids, AWAIT_CHECK, true);
        true
    }

    /// The late spans `t` of an analysed trace as a trace of their own, when
    /// a remembered producer span of the trace sent the message one of them
    /// consumed: that span joins them, so the message's wait counts (a
    /// consumer behind a lagging group runs long after the sampler decided).
    /// The verdict is written on the top span of the late ones.
    fn continuation(&self, rs: &[ResourceSpans], t: &TraceRow) -> Option<TraceRow> {
        let ids: std::collections::HashSet<u64> = t.spans.iter().map(|s| s.span_id).collect();
        let mut producers: Vec<Arc<ResourceSpans>> = Vec::new();
        // The consumers of remembered messages and the late spans below them.
        let mut mine: std::collections::HashSet<u64> = std::collections::HashSet::new();
        for s in t.spans.iter().filter(|s| !ids.contains(&s.parent_id)) {
            if let Some(p) = self.correlation.store.traces.producer(&t.id, s.parent_id) {
                producers.push(p);
                mine.insert(s.span_id);
            }
        }
        if producers.is_empty() {
            return None;
        }
        loop {
            let before = mine.len();
            for s in &t.spans {
                if mine.contains(&s.parent_id) {
                    mine.insert(s.span_id);
                }
            }
            if mine.len() == before {
                break;
            }
        }
        let picked: Vec<&SpanRow> = t
            .spans
            .iter()
            .filter(|s| mine.contains(&s.span_id))
            .collect();
        let mut sub: Vec<ResourceSpans> =
            picked.iter().filter_map(|s| one_span(rs, s.at)).collect();
        if sub.len() != picked.len() {
            return None;
        }
        let real = sub.len();
        sub.extend(producers.iter().map(|p| (**p).clone()));
        let mut c = analysis::trace::traces(
            &sub,
            Some(&self.correlation.store.baselines),
            &self.route_map,
        )
        .into_iter()
        .find(|x| x.id == t.id)?;
        // Back to the batch: the i-th resource of `sub` is the i-th late span.
        for row in &mut c.spans {
            row.at = if row.at.0 < real {
                picked[row.at.0].at
            } else {
                NOT_IN_BATCH
            };
        }
        c.root = (0..c.spans.len())
            .filter(|&i| c.spans[i].at != NOT_IN_BATCH)
            .min_by(|&a, &b| {
                (c.spans[a].depth, c.spans[a].start_ms)
                    .partial_cmp(&(c.spans[b].depth, c.spans[b].start_ms))
                    .unwrap_or(std::cmp::Ordering::Equal)
            })?;
        c.continuation = true;
        Some(c)
    }

    fn set_held_gauge(&self) {
        let n: usize = self.held.iter().map(|h| h.traces).sum();
        self.telemetry
            .gauge(HeldTraces, &[("component", &self.id)])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Whether traces held for what is still to come still await it (their
    /// rows made again: late spans may have joined them).
    fn still_awaits(&self, h: &mut Held, now: Instant, clock: u64) -> bool {
        let Ok(Some(rs)) = h.batch.traces_mut() else {
            return false;
        };
        let waited = now.saturating_duration_since(h.since);
        analysis::trace::traces(rs, None, &self.route_map)
            .iter()
            .any(|t| self.awaits(t, clock, waited))
    }

    /// Analyse again, and pass on, the held traces that are due (all at a
    /// flush); those held for awaited evidence once it has arrived, or
    /// their source's bound has passed.
    async fn release_held(&mut self, now: Instant, all: bool, out: &mut Vec<Batch>) {
        let clock = now_ns();
        let (mut due, mut keep) = (Vec::new(), Vec::new());
        for mut h in std::mem::take(&mut self.held) {
            let leaves =
                all || (h.due <= now && !(h.awaiting && self.still_awaits(&mut h, now, clock)));
            if leaves {
                due.push(h);
            } else {
                keep.push(h);
            }
        }
        for h in keep.iter_mut().filter(|h| h.due <= now) {
            h.due = now + AWAIT_CHECK;
        }
        self.held = keep;
        for mut h in due {
            let pass = if h.awaiting {
                Pass::Awaited
            } else {
                Pass::Again
            };
            if let Err(e) = self.analyse(&mut h.batch, pass).await {
                tracing::warn!(processor = %self.id, error = %e.0, "Held traces could not be analysed again; passed on.");
            }
            out.push(h.batch);
        }
        self.set_held_gauge();
    }
}

#[async_trait]
impl Stage for Analyse {
    fn due(&self) -> Option<Instant> {
        self.held.iter().map(|h| h.due).min()
    }

    async fn run(&mut self, now: Instant, out: &mut Vec<Batch>) {
        self.release_held(now, false, out).await;
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) {
        self.release_held(Instant::now(), true, out).await;
    }
}

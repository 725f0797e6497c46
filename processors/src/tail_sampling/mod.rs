//! The `tail_sampling` processor: holds each trace's spans until a decision,
//! then forwards all of them (late ones too) or drops them.
//!
//! Built to fix what users of the Collector's tailsamplingprocessor report:
//! - memory is bounded by `num_traces` *and* measured bytes (`max_memory`);
//!   at a bound the oldest traces are decided early by the same policies,
//!   never silently discarded;
//! - decisions run on the pipeline's timer branch, which is polled before
//!   input, so ingest cannot starve them; a trace over `max_spans_per_trace`
//!   or `maximum_trace_size_bytes` is decided at once and cannot hold the others up;
//! - spans are never decoded: the few fields the policies read are
//!   extracted, and the span bytes are kept as they arrived and re-wrapped.
//!
//! Kept spans carry `sampling.policy` (and `sampling.adjusted_count` when a
//! probabilistic policy kept them).

pub mod config;
mod extract;
mod policy;
#[cfg(test)]
mod tests;

use async_trait::async_trait;
use causeway_core::component::{BuildContext, ProcessError, Processor, ProcessorFactory};
use causeway_core::config::{decode, ConfigError};
use causeway_core::model::Ack;
use causeway_core::telemetry::{Counter, Gauge, Registry};
use causeway_core::{Batch, BoxError, Signal, SignalSet};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};

/// Maps keyed by trace id. Ids come from clients, so the hash is seeded per
/// process (foldhash), not the identity.
type IdMap<V> = HashMap<[u8; 16], V, foldhash::fast::RandomState>;
use std::sync::Arc;
use tokio::time::Instant;

use config::TailSamplingConfig;
use extract::{AttrRef, AttrValue, Group, Held, Keys};
use policy::{default_route_attributes, Decision, Policy, TraceView};

causeway_core::metrics! {
    /// Traces waiting for a sampling decision.
    pub PendingTraces: gauge = "causeway_tail_sampling_pending_traces";
    /// Spans waiting for a sampling decision.
    pub PendingSpans: gauge = "causeway_tail_sampling_pending_spans";
    /// Bytes held by pending spans, with bookkeeping.
    pub PendingBytes: gauge = "causeway_tail_sampling_pending_bytes";
    /// Traces decided, by outcome.
    pub Traces: counter = "causeway_tail_sampling_traces_total";
    /// Policy evaluations by outcome.
    pub PolicyDecisions: counter = "causeway_tail_sampling_policy_decisions_total";
    /// Spans that arrived after their trace's decision.
    pub LateSpans: counter = "causeway_tail_sampling_late_spans_total";
    /// Traces decided early, by reason.
    pub EarlyDecisions: counter = "causeway_tail_sampling_early_decisions_total";
    /// How late after its deadline the last tick decided (milliseconds).
    pub DecisionLag: gauge = "causeway_tail_sampling_decision_lag_milliseconds";
}

/// Per-span bookkeeping counted in `max_memory` on top of the span's bytes.
const SPAN_OVERHEAD: usize = std::mem::size_of::<Held>() + 16;
/// Per-trace bookkeeping counted in `max_memory`.
const TRACE_OVERHEAD: usize = std::mem::size_of::<Trace>() + std::mem::size_of::<[u8; 16]>() + 64;
/// At most this many distinct attribute values are kept per trace.
const MAX_ATTRS: usize = 64;
/// Kept spans leave in releases at least this far apart: every trace is
/// decided on time and freed at once, but the traces kept within this time
/// leave in one batch, so that what follows (the root-cause rules, ~30 SQL
/// queries whatever the number of traces) runs once for all of them. The
/// Collector's processor decides once a second, so its kept spans wait as
/// long. At 100 ms the rules' fixed cost per run was a sixth of the gateway
/// pipeline's CPU (BENCHMARKS.md, issue #48).
const RELEASE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);
/// Output requests are cut at this size.
const MAX_OUTPUT_BYTES: usize = 2 << 20;

/// Factory of the `tail_sampling` processor.
pub struct TailSamplingFactory;

#[async_trait]
impl ProcessorFactory for TailSamplingFactory {
    fn kind(&self) -> &'static str {
        "tail_sampling"
    }
    fn signals(&self) -> SignalSet {
        SignalSet::only(Signal::Traces)
    }
    fn schema(&self, g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        g.subschema_for::<TailSamplingConfig>()
    }
    fn validate(&self, cfg: &serde_yaml::Value) -> Result<(), Vec<ConfigError>> {
        decode::<TailSamplingConfig>(cfg).map(|_| ())
    }
    async fn build(
        &self,
        ctx: BuildContext,
        cfg: &serde_yaml::Value,
    ) -> Result<Box<dyn Processor>, BoxError> {
        let cfg: TailSamplingConfig = decode(cfg).map_err(|e| format!("{e:?}"))?;
        Ok(Box::new(TailSampling::with_shared(
            cfg,
            &ctx.id.to_string(),
            &ctx.telemetry,
            ctx.shared.clone(),
        )?))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reason {
    Deadline,
    RootReceived,
    NumTraces,
    MaxMemory,
    TooLarge,
    Shutdown,
}

impl Reason {
    fn early_label(self) -> Option<&'static str> {
        match self {
            Reason::NumTraces => Some("num_traces"),
            Reason::MaxMemory => Some("max_memory"),
            Reason::TooLarge => Some("trace_too_large"),
            Reason::Shutdown => Some("shutdown"),
            Reason::Deadline | Reason::RootReceived => None,
        }
    }
}

struct Trace {
    generation: u64,
    deadline: Instant,
    spans: Vec<Held>,
    bytes: usize,
    start_min: u64,
    end_max: u64,
    error: bool,
    ok: bool,
    unset: bool,
    root_seen: bool,
    attrs: Vec<(u16, AttrValue)>,
    route: Option<Box<str>>,
    root_name: Option<Box<str>>,
    /// Acknowledgements of the requests the spans came in (a Kafka
    /// receiver's offsets): released when the trace is decided and, if kept,
    /// delivered. Empty for sources that do not ask.
    acks: Vec<Ack>,
}

impl Trace {
    /// A trace held from its first span, to be decided at `deadline`.
    fn new(generation: u64, deadline: Instant) -> Trace {
        Trace {
            generation,
            deadline,
            spans: Vec::new(),
            bytes: TRACE_OVERHEAD,
            start_min: u64::MAX,
            end_max: 0,
            error: false,
            ok: false,
            unset: false,
            root_seen: false,
            attrs: Vec::new(),
            route: None,
            root_name: None,
            acks: Vec::new(),
        }
    }

    /// Take in a span: its acknowledgements, times, status, attributes and
    /// route (read from the root span, or from the first span that has
    /// one). Returns the bytes it costs.
    fn fold(
        &mut self,
        info: &extract::SpanInfo<'_>,
        group: &Arc<Group>,
        acks: &[Ack],
        route_keys: &[u16],
    ) -> usize {
        let t = self;
        for a in acks {
            if !t.acks.iter().any(|b| b.same(a)) {
                t.acks.push(a.clone());
            }
        }
        let size = info.raw.len() + SPAN_OVERHEAD;
        t.bytes += size;
        t.start_min = t.start_min.min(info.start);
        t.end_max = t.end_max.max(info.end);
        match info.status {
            2 => t.error = true,
            1 => t.ok = true,
            _ => t.unset = true,
        }
        for (k, v) in info.attrs {
            if t.attrs.len() < MAX_ATTRS && !t.attrs.iter().any(|(k2, v2)| k2 == k && v2.is(v)) {
                t.attrs.push((*k, v.owned()));
            }
        }
        for (k, v) in &group.resource_attrs {
            if t.attrs.len() < MAX_ATTRS && !t.attrs.iter().any(|(k2, v2)| k2 == k && v2 == v) {
                t.attrs.push((*k, v.clone()));
            }
        }
        // The route is read from the root span, or from the first span that has one.
        let span_route = || {
            route_keys.iter().find_map(|rk| {
                info.attrs.iter().find_map(|(k, v)| match v {
                    AttrRef::Str(s) if k == rk => Some(String::from_utf8_lossy(s).into()),
                    _ => None,
                })
            })
        };
        if info.is_root {
            t.root_name = Some(String::from_utf8_lossy(info.name).into());
            if let Some(route) = span_route() {
                t.route = Some(route);
            }
        } else if t.route.is_none() {
            t.route = span_route();
        }
        t.spans.push(Held {
            raw: info.raw.into(),
            group: group.clone(),
        });
        size
    }
}

/// The pending traces: an index from trace id to a slot of a slab. The
/// index's buckets stay 20 bytes (not the whole trace), so the table that
/// every span probes is a few times smaller and cheaper to grow; the traces
/// themselves sit densely in the slab, their slots reused.
#[derive(Default)]
struct TraceTable {
    index: IdMap<u32>,
    slab: slab::Slab<Trace>,
}

impl TraceTable {
    fn len(&self) -> usize {
        self.index.len()
    }

    fn get(&self, id: &[u8; 16]) -> Option<&Trace> {
        self.index.get(id).and_then(|&k| self.slab.get(k as usize))
    }

    fn remove(&mut self, id: &[u8; 16]) -> Option<Trace> {
        let k = self.index.remove(id)?;
        self.slab.try_remove(k as usize)
    }
}

/// A bounded set remembering insertion order; the oldest leaves first.
struct Fifo<V> {
    map: IdMap<V>,
    order: VecDeque<[u8; 16]>,
    cap: usize,
}

impl<V> Fifo<V> {
    fn new(cap: usize) -> Self {
        Fifo {
            map: IdMap::default(),
            order: VecDeque::new(),
            cap,
        }
    }
    fn insert(&mut self, id: [u8; 16], v: V) {
        if self.cap == 0 {
            return;
        }
        if self.map.insert(id, v).is_none() {
            self.order.push_back(id);
            while self.order.len() > self.cap {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }
    fn get(&self, id: &[u8; 16]) -> Option<&V> {
        self.map.get(id)
    }
}

struct Metrics {
    pending_traces: Gauge,
    pending_spans: Gauge,
    pending_bytes: Gauge,
    kept: Counter,
    dropped: Counter,
    late_kept: Counter,
    late_dropped: Counter,
    early: HashMap<&'static str, Counter>,
    revoked: Counter,
    lag_ms: Gauge,
    /// Per policy (index as in `policies`, then the errors policy): sampled, not sampled, drop.
    policy: Vec<[Counter; 3]>,
}

/// Label and encoded annotation of each policy that kept a trace.
struct Labels {
    index: HashMap<String, u32>,
    annotations: Vec<Arc<[u8]>>,
}

impl Labels {
    fn get(&mut self, label: &str, adjusted: Option<f64>) -> u32 {
        let key = match adjusted {
            Some(a) => format!("{label}\u{0}{a}"),
            None => label.to_string(),
        };
        if let Some(i) = self.index.get(&key) {
            return *i;
        }
        let mut bytes = extract::string_attribute("sampling.policy", label);
        if let Some(a) = adjusted {
            bytes.extend(extract::double_attribute("sampling.adjusted_count", a));
        }
        let i = self.annotations.len() as u32;
        self.annotations.push(bytes.into());
        self.index.insert(key, i);
        i
    }
}

/// Collects kept spans into output requests of bounded size.
struct Emitter {
    buf: Vec<u8>,
    spans: usize,
    /// Acknowledgements of the spans in `buf`.
    acks: Vec<Ack>,
    out: Vec<Batch>,
}

impl Emitter {
    fn new() -> Self {
        Emitter {
            buf: Vec::new(),
            spans: 0,
            acks: Vec::new(),
            out: Vec::new(),
        }
    }
    fn add(&mut self, spans: &[Held], extra: &[u8], acks: &[Ack]) {
        for a in acks {
            if !self.acks.iter().any(|b| b.same(a)) {
                self.acks.push(a.clone());
            }
        }
        for chunk in spans.chunks(1024) {
            extract::encode(chunk.iter().map(|h| (h, extra)), &mut self.buf);
            self.spans += chunk.len();
            if self.buf.len() >= MAX_OUTPUT_BYTES {
                self.cut();
            }
        }
    }
    fn cut(&mut self) {
        if self.spans > 0 {
            let buf = std::mem::take(&mut self.buf);
            let mut b = Batch::from_encoded(Signal::Traces, buf.into(), self.spans);
            for a in self.acks.drain(..) {
                b = b.with_ack(a);
            }
            self.out.push(b);
            self.spans = 0;
        }
    }
    fn is_empty(&self) -> bool {
        self.spans == 0 && self.out.is_empty()
    }
    fn finish(mut self, out: &mut Vec<Batch>) {
        self.cut();
        out.extend(self.out);
    }
}

/// The processor.
pub struct TailSampling {
    cfg: TailSamplingConfig,
    keys: Keys,
    route_keys: Vec<u16>,
    policies: Vec<Policy>,
    errors: Option<Policy>,
    traces: TraceTable,
    arrival: VecDeque<(Instant, [u8; 16], u64)>,
    roots: VecDeque<(Instant, [u8; 16], u64)>,
    generation: u64,
    bytes: usize,
    spans: usize,
    sampled: Fifo<u32>,
    not_sampled: Fifo<()>,
    labels: Labels,
    epoch: Instant,
    /// Kept spans not released yet, and when they are due.
    outbox: Emitter,
    outbox_due: Option<Instant>,
    release_every: std::time::Duration,
    /// Acknowledgements of decided traces, held one more `decision_wait`
    /// after the decision: the messages that carried a trace stay
    /// uncommitted while its late spans may still come, so that a
    /// partition moving meanwhile gives the new owner the whole trace (a
    /// duplicate decision), never its late part alone (a split trace).
    late_hold: VecDeque<(Instant, Vec<Ack>)>,
    /// The learners of the processors after this one (`crate::unkept`),
    /// and the spans of traces not kept that they asked for, handed on
    /// once a tick.
    learners: Vec<causeway_core::shared::Slot<crate::unkept::Published>>,
    unkept: Vec<u8>,
    metrics: Metrics,
}

impl Metrics {
    /// The sampler's metrics, with a decision counter per policy `names`.
    fn new(telemetry: &Registry, id: &str, names: &[&str]) -> Metrics {
        let decided = |d| telemetry.counter(Traces, &[("component", id), ("decision", d)]);
        let late = |d| telemetry.counter(LateSpans, &[("component", id), ("decision", d)]);
        let policy = |name, d| {
            let labels = [("component", id), ("policy", name), ("decision", d)];
            telemetry.counter(PolicyDecisions, &labels)
        };
        let labels = [("component", id)];
        Metrics {
            pending_traces: telemetry.gauge(PendingTraces, &labels),
            pending_spans: telemetry.gauge(PendingSpans, &labels),
            pending_bytes: telemetry.gauge(PendingBytes, &labels),
            kept: decided("sampled"),
            dropped: decided("not_sampled"),
            late_kept: late("sampled"),
            late_dropped: late("not_sampled"),
            revoked: decided("revoked"),
            early: ["num_traces", "max_memory", "trace_too_large", "shutdown"]
                .into_iter()
                .map(|r| {
                    let labels = [("component", id), ("reason", r)];
                    (r, telemetry.counter(EarlyDecisions, &labels))
                })
                .collect(),
            lag_ms: telemetry.gauge(DecisionLag, &labels),
            policy: names
                .iter()
                .map(|&name| ["sampled", "not_sampled", "dropped"].map(|d| policy(name, d)))
                .collect(),
        }
    }
}

impl TailSampling {
    /// Build from a validated config.
    pub fn new(cfg: TailSamplingConfig, id: &str, telemetry: &Registry) -> Result<Self, String> {
        Self::with_shared(cfg, id, telemetry, causeway_core::shared::Shared::default())
    }

    /// Build from a validated config, with the topology's shared state
    /// (for `correlated` policies).
    pub fn with_shared(
        cfg: TailSamplingConfig,
        id: &str,
        telemetry: &Registry,
        shared: causeway_core::shared::Shared,
    ) -> Result<Self, String> {
        let learners = crate::unkept::after(&shared, id);
        let mut keys = Keys::default();
        keys.shared = shared;
        let policies: Vec<Policy> = cfg
            .policies
            .iter()
            .map(|p| Policy::build(p, &mut keys))
            .collect::<Result<_, _>>()?;
        let route_attributes = keys
            .route_attributes()
            .map(<[String]>::to_vec)
            .unwrap_or_else(default_route_attributes);
        let route_keys = route_attributes.iter().map(|k| keys.add(k)).collect();
        let errors = cfg.always_keep_errors.then(Policy::errors);
        let names: Vec<&str> = policies
            .iter()
            .chain(errors.iter())
            .map(|p| p.name.as_str())
            .collect();
        let metrics = Metrics::new(telemetry, id, &names);
        Ok(TailSampling {
            keys,
            route_keys,
            policies,
            errors,
            traces: TraceTable::default(),
            arrival: VecDeque::new(),
            roots: VecDeque::new(),
            generation: 0,
            bytes: 0,
            spans: 0,
            sampled: Fifo::new(cfg.decision_cache.sampled_cache_size),
            not_sampled: Fifo::new(cfg.decision_cache.non_sampled_cache_size),
            labels: Labels {
                index: HashMap::new(),
                annotations: Vec::new(),
            },
            epoch: Instant::now(),
            outbox: Emitter::new(),
            outbox_due: None,
            release_every: RELEASE_EVERY,
            late_hold: VecDeque::new(),
            learners,
            unkept: Vec::new(),
            metrics,
            cfg,
        })
    }

    fn take_outbox(&mut self) -> Emitter {
        std::mem::replace(&mut self.outbox, Emitter::new())
    }

    /// Send what `emit` holds if the outbox is due (or `all`), else keep it.
    fn release(&mut self, now: Instant, emit: Emitter, all: bool, out: &mut Vec<Batch>) {
        if emit.is_empty() {
            self.outbox = emit;
            self.outbox_due = None;
            return;
        }
        let due = *self.outbox_due.get_or_insert(now + self.release_every);
        if all || now >= due {
            emit.finish(out);
            self.outbox_due = None;
        } else {
            self.outbox = emit;
        }
    }

    /// Keep a trace not kept for the learners after this processor, when
    /// one wants it (its budget).
    fn collect_unkept(&mut self, spans: &[Held]) {
        let wanted = self
            .learners
            .iter()
            .filter_map(|s| s.get())
            .any(|l| l.wants(spans.len()));
        if wanted {
            extract::encode(spans.iter().map(|h| (h, &[][..])), &mut self.unkept);
        }
    }

    /// Hand the traces not kept to the learners (after the decisions that
    /// dropped them: no decision depends on what they learn).
    fn learn_unkept(&mut self) {
        if self.unkept.is_empty() {
            return;
        }
        let request = bytes::Bytes::from(std::mem::take(&mut self.unkept));
        for l in self.learners.iter().filter_map(|s| s.get()) {
            l.learn(request.clone());
        }
    }

    fn update_gauges(&self) {
        self.metrics.pending_traces.set(self.traces.len() as i64);
        self.metrics.pending_spans.set(self.spans as i64);
        self.metrics.pending_bytes.set(self.bytes as i64);
    }

    /// Bytes held, as counted against `max_memory`.
    pub fn pending_bytes(&self) -> usize {
        self.bytes
    }

    fn add_span(
        &mut self,
        group: &Arc<Group>,
        info: extract::SpanInfo<'_>,
        now: Instant,
        late: &mut Vec<(Held, u32)>,
        too_large: &mut Vec<[u8; 16]>,
        acks: &[Ack],
    ) {
        let id = info.trace_id;
        if !acks.is_empty() {
            self.restart_if_revoked(&id);
        }
        // One hash per span: the trace's entry, held or new.
        let TraceTable { index, slab } = &mut self.traces;
        let t = match index.entry(id) {
            Entry::Occupied(o) => &mut slab[*o.get() as usize],
            Entry::Vacant(v) => {
                if let Some(label) = self.sampled.get(&id) {
                    self.metrics.late_kept.add(1);
                    late.push((
                        Held {
                            raw: info.raw.into(),
                            group: group.clone(),
                        },
                        *label,
                    ));
                    return;
                }
                if self.not_sampled.get(&id).is_some() {
                    if info.status == 2 && self.errors.is_some() {
                        // An error that arrived after the decision: keep it and what follows
                        // (the spans already dropped are gone; counted as late).
                        let idx = self.labels.get("errors-late", None);
                        self.not_sampled.map.remove(&id);
                        self.sampled.insert(id, idx);
                        self.metrics.late_kept.add(1);
                        late.push((
                            Held {
                                raw: info.raw.into(),
                                group: group.clone(),
                            },
                            idx,
                        ));
                        return;
                    }
                    self.metrics.late_dropped.add(1);
                    return;
                }
                self.generation += 1;
                let deadline = now + self.cfg.decision_wait.get();
                self.arrival.push_back((deadline, id, self.generation));
                self.bytes += TRACE_OVERHEAD;
                let slot = slab.vacant_entry();
                v.insert(slot.key() as u32);
                slot.insert(Trace::new(self.generation, deadline))
            }
        };
        let size = t.fold(&info, group, acks, &self.route_keys);
        self.bytes += size;
        self.spans += 1;
        if info.is_root && !t.root_seen {
            t.root_seen = true;
            let after = self.cfg.decision_wait_after_root_received.get();
            if !after.is_zero() && now + after < t.deadline {
                t.deadline = now + after;
                self.roots.push_back((now + after, id, t.generation));
            }
        }
        let limit_spans = self.cfg.max_spans_per_trace;
        let limit_bytes = self.cfg.maximum_trace_size_bytes.0 as usize;
        if (limit_spans > 0 && t.spans.len() >= limit_spans)
            || (limit_bytes > 0 && t.bytes >= limit_bytes)
        {
            too_large.push(id);
        }
    }

    /// A span arrives (with a live acknowledgement) for a trace whose
    /// earlier spans' source gave them up: its partition came back to this
    /// instance, which now reads every message of the trace again from the
    /// committed offset. The stale copy is dropped so the trace starts over
    /// (deciding it on the old spans would drop the new ones with it).
    fn restart_if_revoked(&mut self, id: &[u8; 16]) {
        let stale = self
            .traces
            .get(id)
            .is_some_and(|t| t.acks.iter().any(Ack::is_cancelled));
        if stale {
            if let Some(t) = self.traces.remove(id) {
                self.bytes -= t.bytes;
                self.spans -= t.spans.len();
                self.metrics.revoked.add(1);
            }
        }
    }

    /// Decide one pending trace; kept spans go to `emit`.
    fn decide(&mut self, id: [u8; 16], reason: Reason, now: Instant, emit: &mut Emitter) {
        let Some(t) = self.traces.remove(&id) else {
            return;
        };
        self.bytes -= t.bytes;
        self.spans -= t.spans.len();
        if let Some(r) = reason.early_label() {
            if let Some(c) = self.metrics.early.get(r) {
                c.add(1);
            }
        } else {
            let lag = now.saturating_duration_since(t.deadline);
            self.metrics.lag_ms.set(lag.as_millis() as i64);
        }
        if reason == Reason::Shutdown && self.cfg.drop_pending_traces_on_shutdown {
            self.metrics.dropped.add(1);
            return;
        }
        if t.acks.iter().any(Ack::is_cancelled) {
            // Its source gave the spans up (a Kafka partition moved to
            // another instance, which reads them again from the committed
            // offset): no decision here, and none remembered.
            self.metrics.revoked.add(1);
            return;
        }
        let view = TraceView {
            trace_id: &id,
            duration_ns: t.end_max.saturating_sub(t.start_min.min(t.end_max)),
            span_count: t.spans.len(),
            span_bytes: t
                .bytes
                .saturating_sub(TRACE_OVERHEAD + t.spans.len() * SPAN_OVERHEAD),
            error: t.error,
            ok: t.ok,
            unset: t.unset,
            attrs: &t.attrs,
            route: t.route.as_deref().or(t.root_name.as_deref()),
        };
        let now_secs = now.saturating_duration_since(self.epoch).as_secs();
        let kept = self.combine(&view, now_secs);
        match kept {
            Some((label, adjusted)) => {
                let idx = self.labels.get(&label, adjusted);
                emit.add(&t.spans, &self.labels.annotations[idx as usize], &t.acks);
                self.sampled.insert(id, idx);
                self.metrics.kept.add(1);
            }
            _ => {
                self.not_sampled.insert(id, ());
                self.metrics.dropped.add(1);
                self.collect_unkept(&t.spans);
            }
        }
        if !t.acks.is_empty() {
            self.late_hold
                .push_back((now + self.cfg.decision_wait.get(), t.acks));
        }
    }

    /// The policies' decisions combined as the Collector combines them: a
    /// `drop` wins; then an inverted match that turns the trace away; then
    /// the first policy that keeps it; then the first inverted match that
    /// accepts it, when no policy said no. `always_keep_errors` keeps an
    /// errored trace unless a `drop` drops it. Returns the label and
    /// adjusted count of the kept trace.
    fn combine(&mut self, view: &TraceView<'_>, now_secs: u64) -> Option<(String, Option<f64>)> {
        let n = self.policies.len();
        let count = |metrics: &Metrics, i: usize, d: Decision| {
            metrics.policy[i][match d {
                Decision::Sampled | Decision::InvertSampled => 0,
                Decision::NotSampled | Decision::InvertNotSampled => 1,
                Decision::Drop => 2,
            }]
            .add(1);
        };
        let mut forced = None;
        if let Some(p) = self.errors.as_mut() {
            let d = p.evaluate(view, now_secs);
            count(&self.metrics, n, d);
            if d == Decision::Sampled {
                forced = Some((p.label(), p.adjusted_count()));
            }
        }
        let (mut sampled, mut inverted) = (None, None);
        let (mut refused, mut turned_away) = (false, false);
        for (i, p) in self.policies.iter_mut().enumerate() {
            let d = p.evaluate(view, now_secs);
            count(&self.metrics, i, d);
            match d {
                Decision::Drop => return None,
                Decision::Sampled if sampled.is_none() => {
                    sampled = Some((p.label(), p.adjusted_count()));
                    if self.cfg.sample_on_first_match {
                        break;
                    }
                }
                Decision::InvertSampled if inverted.is_none() => {
                    inverted = Some((p.label(), p.adjusted_count()));
                }
                Decision::NotSampled => refused = true,
                Decision::InvertNotSampled => turned_away = true,
                _ => {}
            }
        }
        if forced.is_some() {
            return forced;
        }
        if turned_away {
            return None;
        }
        sampled.or(if refused { None } else { inverted })
    }

    /// Decide the oldest traces while a bound is exceeded.
    fn enforce_bounds(&mut self, now: Instant, emit: &mut Emitter) {
        while self.traces.len() > self.cfg.num_traces || self.bytes > self.cfg.max_memory.0 as usize
        {
            let reason = if self.traces.len() > self.cfg.num_traces {
                Reason::NumTraces
            } else {
                Reason::MaxMemory
            };
            let Some((_, id, generation)) = self.arrival.pop_front() else {
                break;
            };
            if self
                .traces
                .get(&id)
                .is_some_and(|t| t.generation == generation)
            {
                self.decide(id, reason, now, emit);
            }
        }
    }

    fn ingest(
        &mut self,
        buf: &[u8],
        now: Instant,
        emit: &mut Emitter,
        acks: &[Ack],
    ) -> Result<(), ProcessError> {
        let mut late = Vec::new();
        let mut too_large = Vec::new();
        let keys = std::mem::take(&mut self.keys);
        let res = extract::for_each_span(buf, &keys, |group, info| {
            self.add_span(group, info, now, &mut late, &mut too_large, acks)
        });
        self.keys = keys;
        res.map_err(|e| ProcessError(Box::new(e)))?;
        for (held, label) in &late {
            emit.add(
                std::slice::from_ref(held),
                &self.labels.annotations[*label as usize],
                acks,
            );
        }
        for id in too_large {
            self.decide(id, Reason::TooLarge, now, emit);
        }
        self.enforce_bounds(now, emit);
        Ok(())
    }
}

#[async_trait]
impl Processor for TailSampling {
    fn accepts(&self) -> SignalSet {
        SignalSet::only(Signal::Traces)
    }

    async fn process(&mut self, batch: Batch, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        let now = Instant::now();
        let mut emit = self.take_outbox();
        let r = batch
            .encoded_parts()
            .iter()
            .try_for_each(|part| self.ingest(part, now, &mut emit, batch.acks()));
        self.release(now, emit, false, out);
        self.update_gauges();
        r
    }

    fn next_deadline(&self) -> Option<Instant> {
        let a = self.arrival.front().map(|x| x.0);
        let r = self.roots.front().map(|x| x.0);
        // Kept spans waiting in the outbox are due too, and held acknowledgements.
        let l = self.late_hold.front().map(|x| x.0);
        [a, r, self.outbox_due, l].into_iter().flatten().min()
    }

    async fn on_tick(&mut self, now: Instant, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        while self.late_hold.front().is_some_and(|x| x.0 <= now) {
            self.late_hold.pop_front();
        }
        let mut emit = self.take_outbox();
        while let Some(&(deadline, id, generation)) = self.roots.front() {
            if deadline > now {
                break;
            }
            self.roots.pop_front();
            if self
                .traces
                .get(&id)
                .is_some_and(|t| t.generation == generation)
            {
                self.decide(id, Reason::RootReceived, now, &mut emit);
            }
        }
        while let Some(&(deadline, id, generation)) = self.arrival.front() {
            if deadline > now {
                break;
            }
            self.arrival.pop_front();
            if self
                .traces
                .get(&id)
                .is_some_and(|t| t.generation == generation)
            {
                self.decide(id, Reason::Deadline, now, &mut emit);
            }
        }
        self.release(now, emit, false, out);
        self.learn_unkept();
        self.update_gauges();
        Ok(())
    }

    async fn flush(&mut self, out: &mut Vec<Batch>) -> Result<(), ProcessError> {
        let now = Instant::now();
        let mut emit = self.take_outbox();
        let pending: Vec<([u8; 16], u64)> =
            self.arrival.drain(..).map(|(_, id, g)| (id, g)).collect();
        for (id, generation) in pending {
            if self
                .traces
                .get(&id)
                .is_some_and(|t| t.generation == generation)
            {
                self.decide(id, Reason::Shutdown, now, &mut emit);
            }
        }
        self.roots.clear();
        self.late_hold.clear();
        self.release(now, emit, true, out);
        self.learn_unkept();
        self.update_gauges();
        Ok(())
    }
}

/// A fuzz entry point: a W3C `tracestate` value through the parser the
/// `trace_state` policy reads it with (the keys of the OpenTelemetry
/// sampling member and two vendors'). Must return, never panic; every
/// value it yields is a slice of the input after its key's `=`.
pub fn fuzz_trace_state(data: &[u8]) {
    let mut keys = Keys::default();
    for k in ["ot", "congo", "rojo"] {
        keys.add_trace_state(k);
    }
    let mut out = Vec::new();
    keys.trace_state(data, &mut out);
    for (_, v) in &out {
        if let AttrRef::Str(s) = v {
            let inside = data.as_ptr_range();
            assert!(
                s.is_empty() || (inside.contains(&s.as_ptr()) && s.len() <= data.len()),
                "a value outside its input"
            );
        }
    }
}

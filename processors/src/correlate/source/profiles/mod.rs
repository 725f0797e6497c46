//! The profiles source: the code that held a span's time, from the OTLP
//! profiles the pipeline carries (the `pprof` receiver's, an SDK's, the
//! eBPF profiler's).
//!
//! - state: a window of samples (its stack interned, counted in bytes, the
//!   oldest first out; a request over `max_profile_bytes` not kept, logged
//!   and counted by the source), each with its
//!   service, time, kind (`cpu`, `lock` — the holder's side, `lock_wait`
//!   — Go's block profile's waiter, `wall`, `alloc`) and the span its
//!   link names;
//! - join, best first, per critical span: (a) `span`: the samples linked to
//!   the very span; (b) `local_root`: the samples linked to the span that
//!   began its process's part of the trace, weighed by the share of that
//!   process's critical self time the span holds; (c) `thread`: the
//!   samples of its thread (`thread.name` on the span and the sample, as the
//!   Java agent and async-profiler write it) within its time, less its
//!   children's on that thread; (d) `time`: the samples of its service
//!   whose time overlaps the span, weighed by the overlap.
//!   The join used is said (`rca.code.join`);
//! - what it adds to a trace: for each critical span with samples, the
//!   frames that hold its time — the function of the service's code whose
//!   samples hold the most (each sample counted for its innermost frame that
//!   is not the runtime's or the standard library's), its location, its
//!   share, the profile's kind, the join, and the top five by that, by the
//!   leaf and inclusive — as evidence of that span; the verdict shows the
//!   culprit's (`rca.code.*`);
//! - rules' table `code`, declared in [`CODE`].

use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::profiles::v1development::ProfilesDictionary;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use super::capabilities;
use super::TakesProfiles;
use super::{Join, Source, Tick};
use crate::correlate::analysis::baseline::SLOW_FACTOR;
use crate::correlate::model::cause::{self, Cause};
use crate::correlate::model::table::{About, Column, Declared, Purpose, Traced, V};
use crate::correlate::model::trace::NOT_IN_BATCH;
use crate::correlate::model::{Hex16, Joined, Rule, SpanFacts, TraceRow};

mod decode;
mod fold;
mod join;
mod rules;

use crate::correlate::model::trace::SpanKind;
use decode::*;
use fold::*;
use join::*;

/// `processors.correlate.profiles`: the window of profile samples.
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProfilesConfig {
    /// Bytes of samples (stacks interned) held at most, the oldest out
    /// first.
    #[serde(default = "max_bytes")]
    pub max_bytes: causeway_core::config::ByteSize,
    /// A profiles request larger than this on the wire is not taken into
    /// the state (counted; it passes on).
    #[serde(default = "max_profile_bytes")]
    pub max_profile_bytes: causeway_core::config::ByteSize,
    /// A function holding at least this share of a span's samples is the
    /// code at fault.
    #[serde(default = "half")]
    pub min_share: f64,
    /// The profile's time joined to a span must cover at least this share
    /// of its self time for the code to explain it.
    #[serde(default = "half")]
    pub min_coverage: f64,
    /// Time on CPU a span's samples must add up to before its code is a
    /// cause, and the least self time a span is shown its code for
    /// (50ms: five samples at Go's 100 Hz).
    #[serde(default = "min_time")]
    pub min_time: causeway_core::config::Duration,
    /// A kept trace with a span of a service whose profiles flow (one
    /// arrived within this long) waits until the profile windows covering
    /// its spans have arrived, at most this long after it reached
    /// `correlate` (30s: the `pprof` receiver's 15 s window and
    /// 10 s timeout, and room to deliver). `0s`: no trace waits; a profile
    /// that arrives after its trace was analysed then explains nothing.
    #[serde(default = "wait")]
    pub wait: causeway_core::config::Duration,
}

fn wait() -> causeway_core::config::Duration {
    causeway_core::config::Duration::secs(30)
}

fn half() -> f64 {
    0.5
}
fn min_time() -> causeway_core::config::Duration {
    causeway_core::config::Duration::millis(50)
}

fn max_bytes() -> causeway_core::config::ByteSize {
    causeway_core::config::ByteSize(64 << 20)
}
fn max_profile_bytes() -> causeway_core::config::ByteSize {
    causeway_core::config::ByteSize(8 << 20)
}

impl Default for ProfilesConfig {
    fn default() -> Self {
        ProfilesConfig {
            max_bytes: max_bytes(),
            max_profile_bytes: max_profile_bytes(),
            min_share: half(),
            min_coverage: half(),
            min_time: min_time(),
            wait: wait(),
        }
    }
}

impl causeway_core::config::Validate for ProfilesConfig {
    fn validate(&self) -> Vec<causeway_core::config::ConfigError> {
        let mut e = Vec::new();
        if self.max_bytes.0 < 1 << 20 {
            e.push(causeway_core::config::ConfigError::new(
                "max_bytes",
                "must be at least 1MiB",
            ));
        }
        if self.max_profile_bytes.0 == 0 || self.max_profile_bytes.0 > self.max_bytes.0 {
            e.push(causeway_core::config::ConfigError::new(
                "max_profile_bytes",
                "must be more than 0 and at most max_bytes",
            ));
        }
        for (path, v) in [
            ("min_share", self.min_share),
            ("min_coverage", self.min_coverage),
        ] {
            if !(v > 0.0 && v <= 1.0) {
                e.push(causeway_core::config::ConfigError::new(
                    path,
                    "must be more than 0 and at most 1",
                ));
            }
        }
        e
    }
}

/// The service's own code spent the span's time on CPU, in one function.
pub static CPU_HOTSPOT: Cause = Cause::new("cpu_hotspot", cause::code);

/// The span waited, off CPU, for a lock of its own process that another
/// function held.
pub static LOCK_CONTENTION: Cause = Cause::new("lock_contention", cause::code);

/// The span's time went to allocating and collecting garbage, driven by
/// one function's allocations.
pub static GC_PRESSURE: Cause = Cause::new("gc_pressure", cause::code);

/// A lock explains a span's time off CPU when the contentions of its
/// window waited on average at least this share of that time (a wait is
/// anywhere from nothing to the hold: the mean is half the longest).
const LOCK_WAIT_SHARE: f64 = 0.25;

#[derive(Default)]
struct Window {
    samples: VecDeque<(Sample, usize)>,
    bytes: usize,
    refused: u64,
    /// Per service, where its latest profile window ends (ns): what has
    /// arrived of it (at most [`MAX_FLOWS`] services, the stalest out).
    latest: HashMap<Arc<str>, u64>,
}

/// Services whose latest profile window is remembered, at most.
const MAX_FLOWS: usize = 10_000;

/// The source.
pub struct Profiles {
    window: Mutex<Window>,
    /// Bytes the window holds at most.
    max_bytes: usize,
    /// A profile request larger than this is refused (bytes).
    max_profile_bytes: usize,
    /// Samples older than this go (ns).
    keep_ns: u64,
    /// The thresholds of its rules.
    min_share: f64,
    min_coverage: f64,
    min_time_ms: f64,
    /// How long a kept trace may wait for its profile windows (ns; 0: not at all).
    wait_ns: u64,
}

impl std::fmt::Debug for Profiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Profiles")
    }
}

impl Profiles {
    /// The source of `cfg`, keeping samples `keep_ns`.
    pub fn new(cfg: &ProfilesConfig, keep_ns: u64) -> Self {
        Profiles {
            window: Mutex::new(Window::default()),
            max_bytes: usize::try_from(cfg.max_bytes.0).unwrap_or(usize::MAX),
            max_profile_bytes: usize::try_from(cfg.max_profile_bytes.0).unwrap_or(usize::MAX),
            keep_ns,
            min_share: cfg.min_share,
            min_coverage: cfg.min_coverage,
            min_time_ms: cfg.min_time.get().as_secs_f64() * 1e3,
            wait_ns: u64::try_from(cfg.wait.get().as_nanos()).unwrap_or(u64::MAX),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        crate::correlate::model::lock(&self.window)
    }

    /// Profiles refused for their size, so far.
    pub fn refused(&self) -> u64 {
        self.lock().refused
    }
}

/// A critical span of a trace and what one kind of profile tells of it.
struct CodeRow {
    span_id: Hex16,
    told: Told,
}

fn first(r: &Traced<CodeRow>) -> Option<(&Arc<Frame>, f64)> {
    r.row.told.code.first()
}

/// The rules' table of what the profiles tell of the trace's critical spans.
static CODE: Declared<Traced<CodeRow>> = Declared {
    name: "code",
    doc: "What one kind of profile tells of a critical span of the trace: the function of the \
          service's code whose samples hold the most of the span's time. One row per span and \
          kind with samples.",
    purpose: Purpose::Rules,
    columns: &[
        Column::<Traced<CodeRow>>::text("trace_id", |r, _| V::S(Some(&r.trace_id))).doc("The trace."),
        Column::<Traced<CodeRow>>::text("span_id", |r, _| V::Id(r.row.span_id)).doc("The span."),
        Column::<Traced<CodeRow>>::text("kind", |r, _| V::S(Some(r.row.told.kind.as_str())))
            .doc("The kind of profile: `cpu`, `lock`, `lock_wait`, `wall` or `alloc`."),
        Column::<Traced<CodeRow>>::text("join", |r, _| V::S(Some(r.row.told.join.as_str())))
            .doc("How the samples joined the span: `span` (its id), `local_root` (its local root's), `thread` or `time`."),
        Column::<Traced<CodeRow>>::text("function", |r, _| V::S(first(r).map(|(f, _)| &*f.function)))
            .doc("The function whose samples hold the most (innermost frame of the service's code)."),
        Column::<Traced<CodeRow>>::text("location", |r, _| V::S(first(r).map(|(f, _)| &*f.location)))
            .doc("Its file and line."),
        Column::<Traced<CodeRow>>::float("share", |r, _| V::F(first(r).map(|(_, x)| round3(x))))
            .doc("Its share of the span's samples (0..1)."),
        Column::<Traced<CodeRow>>::int("samples", |r, _| V::I(Some(r.row.told.code.samples as i64)))
            .doc("The samples joined."),
        Column::<Traced<CodeRow>>::float("time_ms", |r, _| V::F(Some(r.row.told.time_ms())))
            .doc("The time they stand for (ms; 0 for `alloc`)."),
        Column::<Traced<CodeRow>>::float("gc_share", |r, _| {
            let c = &r.row.told.code;
            V::F(Some(c.gc / c.total.max(f64::MIN_POSITIVE)))
        })
        .doc("The share of the samples in the runtime's garbage collector."),
        Column::<Traced<CodeRow>>::float("mean_wait_ms", |r, _| V::F(r.row.told.code.mean_wait_ms()))
            .doc("The mean wait of a contention charged to the function (ms; lock profiles)."),
        Column::<Traced<CodeRow>>::float("delay_ms", |r, _| V::F(r.row.told.code.delay_ms()))
            .doc("The delay of all those contentions (ms)."),
    ],
};

/// The confidence of a code cause before the operation has a baseline
/// (its evidence then is absolute: the share of the span's own time its
/// profile covers, the length of its wait), as a factor.
const UNLEARNED: f64 = 0.75;

impl Profiles {
    /// Of what the profiles tell of span `i`, the kind that explains its
    /// self time (the time the span spent on CPU covers it; else the
    /// contentions of a lock while it was off CPU; else its wall-clock
    /// samples), if any.
    fn explaining<'a>(&self, t: &TraceRow, i: usize, told: &'a [Told]) -> Option<&'a Told> {
        let s = &t.spans[i];
        // Less time than a cause must hold is not worth the code's story.
        if s.self_ms < self.min_time_ms {
            return None;
        }
        let of = |k: ProfileKind| told.iter().find(|x| x.kind == k);
        let covers = |x: &&Told| x.time_ms() >= self.min_coverage * s.self_ms;
        // Or the work grew (the rule's second reading).
        let grew = |x: &&Told| {
            s.baseline_ms
                .is_some_and(|b| x.time_ms() >= (SLOW_FACTOR * b).max(self.min_time_ms))
        };
        let cpu =
            of(ProfileKind::Cpu).filter(|x| x.join != JoinedBy::Time || s.kind != SpanKind::Client);
        if let Some(c) = cpu.filter(|x| covers(x) || grew(x)) {
            return Some(c);
        }
        // Its time off CPU, when the runtime says which samples are its.
        let on = cpu
            .filter(|x| x.join != JoinedBy::Time)
            .map_or(0.0, Told::time_ms);
        let off = (s.self_ms - on).max(0.0);
        // Off CPU for the collector, not a lock (see the rule).
        let collecting = cpu
            .filter(|x| x.join != JoinedBy::Time)
            .is_some_and(|x| x.code.gc >= 0.5 * x.code.total);
        // The holder's contentions, or the waiter's (the same waits, seen
        // from the side that waited), can hold the wait.
        let waited = of(ProfileKind::LockWait).is_some_and(|w| w.code.holds_wait(off));
        if let Some(l) =
            of(ProfileKind::Lock).filter(|l| !collecting && (l.code.holds_wait(off) || waited))
        {
            return Some(l);
        }
        of(ProfileKind::Wall).filter(covers)
    }
}

/// The function that waited for the lock (Go's block profile), beside the
/// one that held it, in a lock's evidence: `waiter_function`,
/// `waiter_location`, `waiter_delay_ms` (`rca.code.waiter_*`).
fn waited_in(v: &mut serde_json::Value, told: &[Told]) {
    let Some(w) = told.iter().find(|x| x.kind == ProfileKind::LockWait) else {
        return;
    };
    let Some((f, _)) = w.code.first() else {
        return;
    };
    v["waiter_function"] = serde_json::json!(&*f.function);
    v["waiter_location"] = serde_json::json!(&*f.location);
    if let Some(d) = w.code.delay_ms() {
        v["waiter_delay_ms"] = serde_json::json!(round3(d));
    }
}

/// Where only the waiter's side of a lock is profiled (Go's block profile
/// without its mutex profile), the function that waited is the lock's
/// code, as the holder's would be.
fn waiters_alone_are_the_lock(told: &mut Vec<Told>) {
    if told.iter().any(|x| x.kind == ProfileKind::Lock) {
        return;
    }
    if let Some(w) = told.iter().find(|x| x.kind == ProfileKind::LockWait) {
        let lock = Told {
            kind: ProfileKind::Lock,
            join: w.join,
            code: w.code.clone(),
            weight: w.weight,
        };
        told.push(lock);
    }
}

impl Source for Profiles {
    fn name(&self) -> &'static str {
        "profiles"
    }

    fn tables(&self) -> Vec<About> {
        vec![CODE.about()]
    }

    fn join(&self, _tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        let mut rows = Vec::new();
        let w = self.lock();
        if w.samples.is_empty() {
            return Ok(Join {
                tables: vec![CODE.batch(&rows)?],
                misses: 0,
            });
        }
        let index = Index::of(&w.samples, traces);
        let mut misses = 0;
        for t in traces.iter_mut() {
            let mut any = false;
            let processes = Processes::of(t);
            for i in 0..t.spans.len() {
                if !t.spans[i].critical {
                    continue;
                }
                let mut told: Vec<Told> = ProfileKind::ALL
                    .into_iter()
                    .filter_map(|k| span_code(t, i, &processes, &index, k))
                    .collect();
                waiters_alone_are_the_lock(&mut told);
                if told.is_empty() {
                    continue;
                }
                any = true;
                let span_id = Hex16::of(t.spans[i].span_id);
                for x in told.iter().filter(|x| x.code.first().is_some()) {
                    let trace_id = t.trace_id.clone();
                    let row = CodeRow {
                        span_id,
                        told: x.clone(),
                    };
                    rows.push(Traced { trace_id, row });
                }
                // The code is evidence of the span only where it explains
                // its time.
                if let Some(x) = self.explaining(t, i, &told) {
                    if let Some(mut v) = x.json(true) {
                        if x.kind == ProfileKind::Lock {
                            waited_in(&mut v.values, &told);
                        }
                        t.joined.push(Joined::Span(i, "code", Arc::new(v)));
                    }
                }
            }
            if !any {
                misses += 1;
            }
        }
        Ok(Join {
            tables: vec![CODE.batch(&rows)?],
            misses,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        self.builtin_rules()
    }

    capabilities!(profiles);
}

impl TakesProfiles for Profiles {
    fn take_profiles(&self, req: &ExportProfilesServiceRequest, encoded_len: usize, now_ns: u64) {
        let mut w = self.lock();
        if encoded_len > self.max_profile_bytes {
            w.refused += 1;
            tracing::warn!(bytes = encoded_len, max_profile_bytes = self.max_profile_bytes, "A profile over max_profile_bytes was not taken into the correlation state; it passes on.");
            return;
        }
        // Where each service's profiles have got to: the end of each
        // profile's time range, with samples or not (an idle JVM's
        // recording has none), else of its samples.
        let mut ended = window_ends(req);
        for (s, bytes) in samples(req) {
            w.bytes += bytes;
            ended.push((s.service.clone(), s.to_ns));
            w.samples.push_back((s, bytes));
        }
        for (service, to_ns) in ended {
            let end = w.latest.entry(service).or_insert(0);
            *end = (*end).max(to_ns);
        }
        if w.latest.len() > MAX_FLOWS {
            let stale = now_ns.saturating_sub(self.wait_ns);
            w.latest.retain(|_, end| *end >= stale);
            if w.latest.len() > MAX_FLOWS {
                w.latest.clear();
            }
        }
        // The oldest first: over the bytes, or older than the window.
        let oldest = now_ns.saturating_sub(self.keep_ns);
        while w.bytes > self.max_bytes || w.samples.front().is_some_and(|(s, _)| s.to_ns < oldest) {
            let Some((_, b)) = w.samples.pop_front() else {
                break;
            };
            w.bytes -= b;
        }
    }

    /// A span that could be given a code cause (its self time at least
    /// `min_time`, not a call), of a service whose profiles flow (a window
    /// ended within `wait` of now), ended after that service's latest
    /// window: the window that covers it has not arrived yet.
    fn awaits(&self, t: &TraceRow, now_ns: u64, waited: std::time::Duration) -> bool {
        let waited = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        if waited >= self.wait_ns {
            return false;
        }
        let w = self.lock();
        if w.latest.is_empty() {
            return false;
        }
        let base = t.start_unix_ms * 1e6;
        t.spans.iter().any(|s| {
            s.at != NOT_IN_BATCH
                && s.self_ms >= self.min_time_ms
                && !matches!(s.kind, SpanKind::Client | SpanKind::Producer)
                && w.latest.get(&s.service).is_some_and(|&end| {
                    let span_end = (base + s.end_ms * 1e6).max(0.0) as u64;
                    end < span_end && now_ns.saturating_sub(end) <= self.wait_ns
                })
        })
    }
}

/// The fuzz target's body: bytes as an OTLP profiles request, through the
/// receivers' check (`wire::scan`), then, if it passes, into the source and
/// joined with a trace of a span of every link it holds (and one of each
/// service, by time). Nothing may panic; the window stays within its bytes.
#[doc(hidden)]
pub fn fuzz_otlp_profiles(data: &[u8]) {
    use causeway_core::model::{Batch, Signal};
    let Ok(scan) = causeway_core::wire::scan(Signal::Profiles, data) else {
        return;
    };
    let batch = Batch::from_encoded(
        Signal::Profiles,
        bytes::Bytes::copy_from_slice(data),
        scan.items,
    );
    let Ok(Some(req)) = batch.to_profiles_request() else {
        panic!("a request the check passed does not decode");
    };
    let cfg = ProfilesConfig {
        max_bytes: causeway_core::config::ByteSize(1 << 20),
        ..Default::default()
    };
    let p = Profiles::new(&cfg, u64::MAX);
    p.take_profiles(&req, data.len(), 0);
    assert!(p.lock().bytes <= 1 << 20, "the window is over its bytes");
    let rs = fuzz_trace(&req);
    let mut traces = crate::correlate::analysis::trace::traces(&rs, None, &Default::default());
    let store = crate::correlate::store::Store::new(crate::correlate::store::Limits {
        window_ns: 600_000_000_000,
        max_log_records: 1,
        max_series: 1,
        max_points: 1,
        max_routes: 1,
        max_events: 1,
        max_log_bytes: 1,
        max_analysed: 1,
        baseline_window_ns: 1_000_000_000,
        baseline_min_samples: 1,
        baseline_max_operations: 1,
    });
    let tick = Tick {
        store: &store,
        now_ns: 0,
        lookback_ns: 0,
        lookahead_ns: 0,
    };
    if let Err(e) = p.join(&tick, &mut traces) {
        panic!("the code table could not be made: {e}");
    }
    for t in &traces {
        for j in &t.joined {
            if let Joined::Span(_, _, v) = j {
                let share = v["share"].as_f64().unwrap_or(0.0);
                assert!((0.0..=1.0 + 1e-9).contains(&share), "a share of {share}");
            }
        }
    }
}

/// The fuzz target's trace: a server span per link (the spans the samples
/// name), under a root of each service.
fn fuzz_trace(
    req: &ExportProfilesServiceRequest,
) -> Vec<opentelemetry_proto::tonic::trace::v1::ResourceSpans> {
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    let links: Vec<[u8; 8]> = req
        .dictionary
        .iter()
        .flat_map(|d| &d.link_table)
        .filter_map(|l| <[u8; 8]>::try_from(l.span_id.as_slice()).ok())
        .take(64)
        .collect();
    req.resource_profiles
        .iter()
        .take(8)
        .enumerate()
        .map(|(k, rp)| {
            let service = service_of(rp);
            let from = rp
                .scope_profiles
                .iter()
                .flat_map(|sp| &sp.profiles)
                .map(|p| p.time_unix_nano)
                .min()
                .unwrap_or(0);
            let span = |id: Vec<u8>, parent: Vec<u8>| Span {
                trace_id: vec![7; 16],
                span_id: id,
                parent_span_id: parent,
                name: "op".into(),
                kind: 2,
                start_time_unix_nano: from,
                end_time_unix_nano: from.saturating_add(1_000_000_000),
                ..Default::default()
            };
            let root = vec![0xee, k as u8, 0, 0, 0, 0, 0, 1];
            let mut spans = vec![span(root.clone(), Vec::new())];
            spans.extend(links.iter().map(|l| span(l.to_vec(), root.clone())));
            ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![causeway_core::model::text_attribute(
                        "service.name",
                        &service,
                    )],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::is_runtime;

    #[test]
    fn the_window_is_bounded_in_bytes_and_time_and_a_large_profile_is_refused() {
        use super::{Profiles, TakesProfiles};
        use prost::Message;
        let req = crate::correlate::tests::cpu_profile_of_api(Some(1));
        let len = req.encoded_len();
        let base = 1_001_000_000_000;
        // Room for about two requests' samples.
        let cfg = |max_bytes, max_profile_bytes| super::ProfilesConfig {
            max_bytes: causeway_core::config::ByteSize(max_bytes),
            max_profile_bytes: causeway_core::config::ByteSize(max_profile_bytes),
            ..Default::default()
        };
        let p = Profiles::new(&cfg(700, 10_000), 600_000_000_000);
        for k in 0..5 {
            p.take_profiles(&req, len, base + k);
        }
        let w = p.lock();
        assert!(w.bytes <= 700 && !w.samples.is_empty(), "{}", w.bytes);
        assert_eq!(w.bytes, w.samples.iter().map(|(_, b)| b).sum::<usize>());
        drop(w);
        // Ten minutes on, the samples are out of the window.
        p.take_profiles(
            &super::ExportProfilesServiceRequest::default(),
            0,
            base + 700_000_000_000,
        );
        assert!(p.lock().samples.is_empty());
        // A request over max_profile_bytes is counted, not kept.
        let p = Profiles::new(&cfg(1 << 20, len as u64 - 1), 600_000_000_000);
        p.take_profiles(&req, len, base);
        assert!(p.lock().samples.is_empty());
        assert_eq!(p.refused(), 1);
    }

    #[test]
    fn counts_of_samples_are_as_many_periods_and_a_cpu_profile_is_counted_once() {
        use opentelemetry_proto::tonic::profiles::v1development::ValueType;
        let with_period = |ty: &'static str, unit: &'static str, period: (&str, &str, i64)| {
            let mut req = crate::correlate::tests::profiles_of(
                "ledger",
                &[(ty, unit, vec![(vec!["Ledger.parseAst"], 30, None)])],
            );
            let d = req.dictionary.as_mut().unwrap();
            let mut idx = |x: &str| {
                d.string_table.push(x.to_string());
                d.string_table.len() as i32 - 1
            };
            let pt = ValueType {
                type_strindex: idx(period.0),
                unit_strindex: idx(period.1),
            };
            let p = &mut req.resource_profiles[0].scope_profiles[0].profiles[0];
            p.period_type = Some(pt);
            p.period = period.2;
            req
        };
        let total = |req: &super::ExportProfilesServiceRequest| -> Vec<(&'static str, f64)> {
            super::samples(req)
                .iter()
                .map(|(x, _)| (x.kind.as_str(), x.value))
                .collect()
        };
        // async-profiler's OTLP: 30 samples of perf_events every 10 ms.
        let req = with_period("perf_events", "count", ("perf_events", "ns", 10_000_000));
        assert_eq!(total(&req), vec![("cpu", 300_000_000.0)]);
        // The eBPF profiler's: samples of cpu every 50 ms.
        let req = with_period("samples", "count", ("cpu", "nanoseconds", 50_000_000));
        assert_eq!(total(&req), vec![("cpu", 1_500_000_000.0)]);
        // A count with no period in time says no time.
        let req = with_period("perf_events", "count", ("perf_events", "count", 1));
        assert!(total(&req).is_empty());
        // Go's CPU profile: samples/count beside cpu/nanoseconds, counted once.
        let mut req = with_period("samples", "count", ("cpu", "nanoseconds", 10_000_000));
        let go = crate::correlate::tests::profiles_of(
            "ledger",
            &[(
                "cpu",
                "nanoseconds",
                vec![(vec!["Ledger.parseAst"], 300_000_000, None)],
            )],
        );
        let mut cpu = go.resource_profiles[0].scope_profiles[0].profiles[0].clone();
        let d = req.dictionary.as_mut().unwrap();
        d.string_table.push("cpu".into());
        d.string_table.push("nanoseconds".into());
        let n = d.string_table.len() as i32;
        cpu.sample_type = Some(ValueType {
            type_strindex: n - 2,
            unit_strindex: n - 1,
        });
        cpu.samples[0].stack_index = 1;
        req.resource_profiles[0].scope_profiles[0]
            .profiles
            .push(cpu);
        assert_eq!(total(&req), vec![("cpu", 300_000_000.0)]);
    }

    #[test]
    fn timestamped_samples_are_events_and_name_their_thread() {
        use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};
        use opentelemetry_proto::tonic::profiles::v1development::KeyValueAndUnit;
        let mut req = crate::correlate::tests::profiles_of(
            "ledger",
            &[(
                "locks",
                "nanoseconds",
                vec![(vec!["Ledger.lookupSymbols"], 0, None)],
            )],
        );
        let d = req.dictionary.as_mut().unwrap();
        d.string_table.push("thread.name".into());
        let key = d.string_table.len() as i32 - 1;
        let thread = |name: &str| KeyValueAndUnit {
            key_strindex: key,
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(name.into())),
            }),
            ..Default::default()
        };
        d.attribute_table = vec![
            Default::default(),
            thread("[pool-1-thread-3 tid=4242]"),
            thread("[tid=77]"),
        ];
        let base = req.resource_profiles[0].scope_profiles[0].profiles[0].samples[0].clone();
        let with = |attr: i32, values: Vec<i64>, at: Vec<u64>| {
            let mut x = base.clone();
            x.attribute_indices = vec![attr];
            x.values = values;
            x.timestamps_unix_nano = at;
            x
        };
        let p = &mut req.resource_profiles[0].scope_profiles[0].profiles[0];
        p.samples = vec![
            // One value per event: two waits, each a contention.
            with(
                1,
                vec![200, 300],
                vec![1_000_000_000_010, 1_000_000_000_020],
            ),
            // No values: a count of one per event (no thread name: a
            // thread async-profiler knows only by its id).
            with(2, vec![], vec![1_000_000_000_030]),
            // Values and timestamps of different lengths: not taken.
            with(1, vec![1, 2, 3], vec![1_000_000_000_040, 1_000_000_000_050]),
        ];
        let got: Vec<(u64, f64, f64, Option<String>)> = super::samples(&req)
            .into_iter()
            .map(|(s, _)| {
                assert_eq!((s.kind.as_str(), s.from_ns), ("lock", s.to_ns));
                (
                    s.from_ns,
                    s.value,
                    s.count,
                    s.thread.as_deref().map(String::from),
                )
            })
            .collect();
        let t3 = Some("pool-1-thread-3".to_string());
        assert_eq!(
            got,
            vec![
                (1_000_000_000_010, 200.0, 1.0, t3.clone()),
                (1_000_000_000_020, 300.0, 1.0, t3),
                (1_000_000_000_030, 1.0, 1.0, None),
            ]
        );
    }

    #[test]
    fn a_jvms_native_frames_are_not_its_code_and_a_native_services_are() {
        let own = |frames: Vec<&'static str>| {
            let mut req = crate::correlate::tests::profiles_of(
                "svc",
                &[("cpu", "nanoseconds", vec![(frames, 10, None)])],
            );
            // No files, as async-profiler and an unsymbolized native
            // profile name them.
            for f in &mut req.dictionary.as_mut().unwrap().function_table {
                f.filename_strindex = 0;
            }
            let (s, _) = super::samples(&req).into_iter().next().unwrap();
            s.stack
                .iter()
                .find(|f| !f.runtime)
                .map(|f| f.function.to_string())
        };
        assert_eq!(
            own(vec![
                "__futex_abstimed_wait_common",
                "os::PlatformEvent::park",
                "java.lang.Thread.sleep",
                "Ledger.loadReport",
                "java.lang.Thread.run",
                "start_thread",
            ]),
            Some("Ledger.loadReport".into())
        );
        assert_eq!(
            own(vec![
                "parse_document",
                "shop::handler::serve",
                "start_thread"
            ]),
            Some("parse_document".into())
        );
    }

    #[test]
    fn the_runtime_and_standard_library_are_not_the_services_code() {
        for (f, l) in [
            (
                "crypto/internal/fips140/sha256.(*Digest).Sum",
                "/usr/local/go/src/crypto/internal/fips140/sha256/sha256.go:203",
            ),
            (
                "runtime.mallocgc",
                "/usr/local/go/src/runtime/malloc.go:1100",
            ),
            (
                "sync.(*Mutex).Unlock",
                "/usr/local/go/src/sync/mutex.go:223",
            ),
            (
                "runtime.memmove",
                "/usr/lib/go/src/runtime/memmove_amd64.s:104",
            ),
            (
                "crypto/internal/fips140/sha256.blockSHANI",
                "/usr/lib/go/src/crypto/internal/fips140/sha256/sha256block_amd64.s:10",
            ),
            ("java.util.HashMap.get", "HashMap.java:556"),
            (
                "json.decoder.JSONDecoder.decode",
                "/usr/lib/python3.11/json/decoder.py:337",
            ),
            (
                "processTicksAndRejections",
                "node:internal/process/task_queues:95",
            ),
        ] {
            assert!(is_runtime(f, l), "{f}");
        }
        for (f, l) in [
            ("main.parseAST", "/src/checkout/parse.go:42"),
            (
                "github.com/acme/shop/pricing.(*Engine).Quote",
                "/src/pricing/engine.go:88",
            ),
            ("com.acme.shop.Orders.place", "Orders.java:40"),
            ("handle", "/srv/app/site-packages/shop/views.py:12"),
        ] {
            assert!(!is_runtime(f, l), "{f}");
        }
    }

    /// The flame graph is written once as JSON, `{c, f, v}` from the root,
    /// the heaviest callee first and under 1% merged away; the evidence
    /// carries it beside the values, which alone become attributes.
    #[test]
    fn the_flame_graph_is_written_once_and_only_the_evidence_carries_it() {
        use super::{Arc, Code, Frame, JoinedBy, ProfileKind, Sample, Told};
        let frame = |name: &str| {
            Arc::new(Frame {
                function: name.into(),
                location: format!("{name}.go:1").into(),
                runtime: false,
                gc: false,
            })
        };
        let (root, hot, cold, tiny) = (frame("main"), frame("hot"), frame("cold"), frame("tiny"));
        let sample = |stack: Vec<Arc<Frame>>, value: f64| Sample {
            service: "api".into(),
            from_ns: 0,
            to_ns: 1,
            span: Some(1),
            thread: None,
            kind: ProfileKind::Cpu,
            value,
            count: 0.0,
            stack: stack.into(),
        };
        let mut code = Code::default();
        code.add(&sample(vec![cold.clone(), root.clone()], 30.0), 1.0);
        code.add(&sample(vec![hot.clone(), root.clone()], 69.5), 1.0);
        code.add(&sample(vec![tiny, root], 0.5), 1.0);
        let told = Told {
            kind: ProfileKind::Cpu,
            join: JoinedBy::Span,
            code: Arc::new(code),
            weight: 1.0,
        };
        let facts = told.json(true).expect("the code names a function");
        assert_eq!(facts["function"], "hot");
        let flame = &facts.written[0];
        assert_eq!(flame.0, "flame");
        assert_eq!(
            flame.1.json().expect("a flame graph").get(),
            r#"{"c":[{"c":[{"c":[],"f":"hot","v":0.695},{"c":[],"f":"cold","v":0.3}],"f":"main","v":1.0}],"f":"all","v":1.0}"#
        );
        // In the evidence, one object: the values and the flame graph.
        let ev: serde_json::Value =
            serde_json::from_str(&serde_json::to_string(&facts).expect("serializes"))
                .expect("JSON");
        assert_eq!(ev["function"], "hot");
        assert_eq!(ev["flame"]["c"][0]["c"][1]["f"], "cold");
        // Without `explains`, no flame graph is made.
        assert!(told.json(false).expect("values").written.is_empty());
    }
}

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
//! - rules' table `code`: `trace_id, span_id, kind, join, function,
//!   location, share, samples, time_ms, gc_share, mean_wait_ms, delay_ms`.

use datafusion::arrow::datatypes::SchemaRef;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::profiles::v1development::ProfilesDictionary;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use super::{Join, Source, Tick};
use crate::correlate::analysis::baseline::SLOW_FACTOR;
use crate::correlate::model::attributes;
use crate::correlate::model::cause::{self, Cause};
use crate::correlate::model::table::{f64f, i64f, schema, utf8, Cols, V};
use crate::correlate::model::trace::NOT_IN_BATCH;
use crate::correlate::model::{Hex16, Joined, Rule, TraceRow};

/// `processors.correlate.profiles`: the window of profile samples.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfilesConfig {
    /// Bytes of samples (stacks interned) held at most, the oldest out
    /// first (default 64MiB).
    #[serde(default = "max_bytes")]
    pub max_bytes: causeway_core::config::ByteSize,
    /// A profiles request larger than this on the wire is not taken into
    /// the state (counted; it passes on) (default 8MiB).
    #[serde(default = "max_profile_bytes")]
    pub max_profile_bytes: causeway_core::config::ByteSize,
    /// A function holding at least this share of a span's samples is the
    /// code at fault (default 0.5).
    #[serde(default = "half")]
    pub min_share: f64,
    /// The profile's time joined to a span must cover at least this share
    /// of its self time for the code to explain it (default 0.5).
    #[serde(default = "half")]
    pub min_coverage: f64,
    /// Time on CPU a span's samples must add up to before its code is a
    /// cause, and the least self time a span is shown its code for
    /// (default 50ms: five samples at Go's 100 Hz).
    #[serde(default = "min_time")]
    pub min_time: causeway_core::config::Duration,
    /// A kept trace with a span of a service whose profiles flow (one
    /// arrived within this long) waits until the profile windows covering
    /// its spans have arrived, at most this long after it reached
    /// `correlate` (default 30s: the `pprof` receiver's 15 s window and
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

/// One frame: its function and where (`file:line`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Frame {
    function: Arc<str>,
    location: Arc<str>,
    /// The runtime's or the standard library's ([`is_runtime`]).
    runtime: bool,
    /// The runtime allocating or collecting garbage ([`is_gc`]).
    gc: bool,
}

/// One sample kept.
#[derive(Debug)]
struct Sample {
    service: Arc<str>,
    /// The interval it covers (ns): its timestamp, or its profile's span.
    from_ns: u64,
    to_ns: u64,
    /// The span its link names.
    span: Option<u64>,
    /// The thread it was taken on (`thread.name`), when the profiler names
    /// it.
    thread: Option<Arc<str>>,
    kind: &'static str,
    value: f64,
    /// The events it counts (a lock's contentions), when its profile has
    /// them.
    count: f64,
    /// Leaf first.
    stack: Frames,
}

/// What a sample costs in the window besides its stack, shared (bytes).
const SAMPLE_BYTES: usize = 80;

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

/// The kind of time a sample type measures, or `None` for what is no time
/// of a request (a count of samples, goroutines, in-use memory).
/// Go's pprof (`cpu`, `delay`), async-profiler's OTLP (its engine's name:
/// `perf_events`, `itimer`, `ctimer`, `wall`, `lock_tracer`,
/// `alloc_tracer`). A count of `samples` is of its period type's kind (the
/// eBPF profiler's: `samples`/`count` every period of `cpu`/`nanoseconds`)
/// where its scope has no profile of that kind already (Go's CPU profile
/// has both).
fn kind(type_: &str, unit: &str) -> Option<&'static str> {
    match (type_, unit) {
        ("cpu", _) | ("perf_events", _) | ("itimer", _) | ("ctimer", _) | ("cpu-clock", _) => {
            Some("cpu")
        }
        ("delay", _)
        | ("lock", _)
        | ("locks", _)
        | ("lock_tracer", _)
        | ("native_lock", _)
        | ("contentions", "nanoseconds") => Some("lock"),
        ("wall", _) | ("off_cpu", _) => Some("wall"),
        ("alloc_space", _) | ("alloc_objects", _) | ("alloc", _) | ("alloc_tracer", _) => {
            Some("alloc")
        }
        _ => None,
    }
}

/// What one unit of a profile's values is in nanoseconds (bytes, for an
/// allocation's): a count of samples is as many periods of its period type
/// (async-profiler's OTLP without `total`: `count` of `perf_events` every
/// 10 ms); `None` when a count has no period in time to scale it by.
fn scale(
    s: &[String],
    p: &opentelemetry_proto::tonic::profiles::v1development::Profile,
    kind: &str,
    unit: &str,
) -> Option<f64> {
    match unit {
        "count" | "samples" => match p.period_type {
            Some(pt)
                if p.period > 0
                    && matches!(text(s, pt.unit_strindex), "ns" | "nanoseconds" | "bytes") =>
            {
                Some(p.period as f64)
            }
            _ if kind == "alloc" => Some(1.0),
            _ => None,
        },
        "ms" | "milliseconds" => Some(1e6),
        "us" | "microseconds" => Some(1e3),
        _ => Some(1.0),
    }
}

fn text(strings: &[String], i: i32) -> &str {
    usize::try_from(i)
        .ok()
        .and_then(|i| strings.get(i))
        .map_or("", String::as_str)
}

fn get<T>(v: &[T], i: i32) -> Option<&T> {
    usize::try_from(i).ok().and_then(|i| v.get(i))
}

/// A stack's frames, leaf first.
type Frames = Arc<[Arc<Frame>]>;

/// A stack of a request's dictionary as frames, each frame interned in
/// `frames`; and the bytes its new frames take.
fn intern_stack(
    d: &ProfilesDictionary,
    stack_index: i32,
    frames: &mut HashMap<(i32, i64, bool), Arc<Frame>>,
) -> (Frames, usize) {
    let s = &d.string_table;
    let mut bytes = 0;
    let locations = get(&d.stack_table, stack_index)
        .map(|st| st.location_indices.as_slice())
        .unwrap_or_default();
    // A location's lines: its inlined functions first, its caller last.
    let lines = || {
        locations
            .iter()
            .filter_map(|&l| get(&d.location_table, l))
            .flat_map(|loc| &loc.lines)
            .filter_map(|line| Some((line, get(&d.function_table, line.function_index)?)))
    };
    let named = |f: &opentelemetry_proto::tonic::profiles::v1development::Function| {
        (text(s, f.name_strindex), text(s, f.filename_strindex))
    };
    // A JVM's stack (async-profiler's, with the JVM's and the kernel's
    // frames under the Java ones): its native frames are not the service's.
    let jvm = lines().any(|(_, f)| {
        let (function, file) = named(f);
        is_java(function, file)
    });
    let mut out = Vec::with_capacity(locations.len());
    for (line, f) in lines() {
        let frame = frames
            .entry((line.function_index, line.line, jvm))
            .or_insert_with(|| {
                let (function, file) = named(f);
                let location = if line.line > 0 && file.is_empty() {
                    // async-profiler's converter names no file.
                    format!("line {}", line.line)
                } else if line.line > 0 {
                    format!("{file}:{}", line.line)
                } else {
                    file.to_string()
                };
                bytes += 48 + location.len() + function.len();
                let runtime = is_runtime(function, &location) || (jvm && is_native(function, file));
                Arc::new(Frame {
                    function: Arc::from(function),
                    location: Arc::from(location),
                    runtime,
                    gc: is_gc(function),
                })
            });
        out.push(frame.clone());
    }
    bytes += 8 * out.len();
    (Arc::from(out), bytes)
}

/// Whether a frame is a Java method as a JVM profiler names it
/// (`Ledger.parseAst`, `java.lang.Thread.run`, `java/lang/Thread.run`):
/// a class and a method, its file a JVM language's or none.
fn is_java(function: &str, file: &str) -> bool {
    (file.is_empty()
        || [".java", ".kt", ".scala", ".groovy"]
            .iter()
            .any(|x| file.ends_with(x)))
        && function.contains('.')
        && !function.contains("::")
        && !function.contains(' ')
}

/// Whether a frame without a file is native code (C, C++, the kernel:
/// `__futex_abstimed_wait_common`, `os::PlatformEvent::park`).
fn is_native(function: &str, file: &str) -> bool {
    file.is_empty() && (!function.contains('.') || function.contains("::"))
}

/// The thread a sample's attributes name (`thread.name`), as a span's
/// `thread.name` names it: async-profiler writes `[name tid=N]`.
fn thread_of(d: &ProfilesDictionary, attrs: &[i32]) -> Option<Arc<str>> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let s = &d.string_table;
    let name = attrs.iter().find_map(|&i| {
        let a = get(&d.attribute_table, i).filter(|_| i > 0)?;
        if text(s, a.key_strindex) != "thread.name" {
            return None;
        }
        match a.value.as_ref()?.value.as_ref()? {
            Value::StringValue(x) => Some(x.as_str()),
            _ => None,
        }
    })?;
    let name = name
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .and_then(|x| x.rsplit_once("tid="))
        .filter(|(n, tid)| {
            (n.is_empty() || n.ends_with(' '))
                && !tid.is_empty()
                && tid.bytes().all(|b| b.is_ascii_digit())
        })
        .map_or(name, |(n, _)| n.trim_end());
    (!name.is_empty()).then(|| Arc::from(name))
}

/// A resource's `service.name`.
fn service_of(
    rp: &opentelemetry_proto::tonic::profiles::v1development::ResourceProfiles,
) -> Arc<str> {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    rp.resource
        .iter()
        .flat_map(|r| &r.attributes)
        .find(|kv| kv.key == "service.name")
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::StringValue(x) => Some(Arc::from(x.as_str())),
            _ => None,
        })
        .unwrap_or_else(|| Arc::from(""))
}

/// Each profile's service and the end of its time range (ns), samples or
/// none: what a service has covered, though nothing ran in it. A
/// converter that stamps each event (async-profiler's `JfrToOtlp`) keeps
/// the recording's range on the profile, so an idle stretch still
/// counts as covered.
fn window_ends(req: &ExportProfilesServiceRequest) -> Vec<(Arc<str>, u64)> {
    let mut out = Vec::new();
    for rp in &req.resource_profiles {
        let service = service_of(rp);
        for p in rp.scope_profiles.iter().flat_map(|sp| &sp.profiles) {
            if p.time_unix_nano > 0 {
                out.push((
                    service.clone(),
                    p.time_unix_nano.saturating_add(p.duration_nano),
                ));
            }
        }
    }
    out
}

/// The samples of a request (already checked at the door: every index
/// within its table), each with the bytes it adds to the window (a
/// stack's own bytes counted with its first sample).
fn samples(req: &ExportProfilesServiceRequest) -> Vec<(Sample, usize)> {
    let Some(d) = &req.dictionary else {
        return Vec::new();
    };
    let s = &d.string_table;
    let mut stacks: HashMap<i32, Frames> = HashMap::new();
    let mut frames = HashMap::new();
    let mut out = Vec::new();
    for rp in &req.resource_profiles {
        let service = service_of(rp);
        for sp in &rp.scope_profiles {
            // A lock profile's contentions, by stack: its delay samples' counts.
            let mut counts: HashMap<i32, f64> = HashMap::new();
            for p in &sp.profiles {
                let Some(t) = p.sample_type else { continue };
                if text(s, t.type_strindex) == "contentions" {
                    for x in &p.samples {
                        *counts.entry(x.stack_index).or_default() +=
                            x.values.first().copied().unwrap_or(0) as f64;
                    }
                }
            }
            let direct: HashSet<&str> = sp
                .profiles
                .iter()
                .filter_map(|p| p.sample_type)
                .filter_map(|t| kind(text(s, t.type_strindex), text(s, t.unit_strindex)))
                .collect();
            for p in &sp.profiles {
                let Some(t) = p.sample_type else { continue };
                let unit = text(s, t.unit_strindex);
                let of_period = || {
                    let pt = p.period_type?;
                    kind(text(s, pt.type_strindex), text(s, pt.unit_strindex))
                        .filter(|k| !direct.contains(k))
                };
                let Some(kind) = kind(text(s, t.type_strindex), unit).or_else(|| {
                    (text(s, t.type_strindex) == "samples")
                        .then(of_period)
                        .flatten()
                }) else {
                    continue;
                };
                let Some(scale) = scale(s, p, kind, unit) else {
                    continue;
                };
                let (from, to) = (
                    p.time_unix_nano,
                    p.time_unix_nano.saturating_add(p.duration_nano),
                );
                for x in &p.samples {
                    let mut bytes = SAMPLE_BYTES;
                    let stack = match stacks.get(&x.stack_index) {
                        Some(st) => st.clone(),
                        None => {
                            let (st, b) = intern_stack(d, x.stack_index, &mut frames);
                            bytes += b;
                            stacks.insert(x.stack_index, st.clone());
                            st
                        }
                    };
                    let span = get(&d.link_table, x.link_index)
                        .filter(|_| x.link_index > 0)
                        .and_then(|l| <[u8; 8]>::try_from(l.span_id.as_slice()).ok())
                        .map(u64::from_be_bytes)
                        .filter(|&id| id != 0);
                    let thread = thread_of(d, &x.attribute_indices);
                    // Go's block profile beside its mutex profile: the
                    // waiter's side of a lock apart, a channel's wait out.
                    let kind = match kind {
                        "lock" => match lock_side(&stack) {
                            Some(side) => side,
                            None => continue,
                        },
                        k => k,
                    };
                    // A stack's contentions go with its first delay sample.
                    let counted = if is_lock(kind) {
                        counts.remove(&x.stack_index)
                    } else {
                        None
                    };
                    let sample = |from_ns, to_ns, value: f64, count| Sample {
                        service: service.clone(),
                        from_ns,
                        to_ns,
                        span,
                        thread: thread.clone(),
                        kind,
                        value: value * scale,
                        count,
                        stack: stack.clone(),
                    };
                    let (values, times) = (&x.values, &x.timestamps_unix_nano);
                    if times.is_empty() {
                        let value = values.iter().map(|&v| v as f64).sum();
                        out.push((sample(from, to, value, counted.unwrap_or(0.0)), bytes));
                        continue;
                    }
                    // With timestamps, one event at each: its value at the
                    // same index, or 1 where there are none (the proto's
                    // shapes); an older single total is spread over them.
                    // A lock event is one contention.
                    let n = times.len() as f64;
                    let count = |c: Option<f64>| {
                        if !is_lock(kind) {
                            0.0
                        } else {
                            c.map_or(1.0, |c| c / n)
                        }
                    };
                    let value_at = |k: usize| match values.len() {
                        0 => Some(1.0),
                        1 if times.len() > 1 => Some(values[0] as f64 / n),
                        l if l == times.len() => Some(values[k] as f64),
                        _ => None,
                    };
                    for (k, &ts) in times.iter().enumerate() {
                        // Values and timestamps of different lengths are
                        // refused at the door (`wire::scan`); nothing to trust.
                        let Some(v) = value_at(k) else { break };
                        out.push((
                            sample(ts, ts, v, count(counted)),
                            if k == 0 { bytes } else { SAMPLE_BYTES },
                        ));
                    }
                }
            }
        }
    }
    out
}

/// Whether samples of `kind` count a lock's contentions (either side).
fn is_lock(kind: &str) -> bool {
    kind == "lock" || kind == LOCK_WAIT
}

/// The kind of Go's block-profile samples that waited to take a lock: the
/// waiter's side of what the mutex profile charges to the holder.
const LOCK_WAIT: &str = "lock_wait";

/// The side of a lock a contention sample shows, by the Go runtime's
/// frames on its stack: Go's mutex profile charges the holder at its
/// `Unlock` (`lock`); its block profile charges the waiter at its `Lock`
/// ([`LOCK_WAIT`]), and also records waits that are no lock's (a channel,
/// a `select`, a `sync.Cond`, a `sync.WaitGroup`): `None`, not a lock. A
/// stack of another runtime (a JVM's lock events) is `lock`.
fn lock_side(stack: &[Arc<Frame>]) -> Option<&'static str> {
    let has = |names: &[&str]| {
        stack
            .iter()
            .any(|f| names.iter().any(|n| f.function.contains(n)))
    };
    if has(&[
        "sync.(*Mutex).Unlock",
        "sync.(*RWMutex).Unlock",
        "sync.(*RWMutex).RUnlock",
    ]) || stack
        .first()
        .is_some_and(|f| &*f.function == "runtime.unlock")
    {
        return Some("lock");
    }
    if has(&[
        "sync.(*Mutex).Lock",
        "sync.(*Mutex).lockSlow",
        "sync.(*RWMutex).Lock",
        "sync.(*RWMutex).RLock",
        "sync.runtime_SemacquireMutex",
        "sync.runtime_SemacquireRWMutex",
    ]) {
        return Some(LOCK_WAIT);
    }
    if has(&[
        "runtime.chanrecv",
        "runtime.chansend",
        "runtime.selectgo",
        "sync.(*Cond).Wait",
        "sync.(*WaitGroup).Wait",
        "sync.runtime_Semacquire",
        "sync.runtime_notifyListWait",
    ]) {
        return None;
    }
    Some("lock")
}

/// Whether a frame is the runtime allocating or collecting garbage: Go's
/// allocator and collector, V8's `(garbage collector)`.
fn is_gc(func: &str) -> bool {
    [
        "runtime.mallocgc",
        "runtime.newobject",
        "runtime.growslice",
        "runtime.makeslice",
        "runtime.makemap",
        "runtime.gcAssist",
        "runtime.gcDrain",
        "runtime.gcBgMarkWorker",
        "runtime.scanobject",
        "runtime.markroot",
        "runtime.(*mheap)",
        "runtime.(*mcache)",
        "runtime.(*mcentral)",
        "(garbage collector)",
    ]
    .iter()
    .any(|p| func.starts_with(p))
}

/// Whether a frame is the language's runtime or standard library rather
/// than the service's code (its own or the libraries it brought): Go's
/// standard packages (an import path whose first element has no dot, but
/// `main`), the JDK's, CPython's standard library, Node's internals, and
/// native frames of shared libraries.
fn is_runtime(func: &str, loc: &str) -> bool {
    // A Go function is `import/path.Name`: its package ends at the first
    // dot after the last slash.
    let slash = func.rfind('/').map_or(0, |i| i + 1);
    let package = &func[..func[slash..].find('.').map_or(func.len(), |i| slash + i)];
    let first = package.split('/').next().unwrap_or("");
    // Go's own source and assembly (`memmove_amd64.s`).
    let go_std = [".go", ".s"]
        .iter()
        .any(|x| loc.ends_with(x) || loc.contains(&format!("{x}:")));
    (go_std && !first.contains('.') && first != "main")
        || [
            "java.", "javax.", "jdk.", "sun.", "com.sun.", "java/", "javax/", "jdk/", "sun/",
            "com/sun/",
        ]
        .iter()
        .any(|p| func.starts_with(p))
        || (loc.contains("/lib/python3") && !loc.contains("-packages/"))
        || loc.starts_with("node:")
        || loc.contains(".so")
        || func.is_empty()
}

/// A shared value keyed by its address: frames and stacks are interned
/// (per request), so aggregates hash a pointer, not a frame's text; what
/// is read out groups by function ([`Code::ranked`], the flame graph).
#[derive(Debug)]
struct Ptr<T: ?Sized>(Arc<T>);

impl<T: ?Sized> Clone for Ptr<T> {
    fn clone(&self) -> Self {
        Ptr(self.0.clone())
    }
}

impl<T: ?Sized> PartialEq for Ptr<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T: ?Sized> Eq for Ptr<T> {}

impl<T: ?Sized> std::hash::Hash for Ptr<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (Arc::as_ptr(&self.0) as *const () as usize).hash(h);
    }
}

/// By frame.
type ByFrame<V> = HashMap<Ptr<Frame>, V>;

/// What a span's joined samples of one kind say of its code.
#[derive(Debug, Default)]
struct Code {
    /// By the sample's innermost frame of the service's code (none when
    /// every frame is the runtime's).
    own_by: ByFrame<f64>,
    self_by: ByFrame<f64>,
    total_by: ByFrame<f64>,
    /// The joined value (ns for a kind of time).
    total: f64,
    /// Of it, samples with the allocator or the collector on their stack.
    gc: f64,
    /// Of it, samples with a frame of the service's code (the share of a
    /// function is of these: a stack of the runtime's alone, Go's system
    /// stack, names none).
    own: f64,
    /// By the function of the service's code, the events its samples count
    /// (a lock's contentions) and their value, unweighed: their mean.
    counted_by: ByFrame<(f64, f64)>,
    samples: usize,
    /// The stacks, leaf first, with their value: the flame graph.
    stacks: HashMap<Ptr<[Arc<Frame>]>, f64>,
    /// [`Code::first`], found once (the code is shared by the spans that
    /// join it, and complete before any of them asks).
    first: std::sync::OnceLock<Option<(Arc<Frame>, f64)>>,
}

impl Code {
    fn add(&mut self, s: &Sample, weight: f64) {
        let v = s.value * weight;
        if v <= 0.0 {
            return;
        }
        self.total += v;
        self.samples += 1;
        if s.stack.iter().any(|f| f.gc) {
            self.gc += v;
        }
        *self.stacks.entry(Ptr(s.stack.clone())).or_default() += v;
        if let Some(leaf) = s.stack.first() {
            *self.self_by.entry(Ptr(leaf.clone())).or_default() += v;
        }
        if let Some(own) = s.stack.iter().find(|f| !f.runtime) {
            *self.own_by.entry(Ptr(own.clone())).or_default() += v;
            self.own += v;
            if s.count > 0.0 {
                let c = self.counted_by.entry(Ptr(own.clone())).or_default();
                c.0 += s.count;
                c.1 += s.value;
            }
        }
        // Once per sample (a recursive frame is on its stack twice).
        let mut seen = (s.stack.len() > 64).then(HashSet::new);
        for (k, f) in s.stack.iter().enumerate() {
            let first = match &mut seen {
                Some(seen) => seen.insert(Arc::as_ptr(f)),
                None => !s.stack[..k].iter().any(|g| Arc::ptr_eq(g, f)),
            };
            if first {
                *self.total_by.entry(Ptr(f.clone())).or_default() += v;
            }
        }
    }

    /// Add `other`'s samples, their values weighed by `w` (their counts
    /// and counted waits are not: a mean wait is the samples').
    fn absorb(&mut self, other: &Code, w: f64) {
        fn add(to: &mut ByFrame<f64>, from: &ByFrame<f64>, w: f64) {
            for (f, x) in from {
                *to.entry(f.clone()).or_default() += x * w;
            }
        }
        add(&mut self.own_by, &other.own_by, w);
        add(&mut self.self_by, &other.self_by, w);
        add(&mut self.total_by, &other.total_by, w);
        for (st, x) in &other.stacks {
            *self.stacks.entry(st.clone()).or_default() += x * w;
        }
        for (f, (c, v)) in &other.counted_by {
            let e = self.counted_by.entry(f.clone()).or_default();
            e.0 += c;
            e.1 += v;
        }
        self.total += other.total * w;
        self.gc += other.gc * w;
        self.own += other.own * w;
        self.samples += other.samples;
    }

    /// The contentions charged to the top function, when the samples count
    /// them: (their count, their delay in all, ns), unweighed.
    fn contentions(&self) -> Option<(f64, f64)> {
        let (f, _) = self.first()?;
        let (count, value) = self
            .counted_by
            .iter()
            .filter(|(g, _)| g.0.function == f.function)
            .fold((0.0, 0.0), |a, (_, (c, v))| (a.0 + c, a.1 + v));
        (count > 0.0).then_some((count, value))
    }

    /// The mean wait of a contention charged to the top function (ms), when
    /// the samples count them.
    fn mean_wait_ms(&self) -> Option<f64> {
        self.contentions().map(|(c, v)| v / c / 1e6)
    }

    /// The delay of all the contentions charged to the top function in the
    /// windows joined (ms), when the samples count them: a wait of a span
    /// no longer than it may be one of them, whatever their mean.
    fn delay_ms(&self) -> Option<f64> {
        self.contentions().map(|(_, v)| v / 1e6)
    }

    /// Whether the contentions charged to the top function can hold a
    /// wait of `off_ms` off CPU: their mean is at least
    /// [`LOCK_WAIT_SHARE`] of it (a wait is anywhere from nothing to the
    /// hold), or they are few and their delay covers it (a function named
    /// from one sample: its delay is the span's wait).
    fn holds_wait(&self, off_ms: f64) -> bool {
        let (Some(mean), Some(delay)) = (self.mean_wait_ms(), self.delay_ms()) else {
            return false;
        };
        off_ms > 0.0 && (mean >= LOCK_WAIT_SHARE * off_ms || delay >= off_ms)
    }

    /// By function (its lines' values summed, shown at its heaviest line),
    /// the most first.
    fn ranked(by: &ByFrame<f64>) -> Vec<(&Arc<Frame>, f64)> {
        let mut of: HashMap<&str, (&Arc<Frame>, f64, f64)> = HashMap::with_capacity(by.len());
        for (Ptr(f), &x) in by {
            let e = of.entry(&*f.function).or_insert((f, x, 0.0));
            if x > e.1 || (x == e.1 && f.location < e.0.location) {
                (e.0, e.1) = (f, x);
            }
            e.2 += x;
        }
        let mut v: Vec<(&Arc<Frame>, f64)> = of.into_values().map(|(f, _, x)| (f, x)).collect();
        v.sort_by(|a, b| {
            b.1.total_cmp(&a.1)
                .then_with(|| a.0.function.cmp(&b.0.function))
        });
        v
    }

    fn top(by: &ByFrame<f64>, total: f64) -> Vec<serde_json::Value> {
        Code::ranked(by)
            .into_iter()
            .take(5)
            .map(|(f, x)| {
                serde_json::json!({
                    "function": &*f.function,
                    "location": &*f.location,
                    "share": round3(x / total),
                })
            })
            .collect()
    }

    /// The function of the service's code that holds the most, and its
    /// share of the samples that name one.
    fn first(&self) -> Option<(&Arc<Frame>, f64)> {
        self.first
            .get_or_init(|| {
                Code::ranked(&self.own_by)
                    .first()
                    .map(|(f, x)| ((*f).clone(), x / self.own))
            })
            .as_ref()
            .map(|(f, x)| (f, *x))
    }

    /// The flame graph of the joined samples: an icicle of frames from the
    /// root, each `{f, v, c}` (function, value as a share of the total,
    /// children), the smallest under 1% merged away, at most `MAX_DEPTH`
    /// deep.
    fn flame(&self) -> serde_json::Value {
        const MAX_DEPTH: usize = 48;
        #[derive(Default)]
        struct Node {
            v: f64,
            c: Vec<(Arc<str>, Node)>,
        }
        let mut root = Node::default();
        for (Ptr(stack), v) in &self.stacks {
            root.v += v;
            let mut n = &mut root;
            for f in stack.iter().rev().take(MAX_DEPTH) {
                let k = match n.c.iter().position(|(name, _)| *name == f.function) {
                    Some(k) => k,
                    None => {
                        n.c.push((f.function.clone(), Node::default()));
                        n.c.len() - 1
                    }
                };
                n = &mut n.c[k].1;
                n.v += v;
            }
        }
        fn json(name: &str, n: &Node, total: f64) -> serde_json::Value {
            let mut c: Vec<&(Arc<str>, Node)> =
                n.c.iter().filter(|(_, x)| x.v >= total * 0.01).collect();
            c.sort_by(|a, b| b.1.v.total_cmp(&a.1.v));
            // Built as values, not through `json!` (which serializes its
            // arguments again: each level would copy its whole subtree).
            let mut m = serde_json::Map::with_capacity(3);
            m.insert("f".into(), serde_json::Value::from(name));
            m.insert("v".into(), serde_json::Value::from(round3(n.v / total)));
            m.insert(
                "c".into(),
                serde_json::Value::Array(c.into_iter().map(|(k, x)| json(k, x, total)).collect()),
            );
            serde_json::Value::Object(m)
        }
        json("all", &root, self.total.max(f64::MIN_POSITIVE))
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// The kinds of profile a span's code is told by.
const KINDS: [&str; 5] = ["cpu", "lock", LOCK_WAIT, "wall", "alloc"];

/// What one kind of profile says of a span: samples aggregated once (a
/// span's, a local root's, a profile window's) and the weight of their
/// values for this span. Shares, a flame graph and a mean wait do not
/// depend on the weight; the time does.
struct Told {
    kind: &'static str,
    join: &'static str,
    code: Arc<Code>,
    weight: f64,
}

impl Told {
    /// The joined time (ms), for a kind of time.
    fn time_ms(&self) -> f64 {
        if self.kind == "alloc" {
            0.0
        } else {
            self.code.total * self.weight / 1e6
        }
    }

    /// The evidence: the top function of the service's code first.
    fn json(&self, explains: bool) -> Option<serde_json::Value> {
        let (first, share) = self.code.first()?;
        let mut v = serde_json::json!({
            "function": &*first.function,
            "location": &*first.location,
            "share": round3(share),
            "kind": self.kind,
            "join": self.join,
            "samples": self.code.samples,
            "time_ms": round3(self.time_ms()),
            "gc_share": round3(self.code.gc / self.code.total.max(f64::MIN_POSITIVE)),
            "top_own": Code::top(&self.code.own_by, self.code.own),
            "top_self": Code::top(&self.code.self_by, self.code.total),
            "top_inclusive": Code::top(&self.code.total_by, self.code.total),
        });
        if let Some(m) = self.code.mean_wait_ms() {
            v["mean_wait_ms"] = serde_json::json!(round3(m));
        }
        if let Some(d) = self.code.delay_ms() {
            v["delay_ms"] = serde_json::json!(round3(d));
        }
        if explains {
            v["flame"] = self.code.flame();
        }
        Some(v)
    }
}

fn code_schema() -> SchemaRef {
    schema(vec![
        utf8("trace_id"),
        utf8("span_id"),
        utf8("kind"),
        utf8("join"),
        utf8("function"),
        utf8("location"),
        f64f("share"),
        i64f("samples"),
        f64f("time_ms"),
        f64f("gc_share"),
        f64f("mean_wait_ms"),
        f64f("delay_ms"),
    ])
}

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
        let of = |k: &str| told.iter().find(|x| x.kind == k);
        let covers = |x: &&Told| x.time_ms() >= self.min_coverage * s.self_ms;
        // Or the work grew (the rule's second reading).
        let grew = |x: &&Told| {
            s.baseline_ms
                .is_some_and(|b| x.time_ms() >= (SLOW_FACTOR * b).max(self.min_time_ms))
        };
        let cpu = of("cpu").filter(|x| x.join != "time" || s.kind != "client");
        if let Some(c) = cpu.filter(|x| covers(x) || grew(x)) {
            return Some(c);
        }
        // Its time off CPU, when the runtime says which samples are its.
        let on = cpu.filter(|x| x.join != "time").map_or(0.0, Told::time_ms);
        let off = (s.self_ms - on).max(0.0);
        // Off CPU for the collector, not a lock (see the rule).
        let collecting = cpu
            .filter(|x| x.join != "time")
            .is_some_and(|x| x.code.gc >= 0.5 * x.code.total);
        // The holder's contentions, or the waiter's (the same waits, seen
        // from the side that waited), can hold the wait.
        let waited = of(LOCK_WAIT).is_some_and(|w| w.code.holds_wait(off));
        if let Some(l) = of("lock").filter(|l| !collecting && (l.code.holds_wait(off) || waited)) {
            return Some(l);
        }
        of("wall").filter(covers)
    }
}

/// The function that waited for the lock (Go's block profile), beside the
/// one that held it, in a lock's evidence: `waiter_function`,
/// `waiter_location`, `waiter_delay_ms` (`rca.code.waiter_*`).
fn waited_in(v: &mut serde_json::Value, told: &[Told]) {
    let Some(w) = told.iter().find(|x| x.kind == LOCK_WAIT) else {
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
    if told.iter().any(|x| x.kind == "lock") {
        return;
    }
    if let Some(w) = told.iter().find(|x| x.kind == LOCK_WAIT) {
        let lock = Told {
            kind: "lock",
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

    fn tables(&self) -> Vec<(&'static str, SchemaRef)> {
        vec![("code", code_schema())]
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
                && !matches!(s.kind, "client" | "producer")
                && w.latest.get(&s.service).is_some_and(|&end| {
                    let span_end = (base + s.end_ms * 1e6).max(0.0) as u64;
                    end < span_end && now_ns.saturating_sub(end) <= self.wait_ns
                })
        })
    }

    fn join(&self, _tick: &Tick<'_>, traces: &mut [TraceRow]) -> Result<Join, String> {
        let sch = code_schema();
        let mut c = Cols::new(&sch, 0);
        let w = self.lock();
        if w.samples.is_empty() {
            return Ok(Join {
                tables: vec![("code", sch.clone(), c.finish(sch)?)],
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
                let mut told: Vec<Told> = KINDS
                    .iter()
                    .filter_map(|k| span_code(t, i, &processes, &index, k))
                    .collect();
                waiters_alone_are_the_lock(&mut told);
                if told.is_empty() {
                    continue;
                }
                any = true;
                let span_id = Hex16::of(t.spans[i].span_id);
                for x in &told {
                    let Some((first, share)) = x.code.first() else {
                        continue;
                    };
                    c.row([
                        V::S(Some(&t.trace_id)),
                        V::S(Some(span_id.as_str())),
                        V::S(Some(x.kind)),
                        V::S(Some(x.join)),
                        V::S(Some(&first.function)),
                        V::S(Some(&first.location)),
                        V::F(Some(round3(share))),
                        V::I(Some(x.code.samples as i64)),
                        V::F(Some(x.time_ms())),
                        V::F(Some(x.code.gc / x.code.total.max(f64::MIN_POSITIVE))),
                        V::F(x.code.mean_wait_ms()),
                        V::F(x.code.delay_ms()),
                    ]);
                }
                // The code is evidence of the span only where it explains
                // its time.
                if let Some(x) = self.explaining(t, i, &told) {
                    if let Some(mut v) = x.json(true) {
                        if x.kind == "lock" {
                            waited_in(&mut v, &told);
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
            tables: vec![("code", sch.clone(), c.finish(sch)?)],
            misses,
        })
    }

    fn rules(&self) -> Vec<Rule> {
        let r = Rule::builtin;
        // A span slower than its normal (a baseline's excess; before its
        // operation has a baseline, its whole self time counts, with less
        // confidence), not a call waiting on another, whose own profile
        // covers its self time.
        // `what`: SQL text between the span's self time and the function.
        let on_cpu = |gc: &str, what: &str| {
            format!(
                r#"
SELECT c.trace_id,
  CASE WHEN c."join" = 'time' THEN 0.6 ELSE 0.8 END * CASE WHEN covers THEN 1.0 ELSE 0.75 END
    * CASE WHEN s.baseline_ms IS NULL THEN {UNLEARNED} ELSE 1.0 END AS confidence,
  concat(s.service, ' ', s.name, ' was on CPU ', CAST(CAST(c.time_ms AS BIGINT) AS VARCHAR), ' ms of its ',
         CAST(CAST(s.self_ms AS BIGINT) AS VARCHAR), ' ms',
         CASE WHEN covers THEN '' ELSE concat(' (', CAST(CAST(round(c.time_ms / s.baseline_ms) AS BIGINT) AS VARCHAR),
           '× the normal of the whole span: the work grew; the rest waited, for the CPU or else)') END,
         ', '{what}, CAST(CAST(round(c.share * 100) AS BIGINT) AS VARCHAR),
         '% in ', c.function, ' (', c.location, '; ', c."join", ' join',
         CASE WHEN s.baseline_ms IS NULL THEN '; no baseline yet: by its share of the span''s own time' ELSE '' END,
         ')') AS summary,
  c.span_id AS culprit_span_id,
  CASE WHEN covers THEN least(c.time_ms, s.self_ms) ELSE s.self_ms END AS explained_ms
FROM (SELECT *, time_ms >= {min_coverage} * self_ms AS covers
      FROM (SELECT c.*, s.self_ms FROM code c JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id)) c
  JOIN spans s ON s.trace_id = c.trace_id AND s.span_id = c.span_id
WHERE c.kind = 'cpu' AND s.kind NOT IN ('client', 'producer') AND coalesce(s.excess_ms, s.self_ms) > 0
  AND c.time_ms >= {min_time_ms} AND c.share >= {min_share}
  -- Its CPU covers its time, or the work itself grew: its CPU alone is
  -- slow by the baseline's measure, whatever else the span waited for (a
  -- starved host's run queue, which no CPU profile records): then it holds
  -- the span's self time, with less confidence.
  AND (covers OR c.time_ms >= {SLOW_FACTOR} * s.baseline_ms)
  AND c.gc_share {gc} 0.5"#,
                min_time_ms = self.min_time_ms,
                min_share = self.min_share,
                min_coverage = self.min_coverage,
            )
        };
        let on_cpu_cpu = on_cpu("<", "");
        let on_cpu_gc = on_cpu(
            ">=",
            ", CAST(CAST(round(c.gc_share * 100) AS BIGINT) AS VARCHAR), '% allocating and collecting garbage, driven by '",
        );
        vec![
            r("cpu_hotspot", &CPU_HOTSPOT, &on_cpu_cpu),
            r("gc_pressure", &GC_PRESSURE, &on_cpu_gc),
            r(
                "lock_contention",
                &LOCK_CONTENTION,
                &format!(
                    r#"
SELECT l.trace_id, CASE WHEN l."join" = 'time' THEN 0.7 ELSE 0.8 END
    * CASE WHEN s.baseline_ms IS NULL THEN {UNLEARNED} ELSE 1.0 END AS confidence,
  concat(s.service, ' ', s.name, ' was off CPU ', CAST(CAST(s.self_ms - coalesce(c.time_ms, 0) AS BIGINT) AS VARCHAR), ' ms of its ',
         CAST(CAST(s.self_ms AS BIGINT) AS VARCHAR), ' ms while its lock''s contentions waited ', CAST(CAST(l.mean_wait_ms AS BIGINT) AS VARCHAR),
         ' ms on average (', CAST(CAST(l.delay_ms AS BIGINT) AS VARCHAR), ' ms in all), ', CAST(CAST(round(l.share * 100) AS BIGINT) AS VARCHAR), '% of the delay at ', l.function, ' (', l.location,
         '; ', l."join", ' join',
         CASE WHEN s.baseline_ms IS NULL THEN '; no baseline yet: by the length of its wait' ELSE '' END,
         ')',
         CASE WHEN w.function IS NULL OR w.function = l.function THEN ''
              ELSE concat('; it waited in ', w.function, ' (', w.location, ')') END) AS summary,
  l.span_id AS culprit_span_id,
  s.self_ms - coalesce(c.time_ms, 0) AS explained_ms
FROM code l JOIN spans s ON s.trace_id = l.trace_id AND s.span_id = l.span_id
LEFT JOIN code c ON c.trace_id = l.trace_id AND c.span_id = l.span_id AND c.kind = 'cpu' AND c."join" <> 'time'
-- The waiter's side (Go's block profile), when it is profiled.
LEFT JOIN code w ON w.trace_id = l.trace_id AND w.span_id = l.span_id AND w.kind = '{LOCK_WAIT}'
WHERE l.kind = 'lock' AND s.kind NOT IN ('client', 'producer') AND coalesce(s.excess_ms, s.self_ms) > 0
  AND l.share >= {min_share}
  -- Before a baseline, the wait itself must be long enough to be a cause.
  AND (s.baseline_ms IS NOT NULL OR s.self_ms - coalesce(c.time_ms, 0) >= {min_time_ms})
  AND coalesce(c.time_ms, 0) < {min_coverage} * s.self_ms
  -- Not a span whose own CPU is mostly the collector's: its time off CPU
  -- is the collector's too (an assist parks until the background marking
  -- catches up), whatever a lock did in the same window.
  AND coalesce(c.gc_share, 0) < 0.5
  -- Nor one whose own CPU grew past its normal (the `cpu_hotspot` rule's
  -- second reading): its work explains it, off CPU in the run queue of a
  -- starved host, which a lock's window does not tell apart.
  AND NOT coalesce(c.time_ms >= greatest({SLOW_FACTOR} * s.baseline_ms, {min_time_ms}), false)
  -- Its contentions can hold the span's wait: their mean is a share of
  -- it, or their delay covers it (few, long ones: one sample names it).
  AND (l.mean_wait_ms >= {LOCK_WAIT_SHARE} * (s.self_ms - coalesce(c.time_ms, 0))
       OR l.delay_ms >= s.self_ms - coalesce(c.time_ms, 0)
       -- or the waiter's side's: the same waits, seen from the span's side.
       OR w.mean_wait_ms >= {LOCK_WAIT_SHARE} * (s.self_ms - coalesce(c.time_ms, 0))
       OR w.delay_ms >= s.self_ms - coalesce(c.time_ms, 0))"#,
                    min_share = self.min_share,
                    min_coverage = self.min_coverage,
                    min_time_ms = self.min_time_ms,
                ),
            ),
        ]
    }
}

/// A service's profile windows of one kind, `(from, to, code)` by start,
/// and the longest of them.
type Windows = (Vec<(u64, u64, Arc<Code>)>, u64);

/// A service, a kind of profile, and a thread (`""`: all of them).
type Of<'a> = (&'a str, &'static str, &'a str);

/// The samples one tick's traces may join, aggregated once: those linked
/// to each of the tick's spans, by kind; the unlinked ones of the tick's
/// services by kind (and by thread, where the profiler names it): those of
/// a profile window by window (the samples of one window overlap a span
/// alike), by start, those with a timestamp by time; and which services'
/// samples of a kind carry links, or threads, at all (their runtime says
/// which samples are a span's, or its thread's: a span with none had none).
struct Index<'a> {
    by_span: HashMap<(u64, &'static str), Arc<Code>>,
    /// The windows `(from, to, code)` by start, and the longest window.
    windows: HashMap<Of<'a>, Windows>,
    /// The samples taken at an instant, by time.
    instants: HashMap<Of<'a>, Vec<&'a Sample>>,
    linked: HashMap<&'a str, HashSet<&'static str>>,
    threaded: HashMap<&'a str, HashSet<&'static str>>,
}

impl<'a> Index<'a> {
    fn of(samples: &'a VecDeque<(Sample, usize)>, traces: &[TraceRow]) -> Index<'a> {
        let critical = || {
            traces
                .iter()
                .flat_map(|t| t.spans.iter().filter(|s| s.critical))
        };
        let spans: HashSet<u64> = traces
            .iter()
            .flat_map(|t| t.spans.iter().map(|s| s.span_id))
            .collect();
        let services: HashSet<&str> = critical().map(|s| &*s.service).collect();
        let mut by_span: HashMap<(u64, &'static str), Code> = HashMap::new();
        let mut windows: HashMap<(Of<'a>, u64, u64), Code> = HashMap::new();
        let mut instants: HashMap<Of<'a>, Vec<&'a Sample>> = HashMap::new();
        let mut linked: HashMap<&str, HashSet<&'static str>> = HashMap::new();
        let mut threaded: HashMap<&str, HashSet<&'static str>> = HashMap::new();
        for (x, _) in samples {
            if !services.contains(&*x.service) {
                continue;
            }
            if let Some(id) = x.span {
                linked.entry(&*x.service).or_default().insert(x.kind);
                if spans.contains(&id) {
                    by_span.entry((id, x.kind)).or_default().add(x, 1.0);
                }
                continue;
            }
            let thread = x.thread.as_deref();
            if thread.is_some() {
                threaded.entry(&*x.service).or_default().insert(x.kind);
            }
            for of in std::iter::once((&*x.service, x.kind, ""))
                .chain(thread.map(|th| (&*x.service, x.kind, th)))
            {
                if x.from_ns == x.to_ns {
                    instants.entry(of).or_default().push(x);
                } else {
                    windows
                        .entry((of, x.from_ns, x.to_ns))
                        .or_default()
                        .add(x, 1.0);
                }
            }
        }
        let mut by_window: HashMap<Of<'a>, Windows> = HashMap::new();
        for ((of, from, to), code) in windows {
            let e = by_window.entry(of).or_default();
            e.0.push((from, to, Arc::new(code)));
            // The longest window: how far before a span one that overlaps
            // it may start.
            e.1 = e.1.max(to.saturating_sub(from));
        }
        for (v, _) in by_window.values_mut() {
            v.sort_by_key(|w| (w.0, w.1));
        }
        for v in instants.values_mut() {
            v.sort_by_key(|x| x.from_ns);
        }
        Index {
            by_span: by_span
                .into_iter()
                .filter(|(_, c)| c.total > 0.0)
                .map(|(k, c)| (k, Arc::new(c)))
                .collect(),
            windows: by_window,
            instants,
            linked,
            threaded,
        }
    }

    /// What the unlinked samples of `of` say of `[start, end]` less the
    /// `holes` in it (a span's children on its thread): the windows that
    /// overlap it, each weighed by the share of it the time covers, and the
    /// samples taken within it. One window alone is its aggregate, weighed.
    fn gather(
        &self,
        of: Of<'_>,
        start: u64,
        end: u64,
        holes: &[(u64, u64)],
    ) -> Option<(Arc<Code>, f64)> {
        let overlap = |f: u64, t: u64| {
            let within = |a: u64, b: u64| t.min(b).saturating_sub(f.max(a));
            let holes: u64 = holes.iter().map(|&(a, b)| within(a, b)).sum();
            within(start, end).saturating_sub(holes)
        };
        let inside =
            |ts: u64| ts >= start && ts <= end && !holes.iter().any(|&(a, b)| ts >= a && ts <= b);
        let (v, longest) = self
            .windows
            .get(&of)
            .map_or((&[][..], 0), |(v, l)| (v.as_slice(), *l));
        let from = v.partition_point(|w| w.0 < start.saturating_sub(longest));
        let to = v.partition_point(|w| w.0 <= end);
        let mut windows = v[from..to.max(from)]
            .iter()
            .filter(|w| w.1 >= start)
            .map(|(f, t, code)| {
                let len = t.saturating_sub(*f);
                (code, overlap(*f, *t) as f64 / len.max(1) as f64)
            })
            .filter(|(_, w)| *w > 0.0);
        let at = self.instants.get(&of).map_or(&[][..], Vec::as_slice);
        let first_at = at.partition_point(|x| x.from_ns < start);
        let last_at = at.partition_point(|x| x.from_ns <= end);
        let mut at = at[first_at..last_at.max(first_at)]
            .iter()
            .filter(|x| inside(x.from_ns))
            .peekable();
        let first = windows.next();
        if at.peek().is_none() {
            match (first, windows.next()) {
                (None, _) => return None,
                (Some((c, w)), None) => return Some((c.clone(), w)),
                (Some(a), Some(b)) => {
                    let mut code = Code::default();
                    for (c, w) in [a, b].into_iter().chain(windows) {
                        code.absorb(c, w);
                    }
                    return Some((Arc::new(code), 1.0));
                }
            }
        }
        let mut code = Code::default();
        for (c, w) in first.into_iter().chain(windows) {
            code.absorb(c, w);
        }
        for x in at {
            code.add(x, 1.0);
        }
        Some((Arc::new(code), 1.0))
    }
}

/// A trace's processes: each span's local root ([`local_root`]), per
/// local root the critical self time of its process's spans, and per span
/// the times of its children on its own thread (`thread.name`).
struct Processes {
    root: Vec<usize>,
    own: HashMap<usize, f64>,
    on_thread: Vec<Vec<(u64, u64)>>,
}

impl Processes {
    fn of(t: &TraceRow) -> Processes {
        let root: Vec<usize> = (0..t.spans.len()).map(|i| local_root(t, i)).collect();
        let mut own: HashMap<usize, f64> = HashMap::new();
        for (i, s) in t.spans.iter().enumerate().filter(|(_, s)| s.critical) {
            *own.entry(root[i]).or_default() += s.self_ms;
        }
        let mut on_thread = vec![Vec::new(); t.spans.len()];
        for (j, s) in t.spans.iter().enumerate() {
            let Some(p) = s.parent else { continue };
            let thread = attributes::text(s, "thread_name");
            if thread.is_some()
                && t.spans[p].service == s.service
                && attributes::text(&t.spans[p], "thread_name") == thread
            {
                on_thread[p].push(span_time(t, j));
            }
        }
        Processes {
            root,
            own,
            on_thread,
        }
    }
}

/// Span `i`'s time (ns since the epoch).
fn span_time(t: &TraceRow, i: usize) -> (u64, u64) {
    let s = &t.spans[i];
    let start = t.start_ns.saturating_add((s.start_ms * 1e6) as u64);
    (start, start.saturating_add((s.duration_ms * 1e6) as u64))
}

/// What the samples of `kind` say of span `i`, by the best join that finds
/// some.
fn span_code(
    t: &TraceRow,
    i: usize,
    p: &Processes,
    index: &Index<'_>,
    kind: &'static str,
) -> Option<Told> {
    let s = &t.spans[i];
    let (start, end) = span_time(t, i);
    let told = |join, code: &Arc<Code>, weight: f64| {
        (code.total * weight > 0.0).then(|| Told {
            kind,
            join,
            code: code.clone(),
            weight,
        })
    };
    // (a) The very span.
    if let Some(code) = index.by_span.get(&(s.span_id, kind)) {
        return told("span", code, 1.0);
    }
    // (b) The local root of its process: its samples, weighed by the share
    // of the process's critical self time this span holds.
    let root = p.root[i];
    if root != i {
        if let Some(code) = index.by_span.get(&(t.spans[root].span_id, kind)) {
            let own = p.own.get(&root).copied().unwrap_or(0.0);
            let weight = if own > 0.0 { s.self_ms / own } else { 0.0 };
            if let Some(x) = told("local_root", code, weight) {
                return Some(x);
            }
        }
    }
    // Only where the service's samples of this kind name no span (where
    // they do, this span had none).
    let has = |m: &HashMap<&str, HashSet<&'static str>>| {
        m.get(&*s.service).is_some_and(|k| k.contains(kind))
    };
    if has(&index.linked) {
        return None;
    }
    // (c) Its thread over its time, less its children's on the same thread:
    // where the service's samples name threads, a span's thread with none
    // had none.
    if let Some(thread) = attributes::text(s, "thread_name").filter(|_| has(&index.threaded)) {
        let holes = &p.on_thread[i];
        let (code, w) = index.gather((&s.service, kind, thread), start, end, holes)?;
        return told("thread", &code, w);
    }
    // (d) Its service over its time, weighed by the overlap.
    let (code, w) = index.gather((&s.service, kind, ""), start, end, &[])?;
    told("time", &code, w)
}

/// The span that began span `i`'s process's part of the trace: its
/// nearest ancestor of the same service whose parent is another service's
/// (or none).
fn local_root(t: &TraceRow, mut i: usize) -> usize {
    while let Some(p) = t.spans[i].parent {
        if t.spans[p].service != t.spans[i].service {
            break;
        }
        i = p;
    }
    i
}

/// The fuzz target's body: bytes as an OTLP profiles request, through the
/// receivers' check (`wire::scan`), then, if it passes, into the source and
/// joined with a trace of a span of every link it holds (and one of each
/// service, by time). Nothing may panic; the window stays within its bytes.
#[doc(hidden)]
pub fn fuzz_otlp_profiles(data: &[u8]) {
    use causeway_core::model::{Batch, Signal};
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
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
    // A trace: a server span per link (the spans the samples name), under
    // a root of each service.
    let links: Vec<[u8; 8]> = req
        .dictionary
        .iter()
        .flat_map(|d| &d.link_table)
        .filter_map(|l| <[u8; 8]>::try_from(l.span_id.as_slice()).ok())
        .take(64)
        .collect();
    let rs: Vec<ResourceSpans> = req
        .resource_profiles
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
                    attributes: vec![KeyValue {
                        key: "service.name".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue(service.to_string())),
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
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

#[cfg(test)]
mod tests {
    use super::is_runtime;

    #[test]
    fn the_window_is_bounded_in_bytes_and_time_and_a_large_profile_is_refused() {
        use super::{Profiles, Source};
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
                .map(|(x, _)| (x.kind, x.value))
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
                assert_eq!((s.kind, s.from_ns), ("lock", s.to_ns));
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
}

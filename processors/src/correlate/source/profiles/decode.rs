//! Profiles as samples: OTLP profiles (and pprof turned into them)
//! decoded into samples of a kind of time, each with its stack interned,
//! its service, thread, span link and interval.

use super::*;

/// One frame: its function and where (`file:line`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Frame {
    pub(super) function: Arc<str>,
    pub(super) location: Arc<str>,
    /// The runtime's or the standard library's ([`is_runtime`]).
    pub(super) runtime: bool,
    /// The runtime allocating or collecting garbage ([`is_gc`]).
    pub(super) gc: bool,
}

/// One sample kept.
#[derive(Debug)]
pub(super) struct Sample {
    pub(super) service: Arc<str>,
    /// The interval it covers (ns): its timestamp, or its profile's span.
    pub(super) from_ns: u64,
    pub(super) to_ns: u64,
    /// The span its link names.
    pub(super) span: Option<u64>,
    /// The thread it was taken on (`thread.name`), when the profiler names
    /// it.
    pub(super) thread: Option<Arc<str>>,
    pub(super) kind: ProfileKind,
    pub(super) value: f64,
    /// The events it counts (a lock's contentions), when its profile has
    /// them.
    pub(super) count: f64,
    /// Leaf first.
    pub(super) stack: Frames,
}

/// What a sample costs in the window besides its stack, shared (bytes).
pub(super) const SAMPLE_BYTES: usize = 80;

/// The kind of time a sample type measures, or `None` for what is no time
/// of a request (a count of samples, goroutines, in-use memory).
/// Go's pprof (`cpu`, `delay`), async-profiler's OTLP (its engine's name:
/// `perf_events`, `itimer`, `ctimer`, `wall`, `lock_tracer`,
/// `alloc_tracer`). A count of `samples` is of its period type's kind (the
/// eBPF profiler's: `samples`/`count` every period of `cpu`/`nanoseconds`)
/// where its scope has no profile of that kind already (Go's CPU profile
/// has both).
pub(super) fn kind(type_: &str, unit: &str) -> Option<ProfileKind> {
    use ProfileKind::*;
    match (type_, unit) {
        ("cpu", _) | ("perf_events", _) | ("itimer", _) | ("ctimer", _) | ("cpu-clock", _) => {
            Some(Cpu)
        }
        ("delay", _)
        | ("lock", _)
        | ("locks", _)
        | ("lock_tracer", _)
        | ("native_lock", _)
        | ("contentions", "nanoseconds") => Some(Lock),
        ("wall", _) | ("off_cpu", _) => Some(Wall),
        ("alloc_space", _) | ("alloc_objects", _) | ("alloc", _) | ("alloc_tracer", _) => {
            Some(Alloc)
        }
        _ => None,
    }
}

/// The kind of time (or of allocation) a profile's samples measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum ProfileKind {
    /// On CPU.
    Cpu,
    /// Holding a lock others waited for (Go's mutex profile, a JVM's lock
    /// events): the holder's side.
    Lock,
    /// Waiting to take a lock (Go's block profile at `Lock`): the waiter's
    /// side of what the mutex profile charges to the holder.
    LockWait,
    /// Wall clock, on CPU or off.
    Wall,
    /// Allocating (bytes, not time).
    Alloc,
}

impl ProfileKind {
    /// Every kind, in the order a span's code is told by them.
    pub(super) const ALL: [ProfileKind; 5] = [
        ProfileKind::Cpu,
        ProfileKind::Lock,
        ProfileKind::LockWait,
        ProfileKind::Wall,
        ProfileKind::Alloc,
    ];

    /// Its name in the `code` table and the evidence.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            ProfileKind::Cpu => "cpu",
            ProfileKind::Lock => "lock",
            ProfileKind::LockWait => "lock_wait",
            ProfileKind::Wall => "wall",
            ProfileKind::Alloc => "alloc",
        }
    }

    /// Whether its samples count a lock's contentions (either side).
    pub(super) fn is_lock(self) -> bool {
        matches!(self, ProfileKind::Lock | ProfileKind::LockWait)
    }
}

/// What one unit of a profile's values is in nanoseconds (bytes, for an
/// allocation's): a count of samples is as many periods of its period type
/// (async-profiler's OTLP without `total`: `count` of `perf_events` every
/// 10 ms); `None` when a count has no period in time to scale it by.
pub(super) fn scale(
    s: &[String],
    p: &opentelemetry_proto::tonic::profiles::v1development::Profile,
    kind: ProfileKind,
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
            _ if kind == ProfileKind::Alloc => Some(1.0),
            _ => None,
        },
        "ms" | "milliseconds" => Some(1e6),
        "us" | "microseconds" => Some(1e3),
        _ => Some(1.0),
    }
}

pub(super) fn text(strings: &[String], i: i32) -> &str {
    usize::try_from(i)
        .ok()
        .and_then(|i| strings.get(i))
        .map_or("", String::as_str)
}

pub(super) fn get<T>(v: &[T], i: i32) -> Option<&T> {
    usize::try_from(i).ok().and_then(|i| v.get(i))
}

/// A stack's frames, leaf first.
pub(super) type Frames = Arc<[Arc<Frame>]>;

/// A stack of a request's dictionary as frames, each frame interned in
/// `frames`; and the bytes its new frames take.
pub(super) fn intern_stack(
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
pub(super) fn is_java(function: &str, file: &str) -> bool {
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
pub(super) fn is_native(function: &str, file: &str) -> bool {
    file.is_empty() && (!function.contains('.') || function.contains("::"))
}

/// The thread a sample's attributes name (`thread.name`), as a span's
/// `thread.name` names it: async-profiler writes `[name tid=N]`.
pub(super) fn thread_of(d: &ProfilesDictionary, attrs: &[i32]) -> Option<Arc<str>> {
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
pub(super) fn service_of(
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
pub(super) fn window_ends(req: &ExportProfilesServiceRequest) -> Vec<(Arc<str>, u64)> {
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
pub(super) fn samples(req: &ExportProfilesServiceRequest) -> Vec<(Sample, usize)> {
    let Some(d) = &req.dictionary else {
        return Vec::new();
    };
    let mut decode = Decode {
        d,
        stacks: HashMap::new(),
        frames: HashMap::new(),
        out: Vec::new(),
    };
    for rp in &req.resource_profiles {
        let service = service_of(rp);
        for sp in &rp.scope_profiles {
            decode.scope(&service, sp);
        }
    }
    decode.out
}

/// Decoding one request's samples: its dictionary, the stacks and frames
/// interned so far, the samples with the bytes each takes.
pub(super) struct Decode<'a> {
    pub(super) d: &'a ProfilesDictionary,
    pub(super) stacks: HashMap<i32, Frames>,
    pub(super) frames: HashMap<(i32, i64, bool), Arc<Frame>>,
    pub(super) out: Vec<(Sample, usize)>,
}

impl Decode<'_> {
    /// The samples of a scope's profiles, each of the kind of time its
    /// profile measures (what measures none is left out).
    pub(super) fn scope(
        &mut self,
        service: &Arc<str>,
        sp: &opentelemetry_proto::tonic::profiles::v1development::ScopeProfiles,
    ) {
        let d = self.d;
        let s = &d.string_table;
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
        let direct: HashSet<ProfileKind> = sp
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
                self.sample(service, kind, scale, (from, to), x, &mut counts);
            }
        }
    }

    /// Stack `index` as frames, and the bytes it adds (0 when seen before).
    pub(super) fn stack(&mut self, index: i32) -> (Frames, usize) {
        if let Some(st) = self.stacks.get(&index) {
            return (st.clone(), SAMPLE_BYTES);
        }
        let (st, b) = intern_stack(self.d, index, &mut self.frames);
        self.stacks.insert(index, st.clone());
        (st, SAMPLE_BYTES + b)
    }

    /// One pprof or OTLP sample: one over its profile's interval, or one
    /// per event where it is stamped.
    pub(super) fn sample(
        &mut self,
        service: &Arc<str>,
        kind: ProfileKind,
        scale: f64,
        (from, to): (u64, u64),
        x: &opentelemetry_proto::tonic::profiles::v1development::Sample,
        counts: &mut HashMap<i32, f64>,
    ) {
        let (stack, bytes) = self.stack(x.stack_index);
        let span = get(&self.d.link_table, x.link_index)
            .filter(|_| x.link_index > 0)
            .and_then(|l| <[u8; 8]>::try_from(l.span_id.as_slice()).ok())
            .map(u64::from_be_bytes)
            .filter(|&id| id != 0);
        let thread = thread_of(self.d, &x.attribute_indices);
        // Go's block profile beside its mutex profile: the
        // waiter's side of a lock apart, a channel's wait out.
        let kind = match kind {
            ProfileKind::Lock => match lock_side(&stack) {
                Some(side) => side,
                None => return,
            },
            k => k,
        };
        // A stack's contentions go with its first delay sample.
        let counted = if kind.is_lock() {
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
            self.out
                .push((sample(from, to, value, counted.unwrap_or(0.0)), bytes));
            return;
        }
        // With timestamps, one event at each: its value at the
        // same index, or 1 where there are none (the proto's
        // shapes); an older single total is spread over them.
        // A lock event is one contention.
        let n = times.len() as f64;
        let count = |c: Option<f64>| {
            if !kind.is_lock() {
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
            self.out.push((
                sample(ts, ts, v, count(counted)),
                if k == 0 { bytes } else { SAMPLE_BYTES },
            ));
        }
    }
}

/// The side of a lock a contention sample shows, by the Go runtime's
/// frames on its stack: Go's mutex profile charges the holder at its
/// `Unlock` (`lock`); its block profile charges the waiter at its `Lock`
/// ([`ProfileKind::LockWait`]), and also records waits that are no lock's (a channel,
/// a `select`, a `sync.Cond`, a `sync.WaitGroup`): `None`, not a lock. A
/// stack of another runtime (a JVM's lock events) is `lock`.
pub(super) fn lock_side(stack: &[Arc<Frame>]) -> Option<ProfileKind> {
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
        return Some(ProfileKind::Lock);
    }
    if has(&[
        "sync.(*Mutex).Lock",
        "sync.(*Mutex).lockSlow",
        "sync.(*RWMutex).Lock",
        "sync.(*RWMutex).RLock",
        "sync.runtime_SemacquireMutex",
        "sync.runtime_SemacquireRWMutex",
    ]) {
        return Some(ProfileKind::LockWait);
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
    Some(ProfileKind::Lock)
}

/// Whether a frame is the runtime allocating or collecting garbage: Go's
/// allocator and collector, V8's `(garbage collector)`.
pub(super) fn is_gc(func: &str) -> bool {
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
pub(super) fn is_runtime(func: &str, loc: &str) -> bool {
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

//! The profiles source: the code that held a span's time, from the OTLP
//! profiles the pipeline carries (the `pprof` receiver's, an SDK's, the
//! eBPF profiler's).
//!
//! - state: a window of samples (its stack interned, counted in bytes, the
//!   oldest first out; a request over `max_profile_bytes` not kept, logged
//!   and counted by the source), each with its
//!   service, time, kind (`cpu`, `lock`, `wall`, `alloc`) and the span its
//!   link names;
//! - join, best first, per critical span: (a) `span`: the samples linked to
//!   the very span; (b) `local_root`: the samples linked to the span that
//!   began its process's part of the trace, weighed by the share of that
//!   process's critical self time the span holds; (c) `time`: the samples
//!   of its service whose time overlaps the span, weighed by the overlap.
//!   The join used is said (`rca.code.join`);
//! - what it adds to a trace: for each critical span with samples, the
//!   frames that hold its time — the function of the service's code whose
//!   samples hold the most (each sample counted for its innermost frame that
//!   is not the runtime's or the standard library's), its location, its
//!   share, the profile's kind, the join, and the top five by that, by the
//!   leaf and inclusive — as evidence of that span; the verdict shows the
//!   culprit's (`rca.code.*`);
//! - rules' table `code`: `trace_id, span_id, function, location, share,
//!   kind, join, samples`.

use datafusion::arrow::datatypes::SchemaRef;
use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesServiceRequest;
use opentelemetry_proto::tonic::profiles::v1development::ProfilesDictionary;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

use super::{Join, Source, Tick};
use crate::correlate::model::table::{f64f, i64f, schema, utf8, Cols, V};
use crate::correlate::model::{Hex16, Joined, TraceRow};

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
        e
    }
}

/// One frame: its function and where (`file:line`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Frame {
    function: Arc<str>,
    location: Arc<str>,
    /// The runtime's or the standard library's ([`is_runtime`]).
    runtime: bool,
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
    kind: &'static str,
    value: f64,
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
}

/// The source.
pub struct Profiles {
    window: Mutex<Window>,
    /// Bytes the window holds at most.
    max_bytes: usize,
    /// A profile request larger than this is refused (bytes).
    max_profile_bytes: usize,
    /// Samples older than this go (ns).
    keep_ns: u64,
}

impl std::fmt::Debug for Profiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Profiles")
    }
}

impl Profiles {
    /// A window of `max_bytes`, refusing profiles over `max_profile_bytes`,
    /// keeping samples `keep_ns`.
    pub fn new(max_bytes: usize, max_profile_bytes: usize, keep_ns: u64) -> Self {
        Profiles {
            window: Mutex::new(Window::default()),
            max_bytes,
            max_profile_bytes,
            keep_ns,
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
fn kind(type_: &str, unit: &str) -> Option<&'static str> {
    match (type_, unit) {
        ("cpu", _) => Some("cpu"),
        ("delay", _) | ("lock", _) | ("contentions", "nanoseconds") => Some("lock"),
        ("wall", _) | ("off_cpu", _) => Some("wall"),
        ("alloc_space", _) | ("alloc_objects", _) | ("alloc", _) => Some("alloc"),
        _ => None,
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
    frames: &mut HashMap<(i32, i64), Arc<Frame>>,
) -> (Frames, usize) {
    let s = &d.string_table;
    let mut bytes = 0;
    let locations = get(&d.stack_table, stack_index)
        .map(|st| st.location_indices.as_slice())
        .unwrap_or_default();
    let mut out = Vec::with_capacity(locations.len());
    // A location's lines: its inlined functions first, its caller last.
    for line in locations
        .iter()
        .filter_map(|&l| get(&d.location_table, l))
        .flat_map(|loc| &loc.lines)
    {
        let Some(f) = get(&d.function_table, line.function_index) else {
            continue;
        };
        let frame = frames
            .entry((line.function_index, line.line))
            .or_insert_with(|| {
                let file = text(s, f.filename_strindex);
                let location = if line.line > 0 {
                    format!("{file}:{}", line.line)
                } else {
                    file.to_string()
                };
                let function = text(s, f.name_strindex);
                bytes += 48 + location.len() + function.len();
                let runtime = is_runtime(function, &location);
                Arc::new(Frame {
                    function: Arc::from(function),
                    location: Arc::from(location),
                    runtime,
                })
            });
        out.push(frame.clone());
    }
    bytes += 8 * out.len();
    (Arc::from(out), bytes)
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
        for p in rp.scope_profiles.iter().flat_map(|sp| &sp.profiles) {
            let Some(t) = p.sample_type else { continue };
            let Some(kind) = kind(text(s, t.type_strindex), text(s, t.unit_strindex)) else {
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
                let value = x.values.first().copied().unwrap_or(0) as f64;
                let sample = |from_ns, to_ns, value| Sample {
                    service: service.clone(),
                    from_ns,
                    to_ns,
                    span,
                    kind,
                    value,
                    stack: stack.clone(),
                };
                if x.timestamps_unix_nano.is_empty() {
                    out.push((sample(from, to, value), bytes));
                    continue;
                }
                let each = value / x.timestamps_unix_nano.len() as f64;
                for (k, &ts) in x.timestamps_unix_nano.iter().enumerate() {
                    out.push((
                        sample(ts, ts, each),
                        if k == 0 { bytes } else { SAMPLE_BYTES },
                    ));
                }
            }
        }
    }
    out
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
    let go_std = loc.ends_with(".go") || loc.contains(".go:");
    (go_std && !first.contains('.') && first != "main")
        || ["java.", "javax.", "jdk.", "sun.", "com.sun."]
            .iter()
            .any(|p| func.starts_with(p))
        || (loc.contains("/lib/python3") && !loc.contains("-packages/"))
        || loc.starts_with("node:")
        || loc.contains(".so")
        || func.is_empty()
}

/// What a span's joined samples say of its code.
#[derive(Debug, Default)]
struct Code {
    /// By the sample's innermost frame of the service's code (its leaf when
    /// every frame is the runtime's).
    own_by: HashMap<Arc<Frame>, f64>,
    self_by: HashMap<Arc<Frame>, f64>,
    total_by: HashMap<Arc<Frame>, f64>,
    total: f64,
    kind: HashMap<&'static str, f64>,
    samples: usize,
}

impl Code {
    fn add(&mut self, s: &Sample, weight: f64) {
        let v = s.value * weight;
        if v <= 0.0 {
            return;
        }
        self.total += v;
        self.samples += 1;
        *self.kind.entry(s.kind).or_default() += v;
        if let Some(leaf) = s.stack.first() {
            *self.self_by.entry(leaf.clone()).or_default() += v;
            let own = s.stack.iter().find(|f| !f.runtime).unwrap_or(leaf);
            *self.own_by.entry(own.clone()).or_default() += v;
        }
        let mut seen = HashSet::new();
        for f in s.stack.iter() {
            if seen.insert(Arc::as_ptr(f)) {
                *self.total_by.entry(f.clone()).or_default() += v;
            }
        }
    }

    fn top(by: &HashMap<Arc<Frame>, f64>, total: f64) -> Vec<serde_json::Value> {
        let mut v: Vec<(&Arc<Frame>, &f64)> = by.iter().collect();
        v.sort_by(|a, b| {
            b.1.total_cmp(a.1)
                .then_with(|| a.0.function.cmp(&b.0.function))
        });
        v.into_iter()
            .take(5)
            .map(|(f, x)| {
                serde_json::json!({
                    "function": &*f.function,
                    "location": &*f.location,
                    "share": (x / total * 1000.0).round() / 1000.0,
                })
            })
            .collect()
    }

    /// The evidence: the top self function first.
    fn json(&self, join: &str) -> Option<serde_json::Value> {
        if self.total <= 0.0 {
            return None;
        }
        let top_own = Code::top(&self.own_by, self.total);
        let first = top_own.first()?.clone();
        let kind = self
            .kind
            .iter()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map_or("cpu", |(k, _)| *k);
        Some(serde_json::json!({
            "function": first["function"],
            "location": first["location"],
            "share": first["share"],
            "kind": kind,
            "join": join,
            "samples": self.samples,
            "top_own": top_own,
            "top_self": Code::top(&self.self_by, self.total),
            "top_inclusive": Code::top(&self.total_by, self.total),
        }))
    }
}

fn code_schema() -> SchemaRef {
    schema(vec![
        utf8("trace_id"),
        utf8("span_id"),
        utf8("function"),
        utf8("location"),
        f64f("share"),
        utf8("kind"),
        utf8("join"),
        i64f("samples"),
    ])
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
        for (s, bytes) in samples(req) {
            w.bytes += bytes;
            w.samples.push_back((s, bytes));
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
            for i in 0..t.spans.len() {
                let s = &t.spans[i];
                if !s.critical {
                    continue;
                }
                let Some((join, code)) = span_code(t, i, &index) else {
                    continue;
                };
                let Some(v) = code.json(join) else { continue };
                any = true;
                let span_id = Hex16::of(s.span_id);
                c.row([
                    V::S(Some(&t.trace_id)),
                    V::S(Some(span_id.as_str())),
                    V::S(v["function"].as_str()),
                    V::S(v["location"].as_str()),
                    V::F(v["share"].as_f64()),
                    V::S(v["kind"].as_str()),
                    V::S(Some(join)),
                    V::I(Some(code.samples as i64)),
                ]);
                t.joined.push(Joined::Span(i, "code", Arc::new(v)));
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
}

/// A span's code, by the best join that finds samples.
/// The samples one tick's traces may join: by the span their link names
/// (only the tick's spans), and the unlinked ones by service (only the
/// tick's services), by start.
struct Index<'a> {
    by_span: HashMap<u64, Vec<&'a Sample>>,
    by_service: HashMap<&'a str, (Vec<&'a Sample>, u64)>,
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
        let mut by_span: HashMap<u64, Vec<&Sample>> = HashMap::new();
        let mut by_service: HashMap<&str, (Vec<&Sample>, u64)> = HashMap::new();
        for (x, _) in samples {
            match x.span {
                Some(id) if spans.contains(&id) => by_span.entry(id).or_default().push(x),
                Some(_) => {}
                None if services.contains(&*x.service) => {
                    let e = by_service.entry(&*x.service).or_default();
                    e.0.push(x);
                    // The longest a sample covers: how far before a span a
                    // sample that overlaps it may start.
                    e.1 = e.1.max(x.to_ns.saturating_sub(x.from_ns));
                }
                None => {}
            }
        }
        for (v, _) in by_service.values_mut() {
            v.sort_by_key(|x| x.from_ns);
        }
        Index {
            by_span,
            by_service,
        }
    }

    /// The unlinked samples of `service` that overlap `[start, end]`.
    fn during(&self, service: &str, start: u64, end: u64) -> impl Iterator<Item = &'a Sample> + '_ {
        let (v, longest) = self
            .by_service
            .get(service)
            .map_or((&[][..], 0), |(v, l)| (v.as_slice(), *l));
        let from = v.partition_point(|x| x.from_ns < start.saturating_sub(longest));
        let to = v.partition_point(|x| x.from_ns <= end);
        v[from..to.max(from)]
            .iter()
            .copied()
            .filter(move |x| x.to_ns >= start)
    }
}

/// A span's code, by the best join that finds samples.
fn span_code(t: &TraceRow, i: usize, index: &Index<'_>) -> Option<(&'static str, Code)> {
    let s = &t.spans[i];
    let start = t.start_ns.saturating_add((s.start_ms * 1e6) as u64);
    let end = start.saturating_add((s.duration_ms * 1e6) as u64);
    let linked = |id: u64| index.by_span.get(&id).into_iter().flatten().copied();
    // (a) The very span.
    let mut code = Code::default();
    for x in linked(s.span_id) {
        code.add(x, 1.0);
    }
    if code.total > 0.0 {
        return Some(("span", code));
    }
    // (b) The local root of its process: its samples, weighed by the share
    // of the process's critical self time this span holds.
    let root = local_root(t, i);
    if root != i {
        let own: f64 = t
            .spans
            .iter()
            .enumerate()
            .filter(|(k, x)| x.critical && x.service == s.service && local_root(t, *k) == root)
            .map(|(_, x)| x.self_ms)
            .sum();
        let weight = if own > 0.0 { s.self_ms / own } else { 0.0 };
        for x in linked(t.spans[root].span_id) {
            code.add(x, weight);
        }
        if code.total > 0.0 {
            return Some(("local_root", code));
        }
    }
    // (c) Its service over its time, weighed by the overlap.
    for x in index.during(&s.service, start, end) {
        let len = x.to_ns.saturating_sub(x.from_ns);
        let weight = if len == 0 {
            1.0
        } else {
            (x.to_ns.min(end).saturating_sub(x.from_ns.max(start))) as f64 / len as f64
        };
        code.add(x, weight);
    }
    (code.total > 0.0).then_some(("time", code))
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
        let p = Profiles::new(700, 10_000, 600_000_000_000);
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
        let p = Profiles::new(1 << 20, len - 1, 600_000_000_000);
        p.take_profiles(&req, len, base);
        assert!(p.lock().samples.is_empty());
        assert_eq!(p.refused(), 1);
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

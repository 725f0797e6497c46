//! Samples folded by frame: the code that holds a span's time, by the
//! innermost frame of the service's own code, with its share, wait and
//! flame graph.

use super::*;
use crate::correlate::model::trace::Written;

/// A shared value keyed by its address: frames and stacks are interned
/// (per request), so aggregates hash a pointer, not a frame's text; what
/// is read out groups by function ([`Code::ranked`], the flame graph).
#[derive(Debug)]
pub(super) struct Ptr<T: ?Sized>(pub(super) Arc<T>);

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
pub(super) type ByFrame<V> = Fast<Ptr<Frame>, V>;

/// A map hashed with foldhash: its keys are pointers and the service's own
/// text, hashed per sample and per frame, where SipHash's resistance to
/// chosen keys buys nothing.
pub(super) type Fast<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// What a span's joined samples of one kind say of its code: their stacks
/// with their values, and what every span asks of them (the total, the
/// collector's and the service's code's shares, the contentions). By frame,
/// what a rule or the evidence reads is made from the stacks once, when
/// it is first asked for: most joined codes are never shown.
#[derive(Debug, Default)]
pub(super) struct Code {
    /// The joined value (ns for a kind of time).
    pub(super) total: f64,
    /// Of it, samples with the allocator or the collector on their stack.
    pub(super) gc: f64,
    /// Of it, samples with a frame of the service's code (the share of a
    /// function is of these: a stack of the runtime's alone, Go's system
    /// stack, names none).
    pub(super) own: f64,
    /// By the function of the service's code, the events its samples count
    /// (a lock's contentions) and their value, unweighed: their mean.
    pub(super) counted_by: ByFrame<(f64, f64)>,
    pub(super) samples: usize,
    /// The stacks, leaf first, with their value: the flame graph.
    pub(super) stacks: Fast<Ptr<[Arc<Frame>]>, f64>,
    /// By the sample's innermost frame of the service's code (none when
    /// every frame is the runtime's), made once from the stacks.
    own_by: std::sync::OnceLock<ByFrame<f64>>,
    /// By leaf, and by every frame on the stack (inclusive), made once.
    self_total_by: std::sync::OnceLock<(ByFrame<f64>, ByFrame<f64>)>,
    /// [`Code::first`], found once (the code is shared by the spans that
    /// join it, and complete before any of them asks).
    first: std::sync::OnceLock<Option<(Arc<Frame>, f64)>>,
    /// The flame graph, written when the evidence first shows it.
    flame: std::sync::OnceLock<Option<Box<serde_json::value::RawValue>>>,
}

impl crate::correlate::model::trace::Written for Code {
    fn json(&self) -> Option<&serde_json::value::RawValue> {
        self.flame.get_or_init(|| self.write_flame()).as_deref()
    }
}

/// A stack's innermost frame of the service's code.
fn own_frame(stack: &[Arc<Frame>]) -> Option<&Arc<Frame>> {
    stack.iter().find(|f| !f.runtime)
}

impl Code {
    pub(super) fn add(&mut self, s: &Sample, weight: f64) {
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
        if let Some(own) = own_frame(&s.stack) {
            self.own += v;
            if s.count > 0.0 {
                let c = self.counted_by.entry(Ptr(own.clone())).or_default();
                c.0 += s.count;
                c.1 += s.value;
            }
        }
    }

    /// Add `other`'s samples, their values weighed by `w` (their counts
    /// and counted waits are not: a mean wait is the samples').
    pub(super) fn absorb(&mut self, other: &Code, w: f64) {
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

    /// By the innermost frame of the service's code.
    pub(super) fn own_by(&self) -> &ByFrame<f64> {
        self.own_by.get_or_init(|| {
            let mut by = ByFrame::default();
            for (Ptr(stack), v) in &self.stacks {
                if let Some(own) = own_frame(stack) {
                    *by.entry(Ptr(own.clone())).or_default() += v;
                }
            }
            by
        })
    }

    /// By leaf, and by every frame on the stack, each once per stack (a
    /// recursive frame is on its stack twice).
    pub(super) fn self_total_by(&self) -> &(ByFrame<f64>, ByFrame<f64>) {
        self.self_total_by.get_or_init(|| {
            let (mut leaf, mut total) = (ByFrame::default(), ByFrame::default());
            for (Ptr(stack), &v) in &self.stacks {
                if let Some(f) = stack.first() {
                    *leaf.entry(Ptr(f.clone())).or_default() += v;
                }
                let mut seen = (stack.len() > 64).then(HashSet::new);
                for (k, f) in stack.iter().enumerate() {
                    let first = match &mut seen {
                        Some(seen) => seen.insert(Arc::as_ptr(f)),
                        None => !stack[..k].iter().any(|g| Arc::ptr_eq(g, f)),
                    };
                    if first {
                        *total.entry(Ptr(f.clone())).or_default() += v;
                    }
                }
            }
            (leaf, total)
        })
    }

    /// The contentions charged to the top function, when the samples count
    /// them: (their count, their delay in all, ns), unweighed.
    pub(super) fn contentions(&self) -> Option<(f64, f64)> {
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
    pub(super) fn mean_wait_ms(&self) -> Option<f64> {
        self.contentions().map(|(c, v)| v / c / 1e6)
    }

    /// The delay of all the contentions charged to the top function in the
    /// windows joined (ms), when the samples count them: a wait of a span
    /// no longer than it may be one of them, whatever their mean.
    pub(super) fn delay_ms(&self) -> Option<f64> {
        self.contentions().map(|(_, v)| v / 1e6)
    }

    /// Whether the contentions charged to the top function can hold a
    /// wait of `off_ms` off CPU: their mean is at least
    /// [`LOCK_WAIT_SHARE`] of it (a wait is anywhere from nothing to the
    /// hold), or they are few and their delay covers it (a function named
    /// from one sample: its delay is the span's wait).
    pub(super) fn holds_wait(&self, off_ms: f64) -> bool {
        let (Some(mean), Some(delay)) = (self.mean_wait_ms(), self.delay_ms()) else {
            return false;
        };
        off_ms > 0.0 && (mean >= LOCK_WAIT_SHARE * off_ms || delay >= off_ms)
    }

    /// By function (its lines' values summed, shown at its heaviest line),
    /// the `n` that hold the most, the most first.
    pub(super) fn ranked(by: &ByFrame<f64>, n: usize) -> Vec<(&Arc<Frame>, f64)> {
        let mut of: Fast<&str, (&Arc<Frame>, f64, f64)> =
            Fast::with_capacity_and_hasher(by.len(), Default::default());
        for (Ptr(f), &x) in by {
            let e = of.entry(&*f.function).or_insert((f, x, 0.0));
            if x > e.1 || (x == e.1 && f.location < e.0.location) {
                (e.0, e.1) = (f, x);
            }
            e.2 += x;
        }
        let mut v: Vec<(&Arc<Frame>, f64)> = of.into_values().map(|(f, _, x)| (f, x)).collect();
        let order = |a: &(&Arc<Frame>, f64), b: &(&Arc<Frame>, f64)| {
            b.1.total_cmp(&a.1)
                .then_with(|| a.0.function.cmp(&b.0.function))
        };
        if n > 0 && v.len() > n {
            v.select_nth_unstable_by(n - 1, order);
            v.truncate(n);
        }
        v.sort_by(order);
        v
    }

    pub(super) fn top(by: &ByFrame<f64>, total: f64) -> Vec<serde_json::Value> {
        Code::ranked(by, 5)
            .into_iter()
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
    pub(super) fn first(&self) -> Option<(&Arc<Frame>, f64)> {
        self.first
            .get_or_init(|| {
                Code::ranked(self.own_by(), 1)
                    .first()
                    .map(|(f, x)| ((*f).clone(), x / self.own))
            })
            .as_ref()
            .map(|(f, x)| (f, *x))
    }

    /// The flame graph of the joined samples, written as JSON once: an
    /// icicle of frames from the root, each `{f, v, c}` (function, value as
    /// a share of the total, children), the smallest under 1% merged away,
    /// at most `MAX_DEPTH` deep.
    fn write_flame(&self) -> Option<Box<serde_json::value::RawValue>> {
        const MAX_DEPTH: usize = 48;
        let mut root = Node::default();
        for (Ptr(stack), v) in &self.stacks {
            root.v += v;
            let mut n = &mut root;
            for f in stack.iter().rev().take(MAX_DEPTH) {
                // Frames are interned per request: the same function is
                // most often the same text.
                let at = n
                    .c
                    .iter()
                    .position(|(name, _)| Arc::ptr_eq(name, &f.function) || *name == f.function);
                let k = match at {
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
        serde_json::value::to_raw_value(&Flame {
            name: "all",
            node: &root,
            total: self.total.max(f64::MIN_POSITIVE),
        })
        .ok()
    }
}

/// A frame of the flame graph and its callees.
#[derive(Default)]
struct Node {
    v: f64,
    c: Vec<(Arc<str>, Node)>,
}

/// A node of the flame graph as JSON: `{"c": [...], "f": name, "v": share}`,
/// its callees of at least 1% of the total, the heaviest first.
struct Flame<'a> {
    name: &'a str,
    node: &'a Node,
    total: f64,
}

impl serde::Serialize for Flame<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut c: Vec<Flame<'_>> = self
            .node
            .c
            .iter()
            .filter(|(_, x)| x.v >= self.total * 0.01)
            .map(|(name, node)| Flame {
                name,
                node,
                total: self.total,
            })
            .collect();
        c.sort_by(|a, b| b.node.v.total_cmp(&a.node.v));
        let mut m = s.serialize_map(Some(3))?;
        m.serialize_entry("c", &c)?;
        m.serialize_entry("f", self.name)?;
        m.serialize_entry("v", &round3(self.node.v / self.total))?;
        m.end()
    }
}

pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// How a span's samples were found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum JoinedBy {
    /// By the span's own id on the samples' links or labels.
    Span,
    /// By its local root span's id (Go's `otel-profiling-go`).
    LocalRoot,
    /// By the thread that ran it (`thread.name`) and its time.
    Thread,
    /// By its service and its time only.
    Time,
}

impl JoinedBy {
    /// Its name in the `code` table and `rca.code.join`.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            JoinedBy::Span => "span",
            JoinedBy::LocalRoot => "local_root",
            JoinedBy::Thread => "thread",
            JoinedBy::Time => "time",
        }
    }
}

/// What one kind of profile says of a span: samples aggregated once (a
/// span's, a local root's, a profile window's) and the weight of their
/// values for this span. Shares, a flame graph and a mean wait do not
/// depend on the weight; the time does.
#[derive(Clone)]
pub(super) struct Told {
    pub(super) kind: ProfileKind,
    pub(super) join: JoinedBy,
    pub(super) code: Arc<Code>,
    pub(super) weight: f64,
}

impl Told {
    /// The joined time (ms), for a kind of time.
    pub(super) fn time_ms(&self) -> f64 {
        if self.kind == ProfileKind::Alloc {
            0.0
        } else {
            self.code.total * self.weight / 1e6
        }
    }

    /// The evidence: the top function of the service's code first, and
    /// where the code explains the span, its flame graph.
    pub(super) fn json(&self, explains: bool) -> Option<SpanFacts> {
        let (first, share) = self.code.first()?;
        let mut v = serde_json::json!({
            "function": &*first.function,
            "location": &*first.location,
            "share": round3(share),
            "kind": self.kind.as_str(),
            "join": self.join.as_str(),
            "samples": self.code.samples,
            "time_ms": round3(self.time_ms()),
            "gc_share": round3(self.code.gc / self.code.total.max(f64::MIN_POSITIVE)),
            "top_own": Code::top(self.code.own_by(), self.code.own),
            "top_self": Code::top(&self.code.self_total_by().0, self.code.total),
            "top_inclusive": Code::top(&self.code.self_total_by().1, self.code.total),
        });
        if let Some(m) = self.code.mean_wait_ms() {
            v["mean_wait_ms"] = serde_json::json!(round3(m));
        }
        if let Some(d) = self.code.delay_ms() {
            v["delay_ms"] = serde_json::json!(round3(d));
        }
        // Only the verdict's culprit's evidence shows the flame graph:
        // written then, from the code, not for every span it explains.
        let written: Vec<(&'static str, Arc<dyn Written>)> = if explains {
            vec![("flame", self.code.clone())]
        } else {
            Vec::new()
        };
        Some(SpanFacts { values: v, written })
    }
}

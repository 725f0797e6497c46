//! Samples folded by frame: the code that holds a span's time, by the
//! innermost frame of the service's own code, with its share, wait and
//! flame graph.

use super::*;

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
pub(super) type ByFrame<V> = HashMap<Ptr<Frame>, V>;

/// What a span's joined samples of one kind say of its code.
#[derive(Debug, Default)]
pub(super) struct Code {
    /// By the sample's innermost frame of the service's code (none when
    /// every frame is the runtime's).
    pub(super) own_by: ByFrame<f64>,
    pub(super) self_by: ByFrame<f64>,
    pub(super) total_by: ByFrame<f64>,
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
    pub(super) stacks: HashMap<Ptr<[Arc<Frame>]>, f64>,
    /// [`Code::first`], found once (the code is shared by the spans that
    /// join it, and complete before any of them asks).
    pub(super) first: std::sync::OnceLock<Option<(Arc<Frame>, f64)>>,
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
    pub(super) fn absorb(&mut self, other: &Code, w: f64) {
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
    /// the most first.
    pub(super) fn ranked(by: &ByFrame<f64>) -> Vec<(&Arc<Frame>, f64)> {
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

    pub(super) fn top(by: &ByFrame<f64>, total: f64) -> Vec<serde_json::Value> {
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
    pub(super) fn first(&self) -> Option<(&Arc<Frame>, f64)> {
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
    pub(super) fn flame(&self) -> serde_json::Value {
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

    /// The evidence: the top function of the service's code first.
    pub(super) fn json(&self, explains: bool) -> Option<serde_json::Value> {
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

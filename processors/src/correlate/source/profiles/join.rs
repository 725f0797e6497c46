//! Samples joined with a tick's traces: indexed once per tick (by span,
//! local root, thread and time), then each critical span's code found by
//! the best join it has.

use super::*;

/// A service's profile windows of one kind, `(from, to, code)` by start,
/// and the longest of them.
pub(super) type Windows = (Vec<(u64, u64, Arc<Code>)>, u64);

/// A service, a kind of profile, and a thread (`""`: all of them).
pub(super) type Of<'a> = (&'a str, ProfileKind, &'a str);

/// The samples one tick's traces may join, aggregated once: those linked
/// to each of the tick's spans, by kind; the unlinked ones of the tick's
/// services by kind (and by thread, where the profiler names it): those of
/// a profile window by window (the samples of one window overlap a span
/// alike), by start, those with a timestamp by time; and which services'
/// samples of a kind carry links, or threads, at all (their runtime says
/// which samples are a span's, or its thread's: a span with none had none).
pub(super) struct Index<'a> {
    pub(super) by_span: Fast<(u64, ProfileKind), Arc<Code>>,
    /// The windows `(from, to, code)` by start, and the longest window.
    pub(super) windows: HashMap<Of<'a>, Windows>,
    /// The samples taken at an instant, by time.
    pub(super) instants: HashMap<Of<'a>, Vec<&'a Sample>>,
    pub(super) linked: HashMap<&'a str, HashSet<ProfileKind>>,
    pub(super) threaded: HashMap<&'a str, HashSet<ProfileKind>>,
}

impl<'a> Index<'a> {
    pub(super) fn of(samples: &'a VecDeque<(Sample, usize)>, traces: &[TraceRow]) -> Index<'a> {
        let critical = || {
            traces
                .iter()
                .flat_map(|t| t.spans.iter().filter(|s| s.critical))
        };
        let spans: std::collections::HashSet<u64, foldhash::fast::RandomState> = traces
            .iter()
            .flat_map(|t| t.spans.iter().map(|s| s.span_id))
            .collect();
        let services: HashSet<&str> = critical().map(|s| &*s.service).collect();
        let mut by_span: Fast<(u64, ProfileKind), Code> = Fast::default();
        let mut windows: HashMap<(Of<'a>, u64, u64), Code> = HashMap::new();
        let mut instants: HashMap<Of<'a>, Vec<&'a Sample>> = HashMap::new();
        let mut linked: HashMap<&str, HashSet<ProfileKind>> = HashMap::new();
        let mut threaded: HashMap<&str, HashSet<ProfileKind>> = HashMap::new();
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
    pub(super) fn gather(
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
pub(super) struct Processes {
    pub(super) root: Vec<usize>,
    pub(super) own: HashMap<usize, f64>,
    pub(super) on_thread: Vec<Vec<(u64, u64)>>,
}

impl Processes {
    pub(super) fn of(t: &TraceRow) -> Processes {
        let root: Vec<usize> = (0..t.spans.len()).map(|i| local_root(t, i)).collect();
        let mut own: HashMap<usize, f64> = HashMap::new();
        for (i, s) in t.spans.iter().enumerate().filter(|(_, s)| s.critical) {
            *own.entry(root[i]).or_default() += s.self_ms;
        }
        let mut on_thread = vec![Vec::new(); t.spans.len()];
        for (j, s) in t.spans.iter().enumerate() {
            let Some(p) = s.parent else { continue };
            let thread = s.thread_name.as_deref();
            if thread.is_some()
                && t.spans[p].service == s.service
                && t.spans[p].thread_name.as_deref() == thread
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
pub(super) fn span_time(t: &TraceRow, i: usize) -> (u64, u64) {
    let s = &t.spans[i];
    let start = t.start_ns.saturating_add((s.start_ms * 1e6) as u64);
    (start, start.saturating_add((s.duration_ms * 1e6) as u64))
}

/// What the samples of `kind` say of span `i`, by the best join that finds
/// some.
pub(super) fn span_code(
    t: &TraceRow,
    i: usize,
    p: &Processes,
    index: &Index<'_>,
    kind: ProfileKind,
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
        return told(JoinedBy::Span, code, 1.0);
    }
    // (b) The local root of its process: its samples, weighed by the share
    // of the process's critical self time this span holds.
    let root = p.root[i];
    if root != i {
        if let Some(code) = index.by_span.get(&(t.spans[root].span_id, kind)) {
            let own = p.own.get(&root).copied().unwrap_or(0.0);
            let weight = if own > 0.0 { s.self_ms / own } else { 0.0 };
            if let Some(x) = told(JoinedBy::LocalRoot, code, weight) {
                return Some(x);
            }
        }
    }
    // Only where the service's samples of this kind name no span (where
    // they do, this span had none).
    let has = |m: &HashMap<&str, HashSet<ProfileKind>>| {
        m.get(&*s.service).is_some_and(|k| k.contains(&kind))
    };
    if has(&index.linked) {
        return None;
    }
    // (c) Its thread over its time, less its children's on the same thread:
    // where the service's samples name threads, a span's thread with none
    // had none.
    if let Some(thread) = s.thread_name.as_deref().filter(|_| has(&index.threaded)) {
        let holes = &p.on_thread[i];
        let (code, w) = index.gather((&s.service, kind, thread), start, end, holes)?;
        return told(JoinedBy::Thread, &code, w);
    }
    // (d) Its service over its time, weighed by the overlap.
    let (code, w) = index.gather((&s.service, kind, ""), start, end, &[])?;
    told(JoinedBy::Time, &code, w)
}

/// The span that began span `i`'s process's part of the trace: its
/// nearest ancestor of the same service whose parent is another service's
/// (or none).
pub(super) fn local_root(t: &TraceRow, mut i: usize) -> usize {
    while let Some(p) = t.spans[i].parent {
        if t.spans[p].service != t.spans[i].service {
            break;
        }
        i = p;
    }
    i
}

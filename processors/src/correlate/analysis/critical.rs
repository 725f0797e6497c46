//! The critical path of a trace, as Jaeger UI computes it (and as Uber's
//! CRISP does): start at the root, recurse into the last-finishing child,
//! then walk back through the children that finished before the returning
//! child started. Children that start after their parent ended are dropped
//! (with their subtrees); children that overflow their parent are clipped
//! to it. Iterative, so a 100,000-span chain does not exhaust the stack.

/// How much a child may overlap the next one and still count as sequential
/// (ns; and at most a tenth of the child's own duration).
const OVERLAP_NS: u64 = 1_000_000;

/// A span as the algorithm sees it.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    /// Start (ns).
    pub start: u64,
    /// End (ns).
    pub end: u64,
    /// Index of the parent in the same slice, when it is in the trace.
    pub parent: Option<usize>,
}

/// A stretch of time during which `span` was what the request waited on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section {
    /// Index of the span.
    pub span: usize,
    /// Start (ns).
    pub start: u64,
    /// End (ns).
    pub end: u64,
}

/// The root the path starts from: the parentless span that ends last
/// (ties: the longest). `None` for an empty trace.
pub fn root(nodes: &[Node]) -> Option<usize> {
    (0..nodes.len())
        .filter(|&i| nodes[i].parent.is_none())
        .max_by_key(|&i| (nodes[i].end, nodes[i].end.saturating_sub(nodes[i].start)))
}

/// The critical path from `root`, latest section first, and each span's
/// self time on it (ns; 0 off the path).
pub fn critical_path(nodes: &[Node], root: usize) -> (Vec<Section>, Vec<u64>) {
    let n = nodes.len();
    // Sanitized times: clipped to the parent, top-down. `alive` is false for
    // spans dropped because they start after their parent ended.
    // Children in one array, each span's a contiguous range (no allocation a span).
    let mut first = vec![0usize; n + 1];
    for (i, node) in nodes.iter().enumerate() {
        if let Some(p) = node.parent.filter(|&p| p < n && p != i) {
            first[p + 1] += 1;
        }
    }
    for i in 0..n {
        first[i + 1] += first[i];
    }
    let mut flat = vec![0usize; first[n]];
    let mut fill = first.clone();
    for (i, node) in nodes.iter().enumerate() {
        if let Some(p) = node.parent.filter(|&p| p < n && p != i) {
            flat[fill[p]] = i;
            fill[p] += 1;
        }
    }
    let mut start: Vec<u64> = nodes.iter().map(|x| x.start).collect();
    let mut end: Vec<u64> = nodes.iter().map(|x| x.end.max(x.start)).collect();
    let mut alive = vec![false; n];
    let mut stack = vec![root];
    alive[root] = true;
    while let Some(i) = stack.pop() {
        for &c in &flat[first[i]..first[i + 1]] {
            if alive[c] {
                continue; // a cycle in bad data: visit once
            }
            if start[c] >= end[i] && !(start[c] == end[i] && end[c] == end[i]) {
                continue; // starts after the parent ended: dropped with its subtree
            }
            start[c] = start[c].max(start[i]);
            end[c] = end[c].min(end[i]).max(start[c]);
            alive[c] = true;
            stack.push(c);
        }
    }
    // Live children by end, for the last-finishing search.
    let mut len = vec![0usize; n];
    for i in 0..n {
        let seg = &mut flat[first[i]..first[i + 1]];
        let mut k = 0;
        for j in 0..seg.len() {
            if alive[seg[j]] {
                seg[k] = seg[j];
                k += 1;
            }
        }
        seg[..k].sort_unstable_by_key(|&x| end[x]);
        len[i] = k;
    }
    let children = |i: usize| &flat[first[i]..first[i] + len[i]];
    let mut sections = Vec::new();
    let mut self_time = vec![0u64; n];
    // (span, the returning child's position among the span's children (by
    // end) and its start), when walking back after a child.
    let mut work: Vec<(usize, Option<(usize, u64)>)> = vec![(root, None)];
    while let Some((span, returning)) = work.pop() {
        let section_end = returning.map_or(end[span], |(_, s)| s);
        // The last child to finish by `section_end`, before the returning
        // child in end order. Jaeger UI asks for strictly before; a call
        // that ends exactly when the next one starts is sequential, so it
        // counts here (back-to-back calls are common at ms resolution).
        let limit = returning.map_or(children(span).len(), |(pos, _)| pos);
        // Within a millisecond counts as finished before: SDKs that take a
        // span's start from a millisecond clock (Node.js) make a call that
        // began right after the previous one ended look like it overlapped.
        let lfc = children(span)[..limit]
            .iter()
            .enumerate()
            .rev()
            .find(|(_, &c)| {
                let tol = OVERLAP_NS.min(end[c].saturating_sub(start[c]) / 10);
                end[c] <= section_end.saturating_add(tol)
            })
            .map(|(pos, &c)| (pos, c));
        match lfc {
            Some((pos, c)) => {
                end[c] = end[c].min(section_end);
                start[c] = start[c].min(end[c]);
                if end[c] < section_end {
                    sections.push(Section {
                        span,
                        start: end[c],
                        end: section_end,
                    });
                    self_time[span] += section_end - end[c];
                }
                // Walk back in this span once the child's subtree is done.
                work.push((span, Some((pos, start[c]))));
                work.push((c, None));
            }
            None => {
                let s = start[span].min(section_end);
                if s < section_end {
                    sections.push(Section {
                        span,
                        start: s,
                        end: section_end,
                    });
                    self_time[span] += section_end - s;
                }
            }
        }
    }
    (sections, self_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(start: u64, end: u64, parent: Option<usize>) -> Node {
        Node { start, end, parent }
    }

    #[test]
    fn sequential_and_parallel_children() {
        // root 0..100; A 10..40; B 20..90 (parallel with A, finishes last); C 45..60 under B.
        let nodes = [
            node(0, 100, None),
            node(10, 40, Some(0)),
            node(20, 90, Some(0)),
            node(45, 60, Some(2)),
        ];
        let r = root(&nodes).expect("root");
        assert_eq!(r, 0);
        let (_, st) = critical_path(&nodes, r);
        // root: 90..100 and 0..20 (A ended at 40, not before B's start 20: off the path).
        assert_eq!(st[0], 10 + 20);
        assert_eq!(st[1], 0, "A overlaps B, which finished later: not critical");
        // B: 60..90 and 20..45.
        assert_eq!(st[2], 30 + 25);
        assert_eq!(st[3], 15);
        assert_eq!(
            st.iter().sum::<u64>(),
            100,
            "the path covers the root's duration"
        );
    }

    #[test]
    fn sequential_children_are_both_critical() {
        let nodes = [
            node(0, 100, None),
            node(10, 40, Some(0)),
            node(50, 90, Some(0)),
        ];
        let (_, st) = critical_path(&nodes, 0);
        assert_eq!(st, vec![10 + 10 + 10, 30, 40]);
    }

    #[test]
    fn back_to_back_calls_are_both_critical_and_zero_length_ones_terminate() {
        // B starts exactly when A ends.
        let nodes = [
            node(0, 100, None),
            node(10, 60, Some(0)),
            node(60, 90, Some(0)),
        ];
        let (_, st) = critical_path(&nodes, 0);
        assert_eq!(st, vec![10 + 10, 50, 30]);
        // Zero-length children at the same instant.
        let nodes = [node(0, 10, None), node(5, 5, Some(0)), node(5, 5, Some(0))];
        let (_, st) = critical_path(&nodes, 0);
        assert_eq!(st.iter().sum::<u64>(), 10);
    }

    #[test]
    fn overflowing_children_are_clipped_and_late_ones_dropped() {
        // Child 1 overflows the root's end; child 2 starts after it ended.
        let nodes = [
            node(0, 100, None),
            node(50, 150, Some(0)),
            node(120, 130, Some(0)),
            node(125, 128, Some(2)),
        ];
        let (_, st) = critical_path(&nodes, 0);
        assert_eq!(st[1], 50, "clipped to 50..100");
        assert_eq!(st[2], 0);
        assert_eq!(st[3], 0);
        assert_eq!(st[0], 50);
    }

    #[test]
    fn deep_chain_does_not_overflow_the_stack() {
        let n = 100_000;
        let nodes: Vec<Node> = (0..n)
            .map(|i| {
                node(
                    i as u64,
                    (2 * n - i) as u64,
                    if i == 0 { None } else { Some(i - 1) },
                )
            })
            .collect();
        let (_, st) = critical_path(&nodes, 0);
        assert_eq!(st.iter().sum::<u64>(), 2 * n as u64);
        assert_eq!(st[n - 1], 2, "the leaf");
    }

    #[test]
    fn root_is_the_latest_ending_parentless_span() {
        let nodes = [node(5, 10, None), node(0, 100, None), node(1, 2, Some(1))];
        assert_eq!(root(&nodes), Some(1));
        assert_eq!(root(&[]), None);
    }
}

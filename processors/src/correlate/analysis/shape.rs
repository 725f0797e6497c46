//! What the layout of a trace says when its attributes do not: the
//! inferences that let root-cause rules work on what stock OpenTelemetry
//! instrumentation really emits.
//!
//! - **Orphans**: a span whose parent never arrived joins the span of its
//!   service that was running when it started.
//! - **Calls given back to their handler**: a leaf internal span (Express's
//!   `request handler`) that contains sibling calls in time becomes their
//!   parent, so the calls stay on the critical path.
//! - **Clock skew**: a server span that does not fit inside its client
//!   parent (hosts' clocks disagree) is shifted, with its subtree, to the
//!   middle of the parent, as Jaeger's skew adjuster does.
//! - **Cache-aside misses**: stock Redis/Memcached instrumentations never say
//!   hit or miss (`db.statement` is `GET ?`). Under one parent, a cache read
//!   followed by a non-cache read and then a cache write is a miss.
//! - **Retries**: sequential calls to the same peer and operation under one
//!   parent, at least one of which failed before the last (explicit retry
//!   loops), or several server spans under one client span (urllib3's
//!   `Retry`, Envoy retries), whether or not `http.request.resend_count` is
//!   set. A failed attempt followed by a successful one is *recovered*.
//! - **Getting a connection**: a database span that sent no statement (no
//!   operation, no query text) followed, under the same parent, by a
//!   statement to the same database system spent its time getting the
//!   connection that statement ran on: a pool's checkout. SQLAlchemy's
//!   instrumentation writes the checkout so, as `connect`.
//! - **Queueing in the callee**: a client span whose server child started
//!   late: the request waited in the callee's accept queue or worker pool.
//! - **Waiting on a consumer**: a consumer span that starts after its
//!   producer ended (the message waited in the topic).
//! - **Client 4xx**: HTTP client instrumentations mark a 4xx (a 429) ERROR;
//!   it is the server's answer, not where an error began.

use super::critical::Node;
use crate::correlate::model::trace::{SpanKind, SpanStatus};
use crate::correlate::model::SpanRow;

/// Cache systems whose reads and writes are recognised.
const CACHES: [&str; 5] = ["redis", "valkey", "memcached", "keydb", "dragonfly"];
/// Cache read commands.
const CACHE_READS: [&str; 10] = [
    "GET", "MGET", "HGET", "HMGET", "HGETALL", "GETEX", "EXISTS", "GETS", "SMEMBERS", "LRANGE",
];
/// Cache write commands.
const CACHE_WRITES: [&str; 10] = [
    "SET", "SETEX", "PSETEX", "SETNX", "MSET", "HSET", "HMSET", "ADD", "REPLACE", "CAS",
];

/// Children of each span, by start time.
pub fn children(nodes: &[Node]) -> Vec<Vec<usize>> {
    let mut ch: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for (i, n) in nodes.iter().enumerate() {
        if let Some(p) = n.parent.filter(|&p| p != i && p < nodes.len()) {
            ch[p].push(i);
        }
    }
    for c in &mut ch {
        c.sort_by_key(|&i| (nodes[i].start, nodes[i].end));
    }
    ch
}

/// Spans in an order where every parent comes before its children (those
/// reachable from a parentless span; spans in a parent cycle are left out).
pub fn top_down(nodes: &[Node], children: &[Vec<usize>]) -> Vec<usize> {
    let mut seen = vec![false; nodes.len()];
    let mut order = Vec::with_capacity(nodes.len());
    let mut stack: Vec<usize> = (0..nodes.len())
        .filter(|&i| nodes[i].parent.is_none())
        .collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        order.push(i);
        stack.extend(children[i].iter().copied().filter(|&c| !seen[c]));
    }
    order
}

/// A span whose parent never arrived (an instrumentation that dropped or
/// never ended it) is attached to the span of the same service that was
/// running when it started (the latest-started one), so the fragment below
/// it stays part of the trace. Returns how many were attached.
pub fn attach_orphans(nodes: &mut [Node], rows: &mut [SpanRow]) -> usize {
    let n = nodes.len();
    let mut attached = 0;
    for i in 0..n {
        if nodes[i].parent.is_some() || rows[i].parent_id == 0 {
            continue;
        }
        let below_i = |mut j: usize, nodes: &[Node]| {
            let mut steps = 0;
            loop {
                if j == i {
                    return true;
                }
                match nodes[j].parent {
                    Some(p) if steps <= n => {
                        j = p;
                        steps += 1;
                    }
                    _ => return false,
                }
            }
        };
        let host = (0..n)
            .filter(|&j| {
                j != i
                    && rows[j].service == rows[i].service
                    && nodes[j].start <= nodes[i].start
                    && nodes[i].start <= nodes[j].end
                    && !below_i(j, nodes)
            })
            .max_by_key(|&j| nodes[j].start);
        if let Some(j) = host {
            nodes[i].parent = Some(j);
            rows[i].parent_id = rows[j].span_id;
            attached += 1;
        }
    }
    attached
}

/// Give calls back to the span they ran in. Instrumentations that wrap a
/// handler in a span of their own without making it the active context
/// (Express's `request handler`, many middleware spans) leave the handler's
/// database and HTTP calls as its siblings: the handler span then covers
/// them in time, the critical path runs into it (it ends last) and the calls
/// fall off the path. A leaf internal span that contains siblings in time
/// becomes their parent. Returns how many spans moved.
pub fn adopt_contained(nodes: &mut [Node], rows: &mut [SpanRow]) -> usize {
    let ch = children(nodes);
    let tol = 1_000_000u64;
    let mut moved = 0;
    for kids in &ch {
        for &w in kids {
            if rows[w].kind != SpanKind::Internal || !ch[w].is_empty() {
                continue;
            }
            let (ws, we) = (nodes[w].start, nodes[w].end);
            if we <= ws {
                continue;
            }
            for &c in kids {
                if c == w || rows[c].kind == SpanKind::Server {
                    continue;
                }
                let inside = nodes[c].start + tol >= ws && nodes[c].end <= we + tol;
                // Not another wrapper of the same length (the outer one wins).
                let smaller = nodes[c].end - nodes[c].start < we - ws;
                if inside && smaller {
                    nodes[c].parent = Some(w);
                    rows[c].parent_id = rows[w].span_id;
                    moved += 1;
                }
            }
        }
    }
    moved
}

/// Shift server spans that do not fit in their client parent (clock skew
/// between hosts), with their subtrees, to the middle of the parent; one
/// that overhangs by 2 ms or less only just inside.
/// Returns how many were shifted.
pub fn fix_skew(nodes: &mut [Node], rows: &[SpanRow], children: &[Vec<usize>]) -> usize {
    let order = top_down(nodes, children);
    let mut shifted = 0;
    for &i in &order {
        let Some(p) = nodes[i].parent else { continue };
        if rows[i].kind != SpanKind::Server || rows[p].kind != SpanKind::Client {
            continue;
        }
        let (ps, pe) = (nodes[p].start, nodes[p].end);
        let (cs, ce) = (nodes[i].start, nodes[i].end);
        let (pd, cd) = (pe.saturating_sub(ps), ce.saturating_sub(cs));
        if (cs >= ps && ce <= pe) || cd > pd {
            continue;
        }
        // An overhang of 2 ms or less is the instrumentations' rounding
        // (Node starts spans on a millisecond clock and ends them on a
        // finer one), not skew: move it just inside, keeping where it
        // began (a late start is a queue, not skew).
        let overhang = ps.saturating_sub(cs).max(ce.saturating_sub(pe));
        let target = if overhang <= 2_000_000 {
            if cs < ps {
                ps
            } else {
                cs - (ce - pe)
            }
        } else {
            ps + (pd - cd) / 2
        };
        let delta = i128::from(target) - i128::from(cs);
        // The subtree moves with it.
        let mut stack = vec![i];
        let mut guard = 0usize;
        while let Some(x) = stack.pop() {
            guard += 1;
            if guard > nodes.len() {
                break;
            }
            let mv = |t: u64| u64::try_from((i128::from(t) + delta).max(0)).unwrap_or(t);
            nodes[x].start = mv(nodes[x].start);
            nodes[x].end = mv(nodes[x].end);
            stack.extend(children[x].iter().copied());
        }
        shifted += 1;
    }
    shifted
}

fn op_upper(r: &SpanRow) -> String {
    r.db_operation
        .as_deref()
        .unwrap_or(r.name.as_str())
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase()
}

fn cache_system(r: &SpanRow) -> Option<&str> {
    r.db_system
        .as_deref()
        .filter(|s| CACHES.iter().any(|c| s.eq_ignore_ascii_case(c)))
}

fn is_cache_read(r: &SpanRow) -> bool {
    cache_system(r).is_some() && CACHE_READS.contains(&op_upper(r).as_str())
}

fn is_cache_write(r: &SpanRow) -> bool {
    cache_system(r).is_some() && CACHE_WRITES.contains(&op_upper(r).as_str())
}

/// A span that failed: ERROR status (not a client 4xx), a 5xx, or an error type.
pub fn failed(r: &SpanRow) -> bool {
    (r.status == SpanStatus::Error && !r.client_error)
        || r.http_status.is_some_and(|s| s >= 500)
        || (r.kind == SpanKind::Client && r.http_status == Some(429))
        || r.error_type.is_some()
}

/// What a failed attempt says went wrong, for a summary.
pub fn failure_text(r: &SpanRow) -> String {
    if let Some(s) = r.http_status.filter(|s| *s >= 400) {
        return s.to_string();
    }
    if let Some(e) = r.error_type.as_deref().or(r.exception_type.as_deref()) {
        return e.to_string();
    }
    if !r.status_message.is_empty() {
        return r.status_message.chars().take(60).collect();
    }
    "error".to_string()
}

/// Run every inference on the spans of one trace (times already sanitized).
pub fn infer(rows: &mut [SpanRow], nodes: &[Node], children: &[Vec<usize>]) {
    for r in rows.iter_mut() {
        r.client_error = r.kind == SpanKind::Client
            && r.status == SpanStatus::Error
            && r.http_status.is_some_and(|s| (400..500).contains(&s))
            && r.error_type.is_none()
            && r.exception_type.is_none();
    }
    for (p, kids) in children.iter().enumerate() {
        cache_aside(rows, nodes, children, kids);
        pool_waits(rows, nodes, kids);
        attempts_and_queueing(rows, nodes, p, kids);
        sequential_retries(rows, nodes, kids);
        consumer_waits(rows, nodes, p, kids);
    }
    recovered_answers(rows, children);
}

/// 1 ms: instrumentations' timestamps are coarse.
const TOL: u64 = 1_000_000;

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Cache-aside: read, then a non-cache read, then a write, under one parent.
fn cache_aside(rows: &mut [SpanRow], nodes: &[Node], children: &[Vec<usize>], kids: &[usize]) {
    for (k, &c) in kids.iter().enumerate() {
        if !is_cache_read(&rows[c]) || rows[c].cache_hit.is_some() {
            continue;
        }
        let sys = cache_system(&rows[c]);
        let fallback = kids[k + 1..].iter().copied().find(|&d| {
            nodes[d].start + TOL >= nodes[c].end
                && cache_system(&rows[d]).is_none()
                && (rows[d].kind == SpanKind::Client
                    || rows[d].db_system.is_some()
                    || !children[d].is_empty())
        });
        let Some(d) = fallback else { continue };
        let write = kids.iter().copied().any(|w| {
            nodes[w].start + TOL >= nodes[d].end
                && is_cache_write(&rows[w])
                && cache_system(&rows[w])
                    .zip(sys)
                    .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b))
        });
        if write {
            rows[c].cache_hit = Some(false);
            rows[c].cache_inferred = true;
        }
    }
}

/// Getting a connection: a statement-less database span, then a statement
/// to the same system.
fn pool_waits(rows: &mut [SpanRow], nodes: &[Node], kids: &[usize]) {
    for (k, &c) in kids.iter().enumerate() {
        let Some(sys) = rows[c].db_system.as_deref() else {
            continue;
        };
        if rows[c].db_operation.is_some() || rows[c].kind == SpanKind::Server {
            continue;
        }
        let then_queried = kids[k + 1..].iter().any(|&d| {
            nodes[d].start + TOL >= nodes[c].end
                && rows[d].db_operation.is_some()
                && rows[d]
                    .db_system
                    .as_deref()
                    .is_some_and(|s| s.eq_ignore_ascii_case(sys))
        });
        rows[c].pool_wait |= then_queried;
    }
}

/// Retries: several server spans under one client span; and queueing in
/// the callee: the (single) server child began late.
fn attempts_and_queueing(rows: &mut [SpanRow], nodes: &[Node], p: usize, kids: &[usize]) {
    if rows[p].kind == SpanKind::Client {
        let servers: Vec<usize> = kids
            .iter()
            .copied()
            .filter(|&c| rows[c].kind == SpanKind::Server)
            .collect();
        if servers.len() >= 2 {
            mark_attempts(rows, nodes, &servers, Some(p));
        }
        if let [s] = servers.as_slice() {
            let pre = kids
                .iter()
                .filter(|&&c| c != *s && nodes[c].end <= nodes[*s].start)
                .map(|&c| nodes[c].end)
                .max()
                .unwrap_or(nodes[p].start)
                .max(nodes[p].start);
            let q = nodes[*s].start.saturating_sub(pre);
            if q > TOL {
                rows[p].queue_ms = Some(ms(q));
            }
        }
    }
}

/// Retries: sequential calls to the same peer and operation.
fn sequential_retries(rows: &mut [SpanRow], nodes: &[Node], kids: &[usize]) {
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for &c in kids {
        if rows[c].kind != SpanKind::Client {
            continue;
        }
        let same =
            |a: &SpanRow, b: &SpanRow| a.server_address == b.server_address && a.name == b.name;
        match groups.iter_mut().find(|g| {
            g.last()
                .is_some_and(|&l| same(&rows[l], &rows[c]) && nodes[c].start + TOL >= nodes[l].end)
        }) {
            Some(g) => g.push(c),
            None => groups.push(vec![c]),
        }
    }
    for g in groups {
        if g.len() >= 2 {
            mark_attempts(rows, nodes, &g, None);
        }
    }
}

/// Waiting on a consumer.
fn consumer_waits(rows: &mut [SpanRow], nodes: &[Node], p: usize, kids: &[usize]) {
    for &c in kids {
        let consumer = rows[c].kind == SpanKind::Consumer
            || (rows[c].destination.is_some()
                && ["process", "receive", "consume"]
                    .iter()
                    .any(|w| rows[c].name.to_ascii_lowercase().contains(w)));
        if consumer
            && matches!(
                rows[p].kind,
                SpanKind::Producer | SpanKind::Client | SpanKind::Internal
            )
        {
            let from = if nodes[p].end <= nodes[c].start {
                nodes[p].end
            } else {
                nodes[p].start
            };
            rows[c].async_wait_ms = Some(ms(nodes[c].start.saturating_sub(from)));
        }
    }
}

/// The spans under a recovered attempt (the server that answered it 503,
/// its own failed calls) failed in an attempt the client recovered from:
/// recovered too, so that none of them is taken for where the request's
/// failure began.
fn recovered_answers(rows: &mut [SpanRow], children: &[Vec<usize>]) {
    let mut stack: Vec<usize> = (0..rows.len()).filter(|&i| rows[i].recovered).collect();
    let mut seen = vec![false; rows.len()];
    while let Some(p) = stack.pop() {
        for &c in children.get(p).map_or(&[][..], Vec::as_slice) {
            if !std::mem::replace(&mut seen[c], true) {
                rows[c].recovered |= failed(&rows[c]);
                stack.push(c);
            }
        }
    }
}

/// Mark spans as attempts of one call when one of them failed before the last.
fn mark_attempts(rows: &mut [SpanRow], nodes: &[Node], g: &[usize], holder: Option<usize>) {
    let Some((&last, before)) = g.split_last() else {
        return;
    };
    let failed_before = before.iter().filter(|&&i| failed(&rows[i])).count();
    if failed_before == 0 {
        return; // calls to the same peer, none failed before the last: not retries
    }
    let failed_all = g.iter().filter(|&&i| failed(&rows[i])).count();
    let window = match holder {
        Some(h) => nodes[h].end.saturating_sub(nodes[h].start),
        None => nodes[last].end.saturating_sub(nodes[g[0]].start),
    } as f64
        / 1e6;
    // The trigger: the most frequent failure of the attempts.
    let mut texts: Vec<String> = g
        .iter()
        .filter(|&&i| failed(&rows[i]))
        .map(|&i| failure_text(&rows[i]))
        .collect();
    texts.sort();
    let trigger = texts
        .chunk_by(|a, b| a == b)
        .max_by_key(|c| c.len())
        .and_then(|c| c.first().cloned());
    let last_ok = !failed(&rows[last]);
    // The backoff: the mean gap between one attempt's end and the next's start.
    let gaps: Vec<f64> = g
        .windows(2)
        .map(|w| nodes[w[1]].start.saturating_sub(nodes[w[0]].end) as f64 / 1e6)
        .collect();
    let gap = (!gaps.is_empty()).then(|| gaps.iter().sum::<f64>() / gaps.len() as f64);
    let n = i64::try_from(g.len()).unwrap_or(i64::MAX);
    let members: Vec<usize> = g.iter().copied().chain(holder).collect();
    for (k, &i) in members.iter().enumerate() {
        let r = &mut rows[i];
        r.attempt = Some(i64::try_from(k + 1).unwrap_or(i64::MAX).min(n));
        r.attempts = Some(n.max(r.resend_count.map_or(0, |c| c + 1)));
        r.failed_attempts = Some(i64::try_from(failed_all).unwrap_or(i64::MAX));
        r.retry_window_ms = Some(window);
        r.retry_gap_ms = gap;
        r.retry_trigger = trigger.clone();
        r.recovered = last_ok && failed(r) && Some(i) != holder;
    }
    if let Some(h) = holder {
        rows[h].attempt = None;
        // The client span of several server attempts failed only if the last did.
        rows[h].recovered = last_ok && failed(&rows[h]);
    }
}

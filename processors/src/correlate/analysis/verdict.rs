//! The verdict of a trace: from its findings, the cause that explains its
//! failure or the most of its critical-path time, and the span at fault.

use super::peers::Peers;
use crate::correlate::model::finding::CULPRIT_KINDS;
use crate::correlate::model::trace::{parse_hex16, Hex16};
use crate::correlate::model::{Finding, SpanRow, TraceRow, Verdict};

/// Where an error began, or, when the call that failed spent its time
/// waiting on a callee (a timeout), the innermost server span below it that
/// still took half of that time.
fn slowest_below(t: &TraceRow, e: usize) -> usize {
    // The spans below `e`: one pass over the parent links, parents first.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); t.spans.len()];
    for (i, s) in t.spans.iter().enumerate() {
        if let Some(p) = s.parent {
            children[p].push(i);
        }
    }
    let mut below = Vec::new();
    let mut stack = vec![e];
    while let Some(i) = stack.pop() {
        below.push(i);
        stack.extend(&children[i]);
    }
    below
        .into_iter()
        .filter(|&i| {
            i != e
                && t.spans[i].kind == "server"
                && t.spans[i].duration_ms >= 0.5 * t.spans[e].duration_ms
        })
        // The innermost (deepest) server span that still holds half of the time.
        .max_by_key(|&i| (t.spans[i].depth, i))
        .unwrap_or(e)
}

/// The time a finding explains when its rule did not say: the critical
/// time of the subtree of the span it blames (or of the trace's culprit).
fn default_explained(t: &TraceRow, f: &Finding) -> f64 {
    let span = f
        .culprit_span_id
        .as_deref()
        .and_then(parse_hex16)
        .and_then(|id| t.spans.iter().position(|s| s.span_id == id))
        .unwrap_or(t.culprit);
    t.spans[span].path_ms
}

/// Pick the verdict of a trace from its findings: the cause is the finding
/// that explains the request's failure, else the one that accounts for the
/// most critical-path time (in steps of a tenth of the trace: nearly equal
/// counts as equal), strength of evidence (confidence) breaking ties. A
/// finding that explains less than `min_share` of the trace and not its
/// failure, or less than `min_share.1` ms, is only an alternative. Confidence is scaled by the share of the
/// time a finding explains (a failure's cause keeps its own).
pub fn verdict(
    t: &TraceRow,
    findings: Option<&Vec<Finding>>,
    min_share: (f64, f64),
    peers: Option<&Peers>,
) -> Verdict {
    let dur = t.duration_ms.max(1e-6);
    let mut all: Vec<Finding> = findings.cloned().unwrap_or_default();
    for f in &mut all {
        if !f.explained_ms.is_finite() {
            f.explained_ms = default_explained(t, f);
        }
        f.explained_ms = f.explained_ms.clamp(0.0, dur);
        f.explains_failure &= t.failed;
        if !f.explains_failure {
            let share = f.explained_ms / dur;
            f.confidence *= 0.5 + 0.5 * (share / 0.6).min(1.0);
        }
        f.confidence = (f.confidence * 1000.0).round() / 1000.0;
    }
    let eligible = |f: &Finding| {
        f.explains_failure || (f.explained_ms / dur >= min_share.0 && f.explained_ms >= min_share.1)
    };
    // A retry sequence that failed and spans most of the trace is the story
    // of that failure: it outranks its own trigger (the 503s, the timeouts),
    // which its summary names.
    // `slow_dependency` names a span, not a mechanism: a mechanism that
    // explains nearly as much (within three tenths) is the better answer.
    let step = |f: &Finding| {
        let s = (f.explained_ms / dur * 10.0).round() as i64;
        if f.explains_failure && f.cause == "retry_storm" && f.explained_ms / dur >= 0.5 {
            11
        } else if f.cause == "slow_dependency" && !f.user {
            s - 3
        } else {
            s
        }
    };
    all.sort_by(|a, b| {
        eligible(b)
            .cmp(&eligible(a))
            .then(b.explains_failure.cmp(&a.explains_failure))
            .then(step(b).cmp(&step(a)))
            .then(b.confidence.total_cmp(&a.confidence))
            .then(b.user.cmp(&a.user))
            .then(b.explained_ms.total_cmp(&a.explained_ms))
    });
    // One finding per cause: its best.
    let mut seen = std::collections::HashSet::new();
    all.retain(|x| seen.insert(x.cause.clone()));
    let best = if all.first().is_some_and(eligible) {
        all.remove(0)
    } else {
        let c = t
            .spans
            .iter()
            .max_by(|a, b| a.self_ms.total_cmp(&b.self_ms))
            .unwrap_or(&t.spans[t.culprit]);
        Finding {
            rule: "none".into(),
            cause: "unknown".into(),
            confidence: 0.0,
            summary: format!(
                "no evidence explains it; the largest self time on the critical path is {} {} ({} ms of {} ms)",
                c.service,
                c.name,
                c.self_ms.round(),
                t.duration_ms.round()
            ),
            culprit_span_id: Some(Hex16::of(c.span_id).as_str().to_string()),
            culprit_service: None,
            culprit_kind: None,
            evidence: None,
            user: false,
            explained_ms: c.self_ms,
            explains_failure: false,
        }
    };
    // A failure's cause with no span of its own blames where the error began.
    let fallback = match t.error_origin {
        Some(e) if best.explains_failure => slowest_below(t, e),
        _ => t.culprit,
    };
    let culprit = best
        .culprit_span_id
        .as_ref()
        .and_then(|id| parse_hex16(id))
        .and_then(|id| t.spans.iter().position(|s| s.span_id == id))
        .unwrap_or(fallback);
    let mut best = best;
    if best.cause != "retry_storm" {
        if let Some(note) = retry_note(t) {
            best.summary.push_str(&note);
        }
    }
    let kind = best
        .culprit_kind
        .as_deref()
        .and_then(|k| CULPRIT_KINDS.iter().copied().find(|x| *x == k))
        .unwrap_or_else(|| default_kind(&best.cause, &t.spans[culprit]));
    let culprit_service = culprit_service(t, culprit, kind, best.culprit_service.as_deref(), peers);
    Verdict {
        best,
        alternatives: all,
        culprit,
        culprit_service,
        culprit_kind: kind,
    }
}

/// The kind of fault a cause is when its rule does not say.
pub fn default_kind(cause: &str, c: &SpanRow) -> &'static str {
    match cause {
        "rate_limited" => "limiter",
        "upstream_timeout"
        | "upstream_unavailable"
        | "circuit_open"
        | "retry_storm"
        | "tls_handshake" => "callee",
        // The accept queue of a callee; a pool or lock of the service's own.
        "queueing" if c.queue_ms.is_some() => "callee",
        "consumer_lag" => "consumer",
        "host_cpu_saturation"
        | "host_io_wait"
        | "host_memory_pressure"
        | "gpu_saturation"
        | "gpu_memory_pressure" => "host",
        "cache_miss_fallback"
        | "db_connection_saturation"
        | "db_lock_contention"
        | "inference_queueing"
        | "kv_cache_pressure"
        | "tokenizer_cpu" => "dependency",
        "slow_dependency" if dependency_name(c).is_some() => "dependency",
        "slow_dependency" if c.kind == "client" => "callee",
        _ => "service",
    }
}

/// A dependency's name: `peer.service`, else its `db.system` or
/// `messaging.system`.
pub fn dependency_name(c: &SpanRow) -> Option<&str> {
    c.peer_service
        .as_deref()
        .filter(|_| c.db_system.is_some() || c.messaging_system.is_some())
        .or(c.db_system.as_deref())
        .or(c.messaging_system.as_deref())
}

/// The service at fault, by the kind of fault and the span that shows it.
/// A callee is the innermost server span below the call that still holds
/// half its time (where the time went), else the service that answered the
/// call, else what the rule named (an upstream address, mapped to the
/// service seen serving it), else the call's address.
fn culprit_service(
    t: &TraceRow,
    c: usize,
    kind: &str,
    named: Option<&str>,
    peers: Option<&Peers>,
) -> String {
    let span = &t.spans[c];
    let named = named.map(str::trim).filter(|n| !n.is_empty() && *n != "-");
    let resolve = |n: &str| resolve_name(n, peers);
    match kind {
        "callee" | "limiter" => {
            if kind == "limiter" {
                if let Some(n) = named {
                    return resolve(n);
                }
            }
            if span.kind == "server" {
                // A server span whose own call failed (an entry span that
                // got the upstream's error): the callee of that call.
                if let Some(call) = failed_call_below(t, c) {
                    return callee_of(t, call, named, peers);
                }
                // The walk reached a callee below the entry: it is where
                // the time went. At the entry itself, what the gateway
                // named (its upstream) is the callee, when it names one.
                if c != t.entry && c != t.root {
                    return span.service.to_string();
                }
                return named.map_or_else(|| span.service.to_string(), resolve);
            }
            let inner = slowest_below(t, c);
            if inner != c && t.spans[inner].kind == "server" && span.kind == "client" {
                return t.spans[inner].service.to_string();
            }
            callee_of(t, c, named, peers)
        }
        "dependency" => named
            .map(resolve)
            .or_else(|| dependency_name(span).map(str::to_string))
            .or_else(|| span.callee.as_deref().map(str::to_string))
            .or_else(|| span.server_address.clone())
            .unwrap_or_else(|| span.service.to_string()),
        // service, host, consumer, gateway: the span's own service, unless
        // the rule named one.
        _ => named.map_or_else(|| span.service.to_string(), resolve),
    }
}

/// A name a rule gave (an address, a service), as the service seen serving
/// it when it is an address `peers` knows.
fn resolve_name(n: &str, peers: Option<&Peers>) -> String {
    peers
        .and_then(|p| p.resolve(n))
        .map_or_else(|| n.to_string(), |s| s.to_string())
}

/// The service a call reached or meant to: what the rule named (an upstream
/// address, mapped to the service seen serving it), else the service that
/// answered, else the address.
fn callee_of(t: &TraceRow, c: usize, named: Option<&str>, peers: Option<&Peers>) -> String {
    let span = &t.spans[c];
    if let Some(n) = named {
        let named = resolve_name(n, peers);
        // A gateway's upstream that answered with a server span of its own
        // was reached: the failure is further down, at this call.
        let reached = t
            .spans
            .iter()
            .any(|x| x.kind == "server" && *x.service == *named);
        if !reached || span.kind != "client" {
            return named;
        }
    }
    if let Some(x) = &span.callee {
        return x.to_string();
    }
    super::peers::address_of(span).unwrap_or_else(|| span.service.to_string())
}

/// The deepest failed client span below span `s` whose callee did not
/// answer with a server span of its own in the trace.
fn failed_call_below(t: &TraceRow, s: usize) -> Option<usize> {
    (0..t.spans.len())
        .filter(|&i| {
            let x = &t.spans[i];
            x.kind == "client"
                && super::shape::failed(x)
                && !x.recovered
                && x.depth > t.spans[s].depth
                && {
                    // Below `s`: walk the parent links up.
                    let mut p = x.parent;
                    let mut steps = 0;
                    while let Some(q) = p {
                        if q == s || steps > t.spans.len() {
                            break;
                        }
                        p = t.spans[q].parent;
                        steps += 1;
                    }
                    p == Some(s)
                }
        })
        .max_by_key(|&i| t.spans[i].depth)
}

/// What the client did about a failure that was not the problem itself:
/// "; the client retried 2 times, backing off 500 ms".
fn retry_note(t: &TraceRow) -> Option<String> {
    let s = t
        .spans
        .iter()
        .filter(|s| s.attempt == Some(1) && s.attempts.is_some_and(|n| n >= 2))
        .max_by_key(|s| s.attempts)?;
    let n = s.attempts? - 1;
    let times = if n == 1 { "once" } else { "" };
    let mut out = if n == 1 {
        format!("; the client retried {times}")
    } else {
        format!("; the client retried {n} times")
    };
    if let Some(g) = s.retry_gap_ms.filter(|g| *g >= 1.0) {
        out.push_str(&format!(", backing off {} ms", g.round()));
    }
    if s.recovered {
        out.push_str(", then succeeded");
    }
    Some(out)
}

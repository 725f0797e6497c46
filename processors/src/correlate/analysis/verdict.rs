//! The verdict of a trace: from its findings, the cause that explains its
//! failure or the most of its critical-path time, and the span at fault.

use crate::correlate::model::trace::{parse_hex16, Hex16};
use crate::correlate::model::{Finding, TraceRow, Verdict};

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
pub fn verdict(t: &TraceRow, findings: Option<&Vec<Finding>>, min_share: (f64, f64)) -> Verdict {
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
    Verdict {
        best,
        alternatives: all,
        culprit,
    }
}

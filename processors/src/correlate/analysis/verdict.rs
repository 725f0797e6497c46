//! The verdict of a trace: from its findings, the cause that explains its
//! failure or the most of its critical-path time, and the span at fault.

use super::chain::Chain;
use super::peers::Peers;
use crate::correlate::model::cause::CulpritKind;
use crate::correlate::model::cause::{Cause, Causes, UNKNOWN};
use crate::correlate::model::trace::SpanKind;
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
                && t.spans[i].kind == SpanKind::Server
                && t.spans[i].duration_ms >= 0.5 * t.spans[e].duration_ms
        })
        // The innermost (deepest) server span that still holds half of the time.
        .max_by_key(|&i| (t.spans[i].depth, i))
        .unwrap_or(e)
}

/// The span a finding names, when it names one the trace has.
fn span_of(t: &TraceRow, f: &Finding) -> Option<usize> {
    f.culprit_span_id
        .as_deref()
        .and_then(parse_hex16)
        .and_then(|id| t.spans.iter().position(|s| s.span_id == id))
}

/// Whether spans `a` and `b` are one call: the same span, attempts of one
/// retried call, or a call and the attempts (or callee) below it.
fn same_call(t: &TraceRow, a: usize, b: usize) -> bool {
    super::chain::same_attempt(t, a, b)
        || t.spans[a].parent == Some(b)
        || t.spans[b].parent == Some(a)
}

/// How much a failure finding closer to the response than the origin's
/// supports its cause: it saw the failure pass, not begin.
const CONSEQUENCE: f64 = 0.35;

/// The share of a trace's time from which a finding covers it fully.
const FULL_SHARE: f64 = 0.6;

/// A finding, placed and weighed.
struct Placed {
    f: Finding,
    /// The chain step it explains the failure at (0: the response).
    step: usize,
    /// What its cause is.
    cause: &'static Cause,
    /// A fallback cause ([`Cause::fallback`]).
    fallback: bool,
    /// Another finding at its step explains it ([`Cause::explains`]).
    shown: bool,
    /// The span it names.
    span: Option<usize>,
    /// Its support: its evidence's strength × how much of the failure or
    /// the time it covers.
    support: f64,
}

/// How much of a trace a finding must explain to be its cause (unless it
/// explains why the request failed): `min_explained_share` and
/// `min_explained`.
#[derive(Debug, Clone, Copy)]
pub struct Enough {
    /// A share of the trace's duration.
    pub share: f64,
    /// And a time (ms).
    pub ms: f64,
}

/// Pick the verdict of a trace from its findings.
///
/// A failed request is explained by its causal chain: of the findings that
/// explain the failure, the one at the step nearest its origin wins (a
/// gateway's 502 above a callee's refusal is the refusal's consequence); a
/// retry storm holds every failure inside its attempts; at one step, a
/// mechanism wins over a fallback, then the stronger support. Otherwise the
/// finding with the most support wins (the share of the time it explains,
/// up to [`FULL_SHARE`], × its evidence's strength). A finding that explains
/// less than `enough.share` of the trace and not its failure, or less than
/// `enough.ms`, is only an alternative.
///
/// The stated confidence is computed, never a rule's constant: the support
/// of each cause, its independent rules agreeing (1 − Π(1 − support)), times
/// its share of the support of all causes it does not itself explain.
pub fn verdict(
    t: &TraceRow,
    findings: Option<&Vec<Finding>>,
    enough: &Enough,
    peers: Option<&Peers>,
    causes: &Causes,
) -> Verdict {
    let dur = t.duration_ms.max(1e-6);
    let chain = Chain::of(t);
    let mut placed: Vec<Placed> = findings
        .into_iter()
        .flatten()
        .map(|f| place(t, &chain, f, peers, causes))
        .collect();
    mark_shown(t, &mut placed, enough);
    weigh(&mut placed, dur, enough);
    let eligible = |f: &Finding| {
        f.explains_failure || (f.explained_ms / dur >= enough.share && f.explained_ms >= enough.ms)
    };
    placed.sort_by(|a, b| {
        eligible(&b.f)
            .cmp(&eligible(&a.f))
            .then(b.f.explains_failure.cmp(&a.f.explains_failure))
            .then(b.step.cmp(&a.step))
            .then(a.shown.cmp(&b.shown))
            .then(b.support.total_cmp(&a.support))
            .then(b.f.user.cmp(&a.f.user))
            .then(b.f.explained_ms.total_cmp(&a.f.explained_ms))
    });
    let (placed, agreed) = agree(placed);
    let confidence = confidences(&placed);
    let reason = match placed.first() {
        Some(p) if eligible(&p.f) => reason(t, &chain, &placed),
        _ => "no finding explains enough of it".to_string(),
    };
    let mut all: Vec<Finding> = placed
        .into_iter()
        .zip(confidence)
        .map(|(p, c)| Finding {
            confidence: c,
            ..p.f
        })
        .collect();
    for (cause, _, rules) in &agreed {
        if rules.len() > 1 {
            if let Some(f) = all.iter_mut().find(|f| f.cause == *cause) {
                let also = format!("agreeing rules: {}", rules.join(", "));
                f.evidence = Some(match f.evidence.take() {
                    Some(e) if !e.is_empty() => format!("{e}; {also}"),
                    _ => also,
                });
            }
        }
    }
    let best = if all.first().is_some_and(eligible) {
        all.remove(0)
    } else {
        unknown(t)
    };
    conclude(t, best, all, reason, peers, causes)
}

/// A finding, placed on the trace's chain (see [`Placed`]).
fn place(
    t: &TraceRow,
    chain: &Chain,
    f: &Finding,
    peers: Option<&Peers>,
    causes: &Causes,
) -> Placed {
    let dur = t.duration_ms.max(1e-6);
    let mut f = f.clone();
    let span = span_of(t, &f);
    if !f.explained_ms.is_finite() {
        f.explained_ms = t.spans[span.unwrap_or(t.culprit)].path_ms;
    }
    f.explained_ms = f.explained_ms.clamp(0.0, dur);
    f.explains_failure &= t.failed;
    let bare = |i: usize| {
        let r = &t.spans[i];
        r.exception_type.is_none()
            && r.error_type.is_none()
            && r.grpc_status.is_none()
            && r.status_message.is_empty()
    };
    let cause = causes.get(&f.cause);
    let fallback = cause.fallback && !f.user;
    let line_at = f
        .at_span_id
        .as_deref()
        .and_then(parse_hex16)
        .and_then(|id| t.spans.iter().position(|s| s.span_id == id));
    let step = match span {
        Some(s) if f.explains_failure => {
            if cause.holds_retries && chain.through_retries(t, s) {
                chain.origin()
            } else if cause.status_only_at_response && bare(s) {
                // A status alone (a 5xx with no exception or message)
                // says that it failed, not where: the response's step.
                0
            } else {
                chain.step_of(t, s)
            }
        }
        // A finding of no span is a gateway's line: it sits at the
        // call it describes.
        // A gateway's line that names the call it answered sits there.
        None if f.explains_failure && line_at.is_some() => {
            line_at.map_or(0, |a| chain.step_of_line(t, a))
        }
        None if f.explains_failure => {
            let named = f.culprit_service.as_deref();
            let resolved = named.map(|n| resolve_name(n, peers));
            match (named, resolved.as_deref()) {
                (Some(n), Some(r)) if n != r => chain
                    .step_of_gateway(t, Some(r))
                    .max(chain.step_of_gateway(t, Some(n))),
                _ => chain.step_of_gateway(t, named),
            }
        }
        _ => 0,
    };
    Placed {
        fallback: fallback || (cause.status_only_at_response && span.is_some_and(bare)),
        cause,
        shown: false,
        span,
        step,
        support: 0.0,
        f,
    }
}

/// Mark each finding another explains at its step or call.
fn mark_shown(t: &TraceRow, placed: &mut [Placed], enough: &Enough) {
    let dur = t.duration_ms.max(1e-6);
    for i in 0..placed.len() {
        let (x, step) = (&placed[i], placed[i].step);
        // At the failure's step, or (for time) at the same call.
        let shown = placed.iter().any(|z| {
            z.f.cause != x.f.cause
                && z.f.explains_failure == x.f.explains_failure
                && if x.f.explains_failure {
                    z.step == step && (z.cause.explains(x.cause) || (x.fallback && !z.fallback))
                } else {
                    (z.cause.explains(x.cause)
                        && matches!((x.span, z.span), (Some(a), Some(b)) if same_call(t, a, b)))
                        // A mechanism explaining half a fallback's time explains it.
                        || (x.fallback
                            && !z.fallback
                            && z.f.explained_ms >= 0.5 * x.f.explained_ms
                            && z.f.explained_ms / dur >= enough.share
                            && z.f.explained_ms >= enough.ms)
                }
        });
        placed[i].shown = shown;
    }
    // A retry storm (many requests retrying into one target) and what its
    // attempts met at the same call (a limiter's 429, an open circuit, an
    // unavailable callee) are one cause and how it shows: the storm's load
    // is what the target answered so. The storm sits where the trigger
    // does, explains what it explains (the trigger's attempt may be the
    // one that failed the request), and shows it, in the evidence and the
    // chain.
    for i in 0..placed.len() {
        let a = match placed[i].span {
            Some(a) if placed[i].cause.holds_retries => a,
            _ => continue,
        };
        let trigger = placed.iter().position(|z| {
            z.cause.triggers_retries
                && z.span.is_some_and(|b| {
                    // One of the attempts, or what answered one.
                    let of_attempts =
                        |b: usize| super::chain::same_attempt(t, a, b) || same_parent_call(t, a, b);
                    of_attempts(b) || t.spans[b].parent.is_some_and(of_attempts)
                })
        });
        if let Some(j) = trigger {
            let step = placed[i].step.max(placed[j].step);
            let failure = placed[i].f.explains_failure || placed[j].f.explains_failure;
            let explained = placed[i].f.explained_ms.max(placed[j].f.explained_ms);
            placed[i].f.explains_failure = failure;
            placed[i].f.explained_ms = explained;
            placed[i].step = step;
            placed[i].shown = false;
            placed[j].step = step;
            placed[j].shown = true;
        }
    }
}

/// Whether spans `a` and `b` are attempts under one call (siblings of one
/// retried call whose attempts the layout numbered in one of them only).
fn same_parent_call(t: &TraceRow, a: usize, b: usize) -> bool {
    let (x, y) = (&t.spans[a], &t.spans[b]);
    x.parent.is_some()
        && x.parent == y.parent
        && (x.attempts.is_some() || y.attempts.is_some())
        && x.service == y.service
}

/// Each finding's support: its evidence's strength × how much of the
/// failure or of the time it covers.
fn weigh(placed: &mut [Placed], dur: f64, enough: &Enough) {
    let origin = placed
        .iter()
        .filter(|p| p.f.explains_failure)
        .map(|p| p.step)
        .max();
    for p in placed.iter_mut() {
        let cover = if p.f.explains_failure {
            if Some(p.step) == origin && !p.shown {
                1.0
            } else {
                CONSEQUENCE
            }
        } else {
            // Time a mechanism of its own explains, or time on a request
            // whose failure another finding explains: not why it went wrong.
            let weight = if p.shown || origin.is_some() {
                CONSEQUENCE
            } else {
                1.0
            };
            // Less time than a cause must explain (`enough.ms`) is that
            // much less of one: a healthy request's 2 ms TLS handshake is
            // no 0.6-confident alternative.
            let long_enough = (p.f.explained_ms / enough.ms.max(1e-9)).min(1.0);
            weight * (p.f.explained_ms / dur / FULL_SHARE).min(1.0) * long_enough
        };
        p.support = p.f.confidence.clamp(0.0, 1.0) * cover;
    }
}

/// A cause, 1 − its support, and the rules that found it.
type Agreed = (String, f64, Vec<String>);

/// Independent rules agreeing on a cause strengthen it: each cause keeps
/// its best finding, with the support of all its rules; and the rules that
/// agreed, by cause.
fn agree(placed: Vec<Placed>) -> (Vec<Placed>, Vec<Agreed>) {
    // Independent rules that agree on a cause strengthen it; each cause
    // keeps its best finding.
    let mut agreed: Vec<(String, f64, Vec<String>)> = Vec::new();
    for p in &placed {
        match agreed.iter_mut().find(|(c, _, _)| *c == p.f.cause) {
            Some((_, miss, rules)) => {
                if !rules.contains(&p.f.rule) {
                    *miss *= 1.0 - p.support;
                    rules.push(p.f.rule.clone());
                }
            }
            None => agreed.push((p.f.cause.clone(), 1.0 - p.support, vec![p.f.rule.clone()])),
        }
    }
    // A finding of the same cause at the same step that names the service
    // at fault (a gateway's upstream behind the address the client called)
    // lends the kept one its name.
    let mut kept: Vec<Placed> = Vec::new();
    for p in placed {
        match kept.iter_mut().find(|k| k.f.cause == p.f.cause) {
            Some(k) => {
                if k.f.culprit_service.is_none() && k.step == p.step {
                    k.f.culprit_service = p.f.culprit_service;
                }
            }
            None => kept.push(p),
        }
    }
    let mut placed = kept;
    for p in &mut placed {
        if let Some((_, miss, _)) = agreed.iter().find(|(c, _, _)| *c == p.f.cause) {
            p.support = 1.0 - miss;
        }
    }
    (placed, agreed)
}

/// Each cause's confidence: its support × its share of the support of the
/// causes it does not explain.
fn confidences(placed: &[Placed]) -> Vec<f64> {
    // Each cause's confidence: its support × its share of the support of
    // the causes it does not explain (the rivals a reader must weigh).
    let explains = |x: &Placed, y: &Placed| {
        (x.f.explains_failure && !y.f.explains_failure)
            || (x.f.explains_failure
                && y.f.explains_failure
                && (y.step < x.step || (y.step == x.step && y.shown && !x.shown)))
            || (!x.f.explains_failure && !y.f.explains_failure && y.shown && !x.shown)
    };
    placed
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let rivals: f64 = placed
                .iter()
                .enumerate()
                .filter(|(j, y)| *j != i && !explains(x, y))
                .map(|(_, y)| y.support)
                .sum();
            let c = x.support * x.support / (x.support + rivals).max(1e-9);
            (c * 1000.0).round() / 1000.0
        })
        .collect()
}

/// No finding explains enough: the cause is unknown, and the span with the
/// largest self time on the critical path is named.
fn unknown(t: &TraceRow) -> Finding {
    let c = t
        .spans
        .iter()
        .max_by(|a, b| a.self_ms.total_cmp(&b.self_ms))
        .unwrap_or(&t.spans[t.culprit]);
    Finding {
        rule: "none".into(),
        cause: UNKNOWN.name.into(),
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
        at_span_id: None,
        user: false,
        explained_ms: c.self_ms,
        explains_failure: false,
    }
}

/// The verdict of the best finding: the span and service at fault and
/// the kind of fault.
fn conclude(
    t: &TraceRow,
    best: Finding,
    alternatives: Vec<Finding>,
    reason: String,
    peers: Option<&Peers>,
    causes: &Causes,
) -> Verdict {
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
    if !causes.get(&best.cause).holds_retries {
        if let Some(note) = retry_note(t) {
            best.summary.push_str(&note);
        }
    }
    // A name left empty (a span without `service.name`) leaves two spaces.
    best.summary = tidy(&best.summary);
    let kind = best
        .culprit_kind
        .as_deref()
        .and_then(CulpritKind::named)
        .unwrap_or_else(|| (causes.get(&best.cause).kind)(&t.spans[culprit]));
    let culprit_service = culprit_service(t, culprit, kind, best.culprit_service.as_deref(), peers);
    Verdict {
        best,
        alternatives,
        culprit,
        culprit_service,
        culprit_kind: kind,
        reason,
    }
}

/// `s` with every run of spaces made one, and none at its ends.
pub fn tidy(s: &str) -> String {
    s.split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Why the winner won, in a clause: where it sits in the failure's chain
/// or how much time it explains, and what it was preferred to.
fn reason(t: &TraceRow, chain: &Chain, placed: &[Placed]) -> String {
    let Some(best) = placed.first() else {
        return String::new();
    };
    let dur = t.duration_ms.max(1e-6);
    let pct = |f: &Finding| (100.0 * f.explained_ms / dur).round();
    let mut out = if best.f.explains_failure {
        let at = chain
            .span_at(best.step - best.step % 2)
            .map(|i| &t.spans[i]);
        match at {
            Some(r) if best.step % 2 == 1 => format!(
                "it explains the failure where it began (the gateway's answer to {} {})",
                r.service, r.name
            ),
            Some(r) if best.step > 0 => format!(
                "it explains the failure where it began ({} {}, the deepest call on its path)",
                r.service, r.name
            ),
            _ => "it explains the failure at the response".to_string(),
        }
    } else {
        format!("it explains {}% of the time", pct(&best.f))
    };
    let mut over: Vec<String> = Vec::new();
    for p in placed.iter().skip(1).take(3) {
        let why = if best.f.explains_failure && p.f.explains_failure {
            if p.step < best.step {
                "closer to the response: a consequence".to_string()
            } else if best.cause.explains(p.cause) {
                format!("how {} shows at the same call", best.f.cause)
            } else if best.cause.holds_retries && p.cause.triggers_retries && p.shown {
                "what the storm's attempts met".to_string()
            } else if p.fallback && !best.fallback {
                "at the same call, names no mechanism".to_string()
            } else {
                format!(
                    "at the same call, weaker evidence ({:.2} against {:.2})",
                    p.support, best.support
                )
            }
        } else if best.f.explains_failure {
            "explains time, not the failure".to_string()
        } else if p.fallback && !best.fallback {
            format!("{}%, names no mechanism", pct(&p.f))
        } else {
            format!(
                "{}%, support {:.2} against {:.2}",
                pct(&p.f),
                p.support,
                best.support
            )
        };
        over.push(format!("{} ({why})", p.f.cause));
    }
    if !over.is_empty() {
        out.push_str("; preferred to ");
        out.push_str(&over.join(", "));
    }
    out
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
    kind: CulpritKind,
    named: Option<&str>,
    peers: Option<&Peers>,
) -> String {
    let span = &t.spans[c];
    let named = named.map(str::trim).filter(|n| !n.is_empty() && *n != "-");
    let resolve = |n: &str| resolve_name(n, peers);
    match kind {
        CulpritKind::Callee | CulpritKind::Limiter => {
            if kind == CulpritKind::Limiter {
                if let Some(n) = named {
                    return resolve(n);
                }
            }
            if span.kind == SpanKind::Server {
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
            if inner != c
                && t.spans[inner].kind == SpanKind::Server
                && span.kind == SpanKind::Client
            {
                return t.spans[inner].service.to_string();
            }
            callee_of(t, c, named, peers)
        }
        CulpritKind::Dependency => named
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
            .any(|x| x.kind == SpanKind::Server && *x.service == *named);
        if !reached || span.kind != SpanKind::Client {
            return named;
        }
    }
    // A phase of a call (otelhttptrace's `http.tls` under `http.getconn`,
    // say) names no peer: the call it belongs to, up the parent links in
    // the same service, does.
    let mut at = Some(c);
    let mut steps = 0;
    while let Some(i) = at.filter(|_| steps <= t.spans.len()) {
        let x = &t.spans[i];
        if x.service != span.service || x.kind == SpanKind::Server {
            break;
        }
        if let Some(callee) = &x.callee {
            return callee.to_string();
        }
        if let Some(a) = super::peers::address_of(x) {
            return a;
        }
        // An RPC no server answered, to no address: the service it called.
        if let Some(r) = x
            .rpc_service
            .as_deref()
            .filter(|_| x.kind == SpanKind::Client)
        {
            return r.to_string();
        }
        at = x.parent;
        steps += 1;
    }
    span.service.to_string()
}

/// The deepest failed client span below span `s` whose callee did not
/// answer with a server span of its own in the trace.
fn failed_call_below(t: &TraceRow, s: usize) -> Option<usize> {
    (0..t.spans.len())
        .filter(|&i| {
            let x = &t.spans[i];
            x.kind == SpanKind::Client
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

/// Each property of a cause's descriptor changes the verdict as it says,
/// whatever the cause is named (the causes here are made up).
#[cfg(test)]
mod tests {
    use super::*;
    use crate::correlate::model::cause::{self, Face};
    use crate::correlate::model::trace::SpanStatus;

    /// A failed request: a server span (0) whose client call (1) failed
    /// with an exception, both 100 ms.
    fn failed_call(message: &str) -> TraceRow {
        let span = |id: u64, parent: Option<usize>, kind: SpanKind| SpanRow {
            span_id: id,
            parent_id: parent.map_or(0, |p| p as u64 + 1),
            parent,
            kind,
            service: "api".into(),
            name: format!("span-{id}"),
            end_ms: 100.0,
            duration_ms: 100.0,
            self_ms: 50.0,
            path_ms: 50.0,
            critical: true,
            status: SpanStatus::Error,
            status_message: message.into(),
            depth: parent.map_or(0, |_| 1),
            ..Default::default()
        };
        TraceRow {
            trace_id: "t".into(),
            duration_ms: 100.0,
            spans: vec![
                span(1, None, SpanKind::Server),
                span(2, Some(0), SpanKind::Client),
            ],
            culprit: 1,
            error_origin: Some(1),
            failed: true,
            ..Default::default()
        }
    }

    fn finding(c: &Cause, span: u64, failure: bool, confidence: f64) -> Finding {
        Finding {
            rule: format!("rule-{}", c.name),
            cause: c.name.into(),
            confidence,
            summary: c.name.into(),
            culprit_span_id: Some(Hex16::of(span).as_str().to_string()),
            culprit_service: None,
            culprit_kind: None,
            evidence: None,
            at_span_id: None,
            user: false,
            explained_ms: 50.0,
            explains_failure: failure,
        }
    }

    fn best(t: &TraceRow, findings: Vec<Finding>, causes: &[&'static Cause]) -> Verdict {
        verdict(
            t,
            Some(&findings),
            &Enough {
                share: 0.2,
                ms: 10.0,
            },
            None,
            &Causes::of(causes.iter().copied()),
        )
    }

    static MECHANISM: Cause = Cause::new("mechanism", cause::callee);
    static NAMES_A_SPAN: Cause = Cause::new("names_a_span", cause::service).fallback();
    static NOT_A_FALLBACK: Cause = Cause::new("names_a_span", cause::service);

    #[test]
    fn a_fallback_gives_way_to_a_mechanism_at_the_same_step() {
        let t = failed_call("boom");
        // The fallback's evidence is stronger; a mechanism still explains it.
        let f = vec![
            finding(&NAMES_A_SPAN, 2, true, 0.9),
            finding(&MECHANISM, 2, true, 0.5),
        ];
        assert_eq!(
            best(&t, f.clone(), &[&NAMES_A_SPAN, &MECHANISM]).best.cause,
            "mechanism"
        );
        // Described as a mechanism, the stronger evidence wins.
        assert_eq!(
            best(&t, f, &[&NOT_A_FALLBACK, &MECHANISM]).best.cause,
            "names_a_span"
        );
    }

    static OPENS: Cause = Cause::new("opens", cause::callee).shows_as(&[Face::Unavailable]);
    static REFUSED: Cause = Cause::new("refused", cause::callee).face(Face::Unavailable);
    static REFUSED_OTHERWISE: Cause = Cause::new("refused", cause::callee).face(Face::Timeout);

    #[test]
    fn a_cause_explains_what_its_failure_shows_as_at_the_same_call() {
        let t = failed_call("boom");
        let f = vec![
            finding(&REFUSED, 2, true, 0.9),
            finding(&OPENS, 2, true, 0.5),
        ];
        let v = best(&t, f.clone(), &[&OPENS, &REFUSED]);
        assert_eq!(v.best.cause, "opens");
        assert!(
            v.reason.contains("how opens shows at the same call"),
            "{}",
            v.reason
        );
        // A face it does not show as: the stronger evidence wins.
        assert_eq!(
            best(&t, f, &[&OPENS, &REFUSED_OTHERWISE]).best.cause,
            "refused"
        );
    }

    fn blame_dependency(_: &SpanRow) -> CulpritKind {
        CulpritKind::Dependency
    }
    static BLAMES_A_DEPENDENCY: Cause = Cause::new("blames", blame_dependency);
    static BLAMES_THE_HOST: Cause = Cause::new("blames", cause::host);

    #[test]
    fn the_kind_of_fault_comes_from_the_descriptor_when_the_rule_does_not_say() {
        let t = failed_call("boom");
        let f = vec![finding(&BLAMES_A_DEPENDENCY, 2, true, 0.9)];
        assert_eq!(
            best(&t, f.clone(), &[&BLAMES_A_DEPENDENCY]).culprit_kind,
            CulpritKind::Dependency
        );
        assert_eq!(
            best(&t, f.clone(), &[&BLAMES_THE_HOST]).culprit_kind,
            CulpritKind::Host
        );
        let mut said = f;
        said[0].culprit_kind = Some("limiter".into());
        assert_eq!(
            best(&t, said, &[&BLAMES_THE_HOST]).culprit_kind,
            CulpritKind::Limiter
        );
    }

    static STATUS_SAYS_WHERE_NOT: Cause =
        Cause::new("bare", cause::service).status_only_at_response();
    static STATUS_SAYS_WHERE: Cause = Cause::new("bare", cause::service);

    #[test]
    fn a_bare_status_sits_at_the_response_when_the_descriptor_says_so() {
        // No exception, no message: a status alone. The deeper finding
        // (at the call) is nearer the origin than one at the response.
        let t = failed_call("");
        let f = vec![
            finding(&STATUS_SAYS_WHERE_NOT, 2, true, 0.9),
            finding(&MECHANISM, 1, true, 0.3),
        ];
        assert_eq!(
            best(&t, f.clone(), &[&STATUS_SAYS_WHERE_NOT, &MECHANISM])
                .best
                .cause,
            "mechanism"
        );
        assert_eq!(
            best(&t, f, &[&STATUS_SAYS_WHERE, &MECHANISM]).best.cause,
            "bare"
        );
    }

    static HOLDS_RETRIES: Cause = Cause::new("storm", cause::callee).holds_retries();
    static NO_RETRIES: Cause = Cause::new("storm", cause::callee);

    #[test]
    fn a_cause_that_holds_retries_takes_no_retry_note() {
        // The call was retried: three attempts, the last failed.
        let mut t = failed_call("boom");
        let mut again = t.spans[1].clone();
        again.span_id = 3;
        t.spans[1].attempt = Some(1);
        t.spans[1].attempts = Some(3);
        again.attempt = Some(2);
        again.attempts = Some(3);
        t.spans.push(again);
        let f = vec![finding(&HOLDS_RETRIES, 2, true, 0.9)];
        let with = best(&t, f.clone(), &[&NO_RETRIES]).best.summary;
        let without = best(&t, f, &[&HOLDS_RETRIES]).best.summary;
        assert_eq!(without, "storm");
        assert_ne!(
            with, "storm",
            "a retried call gets a note unless its cause holds the retries"
        );
    }

    static TRIGGER: Cause = Cause::new("trigger", cause::limiter).triggers_retries();
    static NOT_A_TRIGGER: Cause = Cause::new("trigger", cause::limiter);

    #[test]
    fn a_storm_wins_over_what_its_attempts_met_at_the_same_call() {
        // Three attempts of one call, each answered by a limit; the storm's
        // finding names the first attempt, the limit's the last.
        let mut t = failed_call("boom");
        t.spans[1].attempt = Some(1);
        t.spans[1].attempts = Some(3);
        for (id, n) in [(3, 2), (4, 3)] {
            let mut again = t.spans[1].clone();
            again.span_id = id;
            again.attempt = Some(n);
            t.spans.push(again);
        }
        let f = vec![
            finding(&HOLDS_RETRIES, 2, false, 1.0),
            finding(&TRIGGER, 4, true, 1.0),
        ];
        let v = best(&t, f.clone(), &[&HOLDS_RETRIES, &TRIGGER]);
        assert_eq!(v.best.cause, "storm");
        assert!(
            v.best.explains_failure,
            "the storm explains the failure its attempt met: {v:?}"
        );
        assert!(
            v.reason.contains("trigger (what the storm's attempts met)"),
            "{}",
            v.reason
        );
        assert!(
            v.alternatives.iter().any(|a| a.cause == "trigger"),
            "the trigger is in the evidence: {v:?}"
        );
        // Not described as a trigger: the limit that failed the request
        // wins, the storm explains time only.
        assert_eq!(
            best(&t, f.clone(), &[&HOLDS_RETRIES, &NOT_A_TRIGGER])
                .best
                .cause,
            "trigger"
        );
        // A request that recovered: the time is the storm's too.
        t.failed = false;
        let mut healthy = f;
        for x in &mut healthy {
            x.explains_failure = false;
        }
        assert_eq!(
            best(&t, healthy, &[&HOLDS_RETRIES, &TRIGGER]).best.cause,
            "storm"
        );
    }

    #[test]
    fn a_cause_no_built_in_rule_describes_is_a_mechanism_blaming_the_service() {
        let causes = Causes::of([&MECHANISM]);
        let user = causes.get("from_a_users_rule");
        assert!(!user.fallback && !user.waits && !user.holds_retries);
        assert_eq!((user.kind)(&SpanRow::default()), CulpritKind::Service);
        assert!(
            causes.get(cause::UNKNOWN.name).waits,
            "the verdict's own is always described"
        );
        assert_eq!(causes.get("mechanism").name, "mechanism");
    }
}

//! From a batch of spans to trace rows: spans grouped by trace, the
//! layout repaired (orphans, cycles, clock skew), the critical path and
//! self times, the inferences of the layout, the culprit and the error
//! origin. It knows no evidence source.

use opentelemetry_proto::tonic::trace::v1::{
    span::SpanKind as OtlpKind, status::StatusCode, ResourceSpans, Span,
};
use std::collections::HashMap;
use std::sync::Arc;

use super::baseline::Baselines;
use super::critical::{critical_path, root, Node};
use super::shape;
use super::target;
use crate::correlate::model::attributes::SpanAttrs;
use crate::correlate::model::series::{find as attr, host_key, s as attr_str};
use crate::correlate::model::trace::{
    id64, SpanKind, SpanRef, SpanRow, SpanStatus, TraceRow, PROMPT_BASELINE,
};

fn kind_name(k: i32) -> SpanKind {
    match OtlpKind::try_from(k) {
        Ok(OtlpKind::Server) => SpanKind::Server,
        Ok(OtlpKind::Client) => SpanKind::Client,
        Ok(OtlpKind::Producer) => SpanKind::Producer,
        Ok(OtlpKind::Consumer) => SpanKind::Consumer,
        _ => SpanKind::Internal,
    }
}

/// A statement's fingerprint: digits masked, whitespace collapsed, at most
/// 100 characters (a literal-free statement's identity).
fn fingerprint(q: &str) -> String {
    let mut out = String::with_capacity(q.len().min(100));
    let mut space = false;
    for c in q.chars() {
        if out.len() >= 100 {
            break;
        }
        if c.is_whitespace() {
            space = !out.is_empty();
            continue;
        }
        if space {
            out.push(' ');
            space = false;
        }
        out.push(if c.is_ascii_digit() { '?' } else { c });
    }
    out
}

/// The identity of a span's operation (see [`SpanRow::op`]): a client
/// span named just `GET` or a query named `SELECT` is told apart by what
/// it called.
fn op_identity(r: &SpanRow, a: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> String {
    let kind = r.kind;
    if let Some(route) = attr(a, &["http.route", "url.template"]).and_then(attr_str) {
        let method = attr(a, &["http.request.method", "http.method"])
            .and_then(attr_str)
            .unwrap_or_default();
        return format!("{kind} {method} {route}");
    }
    if let (Some(svc), Some(m)) = (&r.rpc_service, &r.rpc_method) {
        return format!("{kind} rpc {svc}/{m}");
    }
    if let Some(sys) = &r.db_system {
        if let Some(q) = attr(a, &["db.query.summary"]).and_then(attr_str) {
            return format!("{kind} {sys} {q}");
        }
        let coll = attr(
            a,
            &[
                "db.collection.name",
                "db.sql.table",
                "db.mongodb.collection",
                "db.cassandra.table",
            ],
        )
        .and_then(attr_str)
        .unwrap_or_default();
        if !coll.is_empty() {
            let op = r.db_operation.as_deref().unwrap_or(&r.name);
            return format!("{kind} {sys} {op} {coll}");
        }
        // No table named: the statement's fingerprint (numbers masked, cut
        // to 100 characters), as query analysers group queries; else the
        // span name (`{operation} {table}` by the conventions).
        return match attr(a, &["db.query.text", "db.statement"]).and_then(attr_str) {
            Some(q) => format!("{kind} {sys} {}", fingerprint(&q)),
            None => format!("{kind} {sys} {}", r.name),
        };
    }
    // GenAI spans are named `{operation} {model}` by the conventions: that
    // is the operation, whichever server of the model answers it.
    if r.gen_ai_model.is_some() {
        return format!("{kind} {}", r.name);
    }
    if let Some(d) = &r.destination {
        return format!(
            "{kind} {} {d}",
            r.messaging_system.as_deref().unwrap_or("messaging")
        );
    }
    if kind == SpanKind::Client {
        if let Some(addr) = &r.server_address {
            let method = attr(a, &["http.request.method", "http.method"])
                .and_then(attr_str)
                .unwrap_or_else(|| r.name.clone());
            return match r.server_port {
                Some(p) => format!("{kind} {method} {addr}:{p}"),
                None => format!("{kind} {method} {addr}"),
            };
        }
    }
    r.name.clone()
}

fn span_row(at: SpanRef, span: &Span, service: &Arc<str>, host: &Arc<str>) -> SpanRow {
    let mut row = span_row_of(at, span, service, host);
    if row.server_address.is_none() && row.kind == SpanKind::Client {
        // The target from the URL, else from the address the client's
        // error names (a gRPC client that writes no `server.address`).
        let url = || attr(&span.attributes, &["url.full", "http.url"]).and_then(attr_str);
        let said = |x: &Option<String>| x.as_deref().and_then(target::of_error);
        if let Some(t) = url()
            .and_then(|u| target::of_url(&u))
            .or_else(|| said(&row.exception_message))
            .or_else(|| target::of_error(&row.status_message))
        {
            row.server_address = Some(t.host);
            row.server_port = row.server_port.or(t.port);
        }
    }
    row.op = op_identity(&row, &span.attributes);
    row
}

fn span_row_of(at: SpanRef, span: &Span, service: &Arc<str>, host: &Arc<str>) -> SpanRow {
    let status = match span.status.as_ref().map(|s| StatusCode::try_from(s.code)) {
        Some(Ok(StatusCode::Error)) => SpanStatus::Error,
        Some(Ok(StatusCode::Ok)) => SpanStatus::Ok,
        _ => SpanStatus::Unset,
    };
    // The exception event's type and message (an event's attributes, not the span's).
    let exception = span.events.iter().find(|e| e.name == "exception");
    let of_exception =
        |key: &str| exception.and_then(|e| attr(&e.attributes, &[key]).and_then(attr_str));
    let attrs = SpanAttrs::read(&span.attributes);
    let pool_wait = POOL_WAITS.contains(&span.name.as_str())
        || span.attributes.iter().any(|kv| {
            kv.key.starts_with("db.client.connection.")
                || kv.key.starts_with("db.client.connections.")
        })
        || pool_acquire(
            attrs.code_namespace.as_deref(),
            attrs.code_function.as_deref(),
        );
    SpanRow {
        at,
        span_id: id64(&span.span_id),
        parent_id: id64(&span.parent_span_id),
        service: service.clone(),
        host: host.clone(),
        name: span.name.clone(),
        kind: kind_name(span.kind),
        attrs,
        status,
        status_message: span
            .status
            .as_ref()
            .map(|s| s.message.clone())
            .unwrap_or_default(),
        exception_type: of_exception("exception.type"),
        exception_message: of_exception("exception.message"),
        pool_wait,
        ..Default::default()
    }
}

/// Span names that stock instrumentations give a wait for a pooled
/// connection and that carry no code attributes: Go's otelhttptrace
/// (`http.getconn`), Node's instrumentation-pg (`pg-pool.connect`) and
/// instrumentation-generic-pool (`generic-pool.acquire`).
const POOL_WAITS: [&str; 3] = ["http.getconn", "pg-pool.connect", "generic-pool.acquire"];

/// Methods that hand out a pooled resource, by what they do (lowercased,
/// `_` dropped): JDBC's `DataSource.getConnection`, commons-pool's
/// `borrowObject`, SQLAlchemy's `Pool.connect`/`_checkout`, `acquire`.
const ACQUIRE_METHODS: [&str; 5] = [
    "getconnection",
    "borrowobject",
    "acquire",
    "checkout",
    "connect",
];

/// A span of code that took a connection from a pool, by its code
/// attributes: a method that hands out pooled resources (`code.function`,
/// or the last part of `code.function.name`) of a type that is a pool or a
/// data source (`code.namespace`, or the rest of `code.function.name`). The
/// Java agent's jdbc-datasource instrumentation writes
/// `HikariDataSource.getConnection` with these, for every pool it wraps.
fn pool_acquire(namespace: Option<&str>, function: Option<&str>) -> bool {
    let Some(function) = function else {
        return false;
    };
    let (owner, method) = match function.rsplit_once(['.', ':']) {
        Some((owner, method)) => (namespace.unwrap_or(owner), method),
        None => (namespace.unwrap_or(""), function),
    };
    let method = method.replace('_', "").to_ascii_lowercase();
    let owner = owner.to_ascii_lowercase();
    ACQUIRE_METHODS.contains(&method.as_str())
        && (owner.contains("pool") || owner.contains("datasource"))
}

/// A fast hasher for ids that are random already (trace and span ids).
type IdMap<K, V> = HashMap<K, V, foldhash::fast::FixedState>;

/// Group the spans of a batch by trace and compute each trace's critical
/// path, self times, culprit and error origin.
pub fn traces(
    batch: &[ResourceSpans],
    baselines: Option<&Baselines>,
    route_map: &RouteMap,
) -> Vec<TraceRow> {
    let g = group(batch);
    let mut out = Vec::with_capacity(g.order.len());
    let mut index: IdMap<u64, usize> = IdMap::default();
    for (ti, (id, _)) in g.order.iter().enumerate() {
        let ats = &g.spans[g.first[ti]..g.first[ti + 1]];
        out.extend(trace_row(
            *id,
            ats,
            batch,
            &g.resources,
            &mut index,
            baselines,
            route_map,
        ));
    }
    out
}

/// A batch's spans by trace: see [`group`].
struct Grouped {
    /// Each trace's id and span count, by first appearance.
    order: Vec<([u8; 16], u32)>,
    /// Where each trace's spans begin in `spans` (and one past the last).
    first: Vec<usize>,
    /// Every span, the spans of a trace contiguous.
    spans: Vec<SpanRef>,
    /// Each resource's service and host.
    resources: Vec<(Arc<str>, Arc<str>)>,
}

/// The spans of a batch grouped by trace (by first appearance, each
/// trace's spans contiguous, in a counting sort that moves no row), with
/// each resource's service and host.
fn group(batch: &[ResourceSpans]) -> Grouped {
    // Pass 1: each span's trace (by first appearance), without moving rows.
    let mut trace_of: IdMap<[u8; 16], u32> = IdMap::default();
    let mut order: Vec<([u8; 16], u32)> = Vec::new(); // id, span count
    let mut refs: Vec<(u32, SpanRef)> = Vec::new();
    let mut resources: Vec<(Arc<str>, Arc<str>)> = Vec::with_capacity(batch.len());
    for (ri, rs) in batch.iter().enumerate() {
        let ra = rs
            .resource
            .as_ref()
            .map(|r| r.attributes.as_slice())
            .unwrap_or(&[]);
        let service: Arc<str> = attr(ra, &["service.name"])
            .and_then(attr_str)
            .unwrap_or_default()
            .into();
        let host: Arc<str> = host_key(ra).unwrap_or_default().into();
        resources.push((service, host));
        for (si, ss) in rs.scope_spans.iter().enumerate() {
            for (pi, span) in ss.spans.iter().enumerate() {
                let Ok(id) = <[u8; 16]>::try_from(span.trace_id.as_slice()) else {
                    continue;
                };
                let t = *trace_of.entry(id).or_insert_with(|| {
                    order.push((id, 0));
                    (order.len() - 1) as u32
                });
                order[t as usize].1 += 1;
                refs.push((t, (ri, si, pi)));
            }
        }
    }
    // Pass 2: the spans of each trace, contiguous (a counting sort, stable).
    let mut first = Vec::with_capacity(order.len() + 1);
    let mut acc = 0usize;
    for (_, n) in &order {
        first.push(acc);
        acc += *n as usize;
    }
    first.push(acc);
    let mut fill = first.clone();
    let mut grouped: Vec<SpanRef> = vec![(0, 0, 0); refs.len()];
    for (t, at) in refs {
        grouped[fill[t as usize]] = at;
        fill[t as usize] += 1;
    }
    Grouped {
        order,
        first,
        spans: grouped,
        resources,
    }
}

/// One trace's row from its spans (`ats`, in the batch): its layout
/// repaired, critical path, self and path times, callees, error origin,
/// deviations from the baselines, culprit, entry and route. `None`: no
/// root (every span's parent is another's, in a cycle broken nowhere).
fn trace_row(
    id: [u8; 16],
    ats: &[SpanRef],
    batch: &[ResourceSpans],
    resources: &[(Arc<str>, Arc<str>)],
    index: &mut IdMap<u64, usize>,
    baselines: Option<&Baselines>,
    route_map: &RouteMap,
) -> Option<TraceRow> {
    let (mut spans, mut nodes) = rows(ats, batch, resources, index);
    // A parent cycle in bad data: break it where it closes, so every span
    // reaches a root and nothing below loops.
    break_cycles(&mut nodes);
    shape::attach_orphans(&mut nodes, &mut spans);
    shape::adopt_contained(&mut nodes, &mut spans);
    let kids = shape::children(&nodes);
    shape::fix_skew(&mut nodes, &spans, &kids);
    // The root: a span with no parent id at all, else one whose parent is missing.
    let true_roots: Vec<Node> = nodes
        .iter()
        .zip(&spans)
        .map(|(n, r)| Node {
            parent: if r.parent_id == 0 {
                n.parent
            } else {
                n.parent.or(Some(usize::MAX))
            },
            ..*n
        })
        .collect();
    let root_i = root(&true_roots).or_else(|| root(&nodes))?;
    let (_, self_ns) = critical_path(&nodes, root_i);
    let start_ns = nodes.iter().map(|n| n.start).min().unwrap_or(0);
    let end_ns = nodes.iter().map(|n| n.end).max().unwrap_or(start_ns);
    let ms = |ns: u64| ns as f64 / 1e6;
    times(&mut spans, &nodes, &self_ns, start_ns);
    shape::infer(&mut spans, &nodes, &kids);
    // Critical time of each subtree, bottom-up; depths top-down.
    let order = shape::top_down(&nodes, &kids);
    for &i in &order {
        spans[i].parent = nodes[i].parent;
        spans[i].depth = nodes[i].parent.map_or(0, |p| spans[p].depth + 1);
    }
    callees(&mut spans, &nodes);
    for &i in order.iter().rev() {
        spans[i].path_ms += spans[i].self_ms;
        if let Some(p) = nodes[i].parent {
            let add = spans[i].path_ms;
            spans[p].path_ms += add;
        }
    }
    let error_origin = error_origin(&spans, &nodes);
    if let Some(b) = baselines {
        deviations(&mut spans, b);
    }
    let deviation = |r: &SpanRow| r.excess_ms.unwrap_or(r.self_ms);
    let largest = (0..spans.len())
        .filter(|&i| spans[i].critical)
        .max_by(|&a, &b| deviation(&spans[a]).total_cmp(&deviation(&spans[b])))
        .unwrap_or(root_i);
    // The error origin, unless it barely took time and something else took
    // most of it (a timed-out call: the callee that was slow is the culprit).
    let culprit = error_origin
        .filter(|&e| spans[e].self_ms >= deviation(&spans[largest]) * 0.5)
        .unwrap_or(largest);
    // The entry: the root when it is a server span, else the first server
    // span below it (a client or load generator may be the root).
    let entry = order
        .iter()
        .copied()
        .filter(|&i| spans[i].kind == SpanKind::Server)
        .min_by(|&a, &b| {
            spans[a]
                .depth
                .cmp(&spans[b].depth)
                .then(nodes[a].start.cmp(&nodes[b].start))
        })
        .unwrap_or(root_i);
    let route = spans[entry].route.clone().map(|r| route_map.map(&r));
    let status_of = |r: &SpanRow| r.http_status;
    let final_status = status_of(&spans[entry]).or(status_of(&spans[root_i]));
    let failed = [root_i, entry].iter().any(|&i| {
        let s = &spans[i];
        !s.recovered
            && ((s.status == SpanStatus::Error && !s.client_error)
                || s.http_status.is_some_and(|x| x >= 500 || x == 429))
    });
    Some(TraceRow {
        id,
        trace_id: hex::encode(id),
        start_ns,
        end_ns,
        duration_ms: ms(end_ns - start_ns),
        start_unix_ms: ms(start_ns),
        root: root_i,
        entry,
        spans,
        culprit,
        error_origin,
        route,
        failed,
        final_status,
        ..Default::default()
    })
}

/// A trace's span rows and their nodes (times and parent links), from its
/// spans (`ats`) in the batch.
fn rows(
    ats: &[SpanRef],
    batch: &[ResourceSpans],
    resources: &[(Arc<str>, Arc<str>)],
    index: &mut IdMap<u64, usize>,
) -> (Vec<SpanRow>, Vec<Node>) {
    let span_at = |&(ri, si, pi): &SpanRef| &batch[ri].scope_spans[si].spans[pi];
    index.clear();
    for (i, at) in ats.iter().enumerate() {
        index.insert(id64(&span_at(at).span_id), i);
    }
    let mut spans: Vec<SpanRow> = Vec::with_capacity(ats.len());
    let mut nodes: Vec<Node> = Vec::with_capacity(ats.len());
    for (i, at) in ats.iter().enumerate() {
        let span = span_at(at);
        let (service, host) = &resources[at.0];
        let row = span_row(*at, span, service, host);
        nodes.push(Node {
            start: span.start_time_unix_nano,
            end: span.end_time_unix_nano.max(span.start_time_unix_nano),
            parent: (row.parent_id != 0)
                .then(|| index.get(&row.parent_id).copied())
                .flatten()
                .filter(|p| *p != i),
        });
        spans.push(row);
    }
    (spans, nodes)
}

/// Each span's times relative to the trace's start, its self time on the
/// critical path, and its wait before its first child.
fn times(spans: &mut [SpanRow], nodes: &[Node], self_ns: &[u64], start_ns: u64) {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut first_child: Vec<Option<u64>> = vec![None; nodes.len()];
    for n in nodes {
        if let Some(p) = n.parent {
            first_child[p] = Some(first_child[p].map_or(n.start, |s| s.min(n.start)));
        }
    }
    for (i, row) in spans.iter_mut().enumerate() {
        let n = nodes[i];
        row.start_ms = ms(n.start.saturating_sub(start_ns));
        row.end_ms = ms(n.end.saturating_sub(start_ns));
        row.duration_ms = ms(n.end - n.start);
        row.self_ms = ms(self_ns[i]);
        row.critical = self_ns[i] > 0;
        row.wait_ms = first_child[i].map(|c| ms(c.saturating_sub(n.start)));
    }
}

/// Where errors began: a failed span none of whose children failed.
/// Client 4xx answers and attempts a later retry recovered from are not.
/// A call its caller cancelled (after the caller's own deadline) is a
/// consequence, not where the failure began.
fn error_origin(spans: &[SpanRow], nodes: &[Node]) -> Option<usize> {
    let mut has_error_child = vec![false; nodes.len()];
    for i in 0..nodes.len() {
        if spans[i].status == SpanStatus::Error
            && !spans[i].client_error
            && !spans[i].recovered
            && !super::chain::cancelled(&spans[i])
        {
            let mut p = nodes[i].parent;
            let mut steps = 0;
            while let Some(x) = p {
                if has_error_child[x] || steps > nodes.len() {
                    break;
                }
                has_error_child[x] = true;
                p = nodes[x].parent;
                steps += 1;
            }
        }
    }
    let origin_of = |skip_cancelled: bool| {
        (0..spans.len())
            .filter(|&i| {
                spans[i].status == SpanStatus::Error
                    && !spans[i].client_error
                    && !spans[i].recovered
                    && !has_error_child[i]
                    && (!skip_cancelled || !super::chain::cancelled(&spans[i]))
            })
            .max_by(|&a, &b| spans[a].end_ms.total_cmp(&spans[b].end_ms))
    };
    origin_of(true).or_else(|| origin_of(false))
}

/// How much each critical span deviates: its duration beyond `factor` ×
/// its operation's median, counted only as far as its own self time (a
/// parent of a slow call deviates too, but the time is not its own); all of
/// its self time before a baseline exists. And each prompt's usual length.
fn deviations(spans: &mut [SpanRow], b: &Baselines) {
    {
        for r in spans.iter_mut().filter(|r| r.critical) {
            // The operation's own baseline; until it has enough
            // samples, the span name's (coarser, learned sooner).
            let normal = b.normal(&r.service, &r.op).or_else(|| {
                (r.op != r.name)
                    .then(|| b.normal(&r.service, &r.name))
                    .flatten()
            });
            if let Some(normal) = normal {
                r.baseline_ms = Some(normal);
                r.excess_ms = Some((r.duration_ms - b.factor * normal).max(0.0).min(r.self_ms));
            }
        }
    }
    {
        for r in spans.iter_mut().filter(|r| r.input_tokens.is_some()) {
            let model = r.gen_ai_model.as_deref().unwrap_or("");
            r.prompt_baseline = b.normal(PROMPT_BASELINE, model);
        }
    }
}

/// The callee of a call: the service of its server child, else its `peer.service`.
fn callees(spans: &mut [SpanRow], nodes: &[Node]) {
    for i in 0..spans.len() {
        if let Some(p) = nodes[i]
            .parent
            .filter(|_| spans[i].kind == SpanKind::Server)
        {
            if matches!(spans[p].kind, SpanKind::Client | SpanKind::Producer)
                && spans[p].callee.is_none()
            {
                spans[p].callee = Some(spans[i].service.clone());
            }
        }
    }
    for r in spans.iter_mut() {
        if r.callee.is_none() && matches!(r.kind, SpanKind::Client | SpanKind::Producer) {
            r.callee = r.peer_service.as_deref().map(Arc::from);
        }
    }
}

/// Cut the parent link that closes each cycle of parent ids.
fn break_cycles(nodes: &mut [Node]) {
    // 0 unvisited, 1 on the current chain, 2 done.
    let mut state = vec![0u8; nodes.len()];
    for s in 0..nodes.len() {
        let mut chain: Vec<usize> = Vec::new();
        let mut i = s;
        loop {
            match state[i] {
                2 => break,
                1 => {
                    // `i` is on the chain: the link into it from the chain's last closes a cycle.
                    if let Some(&last) = chain.last() {
                        nodes[last].parent = None;
                    }
                    break;
                }
                _ => {}
            }
            state[i] = 1;
            chain.push(i);
            match nodes[i].parent {
                Some(p) if p < nodes.len() => i = p,
                _ => break,
            }
        }
        for c in chain {
            state[c] = 2;
        }
    }
}

/// Maps a service's route template to the gateway's route id, for sites
/// whose gateway route ids and service routes differ.
#[derive(Debug, Clone, Default)]
pub struct RouteMap {
    /// Configured: service route → route id.
    pub fixed: HashMap<String, String>,
}

impl RouteMap {
    /// The route id of a route.
    pub fn map(&self, route: &str) -> String {
        self.fixed
            .get(route)
            .cloned()
            .unwrap_or_else(|| route.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::pool_acquire;

    #[test]
    fn a_pool_wait_is_known_by_its_code_attributes() {
        // The Java agent's jdbc-datasource, old and new code conventions.
        assert!(pool_acquire(
            Some("com.zaxxer.hikari.HikariDataSource"),
            Some("getConnection")
        ));
        assert!(pool_acquire(
            None,
            Some("com.zaxxer.hikari.HikariDataSource.getConnection")
        ));
        // commons-pool, a Python pool.
        assert!(pool_acquire(
            Some("org.apache.commons.pool2.impl.GenericObjectPool"),
            Some("borrowObject")
        ));
        assert!(pool_acquire(
            None,
            Some("sqlalchemy.pool.base.Pool._checkout")
        ));
        // A method of the same name elsewhere, and a pool's other methods.
        assert!(!pool_acquire(
            Some("com.example.Repo"),
            Some("getConnection")
        ));
        assert!(!pool_acquire(
            Some("com.zaxxer.hikari.HikariDataSource"),
            Some("close")
        ));
        assert!(!pool_acquire(None, None));
    }
}

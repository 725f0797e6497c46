//! The join of kept traces with their log records, by `trace_id`: the
//! records themselves (the rules' `logs` table), and what the gateway's own
//! record says of the request: its final status, whether it failed, and its
//! route id (learned for the entry route, so that a trace whose gateway
//! record is missing still gets it).

use std::sync::Arc;

use super::model::{LogEvidence, TraceRow};
use super::store::Store;

/// The hop of each gateway record of a trace: 0 for the outermost gateway
/// (an edge gateway or ingress), 1 for the one it forwarded to (an API
/// gateway, a sidecar), … (`None` for application records). A gateway is a
/// `service.name`; the outermost is the one whose request began first (its
/// record's time less its duration), the longer one on a tie: it holds the
/// others inside it.
pub fn hops(logs: &[Arc<LogEvidence>]) -> Vec<Option<i64>> {
    let start = |l: &LogEvidence| {
        let d = l
            .duration_ms
            .filter(|d| d.is_finite() && *d >= 0.0)
            .unwrap_or(0.0);
        (l.time_ns as f64 / 1e6 - d, -d)
    };
    // Each gateway's earliest start.
    let mut firsts: Vec<(&str, (f64, f64))> = Vec::new();
    for l in logs.iter().filter(|l| l.gateway) {
        let s = start(l);
        match firsts.iter_mut().find(|(svc, _)| *svc == l.service) {
            Some((_, f)) if s.partial_cmp(f) == Some(std::cmp::Ordering::Less) => *f = s,
            Some(_) => {}
            None => firsts.push((&l.service, s)),
        }
    }
    firsts.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal));
    logs.iter()
        .map(|l| {
            l.gateway
                .then(|| firsts.iter().position(|(svc, _)| *svc == l.service))
                .flatten()
                .map(|i| i as i64)
        })
        .collect()
}

/// Join each trace with its log records.
pub fn join(traces: &mut [TraceRow], store: &Store) {
    for t in traces.iter_mut() {
        t.logs = store.logs_of(&t.id);
        // The gateway's own route id is the route; the service route it maps
        // to is learned, so a trace whose gateway log is missing still gets it.
        let entry_route = t.route.clone();
        // Gateways in layers: the request's answer and its route are the
        // outermost gateway's; an inner hop's lines are evidence of the hop.
        let hop = hops(&t.logs);
        let outer: Vec<&Arc<LogEvidence>> = t
            .logs
            .iter()
            .zip(&hop)
            .filter(|(_, h)| **h == Some(0))
            .map(|(l, _)| l)
            .collect();
        if let Some(g) = outer.iter().max_by_key(|l| l.time_ns) {
            if let Some(st) = g.status {
                t.final_status = Some(st);
                t.failed |= st >= 500 || st == 429;
            }
        }
        let mut by_time = outer.clone();
        by_time.sort_by_key(|l| l.time_ns);
        let gw_route = by_time.iter().find_map(|l| l.route.clone());
        t.route = match (gw_route, entry_route) {
            (Some(gw), Some(entry)) => {
                store.learn_route(&entry, &gw);
                Some(gw)
            }
            (Some(gw), None) => Some(gw),
            (None, Some(entry)) => Some(store.learned_route(&entry).unwrap_or(entry)),
            (None, None) => None,
        };
        t.log_hops = hop;
    }
}

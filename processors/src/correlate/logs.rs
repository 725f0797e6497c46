//! The join of kept traces with their log records, by `trace_id`: the
//! records themselves (the rules' `logs` table), and what the gateway's own
//! record says of the request: its final status, whether it failed, and its
//! route id (learned for the entry route, so that a trace whose gateway
//! record is missing still gets it).

use super::model::TraceRow;
use super::store::Store;

/// Join each trace with its log records.
pub fn join(traces: &mut [TraceRow], store: &Store) {
    for t in traces.iter_mut() {
        t.logs = store.logs_of(&t.id);
        // The gateway's own route id is the route; the service route it maps
        // to is learned, so a trace whose gateway log is missing still gets it.
        let entry_route = t.route.clone();
        let gateway = t
            .logs
            .iter()
            .filter(|l| l.gateway)
            .max_by_key(|l| l.time_ns);
        if let Some(g) = gateway {
            if let Some(st) = g.status {
                t.final_status = Some(st);
                t.failed |= st >= 500 || st == 429;
            }
        }
        let gw_route = t
            .logs
            .iter()
            .filter(|l| l.gateway)
            .find_map(|l| l.route.clone());
        t.route = match (gw_route, entry_route) {
            (Some(gw), Some(entry)) => {
                store.learn_route(&entry, &gw);
                Some(gw)
            }
            (Some(gw), None) => Some(gw),
            (None, Some(entry)) => Some(store.learned_route(&entry).unwrap_or(entry)),
            (None, None) => None,
        };
    }
}

//! Which service answers at an address: learned from the traces analysed,
//! so that a callee that did not answer (dead, refusing, timing out before
//! its server span began) is named as the service that usually serves that
//! address rather than as its caller.
//!
//! Learned from a client span whose server child is in the trace (the
//! client's `server.address:server.port` → the child's `service.name`), and
//! from a server span that serves an RPC service (its `rpc.service` → its
//! `service.name`: a gRPC client span need carry no address), and from
//! the calls a proxy forwarded (`TraceRow::proxied`: a gateway's upstream
//! address → the service of the server span that answered the line's
//! span; whether the gateway is an edge or a sidecar's egress, the span
//! below it is the upstream's). Bounded: at most `max` addresses; when
//! full, the address learned longest ago goes. It knows no evidence source.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use crate::correlate::model::trace::SpanKind;
use crate::correlate::model::{SpanRow, TraceRow};

#[derive(Debug, Default)]
struct Inner {
    map: HashMap<String, Arc<str>>,
    order: VecDeque<String>,
}

/// The services seen serving each address.
#[derive(Debug)]
pub struct Peers {
    inner: Mutex<Inner>,
    max: usize,
}

/// The RPC service a span calls or serves, as the key it is learned by.
pub fn rpc_of(s: &SpanRow) -> Option<String> {
    let r = s.rpc_service.as_deref().filter(|r| !r.is_empty())?;
    Some(format!("rpc:{}", r.to_ascii_lowercase()))
}

/// The address a client span called, as `host:port` (or `host`), lowercased.
pub fn address_of(s: &SpanRow) -> Option<String> {
    let host = s.server_address.as_deref().filter(|h| !h.is_empty())?;
    Some(match s.server_port {
        Some(p) if !host.contains(':') || host.starts_with('[') => {
            format!("{}:{p}", host.to_ascii_lowercase())
        }
        _ => host.to_ascii_lowercase(),
    })
}

impl Peers {
    /// Empty, holding at most `max` addresses.
    pub fn new(max: usize) -> Self {
        Peers {
            inner: Mutex::new(Inner::default()),
            max: max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        crate::correlate::model::lock(&self.inner)
    }

    fn put(g: &mut Inner, max: usize, addr: String, service: &Arc<str>) {
        if service.is_empty() {
            return;
        }
        match g.map.get(&addr) {
            Some(s) if s == service || s.is_empty() => return,
            // Two services behind one address (a gateway, a load balancer
            // in front of several): it names none of them.
            Some(_) => {
                g.map.insert(addr, Arc::from(""));
                return;
            }
            None => {
                while g.map.len() >= max {
                    match g.order.pop_front() {
                        Some(old) => {
                            g.map.remove(&old);
                        }
                        None => break,
                    }
                }
                g.order.push_back(addr.clone());
            }
        }
        g.map.insert(addr, service.clone());
    }

    /// Learn from analysed traces, then name the callee of every client
    /// span that has none from what was learned.
    pub fn learn_and_fill(&self, traces: &mut [TraceRow]) {
        let mut g = self.lock();
        for t in traces.iter() {
            for s in &t.spans {
                if s.kind == SpanKind::Server {
                    if let Some(rpc) = rpc_of(s) {
                        Self::put(&mut g, self.max, rpc, &s.service);
                    }
                }
                if let (Some(callee), Some(addr)) = (
                    s.callee.as_ref().filter(|_| s.kind == SpanKind::Client),
                    address_of(s),
                ) {
                    // A service "answering" its own call is a repaired
                    // layout (an orphan adopted), not an address learned.
                    if s.peer_service.is_none() && *callee != s.service {
                        Self::put(&mut g, self.max, addr, callee);
                    }
                }
            }
            for (span, addr) in &t.proxied {
                let answered = t
                    .spans
                    .iter()
                    .find(|s| s.kind == SpanKind::Server && s.parent_id == *span && *span != 0);
                if let Some(server) = answered {
                    let addr = addr.trim().to_ascii_lowercase();
                    Self::put(&mut g, self.max, addr, &server.service);
                }
            }
        }
        for t in traces.iter_mut() {
            for s in t.spans.iter_mut().filter(|s| s.callee.is_none()) {
                if !matches!(s.kind, SpanKind::Client | SpanKind::Producer) {
                    continue;
                }
                let known = |k: Option<String>| {
                    k.and_then(|k| g.map.get(&k).cloned())
                        .filter(|x| !x.is_empty())
                };
                s.callee = known(address_of(s)).or_else(|| known(rpc_of(s)));
            }
        }
    }

    /// The service seen serving an address, if any.
    pub fn resolve(&self, addr: &str) -> Option<Arc<str>> {
        self.lock()
            .map
            .get(&addr.trim().to_ascii_lowercase())
            .cloned()
            .filter(|x| !x.is_empty())
    }

    /// How many addresses are known.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// None known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::correlate::model::attributes::SpanAttrs;

    fn client(addr: &str, port: i64, callee: Option<&str>) -> SpanRow {
        SpanRow {
            kind: SpanKind::Client,
            attrs: SpanAttrs {
                server_address: Some(addr.into()),
                server_port: Some(port),
                ..Default::default()
            },
            callee: callee.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn a_callee_seen_once_names_the_address_later_and_the_bound_holds() {
        let p = Peers::new(2);
        let mut seen = vec![TraceRow {
            spans: vec![client("Pricing.local", 80, Some("pricing"))],
            ..Default::default()
        }];
        p.learn_and_fill(&mut seen);
        // A later call to the same address, whose callee never answered.
        let mut later = vec![TraceRow {
            spans: vec![client("pricing.local", 80, None), client("other", 1, None)],
            ..Default::default()
        }];
        p.learn_and_fill(&mut later);
        assert_eq!(later[0].spans[0].callee.as_deref(), Some("pricing"));
        assert_eq!(later[0].spans[1].callee, None);
        assert_eq!(p.resolve("PRICING.local:80").as_deref(), Some("pricing"));
        // Bounded: two more addresses push the oldest out.
        let mut more = vec![TraceRow {
            spans: vec![client("a", 1, Some("a")), client("b", 1, Some("b"))],
            ..Default::default()
        }];
        p.learn_and_fill(&mut more);
        assert_eq!(p.len(), 2);
        assert_eq!(p.resolve("pricing.local:80"), None);
        // An address two services answer behind (a gateway) names neither.
        let mut two = vec![TraceRow {
            spans: vec![
                client("gw", 443, Some("shop")),
                client("gw", 443, Some("pricing")),
            ],
            ..Default::default()
        }];
        p.learn_and_fill(&mut two);
        assert_eq!(p.resolve("gw:443"), None);
        let mut later = vec![TraceRow {
            spans: vec![client("gw", 443, None)],
            ..Default::default()
        }];
        p.learn_and_fill(&mut later);
        assert_eq!(later[0].spans[0].callee, None);
    }

    #[test]
    fn a_server_span_names_the_rpc_service_it_serves() {
        let p = Peers::new(8);
        let mut seen = vec![TraceRow {
            spans: vec![SpanRow {
                kind: SpanKind::Server,
                service: "reservations".into(),
                attrs: SpanAttrs {
                    rpc_service: Some("reservations.Book".into()),
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }];
        p.learn_and_fill(&mut seen);
        // A gRPC client span with no address, whose callee never answered.
        let mut later = vec![TraceRow {
            spans: vec![SpanRow {
                kind: SpanKind::Client,
                service: "api".into(),
                attrs: SpanAttrs {
                    rpc_service: Some("reservations.Book".into()),
                    ..Default::default()
                },
                ..Default::default()
            }],
            ..Default::default()
        }];
        p.learn_and_fill(&mut later);
        assert_eq!(later[0].spans[0].callee.as_deref(), Some("reservations"));
    }

    #[test]
    fn a_proxied_call_names_its_upstream_after_the_server_span_that_answered_it() {
        let p = Peers::new(8);
        let span = |kind, service: &str, span_id, parent_id| SpanRow {
            kind,
            service: service.into(),
            span_id,
            parent_id,
            ..Default::default()
        };
        // The client's call went through a gateway to 127.0.0.1:9000,
        // where the assistant answered it.
        let mut seen = vec![TraceRow {
            spans: vec![
                span(SpanKind::Client, "driver", 7, 0),
                span(SpanKind::Server, "assistant", 8, 7),
            ],
            proxied: vec![(7, "127.0.0.1:9000".into())],
            ..Default::default()
        }];
        p.learn_and_fill(&mut seen);
        assert_eq!(p.resolve("127.0.0.1:9000").as_deref(), Some("assistant"));
        // A line whose call nothing answered in the trace teaches nothing.
        let mut unanswered = vec![TraceRow {
            spans: vec![span(SpanKind::Client, "driver", 9, 0)],
            proxied: vec![(9, "127.0.0.1:9001".into())],
            ..Default::default()
        }];
        p.learn_and_fill(&mut unanswered);
        assert_eq!(p.resolve("127.0.0.1:9001"), None);
    }
}

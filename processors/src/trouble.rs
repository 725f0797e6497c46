//! What the `correlated` tail-sampling policy asks of a correlation state:
//! the narrow interface between `tail_sampling` and `correlate`, so that
//! neither imports the other. `correlate` publishes a [`TroubleState`] in
//! the topology's shared state under its id; the policy reads it there.

use std::sync::Arc;

/// What counts as trouble for signal-aware sampling.
#[derive(Debug, Clone)]
pub struct Trouble {
    /// Gateway statuses.
    pub statuses: Vec<i64>,
    /// Share of a route's requests answered with `statuses`.
    pub route_error_ratio: f64,
    /// CPU busy share.
    pub cpu_busy: f64,
    /// iowait share.
    pub iowait: f64,
    /// Memory used share.
    pub memory_used: f64,
}

/// A trace's values of an attribute, by attribute name (span and resource
/// attributes alike).
pub type Values<'a> = &'a dyn Fn(&str) -> Vec<&'a str>;

/// The span and resource attributes a correlation state joins on (routes,
/// topics and queues, hosts): what the `correlated` policy reads of a trace
/// unless its `attributes` say otherwise. `correlate`'s tests check that
/// every evidence source's keys are here.
pub const ATTRIBUTES: &[&str] = &[
    "http.route",
    "route_id",
    "messaging.destination.name",
    "messaging.destination",
    "messaging.rabbitmq.destination.routing_key",
    "messaging.rabbitmq.routing_key",
    "host.name",
];

/// A correlation state that can say whether a trace's surroundings show trouble.
pub trait TroubleState: Send + Sync {
    /// Whether what is known around the trace (its gateway requests, its
    /// route, its topics' lag, its hosts' pressure) shows `trouble`.
    fn in_trouble(&self, trace_id: &[u8; 16], values: Values<'_>, trouble: &Trouble) -> bool;
}

impl<T: TroubleState> TroubleState for Arc<T> {
    fn in_trouble(&self, trace_id: &[u8; 16], values: Values<'_>, trouble: &Trouble) -> bool {
        (**self).in_trouble(trace_id, values, trouble)
    }
}

/// What the owner publishes in the shared state (a sized handle on the state).
pub type Published = Box<dyn TroubleState>;

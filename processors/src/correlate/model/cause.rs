//! Causes, described where they are found. A rule concludes a cause; the
//! verdict weighs findings by what their causes are, never by their names:
//! the kind of fault a cause blames when its rule does not say, whether it
//! names a span rather than a mechanism (a fallback), how its failure shows
//! to the caller at the same call, whether the trace is held for evidence
//! that could replace it. A cause's descriptor sits beside the rule that
//! finds it; a cause several files find (a gateway's line, Envoy's
//! counters and a span's own status can all show an open circuit) is
//! described here, once, and they name it by its constant.
//! `tests/layering.rs` refuses a cause's name written anywhere else.

use super::trace::SpanRow;

/// How a failure looks to the caller at one call: what a cause's failure
/// shows as ([`Cause::shows_as`]) and what a cause is there ([`Cause::face`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Face {
    /// The callee could not be reached or refused (502, 503, UNAVAILABLE).
    Unavailable,
    /// The callee did not answer in time (504, DEADLINE_EXCEEDED).
    Timeout,
    /// Something limited the request (429, RESOURCE_EXHAUSTED).
    RateLimited,
    /// A failure with nothing but its error to show.
    Error,
    /// A message waited behind others.
    Lag,
}

/// What the verdict needs to know of a cause.
#[derive(Debug)]
pub struct Cause {
    /// Its name (`rca.cause`).
    pub name: &'static str,
    /// The kind of fault it blames (`rca.culprit.kind`) when its rule does
    /// not say, from the span it names.
    pub kind: fn(&SpanRow) -> CulpritKind,
    /// It names a span, not a mechanism (an error with no mechanism found,
    /// a span slower than its baseline): a mechanism explaining the same
    /// failure, or half the same time, explains it.
    pub fallback: bool,
    /// On a span with nothing but a status to show, it says that the
    /// request failed, not where: it sits at the response.
    pub status_only_at_response: bool,
    /// What it is at the call it names, as a caller sees it.
    pub face: Option<Face>,
    /// How its failure looks to the caller at the same call: findings of
    /// causes with these faces there are its consequences.
    pub shows_as: &'static [Face],
    /// It holds the failures inside its own attempts (a retry storm): it is
    /// placed at the failure's origin, and the trace's retries are its own
    /// story, not a note.
    pub holds_retries: bool,
    /// A client retrying what it answered (a limiter's 429, an open
    /// circuit, an unavailable callee) is its consequence: at the same
    /// call, it sits where the retries do and wins over a cause that holds
    /// them ([`Cause::holds_retries`]).
    pub triggers_retries: bool,
    /// Evidence that would replace it may still arrive (gateway logs,
    /// metrics, a callee's spans): the trace is held for
    /// `evidence_wait` before its verdict is final.
    pub waits: bool,
}

impl Cause {
    /// A cause blaming `kind`, with nothing else to say.
    pub const fn new(name: &'static str, kind: fn(&SpanRow) -> CulpritKind) -> Cause {
        Cause {
            name,
            kind,
            fallback: false,
            status_only_at_response: false,
            face: None,
            shows_as: &[],
            holds_retries: false,
            triggers_retries: false,
            waits: false,
        }
    }
    /// It names a span, not a mechanism.
    pub const fn fallback(mut self) -> Cause {
        self.fallback = true;
        self
    }
    /// A status alone places it at the response.
    pub const fn status_only_at_response(mut self) -> Cause {
        self.status_only_at_response = true;
        self
    }
    /// What it is at the call it names.
    pub const fn face(mut self, f: Face) -> Cause {
        self.face = Some(f);
        self
    }
    /// How its failure looks to the caller.
    pub const fn shows_as(mut self, faces: &'static [Face]) -> Cause {
        self.shows_as = faces;
        self
    }
    /// It holds the failures inside its attempts.
    pub const fn holds_retries(mut self) -> Cause {
        self.holds_retries = true;
        self
    }
    /// Retries of what it answered are its consequence.
    pub const fn triggers_retries(mut self) -> Cause {
        self.triggers_retries = true;
        self
    }
    /// Its trace is held for evidence that could replace it.
    pub const fn waits(mut self) -> Cause {
        self.waits = true;
        self
    }
    /// Whether it explains `other` found at the same call (`other` is how
    /// its failure shows there).
    pub fn explains(&self, other: &Cause) -> bool {
        other.face.is_some_and(|f| self.shows_as.contains(&f))
    }
}

/// The kinds of culprit (`rca.culprit.kind`):
/// - `service`: the service whose own code or resources failed or took the time;
/// - `callee`: a service that did not answer, timed out, refused, had its
///   circuit open or queued the request (named from the callee's spans,
///   `peer.service`, or its address mapped to the service that serves it);
/// - `dependency`: a database, cache, broker or model server (named by
///   `peer.service`, else `db.system`/`messaging.system`);
/// - `limiter`: what rate-limited the request (the gateway or the callee);
/// - `host`: the host (the service that ran on it is named);
/// - `consumer`: the consumer a message waited for;
/// - `gateway`: the gateway itself;
/// - `code`: a function of the service's own code that held the time
///   (named from the service's profiles).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CulpritKind {
    /// The service whose own code or resources failed or took the time.
    Service,
    /// A service that did not answer, timed out, refused, had its circuit
    /// open or queued the request.
    Callee,
    /// A database, cache, broker or model server.
    Dependency,
    /// What rate-limited the request (the gateway or the callee).
    Limiter,
    /// The host (the service that ran on it is named).
    Host,
    /// The consumer a message waited for.
    Consumer,
    /// The gateway itself.
    Gateway,
    /// A function of the service's own code that held the time.
    Code,
}

impl CulpritKind {
    /// Every kind.
    pub const ALL: [CulpritKind; 8] = [
        CulpritKind::Service,
        CulpritKind::Callee,
        CulpritKind::Dependency,
        CulpritKind::Limiter,
        CulpritKind::Host,
        CulpritKind::Consumer,
        CulpritKind::Gateway,
        CulpritKind::Code,
    ];

    /// Its name (`rca.culprit.kind`, a rule's `culprit_kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            CulpritKind::Service => "service",
            CulpritKind::Callee => "callee",
            CulpritKind::Dependency => "dependency",
            CulpritKind::Limiter => "limiter",
            CulpritKind::Host => "host",
            CulpritKind::Consumer => "consumer",
            CulpritKind::Gateway => "gateway",
            CulpritKind::Code => "code",
        }
    }

    /// The kind a rule named, if it is one.
    pub fn named(name: &str) -> Option<CulpritKind> {
        CulpritKind::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for CulpritKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for CulpritKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// `service`: the service's own code or resources.
pub fn service(_: &SpanRow) -> CulpritKind {
    CulpritKind::Service
}
/// `callee`: the service a call went to.
pub fn callee(_: &SpanRow) -> CulpritKind {
    CulpritKind::Callee
}
/// `limiter`: what rate-limited the request.
pub fn limiter(_: &SpanRow) -> CulpritKind {
    CulpritKind::Limiter
}
/// `consumer`: the consumer a message waited for.
pub fn consumer(_: &SpanRow) -> CulpritKind {
    CulpritKind::Consumer
}
/// `host`: the machine the service ran on.
pub fn host(_: &SpanRow) -> CulpritKind {
    CulpritKind::Host
}
/// `code`: a function of the service's own code (from its profiles).
pub fn code(_: &SpanRow) -> CulpritKind {
    CulpritKind::Code
}
/// `dependency`: a database, cache, broker or model server.
pub fn dependency(_: &SpanRow) -> CulpritKind {
    CulpritKind::Dependency
}

/// A prompt far longer than the model's usual held the prefill (a server's
/// own prefill span, or llama.cpp's rate against the client's tokens).
pub static LONG_PROMPT: Cause = Cause::new("long_prompt", service);

/// No rule found a cause: the verdict's own answer.
pub static UNKNOWN: Cause = Cause::new("unknown", service).waits();
/// A callee that did not answer in time (a span's deadline, a gateway's 504).
pub static UPSTREAM_TIMEOUT: Cause = Cause::new("upstream_timeout", callee)
    .face(Face::Timeout)
    .waits();
/// A callee that could not be reached or refused (a span's UNAVAILABLE, a
/// gateway's 502/503, Envoy's connect failures).
pub static UPSTREAM_UNAVAILABLE: Cause = Cause::new("upstream_unavailable", callee)
    .face(Face::Unavailable)
    .triggers_retries();
/// An open circuit breaker refused the call (an application's breaker, a
/// gateway's, Envoy's).
pub static CIRCUIT_OPEN: Cause = Cause::new("circuit_open", callee)
    .shows_as(&[Face::Unavailable, Face::Error])
    .triggers_retries();
/// A client retrying fast enough to add load (a span's attempts, a topic's
/// or queue's redelivery). Its attempts' timeouts, errors and lag are how
/// it shows; a limit, an open circuit or an unavailable callee that its
/// attempts met is what it retried, and wins ([`Cause::triggers_retries`]).
pub static RETRY_STORM: Cause = Cause::new("retry_storm", callee)
    .shows_as(&[Face::Timeout, Face::Error, Face::Lag])
    .holds_retries();
/// A limiter answered (a gateway's rule, a callee's 429).
pub static RATE_LIMITED: Cause = Cause::new("rate_limited", limiter)
    .face(Face::RateLimited)
    .triggers_retries();
/// A message waited behind others (Kafka, RabbitMQ, NATS).
pub static CONSUMER_LAG: Cause = Cause::new("consumer_lag", consumer).face(Face::Lag);
/// The TLS handshake held the time (a client's phase, Envoy's TLS errors).
pub static TLS_HANDSHAKE: Cause = Cause::new("tls_handshake", callee);
/// A database out of connections (a pool's wait, the server's own count).
pub static DB_CONNECTION_SATURATION: Cause = Cause::new("db_connection_saturation", dependency);

/// The descriptors of a set of rules' causes, by name.
#[derive(Debug, Clone, Default)]
pub struct Causes(Vec<&'static Cause>);

impl Causes {
    /// The descriptors given (each name once, the first kept), and the
    /// verdict's own.
    pub fn of(all: impl IntoIterator<Item = &'static Cause>) -> Causes {
        let mut v: Vec<&'static Cause> = vec![&UNKNOWN];
        for c in all {
            if !v.iter().any(|x| x.name == c.name) {
                v.push(c);
            }
        }
        Causes(v)
    }

    /// The descriptor of `name`; a cause only a user's rule names is a
    /// mechanism blaming the service, with nothing else to say.
    pub fn get(&self, name: &str) -> &'static Cause {
        static USERS: Cause = Cause::new("", service);
        self.0
            .iter()
            .copied()
            .find(|c| c.name == name)
            .unwrap_or(&USERS)
    }

    /// Every descriptor.
    pub fn all(&self) -> &[&'static Cause] {
        &self.0
    }
}

//! What the rules conclude: rules, findings, the verdict of a trace, and
//! the record of an analysed trace.

/// A rule ready to run.
#[derive(Debug, Clone)]
pub struct Rule {
    /// Name (`rca.rule`).
    pub name: String,
    /// Cause.
    pub cause: String,
    /// SQL.
    pub sql: String,
    /// A user rule (wins ties against built-ins).
    pub user: bool,
    /// What its cause is, for a built-in rule (a user's rule's cause is
    /// looked up by name among the built-ins').
    pub described: Option<&'static super::cause::Cause>,
}

impl Rule {
    /// A built-in rule finding `cause`.
    pub fn builtin(name: &str, cause: &'static super::cause::Cause, sql: &str) -> Rule {
        Rule {
            name: name.into(),
            cause: cause.name.into(),
            sql: sql.into(),
            user: false,
            described: Some(cause),
        }
    }

    /// The descriptors of the causes of `rules`.
    pub fn causes(rules: &[Rule]) -> super::cause::Causes {
        super::cause::Causes::of(rules.iter().filter_map(|r| r.described))
    }
}

/// What a rule concluded for a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    /// Rule name.
    pub rule: String,
    /// Cause.
    pub cause: String,
    /// 0..1.
    pub confidence: f64,
    /// One sentence.
    pub summary: String,
    /// Culprit span the rule named.
    pub culprit_span_id: Option<String>,
    /// The service at fault the rule named (a service, an address, a
    /// dependency, a gateway), when the span alone does not say it.
    pub culprit_service: Option<String>,
    /// The kind of fault the rule named (a [`CulpritKind`](super::cause::CulpritKind)'s name), when
    /// its cause's default does not fit.
    pub culprit_kind: Option<String>,
    /// Extra evidence the rule returned.
    pub evidence: Option<String>,
    /// The span a gateway's line answered (its caller's, from the
    /// `at_span_id` column): where a finding of no span sits on the trace.
    pub at_span_id: Option<String>,
    /// From a user rule.
    pub user: bool,
    /// The critical-path time (ms) the finding accounts for.
    pub explained_ms: f64,
    /// It explains why the request failed (not only why it was slow).
    pub explains_failure: bool,
}

/// The root-cause verdict of one trace.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The winning finding (cause `unknown` when no finding explains enough).
    pub best: Finding,
    /// The others, best first, each with the time it explains.
    pub alternatives: Vec<Finding>,
    /// Culprit span index: the span that shows the fault.
    pub culprit: usize,
    /// The service at fault (`rca.culprit.service`): the callee, the
    /// dependency, the limiter, the consumer, or the service itself.
    pub culprit_service: String,
    /// What kind of fault (`rca.culprit.kind`).
    pub culprit_kind: super::cause::CulpritKind,
    /// Why this cause won (`rca.reason`): where it sits in the failure's
    /// chain or how much time it explains, and what it was preferred to.
    pub reason: String,
}

/// One analysed trace, for the RCA log record and counter.
#[derive(Debug, Clone, PartialEq)]
pub struct RcaEvent {
    /// When (ns).
    pub time_ns: u64,
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Root span id.
    pub span_id: [u8; 8],
    /// Cause.
    pub cause: String,
    /// Summary sentence.
    pub summary: String,
    /// Route.
    pub route: String,
    /// Culprit service.
    pub service: String,
    /// Culprit kind.
    pub culprit_kind: super::cause::CulpritKind,
    /// Culprit span id (hex).
    pub culprit_span_id: String,
    /// Confidence.
    pub confidence: f64,
    /// Rule name.
    pub rule: String,
    /// Nothing to explain: no cause found and the request did not fail
    /// (its record is INFO, not WARN, and the page counts it apart).
    pub healthy: bool,
    /// More attributes of its record (the incident sample's); not kept
    /// with the analysed traces of the window.
    pub extra: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
}

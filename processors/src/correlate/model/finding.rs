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
}

impl Rule {
    /// A built-in rule.
    pub fn builtin(name: &str, cause: &str, sql: &str) -> Rule {
        Rule {
            name: name.into(),
            cause: cause.into(),
            sql: sql.into(),
            user: false,
        }
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
    /// Extra evidence the rule returned.
    pub evidence: Option<String>,
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
    /// Culprit span index.
    pub culprit: usize,
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
    /// Culprit span id (hex).
    pub culprit_span_id: String,
    /// Confidence.
    pub confidence: f64,
    /// Rule name.
    pub rule: String,
}

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

//! Configuration of the `tail_sampling` processor. The top-level keys and
//! the policy shape (`{name, type, <type>: {…}}`) are the OpenTelemetry
//! Collector's, so its configs paste in; causeway adds `max_memory`,
//! `max_spans_per_trace`, `always_keep_errors` and the `adaptive_latency` policy.

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use serde::Deserialize;

/// `processors.tail_sampling`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TailSamplingConfig {
    /// How long after a trace's first span to decide (default 30s).
    #[serde(default = "default_wait")]
    pub decision_wait: Duration,
    /// Decide this long after the root span (no parent) arrived, when that is
    /// sooner than `decision_wait` (default 0s: off).
    #[serde(default)]
    pub decision_wait_after_root_received: Duration,
    /// Most traces held at once; beyond it the oldest are decided early (default 50000).
    #[serde(default = "default_num_traces")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub num_traces: usize,
    /// Accepted for compatibility with the Collector; not needed here.
    #[serde(default)]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub expected_new_traces_per_sec: u64,
    /// Most bytes of pending spans (measured: encoded spans plus bookkeeping);
    /// beyond it the oldest traces are decided early (default 256MiB).
    #[serde(default = "default_max_memory")]
    pub max_memory: ByteSize,
    /// A trace bigger than this is decided at once (0: off; default 0).
    #[serde(default, alias = "max_trace_size_bytes")]
    pub maximum_trace_size_bytes: ByteSize,
    /// A trace with more spans than this is decided at once (0: off; default 10000).
    #[serde(default = "default_max_spans")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub max_spans_per_trace: usize,
    /// Remembered decisions, so late spans follow them.
    #[serde(default)]
    pub decision_cache: DecisionCacheConfig,
    /// Stop evaluating at the first policy that samples.
    #[serde(default)]
    pub sample_on_first_match: bool,
    /// At shutdown, drop pending traces instead of deciding them (default false).
    #[serde(default)]
    pub drop_pending_traces_on_shutdown: bool,
    /// Keep every trace with an ERROR span, whatever the policies say,
    /// unless a `drop` policy drops it (default true).
    #[serde(default = "yes")]
    pub always_keep_errors: bool,
    /// The policies, evaluated in order.
    #[serde(default)]
    pub policies: Vec<PolicyConfig>,
}

fn yes() -> bool {
    true
}
fn default_wait() -> Duration {
    Duration::secs(30)
}
fn default_num_traces() -> usize {
    50_000
}
fn default_max_memory() -> ByteSize {
    ByteSize(256 << 20)
}
fn default_max_spans() -> usize {
    10_000
}

/// `decision_cache`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionCacheConfig {
    /// Trace ids of kept traces to remember (default 100000).
    #[serde(default = "default_cache")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub sampled_cache_size: usize,
    /// Trace ids of dropped traces to remember (default 100000).
    #[serde(default = "default_cache")]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub non_sampled_cache_size: usize,
}

impl Default for DecisionCacheConfig {
    fn default() -> Self {
        DecisionCacheConfig {
            sampled_cache_size: default_cache(),
            non_sampled_cache_size: default_cache(),
        }
    }
}

fn default_cache() -> usize {
    100_000
}

/// Policy types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyType {
    /// Keep everything.
    AlwaysSample,
    /// Keep traces at least `threshold_ms` long.
    Latency,
    /// Keep traces slower than their route's rolling quantile.
    AdaptiveLatency,
    /// Keep traces with a span in one of the listed statuses.
    StatusCode,
    /// Keep traces with a string attribute matching.
    StringAttribute,
    /// Keep traces with a numeric attribute in range.
    NumericAttribute,
    /// Keep traces with a boolean attribute equal to a value.
    BooleanAttribute,
    /// Keep traces with a span whose W3C `tracestate` has `key` equal to one of the values.
    TraceState,
    /// The Collector's OTTL conditions: not supported (validation says what to use).
    OttlCondition,
    /// Keep a fixed share of traces, by trace id.
    Probabilistic,
    /// Keep traces while under a spans/s budget.
    RateLimiting,
    /// Keep traces with a span count in range.
    SpanCount,
    /// Keep when every sub-policy keeps.
    And,
    /// Drop when every sub-policy keeps.
    Drop,
    /// Sub-policies in priority order sharing a spans/s budget.
    Composite,
    /// Keep traces whose gateway logs, route, topics or hosts show trouble,
    /// read from a `correlate` processor's state.
    Correlated,
}

/// One policy: `{name, type, <type>: {…}}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Name, used in `sampling.policy` and metrics.
    pub name: String,
    /// Type.
    #[serde(rename = "type")]
    pub kind: PolicyType,
    /// `latency` settings.
    pub latency: Option<LatencyConfig>,
    /// `adaptive_latency` settings.
    pub adaptive_latency: Option<AdaptiveLatencyConfig>,
    /// `status_code` settings.
    pub status_code: Option<StatusCodeConfig>,
    /// `string_attribute` settings.
    pub string_attribute: Option<StringAttributeConfig>,
    /// `numeric_attribute` settings.
    pub numeric_attribute: Option<NumericAttributeConfig>,
    /// `boolean_attribute` settings.
    pub boolean_attribute: Option<BooleanAttributeConfig>,
    /// `trace_state` settings.
    pub trace_state: Option<TraceStateConfig>,
    /// `ottl_condition` settings (read only to report them unsupported).
    pub ottl_condition: Option<serde_yaml::Value>,
    /// `probabilistic` settings.
    pub probabilistic: Option<ProbabilisticConfig>,
    /// `rate_limiting` settings.
    pub rate_limiting: Option<RateLimitingConfig>,
    /// `span_count` settings.
    pub span_count: Option<SpanCountConfig>,
    /// `and` settings.
    pub and: Option<AndConfig>,
    /// `drop` settings.
    pub drop: Option<DropConfig>,
    /// `composite` settings.
    pub composite: Option<CompositeConfig>,
    /// `correlated` settings.
    pub correlated: Option<CorrelatedConfig>,
}

/// `correlated`: signal-aware sampling.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrelatedConfig {
    /// The id of the `correlate` processor whose state is read (default `correlate`).
    #[serde(default = "default_correlate")]
    pub processor: String,
    /// Gateway answers that mark a trace's own request as in trouble (default 429, 503, 504).
    #[serde(default = "default_trouble_statuses")]
    pub statuses: Vec<i64>,
    /// A route is in trouble when this share of its gateway requests in the
    /// window answered one of `statuses`, or its circuit is not CLOSED (default 0.05).
    #[serde(default = "default_route_ratio")]
    pub route_error_ratio: f64,
    /// A host is in trouble above this CPU busy share (default 0.9)…
    #[serde(default = "default_cpu_busy")]
    pub cpu_busy: f64,
    /// …or this iowait share (default 0.2)…
    #[serde(default = "default_iowait")]
    pub iowait: f64,
    /// …or this memory used share (default 0.95).
    #[serde(default = "default_memory_used")]
    pub memory_used: f64,
}

fn default_correlate() -> String {
    "correlate".into()
}
fn default_trouble_statuses() -> Vec<i64> {
    vec![429, 503, 504]
}
fn default_route_ratio() -> f64 {
    0.05
}
fn default_cpu_busy() -> f64 {
    0.9
}
fn default_iowait() -> f64 {
    0.2
}
fn default_memory_used() -> f64 {
    0.95
}

/// `latency`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LatencyConfig {
    /// Keep traces lasting at least this (earliest start to latest end).
    pub threshold_ms: u64,
    /// And at most this (0: no upper bound).
    #[serde(default)]
    pub upper_threshold_ms: u64,
}

/// `adaptive_latency`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveLatencyConfig {
    /// Keep traces slower than this quantile of their route (default 0.99).
    #[serde(default = "default_quantile")]
    pub quantile: f64,
    /// The rolling window (default 5m).
    #[serde(default = "default_window")]
    pub window: Duration,
    /// Never keep a trace faster than this, whatever its route's quantile (default 0).
    #[serde(default)]
    pub min_threshold_ms: u64,
    /// Traces a route must have seen in the window before the policy keeps any (default 100).
    #[serde(default = "default_warmup")]
    pub warmup_count: u64,
    /// Span attributes naming the route, first found wins (default `http.route`, `route_id`);
    /// without one the root span's name is the route.
    #[serde(default = "default_route_attributes")]
    pub route_attributes: Vec<String>,
    /// Routes tracked; further routes share one bucket (default 1000).
    #[serde(default = "default_max_routes")]
    pub max_routes: usize,
}

fn default_quantile() -> f64 {
    0.99
}
fn default_window() -> Duration {
    Duration::secs(300)
}
fn default_warmup() -> u64 {
    100
}
fn default_max_routes() -> usize {
    1000
}
/// The default route attributes.
pub fn default_route_attributes() -> Vec<String> {
    vec!["http.route".into(), "route_id".into()]
}

/// `status_code`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusCodeConfig {
    /// `OK`, `ERROR`, `UNSET`.
    pub status_codes: Vec<StatusName>,
}

/// A span status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum StatusName {
    /// Unset.
    #[serde(rename = "UNSET")]
    Unset,
    /// Ok.
    #[serde(rename = "OK")]
    Ok,
    /// Error.
    #[serde(rename = "ERROR")]
    Error,
}

/// `string_attribute`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StringAttributeConfig {
    /// Attribute key (span or resource).
    pub key: String,
    /// Values (or regexes) to match.
    pub values: Vec<String>,
    /// Treat `values` as regular expressions (anchored).
    #[serde(default)]
    pub enabled_regex_matching: bool,
    /// Accepted for compatibility.
    #[serde(default)]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub cache_max_size: usize,
    /// Keep traces that do *not* match.
    #[serde(default)]
    pub invert_match: bool,
}

/// `numeric_attribute`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NumericAttributeConfig {
    /// Attribute key.
    pub key: String,
    /// Lower bound, inclusive.
    #[serde(default)]
    pub min_value: Option<f64>,
    /// Upper bound, inclusive.
    #[serde(default)]
    pub max_value: Option<f64>,
    /// Keep traces that do *not* match.
    #[serde(default)]
    pub invert_match: bool,
}

/// `boolean_attribute`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BooleanAttributeConfig {
    /// Attribute key.
    pub key: String,
    /// The value to match.
    pub value: bool,
    /// Keep traces that do *not* match.
    #[serde(default)]
    pub invert_match: bool,
}

/// `trace_state`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TraceStateConfig {
    /// The tracestate list-member key.
    pub key: String,
    /// Values matched exactly. As in the Collector, empty values and those
    /// with `key` and value together 256 bytes or longer are left out.
    pub values: Vec<String>,
}

impl TraceStateConfig {
    /// The values that can match.
    pub fn usable_values(&self) -> Vec<String> {
        self.values
            .iter()
            .filter(|v| !v.is_empty() && self.key.len() + v.len() < 256)
            .cloned()
            .collect()
    }
}

/// `probabilistic`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProbabilisticConfig {
    /// Percentage of traces to keep, 0–100.
    pub sampling_percentage: f64,
    /// Salt of the trace-id hash; instances that must agree share it.
    #[serde(default)]
    pub hash_salt: String,
}

/// `rate_limiting`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitingConfig {
    /// Spans per second.
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub spans_per_second: u64,
}

/// `span_count`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpanCountConfig {
    /// At least this many spans.
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub min_spans: usize,
    /// At most this many (0: no bound).
    #[serde(default)]
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub max_spans: usize,
}

/// `and`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AndConfig {
    /// Sub-policies that must all keep.
    pub and_sub_policy: Vec<PolicyConfig>,
}

/// `drop`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DropConfig {
    /// Sub-policies that must all match for the trace to be dropped.
    pub drop_sub_policy: Vec<PolicyConfig>,
}

/// `composite`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompositeConfig {
    /// The budget shared by the sub-policies.
    #[serde(deserialize_with = "causeway_core::config::lenient_int")]
    pub max_total_spans_per_second: u64,
    /// Sub-policy names in priority order.
    pub policy_order: Vec<String>,
    /// The sub-policies.
    pub composite_sub_policy: Vec<PolicyConfig>,
    /// Share of the budget each may use (default: all of what is left).
    #[serde(default)]
    pub rate_allocation: Vec<RateAllocation>,
}

/// `{policy, percent}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateAllocation {
    /// Sub-policy name.
    pub policy: String,
    /// Percent of `max_total_spans_per_second`.
    pub percent: f64,
}

impl Validate for TailSamplingConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.decision_wait.get().is_zero() {
            e.push(ConfigError::new("decision_wait", "must be greater than 0"));
        }
        if self.num_traces == 0 {
            e.push(ConfigError::new("num_traces", "must be at least 1"));
        }
        if self.max_memory.0 < 1 << 20 {
            e.push(ConfigError::new("max_memory", "must be at least 1MiB"));
        }
        if self.policies.is_empty() && !self.always_keep_errors {
            e.push(ConfigError::new(
                "policies",
                "at least one policy is required",
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, p) in self.policies.iter().enumerate() {
            let path = format!("policies[{i}]");
            if !names.insert(p.name.as_str()) {
                e.push(ConfigError::new(
                    format!("{path}.name"),
                    format!("duplicate policy name {:?}", p.name),
                ));
            }
            validate_policy(p, &path, 0, &mut e);
        }
        e
    }
}

fn validate_policy(p: &PolicyConfig, path: &str, depth: usize, e: &mut Vec<ConfigError>) {
    let err = |e: &mut Vec<ConfigError>, key: &str, msg: String| {
        e.push(ConfigError::new(format!("{path}.{key}"), msg))
    };
    if p.name.trim().is_empty() {
        err(e, "name", "must not be empty".into());
    }
    let present = [
        ("latency", p.latency.is_some()),
        ("adaptive_latency", p.adaptive_latency.is_some()),
        ("status_code", p.status_code.is_some()),
        ("string_attribute", p.string_attribute.is_some()),
        ("numeric_attribute", p.numeric_attribute.is_some()),
        ("boolean_attribute", p.boolean_attribute.is_some()),
        ("trace_state", p.trace_state.is_some()),
        ("ottl_condition", p.ottl_condition.is_some()),
        ("probabilistic", p.probabilistic.is_some()),
        ("rate_limiting", p.rate_limiting.is_some()),
        ("span_count", p.span_count.is_some()),
        ("and", p.and.is_some()),
        ("drop", p.drop.is_some()),
        ("composite", p.composite.is_some()),
        ("correlated", p.correlated.is_some()),
    ];
    let want = match p.kind {
        PolicyType::AlwaysSample => None,
        PolicyType::Latency => Some("latency"),
        PolicyType::AdaptiveLatency => Some("adaptive_latency"),
        PolicyType::StatusCode => Some("status_code"),
        PolicyType::StringAttribute => Some("string_attribute"),
        PolicyType::NumericAttribute => Some("numeric_attribute"),
        PolicyType::BooleanAttribute => Some("boolean_attribute"),
        PolicyType::TraceState => Some("trace_state"),
        PolicyType::OttlCondition => {
            err(
                e,
                "type",
                "the `ottl_condition` policy is not supported: causeway has no OTTL engine. \
                 Write the condition as string_attribute, numeric_attribute or boolean_attribute \
                 policies (`invert_match: true` for `!=`), status_code or span_count, combined \
                 with `and` (all must hold) or inside `drop`"
                    .into(),
            );
            return;
        }
        PolicyType::Probabilistic => Some("probabilistic"),
        PolicyType::RateLimiting => Some("rate_limiting"),
        PolicyType::SpanCount => Some("span_count"),
        PolicyType::And => Some("and"),
        PolicyType::Drop => Some("drop"),
        PolicyType::Composite => Some("composite"),
        PolicyType::Correlated => Some("correlated"),
    };
    for (key, is) in present {
        if is && Some(key) != want {
            err(
                e,
                key,
                format!("does not belong to a policy of type {:?}", p.kind),
            );
        }
        if !is && Some(key) == want {
            err(e, key, "is required for this policy type".into());
        }
    }
    if let Some(l) = &p.latency {
        if l.upper_threshold_ms != 0 && l.upper_threshold_ms < l.threshold_ms {
            err(
                e,
                "latency.upper_threshold_ms",
                "must not be less than threshold_ms".into(),
            );
        }
    }
    if let Some(a) = &p.adaptive_latency {
        if !(0.5..1.0).contains(&a.quantile) {
            err(e, "adaptive_latency.quantile", "must be in [0.5, 1)".into());
        }
        if a.window.get() < std::time::Duration::from_secs(10) {
            err(e, "adaptive_latency.window", "must be at least 10s".into());
        }
        if a.max_routes == 0 {
            err(
                e,
                "adaptive_latency.max_routes",
                "must be at least 1".into(),
            );
        }
    }
    if let Some(s) = &p.status_code {
        if s.status_codes.is_empty() {
            err(
                e,
                "status_code.status_codes",
                "must list at least one of OK, ERROR, UNSET".into(),
            );
        }
    }
    if let Some(s) = &p.string_attribute {
        if s.enabled_regex_matching {
            for (i, v) in s.values.iter().enumerate() {
                if let Err(x) = regex::Regex::new(v) {
                    err(
                        e,
                        &format!("string_attribute.values[{i}]"),
                        format!("invalid regex: {x}"),
                    );
                }
            }
        }
        if s.values.is_empty() {
            err(e, "string_attribute.values", "must not be empty".into());
        }
    }
    if let Some(n) = &p.numeric_attribute {
        if n.min_value.is_none() && n.max_value.is_none() {
            err(
                e,
                "numeric_attribute",
                "set min_value and/or max_value".into(),
            );
        }
    }
    if let Some(t) = &p.trace_state {
        if t.key.is_empty() {
            err(e, "trace_state.key", "must not be empty".into());
        }
        if t.usable_values().is_empty() {
            err(
                e,
                "trace_state.values",
                "needs a non-empty value shorter than 256 bytes together with the key".into(),
            );
        }
    }
    if let Some(pr) = &p.probabilistic {
        if !(0.0..=100.0).contains(&pr.sampling_percentage) {
            err(
                e,
                "probabilistic.sampling_percentage",
                "must be between 0 and 100".into(),
            );
        }
    }
    if let Some(r) = &p.rate_limiting {
        if r.spans_per_second == 0 {
            err(
                e,
                "rate_limiting.spans_per_second",
                "must be at least 1".into(),
            );
        }
    }
    let subs: Option<(&str, &Vec<PolicyConfig>)> = match (&p.and, &p.drop, &p.composite) {
        (Some(a), _, _) => Some(("and.and_sub_policy", &a.and_sub_policy)),
        (_, Some(d), _) => Some(("drop.drop_sub_policy", &d.drop_sub_policy)),
        (_, _, Some(c)) => Some(("composite.composite_sub_policy", &c.composite_sub_policy)),
        _ => None,
    };
    if let Some((key, list)) = subs {
        if depth >= 2 {
            err(
                e,
                key,
                "sub-policies may nest at most two levels deep".into(),
            );
        }
        if list.is_empty() {
            err(e, key, "must not be empty".into());
        }
        for (i, sp) in list.iter().enumerate() {
            validate_policy(sp, &format!("{path}.{key}[{i}]"), depth + 1, e);
        }
    }
    if let Some(c) = &p.composite {
        let names: Vec<&str> = c
            .composite_sub_policy
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        for (i, n) in c.policy_order.iter().enumerate() {
            if !names.contains(&n.as_str()) {
                err(
                    e,
                    &format!("composite.policy_order[{i}]"),
                    format!("no sub-policy named {n:?}"),
                );
            }
        }
        let total: f64 = c.rate_allocation.iter().map(|r| r.percent).sum();
        if total > 100.0 {
            err(
                e,
                "composite.rate_allocation",
                format!("percentages add up to {total}, more than 100"),
            );
        }
        if c.max_total_spans_per_second == 0 {
            err(
                e,
                "composite.max_total_spans_per_second",
                "must be at least 1".into(),
            );
        }
    }
}

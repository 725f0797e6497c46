//! Sampling policies: one file per type, each an [`Evaluator`] built from
//! its own settings, which validate themselves; [`TYPES`] registers them,
//! one line each. The shape of a policy in the config is the Collector's,
//! `{name, type, <type>: {…}}`, and so are the decisions (including the
//! inverted ones of `invert_match`, see [`Decision`]).

mod adaptive_latency;
mod always_sample;
mod and;
mod boolean_attribute;
mod bytes_limiting;
mod composite;
mod correlated;
mod drop;
mod latency;
mod numeric_attribute;
mod ottl_condition;
mod probabilistic;
mod rate_limiting;
mod span_count;
mod status_code;
mod string_attribute;
mod trace_state;

pub use adaptive_latency::default_route_attributes;
#[cfg(test)]
pub use probabilistic::trace_hash;

use super::extract::{AttrValue, Keys};
use causeway_core::config::{deserialize_all, deserialize_partial, join_path, ConfigError};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Every policy type, by its `type` name.
pub static TYPES: &[Type] = &[
    Type::of::<always_sample::AlwaysSample>(),
    Type::of::<latency::Latency>(),
    Type::of::<adaptive_latency::AdaptiveLatency>(),
    Type::of::<status_code::StatusCode>(),
    Type::of::<string_attribute::StringAttribute>(),
    Type::of::<numeric_attribute::NumericAttribute>(),
    Type::of::<boolean_attribute::BooleanAttribute>(),
    Type::of::<trace_state::TraceState>(),
    Type::of::<ottl_condition::OttlCondition>(),
    Type::of::<probabilistic::Probabilistic>(),
    Type::of::<rate_limiting::RateLimiting>(),
    Type::of::<span_count::SpanCount>(),
    Type::of::<and::And>(),
    Type::of::<drop::Drop>(),
    Type::of::<composite::Composite>(),
    Type::of::<correlated::Correlated>(),
    Type::of::<bytes_limiting::BytesLimiting>(),
];

/// One policy: `{name, type, <type>: {…}}`.
#[derive(Debug, Clone, Deserialize)]
pub struct PolicyConfig {
    /// Name, used in `sampling.policy` and metrics.
    pub name: String,
    /// Type: one of [`TYPES`].
    #[serde(rename = "type")]
    pub kind: String,
    /// The type's settings under its own name (and, refused by validation,
    /// anything else).
    #[serde(flatten)]
    pub settings: BTreeMap<String, serde_yaml::Value>,
}

/// One policy's schema per type: `type` names it, its settings under that
/// name (required, optional or absent as the type takes them).
impl schemars::JsonSchema for PolicyConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "TailSamplingPolicy".into()
    }
    fn json_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one_of: Vec<serde_json::Value> = TYPES
            .iter()
            .filter(|t| t.supported)
            .map(|t| {
                let mut properties = serde_json::Map::new();
                properties.insert(
                    "name".into(),
                    serde_json::json!({"type": "string", "description": "Name, used in `sampling.policy` and metrics."}),
                );
                properties.insert("type".into(), serde_json::json!({"const": t.name}));
                let mut required = vec!["name", "type"];
                if t.settings != Takes::Nothing {
                    properties.insert(t.name.into(), (t.schema)(g).to_value());
                }
                if t.settings == Takes::Required {
                    required.push(t.name);
                }
                serde_json::json!({
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": false,
                })
            })
            .collect();
        schemars::json_schema!({
            "description": "A policy: `name`, `type` and the type's settings under its own name.",
            "oneOf": one_of,
        })
    }
}

/// What a policy says about a trace. As in the Collector, a policy with
/// `invert_match` answers with the inverted pair: a trace any such policy
/// turns away is not kept whatever the others say, and one it accepts is
/// kept only when no other policy said no.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Keep it.
    Sampled,
    /// This policy would not keep it.
    NotSampled,
    /// An inverted match accepts it (kept unless another policy said no).
    InvertSampled,
    /// An inverted match turns it away (not kept, whatever the others say).
    InvertNotSampled,
    /// Drop it, whatever the other policies say.
    Drop,
}

impl Decision {
    /// `Sampled` when `b`.
    pub fn keep_if(b: bool) -> Decision {
        if b {
            Decision::Sampled
        } else {
            Decision::NotSampled
        }
    }

    /// The decision of an attribute match: inverted when `invert`.
    pub fn matched(hit: bool, invert: bool) -> Decision {
        match (invert, hit) {
            (false, hit) => Decision::keep_if(hit),
            (true, false) => Decision::InvertSampled,
            (true, true) => Decision::InvertNotSampled,
        }
    }

    /// Whether it accepts the trace (sampled, plainly or by an inverted match).
    pub fn accepts(self) -> bool {
        matches!(self, Decision::Sampled | Decision::InvertSampled)
    }
}

/// What the policies read of a trace.
#[derive(Debug)]
pub struct TraceView<'a> {
    /// Trace id.
    pub trace_id: &'a [u8; 16],
    /// Earliest start to latest end.
    pub duration_ns: u64,
    /// Spans held.
    pub span_count: usize,
    /// Their encoded size (bytes), as they arrived and would leave.
    pub span_bytes: usize,
    /// A span had status ERROR.
    pub error: bool,
    /// A span had status OK.
    pub ok: bool,
    /// A span had status UNSET.
    pub unset: bool,
    /// Distinct span and resource attributes of interest.
    pub attrs: &'a [(u16, AttrValue)],
    /// The route (first route attribute, else the root span's name).
    pub route: Option<&'a str>,
}

impl TraceView<'_> {
    /// The values of attribute `key` (span and resource attributes alike).
    pub fn values(&self, key: u16) -> impl Iterator<Item = &AttrValue> {
        self.attrs
            .iter()
            .filter(move |(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

/// A built policy of one type.
pub trait Evaluator: Send {
    /// Its decision on a trace, at `now` (seconds on the processor's clock).
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision;

    /// The sub-policy that made its last decision, for those that have some
    /// (`sampling.policy` is then `policy/sub`).
    fn decided_by(&self) -> Option<String> {
        None
    }

    /// The adjusted count of the traces it keeps (100 / percentage for
    /// `probabilistic`).
    fn adjusted_count(&self) -> Option<f64> {
        None
    }
}

/// A policy type: its name, its settings, how it validates and builds.
pub trait Kind: 'static {
    /// The `type` value, and the key of its settings.
    const NAME: &'static str;
    /// Whether it takes `<NAME>: {…}` settings.
    const SETTINGS: Takes = Takes::Required;
    /// Whether it is supported (the JSON Schema leaves out the Collector's
    /// types that are only refused with what to write instead).
    const SUPPORTED: bool = true;
    /// Its settings (`deny_unknown_fields`).
    type Settings: DeserializeOwned + schemars::JsonSchema;
    /// Every problem of its settings, reported through `c`.
    fn check(_settings: &Self::Settings, _c: &mut Check<'_>) {}
    /// The evaluator, registering the attribute keys it reads.
    fn build(settings: Self::Settings, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String>;
}

/// Whether a policy type takes settings under its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    /// It needs them.
    Required,
    /// It reads them when present.
    Optional,
    /// It takes none.
    Nothing,
}

/// A policy type's evaluator, built from its settings.
type Build = fn(&serde_yaml::Value, &mut Keys) -> Result<Box<dyn Evaluator>, String>;

/// A registered policy type, its [`Kind`] type-erased.
pub struct Type {
    /// The `type` value.
    pub name: &'static str,
    settings: Takes,
    check: fn(&serde_yaml::Value, &mut Check<'_>),
    build: Build,
    schema: fn(&mut schemars::SchemaGenerator) -> schemars::Schema,
    supported: bool,
}

impl Type {
    /// The entry of policy type `K`.
    pub const fn of<K: Kind>() -> Type {
        Type {
            name: K::NAME,
            settings: K::SETTINGS,
            check: check_of::<K>,
            build: build_of::<K>,
            schema: |g| g.subschema_for::<K::Settings>(),
            supported: K::SUPPORTED,
        }
    }

    fn find(name: &str) -> Option<&'static Type> {
        TYPES.iter().find(|t| t.name == name)
    }
}

/// A policy's settings, an absent or null section read as empty.
fn settings<T: DeserializeOwned>(v: &serde_yaml::Value) -> Result<T, Vec<ConfigError>> {
    match v {
        serde_yaml::Value::Null => deserialize_all(serde_yaml::Value::Mapping(Default::default())),
        v => deserialize_all(v.clone()),
    }
}

/// The keys serde refuses in a policy's settings, and what the rest of
/// them fails to check, in one run (as `decode` does for a section).
fn check_of<K: Kind>(v: &serde_yaml::Value, c: &mut Check<'_>) {
    let v = match v {
        serde_yaml::Value::Null => serde_yaml::Value::Mapping(Default::default()),
        v => v.clone(),
    };
    let (settings, errors) = deserialize_partial::<K::Settings>(v);
    let at = c.at("");
    c.errors.extend(errors.into_iter().map(|e| e.under(&at)));
    if let Some(s) = settings {
        K::check(&s, c);
    }
}

fn build_of<K: Kind>(v: &serde_yaml::Value, keys: &mut Keys) -> Result<Box<dyn Evaluator>, String> {
    let s = settings::<K::Settings>(v).map_err(|e| format!("{} settings: {e:?}", K::NAME))?;
    K::build(s, keys)
}

/// Where a policy's settings report their problems.
pub struct Check<'a> {
    /// The policy's path (`policies[0]`).
    path: String,
    /// Its type's name (the key of its settings).
    kind: &'static str,
    /// How deep among sub-policies.
    depth: usize,
    errors: &'a mut Vec<ConfigError>,
}

impl Check<'_> {
    fn at(&self, field: &str) -> String {
        join_path(&join_path(&self.path, self.kind), field)
    }

    /// A problem with `field` of the settings (`""`: the settings as a whole).
    pub fn error(&mut self, field: &str, message: impl Into<String>) {
        let path = self.at(field);
        self.errors.push(ConfigError::new(path, message));
    }

    /// A problem with a key of the policy itself (`type`, `name`).
    pub fn policy_error(&mut self, key: &str, message: impl Into<String>) {
        self.errors
            .push(ConfigError::new(join_path(&self.path, key), message));
    }

    /// Sub-policies under `field`: at most two levels deep, at least one,
    /// each checked.
    pub fn sub_policies(&mut self, field: &str, list: &[PolicyConfig]) {
        if self.depth >= 2 {
            self.error(field, "sub-policies may nest at most two levels deep");
        }
        if list.is_empty() {
            self.error(field, "must not be empty");
        }
        let at = self.at(field);
        for (i, p) in list.iter().enumerate() {
            validate(p, &format!("{at}[{i}]"), self.depth + 1, self.errors);
        }
    }
}

/// Every problem of policy `p` at `path` (`depth` levels under the top).
pub fn validate(p: &PolicyConfig, path: &str, depth: usize, errors: &mut Vec<ConfigError>) {
    if p.name.trim().is_empty() {
        errors.push(ConfigError::new(
            join_path(path, "name"),
            "must not be empty",
        ));
    }
    let Some(t) = Type::find(&p.kind) else {
        let known: Vec<&str> = TYPES.iter().map(|t| t.name).collect();
        errors.push(ConfigError::new(
            join_path(path, "type"),
            format!(
                "unknown policy type {:?}; expected one of {}",
                p.kind,
                known.join(", ")
            ),
        ));
        return;
    };
    for key in p.settings.keys() {
        if key != t.name || t.settings == Takes::Nothing {
            let message = if Type::find(key).is_some() {
                format!("does not belong to a policy of type {:?}", t.name)
            } else {
                format!("unknown field `{key}`")
            };
            errors.push(ConfigError::new(join_path(path, key), message));
        }
    }
    let mut c = Check {
        path: path.to_string(),
        kind: t.name,
        depth,
        errors,
    };
    match (p.settings.get(t.name), t.settings) {
        (_, Takes::Nothing) => (t.check)(&serde_yaml::Value::Null, &mut c),
        (Some(v), _) => (t.check)(v, &mut c),
        (None, Takes::Required) => c.error("", "is required for this policy type"),
        (None, Takes::Optional) => (t.check)(&serde_yaml::Value::Null, &mut c),
    }
}

/// A built policy.
pub struct Policy {
    /// Its name.
    pub name: String,
    eval: Box<dyn Evaluator>,
}

impl Policy {
    /// Build from config (validated), registering the attribute keys it reads.
    pub fn build(cfg: &PolicyConfig, keys: &mut Keys) -> Result<Policy, String> {
        let t = Type::find(&cfg.kind)
            .ok_or_else(|| format!("policy {:?}: unknown type {:?}", cfg.name, cfg.kind))?;
        let none = serde_yaml::Value::Null;
        let v = match (cfg.settings.get(t.name), t.settings) {
            (_, Takes::Nothing) | (None, Takes::Optional) => &none,
            (Some(v), _) => v,
            (None, Takes::Required) => {
                return Err(format!(
                    "policy {:?}: settings for its type are missing",
                    cfg.name
                ))
            }
        };
        let eval = (t.build)(v, keys).map_err(|e| format!("policy {:?}: {e}", cfg.name))?;
        Ok(Policy {
            name: cfg.name.clone(),
            eval,
        })
    }

    /// A policy keeping traces with an ERROR span.
    pub fn errors() -> Policy {
        Policy {
            name: "errors".into(),
            eval: Box::new(status_code::errors()),
        }
    }

    /// The name to annotate a kept trace with (`composite/sub` for composites).
    pub fn label(&self) -> String {
        match self.eval.decided_by() {
            Some(sub) => format!("{}/{sub}", self.name),
            None => self.name.clone(),
        }
    }

    /// The adjusted count of the traces it keeps.
    pub fn adjusted_count(&self) -> Option<f64> {
        self.eval.adjusted_count()
    }

    /// Evaluate at `now` (seconds on the processor's clock).
    pub fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        self.eval.evaluate(t, now)
    }
}

/// Sub-policies, built.
fn build_all(list: &[PolicyConfig], keys: &mut Keys) -> Result<Vec<Policy>, String> {
    list.iter().map(|p| Policy::build(p, keys)).collect()
}

/// Whether every sub-policy accepts, stopping at the first that does not
/// (as the Collector's `and` and `drop` do).
fn all_accept(subs: &mut [Policy], t: &TraceView<'_>, now: u64) -> bool {
    subs.iter_mut().all(|p| p.evaluate(t, now).accepts())
}

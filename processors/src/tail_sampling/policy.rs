//! Sampling policies and their evaluation over a trace's summary.

use regex::Regex;
use std::collections::HashMap;

use super::config::{PolicyConfig, PolicyType, StatusName};
use super::extract::{AttrValue, Keys};
use super::sketch::Rolling;

/// What a policy says about a trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Keep it.
    Sampled,
    /// This policy would not keep it.
    NotSampled,
    /// Drop it, whatever the other policies say.
    Drop,
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
    fn values(&self, key: u16) -> impl Iterator<Item = &AttrValue> {
        self.attrs
            .iter()
            .filter(move |(k, _)| *k == key)
            .map(|(_, v)| v)
    }
}

struct RouteState {
    rolling: Rolling,
    threshold_ms: Option<f64>,
    computed_at: u64,
    adds: u32,
}

struct Adaptive {
    quantile: f64,
    window_secs: u64,
    min_ms: f64,
    warmup: u64,
    max_routes: usize,
    routes: HashMap<Box<str>, RouteState>,
}

impl Adaptive {
    fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        let route = t.route.unwrap_or("");
        let route: &str =
            if self.routes.len() >= self.max_routes && !self.routes.contains_key(route) {
                "\u{0}other"
            } else {
                route
            };
        let window = self.window_secs;
        let st = self
            .routes
            .entry(route.into())
            .or_insert_with(|| RouteState {
                rolling: Rolling::new(window),
                threshold_ms: None,
                computed_at: u64::MAX,
                adds: 0,
            });
        if st.computed_at != now || st.adds >= 256 {
            let merged = st.rolling.merged(now);
            st.threshold_ms = if merged.count() >= self.warmup {
                merged.quantile(self.quantile)
            } else {
                None
            };
            st.computed_at = now;
            st.adds = 0;
        }
        let ms = t.duration_ns as f64 / 1e6;
        let keep = st
            .threshold_ms
            .is_some_and(|th| ms > th && ms >= self.min_ms);
        st.rolling.add(now, ms);
        st.adds += 1;
        if keep {
            Decision::Sampled
        } else {
            Decision::NotSampled
        }
    }
}

enum Kind {
    Always,
    Latency {
        min_ns: u64,
        max_ns: Option<u64>,
    },
    Adaptive(Box<Adaptive>),
    Status {
        error: bool,
        ok: bool,
        unset: bool,
    },
    StringAttr {
        key: u16,
        values: Vec<String>,
        regexes: Vec<Regex>,
        invert: bool,
    },
    Numeric {
        key: u16,
        min: f64,
        max: f64,
        invert: bool,
    },
    Bool {
        key: u16,
        value: bool,
        invert: bool,
    },
    Probabilistic {
        threshold: u64,
        salt: Vec<u8>,
    },
    RateLimit {
        per_sec: u64,
        second: u64,
        used: u64,
    },
    SpanCount {
        min: usize,
        max: usize,
    },
    And(Vec<Policy>),
    Drop(Vec<Policy>),
    Composite(Box<Composite>),
    Correlated(Box<Correlated>),
}

struct Correlated {
    store: causeway_core::shared::Slot<crate::correlate::source::Correlation>,
    trouble: crate::correlate::model::Trouble,
    /// The attributes the evidence sources read, with their ids.
    keys: Vec<(&'static str, u16)>,
}

impl Correlated {
    fn evaluate(&self, t: &TraceView<'_>) -> Decision {
        let Some(store) = self.store.get() else {
            return Decision::NotSampled;
        };
        let strs = |key: u16| {
            t.attrs
                .iter()
                .filter(move |(k, _)| *k == key)
                .filter_map(|(_, v)| match v {
                    AttrValue::Str(s) => Some(s.as_ref()),
                    _ => None,
                })
        };
        let values = |k: &str| -> Vec<&str> {
            self.keys
                .iter()
                .filter(|(name, _)| *name == k)
                .flat_map(|(_, id)| strs(*id))
                .collect()
        };
        yes(store.in_trouble(t.trace_id, &values, &self.trouble))
    }
}

struct Composite {
    max_per_sec: u64,
    subs: Vec<(Policy, Option<u64>)>,
    second: u64,
    used_total: u64,
    used: Vec<u64>,
    last: Option<usize>,
}

/// A built policy.
pub struct Policy {
    /// Its name.
    pub name: String,
    /// The adjusted count of traces it keeps (100 / percentage for probabilistic).
    pub adjusted_count: Option<f64>,
    kind: Kind,
}

/// The salt the Collector's probabilistic policy hashes when `hash_salt` is empty.
pub const COLLECTOR_DEFAULT_SALT: &str = "default-hash-seed";

/// The FNV-1a hash of salt and trace id, as the Collector computes it, so
/// instances with the same salt agree.
pub fn trace_hash(salt: &[u8], trace_id: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in salt.iter().chain(trace_id) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn matches(v: &AttrValue, values: &[String], regexes: &[Regex]) -> bool {
    let AttrValue::Str(s) = v else { return false };
    if regexes.is_empty() {
        values.iter().any(|x| x.as_str() == &**s)
    } else {
        regexes.iter().any(|r| r.is_match(s))
    }
}

/// Whether every sub-policy samples; all are evaluated, so stateful ones see every trace.
fn all_sample(subs: &mut [Policy], t: &TraceView<'_>, now: u64) -> bool {
    let mut all = true;
    for p in subs {
        all &= p.evaluate(t, now) == Decision::Sampled;
    }
    all
}

fn yes(b: bool) -> Decision {
    if b {
        Decision::Sampled
    } else {
        Decision::NotSampled
    }
}

impl Policy {
    /// Build from config (validated), registering the attribute keys it reads.
    pub fn build(cfg: &PolicyConfig, keys: &mut Keys) -> Result<Policy, String> {
        let missing = || format!("policy {:?}: settings for its type are missing", cfg.name);
        let mut adjusted_count = None;
        let kind = match cfg.kind {
            PolicyType::Correlated => {
                let c = cfg.correlated.as_ref().ok_or_else(missing)?;
                Kind::Correlated(Box::new(Correlated {
                    store: keys.shared.slot(&c.processor),
                    trouble: crate::correlate::model::Trouble {
                        statuses: c.statuses.clone(),
                        route_error_ratio: c.route_error_ratio,
                        cpu_busy: c.cpu_busy,
                        iowait: c.iowait,
                        memory_used: c.memory_used,
                    },
                    keys: crate::correlate::registry::trouble_keys()
                        .into_iter()
                        .map(|k| (k, keys.add(k)))
                        .collect(),
                }))
            }
            PolicyType::AlwaysSample => Kind::Always,
            PolicyType::Latency => {
                let l = cfg.latency.as_ref().ok_or_else(missing)?;
                Kind::Latency {
                    min_ns: l.threshold_ms.saturating_mul(1_000_000),
                    max_ns: (l.upper_threshold_ms > 0)
                        .then(|| l.upper_threshold_ms.saturating_mul(1_000_000)),
                }
            }
            PolicyType::AdaptiveLatency => {
                let a = cfg.adaptive_latency.as_ref().ok_or_else(missing)?;
                Kind::Adaptive(Box::new(Adaptive {
                    quantile: a.quantile,
                    window_secs: a.window.get().as_secs(),
                    min_ms: a.min_threshold_ms as f64,
                    warmup: a.warmup_count,
                    max_routes: a.max_routes,
                    routes: HashMap::new(),
                }))
            }
            PolicyType::StatusCode => {
                let s = cfg.status_code.as_ref().ok_or_else(missing)?;
                Kind::Status {
                    error: s.status_codes.contains(&StatusName::Error),
                    ok: s.status_codes.contains(&StatusName::Ok),
                    unset: s.status_codes.contains(&StatusName::Unset),
                }
            }
            PolicyType::StringAttribute => {
                let s = cfg.string_attribute.as_ref().ok_or_else(missing)?;
                let regexes = if s.enabled_regex_matching {
                    s.values
                        .iter()
                        .map(|v| {
                            Regex::new(&format!("^(?:{v})$"))
                                .map_err(|e| format!("policy {:?}: {e}", cfg.name))
                        })
                        .collect::<Result<_, _>>()?
                } else {
                    Vec::new()
                };
                Kind::StringAttr {
                    key: keys.add(&s.key),
                    values: s.values.clone(),
                    regexes,
                    invert: s.invert_match,
                }
            }
            PolicyType::NumericAttribute => {
                let n = cfg.numeric_attribute.as_ref().ok_or_else(missing)?;
                Kind::Numeric {
                    key: keys.add(&n.key),
                    min: n.min_value.unwrap_or(f64::NEG_INFINITY),
                    max: n.max_value.unwrap_or(f64::INFINITY),
                    invert: n.invert_match,
                }
            }
            PolicyType::BooleanAttribute => {
                let b = cfg.boolean_attribute.as_ref().ok_or_else(missing)?;
                Kind::Bool {
                    key: keys.add(&b.key),
                    value: b.value,
                    invert: b.invert_match,
                }
            }
            PolicyType::TraceState => {
                let t = cfg.trace_state.as_ref().ok_or_else(missing)?;
                Kind::StringAttr {
                    key: keys.add_trace_state(&t.key),
                    values: t.usable_values(),
                    regexes: Vec::new(),
                    invert: false,
                }
            }
            PolicyType::OttlCondition => {
                return Err(format!(
                    "policy {:?}: the ottl_condition policy is not supported",
                    cfg.name
                ))
            }
            PolicyType::Probabilistic => {
                let p = cfg.probabilistic.as_ref().ok_or_else(missing)?;
                if p.sampling_percentage > 0.0 {
                    adjusted_count = Some(100.0 / p.sampling_percentage);
                }
                Kind::Probabilistic {
                    threshold: ((p.sampling_percentage / 100.0) * u64::MAX as f64) as u64,
                    // The Collector hashes an empty salt as its default
                    // seed (internal/sampling/probabilistic.go): the same
                    // config keeps the same traces under either.
                    salt: if p.hash_salt.is_empty() {
                        COLLECTOR_DEFAULT_SALT.as_bytes().to_vec()
                    } else {
                        p.hash_salt.as_bytes().to_vec()
                    },
                }
            }
            PolicyType::RateLimiting => Kind::RateLimit {
                per_sec: cfg
                    .rate_limiting
                    .as_ref()
                    .ok_or_else(missing)?
                    .spans_per_second,
                second: u64::MAX,
                used: 0,
            },
            PolicyType::SpanCount => {
                let s = cfg.span_count.as_ref().ok_or_else(missing)?;
                Kind::SpanCount {
                    min: s.min_spans,
                    max: if s.max_spans == 0 {
                        usize::MAX
                    } else {
                        s.max_spans
                    },
                }
            }
            PolicyType::And => Kind::And(
                cfg.and
                    .as_ref()
                    .ok_or_else(missing)?
                    .and_sub_policy
                    .iter()
                    .map(|p| Policy::build(p, keys))
                    .collect::<Result<_, _>>()?,
            ),
            PolicyType::Drop => Kind::Drop(
                cfg.drop
                    .as_ref()
                    .ok_or_else(missing)?
                    .drop_sub_policy
                    .iter()
                    .map(|p| Policy::build(p, keys))
                    .collect::<Result<_, _>>()?,
            ),
            PolicyType::Composite => {
                let c = cfg.composite.as_ref().ok_or_else(missing)?;
                let mut subs = Vec::new();
                for name in &c.policy_order {
                    let Some(sc) = c.composite_sub_policy.iter().find(|s| &s.name == name) else {
                        return Err(format!("policy {:?}: no sub-policy {name:?}", cfg.name));
                    };
                    let cap = c
                        .rate_allocation
                        .iter()
                        .find(|r| &r.policy == name)
                        .map(|r| (r.percent / 100.0 * c.max_total_spans_per_second as f64) as u64);
                    subs.push((Policy::build(sc, keys)?, cap));
                }
                let n = subs.len();
                Kind::Composite(Box::new(Composite {
                    max_per_sec: c.max_total_spans_per_second,
                    subs,
                    second: u64::MAX,
                    used_total: 0,
                    used: vec![0; n],
                    last: None,
                }))
            }
        };
        Ok(Policy {
            name: cfg.name.clone(),
            adjusted_count,
            kind,
        })
    }

    /// A policy keeping traces with an ERROR span.
    pub fn errors() -> Policy {
        Policy {
            name: "errors".into(),
            adjusted_count: None,
            kind: Kind::Status {
                error: true,
                ok: false,
                unset: false,
            },
        }
    }

    /// The name to annotate a kept trace with (`composite/sub` for composites).
    pub fn label(&self) -> String {
        match &self.kind {
            Kind::Composite(c) => match c.last.and_then(|i| c.subs.get(i)) {
                Some((sub, _)) => format!("{}/{}", self.name, sub.label()),
                None => self.name.clone(),
            },
            _ => self.name.clone(),
        }
    }

    /// Evaluate at `now` (seconds on the processor's clock).
    pub fn evaluate(&mut self, t: &TraceView<'_>, now: u64) -> Decision {
        match &mut self.kind {
            Kind::Always => Decision::Sampled,
            Kind::Correlated(c) => c.evaluate(t),
            Kind::Latency { min_ns, max_ns } => {
                yes(t.duration_ns >= *min_ns && max_ns.is_none_or(|m| t.duration_ns <= m))
            }
            Kind::Adaptive(a) => a.evaluate(t, now),
            Kind::Status { error, ok, unset } => {
                yes((*error && t.error) || (*ok && t.ok) || (*unset && t.unset))
            }
            Kind::StringAttr {
                key,
                values,
                regexes,
                invert,
            } => yes(t.values(*key).any(|v| matches(v, values, regexes)) != *invert),
            Kind::Numeric {
                key,
                min,
                max,
                invert,
            } => {
                let hit = t.values(*key).any(|v| {
                    let x = match v {
                        AttrValue::Int(i) => *i as f64,
                        AttrValue::Double(d) => *d,
                        _ => return false,
                    };
                    x >= *min && x <= *max
                });
                yes(hit != *invert)
            }
            Kind::Bool { key, value, invert } => yes(t
                .values(*key)
                .any(|v| matches!(v, AttrValue::Bool(b) if b == value))
                != *invert),
            Kind::Probabilistic { threshold, salt } => {
                yes(trace_hash(salt, t.trace_id) <= *threshold)
            }
            Kind::RateLimit {
                per_sec,
                second,
                used,
            } => {
                if *second != now {
                    *second = now;
                    *used = 0;
                }
                let n = t.span_count as u64;
                if *used + n <= *per_sec {
                    *used += n;
                    Decision::Sampled
                } else {
                    Decision::NotSampled
                }
            }
            Kind::SpanCount { min, max } => yes(t.span_count >= *min && t.span_count <= *max),
            Kind::And(subs) => {
                // Evaluate all, so stateful sub-policies see every trace.
                let all = all_sample(subs, t, now);
                yes(all)
            }
            Kind::Drop(subs) => {
                let all = all_sample(subs, t, now);
                if all {
                    Decision::Drop
                } else {
                    Decision::NotSampled
                }
            }
            Kind::Composite(c) => {
                if c.second != now {
                    c.second = now;
                    c.used_total = 0;
                    c.used.iter_mut().for_each(|u| *u = 0);
                }
                c.last = None;
                let n = t.span_count as u64;
                for (i, (p, cap)) in c.subs.iter_mut().enumerate() {
                    if p.evaluate(t, now) != Decision::Sampled {
                        continue;
                    }
                    let within_cap = cap.is_none_or(|cap| c.used[i] + n <= cap);
                    if within_cap && c.used_total + n <= c.max_per_sec {
                        c.used[i] += n;
                        c.used_total += n;
                        c.last = Some(i);
                        return Decision::Sampled;
                    }
                }
                Decision::NotSampled
            }
        }
    }
}

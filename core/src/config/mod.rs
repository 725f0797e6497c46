//! Configuration: the pipeline file in the OpenTelemetry Collector's layout,
//! its loading (with `${env:…}` substitution) and its validation.
//!
//! Loading happens in two phases, like the Collector's configunmarshaler:
//! first the shape of the file (top-level sections, `service`), then every
//! component's own section through its factory, then the pipeline graph.
//! Every problem found is reported, each with the key path and, where the
//! YAML parser knows it, `file:line:column`.

mod delivery;
mod env;
mod load;
mod locate;
pub mod schema;
mod types;

pub use load::{load_file, load_str, Config};
pub use types::*;

use serde::de::DeserializeOwned;
use std::fmt;

/// One problem found in the configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Key path, e.g. `exporters.otlp/jaeger.endpoint` (relative to the
    /// component while a factory validates, absolute once loaded).
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// `file:line:column`, when known.
    pub location: Option<String>,
}

impl ConfigError {
    /// A new error at `path`.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            path: path.into(),
            message: message.into(),
            location: None,
        }
    }

    /// The same error under a parent path.
    pub fn under(mut self, parent: &str) -> Self {
        self.path = join_path(parent, &self.path);
        self
    }
}

/// Join two key paths.
pub fn join_path(parent: &str, child: &str) -> String {
    match (parent.is_empty(), child.is_empty()) {
        (true, _) => child.to_string(),
        (_, true) => parent.to_string(),
        _ if child.starts_with('[') => format!("{parent}{child}"),
        _ => format!("{parent}.{child}"),
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(loc) = &self.location {
            write!(f, "{loc}: ")?;
        }
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Rendering of a list of errors.
pub struct ConfigErrors;

impl ConfigErrors {
    /// All errors, one a line, with a count first.
    pub fn render(errors: &[ConfigError]) -> String {
        let mut s = format!(
            "invalid configuration ({} error{}):",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        );
        for e in errors {
            s.push_str("\n  - ");
            s.push_str(&e.to_string());
        }
        s
    }
}

/// A configuration that can check itself once decoded. Pure: no IO.
pub trait Validate {
    /// Every problem, with paths relative to this struct.
    fn validate(&self) -> Vec<ConfigError> {
        Vec::new()
    }
}

/// Decode a component's section (null means "all defaults") and validate it.
/// Errors carry paths relative to the section.
pub fn decode<T: DeserializeOwned + Validate>(
    value: &serde_yaml::Value,
) -> Result<T, Vec<ConfigError>> {
    let value = match value {
        serde_yaml::Value::Null => serde_yaml::Value::Mapping(Default::default()),
        v => v.clone(),
    };
    // The keys serde refused, and what the rest of the section, decoded
    // without them, fails to validate: every error of a section in one run.
    let (cfg, mut errors) = deserialize_partial::<T>(value);
    if let Some(cfg) = cfg {
        errors.extend(cfg.validate());
        if errors.is_empty() {
            return Ok(cfg);
        }
    }
    Err(errors)
}

/// Errors reported at most for one section (a file of garbage stops there).
const MAX_DECODE_ERRORS: usize = 50;

/// Deserialize `value`, reporting every key serde refuses rather than the
/// first one: each refused key (unknown, or of a bad value) is reported,
/// taken out, and the rest decoded again, so three typos in one section
/// are three errors of one run. A bad value of a required key stops there
/// (without it, "missing field" would be a consequence, not an error).
pub fn deserialize_all<T: DeserializeOwned>(
    value: serde_yaml::Value,
) -> Result<T, Vec<ConfigError>> {
    match deserialize_partial(value) {
        (Some(v), errors) if errors.is_empty() => Ok(v),
        (_, errors) => Err(errors),
    }
}

/// [`deserialize_all`]'s work: what decodes once every refused key is
/// taken out (`None` when a required key's value was bad), and the errors.
pub fn deserialize_partial<T: DeserializeOwned>(
    mut value: serde_yaml::Value,
) -> (Option<T>, Vec<ConfigError>) {
    let mut errors: Vec<ConfigError> = Vec::new();
    loop {
        match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(v) => return (Some(v), errors),
            Err(e) => {
                // An enum's variant or an unknown step cannot be walked: stop there.
                let segments: Option<Vec<String>> = e
                    .path()
                    .iter()
                    .map(|s| match s {
                        serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                        serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                        _ => None,
                    })
                    .collect();
                let message = e.inner().to_string();
                let err = path_error(e);
                if message.starts_with("missing field") && !errors.is_empty() {
                    return (None, errors);
                }
                let walkable = segments.is_some();
                let mut at = segments.unwrap_or_default();
                if let Some(rest) = message.strip_prefix("unknown field `") {
                    if let Some(end) = rest.find('`') {
                        if at.last().map(String::as_str) != Some(&rest[..end]) {
                            at.push(rest[..end].to_string());
                        }
                    }
                }
                let repeated = errors
                    .iter()
                    .any(|x| x.path == err.path && x.message == err.message);
                errors.push(err);
                if repeated
                    || !walkable
                    || errors.len() >= MAX_DECODE_ERRORS
                    || !remove_at(&mut value, &at)
                {
                    errors.dedup_by(|a, b| a.path == b.path && a.message == b.message);
                    return (None, errors);
                }
            }
        }
    }
}

/// Take the map entry at `path` (map keys and sequence indexes) out of `value`.
fn remove_at(value: &mut serde_yaml::Value, path: &[String]) -> bool {
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    let mut node = value;
    for seg in parents {
        node = match node {
            serde_yaml::Value::Mapping(m) => match m.get_mut(seg.as_str()) {
                Some(v) => v,
                None => return false,
            },
            serde_yaml::Value::Sequence(v) => {
                match seg.parse::<usize>().ok().and_then(|i| v.get_mut(i)) {
                    Some(v) => v,
                    None => return false,
                }
            }
            serde_yaml::Value::Tagged(t) => &mut t.value,
            _ => return false,
        };
    }
    // Only a map's key is taken out: an element taken out of a sequence
    // would shift the indexes the next errors name.
    match node {
        serde_yaml::Value::Mapping(m) => m.remove(last.as_str()).is_some(),
        _ => false,
    }
}

/// Turn a serde error with its path into a [`ConfigError`]. For an unknown
/// field the field itself is appended to the path, so the locator points at it.
pub(crate) fn path_error(e: serde_path_to_error::Error<serde_yaml::Error>) -> ConfigError {
    let mut path = e.path().to_string();
    if path == "." || path == "?" {
        path.clear();
    }
    let message = e.inner().to_string();
    let message = strip_serde_location(&message);
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some(end) = rest.find('`') {
            let field = &rest[..end];
            if !path.ends_with(field) {
                path = join_path(&path, field);
            }
        }
    }
    ConfigError::new(path, message)
}

fn strip_serde_location(message: &str) -> String {
    // serde_yaml appends " at line L column C" when deserializing from text.
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

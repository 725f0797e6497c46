//! Configuration: the pipeline file in the OpenTelemetry Collector's layout,
//! its loading (with `${env:…}` substitution) and its validation.
//!
//! Loading happens in two phases, like the Collector's configunmarshaler:
//! first the shape of the file (top-level sections, `service`), then every
//! component's own section through its factory, then the pipeline graph.
//! Every problem found is reported, each with the key path and, where the
//! YAML parser knows it, `file:line:column`.

mod env;
mod load;
mod locate;
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
    let cfg: T = serde_path_to_error::deserialize(value).map_err(|e| vec![path_error(e)])?;
    let errors = cfg.validate();
    if errors.is_empty() {
        Ok(cfg)
    } else {
        Err(errors)
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

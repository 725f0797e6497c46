//! `${env:NAME}` / `${env:NAME:-default}` substitution in string values.

use super::ConfigError;
use serde_yaml::Value;

/// Substitute environment references in every string scalar of `value`.
/// A string that is exactly one reference is re-parsed as a YAML scalar, so
/// `port: ${env:PORT}` yields a number, as in the OpenTelemetry Collector.
pub(crate) fn expand(
    value: &mut Value,
    path: &str,
    lookup: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
) {
    match value {
        Value::String(s) if s.contains('$') => match expand_str(s, lookup) {
            Ok((out, whole)) => {
                *value = if whole {
                    match serde_yaml::from_str::<Value>(&out) {
                        Ok(v @ (Value::Number(_) | Value::Bool(_))) => v,
                        _ => Value::String(out),
                    }
                } else {
                    Value::String(out)
                };
            }
            Err(msg) => errors.push(ConfigError::new(path, msg)),
        },
        Value::Mapping(m) => {
            for (k, v) in m.iter_mut() {
                let key = match k {
                    Value::String(s) => s.clone(),
                    other => serde_yaml::to_string(other)
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                };
                expand(v, &super::join_path(path, &key), lookup, errors);
            }
        }
        Value::Sequence(seq) => {
            for (i, v) in seq.iter_mut().enumerate() {
                expand(v, &format!("{path}[{i}]"), lookup, errors);
            }
        }
        Value::Tagged(t) => expand(&mut t.value, path, lookup, errors),
        _ => {}
    }
}

/// Expand one string. Returns the result and whether the input was exactly one reference.
fn expand_str(s: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<(String, bool), String> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    let mut refs = 0;
    let mut literal = false;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        literal |= i > 0;
        let tail = &rest[i..];
        if let Some(t) = tail.strip_prefix("$$") {
            out.push('$');
            literal = true;
            rest = t;
        } else if let Some(t) = tail.strip_prefix("${") {
            let Some(end) = t.find('}') else {
                return Err(format!("unterminated reference in {s:?}"));
            };
            let inner = &t[..end];
            let Some(spec) = inner.strip_prefix("env:") else {
                return Err(format!("unsupported reference `${{{inner}}}`: only `${{env:NAME}}` and `${{env:NAME:-default}}` are supported"));
            };
            let (name, default) = match spec.split_once(":-") {
                Some((n, d)) => (n, Some(d)),
                None => (spec, None),
            };
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                return Err(format!("invalid environment variable name {name:?}"));
            }
            match lookup(name).or_else(|| default.map(str::to_string)) {
                Some(v) => out.push_str(&v),
                None => return Err(format!("environment variable {name} is not set and has no default (write `${{env:{name}:-default}}`)")),
            }
            refs += 1;
            rest = &t[end + 1..];
        } else {
            out.push('$');
            literal = true;
            rest = &tail[1..];
        }
    }
    literal |= !rest.is_empty();
    out.push_str(rest);
    Ok((out, refs == 1 && !literal))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(name: &str) -> Option<String> {
        match name {
            "HOST" => Some("collector".into()),
            "PORT" => Some("4317".into()),
            _ => None,
        }
    }

    #[test]
    fn substitutes_with_defaults_and_types() {
        let mut v: Value = serde_yaml::from_str(
            "a: http://${env:HOST}:${env:PORT}\nb: ${env:PORT}\nc: ${env:MISSING:-x}\nd: $$HOME\n",
        )
        .expect("yaml");
        let mut errors = vec![];
        expand(&mut v, "", &lookup, &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(v["a"], Value::String("http://collector:4317".into()));
        assert_eq!(v["b"], Value::Number(4317.into()));
        assert_eq!(v["c"], Value::String("x".into()));
        assert_eq!(v["d"], Value::String("$HOME".into()));
    }

    #[test]
    fn missing_variable_is_an_error_with_its_path() {
        let mut v: Value = serde_yaml::from_str("x:\n  y: ${env:NOPE}\n").expect("yaml");
        let mut errors = vec![];
        expand(&mut v, "", &lookup, &mut errors);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].path, "x.y");
        assert!(errors[0].message.contains("NOPE"));
    }
}

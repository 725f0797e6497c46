//! The Prometheus text exposition format (0.0.4), as exporters serve it:
//! `# HELP`, `# TYPE`, and sample lines `name{label="value",…} value [timestamp]`.
//! Samples are grouped into families by their `# TYPE` (a histogram's
//! `_bucket`, `_sum` and `_count`, a summary's quantiles, `_sum` and `_count`).
//!
//! And OpenMetrics 1.0 (`application/openmetrics-text`): the body must end
//! with `# EOF` (a body cut short is an error, not a smaller scrape);
//! `# UNIT`; timestamps in seconds; exemplars after ` # ` (skipped); the
//! types `info`, `stateset` and `gaugehistogram` are read as gauges named
//! by their samples (`x_info`, `x{x="state"}`, `x_bucket`/`x_gcount`/`x_gsum`),
//! `unknown` as untyped. No maintained Rust crate parses both formats with
//! the bounds needed here (a sample limit reported, not cut), so this is
//! a small hand-written parser, fuzzed by `tests/fuzz_corpus.rs`.

use std::collections::BTreeMap;

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    /// Monotonic.
    Counter,
    /// Up and down.
    Gauge,
    /// Cumulative buckets by `le`.
    Histogram,
    /// Quantiles.
    Summary,
    /// No `# TYPE`: read as a gauge.
    Untyped,
}

/// One sample.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's own name (`x_bucket`, `x_sum`, …).
    pub name: String,
    /// Labels in the order written.
    pub labels: Vec<(String, String)>,
    /// Value (NaN and ±Inf as written).
    pub value: f64,
    /// Milliseconds since the epoch, when written.
    pub timestamp_ms: Option<i64>,
}

/// A metric family.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    /// Its name.
    pub name: String,
    /// Its type.
    pub kind: Type,
    /// `# HELP`.
    pub help: String,
    /// `# UNIT` (OpenMetrics).
    pub unit: String,
    /// Its samples.
    pub samples: Vec<Sample>,
}

/// Why an exposition could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

fn value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        s => s.parse().ok(),
    }
}

/// `{a="x",b="y"}` (the part after the name); returns the labels and the rest.
/// Label pairs in the order written.
pub type Labels = Vec<(String, String)>;

fn labels(s: &str) -> Result<(Labels, &str), String> {
    let mut out = Vec::new();
    let mut rest = s.strip_prefix('{').ok_or("expected `{`")?;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((out, r));
        }
        let eq = rest.find('=').ok_or("a label without `=`")?;
        let name = rest[..eq].trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(format!("invalid label name {name:?}"));
        }
        rest = rest[eq + 1..].trim_start();
        let body = rest
            .strip_prefix('"')
            .ok_or("a label value without quotes")?;
        let mut v = String::new();
        let mut chars = body.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("an unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => v.push('\n'),
                    Some((_, c)) => v.push(c),
                    None => return Err("an unterminated label value".into()),
                },
                Some((_, c)) => v.push(c),
            }
        };
        out.push((name.to_string(), v));
        rest = body[end + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err("expected `,` or `}` after a label".into());
        }
    }
}

/// The family a sample named `name` belongs to, given the declared types.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, Type>) -> &'a str {
    if types.contains_key(name) {
        return name;
    }
    for suffix in [
        "_bucket", "_sum", "_count", "_total", "_created", "_info", "_gcount", "_gsum",
    ] {
        if let Some(base) = name.strip_suffix(suffix) {
            if types.contains_key(base) {
                return base;
            }
        }
    }
    name
}

/// Parse an exposition; at most `max_samples` samples are read (the rest is
/// an error, so that a target over its limit is reported, not cut silently).
/// `openmetrics`: the body is OpenMetrics text (see the module doc).
pub fn parse(text: &str, max_samples: usize, openmetrics: bool) -> Result<Vec<Family>, ParseError> {
    let mut meta = Meta::default();
    let mut eof = false;
    let mut lines = 0usize;
    let mut order: Vec<String> = Vec::new();
    let mut by_name: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
    let mut count = 0usize;
    for (i, line) in text.lines().enumerate() {
        lines = i + 1;
        let err = |message: String| ParseError {
            line: i + 1,
            message,
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if eof {
            return Err(err("text after `# EOF`".into()));
        }
        if let Some(c) = line.strip_prefix('#') {
            eof = meta.comment(c, openmetrics).map_err(err)?;
            continue;
        }
        let sample = sample(line, openmetrics).map_err(err)?;
        count += 1;
        if count > max_samples {
            return Err(err(format!(
                "more than {max_samples} samples (sample_limit)"
            )));
        }
        let fam = family_of(&sample.name, &meta.types).to_string();
        if !by_name.contains_key(&fam) {
            order.push(fam.clone());
        }
        by_name.entry(fam).or_default().push(sample);
    }
    if openmetrics && !eof {
        return Err(ParseError {
            line: lines,
            message: "the OpenMetrics body does not end with `# EOF` (cut short?)".into(),
        });
    }
    Ok(order
        .into_iter()
        .map(|name| Family {
            kind: meta.types.get(&name).copied().unwrap_or(Type::Untyped),
            help: meta.helps.get(&name).cloned().unwrap_or_default(),
            unit: meta.units.get(&name).cloned().unwrap_or_default(),
            samples: by_name.remove(&name).unwrap_or_default(),
            name,
        })
        .collect())
}

/// The `# TYPE`, `# HELP` and `# UNIT` of each family, as read so far.
#[derive(Default)]
struct Meta {
    types: BTreeMap<String, Type>,
    helps: BTreeMap<String, String>,
    units: BTreeMap<String, String>,
}

impl Meta {
    /// A comment line (after its `#`): its metadata kept; whether it is
    /// OpenMetrics' `# EOF`.
    fn comment(&mut self, c: &str, openmetrics: bool) -> Result<bool, String> {
        let mut w = c.trim_start().splitn(3, ' ');
        match (w.next(), w.next(), w.next()) {
            (Some("EOF"), None, None) if openmetrics => return Ok(true),
            (Some("TYPE"), Some(name), Some(t)) => {
                let t = match t.trim() {
                    "counter" => Type::Counter,
                    "gauge" | "info" | "stateset" | "gaugehistogram" if openmetrics => Type::Gauge,
                    "gauge" => Type::Gauge,
                    "histogram" => Type::Histogram,
                    "summary" => Type::Summary,
                    "untyped" | "unknown" => Type::Untyped,
                    other => return Err(format!("unknown type {other:?}")),
                };
                self.types.insert(name.to_string(), t);
            }
            (Some("HELP"), Some(name), help) => {
                self.helps
                    .insert(name.to_string(), help.unwrap_or("").to_string());
            }
            (Some("UNIT"), Some(name), Some(unit)) => {
                self.units.insert(name.to_string(), unit.trim().to_string());
            }
            _ => {}
        }
        Ok(false)
    }
}

/// A sample line: name, labels, value and timestamp (an OpenMetrics
/// exemplar after it left out).
fn sample(line: &str, openmetrics: bool) -> Result<Sample, String> {
    let name_end = line
        .find(|c: char| c == '{' || c.is_whitespace())
        .ok_or_else(|| "a sample without a value".to_string())?;
    let name = &line[..name_end];
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        || name.starts_with(|c: char| c.is_ascii_digit())
    {
        return Err(format!("invalid metric name {name:?}"));
    }
    let (labels, rest) = if line[name_end..].starts_with('{') {
        labels(&line[name_end..])?
    } else {
        (Vec::new(), &line[name_end..])
    };
    // An OpenMetrics exemplar follows ` # `: not part of the sample.
    let rest = match rest.find(" # ") {
        Some(i) if openmetrics => &rest[..i],
        _ => rest,
    };
    let mut w = rest.split_whitespace();
    let v = w
        .next()
        .and_then(value)
        .ok_or_else(|| format!("{name}: the value is not a number"))?;
    let ts = match w.next() {
        // OpenMetrics writes seconds (maybe fractional); 0.0.4 milliseconds.
        Some(t) if openmetrics => Some(
            t.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite())
                .map(|s| (s * 1000.0).round() as i64)
                .ok_or_else(|| format!("{name}: invalid timestamp {t:?}"))?,
        ),
        Some(t) => Some(
            t.parse::<i64>()
                .map_err(|_| format!("{name}: invalid timestamp {t:?}"))?,
        ),
        None => None,
    };
    if w.next().is_some() {
        return Err(format!("{name}: more than a value and a timestamp"));
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value: v,
        timestamp_ms: ts,
    })
}

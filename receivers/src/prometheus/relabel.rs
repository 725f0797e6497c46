//! Prometheus' relabeling (`replace`, `keep`, `drop`, `labelmap`,
//! `labeldrop`, `labelkeep`): `relabel_configs` over a target's labels
//! (`__address__`, `__scheme__`, `__metrics_path__`, `__param_<name>`,
//! `job`, the `__meta_*` of its discovery and its group's labels), and
//! `metric_relabel_configs` over scraped samples, with `__name__` as a label.

use super::config::{RelabelAction, RelabelConfig};
use super::parse::Labels;
use regex::Regex;

/// A compiled rule.
pub struct Rule {
    source: Vec<String>,
    separator: String,
    regex: Regex,
    target: Option<String>,
    replacement: String,
    action: RelabelAction,
}

/// Compile the rules (validated already: an invalid regex is an error here too).
pub fn compile(rules: &[RelabelConfig]) -> Result<Vec<Rule>, regex::Error> {
    rules
        .iter()
        .map(|r| {
            Ok(Rule {
                source: r.source_labels.clone(),
                separator: r.separator.clone(),
                regex: Regex::new(&format!("^(?:{})$", r.regex))?,
                target: r.target_label.clone(),
                replacement: r.replacement.clone(),
                action: r.action,
            })
        })
        .collect()
}

/// Apply `rules` to a sample; `None` when a rule drops it. The name is
/// `__name__` during relabeling and comes back (possibly changed) first.
pub fn apply(rules: &[Rule], name: &str, labels: &Labels) -> Option<(String, Labels)> {
    if rules.is_empty() {
        return Some((name.to_string(), labels.clone()));
    }
    let mut l: Labels = Vec::with_capacity(labels.len() + 1);
    l.push(("__name__".into(), name.to_string()));
    l.extend(labels.iter().cloned());
    let mut l = relabel(rules, l)?;
    let name = get_name(&l)?;
    l.retain(|(n, _)| n != "__name__");
    Some((name, l))
}

/// Apply `rules` to a label set; `None` when a rule drops it.
pub fn relabel(rules: &[Rule], mut l: Labels) -> Option<Labels> {
    for r in rules {
        let get = |l: &Labels, k: &str| {
            l.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        match r.action {
            RelabelAction::Keep | RelabelAction::Drop | RelabelAction::Replace => {
                let value: Vec<String> = r.source.iter().map(|s| get(&l, s)).collect();
                let value = value.join(&r.separator);
                let caps = r.regex.captures(&value);
                match (r.action, caps) {
                    (RelabelAction::Keep, None) | (RelabelAction::Drop, Some(_)) => return None,
                    (RelabelAction::Replace, Some(c)) => {
                        let mut out = String::new();
                        c.expand(&r.replacement, &mut out);
                        if let Some(t) = &r.target {
                            l.retain(|(n, _)| n != t);
                            if !out.is_empty() {
                                l.push((t.clone(), out));
                            }
                        }
                    }
                    _ => {}
                }
            }
            RelabelAction::Labelmap => {
                let mut add = Vec::new();
                for (n, v) in &l {
                    if let Some(c) = r.regex.captures(n) {
                        let mut out = String::new();
                        c.expand(&r.replacement, &mut out);
                        if !out.is_empty() {
                            add.push((out, v.clone()));
                        }
                    }
                }
                for (n, v) in add {
                    l.retain(|(k, _)| *k != n);
                    l.push((n, v));
                }
            }
            RelabelAction::Labeldrop => l.retain(|(n, _)| n == "__name__" || !r.regex.is_match(n)),
            RelabelAction::Labelkeep => l.retain(|(n, _)| n == "__name__" || r.regex.is_match(n)),
        }
    }
    Some(l)
}

fn get_name(l: &Labels) -> Option<String> {
    l.iter()
        .find(|(n, _)| n == "__name__")
        .map(|(_, v)| v.clone())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(yaml: &str) -> Vec<Rule> {
        let cfg: Vec<RelabelConfig> = serde_yaml::from_str(yaml).expect("yaml");
        compile(&cfg).expect("compile")
    }

    fn l(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keep_drop_replace_and_label_actions_as_prometheus_applies_them() {
        let keep = rules(
            "[{source_labels: [__name__], regex: 'redis_(keyspace|connected).*', action: keep}]",
        );
        assert!(apply(&keep, "redis_keyspace_hits_total", &l(&[])).is_some());
        assert!(apply(&keep, "go_goroutines", &l(&[])).is_none());
        let drop =
            rules("[{source_labels: [db, cmd], separator: ':', regex: 'db0:get', action: drop}]");
        assert!(apply(&drop, "x", &l(&[("db", "db0"), ("cmd", "get")])).is_none());
        assert!(apply(&drop, "x", &l(&[("db", "db1"), ("cmd", "get")])).is_some());
        let replace = rules("[{source_labels: [addr], regex: '(.+):(\\d+)', target_label: host, replacement: '$1'}]");
        let (_, got) = apply(&replace, "x", &l(&[("addr", "redis-1:6379")])).expect("kept");
        assert!(
            got.contains(&("host".to_string(), "redis-1".to_string())),
            "{got:?}"
        );
        // No match: unchanged.
        let (_, got) = apply(&replace, "x", &l(&[("addr", "nohost")])).expect("kept");
        assert!(!got.iter().any(|(k, _)| k == "host"));
        // Renaming through __name__.
        let rename = rules("[{source_labels: [__name__], regex: 'old_(.*)', target_label: __name__, replacement: 'new_$1'}]");
        assert_eq!(
            apply(&rename, "old_total", &l(&[])).expect("kept").0,
            "new_total"
        );
        let ld = rules("[{regex: 'pod|namespace', action: labeldrop}]");
        let (_, got) = apply(
            &ld,
            "x",
            &l(&[("pod", "p"), ("namespace", "n"), ("db", "0")]),
        )
        .expect("kept");
        assert_eq!(got, l(&[("db", "0")]));
        let lk = rules("[{regex: 'db', action: labelkeep}]");
        let (_, got) = apply(&lk, "x", &l(&[("pod", "p"), ("db", "0")])).expect("kept");
        assert_eq!(got, l(&[("db", "0")]));
    }
}

//! A job's targets: its `static_configs` and the groups its
//! `file_sd_configs` files list, each relabeled by `relabel_configs` as
//! Prometheus relabels targets.

use indexmap::IndexMap;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::config::ScrapeConfig;
use super::parse::Labels;
use super::relabel::{relabel, Rule};

/// A target to scrape, after relabeling.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// `host:port`.
    pub address: String,
    /// `http` or `https`.
    pub scheme: String,
    /// The path of the metrics.
    pub path: String,
    /// URL parameters.
    pub params: Vec<(String, String)>,
    /// The `job` label (the job's name unless relabeled).
    pub job: String,
    /// The `instance` label (the address unless relabeled).
    pub instance: String,
    /// The other labels, added to every series.
    pub labels: IndexMap<String, String>,
}

impl Spec {
    /// What identifies the target among the job's.
    pub fn key(&self) -> String {
        let mut labels: Vec<_> = self.labels.iter().collect();
        labels.sort();
        format!(
            "{}://{}{}?{:?}|{}|{}|{:?}",
            self.scheme, self.address, self.path, self.params, self.job, self.instance, labels
        )
    }

    /// The scrape URL.
    pub fn url(&self) -> String {
        let mut url = format!("{}://{}{}", self.scheme, self.address, self.path);
        for (i, (k, v)) in self.params.iter().enumerate() {
            url.push(if i == 0 { '?' } else { '&' });
            url.push_str(&format!("{k}={v}"));
        }
        url
    }
}

/// One group of a file: targets and their labels.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct Group {
    targets: Vec<String>,
    #[serde(default)]
    labels: IndexMap<String, String>,
}

/// The largest file read (a file list of targets, not data).
const MAX_FILE: u64 = 16 << 20;

fn glob_match(pat: &[u8], name: &[u8]) -> bool {
    match (pat.first(), name.first()) {
        (None, None) => true,
        (Some(b'*'), _) => {
            glob_match(&pat[1..], name) || (!name.is_empty() && glob_match(pat, &name[1..]))
        }
        (Some(b'?'), Some(_)) => glob_match(&pat[1..], &name[1..]),
        (Some(a), Some(b)) if a == b => glob_match(&pat[1..], &name[1..]),
        _ => false,
    }
}

/// The files a pattern names now (`*` and `?` in the last component), sorted.
fn expand(pattern: &Path) -> Vec<PathBuf> {
    let Some(name) = pattern.file_name().map(|n| n.to_string_lossy().to_string()) else {
        return Vec::new();
    };
    if !name.contains(['*', '?']) {
        return vec![pattern.to_path_buf()];
    }
    let dir = pattern
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .filter(|e| glob_match(name.as_bytes(), e.file_name().to_string_lossy().as_bytes()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// What the job's files look like now (path, modified, length), so that a
/// change is noticed without reading them.
pub fn fingerprint(job: &ScrapeConfig) -> Vec<(PathBuf, Option<SystemTime>, u64)> {
    job.file_sd_configs
        .iter()
        .flat_map(|f| f.files.iter().flat_map(|p| expand(p)))
        .map(|p| {
            let m = std::fs::metadata(&p).ok();
            let modified = m.as_ref().and_then(|m| m.modified().ok());
            let len = m.map_or(0, |m| m.len());
            (p, modified, len)
        })
        .collect()
}

fn read_groups(path: &Path) -> Result<Vec<Group>, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{}: {e}", path.display()))?
        .len();
    if len > MAX_FILE {
        return Err(format!(
            "{}: {len} bytes, more than the {MAX_FILE} read",
            path.display()
        ));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    // YAML reads JSON too.
    serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The job's targets now, relabeled, and what went wrong reading its files
/// (a file that does not parse keeps none of its targets; the others stay).
pub fn discover(job: &ScrapeConfig, rules: &[Rule]) -> (Vec<Spec>, Vec<String>) {
    let mut errors = Vec::new();
    // (targets, labels, the file they came from)
    type Source = (Vec<String>, IndexMap<String, String>, Option<String>);
    let mut groups: Vec<Source> = job
        .static_configs
        .iter()
        .map(|s| (s.targets.clone(), s.labels.clone(), None))
        .collect();
    for f in &job.file_sd_configs {
        for pattern in &f.files {
            for path in expand(pattern) {
                match read_groups(&path) {
                    Ok(gs) => groups.extend(
                        gs.into_iter()
                            .map(|g| (g.targets, g.labels, Some(path.display().to_string()))),
                    ),
                    Err(e) => errors.push(e),
                }
            }
        }
    }
    let mut out: Vec<Spec> = Vec::new();
    for (targets, labels, file) in groups {
        for t in targets {
            let mut l: Labels = vec![
                ("__address__".into(), t.clone()),
                ("__scheme__".into(), job.scheme.clone()),
                ("__metrics_path__".into(), job.metrics_path.clone()),
                ("job".into(), job.job_name.clone()),
            ];
            for (k, vs) in &job.params {
                if let Some(v) = vs.first() {
                    l.push((format!("__param_{k}"), v.clone()));
                }
            }
            if let Some(f) = &file {
                l.push(("__meta_filepath".into(), f.clone()));
            }
            for (k, v) in &labels {
                l.retain(|(n, _)| n != k);
                l.push((k.clone(), v.clone()));
            }
            let Some(l) = relabel(rules, l) else {
                continue;
            };
            let get = |k: &str| l.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
            let address = get("__address__").unwrap_or_default();
            if address.is_empty() || address.contains('/') {
                errors.push(format!(
                    "target {t:?}: relabeled to the address {address:?}, not host:port"
                ));
                continue;
            }
            let mut params: Vec<(String, String)> = Vec::new();
            for (k, vs) in &job.params {
                match get(&format!("__param_{k}")) {
                    Some(v) => params.push((k.clone(), v)),
                    None => params.extend(vs.iter().map(|v| (k.clone(), v.clone()))),
                }
            }
            for (n, v) in &l {
                if let Some(k) = n.strip_prefix("__param_") {
                    if !job.params.contains_key(k) {
                        params.push((k.to_string(), v.clone()));
                    }
                }
            }
            let spec = Spec {
                scheme: get("__scheme__").unwrap_or_else(|| job.scheme.clone()),
                path: get("__metrics_path__").unwrap_or_else(|| job.metrics_path.clone()),
                job: get("job").unwrap_or_else(|| job.job_name.clone()),
                instance: get("instance").unwrap_or_else(|| address.clone()),
                labels: l
                    .iter()
                    .filter(|(n, _)| !n.starts_with("__") && n != "job" && n != "instance")
                    .cloned()
                    .collect(),
                params,
                address,
            };
            if !out.iter().any(|o| o.key() == spec.key()) {
                out.push(spec);
            }
        }
    }
    (out, errors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prometheus::config::PrometheusReceiverConfig;
    use crate::prometheus::relabel::compile;

    #[test]
    fn globs_match_as_prometheus_file_sd_does() {
        assert!(glob_match(b"*.json", b"a.json"));
        assert!(glob_match(b"t-?.yml", b"t-1.yml"));
        assert!(!glob_match(b"*.json", b"a.yml"));
        assert!(glob_match(b"*", b""));
    }

    #[test]
    fn targets_from_files_relabeled_into_address_instance_path_and_labels() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(
            dir.path().join("a.json"),
            r#"[{"targets": ["redis-exporter:9121"], "labels": {"env": "prod", "__metrics_path__": "/scrape"}},
                {"targets": ["skip-me:1"], "labels": {"drop": "yes"}}]"#,
        )
        .expect("write");
        std::fs::write(dir.path().join("b.yml"), "- targets: ['10.0.0.5:9187']\n").expect("write");
        std::fs::write(dir.path().join("bad.json"), "{ not a list").expect("write");
        let cfg: PrometheusReceiverConfig = serde_yaml::from_str(&format!(
            r#"
config:
  scrape_configs:
    - job_name: deps
      params: {{ target: ["default"] }}
      file_sd_configs: [{{ files: ["{d}/*.json", "{d}/*.yml"] }}]
      relabel_configs:
        - {{ source_labels: [drop], regex: "yes", action: drop }}
        # the multi-target pattern: the address becomes ?target=, instance names the server
        - {{ source_labels: [__address__], target_label: __param_target }}
        - {{ source_labels: [__param_target], target_label: instance }}
        - {{ target_label: __address__, replacement: "127.0.0.1:9121" }}
        - {{ source_labels: [__meta_filepath], regex: ".*/(.*)", target_label: from }}
"#,
            d = dir.path().display()
        ))
        .expect("config");
        let job = &cfg.config.scrape_configs[0];
        let rules = compile(&job.relabel_configs).expect("rules");
        let (specs, errors) = discover(job, &rules);
        assert!(errors.iter().any(|e| e.contains("bad.json")), "{errors:?}");
        let got: Vec<(String, String, String)> = specs
            .iter()
            .map(|s| (s.url(), s.instance.clone(), s.labels["from"].clone()))
            .collect();
        assert_eq!(
            got,
            vec![
                (
                    "http://127.0.0.1:9121/scrape?target=redis-exporter:9121".to_string(),
                    "redis-exporter:9121".to_string(),
                    "a.json".to_string()
                ),
                (
                    "http://127.0.0.1:9121/metrics?target=10.0.0.5:9187".to_string(),
                    "10.0.0.5:9187".to_string(),
                    "b.yml".to_string()
                ),
            ]
        );
        assert_eq!(specs[0].labels.get("env").map(String::as_str), Some("prod"));
        assert!(specs
            .iter()
            .all(|s| s.job == "deps" && !s.labels.contains_key("drop")));
    }
}

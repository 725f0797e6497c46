//! Configuration of the `prometheus` receiver: the Collector's shape
//! (`config:` holding Prometheus' own `scrape_configs`).

use causeway_core::config::{ByteSize, ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

/// `receivers.prometheus`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrometheusReceiverConfig {
    /// Prometheus' configuration: `global` and `scrape_configs`.
    pub config: PromConfig,
}

/// `config`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromConfig {
    /// Defaults for every job.
    #[serde(default)]
    pub global: GlobalConfig,
    /// The jobs.
    pub scrape_configs: Vec<ScrapeConfig>,
}

/// `global`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobalConfig {
    /// Default scrape interval (Prometheus' default: 1m).
    #[serde(default)]
    pub scrape_interval: Option<Duration>,
    /// Default scrape timeout (Prometheus' default: 10s).
    #[serde(default)]
    pub scrape_timeout: Option<Duration>,
}

/// One job.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScrapeConfig {
    /// The job name (`service.name` of what it scrapes).
    pub job_name: String,
    /// How often (unset: `global.scrape_interval`, else 1m).
    #[serde(default)]
    pub scrape_interval: Option<Duration>,
    /// How long a scrape may take (unset: `global.scrape_timeout`, else 10s).
    #[serde(default)]
    pub scrape_timeout: Option<Duration>,
    /// Path.
    #[serde(default = "default_path")]
    pub metrics_path: String,
    /// `http` or `https`.
    #[serde(default = "default_scheme")]
    pub scheme: String,
    /// URL query parameters.
    #[serde(default)]
    pub params: IndexMap<String, Vec<String>>,
    /// Targets and their extra labels.
    #[serde(default)]
    pub static_configs: Vec<StaticConfig>,
    /// Keep the scraped `job`/`instance` labels instead of renaming them `exported_*`.
    #[serde(default)]
    pub honor_labels: bool,
    /// Largest body read from a target; a bigger one fails the scrape.
    #[serde(default = "default_body_limit")]
    pub body_size_limit: ByteSize,
    /// Most samples taken from one scrape; more fail the scrape.
    #[serde(
        default = "default_sample_limit",
        deserialize_with = "causeway_core::config::lenient_int"
    )]
    pub sample_limit: usize,
    /// Longest label value accepted (default 65536 bytes); a longer one fails the scrape.
    #[serde(
        default = "default_label_value_limit",
        deserialize_with = "causeway_core::config::lenient_int"
    )]
    pub label_value_length_limit: usize,
    /// Most labels on one series, `__name__` not counted; a series
    /// with more fails the scrape (Prometheus' `label_limit`, which it leaves unbounded).
    #[serde(
        default = "default_label_limit",
        deserialize_with = "causeway_core::config::lenient_int"
    )]
    pub label_limit: usize,
    /// TLS to the targets (`scheme: https`).
    #[serde(default)]
    pub tls_config: Option<TlsConfig>,
    /// `Authorization: Basic …`.
    #[serde(default)]
    pub basic_auth: Option<BasicAuth>,
    /// `Authorization: <type> <credentials>`.
    #[serde(default)]
    pub authorization: Option<Authorization>,
    /// Rules applied to every scraped sample (`__name__` is a label here).
    #[serde(default)]
    pub metric_relabel_configs: Vec<RelabelConfig>,
    /// Relabeling of each target before it is scraped, as Prometheus'
    /// `relabel_configs`: over `__address__`, `__scheme__`,
    /// `__metrics_path__`, `__param_<name>`, `job`, the group's labels and
    /// `__meta_filepath` (file discovery). A target dropped is not scraped;
    /// `instance` defaults to the final `__address__`; labels starting
    /// with `__` are removed afterwards.
    #[serde(default)]
    pub relabel_configs: Vec<RelabelConfig>,
    /// Targets from files (JSON or YAML lists of `{targets, labels}`), as
    /// Prometheus' `file_sd_configs`: re-read when they change (checked
    /// every second) and every `refresh_interval`; targets that go away
    /// stop being scraped and their series are marked stale.
    #[serde(default)]
    pub file_sd_configs: Vec<FileSdConfig>,
    /// The formats offered, in order of preference, as Prometheus' key:
    /// `OpenMetricsText1.0.0`, `OpenMetricsText0.0.1`, `PrometheusText0.0.4`
    /// (default all three, in that order). The target's `Content-Type`
    /// says which one it answered with.
    #[serde(default = "default_protocols")]
    pub scrape_protocols: Vec<String>,
}

/// `tls_config`, Prometheus' keys.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// CA bundle (unset: the system's roots).
    #[serde(default)]
    pub ca_file: Option<std::path::PathBuf>,
    /// Client certificate.
    #[serde(default)]
    pub cert_file: Option<std::path::PathBuf>,
    /// Its key.
    #[serde(default)]
    pub key_file: Option<std::path::PathBuf>,
    /// The name the target's certificate must carry.
    #[serde(default)]
    pub server_name: Option<String>,
    /// Refused: certificates are always verified.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl TlsConfig {
    /// As causeway's client TLS settings.
    pub fn client(&self) -> causeway_core::tls::ClientTls {
        causeway_core::tls::ClientTls {
            ca_file: self.ca_file.clone(),
            cert_file: self.cert_file.clone(),
            key_file: self.key_file.clone(),
            server_name_override: self.server_name.clone(),
            ..Default::default()
        }
    }
}

/// `basic_auth`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    /// User name.
    pub username: String,
    /// Password.
    #[serde(default)]
    pub password: Option<causeway_core::tls::Secret>,
    /// The password, read from a file (trailing whitespace trimmed).
    #[serde(default)]
    pub password_file: Option<std::path::PathBuf>,
}

/// `authorization`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Authorization {
    /// The scheme.
    #[serde(default = "bearer", rename = "type")]
    pub kind: String,
    /// The credentials.
    #[serde(default)]
    pub credentials: Option<causeway_core::tls::Secret>,
    /// The credentials, read from a file.
    #[serde(default)]
    pub credentials_file: Option<std::path::PathBuf>,
}

fn bearer() -> String {
    "Bearer".into()
}

/// One `metric_relabel_configs` rule.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RelabelConfig {
    /// Labels whose values, joined by `separator`, are matched.
    #[serde(default)]
    pub source_labels: Vec<String>,
    /// Default `;`.
    #[serde(default = "semicolon")]
    pub separator: String,
    /// Anchored regular expression.
    #[serde(default = "any")]
    pub regex: String,
    /// The label `replace` writes.
    #[serde(default)]
    pub target_label: Option<String>,
    /// What `replace` writes, with `$1`-style references.
    #[serde(default = "dollar_one")]
    pub replacement: String,
    /// `replace`, `keep`, `drop`, `labelmap`, `labeldrop` or `labelkeep`.
    #[serde(default)]
    pub action: RelabelAction,
}

/// A relabeling action.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RelabelAction {
    /// Set `target_label` from the match.
    #[default]
    Replace,
    /// Keep only matching samples.
    Keep,
    /// Drop matching samples.
    Drop,
    /// Copy labels whose name matches to the name `replacement` makes of it.
    Labelmap,
    /// Remove labels whose name matches.
    Labeldrop,
    /// Keep only labels whose name matches.
    Labelkeep,
}

fn semicolon() -> String {
    ";".into()
}
fn any() -> String {
    "(.*)".into()
}
fn dollar_one() -> String {
    "$1".into()
}

fn read_secret(
    inline: Option<&causeway_core::tls::Secret>,
    file: Option<&std::path::Path>,
) -> Result<String, String> {
    match (inline, file) {
        (_, Some(f)) => std::fs::read_to_string(f)
            .map(|s| s.trim_end().to_string())
            .map_err(|e| format!("{}: {e}", f.display())),
        (Some(s), None) => Ok(s.expose().to_string()),
        (None, None) => Ok(String::new()),
    }
}

impl ScrapeConfig {
    /// The `Authorization` header value, when the job has one.
    pub fn authorization(&self) -> Result<Option<String>, String> {
        if let Some(b) = &self.basic_auth {
            let pw = read_secret(b.password.as_ref(), b.password_file.as_deref())?;
            return Ok(Some(format!(
                "Basic {}",
                causeway_core::tls::base64(format!("{}:{pw}", b.username).as_bytes())
            )));
        }
        if let Some(a) = &self.authorization {
            let c = read_secret(a.credentials.as_ref(), a.credentials_file.as_deref())?;
            return Ok(Some(format!("{} {c}", a.kind)));
        }
        Ok(None)
    }
}

/// `file_sd_configs[]`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FileSdConfig {
    /// Files; the last path component may hold `*` (e.g. `targets/*.json`).
    pub files: Vec<std::path::PathBuf>,
    /// Re-read at least this often.
    #[serde(default = "default_refresh")]
    pub refresh_interval: Duration,
}

fn default_refresh() -> Duration {
    Duration::secs(300)
}

/// `static_configs[]`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StaticConfig {
    /// `host:port` of each target.
    pub targets: Vec<String>,
    /// Labels added to every series of these targets.
    #[serde(default)]
    pub labels: IndexMap<String, String>,
}

fn default_protocols() -> Vec<String> {
    PROTOCOLS.iter().map(|(n, _)| n.to_string()).collect()
}

/// The formats causeway reads, with their `Accept` media types.
pub const PROTOCOLS: [(&str, &str); 3] = [
    (
        "OpenMetricsText1.0.0",
        "application/openmetrics-text;version=1.0.0",
    ),
    (
        "OpenMetricsText0.0.1",
        "application/openmetrics-text;version=0.0.1",
    ),
    ("PrometheusText0.0.4", "text/plain;version=0.0.4"),
];

impl ScrapeConfig {
    /// The `Accept` header for `scrape_protocols`, with decreasing q values.
    pub fn accept(&self) -> String {
        let mut parts: Vec<String> = self
            .scrape_protocols
            .iter()
            .filter_map(|p| PROTOCOLS.iter().find(|(n, _)| n == p))
            .enumerate()
            .map(|(i, (_, m))| format!("{m};q={:.1}", 1.0 - 0.1 * i as f64))
            .collect();
        parts.push("*/*;q=0.1".into());
        parts.join(",")
    }
}

fn default_path() -> String {
    "/metrics".into()
}
fn default_scheme() -> String {
    "http".into()
}
fn default_body_limit() -> ByteSize {
    ByteSize(16 << 20)
}
fn default_label_limit() -> usize {
    64
}
fn default_label_value_limit() -> usize {
    65_536
}
fn default_sample_limit() -> usize {
    200_000
}

impl ScrapeConfig {
    /// The interval and timeout that apply.
    pub fn timing(&self, g: &GlobalConfig) -> (std::time::Duration, std::time::Duration) {
        let interval = self
            .scrape_interval
            .or(g.scrape_interval)
            .unwrap_or(Duration::secs(60))
            .get();
        let timeout = self
            .scrape_timeout
            .or(g.scrape_timeout)
            .unwrap_or(Duration::secs(10))
            .get();
        (interval, timeout.min(interval))
    }
}

impl Validate for PrometheusReceiverConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.config.scrape_configs.is_empty() {
            e.push(ConfigError::new(
                "config.scrape_configs",
                "at least one job is required",
            ));
        }
        let mut names = std::collections::HashSet::new();
        for (i, j) in self.config.scrape_configs.iter().enumerate() {
            let at = |k: &str| format!("config.scrape_configs[{i}].{k}");
            if j.job_name.trim().is_empty() {
                e.push(ConfigError::new(at("job_name"), "must not be empty"));
            } else if !names.insert(j.job_name.as_str()) {
                e.push(ConfigError::new(
                    at("job_name"),
                    format!("duplicate job {:?}", j.job_name),
                ));
            }
            j.errors(&at, &self.config.global, &mut e);
        }
        e
    }
}

impl ScrapeConfig {
    /// A job's errors, each at its path (`at` of the key).
    fn errors(&self, at: &dyn Fn(&str) -> String, global: &GlobalConfig, e: &mut Vec<ConfigError>) {
        if self.scheme != "http" && self.scheme != "https" {
            e.push(ConfigError::new(
                at("scheme"),
                format!("{:?}: `http` or `https`", self.scheme),
            ));
        }
        if let Some(t) = &self.tls_config {
            if t.insecure_skip_verify {
                e.push(ConfigError::new(
                at("tls_config.insecure_skip_verify"),
                "not supported: causeway always verifies certificates; give the target's CA in ca_file",
            ));
            }
            e.extend(t.client().errors(&at("tls_config")));
        }
        if self.basic_auth.is_some() && self.authorization.is_some() {
            e.push(ConfigError::new(
                at("authorization"),
                "set basic_auth or authorization, not both",
            ));
        }
        if let Err(m) = self.authorization() {
            e.push(ConfigError::new(at("basic_auth"), m));
        }
        self.relabel_errors(at, e);
        if !self.metrics_path.starts_with('/') {
            e.push(ConfigError::new(at("metrics_path"), "must start with `/`"));
        }
        let (interval, _) = self.timing(global);
        if interval < std::time::Duration::from_millis(100) {
            e.push(ConfigError::new(
                at("scrape_interval"),
                "must be at least 100ms",
            ));
        }
        if self.static_configs.iter().all(|s| s.targets.is_empty())
            && self.file_sd_configs.is_empty()
        {
            e.push(ConfigError::new(
                at("static_configs"),
                "no target (and no file_sd_configs)",
            ));
        }
        self.file_sd_errors(at, e);
        for (k, s) in self.static_configs.iter().enumerate() {
            for (t, target) in s.targets.iter().enumerate() {
                if target.contains('/') || !target.contains(':') {
                    e.push(ConfigError::new(
                        at(&format!("static_configs[{k}].targets[{t}]")),
                        format!("{target:?}: write host:port"),
                    ));
                }
            }
        }
        for (k, p) in self.scrape_protocols.iter().enumerate() {
            if !PROTOCOLS.iter().any(|(n, _)| n == p) {
                e.push(ConfigError::new(
                    at(&format!("scrape_protocols[{k}]")),
                    format!(
                        "{p:?}: causeway reads {} (not PrometheusProto)",
                        PROTOCOLS.map(|(n, _)| n).join(", ")
                    ),
                ));
            }
        }
        if self.scrape_protocols.is_empty() {
            e.push(ConfigError::new(
                at("scrape_protocols"),
                "must not be empty",
            ));
        }
        if self.label_limit == 0 {
            e.push(ConfigError::new(at("label_limit"), "must be at least 1"));
        }
        if self.sample_limit == 0 {
            e.push(ConfigError::new(at("sample_limit"), "must be at least 1"));
        }
    }

    /// The relabelling rules' errors.
    fn relabel_errors(&self, at: &dyn Fn(&str) -> String, e: &mut Vec<ConfigError>) {
        for (r, rule) in self
            .metric_relabel_configs
            .iter()
            .enumerate()
            .map(|(r, x)| (format!("metric_relabel_configs[{r}]"), x))
            .chain(
                self.relabel_configs
                    .iter()
                    .enumerate()
                    .map(|(r, x)| (format!("relabel_configs[{r}]"), x)),
            )
        {
            let p = |k: &str| at(&format!("{r}.{k}"));
            if let Err(x) = regex::Regex::new(&format!("^(?:{})$", rule.regex)) {
                e.push(ConfigError::new(p("regex"), format!("invalid regex: {x}")));
            }
            if rule.action == RelabelAction::Replace && rule.target_label.is_none() {
                e.push(ConfigError::new(
                    p("target_label"),
                    "required with action: replace",
                ));
            }
            // `replace` without source labels sets a constant, as in Prometheus.
            if matches!(rule.action, RelabelAction::Keep | RelabelAction::Drop)
                && rule.source_labels.is_empty()
            {
                e.push(ConfigError::new(
                    p("source_labels"),
                    "required with this action",
                ));
            }
        }
    }

    /// The file discovery's errors.
    fn file_sd_errors(&self, at: &dyn Fn(&str) -> String, e: &mut Vec<ConfigError>) {
        for (k, f) in self.file_sd_configs.iter().enumerate() {
            if f.files.is_empty() {
                e.push(ConfigError::new(
                    at(&format!("file_sd_configs[{k}].files")),
                    "must not be empty",
                ));
            }
            for (n, path) in f.files.iter().enumerate() {
                let text = path.to_string_lossy();
                let dir_glob = path
                    .parent()
                    .is_some_and(|p| p.to_string_lossy().contains(['*', '?', '[']));
                let ext_ok = [".json", ".yml", ".yaml"].iter().any(|x| text.ends_with(x));
                if dir_glob || !ext_ok {
                    e.push(ConfigError::new(
                        at(&format!("file_sd_configs[{k}].files[{n}]")),
                        format!("{text:?}: a .json, .yml or .yaml file; `*` only in the file name"),
                    ));
                }
            }
            if f.refresh_interval.get() < std::time::Duration::from_secs(1) {
                e.push(ConfigError::new(
                    at(&format!("file_sd_configs[{k}].refresh_interval")),
                    "must be at least 1s",
                ));
            }
        }
    }
}

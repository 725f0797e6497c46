//! Configuration of the `kafka_lag` receiver.

use causeway_core::config::{ConfigError, Duration, Validate};
use indexmap::IndexMap;
use serde::Deserialize;

/// Include / exclude regular expressions over names.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// Names matching this regex are read (unset: all).
    #[serde(default = "all")]
    pub include: String,
    /// Names matching this regex are left out, even when included (unset: none).
    #[serde(default)]
    pub exclude: Option<String>,
}

impl Default for Match {
    fn default() -> Self {
        Match {
            include: all(),
            exclude: None,
        }
    }
}

fn all() -> String {
    ".*".into()
}

impl Match {
    /// The compiled filter (the patterns were validated).
    pub fn compile(&self) -> Result<Filter, regex::Error> {
        Ok(Filter {
            include: regex::Regex::new(&anchored(&self.include))?,
            exclude: self
                .exclude
                .as_deref()
                .map(|x| regex::Regex::new(&anchored(x)))
                .transpose()?,
        })
    }

    pub fn errors(&self, key: &str) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if let Err(x) = regex::Regex::new(&self.include) {
            e.push(ConfigError::new(
                format!("{key}.include"),
                format!("invalid regex: {x}"),
            ));
        }
        if let Some(Err(x)) = self.exclude.as_deref().map(regex::Regex::new) {
            e.push(ConfigError::new(
                format!("{key}.exclude"),
                format!("invalid regex: {x}"),
            ));
        }
        e
    }
}

/// Patterns match the whole name, as the Collector's `group_match` / `topic_match` do.
fn anchored(p: &str) -> String {
    format!("^(?:{p})$")
}

/// A compiled [`Match`].
#[derive(Debug, Clone)]
pub struct Filter {
    include: regex::Regex,
    exclude: Option<regex::Regex>,
}

impl Filter {
    /// Whether `name` is read.
    pub fn matches(&self, name: &str) -> bool {
        self.include.is_match(name) && !self.exclude.as_ref().is_some_and(|x| x.is_match(name))
    }
}

/// `receivers.kafka_lag`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KafkaLagConfig {
    /// Bootstrap brokers, `host:port`.
    pub brokers: Vec<String>,
    /// The name of the cluster on the metrics' resource (`kafka.cluster.alias`).
    #[serde(default = "alias")]
    pub cluster_alias: String,
    /// The client id the broker sees.
    #[serde(default = "client_id")]
    pub client_id: String,
    /// How often to read the cluster.
    #[serde(default = "interval")]
    pub interval: Duration,
    /// Bound of each request to the cluster; a round is given up after it.
    #[serde(default = "timeout")]
    pub timeout: Duration,
    /// Consumer groups to read (regexes over group ids, matching the whole id).
    #[serde(default)]
    pub groups: Match,
    /// Topics to read (regexes over topic names, matching the whole name).
    #[serde(default)]
    pub topics: Match,
    /// Lag (messages) above which the lag alarm fires.
    #[serde(default = "lag_threshold")]
    pub lag_threshold: i64,
    /// Lag growing without a decrease for this long fires the lag alarm too.
    #[serde(default = "growth_window")]
    pub growth_window: Duration,
    /// Samples in Burrow's evaluation window (10: 2.5 minutes at 15s).
    #[serde(default = "window")]
    pub window: usize,
    /// Lag at or below this counts as caught up in the status evaluation.
    #[serde(default)]
    pub allowed_lag: i64,
    /// Topics that carry retries or dead letters (regex over the whole name;
    /// default `.*-retry|.*\.DLQ|.*-dlq`).
    #[serde(default = "retry_topics")]
    pub retry_topics: String,
    /// Produce rate (messages/s) above which a retry topic is in a retry storm.
    #[serde(default = "retry_rate")]
    pub retry_rate_threshold: f64,
    /// Ask for member counts (DescribeGroups). Brokers that do not serve it
    /// make it fail; that is reported and the counts are left out.
    #[serde(default = "yes")]
    pub describe_groups: bool,
    /// librdkafka properties passed through as they are: `security.protocol`,
    /// `sasl.mechanism`, `sasl.username`, `sasl.password`, `ssl.ca.location`,
    /// ... Values are never logged.
    #[serde(default)]
    pub settings: IndexMap<String, String>,
}

fn alias() -> String {
    "kafka".into()
}
fn client_id() -> String {
    "causeway-kafka-lag".into()
}
fn interval() -> Duration {
    Duration::secs(15)
}
fn timeout() -> Duration {
    Duration::secs(10)
}
fn lag_threshold() -> i64 {
    10_000
}
fn growth_window() -> Duration {
    Duration::secs(300)
}
fn window() -> usize {
    10
}
fn retry_topics() -> String {
    r".*-retry|.*\.DLQ|.*-dlq".into()
}
fn retry_rate() -> f64 {
    200.0
}
fn yes() -> bool {
    true
}

/// Properties causeway sets itself; setting them in `settings` is an error.
const OWNED: &[&str] = &[
    "bootstrap.servers",
    "client.id",
    "group.id",
    "enable.auto.commit",
];

impl Validate for KafkaLagConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        if self.brokers.is_empty() {
            e.push(ConfigError::new(
                "brokers",
                "at least one broker is required",
            ));
        }
        for (i, b) in self.brokers.iter().enumerate() {
            let ok = b
                .rsplit_once(':')
                .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
            if !ok {
                e.push(ConfigError::new(
                    format!("brokers[{i}]"),
                    format!("{b:?} is not host:port"),
                ));
            }
        }
        if self.interval.get() < std::time::Duration::from_millis(100) {
            e.push(ConfigError::new("interval", "must be at least 100ms"));
        }
        if self.timeout.get().is_zero() {
            e.push(ConfigError::new("timeout", "must be more than 0"));
        }
        e.extend(self.groups.errors("groups"));
        e.extend(self.topics.errors("topics"));
        if let Err(x) = regex::Regex::new(&self.retry_topics) {
            e.push(ConfigError::new(
                "retry_topics",
                format!("invalid regex: {x}"),
            ));
        }
        if self.lag_threshold < 0 {
            e.push(ConfigError::new("lag_threshold", "must not be negative"));
        }
        if self.window < 2 {
            e.push(ConfigError::new("window", "must be at least 2 samples"));
        }
        if self.retry_rate_threshold.is_nan() || self.retry_rate_threshold < 0.0 {
            e.push(ConfigError::new(
                "retry_rate_threshold",
                "must be a number, 0 or more",
            ));
        }
        for k in self.settings.keys() {
            if OWNED.contains(&k.as_str()) {
                e.push(ConfigError::new(
                    format!("settings.{k}"),
                    "set by causeway (use `brokers` / `client_id`)",
                ));
            }
        }
        e
    }
}

impl KafkaLagConfig {
    /// The librdkafka properties of the client.
    pub fn client_settings(&self) -> std::collections::BTreeMap<String, String> {
        let mut s: std::collections::BTreeMap<String, String> = self
            .settings
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        s.insert("bootstrap.servers".into(), self.brokers.join(","));
        s.insert("client.id".into(), self.client_id.clone());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_core::config::decode;

    fn errors(yaml: &str) -> Vec<String> {
        let v: serde_yaml::Value = serde_yaml::from_str(yaml).expect("yaml");
        match decode::<KafkaLagConfig>(&v) {
            Ok(_) => vec![],
            Err(e) => e
                .iter()
                .map(|x| format!("{}: {}", x.path, x.message))
                .collect(),
        }
    }

    #[test]
    fn every_error_is_reported_with_its_path() {
        let e = errors(
            r#"
brokers: ["kafka:9092", "nohost"]
groups: { include: "(unclosed" }
topics: { exclude: "[z-a]" }
retry_topics: "*"
window: 1
settings: { bootstrap.servers: "x:1", sasl.password: "secret" }
"#,
        );
        let has = |p: &str| e.iter().any(|x| x.starts_with(p));
        assert!(has("brokers[1]:"), "{e:?}");
        assert!(has("groups.include:"), "{e:?}");
        assert!(has("topics.exclude:"), "{e:?}");
        assert!(has("retry_topics:"), "{e:?}");
        assert!(has("window:"), "{e:?}");
        assert!(has("settings.bootstrap.servers:"), "{e:?}");
        assert_eq!(e.len(), 6, "{e:?}");
        assert!(
            !e.iter().any(|x| x.contains("secret")),
            "a setting's value leaked: {e:?}"
        );
        assert!(errors("brokers: [\"a:1\"]\nnope: 1")
            .iter()
            .any(|x| x.contains("unknown field `nope`")));
    }

    #[test]
    fn defaults_and_filters() {
        let v: serde_yaml::Value =
            serde_yaml::from_str("brokers: [\"k:9092\"]\ngroups: { exclude: \"tmp-.*\" }")
                .expect("yaml");
        let c = decode::<KafkaLagConfig>(&v).expect("valid");
        assert_eq!(c.interval.get(), std::time::Duration::from_secs(15));
        assert_eq!(c.lag_threshold, 10_000);
        assert_eq!(c.growth_window.get(), std::time::Duration::from_secs(300));
        assert_eq!(c.retry_rate_threshold, 200.0);
        let g = c.groups.compile().expect("regex");
        assert!(g.matches("billing"));
        assert!(!g.matches("tmp-1"));
        // Whole-name match: `tmp-.*` does not exclude `x-tmp-1`.
        assert!(g.matches("x-tmp-1"));
        let s = c.client_settings();
        assert_eq!(s["bootstrap.servers"], "k:9092");
        assert_eq!(s["client.id"], "causeway-kafka-lag");
    }
}

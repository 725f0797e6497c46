//! The registered evidence sources: one line each. The order is the order
//! they are asked whether they keep a metric point (the first that keeps it
//! has it) and the order they join a trace.
//!
//! The config's validation lives here too: a rule's SQL is checked against
//! the tables of the sources the config registers.

use causeway_core::config::{ConfigError, Validate};

use super::alerts;
use super::config::CorrelateConfig;
use super::rules;
use super::source::{self, deps, Sources};

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The sources of a config.
pub fn sources(cfg: &CorrelateConfig) -> Sources {
    let lag_sample = cfg.consumer_lag.sample_interval;
    let sample =
        |own: Option<causeway_core::config::Duration>| nanos(own.unwrap_or(lag_sample).get());
    let (window, dep) = (nanos(cfg.window.get()), &cfg.dependencies);
    Sources::new(vec![
        Box::new(source::rabbit::Rabbit::new(sample(
            cfg.rabbitmq.sample_interval,
        ))),
        Box::new(source::nats::Nats::new(sample(cfg.nats.sample_interval))),
        Box::new(deps::source(deps::redis::Redis, dep)),
        Box::new(deps::source(deps::sentinel::Sentinel, dep)),
        Box::new(deps::source(deps::postgresql::Postgresql, dep)),
        Box::new(deps::source(deps::nginx::Nginx, dep)),
        Box::new(deps::source(deps::envoy::Envoy, dep)),
        Box::new(deps::source(deps::llm::Llm, dep)),
        Box::new(deps::source(deps::dcgm::Dcgm, dep)),
        Box::new(source::kafka::Kafka::new(&cfg.consumer_lag)),
        Box::new(source::host::Host),
        Box::new(source::gateway::Gateway::new(window, cfg.max_routes)),
        Box::new(source::profiles::Profiles::new(&cfg.profiles, window)),
    ])
}

impl Validate for CorrelateConfig {
    fn validate(&self) -> Vec<ConfigError> {
        let mut e = Vec::new();
        let sources = sources(self);
        let tables = sources.tables();
        if self.window.get().is_zero() {
            e.push(ConfigError::new("window", "must be more than 0"));
        }
        e.extend(self.incidents.validate());
        for (i, a) in self.incidents.attributes.iter().enumerate() {
            let col = a.strip_prefix("log.").filter(|c| !c.is_empty());
            if let Some(c) = col.filter(|c| sources.log_column(c).is_none()) {
                let names: Vec<&str> = sources.log_columns().iter().map(|c| c.name).collect();
                e.push(ConfigError::new(
                    format!("incidents.attributes[{i}]"),
                    format!(
                        "`{a}`: `logs` has no column `{c}` (the sources' columns: {})",
                        names.join(", ")
                    ),
                ));
            }
        }
        if self.max_log_records == 0 {
            e.push(ConfigError::new("max_log_records", "must be at least 1"));
        }
        if self.max_log_bytes.0 < 1 << 20 {
            e.push(ConfigError::new("max_log_bytes", "must be at least 1MiB"));
        }
        if !(0.0..=1.0).contains(&self.min_explained_share) {
            e.push(ConfigError::new(
                "min_explained_share",
                "must be between 0 and 1",
            ));
        }
        // Each section checks itself.
        let sections: [(&str, Vec<ConfigError>); 7] = [
            ("baseline", self.baseline.validate()),
            ("dependencies", self.dependencies.validate()),
            ("retry_storm", self.retry_storm.validate()),
            ("consumer_lag", self.consumer_lag.validate()),
            ("rabbitmq", self.rabbitmq.validate()),
            ("nats", self.nats.validate()),
            ("profiles", self.profiles.validate()),
        ];
        for (key, errors) in sections {
            e.extend(errors.into_iter().map(|x| x.under(key)));
        }
        let mut names = std::collections::HashSet::new();
        for (i, r) in self.rules.iter().enumerate() {
            if r.name.trim().is_empty() {
                e.push(ConfigError::new(
                    format!("rules[{i}].name"),
                    "must not be empty",
                ));
            }
            if !names.insert(r.name.clone()) {
                e.push(ConfigError::new(
                    format!("rules[{i}].name"),
                    format!("rule {:?} is defined twice", r.name),
                ));
            }
            if r.cause.trim().is_empty() || r.cause.contains(char::is_whitespace) {
                e.push(ConfigError::new(
                    format!("rules[{i}].cause"),
                    "must be one word, e.g. `db_lock_contention`",
                ));
            }
            if let Err(msg) = rules::check_sql(&r.sql, &tables) {
                e.push(ConfigError::new(format!("rules[{i}].sql"), msg));
            }
        }
        if !self.alerts.rules.is_empty() || !self.alerts.links.is_empty() {
            e.extend(alerts::validate(&self.alerts, &sources));
        }
        e
    }
}

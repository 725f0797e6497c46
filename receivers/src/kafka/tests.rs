use super::config::{InitialOffset, KafkaReceiverConfig, RebalanceStrategy};
use causeway_core::config::decode;

fn cfg(y: &str) -> Result<KafkaReceiverConfig, Vec<causeway_core::config::ConfigError>> {
    decode(&serde_yaml::from_str(y).expect("yaml"))
}

#[test]
fn collector_shaped_config_with_defaults_and_every_error_named() {
    let c = cfg("brokers: [\"127.0.0.1:9092\"]\n").expect("valid");
    assert_eq!(c.topic_of(causeway_core::Signal::Traces), "otlp_spans");
    assert_eq!(c.topic_of(causeway_core::Signal::Logs), "otlp_logs");
    assert_eq!(c.initial_offset, InitialOffset::Latest);
    assert_eq!(c.group_rebalance_strategy, RebalanceStrategy::Range);
    let errs = cfg(
        "brokers: []\ngroup_id: ''\ncommit_interval: 0s\nsettings: {group.id: x, enable.auto.commit: 'true'}\n",
    )
    .expect_err("invalid");
    let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "brokers",
        "group_id",
        "commit_interval",
        "settings.group.id",
        "settings.enable.auto.commit",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    assert!(cfg("brokers: [b:1]\ninitial_offset: newest\n").is_err());
}

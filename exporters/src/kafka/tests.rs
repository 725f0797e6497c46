use super::config::KafkaExporterConfig;
use causeway_core::config::decode;

fn cfg(y: &str) -> Result<KafkaExporterConfig, Vec<causeway_core::config::ConfigError>> {
    decode(&serde_yaml::from_str(y).expect("yaml"))
}

#[test]
fn collector_shaped_config_with_defaults_and_every_error_named() {
    let c = cfg("brokers: [\"127.0.0.1:9092\"]\npartition_traces_by_id: true\n").expect("valid");
    assert_eq!(c.topic_of(causeway_core::Signal::Traces), "otlp_spans");
    assert_eq!(c.topic_of(causeway_core::Signal::Logs), "otlp_logs");
    assert_eq!(c.topic_of(causeway_core::Signal::Metrics), "otlp_metrics");
    assert_eq!(c.producer.required_acks, 1);
    let c = cfg("brokers: [b:1]\ntopic: all\nlogs: {topic: gw}\n").expect("valid");
    assert_eq!(c.topic_of(causeway_core::Signal::Traces), "all");
    assert_eq!(c.topic_of(causeway_core::Signal::Logs), "gw");

    let errs = cfg(
        "brokers: []\nproducer: {compression: brotli, required_acks: 2}\nsettings: {bootstrap.servers: x}\ntraces: {topic: ''}\n",
    )
    .expect_err("invalid");
    let paths: Vec<_> = errs.iter().map(|e| e.path.as_str()).collect();
    for want in [
        "brokers",
        "producer.compression",
        "producer.required_acks",
        "settings.bootstrap.servers",
        "traces.topic",
    ] {
        assert!(paths.contains(&want), "{want} missing from {paths:?}");
    }
    let unknown = cfg("brokers: [b:1]\npartition_traces_by_trace_id: true\n").expect_err("unknown key");
    assert!(format!("{unknown:?}").contains("partition_traces_by_trace_id"));
}

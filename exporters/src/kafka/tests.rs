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
    let unknown =
        cfg("brokers: [b:1]\npartition_traces_by_trace_id: true\n").expect_err("unknown key");
    assert!(format!("{unknown:?}").contains("partition_traces_by_trace_id"));
}

/// A keyed batch becomes one message per partition, cut below
/// `max_message_bytes`; every trace's spans are in messages of its own
/// partition, each span once; a message of one trace carries its hex key.
#[tokio::test]
async fn keyed_batches_become_messages_per_partition_under_the_size_limit() {
    use causeway_core::partition::Key;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message as _;
    use std::collections::BTreeMap;
    let mut c = cfg("brokers: [\"127.0.0.1:1\"]\npartition_traces_by_id: true\nproducer: {max_message_bytes: 4096}\n")
        .expect("valid");
    c.timeout = causeway_core::config::Duration::secs(1);
    let e = super::KafkaExporter::new(c, "kafka").expect("producer");
    e.partitions
        .lock()
        .expect("lock")
        .insert("otlp_spans".into(), (6, std::time::Instant::now()));
    let spans: Vec<Span> = (0..1000u32)
        .map(|i| {
            let t = i % 200;
            Span {
                trace_id: [&[1u8; 12][..], &t.to_be_bytes()[..]].concat(),
                span_id: (u64::from(i) + 1).to_be_bytes().to_vec(),
                name: format!("span-{i}"),
                ..Default::default()
            }
        })
        .collect();
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let batch = causeway_core::Batch::from_encoded(
        causeway_core::Signal::Traces,
        req.encode_to_vec().into(),
        1000,
    );
    let msgs = e.messages(&batch, "otlp_spans").await.expect("messages");
    assert!(
        msgs.len() > 6,
        "cut below the limit: {} messages",
        msgs.len()
    );
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for m in &msgs {
        assert!(m.payload.len() <= 4096, "{} bytes", m.payload.len());
        let p = m.partition.expect("explicit partition") as u32;
        let back =
            ExportTraceServiceRequest::decode(m.payload.as_slice()).expect("a valid request");
        let mut ids = std::collections::BTreeSet::new();
        for sp in back
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
        {
            let id: [u8; 16] = sp.trace_id.as_slice().try_into().expect("16 bytes");
            assert_eq!(
                Key::Trace(id).partition(6),
                p,
                "span on its trace's partition"
            );
            *seen.entry(sp.name.clone()).or_default() += 1;
            ids.insert(id);
        }
        if ids.len() == 1 {
            let id = *ids.iter().next().expect("one");
            assert_eq!(m.key.as_deref(), Some(Key::Trace(id).hex().as_str()));
        } else {
            assert_eq!(m.key, None, "a message of several traces has no key");
        }
    }
    assert_eq!(seen.len(), 1000);
    assert!(seen.values().all(|&n| n == 1));
}

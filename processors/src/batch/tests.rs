use super::*;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

fn encoded(spans: usize) -> Batch {
    let req = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..spans)
                    .map(|i| Span {
                        trace_id: vec![1; 16],
                        span_id: vec![(i + 1) as u8; 8],
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    Batch::from_encoded(Signal::Traces, req.encode_to_vec().into(), spans)
}

#[tokio::test(start_paused = true)]
async fn sends_when_size_reached_without_decoding() {
    let mut p = BatchProcessor::new(BatchConfig {
        send_batch_size: 5,
        timeout: Duration::secs(10),
        ..Default::default()
    });
    let mut out = vec![];
    p.process(encoded(3), &mut out).await.expect("ok");
    assert!(out.is_empty());
    p.process(encoded(3), &mut out).await.expect("ok");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].items(), 6);
    assert!(
        matches!(out[0].data(), causeway_core::model::Data::Encoded(parts) if parts.len() == 2)
    );
    let req = out[0].to_traces_request().expect("decodes");
    assert_eq!(causeway_core::model::count_spans(&req.resource_spans), 6);
    assert!(p.next_deadline().is_none());
}

#[tokio::test(start_paused = true)]
async fn sends_on_timeout() {
    let mut p = BatchProcessor::new(BatchConfig {
        send_batch_size: 100,
        timeout: Duration::millis(200),
        ..Default::default()
    });
    let mut out = vec![];
    let start = Instant::now();
    p.process(encoded(2), &mut out).await.expect("ok");
    let deadline = p.next_deadline().expect("pending");
    assert_eq!(deadline - start, std::time::Duration::from_millis(200));
    p.on_tick(start + std::time::Duration::from_millis(100), &mut out)
        .await
        .expect("ok");
    assert!(out.is_empty());
    tokio::time::advance(std::time::Duration::from_millis(200)).await;
    p.on_tick(Instant::now(), &mut out).await.expect("ok");
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].items(), 2);
}

#[tokio::test]
async fn flush_returns_everything_held() {
    let mut p = BatchProcessor::new(BatchConfig::default());
    let mut out = vec![];
    p.process(encoded(1), &mut out).await.expect("ok");
    p.process(Batch::from_logs(vec![]), &mut out)
        .await
        .expect("ok");
    p.flush(&mut out).await.expect("ok");
    assert_eq!(out.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn send_batch_max_size_splits_and_keeps_the_acknowledgement_until_every_part_is_done() {
    let mut p = BatchProcessor::new(BatchConfig {
        send_batch_size: 5,
        send_batch_max_size: 4,
        timeout: Duration::secs(10),
        ..Default::default()
    });
    let (ack, done) = causeway_core::model::Ack::new();
    let mut out = vec![];
    p.process(encoded(3), &mut out).await.expect("ok");
    p.process(encoded(7).with_ack(ack), &mut out)
        .await
        .expect("ok");
    // 10 spans, at most 4 a batch: 4, 4, 2, in arrival order.
    let sizes: Vec<usize> = out.iter().map(Batch::items).collect();
    assert_eq!(sizes, vec![4, 4, 2]);
    let mut ids = Vec::new();
    for b in &out {
        let req = b.to_traces_request().expect("decodes");
        assert_eq!(
            causeway_core::model::count_spans(&req.resource_spans),
            b.items()
        );
        for rs in &req.resource_spans {
            for ss in &rs.scope_spans {
                ids.extend(ss.spans.iter().map(|s| s.span_id[0]));
            }
        }
    }
    assert_eq!(ids, vec![1, 2, 3, 1, 2, 3, 4, 5, 6, 7]);
    // The source hears back only when the last part is delivered.
    let mut done = done;
    out.truncate(2);
    assert!(
        done.try_recv().is_err(),
        "acknowledged with a part still held"
    );
    out.clear();
    assert_eq!(done.await.ok(), Some(true));
}

#[test]
fn collector_batch_keys_are_checked() {
    let v = |y: &str| BatchProcessorFactory.validate(&serde_yaml::from_str(y).expect("yaml"));
    assert!(v("send_batch_size: 8192\nsend_batch_max_size: 10_000\ntimeout: 1s").is_ok());
    let e = v("send_batch_size: 100\nsend_batch_max_size: 50").expect_err("invalid");
    assert_eq!(e[0].path, "send_batch_max_size");
    let e = v("metadata_keys: [X-Tenant]").expect_err("unsupported");
    assert!(
        e[0].path == "metadata_keys" && e[0].message.contains("not supported"),
        "{e:?}"
    );
}

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

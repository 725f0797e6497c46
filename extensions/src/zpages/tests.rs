use super::*;
use causeway_core::telemetry::{ExporterSent, ProcessorReceived, ReceiverAccepted};
use causeway_core::Signal;

#[tokio::test]
async fn pipelinez_shows_each_component_with_its_live_counts() {
    let telemetry = Registry::new();
    telemetry
        .signal_counters(ReceiverAccepted, "otlp")
        .get(Signal::Traces)
        .add(42);
    telemetry
        .signal_counters(ProcessorReceived, "traces/tail_sampling")
        .get(Signal::Traces)
        .add(40);
    telemetry
        .signal_counters(ExporterSent, "otlp/<jaeger>")
        .get(Signal::Traces)
        .add(7);
    let info = Arc::new(ServiceInfo {
        pipelines: vec![causeway_core::component::PipelineInfo {
            id: "traces".into(),
            receivers: vec!["otlp".into()],
            processors: vec!["tail_sampling".into()],
            exporters: vec!["otlp/<jaeger>".into()],
        }],
        extensions: vec!["zpages".into(), "health_check".into()],
        started: Some(SystemTime::now()),
    });
    let cfg: ZPagesConfig =
        decode(&serde_yaml::from_str("endpoint: 127.0.0.1:0").expect("yaml")).expect("valid");
    let z = start("zpages", &cfg, telemetry.clone(), info)
        .await
        .expect("start");
    let get = |path: &str| {
        let url = format!("http://{}{path}", z.local_addr());
        async move { crate::get(&url).await }
    };
    let (code, html) = get("/debug/pipelinez").await;
    assert_eq!(code, 200);
    assert!(html.contains("Pipeline traces"), "{html}");
    assert!(html.contains("receiver_accepted_items: 42"), "{html}");
    assert!(html.contains("processor_received_items: 40"), "{html}");
    assert!(html.contains("exporter_sent_items: 7"), "{html}");
    // Component ids are escaped.
    assert!(
        html.contains("otlp/&lt;jaeger&gt;") && !html.contains("<jaeger>"),
        "{html}"
    );

    let (code, html) = get("/debug/servicez").await;
    assert_eq!(code, 200);
    assert!(html.contains("no (starting or shutting down)"), "{html}");
    telemetry.set_ready(true);
    let (_, html) = get("/debug/servicez").await;
    assert!(html.contains("yes, since"), "{html}");

    let (_, html) = get("/debug/extensionz").await;
    assert!(html.contains("<td>health_check</td>"), "{html}");
    let (code, text) = get("/debug/expvarz").await;
    assert_eq!(code, 200);
    assert!(
        text.contains(
            "causeway_receiver_accepted_items_total{component=\"otlp\",signal=\"traces\"} 42"
        ),
        "{text}"
    );
    assert_eq!(get("/debug/nosuchz").await.0, 404);
}

#[test]
fn escape_covers_markup() {
    assert_eq!(
        escape("<script>alert('x&y')</script>\""),
        "&lt;script&gt;alert(&#39;x&amp;y&#39;)&lt;/script&gt;&quot;"
    );
}

//! causeway processors.

pub mod batch;
pub mod correlate;
pub mod memory_limiter;
pub mod sketch;
pub mod tail_sampling;
pub mod trouble;
pub mod unkept;

use causeway_core::registry::Registry;

/// Register every processor of this crate.
pub fn register(registry: &mut Registry) {
    registry.add_processor(batch::BatchProcessorFactory);
    registry.add_processor(tail_sampling::TailSamplingFactory);
    registry.add_processor(correlate::CorrelateFactory);
    registry.add_processor(memory_limiter::MemoryLimiterFactory);
    // Collector processors and connectors this build lacks, and what to use instead.
    use causeway_core::registry::Kind::{Connector, Processor};
    let rewrite = "causeway does not rewrite or filter telemetry: remove it, or run it in an OpenTelemetry Collector in front of causeway";
    for kind in [
        "attributes",
        "resource",
        "transform",
        "filter",
        "redaction",
        "span",
        "metricstransform",
        "cumulativetodelta",
        "deltatocumulative",
    ] {
        registry.add_instead(Processor, kind, rewrite);
    }
    let enrich = "causeway does not add resource attributes: set them in the SDK (OTEL_RESOURCE_ATTRIBUTES) or in a Collector agent in front";
    registry.add_instead(Processor, "k8sattributes", enrich);
    registry.add_instead(Processor, "resourcedetection", enrich);
    registry.add_instead(
        Processor,
        "probabilistic_sampler",
        "use `tail_sampling` with a `probabilistic` policy (hash_salt shared by all instances)",
    );
    registry.add_instead(
        Processor,
        "groupbytrace",
        "`tail_sampling` groups spans by trace itself; `correlate` holds traces for analysis",
    );
    let none = "causeway has no connectors: list a receiver in every pipeline that needs its data (one receiver may feed several pipelines)";
    for kind in ["forward", "routing", "count", "failover", "roundrobin"] {
        registry.add_instead(Connector, kind, none);
    }
    let red = "causeway has no connectors and does not derive RED metrics from spans; the `correlate` processor exports each analysed trace's root cause as metrics and logs";
    registry.add_instead(Connector, "spanmetrics", red);
    registry.add_instead(Connector, "servicegraph", red);
}

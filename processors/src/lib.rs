//! causeway processors.

pub mod batch;
pub mod correlate;
pub mod tail_sampling;

use causeway_core::registry::Registry;

/// Register every processor of this crate.
pub fn register(registry: &mut Registry) {
    registry.add_processor(batch::BatchProcessorFactory);
    registry.add_processor(tail_sampling::TailSamplingFactory);
    registry.add_processor(correlate::CorrelateFactory);
}

//! causeway processors.

pub mod batch;

use causeway_core::registry::Registry;

/// Register every processor of this crate.
pub fn register(registry: &mut Registry) {
    registry.add_processor(batch::BatchProcessorFactory);
}

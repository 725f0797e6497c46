//! What `tail_sampling` hands on of the traces it does not keep: the
//! narrow interface through which a correlation state behind a sampler
//! learns what normal looks like from all the traffic, not from the kept
//! (slow, failed) share alone. Neither processor imports the other:
//! `correlate` publishes a [`Learner`] in the topology's shared state under
//! its id; a sampler finds those of the processors after it in its traces
//! pipelines ([`after`]). The sampler decides first and hands on after, so
//! no keep decision depends on what it feeds.

use causeway_core::component::{ServiceInfo, SERVICE_KEY};
use causeway_core::shared::{Shared, Slot};

/// Learns from the spans of traces a sampler did not keep.
pub trait Learner: Send + Sync {
    /// Whether it takes a trace of `spans` spans now (its budget of spans
    /// a second). Cheap: asked for every trace not kept.
    fn wants(&self, spans: usize) -> bool;
    /// Learn from spans of traces not kept: an encoded
    /// `ExportTraceServiceRequest`. Bad input is counted and ignored.
    fn learn(&self, request: bytes::Bytes);
}

/// What the owner publishes in the shared state (a sized handle).
pub type Published = Box<dyn Learner>;

/// The learner slots of the processors after `id` in every traces pipeline
/// that holds `id` (filled when those processors are built, so they may be
/// read later; a processor that publishes none leaves its slot empty).
pub fn after(shared: &Shared, id: &str) -> Vec<Slot<Published>> {
    let Some(info) = shared.slot::<ServiceInfo>(SERVICE_KEY).get().cloned() else {
        return Vec::new();
    };
    let mut ids: Vec<&str> = Vec::new();
    for p in info.pipelines.iter().filter(|p| carries_traces(&p.id)) {
        if let Some(at) = p.processors.iter().position(|x| x == id) {
            for next in &p.processors[at + 1..] {
                if !ids.contains(&next.as_str()) {
                    ids.push(next);
                }
            }
        }
    }
    ids.into_iter()
        .map(|x| shared.slot::<Published>(x))
        .collect()
}

/// Whether a pipeline of this id carries traces (`traces`, `all`, with or
/// without a name).
fn carries_traces(id: &str) -> bool {
    let kind = id.split('/').next().unwrap_or(id);
    matches!(kind, "traces" | "all")
}

#[cfg(test)]
mod tests {
    use super::*;
    use causeway_core::component::PipelineInfo;
    use std::sync::Arc;

    struct Null;
    impl Learner for Null {
        fn wants(&self, _: usize) -> bool {
            true
        }
        fn learn(&self, _: bytes::Bytes) {}
    }

    #[test]
    fn the_learners_after_a_sampler_in_its_traces_pipelines_only() {
        let shared = Shared::default();
        let pipeline = |id: &str, procs: &[&str]| PipelineInfo {
            id: id.into(),
            processors: procs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        shared.get_or_init(SERVICE_KEY, || ServiceInfo {
            pipelines: vec![
                pipeline(
                    "traces",
                    &["correlate/before", "tail_sampling", "correlate"],
                ),
                pipeline("traces/b", &["tail_sampling", "correlate", "batch"]),
                pipeline("logs", &["tail_sampling", "correlate/logs"]),
            ],
            ..Default::default()
        });
        let slots = after(&shared, "tail_sampling");
        assert_eq!(slots.len(), 2, "correlate and batch, once each");
        assert!(slots.iter().all(|s| s.get().is_none()));
        shared.get_or_init::<Published>("correlate", || Box::new(Null));
        assert!(slots[0].get().is_some(), "filled after the sampler asked");
        assert!(slots[1].get().is_none(), "batch publishes none");
        assert!(Arc::ptr_eq(
            slots[0].get().expect("filled"),
            &shared
                .slot::<Published>("correlate")
                .get()
                .cloned()
                .expect("x")
        ));
    }
}

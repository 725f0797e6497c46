//! The trace analysis: critical path, layout, baselines, the trace rows and
//! the verdict. It knows the model and no evidence source, state or rule.

pub mod baseline;
pub mod chain;
pub mod critical;
pub mod peers;
pub mod refusal;
pub mod retries;
pub mod shape;
pub mod target;
pub mod trace;
pub mod verdict;

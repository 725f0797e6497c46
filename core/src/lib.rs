//! causeway-core: the data model, component traits, configuration loading and
//! the topology that wires receivers, processors and exporters together.
//!
//! Nothing in this crate names a concrete component: components register
//! through factories ([`registry::Registry`]) and the topology only speaks to
//! the traits in [`component`].

#[doc(hidden)]
pub use indexmap as __indexmap;
pub mod auth;
pub mod component;
pub mod compress;
pub mod config;
pub mod conn;
pub mod error;
pub mod exposure;
pub mod grpc;
pub mod kafka;
pub mod memory;
pub mod model;
pub mod output;
pub mod partition;
pub mod process;
pub mod registry;
pub mod retry;
pub mod rpc;
pub mod shared;
pub mod signal;
pub mod telemetry;
pub mod tls;
pub mod topology;
pub mod ui;
pub mod wire;

pub use error::{BoxError, CoreError};
pub use model::{Ack, Batch, Signal, SignalSet};

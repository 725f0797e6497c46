//! The daemon's own telemetry: the registry of counters and gauges every
//! component records into ([`registry`]), the page API's sources
//! ([`api`]), and the server that renders them on `/metrics`, `/healthz`,
//! `/readyz`, the page and `/api/` ([`server`]). The registry knows
//! nothing of the server.

pub mod api;
pub mod registry;
pub mod server;

pub use registry::*;
pub use server::{guard, serve, serve_router, serve_with, Serve};

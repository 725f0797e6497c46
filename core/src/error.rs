//! The error type of the core crate.

use std::path::PathBuf;

/// An error and its causes, `outer: inner: root`, each cause written once
/// (many errors repeat their source in their own message).
pub fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    s
}

/// A boxed error used at trait boundaries between components and the topology.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Errors raised by the core crate. Each variant carries the context an
/// operator needs to find the cause.
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// The configuration file could not be read.
    #[error("cannot read configuration file {path}: {source}")]
    ReadConfig {
        /// The file that was read.
        path: PathBuf,
        /// The underlying IO error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration is invalid; every problem found is listed.
    #[error("{}", crate::config::ConfigErrors::render(.0))]
    InvalidConfig(Vec<crate::config::ConfigError>),
    /// A component failed to build.
    #[error("{kind} {id}: {source}")]
    Build {
        /// Component kind (receiver, processor, exporter).
        kind: &'static str,
        /// Component id.
        id: String,
        /// The cause.
        #[source]
        source: BoxError,
    },
    /// A listener could not be bound.
    #[error("{what}: cannot listen on {addr}: {source}")]
    Bind {
        /// What tried to bind.
        what: String,
        /// The address.
        addr: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Protobuf wire data was malformed.
    #[error(transparent)]
    Wire(#[from] crate::wire::WireError),
    /// Protobuf decoding failed.
    #[error("protobuf decode: {0}")]
    Decode(#[from] prost::DecodeError),
    /// Two batches of a signal whose requests cannot be joined (profiles:
    /// each request's samples index its own dictionary).
    #[error("batches of {0} cannot be merged")]
    Unmergeable(crate::signal::Signal),
}

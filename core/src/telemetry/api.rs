//! The page's JSON API as components extend it: what a source answers, and
//! the answers recently given. Knows nothing of HTTP: the server asks.

/// Something that answers `GET /api/{path}`.
pub trait ApiSource: Send + Sync {
    /// The JSON answer (status, body) for `path` (without `/api/`), or
    /// `None` when the path is not this source's.
    fn get(&self, path: &str) -> Option<(u16, String)>;
}

/// An answer kept: when it was given, its status, its body.
pub(crate) type Answer = (std::time::Instant, u16, String);

/// Recent answers by path.
#[derive(Default)]
pub struct Cache(pub(crate) std::sync::Mutex<std::collections::HashMap<String, Answer>>);

//! A log record as evidence: what every record has (its time, service,
//! severity, error type, body and span id) and, beside it, what each
//! evidence source read of it, as that source's own typed part. The model
//! knows no source's fields: the gateway's route, status and rate-limit
//! rule are the gateway source's part (`source/gateway.rs`).

use std::any::Any;
use std::sync::Arc;

type Part = Arc<dyn Any + Send + Sync>;

/// What sources keep beside a record or a trace, one typed part each
/// (read back by type: only the source that wrote a part knows it).
/// 32 bytes when empty: it sits in every log record of the window.
#[derive(Clone, Default)]
pub struct Parts {
    /// The first part, kept inline (most records have one source's part).
    first: Option<Part>,
    /// Any more (rare: boxed, so a record without them pays one word, where
    /// a `Vec` would cost three in every record).
    #[allow(clippy::box_collection)]
    more: Option<Box<Vec<Part>>>,
    bytes: u32,
}

impl Parts {
    /// Keep `part`, counted at `bytes` (the record's memory).
    pub fn put<T: Any + Send + Sync>(&mut self, part: T, bytes: usize) {
        let part: Part = Arc::new(part);
        match &self.first {
            None => self.first = Some(part),
            Some(p) if p.is::<T>() => self.first = Some(part),
            Some(_) => {
                let more = self.more.get_or_insert_with(Default::default);
                more.retain(|p| !p.is::<T>());
                more.push(part);
            }
        }
        self.bytes = self
            .bytes
            .saturating_add(u32::try_from(bytes).unwrap_or(u32::MAX));
    }
    /// The part of type `T`, if a source put one.
    pub fn get<T: Any>(&self) -> Option<&T> {
        self.first
            .iter()
            .chain(self.more.iter().flat_map(|m| m.iter()))
            .find_map(|p| p.downcast_ref::<T>())
    }
    /// Whether no source put a part.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }
    /// The bytes the parts were counted at.
    pub fn bytes(&self) -> usize {
        self.bytes as usize
    }
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Parts({})",
            usize::from(self.first.is_some()) + self.more.as_ref().map_or(0, |m| m.len())
        )
    }
}

/// One log record, as evidence.
#[derive(Debug, Clone, Default)]
pub struct LogEvidence {
    /// Record time (ns).
    pub time_ns: u64,
    /// `service.name` of the resource (one allocation shared by the
    /// records of a resource).
    pub service: Arc<str>,
    /// Severity number.
    pub severity: i32,
    /// `error.type` / `exception.type`.
    pub error_type: Option<String>,
    /// The body, cut to 512 bytes.
    pub body: String,
    /// The record's span id (hex): for a gateway's line, the caller's span
    /// its `traceparent` named, so the line sits on the trace between that
    /// call and what answered it.
    pub span_id: Option<String>,
    /// What the sources read of it (`Source::read_log`).
    pub parts: Parts,
}

impl LogEvidence {
    /// The memory it is counted at: its body, its parts and a fixed overhead.
    pub fn cost(&self) -> usize {
        256 + self.body.len() + self.parts.bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_is_read_back_by_its_type_and_counted() {
        #[derive(Debug, PartialEq)]
        struct A(u32);
        #[derive(Debug, PartialEq)]
        struct B(&'static str);
        let mut p = Parts::default();
        assert!(p.get::<A>().is_none());
        p.put(A(1), 10);
        p.put(B("x"), 5);
        assert_eq!(p.get::<A>(), Some(&A(1)));
        assert_eq!(p.get::<B>(), Some(&B("x")));
        // A second part of one type replaces the first.
        p.put(A(2), 0);
        assert_eq!(p.get::<A>(), Some(&A(2)));
        assert_eq!(p.bytes(), 15);
    }

    #[test]
    fn parts_stay_small_in_every_record() {
        assert_eq!(std::mem::size_of::<Parts>(), 32);
    }
}

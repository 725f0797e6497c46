//! State shared by components of one running topology, found by a key.
//!
//! A processor used in several pipelines gets one instance per pipeline
//! (as in the Collector), and other components may need what it holds
//! (a policy reading the correlation state, for example). They meet here:
//! each asks for the slot of a key (usually the owning component's id) and
//! the owner fills it. Keys are typed, so two kinds of state never collide.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// A slot that the owner fills once and readers look into.
pub type Slot<T> = Arc<OnceLock<Arc<T>>>;

type Slots = HashMap<(TypeId, String), Arc<dyn Any + Send + Sync>>;

/// The shared-state registry of a topology (cheap to clone).
#[derive(Clone, Default)]
pub struct Shared {
    slots: Arc<Mutex<Slots>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Shared {
    /// The slot of `key` for state of type `T` (created empty on first ask).
    pub fn slot<T: Send + Sync + 'static>(&self, key: &str) -> Slot<T> {
        let mut slots = match self.slots.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let entry = slots
            .entry((TypeId::of::<T>(), key.to_string()))
            .or_insert_with(|| Slot::<T>::default() as Arc<dyn Any + Send + Sync>)
            .clone();
        drop(slots);
        // The key includes the type, so the downcast cannot fail.
        entry.downcast::<OnceLock<Arc<T>>>().unwrap_or_default()
    }

    /// The state of `key`, created with `init` by the first caller.
    pub fn get_or_init<T: Send + Sync + 'static>(
        &self,
        key: &str,
        init: impl FnOnce() -> T,
    ) -> Arc<T> {
        self.slot::<T>(key).get_or_init(|| Arc::new(init())).clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_state_per_key_and_type() {
        let s = Shared::default();
        let a = s.get_or_init("correlate", || 1u32);
        let b = s.get_or_init("correlate", || 2u32);
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(*b, 1);
        let other: Arc<String> = s.get_or_init("correlate", || "x".to_string());
        assert_eq!(*other, "x");
        let slot = s.slot::<u64>("late");
        assert!(slot.get().is_none());
        s.get_or_init("late", || 9u64);
        assert_eq!(slot.get().map(|x| **x), Some(9));
    }
}

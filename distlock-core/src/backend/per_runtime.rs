//! [`PerRuntime`]: one value per key and tokio runtime, shared by every client of the process
//! that asks for it there — a connection that wakes waiters (Redis pub/sub, PostgreSQL
//! `LISTEN`), which would otherwise deliver each message once per client. [`Share`] is one
//! client's hold on it: the value of the runtime the client is used on now.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use tokio::runtime::{Handle, Id};

/// Values shared per key and runtime while someone holds them (a key's value is made again
/// once every holder dropped it). Per runtime, because such a value runs a task on the runtime
/// it started on, which ends with that runtime: a client on another runtime gets its own.
///
/// ```
/// use std::sync::Arc;
/// use distlock_core::backend::PerRuntime;
///
/// static SHARED: PerRuntime<String> = PerRuntime::new();
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let a = SHARED.get_or_make("redis://h:1/0", || "one".to_owned());
/// let b = SHARED.get_or_make("redis://h:1/0", || "two".to_owned());
/// assert!(Arc::ptr_eq(&a, &b));
/// # });
/// ```
pub struct PerRuntime<T> {
    in_use: OnceLock<Mutex<InUse<T>>>,
}

/// The values held somewhere, by key and runtime.
type InUse<T> = HashMap<(String, Id), Weak<T>>;

impl<T> Default for PerRuntime<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PerRuntime<T> {
    /// An empty set (usable in a `static`).
    pub const fn new() -> Self {
        PerRuntime {
            in_use: OnceLock::new(),
        }
    }

    /// The value in use for `key` on the current runtime, or a new one from `make` (which is
    /// then shared). Outside a runtime, a new value that is not shared.
    pub fn get_or_make(&self, key: &str, make: impl FnOnce() -> T) -> Arc<T> {
        let Ok(rt) = Handle::try_current() else {
            return Arc::new(make());
        };
        let mut in_use = self
            .in_use
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        in_use.retain(|_, v| v.strong_count() > 0);
        let key = (key.to_owned(), rt.id());
        if let Some(v) = in_use.get(&key).and_then(Weak::upgrade) {
            return v;
        }
        let v = Arc::new(make());
        in_use.insert(key, Arc::downgrade(&v));
        v
    }
}

/// One client's share of a [`PerRuntime`] value: the value of the runtime the client is used on
/// now, kept while the client lives (so a connection outlives one acquisition) and looked up
/// again when the client is used on another runtime — a value is always that of the runtime
/// that uses it, so the tasks it starts there run where its users are (a client connected on
/// one runtime and first used on another must not tie every client of the first to a task of
/// the second).
pub struct Share<T> {
    last: Mutex<Option<(Id, Arc<T>)>>,
}

impl<T> std::fmt::Debug for Share<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Share").finish_non_exhaustive()
    }
}

impl<T> Default for Share<T> {
    fn default() -> Self {
        Share {
            last: Mutex::new(None),
        }
    }
}

impl<T> Share<T> {
    /// The value of `set` for `key` on the current runtime (see [`PerRuntime::get_or_make`]).
    pub fn get(&self, set: &PerRuntime<T>, key: &str, make: impl FnOnce() -> T) -> Arc<T> {
        let Ok(rt) = Handle::try_current() else {
            return Arc::new(make());
        };
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        match last.as_ref() {
            Some((id, v)) if *id == rt.id() => Arc::clone(v),
            _ => {
                let v = set.get_or_make(key, make);
                *last = Some((rt.id(), Arc::clone(&v)));
                v
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;

    use super::PerRuntime;

    #[test]
    fn shared_per_key_and_runtime_while_held() {
        let set: PerRuntime<u32> = PerRuntime::new();
        let first = tokio::runtime::Runtime::new().unwrap();
        let (a, b, other_key) = first.block_on(async {
            (
                set.get_or_make("k", || 1),
                set.get_or_make("k", || 2),
                set.get_or_make("j", || 3),
            )
        });
        assert!(Arc::ptr_eq(&a, &b), "one value per key on one runtime");
        assert_eq!((*a, *other_key), (1, 3));
        let second = tokio::runtime::Runtime::new().unwrap();
        let c = second.block_on(async { set.get_or_make("k", || 4) });
        assert_eq!(*c, 4, "another runtime gets its own value");
        drop((a, b));
        let d = first.block_on(async { set.get_or_make("k", || 5) });
        assert_eq!(*d, 5, "a value nobody holds is made again");
        assert_eq!(
            *set.get_or_make("k", || 6),
            6,
            "outside a runtime: not shared"
        );
    }

    #[test]
    fn a_share_follows_the_runtime_it_is_used_on() {
        let set: PerRuntime<u32> = PerRuntime::new();
        let share = super::Share::default();
        let (first, second) = (
            tokio::runtime::Runtime::new().unwrap(),
            tokio::runtime::Runtime::new().unwrap(),
        );
        let on_first = first.block_on(async { share.get(&set, "k", || 1) });
        let on_second = second.block_on(async { share.get(&set, "k", || 2) });
        assert_eq!((*on_first, *on_second), (1, 2));
        let again = first.block_on(async { set.get_or_make("k", || 3) });
        assert!(
            Arc::ptr_eq(&on_first, &again),
            "the first runtime's value is shared"
        );
        let kept = second.block_on(async { share.get(&set, "k", || 4) });
        assert!(
            Arc::ptr_eq(&on_second, &kept),
            "kept while the client uses it"
        );
    }
}

//! Wake-ups within one process: a release or a departing waiter wakes this process's waiters
//! of that name at once (waiters in other processes find out by polling).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use tokio::sync::Notify;

/// Key (database, table, family, name) → the waiters' shared signal, while anyone waits.
static WAITING: LazyLock<Mutex<HashMap<String, Weak<Notify>>>> = LazyLock::new(Default::default);

/// The signal waiters of `key` sleep on (kept alive by them).
pub(crate) fn signal(key: &str) -> Arc<Notify> {
    let mut m = WAITING.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = m.get(key).and_then(Weak::upgrade) {
        return n;
    }
    m.retain(|_, w| w.strong_count() > 0);
    let n = Arc::new(Notify::new());
    m.insert(key.to_owned(), Arc::downgrade(&n));
    n
}

/// Wakes every waiter of `key` in this process.
pub(crate) fn wake(key: &str) {
    let n = WAITING
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .and_then(Weak::upgrade);
    if let Some(n) = n {
        n.notify_waiters();
    }
}

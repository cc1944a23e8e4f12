//! Whether an acquisition was handed the lock by another holder (the `distlock_handoffs_total`
//! series of [`crate::metrics`]): a backend calls [`waited`] where it finds the name held by
//! someone else — a round that saw another holder, a queue place behind one, a lock statement
//! whose wait ran out — and the core, which runs every acquisition inside [`scope`], counts a
//! granted acquisition that waited as one handoff.
//!
//! A task-local flag rather than a field threaded through each wait loop: the loops differ per
//! store, the question is the same. Outside [`scope`] (a backend's own spawned task) a call
//! does nothing.

use std::cell::Cell;
use std::future::Future;

tokio::task_local! {
    static WAITED: Cell<bool>;
}

/// Notes that the current acquisition found the name held by another holder.
pub fn waited() {
    let _ = WAITED.try_with(|w| w.set(true));
}

/// Runs one acquisition, telling afterwards whether it [`waited`] behind another holder (and
/// telling an enclosing scope too).
pub async fn scope<F: Future>(acquisition: F) -> (F::Output, bool) {
    let (out, waited) = WAITED
        .scope(Cell::new(false), async {
            let out = acquisition.await;
            (out, WAITED.with(Cell::get))
        })
        .await;
    if waited {
        self::waited();
    }
    (out, waited)
}

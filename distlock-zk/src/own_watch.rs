//! [`OwnWatch`]: the existence watch on a guard's own node, so the guard learns of the node's
//! deletion at once and its renewals need not ask the server whether the node still stands.
//!
//! ZooKeeper delivers a watch event before the reply to any request the server handled after
//! the change, and re-registers watches before anything else on a new connection (the client
//! sends `SetWatches` first; the server fires what changed meanwhile). So once the watch is
//! registered, "no deletion event has reached the client" after the reply to a `sync` means
//! the node still stood when that `sync` was handled: the renewal's `sync` is all a renewal
//! sends, one per session however many guards it holds (10,000 held guards each asking for
//! their node once a renewal overloaded ZooKeeper on two cores and lost locks).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use distlock_core::backend::LostSignal;
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::task::JoinHandle;
use zookeeper_client::{EventType, WatchedEvent};

use crate::contender::Contender;

/// A pending event of the armed watch, shared between the task that waits for it and the
/// renewals that look whether it came.
type Pending = Shared<BoxFuture<'static, WatchedEvent>>;

/// How long the watch task waits before registering again after a request error.
const REARM_AFTER: Duration = Duration::from_millis(100);

/// What the watch says about the node at this moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Armed and nothing fired: the node stood when the latest reply the client has read was
    /// sent.
    Stands,
    /// The node was deleted (or the session ended).
    Gone,
    /// The watch is not armed (not yet, or a request failed, or it fired on a data change):
    /// ask the server.
    Unknown,
}

/// How many times the watch task started and finished polling the pending event. `Shared`
/// answers `Pending` to a clone polled while another clone is polling the inner future, so
/// [`OwnWatch::standing`] trusts a `Pending` only when no poll of the task overlapped its own.
#[derive(Default)]
struct Polls {
    started: AtomicU64,
    done: AtomicU64,
}

impl Polls {
    fn read(&self) -> (u64, u64) {
        (
            self.started.load(Ordering::SeqCst),
            self.done.load(Ordering::SeqCst),
        )
    }
}

/// The watch task's wait for the pending event, counted in [`Polls`].
struct Counted<'a> {
    pending: Pending,
    polls: &'a Polls,
}

impl Future for Counted<'_> {
    type Output = WatchedEvent;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<WatchedEvent> {
        self.polls.started.fetch_add(1, Ordering::SeqCst);
        let polled = self.pending.poll_unpin(cx);
        self.polls.done.fetch_add(1, Ordering::SeqCst);
        polled
    }
}

/// What the watch task and the guard share (one allocation per guard).
#[derive(Default)]
struct State {
    /// The pending event while the watch is registered.
    armed: Mutex<Option<Pending>>,
    polls: Polls,
    /// Set by the guard's own release: the deletion that follows is not a loss.
    released: AtomicBool,
}

/// The watch on one guard's node. Its task marks the guard lost when someone else deletes the
/// node (or finds it gone when it registers again), and once the guard is lost by any cause
/// deletes what is left of our nodes (unless the guard's own release does): while the session
/// lives, a lost guard's node would otherwise keep the name locked for everyone (issue 14).
/// One task per guard does both. Dropping the watch stops the task, except while it deletes
/// the nodes of a lost, unreleased guard (that must finish).
pub(crate) struct OwnWatch {
    state: Arc<State>,
    lost: LostSignal,
    task: JoinHandle<()>,
}

impl Drop for OwnWatch {
    fn drop(&mut self) {
        if !self.lost.is_lost() || self.is_released() {
            self.task.abort();
        }
    }
}

impl OwnWatch {
    /// Registers the watch on `node` (of contender `mine`) and keeps it registered (after a
    /// data change or a request error) until the node is deleted, the session ends or the
    /// watch is dropped; a deletion not announced by [`released`](Self::released) marks
    /// `lost`. Once `lost` is set and the guard not released, deletes `mine`'s nodes (bounded
    /// by `within`). `name` and `label` are for the log.
    pub(crate) fn start(
        mine: Arc<Contender>,
        node: String,
        lost: LostSignal,
        within: Duration,
        name: &str,
        label: &str,
    ) -> Self {
        let state: Arc<State> = Arc::default();
        let task = tokio::spawn({
            let (state, lost) = (Arc::clone(&state), lost.clone());
            let (name, label) = (name.to_owned(), label.to_owned());
            async move {
                let released = || state.released.load(Ordering::SeqCst);
                let watched = watch(&mine, &node, &state, &lost, &name, &label);
                // The watch ends when the node or the session is gone; the loss may come first
                // from elsewhere (a renewal, the session's signal).
                tokio::select! {
                    () = watched => {}
                    _ = lost.wait() => {}
                }
                if released() {
                    return;
                }
                let why = lost.wait().await;
                if released() {
                    return;
                }
                tracing::debug!(name = %name, backend = %label, reason = %why, "lock lost; deleting its node");
                // Boxed: the delete's state (~0.6 KiB) is allocated only once the lock is lost,
                // not for as long as every guard waits here.
                Box::pin(mine.delete_all(within)).await;
            }
        });
        OwnWatch { state, lost, task }
    }

    /// Whether the node stands as far as the events the client has read tell (see the module
    /// doc for why that covers every reply read before this call).
    pub(crate) fn standing(&self) -> Standing {
        let Some(pending) = lock(&self.state.armed).clone() else {
            return Standing::Unknown;
        };
        let before = self.state.polls.read();
        let seen = pending.now_or_never();
        let after = self.state.polls.read();
        match seen {
            // Nothing fired — trusted only if the watch task was not polling meanwhile (then
            // `Shared` may have answered `Pending` without looking; the event may be in).
            None if alone(before, after) => Standing::Stands,
            None => Standing::Unknown,
            Some(ev) => match ev.event_type {
                EventType::NodeDeleted | EventType::Session => Standing::Gone,
                _ => Standing::Unknown,
            },
        }
    }

    /// The guard's own release is about to delete the node: its deletion event is not a loss.
    /// The watch stays registered, so the deletion's own event ends it on the server and the
    /// client without a separate request to remove it.
    pub(crate) fn released(&self) {
        self.state.released.store(true, Ordering::SeqCst);
    }

    /// Whether [`released`](Self::released) was called.
    pub(crate) fn is_released(&self) -> bool {
        self.state.released.load(Ordering::SeqCst)
    }
}

/// Keeps the watch on `node` registered until the node is deleted (marking `lost` unless the
/// guard released it) or the session ends; each turn is one registration, started again only
/// after an event or a failed request.
async fn watch(
    mine: &Contender,
    node: &str,
    state: &State,
    lost: &LostSignal,
    name: &str,
    label: &str,
) {
    let lose = |why: &str| {
        if !state.released.load(Ordering::SeqCst)
            && lost.mark_lost(format!("lock node {node} {why}"))
        {
            tracing::warn!(backend = %label, name = %name, node = %node, "lock lost: its node {why}");
        }
    };
    loop {
        // Boxed, like the pause below: the request's state is allocated only while it is under
        // way, not kept inline in the task for as long as the guard is held.
        let watcher = match Box::pin(mine.client.check_and_watch_stat(node)).await {
            Ok((Some(_), watcher)) => watcher,
            // Gone when registering (again, after a data change): deleted by someone else,
            // unless by our own release.
            Ok((None, _)) => return lose("is gone (deleted by someone else)"),
            Err(
                zookeeper_client::Error::SessionExpired | zookeeper_client::Error::ClientClosed,
            ) => return,
            Err(_) => {
                Box::pin(tokio::time::sleep(REARM_AFTER)).await;
                continue;
            }
        };
        let pending: Pending = watcher.changed().boxed().shared();
        *lock(&state.armed) = Some(pending.clone());
        let ev = Counted {
            pending,
            polls: &state.polls,
        }
        .await;
        *lock(&state.armed) = None;
        match ev.event_type {
            EventType::NodeDeleted => return lose("was deleted by someone else"),
            // The session ended: its own signal reports the loss.
            EventType::Session => return,
            // A data change (or a creation event, which cannot come for a node that stands):
            // watch again.
            _ => continue,
        }
    }
}

/// Whether no poll of the watch task overlapped a look between the [`Polls`] readings `before`
/// and `after` (started, done): none was under way at `before`, none started since.
fn alone(before: (u64, u64), after: (u64, u64)) -> bool {
    before.0 == before.1 && after.0 == before.0
}

fn lock(slot: &Mutex<Option<Pending>>) -> std::sync::MutexGuard<'_, Option<Pending>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::alone;

    #[test]
    fn a_look_is_trusted_only_without_an_overlapping_poll() {
        assert!(alone((3, 3), (3, 3)), "no poll at all");
        assert!(
            !alone((4, 3), (4, 4)),
            "a poll under way when the look began"
        );
        assert!(!alone((3, 3), (4, 3)), "a poll began during the look");
        assert!(!alone((3, 3), (4, 4)), "a whole poll fell inside the look");
    }
}

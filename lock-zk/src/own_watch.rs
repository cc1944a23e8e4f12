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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use lock_core::backend::LostSignal;
use tokio::task::JoinHandle;
use zookeeper_client::{Client, EventType, WatchedEvent};

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

/// The watch on one guard's node; its task marks the guard lost when someone else deletes the
/// node. Dropping it stops the task.
pub(crate) struct OwnWatch {
    armed: Arc<Mutex<Option<Pending>>>,
    /// Set by the guard's own release: the deletion that follows is not a loss.
    released: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for OwnWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OwnWatch {
    /// Registers the watch on `node` and keeps it registered (after a data change or a request
    /// error) until the node is deleted, the session ends or the watch is dropped; a deletion
    /// not announced by [`released`](Self::released) marks `lost`. `name` and `label` are for
    /// the log.
    pub(crate) fn start(
        client: Client,
        node: String,
        lost: LostSignal,
        name: &str,
        label: &str,
    ) -> Self {
        let armed: Arc<Mutex<Option<Pending>>> = Arc::default();
        let released = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (armed, released) = (Arc::clone(&armed), Arc::clone(&released));
            let (name, label) = (name.to_owned(), label.to_owned());
            async move {
                // Ends when the node or the session is gone; each turn is one registration,
                // started again only after an event or a failed request (the task dies with
                // the guard: `Drop` aborts it).
                loop {
                    let watcher = match client.check_and_watch_stat(&node).await {
                        Ok((Some(_), watcher)) => watcher,
                        // Gone already: the guard's renewal asks the server and finds out.
                        Ok((None, _)) => return,
                        Err(
                            zookeeper_client::Error::SessionExpired
                            | zookeeper_client::Error::ClientClosed,
                        ) => return,
                        Err(_) => {
                            tokio::time::sleep(REARM_AFTER).await;
                            continue;
                        }
                    };
                    let pending: Pending = watcher.changed().boxed().shared();
                    *lock(&armed) = Some(pending.clone());
                    let ev = pending.await;
                    *lock(&armed) = None;
                    match ev.event_type {
                        EventType::NodeDeleted => {
                            if !released.load(Ordering::SeqCst)
                                && lost.mark_lost(format!(
                                    "lock node {node} was deleted by someone else"
                                ))
                            {
                                tracing::warn!(backend = %label, name = %name, node = %node, "lock lost: its node was deleted by someone else");
                            }
                            return;
                        }
                        // The session ended: its own signal reports the loss.
                        EventType::Session => return,
                        // A data change (or a creation event, which cannot come for a node
                        // that stands): watch again.
                        _ => continue,
                    }
                }
            }
        });
        OwnWatch {
            armed,
            released,
            task,
        }
    }

    /// Whether the node stands as far as the events the client has read tell (see the module
    /// doc for why that covers every reply read before this call).
    pub(crate) fn standing(&self) -> Standing {
        let pending = lock(&self.armed).clone();
        match pending.map(|p| p.now_or_never()) {
            None => Standing::Unknown,
            Some(None) => Standing::Stands,
            Some(Some(ev)) => match ev.event_type {
                EventType::NodeDeleted | EventType::Session => Standing::Gone,
                _ => Standing::Unknown,
            },
        }
    }

    /// The guard's own release is about to delete the node: its deletion event is not a loss.
    /// The watch stays registered, so the deletion's own event ends it on the server and the
    /// client without a separate request to remove it.
    pub(crate) fn released(&self) {
        self.released.store(true, Ordering::SeqCst);
    }
}

fn lock(slot: &Mutex<Option<Pending>>) -> std::sync::MutexGuard<'_, Option<Pending>> {
    slot.lock().unwrap_or_else(|p| p.into_inner())
}

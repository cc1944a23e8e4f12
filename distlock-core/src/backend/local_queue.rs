//! [`LocalQueue`]: the in-process waiter queue of one lock. At most ONE waiter per process and
//! lock talks to the store; the others wait their turn here, in arrival order, and a release
//! made by this process wakes the waiter at the head at once.
//!
//! Why: without it every waiting task polls the store (backoff backends) or holds a pooled
//! connection blocked in the store's own lock queue (`SELECT … FOR UPDATE`), so N local waiters
//! cost N times the statements or connections, and a releasing task that asks again usually
//! wins the race against its own process's waiters. With it, waiters in one process are served
//! FIFO (tokio's `Mutex` is fair) and only the head talks to the store; waiters in other
//! processes still compete through the store as before.
//!
//! Guarantees: FIFO among the waiters of one process that use the same key; nothing is kept
//! while no one waits. The queue is never held by a lock holder: a holder that freezes or is
//! abandoned leaves the queue free, so the head still sees its lease run out. Safety never
//! depends on it (the store decides who holds the lock).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, Weak};

use crate::backend::Deadline;
use tokio::sync::{Notify, OwnedMutexGuard};

/// One lock's in-process waiter queue (see the module docs).
pub struct LocalQueue {
    key: String,
    /// Held by the waiter that talks to the database; the others queue on it.
    head: Arc<tokio::sync::Mutex<()>>,
    /// Signalled when this process releases the lock.
    released: Notify,
}

static QUEUES: LazyLock<Mutex<HashMap<String, Weak<LocalQueue>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

/// The key of one lock: the store's identity, the namespace in it (a table) and the name. Kept
/// in memory only (never logged), so it may contain credentials.
pub fn key(store: &str, namespace: &str, name: &str) -> String {
    format!("{store}\u{0}{namespace}\u{0}{name}")
}

impl LocalQueue {
    /// The queue for `key`, created on first use and shared while anyone holds it.
    fn join(key: String) -> Arc<LocalQueue> {
        let mut map = QUEUES.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(q) = map.get(&key).and_then(Weak::upgrade) {
            return q;
        }
        let q = Arc::new(LocalQueue {
            key: key.clone(),
            head: Arc::new(tokio::sync::Mutex::new(())),
            released: Notify::new(),
        });
        map.insert(key, Arc::downgrade(&q));
        q
    }

    /// Waits (FIFO) to become the waiter that talks to the database. Cancel-safe: dropping
    /// the future leaves the queue.
    async fn become_head(&self) -> OwnedMutexGuard<()> {
        Arc::clone(&self.head).lock_owned().await
    }

    /// Joins `key`'s queue and waits for this waiter's turn at its head, or until `deadline`
    /// (the caller then makes its one last attempt at the store without the turn). The turn
    /// lasts as long as the returned [`Turn`]; dropping it (or the future) leaves the queue.
    pub async fn wait_turn(key: String, deadline: &Deadline) -> Turn {
        let queue = Self::join(key);
        if let Ok(head) = Arc::clone(&queue.head).try_lock_owned() {
            return Turn {
                queue,
                _head: Some(head),
            };
        }
        // Another task of this process holds the lock or is ahead in its queue.
        crate::backend::handoff::waited();
        let head = match deadline.instant() {
            None => Some(queue.become_head().await),
            Some(at) => tokio::time::timeout_at(at, queue.become_head()).await.ok(),
        };
        Turn { queue, _head: head }
    }

    /// A future that completes on the next local release (see [`Turn::released`]).
    fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.released.notified()
    }

    /// Wakes this process's head waiter for `key`, if anyone waits.
    pub fn wake(key: &str) {
        let q = QUEUES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .and_then(Weak::upgrade);
        if let Some(q) = q {
            q.released.notify_waiters();
        }
    }
}

/// A waiter's place in a [`LocalQueue`]: the head's turn, or (past the deadline) no turn.
pub struct Turn {
    queue: Arc<LocalQueue>,
    _head: Option<OwnedMutexGuard<()>>,
}

impl Turn {
    /// A future that completes on the next release of this lock by this process; call
    /// `enable()` on it (pinned) before the attempt it should follow, so a release in between
    /// is not missed.
    pub fn released(&self) -> tokio::sync::futures::Notified<'_> {
        self.queue.released()
    }
}

impl Drop for LocalQueue {
    fn drop(&mut self) {
        let mut map = QUEUES.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.key).is_some_and(|w| w.strong_count() == 0) {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn waiters_take_turns_in_arrival_order_and_the_queue_is_forgotten_after() {
        let k = key("test-db", "t", "fifo");
        let q = LocalQueue::join(k.clone());
        let first = q.become_head().await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..5 {
            let (q, order) = (LocalQueue::join(k.clone()), Arc::clone(&order));
            tasks.push(tokio::spawn(async move {
                let _head = q.become_head().await;
                order.lock().unwrap().push(i);
            }));
            // Each task is queued before the next one starts.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        drop(q);
        assert!(
            QUEUES.lock().unwrap().get(&k).is_none(),
            "queue not removed"
        );
    }

    #[tokio::test]
    async fn a_release_wakes_the_armed_head_and_no_one_else_is_needed() {
        let k = key("test-db", "t", "wake");
        let q = LocalQueue::join(k.clone());
        let woken = {
            let q = Arc::clone(&q);
            tokio::spawn(async move {
                let n = q.released();
                tokio::pin!(n);
                n.as_mut().enable();
                tokio::time::timeout(Duration::from_secs(5), n)
                    .await
                    .is_ok()
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        LocalQueue::wake(&k);
        assert!(
            woken.await.unwrap(),
            "the head was not woken by the release"
        );
        // Waking a lock nobody waits for is a no-op.
        LocalQueue::wake(&key("test-db", "t", "nobody"));
    }
}

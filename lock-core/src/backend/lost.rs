//! [`LostSignal`]: a one-way "this lock is gone" flag a guard and its backend share.

use std::sync::Arc;

use tokio::sync::watch;

/// Set once, never cleared: the lock behind a guard is known to be lost.
///
/// The guard's renewal task sets it when a renewal fails or the lease runs out; a backend may
/// keep a clone to set it from its own watchers (ZooKeeper session expiry or node deletion, a
/// `for_update` connection that died). Only the first reason is kept.
#[derive(Clone, Debug)]
pub struct LostSignal {
    tx: Arc<watch::Sender<Option<String>>>,
}

impl Default for LostSignal {
    fn default() -> Self {
        Self::new()
    }
}

impl LostSignal {
    /// A signal that is not set.
    pub fn new() -> Self {
        LostSignal {
            tx: Arc::new(watch::channel(None).0),
        }
    }

    /// Sets the signal with `reason`; returns `true` if this call set it.
    pub fn mark_lost(&self, reason: impl Into<String>) -> bool {
        let reason = reason.into();
        self.tx.send_if_modified(|cur| {
            if cur.is_none() {
                *cur = Some(reason);
                true
            } else {
                false
            }
        })
    }

    /// Whether the signal is set.
    pub fn is_lost(&self) -> bool {
        self.tx.borrow().is_some()
    }

    /// The reason, once set.
    pub fn reason(&self) -> Option<String> {
        self.tx.borrow().clone()
    }

    /// Resolves with the reason once the signal is set (at once if it already is).
    pub async fn wait(&self) -> String {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`, so `wait_for` cannot fail here.
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(v) => v.clone().unwrap_or_default(),
            Err(_) => "lost signal dropped".to_owned(),
        };
        reason
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_reason_wins_and_waiters_wake() {
        let s = LostSignal::new();
        let w = tokio::spawn({
            let s = s.clone();
            async move { s.wait().await }
        });
        assert!(!s.is_lost());
        assert!(s.mark_lost("one"));
        assert!(!s.mark_lost("two"));
        assert_eq!(w.await.unwrap(), "one");
        assert_eq!(s.reason().as_deref(), Some("one"));
    }
}

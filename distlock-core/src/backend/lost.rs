//! [`LostSignal`]: a one-way "this lock is gone" flag a guard and its backend share.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// Set once, never cleared: the lock behind a guard is known to be lost.
///
/// The guard's renewal sets it when a renewal fails or the lease runs out; a backend may
/// keep a clone to set it from its own watchers (ZooKeeper session expiry or node deletion, a
/// `for_update` connection that died). Only the first reason is kept. Every waiter wakes once
/// it is set, however many wait and whenever they started.
#[derive(Clone, Debug, Default)]
pub struct LostSignal {
    inner: Arc<Inner>,
}

/// One allocation per guard (about 100 bytes: a `watch` channel cost 360, most of it the
/// eight notifiers it keeps against contention a lost flag never sees).
#[derive(Debug, Default)]
struct Inner {
    set: AtomicBool,
    reason: Mutex<Option<String>>,
    notify: Notify,
    /// Made on first use only ([`LostSignal::cancellation_token`]): most guards never need one.
    token: OnceLock<CancellationToken>,
}

impl LostSignal {
    /// A signal that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the signal with `reason`; returns `true` if this call set it.
    pub fn mark_lost(&self, reason: impl Into<String>) -> bool {
        let reason = reason.into();
        {
            let mut cur = self.inner.reason.lock().unwrap_or_else(|p| p.into_inner());
            if cur.is_some() {
                return false;
            }
            *cur = Some(reason);
            // Cancelled before the flag is set: whoever sees the loss sees the token cancelled.
            if let Some(t) = self.inner.token.get() {
                t.cancel();
            }
            self.inner.set.store(true, Ordering::SeqCst);
        }
        self.inner.notify.notify_waiters();
        true
    }

    /// A token cancelled once the signal is set (at once if it already is): the lost signal in
    /// the shape `tokio_util` users (and .NET's `HandleLostToken`) know.
    pub fn cancellation_token(&self) -> CancellationToken {
        // Under `mark_lost`'s lock, so a loss is either before (seen here) or after (it cancels).
        let cur = self.inner.reason.lock().unwrap_or_else(|p| p.into_inner());
        let t = self.inner.token.get_or_init(CancellationToken::new).clone();
        if cur.is_some() {
            t.cancel();
        }
        t
    }

    /// Whether the signal is set.
    pub fn is_lost(&self) -> bool {
        self.inner.set.load(Ordering::SeqCst)
    }

    /// The reason, once set.
    pub fn reason(&self) -> Option<String> {
        if !self.is_lost() {
            return None;
        }
        self.inner
            .reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Resolves with the reason once the signal is set (at once if it already is).
    pub async fn wait(&self) -> String {
        loop {
            let notified = self.inner.notify.notified();
            tokio::pin!(notified);
            // Registered before the look, so a `mark_lost` after it wakes this waiter.
            notified.as_mut().enable();
            if let Some(reason) = self.reason() {
                return reason;
            }
            notified.await;
        }
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
        // A waiter that starts after the signal is set resolves at once.
        assert_eq!(s.wait().await, "one");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_waiter_misses_a_signal_set_while_it_starts() {
        for round in 0..200 {
            let s = LostSignal::new();
            let waiters: Vec<_> = (0..4)
                .map(|_| {
                    let s = s.clone();
                    tokio::spawn(async move { s.wait().await })
                })
                .collect();
            if round % 2 == 0 {
                tokio::task::yield_now().await;
            }
            s.mark_lost(format!("r{round}"));
            for w in waiters {
                let got = tokio::time::timeout(std::time::Duration::from_secs(5), w)
                    .await
                    .expect("a waiter missed the signal")
                    .unwrap();
                assert_eq!(got, format!("r{round}"));
            }
        }
    }

    /// Whoever sees the loss (through `wait` or `is_lost`) sees the token cancelled too: the
    /// CI run of 2026-11-28 caught `lost()` resolving before `mark_lost` had cancelled it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_token_is_cancelled_before_anyone_sees_the_loss() {
        for round in 0..2000 {
            let s = LostSignal::new();
            let token = s.cancellation_token();
            let seen = tokio::spawn({
                let s = s.clone();
                async move {
                    s.wait().await;
                    token.is_cancelled()
                }
            });
            let peeker = std::thread::spawn({
                let s = s.clone();
                move || {
                    let t = s.cancellation_token();
                    (0..100_000).find(|_| s.is_lost()).map(|_| t.is_cancelled())
                }
            });
            s.mark_lost("gone");
            assert!(
                seen.await.unwrap(),
                "round {round}: woken before the cancel"
            );
            let peeked = peeker.join().unwrap();
            assert_ne!(
                peeked,
                Some(false),
                "round {round}: is_lost before the cancel"
            );
        }
    }

    #[test]
    fn the_token_is_cancelled_by_the_loss_whenever_it_was_taken() {
        let s = LostSignal::new();
        let before = s.cancellation_token();
        assert!(!before.is_cancelled());
        assert!(s.mark_lost("gone"));
        assert!(before.is_cancelled(), "a token taken before the loss");
        assert!(
            s.cancellation_token().is_cancelled(),
            "a token taken after it"
        );
        // A signal never set never cancels.
        assert!(!LostSignal::new().cancellation_token().is_cancelled());
    }
}

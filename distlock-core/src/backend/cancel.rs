//! [`CleanupOnDrop`]: makes an `acquire` future cancel safe.
//!
//! A backend arms one before the store call that may leave state behind (an inserted row, a
//! created node, a set key) and disarms it once the guard owns that state. If the future is
//! dropped in between, the cleanup runs in the background on the current runtime.

use futures::future::BoxFuture;

use super::Deadline;
use crate::LockError;

type Cleanup = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// Runs a cleanup future in the background when dropped, unless disarmed.
#[must_use]
pub struct CleanupOnDrop {
    cleanup: Option<Cleanup>,
}

impl CleanupOnDrop {
    /// Arms `cleanup`.
    pub fn new(cleanup: impl FnOnce() -> BoxFuture<'static, ()> + Send + 'static) -> Self {
        CleanupOnDrop {
            cleanup: Some(Box::new(cleanup)),
        }
    }

    /// Disarms: the cleanup will not run.
    pub fn disarm(mut self) {
        self.cleanup = None;
    }

    /// Runs the cleanup now and waits for it. It runs as a task of its own, so it completes
    /// even if this future is dropped meanwhile (an acquisition abandoned at its bound, a caller
    /// that gave up): dropping the wait detaches the cleanup, never cuts it short.
    pub async fn run_now(mut self) {
        self.run_taken().await;
    }

    async fn run_taken(&mut self) {
        if let Some(c) = self.cleanup.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    let _ = h.spawn(c()).await;
                }
                Err(_) => c().await,
            }
        }
    }

    /// An acquisition loop after a grant, the guard `made` from it: a guard is handed out
    /// (the cleanup disarmed: the guard owns the state now); a grant whose reply came too late
    /// for a guard goes round again (`None`) while the wait allows, else the cleanup runs and
    /// the error is returned.
    pub async fn after_grant<G>(
        &mut self,
        made: Result<G, LockError>,
        try_only: bool,
        deadline: &Deadline,
    ) -> Option<Result<Option<G>, LockError>> {
        match made {
            Ok(g) => {
                self.cleanup = None;
                Some(Ok(Some(g)))
            }
            Err(_) if !try_only && !deadline.expired() => None,
            Err(e) => {
                self.run_taken().await;
                Some(Err(e))
            }
        }
    }

    /// An acquisition loop after a refusal: a try ends (it queued nothing: disarmed), a wait
    /// that is spent ends once the cleanup ran, otherwise the loop waits on (`None`).
    pub async fn after_refusal<G>(
        &mut self,
        try_only: bool,
        deadline: &Deadline,
    ) -> Option<Result<Option<G>, LockError>> {
        if try_only {
            self.cleanup = None;
            return Some(Ok(None));
        }
        if deadline.expired() {
            self.run_taken().await;
            return Some(Ok(None));
        }
        None
    }
}

impl Drop for CleanupOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.cleanup.take() {
            if let Ok(h) = tokio::runtime::Handle::try_current() {
                h.spawn(c());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn runs_unless_disarmed() {
        let n = Arc::new(AtomicUsize::new(0));
        let make = |n: Arc<AtomicUsize>| {
            CleanupOnDrop::new(move || {
                Box::pin(async move {
                    n.fetch_add(1, Ordering::SeqCst);
                })
            })
        };
        drop(make(n.clone()));
        make(n.clone()).disarm();
        make(n.clone()).run_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(n.load(Ordering::SeqCst), 2);
    }

    /// After a grant: a guard disarms; a guard too late goes round again (still armed) while
    /// the wait allows, and runs the cleanup once it does not. After a refusal: a try ends
    /// disarmed, a spent wait ends cleaned up, otherwise the loop waits on (still armed).
    #[tokio::test]
    async fn a_loop_ends_armed_or_not_as_its_outcome_says() {
        let n = Arc::new(AtomicUsize::new(0));
        let make = || {
            let n = n.clone();
            CleanupOnDrop::new(move || {
                Box::pin(async move {
                    n.fetch_add(1, Ordering::SeqCst);
                })
            })
        };
        let (open, spent) = (Deadline::after(None), Deadline::after(Some(Duration::ZERO)));
        let late = || Err::<(), _>(LockError::invalid_config("late"));
        let ran = || n.load(Ordering::SeqCst);

        let mut armed = make();
        assert!(matches!(
            armed.after_grant(Ok(7), false, &open).await,
            Some(Ok(Some(7)))
        ));
        drop(armed);
        assert!(
            armed_cleared(&n, 0).await,
            "a handed-out guard's state was cleaned up"
        );

        let mut armed = make();
        assert!(armed.after_grant(late(), false, &open).await.is_none());
        assert!(armed
            .after_grant(late(), true, &open)
            .await
            .unwrap()
            .is_err());
        assert_eq!(ran(), 1, "a late grant on a try was not cleaned up");
        drop(armed);

        let mut armed = make();
        assert!(armed.after_refusal::<()>(false, &open).await.is_none());
        assert!(matches!(
            armed.after_refusal::<()>(true, &open).await,
            Some(Ok(None))
        ));
        drop(armed);
        assert!(
            armed_cleared(&n, 1).await,
            "a try's refusal ran the cleanup"
        );

        let mut armed = make();
        assert!(matches!(
            armed.after_refusal::<()>(false, &spent).await,
            Some(Ok(None))
        ));
        assert_eq!(ran(), 2, "a spent wait did not clean up");
        drop(armed);
        assert!(armed_cleared(&n, 2).await, "the cleanup ran twice");
    }

    /// Whether the count is still `want` once a background cleanup would have run.
    async fn armed_cleared(n: &AtomicUsize, want: usize) -> bool {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        n.load(Ordering::SeqCst) == want
    }

    /// A `run_now` dropped before its cleanup finished (the acquisition it belongs to was
    /// abandoned) leaves the cleanup running to its end.
    #[tokio::test]
    async fn an_interrupted_run_now_still_cleans_up() {
        let n = Arc::new(AtomicUsize::new(0));
        let slow = {
            let n = n.clone();
            CleanupOnDrop::new(move || {
                Box::pin(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    n.fetch_add(1, Ordering::SeqCst);
                })
            })
        };
        let cut = tokio::time::timeout(std::time::Duration::from_millis(5), slow.run_now()).await;
        assert!(cut.is_err(), "the cleanup should still have been running");
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        assert_eq!(n.load(Ordering::SeqCst), 1, "the cleanup was cut short");
    }
}

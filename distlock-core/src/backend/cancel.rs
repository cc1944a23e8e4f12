//! [`CleanupOnDrop`]: makes an `acquire` future cancel safe.
//!
//! A backend arms one before the store call that may leave state behind (an inserted row, a
//! created node, a set key) and disarms it once the guard owns that state. If the future is
//! dropped in between, the cleanup runs in the background on the current runtime.

use futures::future::BoxFuture;

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
        if let Some(c) = self.cleanup.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(h) => {
                    let _ = h.spawn(c()).await;
                }
                Err(_) => c().await,
            }
        }
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

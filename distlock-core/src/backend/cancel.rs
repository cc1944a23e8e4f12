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

    /// Runs the cleanup now and waits for it.
    pub async fn run_now(mut self) {
        if let Some(c) = self.cleanup.take() {
            c().await;
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
}

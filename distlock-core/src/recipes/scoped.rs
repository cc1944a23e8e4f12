//! [`run_locked`]: work that stops the instant its lock is lost.

use std::future::Future;

use crate::{AcquireOptions, DistributedLock, LockContext, LockError};

/// See [`crate::LockExt::run_locked`].
///
/// # Errors
/// As [`crate::LockExt::run_locked`].
pub async fn run_locked<L, F, Fut, T>(
    lock: &L,
    name: &str,
    opts: &AcquireOptions,
    work: F,
) -> Result<T, LockError>
where
    L: DistributedLock + ?Sized,
    F: FnOnce(LockContext) -> Fut,
    Fut: Future<Output = T>,
{
    let guard = lock.acquire(name, opts).await?;
    let lost = guard.lost();
    let work = work(guard.context());
    let out = tokio::select! {
        // Checked first: when the loss and the work's end arrive together, the loss wins.
        biased;
        e = lost => return Err(e),
        out = work => out,
    };
    match guard.release().await {
        Ok(()) => Ok(out),
        Err(e @ (LockError::NotHeld { .. } | LockError::Lost { .. })) => Err(e),
        Err(e) => {
            tracing::warn!(name, error = %e, "release after run_locked failed; the lease or session frees the lock");
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use crate::memory::MemoryStore;
    use crate::{AcquireOptions, DistributedLock, LockError, LockExt};

    #[tokio::test]
    async fn work_that_would_write_after_the_loss_never_writes() {
        let store = MemoryStore::new();
        let lock = store.client();
        let wrote = Arc::new(AtomicBool::new(false));
        let w = Arc::clone(&wrote);
        let opts = AcquireOptions::new()
            .ttl(Duration::from_millis(100))
            .renew(false);
        let res = lock
            .run_locked("w", &opts, |_ctx| async move {
                tokio::time::sleep(Duration::from_millis(400)).await;
                w.store(true, Ordering::SeqCst);
            })
            .await;
        assert!(matches!(res, Err(LockError::Lost { .. })), "{res:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !wrote.load(Ordering::SeqCst),
            "the work wrote after the loss"
        );
    }

    #[tokio::test]
    async fn output_is_returned_and_the_lock_released() {
        let store = MemoryStore::new();
        let (a, b) = (store.client(), store.client());
        let token = a
            .run_locked("r", &AcquireOptions::new(), |ctx| async move {
                assert!(!ctx.is_lost());
                ctx.fencing_token()
            })
            .await
            .unwrap();
        let g = b.try_acquire("r", &AcquireOptions::new()).await.unwrap();
        assert!(g.expect("run_locked left the lock held").fencing_token() > token);
    }
}

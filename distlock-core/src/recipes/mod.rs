//! What users build on the mutex, written once on the [`DistributedLock`] contract so it runs
//! on every store: work that stops when its lock is lost ([`LockExt::run_locked`]) and several
//! locks taken all-or-nothing without deadlock ([`LockExt::acquire_all`]), and leader election
//! ([`election`]: [`elect`], [`Leadership`], [`crate::DistributedLock::leader`], and
//! [`observe()`] for a stream of leader changes).

pub mod election;
pub mod multi;
pub mod observe;
pub mod scoped;

use std::future::Future;

use async_trait::async_trait;

use crate::{AcquireOptions, DistributedLock, LockContext, LockError};

pub use election::{elect, elect_with, Leadership};
pub use multi::MultiGuard;
pub use observe::{observe, observe_every, LeaderChange, LeaderChanges};

/// The recipes, for every [`DistributedLock`] (including `Arc<dyn DistributedLock>`): bring
/// the trait into scope (`use distlock::LockExt;`).
#[async_trait]
pub trait LockExt: DistributedLock {
    /// Acquires `name`, runs `work` with the lock's [`LockContext`] (fencing token, lost
    /// signal), releases, and returns `work`'s output.
    ///
    /// **The work's future is dropped the instant the lock is known lost**, and the call
    /// returns [`LockError::Lost`]: no code of `work` runs after that point. A release that
    /// answers [`LockError::NotHeld`] (the lock expired and was taken over while the work ran,
    /// before the guard could notice) is returned as that error, even though the work
    /// finished: its writes were not all protected. Other release failures only log (the lease
    /// or session frees the lock). Dropping the returned future drops the work and releases
    /// the lock in the background.
    ///
    /// Like any holder, the work must still fence its writes with
    /// [`LockContext::fencing_token`]: a process paused past its lease learns of the loss only
    /// when it runs again.
    ///
    /// ```
    /// # async fn demo() -> Result<(), distlock_core::LockError> {
    /// use distlock_core::{AcquireOptions, LockExt};
    ///
    /// let lock = distlock_core::memory::MemoryStore::new().client();
    /// let written = lock
    ///     .run_locked("ledger", &AcquireOptions::new(), |ctx| async move {
    ///         // Every write carries the token; the store rejects lower ones.
    ///         format!("UPDATE ledger SET … WHERE fence < {}", ctx.fencing_token())
    ///     })
    ///     .await?;
    /// assert!(written.contains("fence <"));
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    ///
    /// # Errors
    /// The acquisition's errors; [`LockError::Lost`] when the lock was lost during the work;
    /// [`LockError::NotHeld`] as above.
    async fn run_locked<F, Fut, T>(
        &self,
        name: &str,
        opts: &AcquireOptions,
        work: F,
    ) -> Result<T, LockError>
    where
        F: FnOnce(LockContext) -> Fut + Send,
        Fut: Future<Output = T> + Send,
        T: Send,
    {
        scoped::run_locked(self, name, opts, work).await
    }

    /// Acquires every lock in `names` or none: see [`multi::acquire_all`].
    ///
    /// # Errors
    /// As [`multi::acquire_all`].
    async fn acquire_all(
        &self,
        names: &[&str],
        opts: &AcquireOptions,
    ) -> Result<MultiGuard, LockError> {
        multi::acquire_all(self, names, opts).await
    }
}

impl<L: DistributedLock + ?Sized> LockExt for L {}

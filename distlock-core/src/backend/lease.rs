//! [`Lease`]: the store operations a backend supplies for one held lock.
//!
//! Everything else a guard does (background renewal, the lost signal, release on drop,
//! `extend`) is written once in [`crate::guard`] on top of these two calls.

use std::time::Duration;

use async_trait::async_trait;

use crate::LockError;

/// The store side of one held lock.
///
/// Implementations are called from the guard's renewal task and from `release`/`extend`, so
/// they must be cheap to share (`Arc`) and safe to call concurrently.
#[async_trait]
pub trait Lease: Send + Sync + 'static {
    /// Renews the lease to `ttl` from now, checking that this holder still owns the lock.
    ///
    /// Returns `Some(validity)` for time-bounded leases: the lock is valid for at least
    /// `validity` measured from the moment this call started (Redlock subtracts its drift
    /// here). Returns `None` for session- or connection-bound locks (ZooKeeper, `for_update`),
    /// where the call is a liveness check.
    ///
    /// # Errors
    /// [`LockError::NotHeld`] or [`LockError::Lost`] when the lock is no longer ours (the guard
    /// becomes lost at once); any other error is treated as transient until the lease runs out.
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError>;

    /// Releases the lock if this holder still owns it.
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when someone else owns it now (nothing is changed), or a store
    /// error.
    async fn release(&self) -> Result<(), LockError>;
}

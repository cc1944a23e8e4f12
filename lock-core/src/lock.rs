//! [`DistributedLock`]: the one trait every backend implements.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::{AcquireOptions, Capabilities, LockError, LockGuard};

/// A distributed mutual-exclusion lock service: one client of one store.
///
/// Object safe: hold it as `Arc<dyn DistributedLock>` and pick the backend by URL.
///
/// # Guarantees
/// * At most one guard per name is valid at a time across every client of the same
///   deployment, within the assumptions the backend documents (see [`Capabilities`]).
/// * Every successful acquisition gets a fencing token strictly greater than every earlier
///   holder's for that name.
///
/// # Cancel safety
/// Dropping an `acquire` future leaves nothing behind in the store (no key, row or node that
/// would block others); what a backend had already written is removed in the background.
///
/// # Fairness
/// Backend-specific; see [`Capabilities::fifo`].
#[async_trait]
pub trait DistributedLock: Send + Sync + Debug + 'static {
    /// Acquires `name`, waiting up to `opts.wait` for other holders.
    ///
    /// # Errors
    /// [`LockError::Timeout`] after `opts.wait`; [`LockError::InvalidName`],
    /// [`LockError::InvalidConfig`] for bad input; [`LockError::Unavailable`] when the store
    /// cannot be reached.
    async fn acquire(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError>;

    /// Acquires `name` only if nobody holds it; never waits on another holder.
    ///
    /// # Errors
    /// As [`DistributedLock::acquire`], without `Timeout`.
    async fn try_acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError>;

    /// What this backend guarantees and how it behaves.
    fn capabilities(&self) -> Capabilities;

    /// The backend label used in messages and reports, e.g. `postgres-row`.
    fn backend_name(&self) -> String;
}

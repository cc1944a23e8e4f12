//! [`DistributedLock`]: the one trait every backend implements.

use std::fmt::Debug;
use std::time::Duration;

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

    /// Reports who holds `name` right now, as far as the store can tell (for operators and the
    /// `distlock inspect` command; a snapshot, not a guarantee).
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] when the backend cannot inspect; store errors otherwise.
    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        Err(LockError::invalid_config(format!(
            "{} cannot inspect lock `{name}`",
            self.backend_name()
        )))
    }
}

/// A snapshot of one lock's state, from [`DistributedLock::inspect`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockInfo {
    /// Whether someone holds it.
    pub held: bool,
    /// The holder's fencing token, when the store records it.
    pub fencing_token: Option<u64>,
    /// The holder's owner id (token, znode name, session), when known.
    pub owner: Option<String>,
    /// Lease time left, for lease-based stores.
    pub expires_in: Option<Duration>,
    /// Contenders waiting, where the store can tell (ZooKeeper).
    pub waiters: Option<usize>,
}

impl LockInfo {
    /// A free lock.
    pub fn free() -> Self {
        Self::default()
    }

    /// A held lock.
    pub fn held(
        fencing_token: Option<u64>,
        owner: Option<String>,
        expires_in: Option<Duration>,
        waiters: Option<usize>,
    ) -> Self {
        LockInfo {
            held: true,
            fencing_token,
            owner,
            expires_in,
            waiters,
        }
    }
}

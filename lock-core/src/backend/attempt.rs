//! [`LockBackend`]: the one operation a store supplies for the mutex, and [`Attempt`], how it
//! treats another holder.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::recipes::election::{leader_by_inspect, Leader};
use crate::{AcquireOptions, Capabilities, LockError, LockGuard, LockInfo};

/// How one attempt treats a lock someone else holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempt {
    /// Wait for other holders, at most `opts.wait` (`None`: forever), in the backend's
    /// fairness order ([`Capabilities::fifo`]).
    Wait,
    /// Take the lock only if nobody holds it; never wait on another holder.
    Try,
}

/// What a store implements to be a distributed mutex. Every `LockBackend` is a
/// [`DistributedLock`](crate::DistributedLock) (one blanket implementation adds validation,
/// the tracing span and the [`LockError::Timeout`] mapping), so a backend writes none of that.
#[async_trait]
pub trait LockBackend: Send + Sync + Debug + 'static {
    /// One acquisition: `Ok(Some(guard))` when this caller now holds `name`; `Ok(None)` when
    /// another holder kept it (`Try`) or `opts.wait` ran out (`Wait`).
    ///
    /// Called only with a name that passed [`crate::backend::name::validate`] and options that
    /// passed [`AcquireOptions::validate`]; a backend checks only what its store adds (e.g.
    /// ZooKeeper path rules). Dropping the future must leave nothing behind in the store.
    ///
    /// # Errors
    /// [`LockError::InvalidName`] for names the store cannot map, [`LockError::Unavailable`]
    /// when the store cannot be reached, other store errors as [`LockError::Backend`].
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError>;

    /// What this backend guarantees and how it behaves.
    fn capabilities(&self) -> Capabilities;

    /// The backend label used in messages and reports, e.g. `postgres-row`.
    fn backend_name(&self) -> &str;

    /// A snapshot of who holds `name` (called with a validated name).
    ///
    /// # Errors
    /// [`LockError::Unsupported`] by default; store errors otherwise.
    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let _ = name;
        Err(LockError::unsupported(self.backend_name(), "inspect"))
    }

    /// One campaign for leadership of `group` (`opts.holder` is the participant's identity):
    /// like [`LockBackend::attempt`] with [`Attempt::Wait`]. Provided: the lock named `group`.
    /// A store with a native election recipe overrides this and [`LockBackend::leader`]
    /// together.
    ///
    /// # Errors
    /// As [`LockBackend::attempt`].
    async fn campaign(
        &self,
        group: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        self.attempt(group, opts, Attempt::Wait).await
    }

    /// Who leads `group` (called with a validated name). Provided: from
    /// [`LockBackend::inspect`]'s holder identity
    /// ([`crate::recipes::election::leader_by_inspect`]).
    ///
    /// # Errors
    /// As [`crate::DistributedLock::leader`].
    async fn leader(&self, group: &str) -> Result<Option<Leader>, LockError> {
        leader_by_inspect(
            self.backend_name(),
            self.capabilities().holder_identity,
            group,
            || self.inspect(group),
        )
        .await
    }
}

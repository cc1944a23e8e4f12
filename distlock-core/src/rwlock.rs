//! [`DistributedRwLock`]: many readers or one writer of a name.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::backend::{attempt, Attempt, RwLockBackend};
pub use crate::info::{Access, RwLockInfo};
use crate::{AcquireOptions, Capabilities, LockError, LockGuard};

/// A read-write lock over a store: many readers or one writer of a name at once ("reports
/// read while the nightly load writes").
///
/// Guards are [`LockGuard`]s like a mutex's (renewal, [`LockGuard::lost`], `extend`, release on
/// drop). Tokens come from the name's one counter, readers' and writers' alike, so a writer's
/// token is greater than every earlier grant's.
///
/// # Writers are not starved
/// Once a writer waits, readers that arrive after it queue behind it, even while other readers
/// still hold the lock: a steady stream of readers cannot keep a writer out. Readers that
/// arrived before the writer are not held back by it. `try_read` fails while a writer waits.
///
/// ```
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use distlock_core::{AcquireOptions, DistributedRwLock};
///
/// let reports = distlock_core::permits::PermitStore::new().rwlock();
/// let opts = AcquireOptions::new();
/// let r1 = reports.read("ledger", &opts).await?;
/// let r2 = reports.read("ledger", &opts).await?;
/// // Readers share; a writer waits for both.
/// assert!(reports.try_write("ledger", &opts).await?.is_none());
/// drop((r1, r2));
/// let w = reports.write("ledger", &opts).await?;
/// assert!(reports.try_read("ledger", &opts).await?.is_none());
/// w.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[async_trait]
pub trait DistributedRwLock: Send + Sync + Debug + 'static {
    /// Takes `name` for reading, waiting at most `opts.wait` (`None`: forever).
    ///
    /// # Errors
    /// [`LockError::Timeout`] when the wait runs out; otherwise as a mutex's acquire.
    async fn read(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError> {
        self.lock(name, Access::Read, opts).await
    }

    /// Takes `name` for writing, waiting at most `opts.wait` (`None`: forever).
    ///
    /// # Errors
    /// As [`DistributedRwLock::read`].
    async fn write(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError> {
        self.lock(name, Access::Write, opts).await
    }

    /// Takes `name` for reading only if no writer holds or waits: `Ok(None)` otherwise.
    ///
    /// # Errors
    /// As [`DistributedRwLock::read`], without the timeout.
    async fn try_read(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        self.try_lock(name, Access::Read, opts).await
    }

    /// Takes `name` for writing only if nobody holds or waits: `Ok(None)` otherwise.
    ///
    /// # Errors
    /// As [`DistributedRwLock::read`], without the timeout.
    async fn try_write(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        self.try_lock(name, Access::Write, opts).await
    }

    /// Takes `name` with `access`, waiting at most `opts.wait`.
    ///
    /// # Errors
    /// As [`DistributedRwLock::read`].
    async fn lock(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError>;

    /// Takes `name` with `access` only if that needs no wait.
    ///
    /// # Errors
    /// As [`DistributedRwLock::try_read`].
    async fn try_lock(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError>;

    /// What this backend guarantees and how it behaves.
    fn capabilities(&self) -> Capabilities;

    /// The backend label used in messages and reports.
    fn backend_name(&self) -> &str;

    /// Who holds and waits for `name` now (a snapshot).
    ///
    /// # Errors
    /// [`LockError::Unsupported`] where the store cannot tell; store errors otherwise.
    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError>;
}

#[async_trait]
impl<B: RwLockBackend> DistributedRwLock for B {
    async fn lock(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        attempt::checked(name, opts)?;
        let got = attempt::live(
            self.backend_name(),
            name,
            opts,
            Attempt::Wait,
            |o| async move { self.attempt(name, access, &o, Attempt::Wait).await },
        )
        .await?;
        attempt::or_timeout(got, name, self.backend_name(), opts)
    }

    async fn try_lock(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        attempt::checked(name, opts)?;
        attempt::live(
            self.backend_name(),
            name,
            opts,
            Attempt::Try,
            |o| async move { self.attempt(name, access, &o, Attempt::Try).await },
        )
        .await
    }

    fn capabilities(&self) -> Capabilities {
        RwLockBackend::capabilities(self)
    }

    fn backend_name(&self) -> &str {
        RwLockBackend::backend_name(self)
    }

    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        crate::backend::name::validate(name)?;
        RwLockBackend::inspect(self, name).await
    }
}

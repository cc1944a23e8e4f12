//! [`Configured`]: a lock, semaphore or read-write lock that carries the acquisition defaults of
//! its URL or [`LockConfig`].
//!
//! `connect("redis://h?ttl=5s&wait=2s")` returns a lock whose `acquire` and `try_acquire` use a
//! 5 s lease and a 2 s wait wherever the caller's [`AcquireOptions`] left those fields unset
//! (see [`AcquireOptions::or_defaults`]); a URL parameter is never silently dropped.
//!
//! [`LockConfig`]: crate::LockConfig

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::{
    Access, AcquireOptions, Broken, Capabilities, DistributedLock, DistributedRwLock,
    DistributedSemaphore, Leader, Listing, LockError, LockGuard, LockInfo, RwLockInfo,
    SemaphoreInfo,
};

/// A lock, semaphore or read-write lock (`L`) plus the defaults its configuration gave; every
/// other call goes to the backend.
pub struct Configured<L: ?Sized> {
    inner: Arc<L>,
    defaults: AcquireOptions,
}

/// Wraps `$inner` when `$defaults` differ from the built-in ones; gives `$inner` back otherwise.
macro_rules! wrap {
    ($inner:expr, $defaults:expr) => {{
        let (inner, defaults) = ($inner, $defaults);
        if defaults == AcquireOptions::new() {
            inner
        } else {
            Arc::new(Configured { inner, defaults })
        }
    }};
}

impl Configured<dyn DistributedLock> {
    /// Wraps `inner` when `defaults` differ from the built-in ones; returns `inner` otherwise.
    pub fn wrap(
        inner: Arc<dyn DistributedLock>,
        defaults: AcquireOptions,
    ) -> Arc<dyn DistributedLock> {
        wrap!(inner, defaults)
    }
}

impl Configured<dyn DistributedSemaphore> {
    /// As [`Configured::wrap`], for a semaphore.
    pub fn wrap_semaphore(
        inner: Arc<dyn DistributedSemaphore>,
        defaults: AcquireOptions,
    ) -> Arc<dyn DistributedSemaphore> {
        wrap!(inner, defaults)
    }
}

impl Configured<dyn DistributedRwLock> {
    /// As [`Configured::wrap`], for a read-write lock.
    pub fn wrap_rwlock(
        inner: Arc<dyn DistributedRwLock>,
        defaults: AcquireOptions,
    ) -> Arc<dyn DistributedRwLock> {
        wrap!(inner, defaults)
    }
}

impl<L: ?Sized + fmt::Debug> fmt::Debug for Configured<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Configured")
            .field("lock", &self.inner)
            .field("defaults", &self.defaults)
            .finish()
    }
}

#[async_trait]
impl DistributedLock for Configured<dyn DistributedLock> {
    async fn acquire(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError> {
        self.inner
            .acquire(name, &opts.or_defaults(&self.defaults))
            .await
    }

    async fn try_acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        self.inner
            .try_acquire(name, &opts.or_defaults(&self.defaults))
            .await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &str {
        self.inner.backend_name()
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        self.inner.inspect(name).await
    }

    async fn campaign(
        &self,
        group: &str,
        identity: &str,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        self.inner
            .campaign(group, identity, &opts.or_defaults(&self.defaults))
            .await
    }

    async fn leader(&self, group: &str) -> Result<Option<Leader>, LockError> {
        self.inner.leader(group).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        self.inner.list(prefix, limit).await
    }

    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        self.inner.break_lock(name).await
    }
}

#[async_trait]
impl DistributedSemaphore for Configured<dyn DistributedSemaphore> {
    async fn acquire(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        let opts = opts.or_defaults(&self.defaults);
        self.inner.acquire(name, max_count, &opts).await
    }

    async fn try_acquire(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let opts = opts.or_defaults(&self.defaults);
        self.inner.try_acquire(name, max_count, &opts).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &str {
        self.inner.backend_name()
    }

    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        self.inner.inspect(name).await
    }
}

#[async_trait]
impl DistributedRwLock for Configured<dyn DistributedRwLock> {
    async fn lock(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        let opts = opts.or_defaults(&self.defaults);
        self.inner.lock(name, access, &opts).await
    }

    async fn try_lock(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        let opts = opts.or_defaults(&self.defaults);
        self.inner.try_lock(name, access, &opts).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn backend_name(&self) -> &str {
        self.inner.backend_name()
    }

    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        self.inner.inspect(name).await
    }
}

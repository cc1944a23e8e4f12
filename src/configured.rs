//! [`Configured`]: a lock that carries the acquisition defaults of its URL or [`LockConfig`].
//!
//! `connect("redis://h?ttl=5s&wait=2s")` returns a lock whose `acquire` and `try_acquire` use a
//! 5 s lease and a 2 s wait wherever the caller's [`AcquireOptions`] left those fields unset
//! (see [`AcquireOptions::or_defaults`]); a URL parameter is never silently dropped.
//!
//! [`LockConfig`]: crate::LockConfig

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use lock_core::{
    AcquireOptions, Capabilities, DistributedLock, Leader, LockError, LockGuard, LockInfo,
};

/// A lock plus the defaults its configuration gave; every other call goes to the backend.
pub struct Configured {
    inner: Arc<dyn DistributedLock>,
    defaults: AcquireOptions,
}

impl Configured {
    /// Wraps `inner` when `defaults` differ from the built-in ones; returns `inner` otherwise.
    pub fn wrap(
        inner: Arc<dyn DistributedLock>,
        defaults: AcquireOptions,
    ) -> Arc<dyn DistributedLock> {
        if defaults == AcquireOptions::new() {
            inner
        } else {
            Arc::new(Configured { inner, defaults })
        }
    }
}

impl fmt::Debug for Configured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Configured")
            .field("lock", &self.inner)
            .field("defaults", &self.defaults)
            .finish()
    }
}

#[async_trait]
impl DistributedLock for Configured {
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
}

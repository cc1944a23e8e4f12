//! The semaphore and the read-write lock on etcd, built like the mutex (a key per acquisition
//! under its own lease, fencing by create revision, waiters watching one key each) and kept
//! in ranges of their own (see [`LockKeys::tagged`]): a semaphore, a read-write lock and a
//! mutex of one name never share a key.
//!
//! # Semaphore (`<name>%sem/`)
//! As Curator's `InterProcessSemaphoreV2` on ZooKeeper: a mutex in `lock/` admits one caller
//! at a time, in arrival order; the admitter puts its permit key in `leases/` and holds once
//! fewer than `max_count` permit keys were created before its own — otherwise it waits,
//! still holding the mutex, on a watch of the `leases/` range (one watcher per name: no herd).
//! Then it releases the mutex. A permit key's value is `max_count=N` (then the holder
//! identity, if any); the admitter reads the first one's and refuses another count with
//! [`LockError::InvalidConfig`] naming both. A crashed holder's permit goes with its lease.
//!
//! # Read-write lock (`<name>%rw/`)
//! etcd's own `recipes.RWMutex` rule: readers' keys in `read/`, writers' in `write/`; a writer
//! holds when no key of either kind was created before its own (it watches the newest such
//! key), a reader when no writer's key was (it watches the newest such writer's key). So a
//! waiting writer holds back every reader that comes after it: writers are not starved.
//!
//! # Tokens
//! A grant's token is its key's create revision. A permit's and a writer's token is greater
//! than every earlier grant's (keys are served in creation order, and a permit key is created
//! by the admitter after every earlier grant); two readers that share the lock may be granted
//! in the other order than their tokens.

use async_trait::async_trait;
use distlock_core::backend::{Attempt, Deadline, RwLockBackend, SemaphoreBackend};
use distlock_core::semaphore::{count_in_record, count_record};
use distlock_core::{
    Access, AcquireOptions, Capabilities, DistributedLock, LockError, LockGuard, RwLockInfo,
    SemaphoreInfo,
};
use etcd_client::{GetOptions, SortOrder};

use crate::backend::EtcdLock;
use crate::contender::by_create;
use crate::error::map;
use crate::key::LockKeys;
use crate::queue::Rule;

/// The semaphore's ranges: its admission mutex and its permits.
fn semaphore_keys(lock: &EtcdLock, name: &str) -> (LockKeys, LockKeys) {
    let prefix = &lock.config().prefix;
    (
        LockKeys::tagged(prefix, name, "sem", "lock/"),
        LockKeys::tagged(prefix, name, "sem", "leases/"),
    )
}

impl EtcdLock {
    /// The keys of `range` (`opts` with the prefix set), read for `name`.
    async fn read(
        &self,
        range: &str,
        opts: GetOptions,
        name: &str,
    ) -> Result<etcd_client::GetResponse, LockError> {
        let range = range.to_owned();
        self.members()
            .run(move |c| {
                let (range, opts) = (range.clone(), opts.clone());
                async move { c.kv_client().get(range, Some(opts)).await }
            })
            .await
            .map_err(|e| map(e, self.label(), Some(name)))
    }

    /// How many keys `range` holds.
    async fn count(&self, range: &str, name: &str) -> Result<usize, LockError> {
        let opts = GetOptions::new().with_prefix().with_count_only();
        let resp = self.read(range, opts, name).await?;
        Ok(usize::try_from(resp.count()).unwrap_or(usize::MAX))
    }

    /// The count the first permit of `leases` names (`None`: no permit out).
    async fn count_in_use(&self, leases: &LockKeys, name: &str) -> Result<Option<u32>, LockError> {
        let first = self
            .read(&leases.range, by_create(SortOrder::Ascend), name)
            .await?;
        Ok(first
            .kvs()
            .first()
            .and_then(|kv| count_in_record(kv.value())))
    }
}

#[async_trait]
impl SemaphoreBackend for EtcdLock {
    async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let deadline = Deadline::after(opts.wait);
        let (admission, leases) = semaphore_keys(self, name);
        let value = count_record(max_count, opts.holder.as_deref());
        let rule = Rule::After(admission.range.clone());
        let Some(admitter) = self
            .acquire_inner(name, (admission, &value, rule), opts, how)
            .await?
        else {
            return Ok(None);
        };
        let mut rest = opts.clone();
        rest.wait = deadline.remaining();
        let admitted = async {
            if let Some(in_use) = self.count_in_use(&leases, name).await? {
                if in_use != max_count {
                    return Err(distlock_core::semaphore::other_count(
                        name, in_use, max_count,
                    ));
                }
            }
            let rule = Rule::Fewer(leases.range.clone(), max_count as usize);
            self.acquire_inner(name, (leases, &value, rule), &rest, how)
                .await
        }
        .await;
        if let Err(e) = admitter.release().await {
            tracing::debug!(backend = %self.label(), name, error = %e, "the semaphore's admission lock was lost before its release");
        }
        admitted
    }

    fn capabilities(&self) -> Capabilities {
        DistributedLock::capabilities(self)
    }

    fn backend_name(&self) -> &str {
        self.label()
    }

    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let (admission, leases) = semaphore_keys(self, name);
        let mut info = SemaphoreInfo::default();
        info.holders = self.count(&leases.range, name).await?;
        info.waiters = self.count(&admission.range, name).await?;
        if info.holders > 0 {
            info.max_count = self.count_in_use(&leases, name).await?;
        }
        Ok(info)
    }
}

#[async_trait]
impl RwLockBackend for EtcdLock {
    async fn attempt(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let prefix = &self.config().prefix;
        let tagged = |sub: &str| LockKeys::tagged(prefix, name, "rw", sub);
        let (own, rule) = match access {
            Access::Read => (tagged("read/"), Rule::After(tagged("write/").range)),
            Access::Write => (tagged("write/"), Rule::After(tagged("").range)),
        };
        self.acquire_inner(name, (own, "", rule), opts, how).await
    }

    fn capabilities(&self) -> Capabilities {
        DistributedLock::capabilities(self)
    }

    fn backend_name(&self) -> &str {
        self.label()
    }

    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        let prefix = &self.config().prefix;
        let all = LockKeys::tagged(prefix, name, "rw", "");
        let writers = LockKeys::tagged(prefix, name, "rw", "write/");
        let opts = by_create(SortOrder::Ascend).with_limit(0).with_keys_only();
        let resp = self.read(&all.range, opts, name).await?;
        let is_writer: Vec<bool> = resp
            .kvs()
            .iter()
            .map(|kv| kv.key().starts_with(writers.range.as_bytes()))
            .collect();
        let mut info = RwLockInfo::default();
        match is_writer.first() {
            Some(true) => info.writer = true,
            _ => info.readers = is_writer.iter().take_while(|w| !**w).count(),
        }
        info.waiters = is_writer.len() - info.readers - usize::from(info.writer);
        Ok(info)
    }
}

/// Connects a semaphore from an `etcd://` URL.
///
/// # Errors
/// As [`crate::connect`].
pub async fn connect_semaphore(
    url: &str,
) -> Result<std::sync::Arc<dyn distlock_core::DistributedSemaphore>, LockError> {
    let cfg = crate::EtcdConfig::from_url(url)?;
    Ok(std::sync::Arc::new(EtcdLock::connect(cfg).await?))
}

/// Connects a read-write lock from an `etcd://` URL.
///
/// # Errors
/// As [`crate::connect`].
pub async fn connect_rwlock(
    url: &str,
) -> Result<std::sync::Arc<dyn distlock_core::DistributedRwLock>, LockError> {
    let cfg = crate::EtcdConfig::from_url(url)?;
    Ok(std::sync::Arc::new(EtcdLock::connect(cfg).await?))
}

//! [`RedisLock`] as a [`SemaphoreBackend`] and an [`RwLockBackend`] (single instance only).

use async_trait::async_trait;
use distlock_core::backend::{owner_token, Attempt, RwLockBackend, SemaphoreBackend};
use distlock_core::{
    AcquireOptions, Capabilities, LockError, LockGuard, RwLockInfo, SemaphoreInfo, Wakeup,
};

use super::acquire::{acquire, Request};
use super::calls::{self, PermitPeek};
use super::keys::{Family, PermitKeys};
use crate::error::map;
use crate::node::Node;
use crate::subscriber::Subscriber;
use crate::RedisLock;

/// What one acquisition asks for.
#[derive(Clone, Copy)]
enum Ask {
    /// One of this many semaphore permits.
    Permit(u32),
    /// A read-write lock side.
    Side(distlock_core::Access),
}

impl Ask {
    fn family(self) -> Family {
        match self {
            Ask::Permit(_) => Family::Semaphore,
            Ask::Side(_) => Family::RwLock,
        }
    }

    /// The member's kind letter (see the module doc).
    fn kind(self) -> char {
        match self {
            Ask::Permit(_) => 'P',
            Ask::Side(distlock_core::Access::Read) => 'R',
            Ask::Side(distlock_core::Access::Write) => 'W',
        }
    }
}

impl Family {
    fn what(self) -> &'static str {
        match self {
            Family::Semaphore => "semaphore",
            Family::RwLock => "read-write lock",
        }
    }
}

/// Leased, woken by messages, FIFO, queue lengths known.
fn capabilities() -> Capabilities {
    Capabilities::leased(Wakeup::Notify, true).with_queue_length(true)
}

impl RedisLock {
    /// The one server, or the typed refusal Redlock gives (see the module doc).
    fn permit_server(&self, what: &str) -> Result<(&Node, std::sync::Arc<Subscriber>), LockError> {
        self.single_server().ok_or_else(|| {
            LockError::invalid_config(format!(
                "{}: {what}s are offered on a single Redis instance (redis://) only; a Redlock \
                 quorum cannot bound the holders of a {what} safely",
                self.backend_label()
            ))
        })
    }

    async fn permit_attempt(
        &self,
        name: &str,
        ask: Ask,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let (node, subscriber) = self.permit_server(ask.family().what())?;
        let req = Request {
            name,
            label: self.backend_label(),
            keys: PermitKeys::new(&self.config().prefix, name, ask.family()),
            member: format!("{}{}", ask.kind(), owner_token()),
            max: match ask {
                Ask::Permit(max) => Some(max),
                Ask::Side(_) => None,
            },
            timeout: self.config().timeout,
        };
        acquire(node, &subscriber, req, opts, how == Attempt::Try).await
    }

    async fn permit_peek(&self, name: &str, family: Family) -> Result<PermitPeek, LockError> {
        let (node, _) = self.permit_server(family.what())?;
        let keys = PermitKeys::new(&self.config().prefix, name, family);
        let t = self.config().timeout;
        let label = self.backend_label();
        match tokio::time::timeout(t, calls::peek(node, &keys)).await {
            Ok(Ok(Ok(p))) => Ok(p),
            Ok(Ok(Err(f))) => Err(LockError::backend(
                label,
                Some(name),
                f.describe_as(keys.role(&f.key)),
                None,
            )),
            Ok(Err(e)) => Err(map(e, label, Some(name))),
            Err(_) => Err(LockError::unavailable(
                label,
                Some(name),
                format!("no reply within {t:?}"),
                None,
            )),
        }
    }
}

#[async_trait]
impl SemaphoreBackend for RedisLock {
    async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        self.permit_attempt(name, Ask::Permit(max_count), opts, how)
            .await
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    fn backend_name(&self) -> &str {
        self.backend_label()
    }

    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let p = self.permit_peek(name, Family::Semaphore).await?;
        let mut info = SemaphoreInfo::default();
        info.max_count = p.max;
        info.holders = p.shared;
        info.waiters = p.waiting;
        Ok(info)
    }
}

#[async_trait]
impl RwLockBackend for RedisLock {
    async fn attempt(
        &self,
        name: &str,
        access: distlock_core::Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        self.permit_attempt(name, Ask::Side(access), opts, how)
            .await
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    fn backend_name(&self) -> &str {
        self.backend_label()
    }

    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        let p = self.permit_peek(name, Family::RwLock).await?;
        let mut info = RwLockInfo::default();
        info.readers = p.shared;
        info.writer = p.writer;
        info.waiters = p.waiting;
        Ok(info)
    }
}

/// Connects a semaphore from a `redis://` URL.
///
/// # Errors
/// As [`crate::connect`]; [`LockError::InvalidConfig`] for a `redlock://` URL (see the module
/// doc of `permits`).
pub async fn connect_semaphore(
    url: &str,
) -> Result<std::sync::Arc<dyn distlock_core::DistributedSemaphore>, LockError> {
    Ok(std::sync::Arc::new(single(url, "semaphore").await?))
}

/// Connects a read-write lock from a `redis://` URL.
///
/// # Errors
/// As [`connect_semaphore`].
pub async fn connect_rwlock(
    url: &str,
) -> Result<std::sync::Arc<dyn distlock_core::DistributedRwLock>, LockError> {
    Ok(std::sync::Arc::new(single(url, "read-write lock").await?))
}

/// A single-instance client, or Redlock's typed refusal before anything connects.
async fn single(url: &str, what: &str) -> Result<RedisLock, LockError> {
    let cfg = crate::RedisConfig::from_url(url)?;
    if cfg.topology == crate::Topology::Redlock {
        return Err(LockError::invalid_config(format!(
            "redlock: {what}s are offered on a single Redis instance (redis://) only; a Redlock \
             quorum cannot bound the holders of a {what} safely"
        )));
    }
    if cfg.lock_delay.is_some() {
        return Err(LockError::invalid_config(format!(
            "lock_delay= is for locks; {what}s take replicas= only (see docs/safety.md, Redis Sentinel)"
        )));
    }
    RedisLock::connect(cfg).await
}

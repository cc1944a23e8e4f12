//! What `inspect` reports: [`LockInfo`] about one lock, [`SemaphoreInfo`] about one semaphore,
//! [`RwLockInfo`] about one read-write lock; and [`Access`], the side of a read-write lock.

use std::time::Duration;

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
    /// The holder identity recorded with the acquisition ([`crate::AcquireOptions::holder`]),
    /// where the backend records it ([`crate::Capabilities::holder_identity`]) and the holder
    /// gave one. Never the identity of an earlier holder.
    pub holder: Option<String>,
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
            holder: None,
        }
    }

    /// Sets the recorded holder identity.
    pub fn with_holder(mut self, holder: Option<String>) -> Self {
        self.holder = holder;
        self
    }
}

/// Which side of a read-write lock a caller asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Shared with other readers; excludes writers.
    Read,
    /// Excludes readers and other writers.
    Write,
}

/// A snapshot of one semaphore, from [`DistributedSemaphore::inspect`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInfo {
    /// The count the name is in use with (`None`: nobody holds or waits).
    pub max_count: Option<u32>,
    /// Permits held now.
    pub holders: usize,
    /// Callers waiting for a permit.
    pub waiters: usize,
}

/// A snapshot of one read-write lock, from [`DistributedRwLock::inspect`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockInfo {
    /// Readers holding it now.
    pub readers: usize,
    /// Whether a writer holds it now.
    pub writer: bool,
    /// Callers waiting, readers and writers.
    pub waiters: usize,
}

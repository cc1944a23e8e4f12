//! [`DistributedSemaphore`]: at most `max_count` holders of one name at once.

use std::fmt::Debug;

use async_trait::async_trait;

use crate::backend::{attempt, Attempt, SemaphoreBackend};
pub use crate::info::SemaphoreInfo;
use crate::{AcquireOptions, Capabilities, LockError, LockGuard};

/// Largest `max_count` a semaphore accepts.
pub const MAX_PERMITS: u32 = 100_000;

/// A counting semaphore over a store: at most `max_count` holders of a name at once ("no more
/// than 4 exports hit the warehouse at once").
///
/// Each permit is a [`LockGuard`] like a mutex's: its fencing token comes from the name's one
/// counter (every grant's token is greater than every earlier grant's on that name, whichever
/// permit it is), it renews its lease, reports [`LockGuard::lost`], and is released on drop.
///
/// # `max_count`
/// Every caller of one name must pass the same `max_count`. While the name has holders or
/// waiters, a call with another count fails with [`LockError::InvalidConfig`] naming both
/// counts; it is never silently served with the smaller or the larger. Once the name has
/// neither, nothing of it is left but its token counter, and the next caller sets the count.
///
/// # Fairness
/// Waiters are served in arrival order where [`Capabilities::fifo`] says so: a waiter never
/// gets a permit ahead of an earlier one, and `try_acquire` gets none while anyone waits.
///
/// ```
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use distlock_core::{AcquireOptions, DistributedSemaphore};
///
/// let exports = distlock_core::permits::PermitStore::new().semaphore();
/// let opts = AcquireOptions::new();
/// let a = exports.acquire("warehouse", 2, &opts).await?;
/// let b = exports.acquire("warehouse", 2, &opts).await?;
/// // Two permits are out: a third caller would wait.
/// assert!(exports.try_acquire("warehouse", 2, &opts).await?.is_none());
/// assert!(b.fencing_token() > a.fencing_token());
/// a.release().await?;
/// assert!(exports.try_acquire("warehouse", 2, &opts).await?.is_some());
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[async_trait]
pub trait DistributedSemaphore: Send + Sync + Debug + 'static {
    /// Takes one of `max_count` permits of `name`, waiting at most `opts.wait` (`None`:
    /// forever).
    ///
    /// # Errors
    /// [`LockError::Timeout`] when the wait runs out; [`LockError::InvalidConfig`] for a
    /// `max_count` of 0, above [`MAX_PERMITS`], or unlike the name's current one;
    /// [`LockError::InvalidName`], [`LockError::Unavailable`] and store errors as for a mutex.
    async fn acquire(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError>;

    /// Takes a permit only if one is free and nobody waits for one: `Ok(None)` otherwise.
    ///
    /// # Errors
    /// As [`DistributedSemaphore::acquire`], without the timeout.
    async fn try_acquire(
        &self,
        name: &str,
        max_count: u32,
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
    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError>;
}

/// The error for a semaphore call whose `max_count` (`asked`) differs from the count the name
/// is in use with (`in_use`): [`LockError::InvalidConfig`] naming both.
pub fn other_count(name: &str, in_use: impl std::fmt::Display, asked: u32) -> LockError {
    LockError::invalid_config(format!(
        "semaphore {name:?} is in use with max_count {in_use}; this call asked for max_count \
         {asked} (every caller of a name must pass the same)"
    ))
}

/// How a store that keeps a semaphore's count beside each permit writes it (ZooKeeper's lease
/// node data, etcd's permit key value): `max_count=N`, then the holder identity, if any, on
/// the next line.
///
/// ```
/// use distlock_core::semaphore::{count_in_record, count_record};
/// assert_eq!(count_record(4, Some("w1")), "max_count=4\nw1");
/// assert_eq!(count_in_record(count_record(4, None).as_bytes()), Some(4));
/// assert_eq!(count_in_record(b"10.0.0.7"), None); // a Curator lease's default data
/// ```
pub fn count_record(max_count: u32, holder: Option<&str>) -> String {
    match holder {
        Some(holder) => format!("max_count={max_count}\n{holder}"),
        None => format!("max_count={max_count}"),
    }
}

/// The count a [`count_record`] names (`None`: not one).
pub fn count_in_record(data: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(data).ok()?;
    text.lines()
        .next()?
        .strip_prefix("max_count=")?
        .parse()
        .ok()
}

/// Checks what every semaphore call must pass before the store sees it.
pub(crate) fn checked(name: &str, max_count: u32, opts: &AcquireOptions) -> Result<(), LockError> {
    attempt::checked(name, opts)?;
    if max_count == 0 || max_count > MAX_PERMITS {
        return Err(LockError::invalid_config(format!(
            "semaphore {name:?}: max_count must be between 1 and {MAX_PERMITS}, got {max_count}"
        )));
    }
    Ok(())
}

#[async_trait]
impl<B: SemaphoreBackend> DistributedSemaphore for B {
    async fn acquire(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        checked(name, max_count, opts)?;
        let got = attempt::live(
            self.backend_name(),
            name,
            opts,
            Attempt::Wait,
            |o| async move { self.attempt(name, max_count, &o, Attempt::Wait).await },
        )
        .await?;
        attempt::or_timeout(got, name, self.backend_name(), opts)
    }

    async fn try_acquire(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        checked(name, max_count, opts)?;
        attempt::live(
            self.backend_name(),
            name,
            opts,
            Attempt::Try,
            |o| async move { self.attempt(name, max_count, &o, Attempt::Try).await },
        )
        .await
    }

    fn capabilities(&self) -> Capabilities {
        SemaphoreBackend::capabilities(self)
    }

    fn backend_name(&self) -> &str {
        SemaphoreBackend::backend_name(self)
    }

    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        crate::backend::name::validate(name)?;
        SemaphoreBackend::inspect(self, name).await
    }
}

//! [`acquire_all`] and [`MultiGuard`]: several locks taken all-or-nothing, in one canonical
//! order, under one wait budget.

use std::future::Future;
use std::time::Duration;

use futures::future::{join_all, select_all};

use crate::backend::Deadline;
use crate::{AcquireOptions, DistributedLock, LockError, LockGuard};

/// Acquires every lock in `names`, or none of them.
///
/// * **No deadlock**: names are taken in one canonical order (byte order), whatever order the
///   caller lists them in, so two callers asking for overlapping sets never wait on each
///   other in a cycle.
/// * **One wait budget**: `opts.wait` bounds the whole call, not each lock.
/// * **All or nothing**: when one lock cannot be had in time, or the store fails, the ones
///   already taken are released before the error returns; when the call is cancelled
///   (its future dropped), they are released in the background like any dropped guard.
///
/// ```
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use distlock_core::{AcquireOptions, LockExt};
///
/// let lock = distlock_core::memory::MemoryStore::new().client();
/// // Move money between two accounts: both locks, in a deadlock-free order.
/// let both = lock.acquire_all(&["account-42", "account-7"], &AcquireOptions::new()).await?;
/// assert_eq!(both.names(), vec!["account-42", "account-7"]); // canonical (byte) order
/// assert!(both.fencing_token("account-7").is_some());
/// both.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
///
/// # Errors
/// [`LockError::InvalidConfig`] for an empty list; [`LockError::InvalidName`] for a name given
/// twice (or invalid); [`LockError::Timeout`] naming the lock that was not free in time; the
/// store's errors otherwise.
pub async fn acquire_all<L: DistributedLock + ?Sized>(
    lock: &L,
    names: &[&str],
    opts: &AcquireOptions,
) -> Result<MultiGuard, LockError> {
    if names.is_empty() {
        return Err(LockError::invalid_config(
            "acquire_all needs at least one lock name",
        ));
    }
    let mut sorted: Vec<&str> = names.to_vec();
    sorted.sort_unstable();
    if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
        return Err(LockError::invalid_name(
            w[0],
            "named twice in one acquire_all (each lock can be held once)",
        ));
    }
    for name in &sorted {
        crate::backend::name::validate(name)?;
    }
    let deadline = Deadline::after(opts.wait);
    let mut guards = Vec::with_capacity(sorted.len());
    for name in sorted {
        let mut each = opts.clone();
        each.wait = deadline.remaining();
        match lock.acquire(name, &each).await {
            Ok(g) => guards.push(g),
            Err(e) => {
                give_back(guards).await;
                return Err(match e {
                    LockError::Timeout { name, backend, .. } => LockError::Timeout {
                        name,
                        backend,
                        waited: opts.wait.unwrap_or(Duration::ZERO),
                    },
                    other => other,
                });
            }
        }
    }
    Ok(MultiGuard { guards })
}

/// Releases what a failed `acquire_all` had taken, newest first.
async fn give_back(guards: Vec<LockGuard>) {
    for g in guards.into_iter().rev() {
        let _ = g.release().await;
    }
}

/// Proof of holding every lock of one [`acquire_all`]. Dropping it releases them all in the
/// background, as dropping each guard would.
#[derive(Debug)]
#[must_use = "the locks are released in the background as soon as the guard is dropped"]
pub struct MultiGuard {
    /// In canonical (byte) order of their names.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The names held, in canonical (byte) order.
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::name).collect()
    }

    /// Each lock's fencing token, in canonical order: fence a write to a resource with the
    /// token of the lock that protects it.
    pub fn fencing_tokens(&self) -> Vec<(&str, u64)> {
        self.guards
            .iter()
            .map(|g| (g.name(), g.fencing_token()))
            .collect()
    }

    /// The fencing token of one member, `None` when `name` is not in the set.
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// The member guards, in canonical order.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// Whether any member is known to be lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves with the first member's [`LockError::Lost`] once any member is known lost:
    /// the set no longer protects anything.
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        let each: Vec<_> = self.guards.iter().map(|g| Box::pin(g.lost())).collect();
        async move { select_all(each).await.0 }
    }

    /// Extends every member's lease to `ttl` from now.
    ///
    /// # Errors
    /// The first member's error (every member is tried).
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        join_all(self.guards.iter().map(|g| g.extend(ttl)))
            .await
            .into_iter()
            .collect()
    }

    /// Releases every member, newest first, and waits for the store.
    ///
    /// # Errors
    /// The first member's error ([`LockError::NotHeld`] when a member had expired and been
    /// taken over); every member is released regardless.
    pub async fn release(self) -> Result<(), LockError> {
        let mut first = Ok(());
        for g in self.guards.into_iter().rev() {
            if let Err(e) = g.release().await {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::memory::MemoryStore;
    use crate::{AcquireOptions, DistributedLock, LockError, LockExt};

    #[tokio::test]
    async fn bad_lists_are_typed_errors() {
        let lock = MemoryStore::new().client();
        let o = AcquireOptions::new();
        assert!(matches!(
            lock.acquire_all(&[], &o).await,
            Err(LockError::InvalidConfig(_))
        ));
        let e = lock.acquire_all(&["a", "b", "a"], &o).await.unwrap_err();
        assert!(
            matches!(&e, LockError::InvalidName { reason, .. } if reason.contains("twice")),
            "{e}"
        );
        assert!(matches!(
            lock.acquire_all(&["a", ""], &o).await,
            Err(LockError::InvalidName { .. })
        ));
        // Nothing was taken by the refused calls.
        assert!(lock.try_acquire("a", &o).await.unwrap().is_some());
    }

    #[tokio::test]
    async fn opposite_orders_never_deadlock() {
        let store = MemoryStore::new();
        let (a, b) = (store.client(), store.client());
        let run = |l: Arc<crate::memory::MemoryLock>, names: [&'static str; 3]| async move {
            for _ in 0..200 {
                let g = l
                    .acquire_all(&names, &AcquireOptions::new().wait(Duration::from_secs(5)))
                    .await
                    .unwrap();
                tokio::task::yield_now().await;
                g.release().await.unwrap();
            }
        };
        let t = tokio::time::timeout(
            Duration::from_secs(20),
            futures::future::join(run(a, ["x", "y", "z"]), run(b, ["z", "y", "x"])),
        )
        .await;
        assert!(t.is_ok(), "two callers with opposite orders did not finish");
    }
}

//! The one operation a store supplies per primitive — [`LockBackend`] (mutex),
//! [`SemaphoreBackend`], [`RwLockBackend`] — and [`Attempt`], how it treats another holder;
//! plus what the blanket implementations of the public traits do around it, once for every
//! store and primitive (validation, never handing out a guard already lost, the timeout).

use std::fmt::Debug;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::info::{Access, RwLockInfo, SemaphoreInfo};
use crate::leader::{leader_by_inspect, Leader};
use crate::metrics::Outcome;
use crate::operator::{cannot_break, cannot_list, Broken, Listing};
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
    /// ([`crate::leader::leader_by_inspect`]).
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

    /// The names held now that start with `prefix`, at most `limit` (called with a checked
    /// prefix and limit: [`crate::operator::validate_listing`]). A backend that lists sets
    /// [`Capabilities::list`].
    ///
    /// # Errors
    /// [`LockError::Unsupported`] by default; store errors otherwise.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        let _ = (prefix, limit);
        Err(cannot_list(
            self.backend_name(),
            "not implemented by this backend",
        ))
    }

    /// Forces the holder of `name` out and leaves the name's fence ahead of its token (called
    /// with a validated name). A backend that breaks sets [`Capabilities::break_lock`].
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when nobody holds `name`; [`LockError::Unsupported`] by default;
    /// store errors otherwise.
    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        let _ = name;
        Err(cannot_break(
            self.backend_name(),
            "not implemented by this backend",
        ))
    }
}

/// What a store implements to be a [`DistributedSemaphore`](crate::DistributedSemaphore)
/// (one blanket implementation adds validation of the name, options and `max_count`, and the
/// timeout).
#[async_trait]
pub trait SemaphoreBackend: Send + Sync + Debug + 'static {
    /// One acquisition of one of `max_count` permits of `name`: as
    /// [`LockBackend::attempt`]. A `max_count` unlike the one the name is in use with is
    /// [`LockError::InvalidConfig`] naming both. Dropping the future leaves nothing behind.
    ///
    /// # Errors
    /// As [`LockBackend::attempt`].
    async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError>;

    /// What this backend guarantees and how it behaves.
    fn capabilities(&self) -> Capabilities;

    /// The backend label used in messages and reports.
    fn backend_name(&self) -> &str;

    /// Who holds and waits for `name` (called with a validated name).
    ///
    /// # Errors
    /// [`LockError::Unsupported`] by default; store errors otherwise.
    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let _ = name;
        Err(LockError::unsupported(self.backend_name(), "inspect"))
    }
}

/// What a store implements to be a [`DistributedRwLock`](crate::DistributedRwLock).
#[async_trait]
pub trait RwLockBackend: Send + Sync + Debug + 'static {
    /// One acquisition of `name` with `access`: as [`LockBackend::attempt`]; a writer that
    /// waits holds back readers that arrive after it.
    ///
    /// # Errors
    /// As [`LockBackend::attempt`].
    async fn attempt(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError>;

    /// What this backend guarantees and how it behaves.
    fn capabilities(&self) -> Capabilities;

    /// The backend label used in messages and reports.
    fn backend_name(&self) -> &str;

    /// Who holds and waits for `name` (called with a validated name).
    ///
    /// # Errors
    /// [`LockError::Unsupported`] by default; store errors otherwise.
    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        let _ = name;
        Err(LockError::unsupported(self.backend_name(), "inspect"))
    }
}

/// What every acquisition checks before the store sees it: the name rules and the options.
pub(crate) fn checked(name: &str, opts: &AcquireOptions) -> Result<(), LockError> {
    crate::backend::name::validate(name)?;
    opts.validate()
}

/// A waiting acquisition's outcome: the guard, or [`LockError::Timeout`] when the wait ran out.
pub(crate) fn or_timeout(
    got: Option<LockGuard>,
    name: &str,
    backend: &str,
    opts: &AcquireOptions,
) -> Result<LockGuard, LockError> {
    got.ok_or_else(|| LockError::timeout(name, backend, opts.wait.unwrap_or(Duration::ZERO)))
}

/// Attempts per acquisition when the store hands back guards already lost.
pub(crate) const BORN_LOST_ATTEMPTS: usize = 3;

/// The most an acquisition outlasts its wait (a try: its zero wait) when the store stops
/// answering — a paused process, a stuck disk, a blackholed route keep the connections open,
/// so nothing else ends the wait for a reply. The acquisition is then dropped, which leaves
/// nothing behind in the store (the cleanup runs once it answers), and
/// [`LockError::Unavailable`] returned. On a store that answers, waits overrun by less
/// (`wait_timeout_honoured`: at most 1 s). The bound is the same for every store, shorter
/// than some backends' own per-operation limits (Redis's `timeout`, a ZooKeeper session's
/// `connect_timeout`, SQLite's busy wait), so a store that is only slow past it — a new
/// ZooKeeper session whose first server is blackholed, an SQLite writer behind a long
/// transaction — is `Unavailable` too: retryable, and within the bound the caller asked for.
pub const STALL_BOUND: Duration = Duration::from_secs(2);

/// Runs `attempt` (one store attempt with the given options), never handing out a guard
/// already known to be lost: the store's session or connection can end between the grant and
/// the guard's construction (the ZooKeeper ensemble nemesis run with seed 2026112308 saw a
/// session retired while the last re-list's reply was in flight). Such a guard is dropped (its
/// drop releases whatever it still occupies) and the attempt repeated within what is left of
/// the wait, at most [`BORN_LOST_ATTEMPTS`] times, then [`LockError::Unavailable`].
pub(crate) async fn live<F, Fut>(
    backend: &str,
    name: &str,
    opts: &AcquireOptions,
    how: Attempt,
    attempt: F,
) -> Result<Option<LockGuard>, LockError>
where
    F: FnMut(AcquireOptions) -> Fut,
    Fut: Future<Output = Result<Option<LockGuard>, LockError>>,
{
    let started = tokio::time::Instant::now();
    let once = crate::backend::handoff::scope(live_once(backend, name, opts, started, attempt));
    let wait = match how {
        Attempt::Wait => opts.wait,
        Attempt::Try => Some(Duration::ZERO),
    };
    let (got, waited) = match wait {
        Some(wait) => tokio::time::timeout(wait.saturating_add(STALL_BOUND), once)
            .await
            .unwrap_or_else(|_| (Err(stalled(backend, name, wait)), false)),
        None => once.await,
    };
    let outcome = match (&got, how) {
        (Ok(Some(_)), _) => Outcome::Acquired,
        (Ok(None), Attempt::Wait) => Outcome::TimedOut,
        (Ok(None), _) => Outcome::Busy,
        (Err(_), _) => Outcome::Error,
    };
    crate::metrics::acquisition(backend, name, outcome, started.elapsed(), waited);
    got
}

/// The error of an acquisition the store did not answer within `wait` and [`STALL_BOUND`].
fn stalled(backend: &str, name: &str, wait: Duration) -> LockError {
    LockError::unavailable(
        backend,
        Some(name),
        format!(
            "the store did not answer within the wait ({wait:?}) and {STALL_BOUND:?} more: \
             stalled or unreachable"
        ),
        None,
    )
}

/// [`live`] without the metrics.
async fn live_once<F, Fut>(
    backend: &str,
    name: &str,
    opts: &AcquireOptions,
    started: tokio::time::Instant,
    mut attempt: F,
) -> Result<Option<LockGuard>, LockError>
where
    F: FnMut(AcquireOptions) -> Fut,
    Fut: Future<Output = Result<Option<LockGuard>, LockError>>,
{
    let mut now = opts.clone();
    for _ in 0..BORN_LOST_ATTEMPTS {
        match attempt(now.clone()).await? {
            Some(g) if g.is_lost() => {
                tracing::debug!(
                    token = g.fencing_token(),
                    "the guard was lost before it could be handed out (the store session or \
                     connection ended meanwhile); giving it back and trying again"
                );
                drop(g);
                if let Some(wait) = opts.wait {
                    now = now.wait(wait.saturating_sub(started.elapsed()));
                }
            }
            other => return Ok(other),
        }
    }
    Err(LockError::unavailable(
        backend,
        Some(name),
        format!(
            "{BORN_LOST_ATTEMPTS} acquisitions in a row were lost before they could be handed \
             out (the store session or connection keeps ending); retry later"
        ),
        None,
    ))
}

//! [`DistributedLock`]: the one trait every backend implements.

use std::fmt::Debug;

use async_trait::async_trait;
use tracing::Instrument;

use crate::backend::{attempt, name, Attempt, LockBackend};
use crate::leader::{leader_by_inspect, Leader};
use crate::operator::{cannot_break, cannot_list, validate_listing, Broken, Listing};
use crate::{AcquireOptions, Capabilities, LockError, LockGuard, LockInfo};

/// A distributed mutual-exclusion lock service: one client of one store.
///
/// Object safe: hold it as `Arc<dyn DistributedLock>` and pick the backend by URL.
///
/// ```
/// # async fn demo() -> Result<(), distlock_core::LockError> {
/// use std::time::Duration;
/// use distlock_core::{AcquireOptions, DistributedLock};
///
/// // Any backend; the in-process reference one needs no server.
/// let lock = distlock_core::memory::MemoryStore::new().client();
/// let opts = AcquireOptions::new().wait(Duration::from_secs(5));
/// let guard = lock.acquire("nightly-report", &opts).await?;
/// // Fence every write with the token: a store that rejects lower tokens stops a holder
/// // that was paused past its lease.
/// let token = guard.fencing_token();
/// assert!(token > 0);
/// // Nobody else gets it while we hold it.
/// assert!(lock.try_acquire("nightly-report", &opts).await?.is_none());
/// guard.release().await?;
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
///
/// # Guarantees
/// * At most one guard per name is valid at a time across every client of the same
///   deployment, within the assumptions the backend documents (see [`Capabilities`]).
/// * Every successful acquisition gets a fencing token strictly greater than every earlier
///   holder's for that name (on every backend; it is part of the contract).
/// * Two different names never share a lock.
///
/// # Names
/// A name is non-empty UTF-8 of at most 256 bytes without a NUL byte; anything else is
/// [`LockError::InvalidName`]. A backend may reject more names its store cannot represent
/// (ZooKeeper: path elements shaped like its contender nodes), again with `InvalidName`.
///
/// # Cancel safety
/// Dropping an `acquire` future leaves nothing behind in the store (no key, row or node that
/// would block others); what a backend had already written is removed in the background.
///
/// # Fairness
/// Backend-specific; see [`Capabilities::fifo`].
///
/// # Implementing
/// Backends implement [`LockBackend`] (one required operation) and get this trait from a
/// blanket implementation; implement it directly only for wrappers and test doubles.
#[async_trait]
pub trait DistributedLock: Send + Sync + Debug + 'static {
    /// Acquires `name`, waiting up to `opts.wait` for other holders.
    ///
    /// # Errors
    /// [`LockError::Timeout`] after `opts.wait`; [`LockError::InvalidName`],
    /// [`LockError::InvalidConfig`] for bad input; [`LockError::Unavailable`] when the store
    /// cannot be reached.
    async fn acquire(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError>;

    /// Acquires `name` only if nobody holds it; never waits on another holder. Uses `ttl` and
    /// `renew` of `opts`; its `wait` does not apply (an attempt that finds the lock held
    /// returns `Ok(None)` at once).
    ///
    /// # Errors
    /// As [`DistributedLock::acquire`], without `Timeout`.
    async fn try_acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError>;

    /// What this backend guarantees and how it behaves.
    fn capabilities(&self) -> Capabilities;

    /// The backend label used in messages and reports, e.g. `postgres-row`.
    fn backend_name(&self) -> &str;

    /// Reports who holds `name` right now, as far as the store can tell (for operators and the
    /// `distlock inspect` command; a snapshot, not a guarantee).
    ///
    /// # Errors
    /// [`LockError::Unsupported`] when the backend cannot inspect; store errors otherwise.
    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError>;

    /// Campaigns for leadership of `group` as `identity`: returns once this caller leads, with
    /// the leadership as a guard (lost, fenced and released like any lock), waiting up to
    /// `opts.wait`. Most callers want [`crate::recipes::election::elect`], which campaigns in
    /// the background and hands back a [`crate::recipes::election::Leadership`].
    ///
    /// Provided: the lock named `group`, taken with `identity` as its holder
    /// ([`AcquireOptions::holder`]). A store with a native election recipe answers instead
    /// (ZooKeeper: Curator's `LeaderLatch`, whose `latch-` nodes are a namespace apart from
    /// the lock of the same name: a lock holder and a leader of one name do not exclude each
    /// other there).
    ///
    /// # Cancel safety
    /// As [`DistributedLock::acquire`]: a dropped campaign leaves nothing behind.
    ///
    /// # Errors
    /// As [`DistributedLock::acquire`], plus [`LockError::InvalidIdentity`].
    async fn campaign(
        &self,
        group: &str,
        identity: &str,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        self.acquire(group, &opts.clone().holder(identity)).await
    }

    /// Who leads `group` now (identity and fencing token), without campaigning; `None` when
    /// nobody does. A snapshot: leadership may change the moment after.
    ///
    /// # Errors
    /// [`LockError::Unsupported`] when the backend cannot tell who leads
    /// ([`Capabilities::holder_identity`] is `false`); an error, never an earlier leader's
    /// identity, when the group's lock is held by a holder that recorded no identity; store
    /// errors otherwise.
    async fn leader(&self, group: &str) -> Result<Option<Leader>, LockError> {
        leader_by_inspect(
            self.backend_name(),
            self.capabilities().holder_identity,
            group,
            || self.inspect(group),
        )
        .await
    }

    /// The names currently held that start with `prefix` (empty: every name), each with what
    /// [`DistributedLock::inspect`] would report, at most `limit` of them; [`Listing::truncated`]
    /// says when more may be held. For operators (`distlock ls`): a snapshot, not a guarantee.
    /// [`Capabilities::list`] tells whether the backend lists; each backend's docs say what it
    /// reads and how it bounds the read.
    ///
    /// # Errors
    /// [`LockError::InvalidName`] for a prefix no name can start with,
    /// [`LockError::InvalidConfig`] for a `limit` of 0 or above
    /// [`crate::operator::MAX_LIST_LIMIT`]; [`LockError::Unsupported`] (the default) where the
    /// store cannot tell which names are held; store errors otherwise.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        let _ = (prefix, limit);
        Err(cannot_list(
            self.backend_name(),
            "not implemented by this lock",
        ))
    }

    /// An operator's forced release of `name`, whoever holds it: frees the name and advances
    /// its fence, so the next holder's fencing token is higher than the broken holder's (and a
    /// fenced resource refuses the broken holder's writes once the next holder wrote). The
    /// broken holder's guard reports itself lost at its next renewal at the latest. Returns the
    /// broken holder's token, owner and identity.
    ///
    /// Only for a holder that is gone or stuck: a live holder keeps working until its guard
    /// notices, and only fencing stops its writes. [`Capabilities::break_lock`] tells whether
    /// the backend can break safely.
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when nobody holds `name`; [`LockError::InvalidName`];
    /// [`LockError::Unsupported`] (the default) where the store offers no safe way;
    /// store errors otherwise.
    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        let _ = name;
        Err(cannot_break(
            self.backend_name(),
            "not implemented by this lock",
        ))
    }
}

/// Every backend's user-facing methods, written once: validation, the tracing span, the
/// `Timeout` mapping.
#[async_trait]
impl<B: LockBackend> DistributedLock for B {
    async fn acquire(&self, name: &str, opts: &AcquireOptions) -> Result<LockGuard, LockError> {
        attempt::checked(name, opts)?;
        let span = tracing::debug_span!("acquire", backend = %self.backend_name(), name = %name);
        let got = attempt::live(
            self.backend_name(),
            name,
            opts,
            Attempt::Wait,
            |o| async move { self.attempt(name, &o, Attempt::Wait).await },
        )
        .instrument(span)
        .await?;
        attempt::or_timeout(got, name, self.backend_name(), opts)
    }

    async fn try_acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<LockGuard>, LockError> {
        attempt::checked(name, opts)?;
        let span =
            tracing::debug_span!("try_acquire", backend = %self.backend_name(), name = %name);
        attempt::live(
            self.backend_name(),
            name,
            opts,
            Attempt::Try,
            |o| async move { self.attempt(name, &o, Attempt::Try).await },
        )
        .instrument(span)
        .await
    }

    fn capabilities(&self) -> Capabilities {
        LockBackend::capabilities(self)
    }

    fn backend_name(&self) -> &str {
        LockBackend::backend_name(self)
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        name::validate(name)?;
        LockBackend::inspect(self, name).await
    }

    async fn campaign(
        &self,
        group: &str,
        identity: &str,
        opts: &AcquireOptions,
    ) -> Result<LockGuard, LockError> {
        let opts = opts.clone().holder(identity);
        attempt::checked(group, &opts)?;
        let span = tracing::debug_span!("campaign", backend = %self.backend_name(), name = %group);
        let won = attempt::live(
            self.backend_name(),
            group,
            &opts,
            Attempt::Wait,
            |o| async move { LockBackend::campaign(self, group, &o).await },
        )
        .instrument(span)
        .await?;
        attempt::or_timeout(won, group, self.backend_name(), &opts)
    }

    async fn leader(&self, group: &str) -> Result<Option<Leader>, LockError> {
        name::validate(group)?;
        LockBackend::leader(self, group).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        validate_listing(prefix, limit)?;
        let span = tracing::debug_span!("list", backend = %self.backend_name(), prefix = %prefix);
        LockBackend::list(self, prefix, limit)
            .instrument(span)
            .await
    }

    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        name::validate(name)?;
        let span = tracing::info_span!("break", backend = %self.backend_name(), name = %name);
        let broken = LockBackend::break_lock(self, name).instrument(span).await?;
        tracing::info!(
            backend = %self.backend_name(),
            name = %name,
            fencing_token = ?broken.fencing_token,
            holder = ?broken.holder,
            "lock broken by an operator"
        );
        Ok(broken)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::backend::{GuardParts, Lease, LostSignal};

    /// Counts releases; renewals always succeed.
    #[derive(Debug, Default)]
    struct Counted {
        released: AtomicUsize,
    }

    #[async_trait]
    impl Lease for Counted {
        async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
            Ok(Some(ttl))
        }

        async fn release(&self) -> Result<(), LockError> {
            self.released.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    /// A store whose first `born_lost` grants are lost before they are handed out (as a
    /// ZooKeeper session retired while the grant's reply was in flight); token = attempt number.
    #[derive(Debug)]
    struct BornLost {
        born_lost: usize,
        attempts: AtomicUsize,
        lease: Arc<Counted>,
    }

    #[async_trait]
    impl LockBackend for BornLost {
        async fn attempt(
            &self,
            name: &str,
            opts: &AcquireOptions,
            _how: Attempt,
        ) -> Result<Option<LockGuard>, LockError> {
            let n = self.attempts.fetch_add(1, Ordering::SeqCst) + 1;
            let lost = LostSignal::new();
            if n <= self.born_lost {
                lost.mark_lost("the session ended during the grant");
            }
            Ok(Some(
                GuardParts {
                    name: name.to_owned(),
                    backend: "born-lost".into(),
                    fencing_token: n as u64,
                    ttl: opts.ttl,
                    renew: false,
                    acquired_at: Instant::now(),
                    validity: None,
                    lease: Arc::clone(&self.lease) as Arc<dyn Lease>,
                    lost,
                }
                .into_guard(),
            ))
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::bound(crate::CrashRelease::Lease, crate::Wakeup::Backoff, true)
        }

        fn backend_name(&self) -> &str {
            "born-lost"
        }
    }

    fn store(born_lost: usize) -> BornLost {
        BornLost {
            born_lost,
            attempts: AtomicUsize::new(0),
            lease: Arc::default(),
        }
    }

    /// Seed 2026112308 (ZooKeeper ensemble nemesis): acquire handed out a guard whose session
    /// had already been retired. Now a guard already lost is given back and the attempt
    /// repeated; the caller only ever sees a live guard.
    #[tokio::test]
    async fn a_guard_lost_before_it_is_handed_out_is_given_back_and_retried() {
        let s = store(2);
        let g = s.acquire("n", &AcquireOptions::new()).await.unwrap();
        assert!(!g.is_lost());
        assert_eq!(
            g.fencing_token(),
            3,
            "the third grant is the first live one"
        );
        // Both lost grants were released (by their drop, in the background).
        for _ in 0..100 {
            if s.lease.released.load(Ordering::SeqCst) == 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(s.lease.released.load(Ordering::SeqCst), 2);
        g.abandon();

        let t = store(1);
        let g = t.try_acquire("n", &AcquireOptions::new()).await.unwrap();
        assert_eq!(
            g.map(|g| (g.is_lost(), g.fencing_token())),
            Some((false, 2))
        );
    }

    /// A campaign is an acquisition too: a leadership lost before it is handed out is given
    /// back and the campaign repeated.
    #[tokio::test]
    async fn a_leadership_lost_before_it_is_handed_out_is_given_back_too() {
        let s = store(2);
        let g = DistributedLock::campaign(&s, "n", "me", &AcquireOptions::new())
            .await
            .unwrap();
        assert!(!g.is_lost());
        assert_eq!(g.fencing_token(), 3);
        g.abandon();
    }

    /// A store that only ever hands out lost guards gets a typed error after a bounded number
    /// of attempts, not a lost guard and not an endless loop.
    #[tokio::test]
    async fn a_store_that_keeps_losing_grants_gives_a_typed_error() {
        let s = store(usize::MAX);
        let err = s.acquire("n", &AcquireOptions::new()).await.unwrap_err();
        assert!(matches!(err, LockError::Unavailable { .. }), "{err:?}");
        assert_eq!(
            s.attempts.load(Ordering::SeqCst),
            attempt::BORN_LOST_ATTEMPTS
        );
    }
}

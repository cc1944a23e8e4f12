//! [`LockGuard`]: proof of holding a lock, written once for every backend.
//!
//! A guard renews its lease every `ttl / 3` (or a third of the validity the store last vouched
//! for, when shorter; when renewal is on) and watches the lease deadline, through its
//! runtime's one renewal scheduler ([`crate::renewals`]: an entry in a timer heap per guard,
//! not a task); scheduling stops when the guard is released, dropped or lost.
//! The lock is reported lost (and stays lost) when a renewal is refused, when the store stays
//! unreachable until the lease runs out, when an unrenewed lease runs out, or when the backend
//! signals it (session expiry, a dead connection, the lock removed by someone else).
//!
//! # Drop
//! Dropping a guard without [`LockGuard::release`] (lost or not) releases in the background on
//! the current tokio runtime (best effort: with no runtime, or if the runtime shuts down first,
//! the store frees the lock when the lease or session ends). Nothing stays locked past its
//! lease.

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tracing::Instrument;

use crate::backend::{Lease, LostSignal};
use crate::metrics::Loss;
use crate::renewals::{Renewable, Slot, Step};
use crate::LockError;

/// How long a background (drop) release may take before it is abandoned.
const DROP_RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a backend hands over to build a [`LockGuard`] after a successful acquisition.
pub struct GuardParts {
    /// The lock name as the user gave it.
    pub name: String,
    /// The backend label used in messages, e.g. `redis` or `postgres-row`.
    pub backend: String,
    /// The fencing token of this acquisition (strictly greater than every earlier holder's).
    pub fencing_token: u64,
    /// The lease length requested.
    pub ttl: Duration,
    /// Renew in the background while held.
    pub renew: bool,
    /// When the acquire request that won the lock was sent (validity counts from here).
    pub acquired_at: Instant,
    /// `Some(v)`: the lock is valid for `v` from `acquired_at` unless renewed.
    /// `None`: held as long as the session/connection lives.
    pub validity: Option<Duration>,
    /// The store operations for this lock.
    pub lease: Arc<dyn Lease>,
    /// The lost flag; the backend may keep clones to set it from its own watchers.
    pub lost: LostSignal,
}

struct LeaseState {
    ttl: Duration,
    valid_until: Option<Instant>,
    /// The validity the last acquire or renewal vouched for (may be shorter than `ttl`).
    validity: Option<Duration>,
}

struct Shared {
    name: String,
    backend: String,
    token: u64,
    renew: bool,
    lease: Arc<dyn Lease>,
    lost: LostSignal,
    state: Mutex<LeaseState>,
    /// Held across each store renewal and the recording of its result, so `extend` and the
    /// background renewal never run at once nor record their results out of order.
    renewing: tokio::sync::Mutex<()>,
    /// This guard's place with the runtime's renewal scheduler.
    slot: Slot,
    /// When the guard was handed out, and whether its hold and its loss were recorded
    /// ([`crate::metrics`]: each once).
    granted_at: Instant,
    hold_recorded: AtomicBool,
    loss_recorded: AtomicBool,
}

impl Shared {
    /// Files this guard for its regular next renewal or lease check (a new generation).
    fn reschedule(self: &Arc<Self>) {
        let me: Weak<dyn Renewable> = Arc::downgrade(self) as Weak<dyn Renewable>;
        self.slot.reschedule(me);
    }

    fn snapshot(&self) -> (Duration, Option<Instant>) {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (s.ttl, s.valid_until)
    }

    /// How long after a renewal the next one starts: a third of the lease, or of the last
    /// vouched validity when that is shorter (ZooKeeper, Redlock), so a renewal always has
    /// two thirds of its validity to come back in.
    /// The stretch the store was last told to keep the lock for, as far as the guard relies
    /// on it: the vouched validity, at most the lease.
    fn vouched(&self) -> Duration {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.validity.map_or(s.ttl, |v| v.min(s.ttl))
    }

    /// The lease's deadline as the guard counts it: the recorded validity's end, less
    /// [`safety_margin`]; `None` for a session- or connection-bound lock.
    fn deadline(&self) -> Option<Instant> {
        let valid_until = self.snapshot().1;
        valid_until.map(|v| v - safety_margin(self.vouched()))
    }

    fn renew_every(&self) -> Duration {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.validity.map_or(s.ttl, |v| v.min(s.ttl)) / 3
    }

    fn record_renewal(&self, ttl: Duration, started: Instant, validity: Option<Duration>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.ttl = ttl;
        s.valid_until = validity.map(|v| started + v);
        s.validity = validity;
    }

    /// Records a renewal to `ttl`, sent at `started`, whose outcome is unknown (a timeout, a
    /// lost reply): the store may have applied it as soon as it was sent, so the lease is
    /// believed only up to the shorter of what was recorded and what that command leaves
    /// (`started + ttl`, less a drift margin). Later renewals ask for `ttl`.
    fn record_unknown(&self, ttl: Duration, started: Instant) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.ttl = ttl;
        let Some(recorded) = s.valid_until else {
            return;
        };
        let applied = ttl.saturating_sub(safety_margin(ttl));
        if started + applied < recorded {
            s.valid_until = Some(started + applied);
            s.validity = Some(applied);
        }
    }

    /// One store renewal to `ttl`, abandoned at the lease deadline known now (past it the lock
    /// is lost whatever the store answers), or after `ttl` for a session-bound lock.
    async fn renew_until_deadline(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        let span = tracing::debug_span!("renew", name = %self.name, backend = %self.backend, token = self.token);
        let renewal = self.lease.renew(ttl).instrument(span);
        // A session-bound lock's renewal is a liveness check: a lease's length is long enough.
        let deadline = self.deadline().unwrap_or_else(|| Instant::now() + ttl);
        match tokio::time::timeout_at(deadline, renewal).await {
            Ok(r) => r,
            Err(_) => Err(LockError::unavailable(
                &self.backend,
                Some(&self.name),
                "the renewal did not answer before the lease ran out",
                None,
            )),
        }
    }

    /// Records the result `res` of a renewal to `ttl` sent at `started`, and returns what the
    /// caller of `extend` is told. Never `Ok` for a guard that is lost:
    /// - a confirmed renewal counts from `started`; if the lock was marked lost meanwhile, or
    ///   the confirmation came after the validity it vouched for, the lock is lost;
    /// - a refusal (`NotHeld`, `Lost`) loses the lock;
    /// - any other error leaves the outcome unknown ([`Shared::record_unknown`]), and the lock
    ///   is lost if that leaves no validity.
    fn settle(
        &self,
        ttl: Duration,
        started: Instant,
        res: Result<Option<Duration>, LockError>,
    ) -> Result<(), LockError> {
        let res = match res {
            Ok(validity) => {
                self.record_renewal(ttl, started, validity);
                Ok(())
            }
            Err(e @ (LockError::NotHeld { .. } | LockError::Lost { .. })) => {
                self.lose(Loss::Refused, e.to_string());
                return Err(e);
            }
            Err(e) => {
                self.record_unknown(ttl, started);
                Err(e)
            }
        };
        if self.deadline().is_some_and(|d| Instant::now() >= d) {
            self.lose(
                Loss::LeaseRanOut,
                match &res {
                    Ok(()) => {
                        format!("the store confirmed the {ttl:?} renewal only after it ran out")
                    }
                    Err(e) => format!(
                    "the {ttl:?} renewal may have been applied and was not confirmed in time: {e}"
                ),
                },
            );
        }
        match self.lost.reason() {
            Some(reason) => Err(LockError::not_held(&self.name, &self.backend, reason)),
            None => res,
        }
    }

    /// When to retry after a renewal failed: a tenth of the lease, but never more than a third
    /// of the validity left, so a short claim (a direct grant) still gets retries before it
    /// runs out.
    fn retry_after(&self) -> Duration {
        let (ttl, _) = self.snapshot();
        let left = self
            .deadline()
            .map_or(ttl, |d| d.saturating_duration_since(Instant::now()));
        (ttl / 10).min(left / 3).max(Duration::from_millis(20))
    }

    /// Marks the lock lost (once) and says so in the log.
    fn lose(&self, why: Loss, reason: String) {
        if self.lost.mark_lost(reason.clone()) {
            tracing::warn!(name = %self.name, backend = %self.backend, token = self.token, %reason, "lock lost");
            self.record_loss(why);
        } else {
            // The backend's own signal came first.
            self.record_loss(Loss::Store);
        }
    }

    /// Records the loss (once) and the hold it ended.
    fn record_loss(&self, why: Loss) {
        if !self.loss_recorded.swap(true, AtomicOrdering::SeqCst) {
            crate::metrics::lost(&self.backend, &self.name, why);
            self.record_hold();
        }
    }

    /// Records the hold (once): at the release, the drop or the loss, whichever is first.
    fn record_hold(&self) {
        if !self.hold_recorded.swap(true, AtomicOrdering::SeqCst) {
            crate::metrics::held(&self.backend, &self.name, self.granted_at.elapsed());
        }
    }

    /// The end of the guard (release or drop): a loss the backend signalled is recorded now
    /// if nothing noticed it before, then the hold.
    fn record_end(&self) {
        if self.lost.is_lost() {
            self.record_loss(Loss::Store);
        }
        self.record_hold();
    }

    fn lost_error(&self, reason: String) -> LockError {
        LockError::Lost {
            name: self.name.clone(),
            backend: self.backend.clone(),
            reason,
        }
    }
}

/// Proof that this process holds a distributed lock.
///
/// Use [`fencing_token`](Self::fencing_token) to fence every write the lock protects, watch
/// [`lost`](Self::lost) to stop work when the lock goes away, and call
/// [`release`](Self::release) when done. `Send + Sync + 'static`.
#[must_use = "the lock is released in the background as soon as the guard is dropped"]
pub struct LockGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.shared.name)
            .field("backend", &self.shared.backend)
            .field("fencing_token", &self.shared.token)
            .field("lost", &self.shared.lost.reason())
            .finish()
    }
}

impl GuardParts {
    /// The parts of a leased acquisition of `name` with `opts` (their `ttl` and `renew`),
    /// whose winning request was sent at `acquired_at` and which the store vouches for
    /// `validity` from then; a fresh lost signal.
    pub fn leased(
        name: &str,
        backend: &str,
        fencing_token: u64,
        opts: &crate::AcquireOptions,
        acquired_at: Instant,
        validity: Duration,
        lease: Arc<dyn Lease>,
    ) -> Self {
        GuardParts {
            name: name.to_owned(),
            backend: backend.to_owned(),
            fencing_token,
            ttl: opts.ttl,
            renew: opts.renew,
            acquired_at,
            validity: Some(validity),
            lease,
            lost: LostSignal::new(),
        }
    }

    /// Builds the guard and files it with its runtime's renewal scheduler (needs a tokio
    /// runtime).
    pub fn into_guard(self) -> LockGuard {
        LockGuard::new(self)
    }

    /// Builds the guard like [`GuardParts::into_guard`], but never hands out one that starts
    /// (nearly) lost: when the acquire's reply took at least half of the validity (a slow or
    /// paused store; the validity counts from *before* the request was sent), the lease is
    /// renewed once and counted from that renewal. If the renewal fails or is as slow, the lock
    /// is released and [`LockError::Unavailable`] returned (retryable; the caller may try
    /// again).
    ///
    /// # Errors
    /// [`LockError::Unavailable`] as above.
    pub async fn start(self) -> Result<LockGuard, LockError> {
        LockGuard::start(self).await
    }
}

impl LockGuard {
    fn new(parts: GuardParts) -> Self {
        let valid_until = parts.validity.map(|v| parts.acquired_at + v);
        let shared = Arc::new(Shared {
            name: parts.name,
            backend: parts.backend,
            token: parts.fencing_token,
            renew: parts.renew,
            lease: parts.lease,
            lost: parts.lost,
            state: Mutex::new(LeaseState {
                ttl: parts.ttl,
                valid_until,
                validity: parts.validity,
            }),
            renewing: tokio::sync::Mutex::new(()),
            slot: Slot::new(parts.renew || valid_until.is_some()),
            granted_at: Instant::now(),
            hold_recorded: AtomicBool::new(false),
            loss_recorded: AtomicBool::new(false),
        });
        tracing::debug!(name = %shared.name, backend = %shared.backend, token = shared.token, "lock acquired");
        shared.reschedule();
        LockGuard {
            shared,
            finished: false,
        }
    }

    async fn start(mut parts: GuardParts) -> Result<Self, LockError> {
        let Some(validity) = parts.validity else {
            return Ok(Self::new(parts));
        };
        if parts.acquired_at.elapsed() < validity / 2 {
            return Ok(Self::new(parts));
        }
        let again = Instant::now();
        match parts.lease.renew(parts.ttl).await {
            Ok(Some(v)) if again.elapsed() < v / 2 => {
                parts.acquired_at = again;
                parts.validity = Some(v);
                Ok(Self::new(parts))
            }
            _ => {
                let _ = parts.lease.release().await;
                Err(LockError::unavailable(
                    &parts.backend,
                    Some(&parts.name),
                    format!(
                        "the store answered only after most of the {:?} lease had passed; retry, or raise ttl",
                        parts.ttl
                    ),
                    None,
                ))
            }
        }
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The backend label (e.g. `redis`, `postgres-for_update`).
    pub fn backend(&self) -> &str {
        &self.shared.backend
    }

    /// This acquisition's fencing token: strictly greater than the token of every earlier
    /// holder of this name on this deployment. Pass it with every write the lock protects and
    /// have the resource reject tokens lower than the highest it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.shared.token
    }

    /// The current lease length.
    pub fn ttl(&self) -> Duration {
        self.shared.snapshot().0
    }

    /// How long the lock stays valid without another renewal (`None` for session- or
    /// connection-bound locks, or once lost).
    pub fn remaining_validity(&self) -> Option<Duration> {
        if self.is_lost() {
            return None;
        }
        self.shared
            .snapshot()
            .1
            .map(|v| v.saturating_duration_since(Instant::now()))
    }

    /// Whether the lock is known to be lost. Once `true`, always `true`.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.is_lost()
    }

    /// Resolves with a [`LockError::Lost`] once the lock is known to be lost (at once if it
    /// already is). Independent of the guard's lifetime, so it can sit in a `select!` beside
    /// the protected work.
    ///
    /// ```
    /// # async fn demo() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// use distlock_core::{AcquireOptions, DistributedLock, LockError};
    ///
    /// let lock = distlock_core::memory::MemoryStore::new().client();
    /// // A lease that is not renewed runs out: the guard reports it.
    /// let guard = lock
    ///     .acquire("export", &AcquireOptions::new().ttl(Duration::from_millis(50)).renew(false))
    ///     .await?;
    /// let work = tokio::time::sleep(Duration::from_secs(60)); // the protected work
    /// tokio::select! {
    ///     _ = work => unreachable!("the work outlived its lock"),
    ///     e = guard.lost() => assert!(matches!(e, LockError::Lost { .. })),
    /// }
    /// assert!(guard.is_lost());
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        self.context().lost()
    }

    /// A token cancelled once the lock is known to be lost (at once if it already is), for
    /// code that stops on a `CancellationToken`. It is not cancelled by a release.
    pub fn cancellation_token(&self) -> tokio_util::sync::CancellationToken {
        self.shared.lost.cancellation_token()
    }

    /// A cloneable view of this guard (name, token, lost signal) for code that does not own
    /// it: the work inside [`crate::LockExt::run_locked`], or a task spawned beside the work.
    /// It does not keep the lock: the guard's release or drop still ends it.
    pub fn context(&self) -> LockContext {
        LockContext {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Extends the lease to `ttl` from now (and uses `ttl` for later renewals). The background
    /// renewal is rescheduled at once for the new lease, so a shorter `ttl` is renewed on its
    /// own, shorter schedule; `extend` and the background renewal never overlap, and their
    /// results are recorded in the order the store answered them.
    ///
    /// ```
    /// # async fn demo() -> Result<(), distlock_core::LockError> {
    /// use std::time::Duration;
    /// use distlock_core::{AcquireOptions, DistributedLock};
    ///
    /// let lock = distlock_core::memory::MemoryStore::new().client();
    /// let opts = AcquireOptions::new().ttl(Duration::from_secs(5)).renew(false);
    /// let guard = lock.acquire("batch", &opts).await?;
    /// // The batch turned out longer than planned: ask for a minute from now.
    /// guard.extend(Duration::from_secs(60)).await?;
    /// assert!(guard.remaining_validity().unwrap() > Duration::from_secs(50));
    /// guard.release().await?;
    /// # Ok(()) }
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`LockError::NotHeld`] if the lock is lost or someone else holds it now (the guard is then
    /// lost); [`LockError::InvalidConfig`] for a bad `ttl`; store errors otherwise.
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        crate::AcquireOptions::new().ttl(ttl).validate()?;
        let shared = &self.shared;
        let _turn = shared.renewing.lock().await;
        if let Some(reason) = shared.lost.reason() {
            return Err(LockError::not_held(&shared.name, &shared.backend, reason));
        }
        let started = Instant::now();
        // Until the store confirms, it may have applied the new lease the moment it was sent;
        // filed at once, so a caller that drops this future still gets `lost()` on time.
        shared.record_unknown(ttl, started);
        shared.reschedule();
        let res = shared.renew_until_deadline(ttl).await;
        let res = shared.settle(ttl, started, res);
        // Renewed or not, the schedule counts from what is recorded now.
        shared.reschedule();
        res
    }

    /// Releases the lock and waits for the store to confirm.
    ///
    /// # Errors
    /// [`LockError::NotHeld`] if the lease expired and the lock was taken over or removed (the
    /// new holder is untouched); store errors otherwise (the lease then frees the lock).
    pub async fn release(mut self) -> Result<(), LockError> {
        self.finished = true;
        self.shared.slot.stop();
        self.shared.record_end();
        let span = tracing::debug_span!("release", name = %self.shared.name, backend = %self.shared.backend, token = self.shared.token);
        let res = self.shared.lease.release().instrument(span).await;
        match &res {
            Ok(()) => {
                tracing::debug!(name = %self.shared.name, backend = %self.shared.backend, token = self.shared.token, "lock released")
            }
            Err(e) => {
                tracing::warn!(name = %self.shared.name, backend = %self.shared.backend, token = self.shared.token, error = %e, "release failed")
            }
        }
        res
    }

    /// Test support: behave as if this process froze or died this instant. Renewal stops and
    /// nothing is ever released by this guard; the store must free the lock on its own (lease
    /// expiry, session expiry, connection death). The store resources behind the guard are
    /// leaked on purpose.
    #[doc(hidden)]
    pub fn abandon(mut self) {
        self.finished = true;
        self.shared.slot.stop();
        std::mem::forget(Arc::clone(&self.shared));
    }
}

/// What the work under a lock may know about it: its name, its fencing token and whether it
/// is still held. Cheap to clone; from [`LockGuard::context`] or passed by
/// [`crate::LockExt::run_locked`].
#[derive(Clone)]
pub struct LockContext {
    shared: Arc<Shared>,
}

impl fmt::Debug for LockContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockContext")
            .field("name", &self.shared.name)
            .field("fencing_token", &self.shared.token)
            .field("lost", &self.shared.lost.reason())
            .finish()
    }
}

impl LockContext {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The fencing token of the acquisition: send it with every write the lock protects.
    pub fn fencing_token(&self) -> u64 {
        self.shared.token
    }

    /// Whether the lock is known to be lost. Once `true`, always `true`.
    pub fn is_lost(&self) -> bool {
        self.shared.lost.is_lost()
    }

    /// As [`LockGuard::cancellation_token`].
    pub fn cancellation_token(&self) -> tokio_util::sync::CancellationToken {
        self.shared.lost.cancellation_token()
    }

    /// Resolves with a [`LockError::Lost`] once the lock is known to be lost (at once if it
    /// already is).
    pub fn lost(&self) -> impl Future<Output = LockError> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            let reason = shared.lost.wait().await;
            shared.lost_error(reason)
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.shared.slot.stop();
        if !self.finished {
            self.shared.record_end();
        }
        // A lost guard is released too: every backend's release is owner-checked (it never
        // touches another holder's lock), and it frees what a lost guard may still occupy
        // (a ZooKeeper node of a live session, a row or key not yet expired).
        if self.finished {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let shared = Arc::clone(&self.shared);
            handle.spawn(async move {
                let res =
                    tokio::time::timeout(DROP_RELEASE_TIMEOUT, shared.lease.release()).await;
                tracing::debug!(name = %shared.name, backend = %shared.backend, ok = matches!(res, Ok(Ok(()))), "lock released on drop");
            });
        }
    }
}

/// How much earlier than the computed deadline a guard reports its lease lost: the timer and the
/// store's expiry must never race (1% + 2 ms, as Redlock's drift, of the stretch the store was
/// told to keep the lock for — `vouched`: a direct grant's short claim, not the caller's long
/// lease, whose 1% could outlast the claim and end the guard before its first renewal).
fn safety_margin(vouched: Duration) -> Duration {
    vouched / 100 + Duration::from_millis(2)
}

impl Renewable for Shared {
    fn slot(&self) -> &Slot {
        &self.slot
    }

    fn due(&self, retry: Option<Duration>) -> Option<Instant> {
        if self.lost.is_lost() {
            return None;
        }
        let valid_until = self.deadline();
        if self.renew {
            let at = Instant::now() + retry.unwrap_or_else(|| self.renew_every());
            Some(valid_until.map_or(at, |v| at.min(v)))
        } else {
            valid_until
        }
    }

    fn step(self: Arc<Self>, gen: u64) -> BoxFuture<'static, Step> {
        Box::pin(renew_once(self, gen))
    }

    fn unscheduled(&self, why: &str) {
        self.lose(Loss::RenewalStopped, format!("renewal stopped: {why}"));
    }
}

/// One step of a guard's upkeep, when its entry of generation `gen` came due: renew (when
/// renewal is on), asking to retry sooner after a transient error, and mark the lock lost when
/// a renewal is refused or the lease runs out.
async fn renew_once(shared: Arc<Shared>, gen: u64) -> Step {
    if !shared.slot.is_current(gen) {
        return Step::Done;
    }
    if let Some(reason) = shared.lost.reason() {
        // Lost through the backend's own signal (session expiry, a dead connection).
        tracing::warn!(name = %shared.name, backend = %shared.backend, token = shared.token, %reason, "lock lost");
        shared.record_loss(Loss::Store);
        return Step::Done;
    }
    let ttl = shared.snapshot().0;
    let valid_until = shared.deadline();
    // One renewal at a time: wait for a concurrent `extend` to finish and read its result,
    // but never past the lease deadline known now (a hung `extend` must not delay `lost()`).
    let _turn = match valid_until {
        Some(v) => match tokio::time::timeout_at(v, shared.renewing.lock()).await {
            Ok(turn) => turn,
            // An `extend` renewed meanwhile and filed its own schedule.
            Err(_) if !shared.slot.is_current(gen) => return Step::Done,
            Err(_) => {
                shared.lose(
                    Loss::LeaseRanOut,
                    format!(
                        "the {ttl:?} lease ran out while an extend was still waiting for the store"
                    ),
                );
                return Step::Done;
            }
        },
        None => shared.renewing.lock().await,
    };
    if !shared.slot.is_current(gen) {
        // An `extend` renewed meanwhile and filed its own schedule: no second renewal.
        return Step::Done;
    }
    if valid_until.is_some_and(|v| Instant::now() >= v) {
        let why = if shared.renew {
            format!("the {ttl:?} lease ran out before a renewal succeeded")
        } else {
            format!("the {ttl:?} lease ran out (renewal is off)")
        };
        shared.lose(Loss::LeaseRanOut, why);
        return Step::Done;
    }
    let again = |retry| match shared.slot.next_generation() {
        Some(gen) => Step::Again { gen, retry },
        None => Step::Done,
    };
    if !shared.renew {
        return again(None);
    }
    let started = Instant::now();
    let res = shared.renew_until_deadline(ttl).await;
    match shared.settle(ttl, started, res) {
        Ok(()) => {
            tracing::trace!(name = %shared.name, token = shared.token, "lease renewed");
            again(None)
        }
        Err(_) if shared.lost.is_lost() => Step::Done,
        Err(e) => {
            crate::metrics::renewal_failed(&shared.backend, &shared.name);
            tracing::warn!(name = %shared.name, backend = %shared.backend, error = %e, "renewal failed; retrying");
            again(Some(shared.retry_after()))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use async_trait::async_trait;

    use super::*;

    /// A lease whose renewals succeed or fail as told, counting calls.
    #[derive(Default)]
    struct Scripted {
        refuse: bool,
        /// Vouch for this instead of the whole lease.
        validity: Option<Duration>,
        renewals: AtomicUsize,
        released: AtomicBool,
    }

    #[async_trait]
    impl Lease for Scripted {
        async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
            self.renewals.fetch_add(1, Ordering::SeqCst);
            if self.refuse {
                Err(LockError::unavailable("test", None, "down", None))
            } else {
                Ok(Some(self.validity.unwrap_or(ttl)))
            }
        }

        async fn release(&self) -> Result<(), LockError> {
            self.released.store(true, Ordering::SeqCst);
            Ok(())
        }
    }

    /// The parts of a renewed guard over `lease`, acquired now.
    fn renewing(lease: Arc<dyn Lease>) -> GuardParts {
        let mut p = parts(Arc::new(Scripted::default()), Duration::ZERO);
        p.lease = lease;
        p.renew = true;
        p
    }

    fn parts(lease: Arc<Scripted>, replied_after: Duration) -> GuardParts {
        GuardParts {
            name: "n".into(),
            backend: "test".into(),
            fencing_token: 1,
            ttl: Duration::from_secs(1),
            renew: false,
            acquired_at: Instant::now() - replied_after,
            validity: Some(Duration::from_secs(1)),
            lease,
            lost: LostSignal::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn renews_at_a_third_of_a_validity_shorter_than_the_lease() {
        let lease = Arc::new(Scripted {
            validity: Some(Duration::from_millis(600)),
            ..Default::default()
        });
        let mut p = parts(Arc::clone(&lease), Duration::ZERO);
        p.renew = true;
        p.ttl = Duration::from_secs(3);
        p.validity = Some(Duration::from_millis(600));
        let g = p.into_guard();
        tokio::time::sleep(Duration::from_millis(1050)).await;
        // Every 200 ms (a third of the 3 s lease would have let the 600 ms validity run out).
        let n = lease.renewals.load(Ordering::SeqCst);
        assert!((4..=6).contains(&n), "{n} renewals in 1.05 s");
        assert!(!g.is_lost(), "{g:?}");
        g.abandon();
    }

    #[tokio::test(start_paused = true)]
    async fn held_guards_share_one_task_and_each_renews_on_time() {
        let tasks = || {
            tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks()
        };
        let before = tasks();
        let leases: Vec<Arc<Scripted>> = (0..100).map(|_| Arc::default()).collect();
        let guards: Vec<LockGuard> = leases
            .iter()
            .map(|l| {
                let mut p = parts(Arc::clone(l), Duration::ZERO);
                p.renew = true;
                p.into_guard()
            })
            .collect();
        // One scheduler for the runtime (started here or by an earlier test), no task per guard.
        assert!(
            tasks() <= before + 1,
            "{} tasks for 100 guards",
            tasks() - before
        );
        // A 1 s lease renews every ~333 ms: three renewals each in 1.05 s.
        tokio::time::sleep(Duration::from_millis(1050)).await;
        for (i, l) in leases.iter().enumerate() {
            let n = l.renewals.load(Ordering::SeqCst);
            assert_eq!(n, 3, "guard {i} renewed {n} times in 1.05 s");
        }
        assert!(guards.iter().all(|g| !g.is_lost()));
        // Released guards are renewed no more; the others go on.
        let mut guards = guards.into_iter();
        for g in guards.by_ref().take(50) {
            g.release().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let counts: Vec<usize> = leases
            .iter()
            .map(|l| l.renewals.load(Ordering::SeqCst))
            .collect();
        assert!(
            counts[..50].iter().all(|&n| n == 3),
            "renewed after release: {counts:?}"
        );
        assert!(
            counts[50..].iter().all(|&n| n == 6),
            "stopped renewing: {counts:?}"
        );
        guards.for_each(LockGuard::abandon);
    }

    /// A lease whose renewals panic.
    struct Panics;

    #[async_trait]
    impl Lease for Panics {
        async fn renew(&self, _: Duration) -> Result<Option<Duration>, LockError> {
            panic!("a renewal bug");
        }

        async fn release(&self) -> Result<(), LockError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_panicking_renewal_loses_its_own_guard_and_no_other() {
        let healthy = Arc::new(Scripted::default());
        let mut p = parts(Arc::clone(&healthy), Duration::ZERO);
        p.renew = true;
        let ok = p.into_guard();
        let p = renewing(Arc::new(Panics));
        let bad = p.into_guard();
        let lost = tokio::time::timeout(Duration::from_millis(500), bad.lost()).await;
        let e = lost.expect("a guard whose renewal panicked was not reported lost");
        assert!(e.to_string().contains("panicked"), "{e}");
        // Lost at the first renewal (~333 ms); the healthy guard renews at ~333, 667, 1000 ms.
        tokio::time::sleep(Duration::from_millis(900)).await;
        let n = healthy.renewals.load(Ordering::SeqCst);
        assert!(
            n >= 3,
            "the others stopped renewing: {n} renewals in ~1.2 s"
        );
        assert!(!ok.is_lost(), "{ok:?}");
        ok.abandon();
        bad.abandon();
    }

    #[tokio::test(start_paused = true)]
    async fn released_guards_do_not_pile_up_in_the_scheduler() {
        // Acquire and release 10,000 times with an hour's lease: each leaves an entry due in
        // an hour, which must be swept rather than kept until then.
        for _ in 0..10_000 {
            let mut p = parts(Arc::new(Scripted::default()), Duration::ZERO);
            p.ttl = Duration::from_secs(3600);
            p.validity = Some(p.ttl);
            let g = p.into_guard();
            // Held for a moment: the scheduler files its entry meanwhile.
            tokio::task::yield_now().await;
            g.release().await.unwrap();
        }
        let n = crate::renewals::entries_on_this_runtime().await;
        assert!(n <= 2048, "{n} entries kept for 10,000 released guards");
    }

    /// A lease whose renewals hang until cancelled, counting cancellations.
    #[derive(Default)]
    struct Hung {
        started: AtomicUsize,
        cancelled: Arc<AtomicUsize>,
    }

    struct CountOnDrop(Arc<AtomicUsize>);

    impl Drop for CountOnDrop {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[async_trait]
    impl Lease for Hung {
        async fn renew(&self, _: Duration) -> Result<Option<Duration>, LockError> {
            self.started.fetch_add(1, Ordering::SeqCst);
            let _count = CountOnDrop(Arc::clone(&self.cancelled));
            std::future::pending().await
        }

        async fn release(&self) -> Result<(), LockError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn release_cancels_a_renewal_in_flight() {
        let lease = Arc::new(Hung::default());
        let p = renewing(Arc::clone(&lease) as Arc<dyn Lease>);
        let g = p.into_guard();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(lease.started.load(Ordering::SeqCst), 1);
        assert_eq!(lease.cancelled.load(Ordering::SeqCst), 0);
        g.release().await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            lease.cancelled.load(Ordering::SeqCst),
            1,
            "the renewal outlived release"
        );
    }

    /// A lease whose first renewal takes 300 ms and later ones 50 ms, tracking overlap.
    #[derive(Default)]
    struct Slow {
        calls: AtomicUsize,
        in_flight: AtomicUsize,
        max_in_flight: AtomicUsize,
    }

    #[async_trait]
    impl Lease for Slow {
        async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
            let n = self.calls.fetch_add(1, Ordering::SeqCst);
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.max_in_flight.fetch_max(now, Ordering::SeqCst);
            let delay = if n == 0 { 300 } else { 50 };
            tokio::time::sleep(Duration::from_millis(delay)).await;
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok(Some(ttl))
        }

        async fn release(&self) -> Result<(), LockError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn extend_and_renewal_never_overlap_and_the_later_ttl_wins() {
        let lease = Arc::new(Slow::default());
        let mut p = renewing(Arc::clone(&lease) as Arc<dyn Lease>);
        p.ttl = Duration::from_millis(900);
        p.validity = Some(Duration::from_millis(900));
        let g = p.into_guard();
        // The background renewal starts at 300 ms and answers at 600 ms; extend asks at 400 ms.
        tokio::time::sleep(Duration::from_millis(400)).await;
        g.extend(Duration::from_secs(2)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert_eq!(
            lease.max_in_flight.load(Ordering::SeqCst),
            1,
            "extend overlapped a renewal"
        );
        assert_eq!(
            g.ttl(),
            Duration::from_secs(2),
            "an older renewal's result overwrote extend's"
        );
        assert!(!g.is_lost(), "{g:?}");
        g.abandon();
    }

    /// A lease whose renewals fail after `delay` with an error that leaves the outcome
    /// unknown (the store may have applied them: a timeout, a lost reply).
    struct Unknown {
        delay: Duration,
    }

    #[async_trait]
    impl Lease for Unknown {
        async fn renew(&self, _: Duration) -> Result<Option<Duration>, LockError> {
            tokio::time::sleep(self.delay).await;
            Err(LockError::unavailable("test", None, "timed out", None))
        }

        async fn release(&self) -> Result<(), LockError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_extend_of_unknown_outcome_shortens_the_lease() {
        let mut p = renewing(Arc::new(Unknown {
            delay: Duration::from_secs(1),
        }));
        p.ttl = Duration::from_secs(30);
        p.validity = Some(p.ttl);
        let g = p.into_guard();
        let started = Instant::now();
        let e = g.extend(Duration::from_secs(2)).await.unwrap_err();
        assert!(matches!(e, LockError::Unavailable { .. }), "{e:?}");
        // The store may have applied the 2 s lease when the request was sent.
        let left = g.remaining_validity().expect("still believed held for now");
        assert!(
            started.elapsed() + left <= Duration::from_secs(2),
            "believes {left:?} more after an unknown 2 s extend"
        );
        // And nothing confirms it before that runs out: lost by then.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        assert!(g.is_lost(), "{g:?}");
        g.abandon();
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_shorter_extend_still_ends_the_guard_on_time() {
        let lease = Arc::new(Hung::default());
        let mut p = renewing(Arc::clone(&lease) as Arc<dyn Lease>);
        p.ttl = Duration::from_secs(30);
        p.validity = Some(p.ttl);
        let g = p.into_guard();
        // The caller gives up on the extend; the store may have applied the 2 s lease.
        let _ = tokio::time::timeout(Duration::from_millis(100), g.extend(Duration::from_secs(2)))
            .await;
        tokio::time::sleep(Duration::from_millis(1950)).await;
        assert!(g.is_lost(), "believed past a 2 s lease it may hold: {g:?}");
        g.abandon();
    }

    #[tokio::test(start_paused = true)]
    async fn a_longer_extend_of_unknown_outcome_keeps_the_old_lease() {
        let mut p = parts(
            Arc::new(Scripted {
                refuse: true,
                ..Default::default()
            }),
            Duration::ZERO,
        );
        p.ttl = Duration::from_secs(10);
        p.validity = Some(p.ttl);
        let g = p.into_guard();
        assert!(g.extend(Duration::from_secs(60)).await.is_err());
        let left = g.remaining_validity().unwrap();
        assert!(left <= Duration::from_secs(10), "{left:?}");
        assert!(left > Duration::from_secs(9), "{left:?}");
        g.abandon();
    }

    /// A lease whose renewals succeed after `delay`, vouching for the whole `ttl`.
    struct Late {
        delay: Duration,
    }

    #[async_trait]
    impl Lease for Late {
        async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
            tokio::time::sleep(self.delay).await;
            Ok(Some(ttl))
        }

        async fn release(&self) -> Result<(), LockError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn extend_confirmed_after_its_own_validity_is_an_error_and_the_lock_is_lost() {
        let mut p = renewing(Arc::new(Late {
            delay: Duration::from_secs(3),
        }));
        p.ttl = Duration::from_secs(30);
        p.validity = Some(p.ttl);
        let g = p.into_guard();
        // Applied at the latest when the reply left the store: 2 s from sending ran out first.
        let e = g.extend(Duration::from_secs(2)).await.unwrap_err();
        assert!(matches!(e, LockError::NotHeld { .. }), "{e:?}");
        assert!(g.is_lost(), "{g:?}");
        g.abandon();
    }

    #[tokio::test(start_paused = true)]
    async fn extend_never_succeeds_on_a_guard_lost_while_it_ran() {
        let lost = LostSignal::new();
        let mut p = renewing(Arc::new(Late {
            delay: Duration::from_millis(500),
        }));
        p.lost = lost.clone();
        let g = p.into_guard();
        let extend = g.extend(Duration::from_secs(5));
        tokio::pin!(extend);
        tokio::select! {
            _ = &mut extend => panic!("extend finished before its store call"),
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        // The backend's own watcher sees the session end while the renewal is in flight.
        lost.mark_lost("session expired");
        let r = extend.await;
        assert!(matches!(r, Err(LockError::NotHeld { .. })), "{r:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_retried_within_a_short_validity() {
        // A 3 s claim on a 30 s lease (a direct grant): the first renewal fails.
        let lease = Arc::new(Flaky::default());
        let mut p = renewing(Arc::clone(&lease) as Arc<dyn Lease>);
        p.ttl = Duration::from_secs(30);
        p.validity = Some(Duration::from_secs(3));
        let g = p.into_guard();
        tokio::time::sleep(Duration::from_millis(2990)).await;
        assert!(
            lease.calls.load(Ordering::SeqCst) >= 2,
            "the failed renewal was not retried before the claim ran out"
        );
        assert!(!g.is_lost(), "{g:?}");
        g.abandon();
    }

    /// A lease whose first renewal fails and later ones succeed.
    #[derive(Default)]
    struct Flaky {
        calls: AtomicUsize,
    }

    #[async_trait]
    impl Lease for Flaky {
        async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
            if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
                Err(LockError::unavailable(
                    "test",
                    None,
                    "connection reset",
                    None,
                ))
            } else {
                Ok(Some(ttl))
            }
        }

        async fn release(&self) -> Result<(), LockError> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn start_renews_a_late_reply_or_gives_the_lock_back() {
        // A prompt reply: no extra round trip.
        let prompt = Arc::new(Scripted::default());
        let g = parts(Arc::clone(&prompt), Duration::from_millis(100))
            .start()
            .await
            .unwrap();
        assert_eq!(prompt.renewals.load(Ordering::SeqCst), 0);
        assert!(g.remaining_validity().unwrap() <= Duration::from_millis(900));
        g.abandon();

        // A reply after 700 ms of a 1 s lease: renewed, and valid for a whole lease from now.
        let late = Arc::new(Scripted::default());
        let g = parts(Arc::clone(&late), Duration::from_millis(700))
            .start()
            .await
            .unwrap();
        assert_eq!(late.renewals.load(Ordering::SeqCst), 1);
        assert!(g.remaining_validity().unwrap() > Duration::from_millis(900));
        assert!(!g.is_lost());
        g.abandon();

        // Late and the renewal fails: the lock is given back, the caller gets Unavailable.
        let dead = Arc::new(Scripted {
            refuse: true,
            ..Default::default()
        });
        let e = parts(Arc::clone(&dead), Duration::from_millis(700))
            .start()
            .await
            .unwrap_err();
        assert!(matches!(e, LockError::Unavailable { .. }), "{e:?}");
        assert!(dead.released.load(Ordering::SeqCst));
    }
}

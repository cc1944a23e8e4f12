//! The same locks for synchronous callers: no `async`, no runtime to set up.
//!
//! [`connect`] starts a small multi-thread Tokio runtime owned by the returned [`Lock`] and
//! shared by every [`Guard`] it hands out; each call blocks the caller's thread until the store
//! answers, while the runtime's own threads keep every held lease renewed. A guard therefore
//! stays held while its thread sleeps or does synchronous work, exactly as an async guard
//! does, and it has the same fencing token, lost signal, `extend`, and release on drop.
//! Connect once and share the `Lock` across threads (it is `Send + Sync`): each `connect`
//! starts a runtime of its own.
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock::{blocking, AcquireOptions};
//!
//! fn nightly() -> Result<(), distlock::LockError> {
//!     let lock = blocking::connect("sqlite://./distlock.db")?;
//!     let opts = AcquireOptions::new().wait(Duration::from_secs(10));
//!     let guard = lock.acquire("nightly-report", &opts)?;
//!     // Synchronous work: the facade's runtime renews the lease meanwhile.
//!     std::thread::sleep(Duration::from_secs(60));
//!     if guard.is_lost() {
//!         eprintln!("lost the lock; the writes after this point are not protected");
//!     }
//!     guard.release()
//! }
//! ```
//!
//! # Inside a Tokio runtime
//! Blocking a runtime's thread stalls it, and can deadlock it when the store's answer needs
//! that thread. So wherever a Tokio runtime is current (async code, a runtime's `block_on`,
//! `spawn_blocking`) every call here returns [`LockError::InvalidConfig`] at once, saying to
//! use the async API ([`crate::connect`]) there. Dropping a guard or a lock there does not block
//! either: the guard is released in the background on the facade's runtime.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::{
    AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore, Leader, LeaderChange,
    LockError, LockGuard, LockInfo, RwLockInfo, SemaphoreInfo,
};
use tokio::runtime::{EnterGuard, Runtime};

/// The facade's worker threads per runtime: renewals and connection tasks are light.
const WORKER_THREADS: usize = 2;

/// How long a guard's drop waits for the store to confirm its release (the lease frees the lock
/// if it does not answer by then).
const DROP_RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the last owner of a runtime waits for its threads to stop.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(1);

/// Connects to the backend a URL names, for blocking use (the URL as [`crate::connect`]).
///
/// # Errors
/// [`LockError::InvalidConfig`] inside a Tokio runtime (see the [module docs](self)), for an
/// unknown scheme and bad parameters; [`LockError::Unavailable`] when the store cannot be
/// reached; [`LockError::Backend`] when the runtime cannot be started.
pub fn connect(url: &str) -> Result<Lock, LockError> {
    let rt = Rt::start("connect")?;
    let lock = rt.block_on("connect", crate::connect(url))?;
    Ok(Lock(Client::new(lock.backend_name().to_owned(), lock, rt)))
}

/// Connects a counting semaphore on the store a URL names, for blocking use (as
/// [`crate::connect_semaphore`]).
///
/// # Errors
/// As [`connect`] and [`crate::connect_semaphore`].
pub fn connect_semaphore(url: &str) -> Result<Semaphore, LockError> {
    let rt = Rt::start("connect_semaphore")?;
    let sem = rt.block_on("connect_semaphore", crate::connect_semaphore(url))?;
    Ok(Semaphore(Client::new(
        sem.backend_name().to_owned(),
        sem,
        rt,
    )))
}

/// Connects a read-write lock on the store a URL names, for blocking use (as
/// [`crate::connect_rwlock`]).
///
/// # Errors
/// As [`connect`] and [`crate::connect_rwlock`].
pub fn connect_rwlock(url: &str) -> Result<RwLock, LockError> {
    let rt = Rt::start("connect_rwlock")?;
    let rw = rt.block_on("connect_rwlock", crate::connect_rwlock(url))?;
    Ok(RwLock(Client::new(rw.backend_name().to_owned(), rw, rt)))
}

/// A blocking [`DistributedLock`], from [`connect`]. Every method blocks the calling thread;
/// inside a Tokio runtime each returns [`LockError::InvalidConfig`] instead.
pub struct Lock(Client<dyn DistributedLock>);

impl Lock {
    /// Acquires `name`, waiting up to `opts.wait`, as [`DistributedLock::acquire`].
    ///
    /// # Errors
    /// As [`DistributedLock::acquire`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn acquire(&self, name: &str, opts: &AcquireOptions) -> Result<Guard, LockError> {
        self.0
            .take("Lock::acquire", self.0.get()?.acquire(name, opts))
    }

    /// Acquires `name` only if nobody holds it, as [`DistributedLock::try_acquire`].
    ///
    /// # Errors
    /// As [`DistributedLock::try_acquire`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn try_acquire(
        &self,
        name: &str,
        opts: &AcquireOptions,
    ) -> Result<Option<Guard>, LockError> {
        self.0
            .try_take("Lock::try_acquire", self.0.get()?.try_acquire(name, opts))
    }

    /// Who holds `name` now, as [`DistributedLock::inspect`] (a snapshot).
    ///
    /// # Errors
    /// As [`DistributedLock::inspect`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        self.0
            .rt
            .block_on("Lock::inspect", self.0.get()?.inspect(name))
    }

    /// Campaigns in `group` as `identity` until this caller leads (or `opts.wait` runs out),
    /// as [`DistributedLock::campaign`]: the guard is the leadership.
    ///
    /// # Errors
    /// As [`DistributedLock::campaign`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn campaign(
        &self,
        group: &str,
        identity: &str,
        opts: &AcquireOptions,
    ) -> Result<Guard, LockError> {
        self.0.take(
            "Lock::campaign",
            self.0.get()?.campaign(group, identity, opts),
        )
    }

    /// Who leads `group` now, as [`DistributedLock::leader`] (a snapshot).
    ///
    /// # Errors
    /// As [`DistributedLock::leader`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn leader(&self, group: &str) -> Result<Option<Leader>, LockError> {
        self.0
            .rt
            .block_on("Lock::leader", self.0.get()?.leader(group))
    }

    /// The leader changes of `group`, read every 500 ms, as [`crate::observe`]: see
    /// [`Lock::observe_every`].
    ///
    /// # Errors
    /// As [`crate::observe`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn observe(&self, group: &str) -> Result<LeaderChanges, LockError> {
        self.changes(|lock| crate::observe(lock, group))
    }

    /// The leader changes of `group` as an iterator, with [`crate::observe_every`]'s
    /// guarantees: the current leader first (`None`: nobody leads), then each change; each
    /// `next` blocks the thread until the next change. Reading stops when it is dropped.
    ///
    /// # Errors
    /// As [`crate::observe_every`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn observe_every(
        &self,
        group: &str,
        interval: Duration,
    ) -> Result<LeaderChanges, LockError> {
        self.changes(|lock| crate::observe_every(lock, group, interval))
    }

    fn changes<F>(&self, observe: F) -> Result<LeaderChanges, LockError>
    where
        F: FnOnce(Arc<dyn DistributedLock>) -> Result<crate::LeaderChanges, LockError>,
    {
        refuse_inside_runtime("Lock::observe")?;
        Ok(LeaderChanges {
            changes: Some(observe(self.0.shared()?)?),
            rt: Arc::clone(&self.0.rt),
        })
    }

    /// The backend label, e.g. `postgres-row`.
    pub fn backend_name(&self) -> &str {
        self.0.backend()
    }
}

/// The leader changes of one group, from [`Lock::observe`]: an [`Iterator`] of
/// [`LeaderChange`]s whose `next` blocks until the next change. Items are as
/// [`crate::LeaderChanges`]'s; called inside a Tokio runtime, `next` yields
/// [`LockError::InvalidConfig`] once and the iterator ends.
pub struct LeaderChanges {
    /// `None` once ended, and while being dropped.
    changes: Option<crate::LeaderChanges>,
    rt: Arc<Rt>,
}

impl Iterator for LeaderChanges {
    type Item = LeaderChange;

    fn next(&mut self) -> Option<LeaderChange> {
        let changes = self.changes.as_mut()?;
        match self
            .rt
            .block_on("LeaderChanges::next", async { Ok(changes.next().await) })
        {
            Ok(Some(change)) => Some(change),
            Ok(None) => {
                self.end();
                None
            }
            Err(refused) => {
                self.end();
                Some(Err(refused))
            }
        }
    }
}

impl LeaderChanges {
    /// Ends the observation on the facade's runtime (a read in progress, and the lock handle it
    /// may hold last, are dropped where they were made).
    fn end(&mut self) {
        let _on = self.rt.enter();
        drop(self.changes.take());
    }
}

impl Drop for LeaderChanges {
    fn drop(&mut self) {
        self.end();
    }
}

impl fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderChanges")
            .field("changes", &self.changes)
            .finish_non_exhaustive()
    }
}

/// A blocking [`DistributedSemaphore`], from [`connect_semaphore`].
pub struct Semaphore(Client<dyn DistributedSemaphore>);

impl Semaphore {
    /// Takes one of `max_count` permits of `name`, as [`DistributedSemaphore::acquire`].
    ///
    /// # Errors
    /// As [`DistributedSemaphore::acquire`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn acquire(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
    ) -> Result<Guard, LockError> {
        self.0.take(
            "Semaphore::acquire",
            self.0.get()?.acquire(name, max_count, opts),
        )
    }

    /// Takes a permit only if one is free, as [`DistributedSemaphore::try_acquire`].
    ///
    /// # Errors
    /// As [`DistributedSemaphore::try_acquire`]; [`LockError::InvalidConfig`] inside a Tokio
    /// runtime.
    pub fn try_acquire(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
    ) -> Result<Option<Guard>, LockError> {
        self.0.try_take(
            "Semaphore::try_acquire",
            self.0.get()?.try_acquire(name, max_count, opts),
        )
    }

    /// Who holds and waits for `name` now, as [`DistributedSemaphore::inspect`].
    ///
    /// # Errors
    /// As [`DistributedSemaphore::inspect`]; [`LockError::InvalidConfig`] inside a Tokio
    /// runtime.
    pub fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        self.0
            .rt
            .block_on("Semaphore::inspect", self.0.get()?.inspect(name))
    }
}

/// A blocking [`DistributedRwLock`], from [`connect_rwlock`].
pub struct RwLock(Client<dyn DistributedRwLock>);

impl RwLock {
    /// Takes `name` for reading, as [`DistributedRwLock::read`].
    ///
    /// # Errors
    /// As [`DistributedRwLock::read`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn read(&self, name: &str, opts: &AcquireOptions) -> Result<Guard, LockError> {
        self.0.take("RwLock::read", self.0.get()?.read(name, opts))
    }

    /// Takes `name` for writing, as [`DistributedRwLock::write`].
    ///
    /// # Errors
    /// As [`DistributedRwLock::write`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn write(&self, name: &str, opts: &AcquireOptions) -> Result<Guard, LockError> {
        self.0
            .take("RwLock::write", self.0.get()?.write(name, opts))
    }

    /// Takes `name` for reading only if no writer holds or waits, as
    /// [`DistributedRwLock::try_read`].
    ///
    /// # Errors
    /// As [`DistributedRwLock::try_read`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn try_read(&self, name: &str, opts: &AcquireOptions) -> Result<Option<Guard>, LockError> {
        self.0
            .try_take("RwLock::try_read", self.0.get()?.try_read(name, opts))
    }

    /// Takes `name` for writing only if nobody holds or waits, as
    /// [`DistributedRwLock::try_write`].
    ///
    /// # Errors
    /// As [`DistributedRwLock::try_write`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn try_write(&self, name: &str, opts: &AcquireOptions) -> Result<Option<Guard>, LockError> {
        self.0
            .try_take("RwLock::try_write", self.0.get()?.try_write(name, opts))
    }

    /// Who holds and waits for `name` now, as [`DistributedRwLock::inspect`].
    ///
    /// # Errors
    /// As [`DistributedRwLock::inspect`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        self.0
            .rt
            .block_on("RwLock::inspect", self.0.get()?.inspect(name))
    }
}

/// Proof of holding a lock, a permit or a read-write lock side, for blocking callers: a
/// [`LockGuard`] whose lease the facade's runtime keeps renewing while this thread blocks.
///
/// Dropping it releases the lock: outside a Tokio runtime the drop waits (at most 10 s) for
/// the store to confirm; inside one the release runs in the background.
#[must_use = "dropping a Guard releases the lock"]
pub struct Guard {
    name: String,
    fencing_token: u64,
    /// `None` only once released or dropped.
    inner: Option<LockGuard>,
    rt: Arc<Rt>,
}

impl Guard {
    /// The lock name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This acquisition's fencing token, as [`LockGuard::fencing_token`]: send it with every
    /// write the lock protects.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// Whether the lock is known to be lost (lease ran out, session or connection gone,
    /// removed by someone else). Once `true`, always `true`.
    pub fn is_lost(&self) -> bool {
        self.inner.as_ref().is_none_or(LockGuard::is_lost)
    }

    /// How long the lock stays valid without another renewal, as
    /// [`LockGuard::remaining_validity`].
    pub fn remaining_validity(&self) -> Option<Duration> {
        self.inner.as_ref().and_then(LockGuard::remaining_validity)
    }

    /// Extends the lease to `ttl` from now, as [`LockGuard::extend`].
    ///
    /// # Errors
    /// As [`LockGuard::extend`]; [`LockError::InvalidConfig`] inside a Tokio runtime.
    pub fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        match &self.inner {
            Some(g) => self.rt.block_on("Guard::extend", g.extend(ttl)),
            None => Err(self.released()),
        }
    }

    /// Releases the lock and waits for the store to confirm, as [`LockGuard::release`].
    ///
    /// # Errors
    /// As [`LockGuard::release`]. Inside a Tokio runtime, [`LockError::InvalidConfig`], and
    /// the lock is released in the background as on drop.
    pub fn release(mut self) -> Result<(), LockError> {
        let Some(g) = self.inner.take() else {
            return Err(self.released());
        };
        if let Err(e) = refuse_inside_runtime("Guard::release") {
            // Dropped at the end of this call: released in the background on our runtime.
            self.inner = Some(g);
            return Err(e);
        }
        self.rt.block_on("Guard::release", g.release())
    }

    fn released(&self) -> LockError {
        LockError::not_held(&self.name, self.rt.backend.as_str(), "already released")
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(g) = self.inner.take() else {
            return;
        };
        if in_runtime() {
            // LockGuard's own drop spawns the release on the runtime entered here.
            let _on = self.rt.enter();
            drop(g);
        } else {
            // A failed release is logged by LockGuard::release; a silent store leaves it to
            // the lease. Either way a drop has no caller to tell.
            let _ = self.rt.block_on("Guard::drop", async move {
                // Made inside the runtime: a timer needs one.
                tokio::time::timeout(DROP_RELEASE_TIMEOUT, g.release())
                    .await
                    .unwrap_or(Ok(()))
            });
        }
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.name)
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.is_lost())
            .finish()
    }
}

macro_rules! debug_client {
    ($($t:ident),*) => {$(
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct(stringify!($t))
                    .field("backend", &self.0.backend())
                    .finish_non_exhaustive()
            }
        }
    )*};
}
debug_client!(Lock, Semaphore, RwLock);

/// An async client and the runtime it runs on; dropped with that runtime entered (store clients
/// may spawn their cleanup when dropped).
struct Client<T: ?Sized> {
    /// `None` only while being dropped.
    inner: Option<Arc<T>>,
    rt: Arc<Rt>,
}

impl<T: ?Sized> Client<T> {
    fn new(backend: String, inner: Arc<T>, mut rt: Rt) -> Self {
        rt.backend = backend;
        Client {
            inner: Some(inner),
            rt: Arc::new(rt),
        }
    }

    fn get(&self) -> Result<&T, LockError> {
        self.inner.as_deref().ok_or_else(being_dropped)
    }

    fn backend(&self) -> &str {
        &self.rt.backend
    }

    fn shared(&self) -> Result<Arc<T>, LockError> {
        self.inner.clone().ok_or_else(being_dropped)
    }

    /// Blocks on an acquisition and hands its guard out with this client's runtime.
    fn take<F>(&self, what: &str, acquire: F) -> Result<Guard, LockError>
    where
        F: Future<Output = Result<LockGuard, LockError>>,
    {
        Ok(self.guard(self.rt.block_on(what, acquire)?))
    }

    /// [`Client::take`] for an attempt that may find the lock held.
    fn try_take<F>(&self, what: &str, attempt: F) -> Result<Option<Guard>, LockError>
    where
        F: Future<Output = Result<Option<LockGuard>, LockError>>,
    {
        Ok(self.rt.block_on(what, attempt)?.map(|g| self.guard(g)))
    }

    fn guard(&self, g: LockGuard) -> Guard {
        Guard {
            name: g.name().to_owned(),
            fencing_token: g.fencing_token(),
            inner: Some(g),
            rt: Arc::clone(&self.rt),
        }
    }
}

impl<T: ?Sized> Drop for Client<T> {
    fn drop(&mut self) {
        let _on = self.rt.enter();
        drop(self.inner.take());
    }
}

/// The facade's runtime, shared by a client and its guards; shut down when the last goes.
struct Rt {
    /// `None` only while being dropped.
    rt: Option<Runtime>,
    backend: String,
}

impl Rt {
    fn start(what: &str) -> Result<Rt, LockError> {
        refuse_inside_runtime(what)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(WORKER_THREADS)
            .thread_name("distlock-blocking")
            .enable_all()
            .build()
            .map_err(|e| {
                LockError::backend(
                    "blocking",
                    None,
                    "cannot start the blocking facade's Tokio runtime",
                    Some(Box::new(e) as distlock_core::BoxError),
                )
            })?;
        Ok(Rt {
            rt: Some(rt),
            backend: String::new(),
        })
    }

    /// Runs `fut` to completion on this runtime, blocking the calling thread; refuses inside a
    /// Tokio runtime, where blocking could stall or deadlock it.
    fn block_on<T, F>(&self, what: &str, fut: F) -> Result<T, LockError>
    where
        F: Future<Output = Result<T, LockError>>,
    {
        refuse_inside_runtime(what)?;
        match &self.rt {
            Some(rt) => rt.block_on(fut),
            None => Err(LockError::invalid_config(
                "the blocking facade's runtime is shutting down",
            )),
        }
    }

    fn enter(&self) -> Option<EnterGuard<'_>> {
        self.rt.as_ref().map(Runtime::enter)
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            if in_runtime() {
                // Waiting for threads here would block the caller's runtime.
                rt.shutdown_background();
            } else {
                rt.shutdown_timeout(SHUTDOWN_TIMEOUT);
            }
        }
    }
}

fn being_dropped() -> LockError {
    LockError::invalid_config("the blocking client is being dropped")
}

fn in_runtime() -> bool {
    tokio::runtime::Handle::try_current().is_ok()
}

fn refuse_inside_runtime(what: &str) -> Result<(), LockError> {
    if in_runtime() {
        return Err(LockError::invalid_config(format!(
            "distlock::blocking {what} was called inside a Tokio runtime (async code, block_on or \
             spawn_blocking), where blocking would stall it: use the async API there \
             (distlock::connect and .await)"
        )));
    }
    Ok(())
}

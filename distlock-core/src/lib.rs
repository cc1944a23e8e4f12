//! The distlock contract, shared by every backend.
//!
//! * [`DistributedLock`]: acquire / try-acquire a named lock; object safe
//!   (`Arc<dyn DistributedLock>`).
//! * [`LockGuard`]: proof of holding it, with a [fencing token](LockGuard::fencing_token), a
//!   [`lost`](LockGuard::lost) signal, background lease renewal, `extend`, and release on drop.
//! * [`LockError`]: one error type for every backend.
//! * [`AcquireOptions`], [`Capabilities`], [`LockInfo`], [`SecretUrl`]: what a caller passes
//!   and reads; [`Listing`] and [`Broken`] ([`operator`]): what `list` and `break_lock` answer.
//! * [`LockExt`] ([`recipes`]): work that stops when its lock is lost (`run_locked`) and
//!   several locks all-or-nothing without deadlock (`acquire_all` → [`MultiGuard`]), on every
//!   backend; leader election ([`elect`] → [`Leadership`], [`DistributedLock::leader`] for
//!   observers, [`observe()`] → [`LeaderChanges`] for a stream of leader changes).
//! * [`DistributedSemaphore`] (at most N holders of a name) and [`DistributedRwLock`] (many
//!   readers or one writer, writers not starved): guards of the same kind, tokens from the
//!   name's one counter.
//! * [`memory`]: an in-process reference backend (tests, examples; no coordination between
//!   processes); [`permits`]: its semaphore and read-write lock.
//!
//! For backend authors, [`backend`] holds the toolkit: [`backend::LockBackend`] (the one
//! operation a store implements), the lease and guard parts, name rules, URL parsing, waits
//! and backoff; `conformance` and `fault` (feature `conformance`) hold the suite every backend
//! runs unchanged and a fault-injecting TCP proxy. The facade crate `distlock` re-exports the
//! contract above, not the toolkit.
//!
//! # Fencing
//! For one lock name on one deployment, every successful acquisition gets a token strictly
//! greater than every earlier holder's. A lock alone cannot stop a holder that was paused past
//! its lease from writing; a resource that rejects tokens lower than the highest it has seen
//! can.

pub mod backend;
pub mod capability;
pub mod error;
pub mod fence;
pub mod guard;
pub mod info;
pub mod leader;
pub mod lock;
pub mod memory;
pub mod metrics;
pub mod operator;
pub mod options;
pub mod permits;
pub mod recipes;
mod renewals;
pub mod rwlock;
pub mod secret;
pub mod semaphore;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "conformance")]
pub mod fault;

pub use capability::{Capabilities, CrashRelease, Wakeup};
pub use error::{BoxError, LockError};
pub use guard::{LockContext, LockGuard};
pub use info::{Access, LockInfo, RwLockInfo, SemaphoreInfo};
pub use leader::Leader;
pub use lock::DistributedLock;
pub use operator::{Broken, Listed, Listing};
pub use options::{validate_identity, MAX_IDENTITY_BYTES};
pub use options::{AcquireOptions, DEFAULT_TTL};
pub use recipes::{
    elect, elect_with, observe, observe_every, LeaderChange, LeaderChanges, Leadership, LockExt,
    MultiGuard,
};
pub use rwlock::DistributedRwLock;
pub use secret::{Secret, SecretUrl};
pub use semaphore::{DistributedSemaphore, MAX_PERMITS};

//! The distlock contract, shared by every backend.
//!
//! * [`DistributedLock`]: acquire / try-acquire a named lock; object safe
//!   (`Arc<dyn DistributedLock>`).
//! * [`LockGuard`]: proof of holding it, with a [fencing token](LockGuard::fencing_token), a
//!   [`lost`](LockGuard::lost) signal, background lease renewal, `extend`, and release on drop.
//! * [`LockError`]: one error type for every backend.
//! * [`Lease`]: the two store operations a backend supplies for a held lock; the guard
//!   machinery is written once here on top of them.
//! * Shared rules and helpers: [`name`] rules, [`config`] URL parsing, [`duration`] parsing,
//!   [`wait`] deadlines and backoff, [`cancel`] safety, owner [`token`]s.
//! * [`conformance`] (feature `conformance`): the suite every backend runs unchanged.
//! * [`memory`]: an in-process reference backend.
//!
//! # Fencing
//! For one lock name on one deployment, every successful acquisition gets a token strictly
//! greater than every earlier holder's. A lock alone cannot stop a holder that was paused past
//! its lease from writing; a resource that rejects tokens lower than the highest it has seen
//! can.

pub mod cancel;
pub mod capability;
pub mod config;
pub mod duration;
pub mod error;
pub mod guard;
pub mod lease;
pub mod local_queue;
pub mod lock;
pub mod lost;
pub mod memory;
pub mod name;
pub mod options;
pub mod secret;
pub mod token;
pub mod wait;

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "conformance")]
pub mod fault;

pub use cancel::CleanupOnDrop;
pub use capability::{Capabilities, CrashRelease, Wakeup};
pub use config::{DistlockUrl, HostPort, Params};
pub use duration::{format_duration, parse_duration};
pub use error::{BoxError, LockError};
pub use guard::{GuardParts, LockGuard};
pub use lease::Lease;
pub use lock::{DistributedLock, LockInfo};
pub use lost::LostSignal;
pub use options::{AcquireOptions, DEFAULT_TTL};
pub use secret::{Secret, SecretUrl};
pub use token::owner_token;
pub use wait::{Backoff, Deadline};

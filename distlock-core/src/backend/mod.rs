//! The toolkit for writing a backend — not for lock users.
//!
//! A backend implements [`LockBackend`]: one required operation, [`LockBackend::attempt`],
//! plus what it guarantees ([`LockBackend::capabilities`]) and its label. Every
//! `LockBackend` is a [`DistributedLock`](crate::DistributedLock) through one blanket
//! implementation that does, once for every store, what users rely on: name and option
//! validation, the tracing span, and mapping a wait that ran out to
//! [`LockError::Timeout`](crate::LockError::Timeout).
//!
//! The rest of this module is what the backends share so each writes it once:
//! * [`Lease`] and [`GuardParts`]: the two store calls a held lock needs and the parts a guard
//!   is built from ([`GuardParts::into_guard`], [`GuardParts::start`]); renewal, `lost()`,
//!   `extend` and release-on-drop are written once in the guard.
//! * [`LostSignal`]: the flag behind `LockGuard::lost`, for a backend's own watchers.
//! * [`name`] rules, [`url`] parsing ([`DistlockUrl`], [`Params`]), [`duration`] parsing,
//!   [`wait`] deadlines and backoff, [`local_queue`] (one waiter per process and lock polls),
//!   [`cancel`] cleanup on drop, [`handoff`] (saying an acquisition waited behind a holder), owner [`token`]s, and [`PerRuntime`] (a wake-up connection
//!   the clients of one process share).
//!
//! The facade crate `distlock` does not re-export this module.

pub mod attempt;
pub mod cancel;
pub mod cert_dates;
pub mod credentials;
pub mod duration;
pub mod handoff;
pub mod lease;
pub mod local_queue;
pub mod lost;
pub mod name;
pub mod per_runtime;
pub mod queue;
pub mod tls_failure;
pub mod token;
pub mod url;
pub mod wait;

pub use crate::guard::GuardParts;
pub use attempt::{Attempt, LockBackend, RwLockBackend, SemaphoreBackend, STALL_BOUND};
pub use cancel::CleanupOnDrop;
pub use duration::{format_duration, parse_duration};
pub use lease::Lease;
pub use local_queue::LocalQueue;
pub use lost::LostSignal;
pub use per_runtime::{PerRuntime, Share};
pub use queue::{HEARTBEAT, WAITER_TTL};
pub use token::owner_token;
pub use url::{redact, DistlockUrl, HostPort, Params};
pub use wait::{Backoff, Deadline};

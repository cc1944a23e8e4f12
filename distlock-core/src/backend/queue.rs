//! The waiter-queue vocabulary every store shares: a queued waiter's place lapses
//! [`WAITER_TTL`] after its last refresh, and a waiter refreshes it (and looks again) every
//! [`HEARTBEAT`], so a live waiter never loses its place while a dead one frees it within
//! seconds. One definition, so the stores' queues cannot drift apart.

use std::time::Duration;

/// A queued waiter that stops refreshing loses its place after this long.
pub const WAITER_TTL: Duration = Duration::from_secs(3);

/// A queued waiter refreshes its place, and looks at the lock, at least this often.
pub const HEARTBEAT: Duration = Duration::from_secs(1);

//! How long a ZooKeeper guard is valid: the bound each check through the leader buys, and the
//! pacing of those checks. [`ZkConfig`](crate::ZkConfig) derives the stall tolerance from it,
//! the guard's lease (`lease.rs`) and the acquisition (`backend.rs`) count validity by it.

use std::time::Duration;

/// How long after the start of a round trip that went through the ZooKeeper leader (a `sync`)
/// the session is certainly still alive there: a third of the session timeout `t`.
///
/// A client connected to a follower that is cut from its leader keeps its connection (the
/// follower notices the lost leader only after `syncLimit` ticks) while the leader, no longer
/// hearing of the session, expires it after `t` — and hands the lock on. The leader learns of a
/// session's activity from the follower's ping replies (every `tickTime / 2`); the client pings
/// at least every `t / 3` when idle. So when a `sync` sent at `t0` reached the leader, the leader
/// had heard of the session at some time ≥ `t0 − t/3 − tickTime/2`, and cannot expire it before
/// `t0 + 2t/3 − tickTime/2` ≥ `t0 + 5t/12` (ZooKeeper's default `minSessionTimeout` is
/// `2 × tickTime`, so `tickTime ≤ t/2`). `t/3` stays below that with a `t/12` margin.
pub(crate) fn leader_validity(session_timeout: Duration) -> Duration {
    session_timeout / 3
}

/// A renewal joins the session's `sync` sent at most 1/`JOIN_WITHIN` of the validity ago
/// instead of sending its own (see `Session::confirm`); it then vouches for that much less.
pub(crate) const JOIN_WITHIN: u32 = 20;

/// The `ttl` a guard renews with: the requested one, capped at half the session timeout (the
/// session, not the `ttl`, bounds how long a crashed holder keeps the lock).
pub(crate) fn renewal_ttl(ttl: Duration, session_timeout: Duration) -> Duration {
    ttl.min(session_timeout / 2)
}

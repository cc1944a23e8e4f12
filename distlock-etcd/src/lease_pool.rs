//! [`LeasePool`]: the leases a client's released locks left behind, kept for its next
//! acquisitions.
//!
//! Granting a lease is a raft write (a round of fsyncs on the cluster), and so is revoking it.
//! With a lease granted and revoked per acquisition, an uncontended acquire + release cost
//! four writes against the two (a put and a delete) of the raw primitive. A release whose
//! delete succeeded leaves its lease without a key; the next acquisition of the same client
//! with the same TTL takes that lease instead of granting one, as etcd's
//! `concurrency.Session` keeps one lease for many locks.
//!
//! # Guarantees
//! * One lease serves one acquisition at a time: a lease is in the pool only while no key of
//!   ours is under it, and [`LeasePool::take`] hands it to one caller. So two contenders of one
//!   client never share a key (`<name>/<lease hex>`, the layout `etcdctl lock` uses), and a
//!   lease's loss (revoked, expired) is only ever the loss of the one lock on it.
//! * A pooled lease is handed out only while at least nine tenths of its granted TTL are
//!   left, counted from when its last grant or keep-alive was sent (the server can only expire
//!   it later), and the guard's validity counts from that send. So a guard on a reused lease
//!   starts with nearly the margin a fresh grant gives: its first renewal, a third of the ttl
//!   in, still finds more than half the lease left. Leases with less are dropped: they carry
//!   no key and run out on the server. (A client cycling one lock grants a lease once per
//!   tenth of the TTL.)
//! * A lease that went while pooled (an operator's `etcdctl lease revoke`) cannot be told
//!   apart here; the enqueue under it fails with "lease not found" and the acquisition grants
//!   a fresh one (`contender::join`).
//! * At most [`MAX_IDLE`] leases per TTL are kept; the caller revokes the rest. A client that
//!   goes away leaves its pooled leases (without keys) to run out within their TTL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Idle leases kept per TTL: enough for a client with this many locks in flight at once (the
/// scaling benchmark's 1,000 waiters) to grant no lease on its next round.
pub(crate) const MAX_IDLE: usize = 1024;

/// A lease with no key under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Idle {
    /// The lease id.
    pub id: i64,
    /// The TTL the server granted.
    pub granted: Duration,
    /// When its last grant or keep-alive was sent: it lives at least `granted` from here.
    pub fresh_at: Instant,
}

impl Idle {
    /// Whether at least nine tenths of its granted TTL are left at `now`.
    fn fresh(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.fresh_at) < self.granted / 10
    }
}

/// A client's idle leases, by the TTL (whole seconds) they were asked for.
#[derive(Debug, Default)]
pub(crate) struct LeasePool {
    idle: Mutex<HashMap<i64, Vec<Idle>>>,
}

impl LeasePool {
    /// The most recently given back lease asked for with `secs` that still has nine tenths of
    /// its TTL; older ones met on the way are dropped.
    pub fn take(&self, secs: i64) -> Option<Idle> {
        let now = Instant::now();
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.get_mut(&secs)?;
        while let Some(lease) = stack.pop() {
            if lease.fresh(now) {
                return Some(lease);
            }
        }
        None
    }

    /// Keeps `lease` (asked for with `secs`, no key under it) for a later [`LeasePool::take`].
    /// Gives it back to the caller, to revoke, when [`MAX_IDLE`] are kept already.
    #[must_use]
    pub fn give_back(&self, secs: i64, lease: Idle) -> Option<Idle> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let stack = idle.entry(secs).or_default();
        if stack.len() >= MAX_IDLE {
            return Some(lease);
        }
        stack.push(lease);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(id: i64, age: Duration) -> Idle {
        Idle {
            id,
            granted: Duration::from_secs(10),
            fresh_at: Instant::now() - age,
        }
    }

    #[tokio::test]
    async fn takes_the_newest_fresh_lease_of_the_same_ttl() {
        let pool = LeasePool::default();
        assert!(pool.give_back(10, lease(1, Duration::ZERO)).is_none());
        assert!(pool
            .give_back(10, lease(2, Duration::from_millis(1_500)))
            .is_none());
        assert!(pool.give_back(30, lease(3, Duration::ZERO)).is_none());
        // Lease 2 has less than nine tenths of its 10 s left: dropped on the way to lease 1.
        assert_eq!(pool.take(10).map(|l| l.id), Some(1));
        assert_eq!(pool.take(10), None, "each lease is handed out once");
        assert_eq!(
            pool.take(5),
            None,
            "a lease is reused only for the TTL it was asked for"
        );
        assert_eq!(pool.take(30).map(|l| l.id), Some(3));
    }

    #[tokio::test]
    async fn keeps_at_most_max_idle_per_ttl() {
        let pool = LeasePool::default();
        for id in 0..MAX_IDLE as i64 {
            assert!(pool.give_back(10, lease(id, Duration::ZERO)).is_none());
        }
        let over = lease(-1, Duration::ZERO);
        assert_eq!(
            pool.give_back(10, over),
            Some(over),
            "the caller revokes the extra one"
        );
        assert!(pool.give_back(11, over).is_none(), "another TTL has room");
    }
}

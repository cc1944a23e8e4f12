//! One acquisition's place in the queue: its lease, its key and that key's create revision.
//!
//! The enqueue is the transaction of etcd's `concurrency.Mutex.Lock`, so the create revision
//! and the current holder come back in one round trip:
//!
//! ```text
//! If   CreateRevision(<range><lease hex>) == 0
//! Then Put(<range><lease hex>, "", lease), Get(<range>, first by create revision)
//! Else Get(<range><lease hex>),            Get(<range>, first by create revision)
//! ```
//!
//! The contender with the lowest create revision holds the lock. Every acquisition has a
//! lease of its own — granted, or taken from the client's pool of leases that released locks
//! left without a key (`lease_pool`) — so no two contenders (not even two of one process)
//! share a key, and revoking that lease takes the key away: that is how a cancelled or failed
//! acquisition leaves nothing behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::CleanupOnDrop;
use distlock_core::LockError;
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::{lease_gone, map};
use crate::key::LockKeys;
use crate::lease_pool::{Idle, LeasePool};
use crate::members::Members;

/// The pause between revoke attempts while the cluster cannot answer.
const REVOKE_RETRY: Duration = Duration::from_millis(200);

/// etcd leases are whole seconds: `ttl` rounded up, at least 1 s. The server may grant more
/// (its minimum is 1.5 election timeouts); the granted TTL is what counts.
pub(crate) fn lease_secs(ttl: Duration) -> i64 {
    let whole = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(whole.max(1)).unwrap_or(i64::MAX)
}

/// Options to read the lowest (`Ascend`) or highest (`Descend`) create revision in a range.
pub(crate) fn by_create(order: SortOrder) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, order)
        .with_limit(1)
}

/// A lease with (after [`Contender::enqueue`]) its key in the lock's range.
#[derive(Clone)]
pub(crate) struct Contender {
    pub members: Arc<Members>,
    /// Where a released lock's lease goes for the client's next acquisition.
    pub pool: Arc<LeasePool>,
    /// The TTL asked for, in whole seconds (the pool's key).
    pub secs: i64,
    /// Set once the lease went back to the pool (its key deleted): from then on it belongs to
    /// the pool, and this contender's cleanup must not revoke it.
    pub pooled: Arc<AtomicBool>,
    pub keys: LockKeys,
    pub key: String,
    pub lease: i64,
    /// The TTL the server granted.
    pub granted: Duration,
    /// When the grant (or, for a pooled lease, its last keep-alive) was sent: the lease is
    /// valid for `granted` from here.
    pub granted_at: Instant,
    /// The create revision of our key (0 before enqueue).
    pub rev: i64,
    pub label: String,
    pub name: String,
}

/// What the enqueue transaction saw.
pub(crate) struct Enqueued {
    /// The lowest create revision in the range is ours (or the range was empty).
    pub holder: bool,
}

/// Who is asking, for [`join`]: the client's members and lease pool, its label, the name.
pub(crate) struct Asker<'a> {
    pub members: &'a Arc<Members>,
    pub pool: &'a Arc<LeasePool>,
    pub label: &'a str,
    pub name: &'a str,
}

/// Takes a lease (a pooled one if the client has one for `ttl`, else a granted one) and
/// enqueues a key with `value` under it. Returns the contender, the cleanup that revokes its
/// lease (and so deletes its key) unless disarmed, and what the enqueue saw. A pooled lease
/// that turns out to be gone (revoked while idle) is replaced by a granted one, once.
pub(crate) async fn join(
    who: Asker<'_>,
    keys: LockKeys,
    ttl: Duration,
    value: &str,
) -> Result<(Arc<Contender>, CleanupOnDrop, Enqueued), LockError> {
    let secs = lease_secs(ttl);
    if let Some(idle) = who.pool.take(secs) {
        let mut me = Contender::new(&who, keys.clone(), secs, idle);
        let cleanup = Arc::new(me.clone()).cleanup();
        if let Some(enqueued) = me.enqueue(value).await? {
            return Ok((Arc::new(me), cleanup, enqueued));
        }
        // Nothing to revoke: the server has no such lease.
        cleanup.disarm();
    }
    let mut me = Contender::grant(&who, keys, secs).await?;
    let cleanup = Arc::new(me.clone()).cleanup();
    let Some(enqueued) = me.enqueue(value).await? else {
        return Err(LockError::backend(
            who.label,
            Some(who.name),
            "etcd says the lease it has just granted is gone (revoked at once?); retry",
            None,
        ));
    };
    Ok((Arc::new(me), cleanup, enqueued))
}

impl Contender {
    fn new(who: &Asker<'_>, keys: LockKeys, secs: i64, lease: Idle) -> Self {
        Contender {
            members: Arc::clone(who.members),
            pool: Arc::clone(who.pool),
            secs,
            pooled: Arc::default(),
            key: keys.contender(lease.id),
            keys,
            lease: lease.id,
            granted: lease.granted,
            granted_at: lease.fresh_at,
            rev: 0,
            label: who.label.to_owned(),
            name: who.name.to_owned(),
        }
    }

    /// Grants a lease of `secs` (see [`lease_secs`]).
    async fn grant(who: &Asker<'_>, keys: LockKeys, secs: i64) -> Result<Self, LockError> {
        let fresh_at = Instant::now();
        let resp = who
            .members
            .run(|c| async move { c.lease_client().grant(secs, None).await })
            .await
            .map_err(|e| map(e, who.label, Some(who.name)))?;
        let granted = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(1).max(1));
        let lease = Idle {
            id: resp.id(),
            granted,
            fresh_at,
        };
        Ok(Contender::new(who, keys, secs, lease))
    }

    /// Keeps our lease, whose key is gone, for the client's next acquisition; revokes it in
    /// the background when the pool is full. `fresh_at`: when its last keep-alive was sent.
    pub fn give_back(&self, fresh_at: Instant) {
        let idle = Idle {
            id: self.lease,
            granted: self.granted,
            fresh_at,
        };
        // Marked before it is pooled: the pool may hand it on at once.
        self.pooled.store(true, Ordering::SeqCst);
        if self.pool.give_back(self.secs, idle).is_some() {
            self.pooled.store(false, Ordering::SeqCst);
            let me = self.clone();
            tokio::spawn(async move { me.revoke().await });
        }
    }

    /// Revokes the lease (deleting our key with it) when dropped unless disarmed — or unless
    /// the lease went back to the pool meanwhile (a guard that was released while it was
    /// being handed out: its lease may already serve another acquisition).
    pub fn cleanup(self: &Arc<Self>) -> CleanupOnDrop {
        let me = Arc::clone(self);
        CleanupOnDrop::new(move || {
            Box::pin(async move {
                if !me.pooled.load(Ordering::SeqCst) {
                    me.revoke().await;
                }
            })
        })
    }

    /// Revokes the lease, which deletes our key; a lease already gone is fine. Persistent: a
    /// cluster that cannot answer (unreachable, or electing a leader) is asked again every
    /// 200 ms for up to twice the lease, because a new leader extends every lease to its full
    /// TTL — a revoke given up during an election would block the name for a whole lease
    /// after the cluster is back. If it still cannot be reached, the lease runs out on its own.
    pub async fn revoke(&self) {
        let lease = self.lease;
        let until = Instant::now() + self.granted * 2;
        loop {
            let revoked = self
                .members
                .run(|c| async move { c.lease_client().revoke(lease).await })
                .await;
            match revoked {
                Ok(_) => return,
                Err(e) if lease_gone(&e) => return,
                Err(e) if Instant::now() >= until => {
                    tracing::debug!(backend = %self.label, name = %self.name, lease = %format!("{:x}", self.lease), error = %e, "revoking the lease failed; it runs out on its own");
                    return;
                }
                Err(_) => tokio::time::sleep(REVOKE_RETRY).await,
            }
        }
    }

    /// Puts our key with `value` under our lease (the transaction above) and records its
    /// create revision. `None`: the server says our lease is gone.
    async fn enqueue(&mut self, value: &str) -> Result<Option<Enqueued>, LockError> {
        let owner = || TxnOp::get(self.keys.range.clone(), Some(by_create(SortOrder::Ascend)));
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([
                TxnOp::put(
                    self.key.clone(),
                    value,
                    Some(PutOptions::new().with_lease(self.lease)),
                ),
                owner(),
            ])
            .or_else([TxnOp::get(self.key.clone(), None), owner()]);
        let resp = match self
            .members
            .run(|c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await
        {
            Ok(resp) => resp,
            Err(e) if lease_gone(&e) => return Ok(None),
            Err(e) => return Err(map(e, &self.label, Some(&self.name))),
        };
        let ops = resp.op_responses();
        let ranges: Vec<&[KeyValue]> = ops
            .iter()
            .filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g.kvs()),
                _ => None,
            })
            .collect();
        self.rev = if resp.succeeded() {
            resp.header().map_or(0, |h| h.revision())
        } else {
            ranges
                .first()
                .and_then(|kvs| kvs.first())
                .map_or(0, KeyValue::create_revision)
        };
        if self.rev <= 0 {
            return Err(LockError::backend(
                &self.label,
                Some(&self.name),
                "etcd answered the enqueue transaction without our key's revision",
                None,
            ));
        }
        let holder = ranges
            .last()
            .and_then(|kvs| kvs.first())
            .is_none_or(|kv| kv.create_revision() == self.rev);
        Ok(Some(Enqueued { holder }))
    }

    /// Keeps the lease alive while this contender waits, a third of the granted TTL after it
    /// was last kept alive (or granted).
    /// The task ends (and `gone` is set) when the server says the lease is gone; it is
    /// aborted when the returned handle is dropped.
    pub fn keep_alive_while_waiting(
        self: &Arc<Self>,
        gone: distlock_core::backend::LostSignal,
    ) -> KeptAlive {
        let me = Arc::clone(self);
        // A pooled lease was last kept alive before this acquisition began.
        let shared = Arc::new(std::sync::Mutex::new(me.granted_at));
        let fresh = Arc::clone(&shared);
        let task = AbortOnDrop(tokio::spawn(async move {
            let fresh_at = || *fresh.lock().unwrap_or_else(|p| p.into_inner());
            let mut next = fresh_at() + me.granted / 3;
            loop {
                tokio::time::sleep_until(next).await;
                let sent = Instant::now();
                match me.keep_alive_once().await {
                    Ok(()) => {
                        *fresh.lock().unwrap_or_else(|p| p.into_inner()) = sent;
                        next = sent + me.granted / 3;
                    }
                    Err(e) if lease_gone(&e) => {
                        gone.mark_lost("the waiting contender's lease expired");
                        return;
                    }
                    // Transient: tried again after a pause (never at once: a cluster without
                    // a leader answers at once); the wait itself notices a lease that ran out
                    // when it confirms our key.
                    Err(_) => {
                        next = (fresh_at() + me.granted / 3).max(Instant::now() + REVOKE_RETRY)
                    }
                }
            }
        }));
        KeptAlive {
            _task: task,
            fresh_at: shared,
        }
    }

    /// One keep-alive round trip for our lease; each member gets a quarter of the lease to
    /// answer, so three members are tried before the lease can run out.
    pub async fn keep_alive_once(&self) -> Result<(), etcd_client::Error> {
        let lease = self.lease;
        self.members
            .run_within(self.granted / 4, |c| async move {
                let (_keeper, _stream) = c.lease_client().keep_alive(lease).await?;
                Ok(())
            })
            .await
    }
}

/// A waiting contender's keep-alive task (stopped when dropped) and when it last kept the
/// lease alive.
pub(crate) struct KeptAlive {
    _task: AbortOnDrop,
    fresh_at: Arc<std::sync::Mutex<Instant>>,
}

impl KeptAlive {
    /// When the last keep-alive that succeeded (or the grant) was sent: the server keeps the
    /// lease — and so our key, unless someone deletes it or revokes the lease — for at least
    /// the granted TTL from then.
    pub fn fresh_at(&self) -> Instant {
        *self.fresh_at.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Whether a lease last kept alive at `fresh_at` (granted for `granted`) has at least half its
/// TTL left at `now`: then a waiter that has just been handed the lock takes it without
/// another keep-alive and read of its own key. Its keep-alives come every third of the TTL, so
/// only a waiter whose keep-alives failed lately falls below.
pub(crate) fn still_fresh(fresh_at: Instant, granted: Duration, now: Instant) -> bool {
    now <= fresh_at + granted / 2
}

/// Aborts a background task when dropped.
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_fresh_for_half_its_ttl() {
        let at = Instant::now();
        let ttl = Duration::from_secs(6);
        assert!(still_fresh(at, ttl, at));
        assert!(still_fresh(at, ttl, at + Duration::from_secs(3)));
        assert!(!still_fresh(at, ttl, at + Duration::from_millis(3_001)));
        assert!(!still_fresh(at, ttl, at + ttl));
    }

    #[test]
    fn lease_secs_rounds_up() {
        assert_eq!(lease_secs(Duration::from_millis(1)), 1);
        assert_eq!(lease_secs(Duration::from_secs(1)), 1);
        assert_eq!(lease_secs(Duration::from_millis(1500)), 2);
        assert_eq!(lease_secs(Duration::from_secs(30)), 30);
    }
}

//! [`EtcdLease`]: the store side of a held etcd lock (keep-alive, release).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::Lease;
use distlock_core::LockError;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use tokio::time::Instant;

use crate::contender::{AbortOnDrop, Contender};
use crate::error::{lease_gone, map};

/// One held lock: our contender (lease + key) and the watcher on our key.
pub(crate) struct EtcdLease {
    me: Arc<Contender>,
    watcher: std::sync::Mutex<Option<AbortOnDrop>>,
    /// When the lease's last keep-alive (or grant) that succeeded was sent.
    fresh_at: std::sync::Mutex<Instant>,
}

impl EtcdLease {
    /// `fresh_at`: when the lease was last granted or kept alive.
    pub fn new(me: Arc<Contender>, watcher: AbortOnDrop, fresh_at: Instant) -> Self {
        EtcdLease {
            me,
            watcher: std::sync::Mutex::new(Some(watcher)),
            fresh_at: std::sync::Mutex::new(fresh_at),
        }
    }

    fn not_held(&self, why: &str) -> LockError {
        LockError::not_held(&self.me.name, &self.me.label, why.to_owned())
    }
}

#[async_trait]
impl Lease for EtcdLease {
    /// One keep-alive of our lease. etcd fixes a lease's TTL when it is granted, so the
    /// validity is always the granted TTL, whatever `ttl` asks (a longer `extend` keeps the
    /// lock as long as renewals go on; without them it ends at the granted TTL).
    async fn renew(&self, _ttl: Duration) -> Result<Option<Duration>, LockError> {
        let me = &self.me;
        let sent = Instant::now();
        match tokio::time::timeout(me.granted, me.keep_alive_once()).await {
            Ok(Ok(())) => {
                *self.fresh_at.lock().unwrap_or_else(|p| p.into_inner()) = sent;
                Ok(Some(me.granted))
            }
            Ok(Err(e)) if lease_gone(&e) => {
                Err(self.not_held("its etcd lease expired or was revoked"))
            }
            Ok(Err(e)) => Err(map(e, &me.label, Some(&me.name))),
            Err(_) => Err(LockError::unavailable(
                &me.label,
                Some(&me.name),
                "etcd did not answer a keep-alive within the lease",
                None,
            )),
        }
    }

    /// Deletes our key if it is still ours (same create revision). The lease, left without a
    /// key, goes back to the client's pool for its next acquisition (`lease_pool`); when the
    /// key was not ours any more, or the delete could not be sent, the lease is revoked in
    /// the background instead (best effort: an unrevoked lease just runs out).
    async fn release(&self) -> Result<(), LockError> {
        // Our own delete must not read as a loss.
        drop(
            self.watcher
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
        let me = &self.me;
        let txn = Txn::new()
            .when([Compare::create_revision(
                me.key.clone(),
                CompareOp::Equal,
                me.rev,
            )])
            .and_then([TxnOp::delete(me.key.clone(), None)]);
        let deleted = match me
            .members
            .run(|c| {
                let txn = txn.clone();
                async move { c.kv_client().txn(txn).await }
            })
            .await
        {
            Ok(reply) => reply.succeeded(),
            Err(e) => {
                // No member could answer (unreachable, or electing): keep revoking in the
                // background, so the lock frees as soon as the cluster has a leader again
                // rather than a whole (re-extended) lease later.
                let lease = Arc::clone(me);
                tokio::spawn(async move { lease.revoke().await });
                return Err(map(e, &me.label, Some(&me.name)));
            }
        };
        if deleted {
            // The delete freed the lock (the next waiter is already woken) and left the lease
            // without a key: the next acquisition of this client may use it.
            me.give_back(*self.fresh_at.lock().unwrap_or_else(|p| p.into_inner()));
            Ok(())
        } else {
            // Gone, or not ours: the lease may be dying or revoked; never reuse it.
            let lease = Arc::clone(me);
            tokio::spawn(async move { lease.revoke().await });
            Err(self.not_held("its etcd key is gone (deleted, or its lease ran out)"))
        }
    }
}

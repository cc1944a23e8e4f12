//! [`EtcdLease`]: the store side of a held etcd lock (keep-alive, release).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Compare, CompareOp, Txn, TxnOp};
use lock_core::backend::Lease;
use lock_core::LockError;

use crate::contender::{AbortOnDrop, Contender};
use crate::error::{lease_gone, map};

/// One held lock: our contender (lease + key) and the watcher on our key.
pub(crate) struct EtcdLease {
    me: Arc<Contender>,
    watcher: std::sync::Mutex<Option<AbortOnDrop>>,
}

impl EtcdLease {
    pub fn new(me: Arc<Contender>, watcher: AbortOnDrop) -> Self {
        EtcdLease {
            me,
            watcher: std::sync::Mutex::new(Some(watcher)),
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
        match tokio::time::timeout(me.granted, me.keep_alive_once()).await {
            Ok(Ok(())) => Ok(Some(me.granted)),
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

    /// Deletes our key if it is still ours (same create revision), then revokes the lease in
    /// the background (best effort: an unrevoked lease without keys just runs out).
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
        // The delete freed the lock (the next waiter is already woken); the lease has no key
        // left to keep, so its revoke need not hold up the caller.
        let lease = Arc::clone(me);
        tokio::spawn(async move { lease.revoke().await });
        if deleted {
            Ok(())
        } else {
            Err(self.not_held("its etcd key is gone (deleted, or its lease ran out)"))
        }
    }
}

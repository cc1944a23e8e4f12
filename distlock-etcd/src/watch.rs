//! The held key's watcher: `lost()` fires as soon as our key is deleted — by someone else, or
//! by the server when our lease was revoked or ran out (revoking a lease deletes its keys).
//!
//! The watch (an entry on the client's shared watch stream) starts just after our key's create
//! revision, so a deletion that happened before the watch was set up is still seen. When the
//! watch ends without a deletion (a member restarted, the revision was compacted, the member
//! lost its leader, the stream broke), the key is read again:
//! gone or recreated by another lease means lost; still ours means watch again from that
//! read's revision. While the cluster does not answer at all, the guard's lease deadline (its
//! renewals fail) reports the loss instead.

use std::time::Duration;

use std::sync::Arc;

use distlock_core::backend::{Backoff, LostSignal};
use etcd_client::WatchOptions;

use crate::members::Members;
use crate::watches::Fired;

/// Watches `key` (ours, created at `rev`) until it is deleted, then marks `lost`. Runs until
/// aborted (the guard's lease aborts it on release and drop).
pub(crate) async fn watch_own_key(
    members: Arc<Members>,
    key: String,
    rev: i64,
    lost: LostSignal,
    label: String,
    name: String,
) {
    let mut from = rev + 1;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        let opts = WatchOptions::new().with_start_revision(from);
        // The calls are boxed: they run rarely, and unboxed their futures would make this
        // task, which lives as long as the guard, several KiB larger per held lock.
        if let Ok(mut watching) = Box::pin(members.watch(key.clone(), opts)).await {
            if watching.fired().await == Fired::Deleted {
                if lost.mark_lost(format!("its etcd key {key} was deleted (by someone else, or its lease was revoked or ran out)")) {
                    tracing::warn!(backend = %label, name = %name, key = %key, "lock lost: its key was deleted");
                }
                return;
            }
        }
        // The watch ended without a deletion: read the key to know where we stand.
        tokio::time::sleep(backoff.next_delay()).await;
        let got = Box::pin(members.run(|c| {
            let key = key.clone();
            async move { c.kv_client().get(key, None).await }
        }))
        .await;
        match got {
            Ok(r) => {
                backoff.reset();
                let ours = r
                    .kvs()
                    .first()
                    .is_some_and(|kv| kv.create_revision() == rev);
                if !ours {
                    if lost.mark_lost(format!(
                        "its etcd key {key} is gone (deleted, or its lease ran out)"
                    )) {
                        tracing::warn!(backend = %label, name = %name, key = %key, "lock lost: its key is gone");
                    }
                    return;
                }
                from = r.header().map_or(from, |h| h.revision() + 1);
            }
            Err(e) => {
                tracing::debug!(backend = %label, name = %name, error = %e, "re-reading the held key failed; retrying");
            }
        }
    }
}

//! Waiting for our turn: etcd's `waitDeletes`, without a herd.
//!
//! A waiter looks up the key with the greatest create revision below its own
//! (`WithLastCreate` + `WithMaxCreateRev(rev - 1)`, a linearizable read) and watches only that
//! key, from the read's revision on, for its deletion; then it looks again. When no key below
//! its own is left, it holds the lock. A release therefore wakes exactly one waiter, waiters
//! are served in the order their keys were created (FIFO), and a waiter that gives up (its key
//! deleted) only makes its successor look again.
//!
//! A watch that ends without a deletion (a member restarted, a compaction, no leader), or
//! stays silent for half the lease (at most 2 s: a stream stuck on a member that went away
//! reports nothing), is just another reason to look again. Store errors are retried with backoff for as long as our own
//! lease can still be alive (its TTL since the last answer), then returned.

use std::time::Duration;

use etcd_client::{EventType, SortOrder};
use lock_core::backend::{Backoff, Deadline, LostSignal};
use lock_core::LockError;
use tokio::time::Instant;

use crate::contender::{by_create, Contender};
use crate::error::{is_unreachable, map};

/// How long a waiter trusts a silent watch before it reads the range again: half the lease,
/// at most 2 s (one read per waiter per period while the holder keeps the lock).
pub(crate) fn recheck_every(granted: Duration) -> Duration {
    (granted / 2).min(Duration::from_secs(2))
}

/// How a wait ended.
pub(crate) enum Waited {
    /// No key below ours is left: we hold the lock.
    Ours,
    /// The deadline passed first.
    TimedOut,
}

/// Waits until every key created before ours in the lock's range is gone, or `deadline`.
/// `lease_gone` is set when our own lease expired meanwhile (then this returns an error).
/// `on_wake` is called once per predecessor deletion seen.
pub(crate) async fn wait_for_turn(
    me: &Contender,
    deadline: &Deadline,
    lease_gone: &LostSignal,
    on_wake: &(dyn Fn() + Send + Sync),
) -> Result<Waited, LockError> {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    let mut last_answer = Instant::now();
    loop {
        if deadline.expired() {
            return Ok(Waited::TimedOut);
        }
        let opts = by_create(SortOrder::Descend).with_max_create_revision(me.rev - 1);
        let range = me.keys.range.clone();
        let got = me
            .members
            .run(|c| {
                let (range, opts) = (range.clone(), opts.clone());
                async move { c.kv_client().get(range, Some(opts)).await }
            })
            .await;
        let resp = match got {
            Ok(r) => r,
            Err(e) if is_unreachable(&e) && last_answer.elapsed() < me.granted => {
                tracing::debug!(backend = %me.label, name = %me.name, error = %e, "looking up our predecessor failed; retrying");
                deadline.sleep(backoff.next_delay()).await;
                continue;
            }
            Err(e) => return Err(map(e, &me.label, Some(&me.name))),
        };
        last_answer = Instant::now();
        backoff.reset();
        let Some(pred) = resp.kvs().first() else {
            return Ok(Waited::Ours);
        };
        // Watch from the revision after the read's: the deletion we wait for comes later than
        // the read that saw the key, and a watch that starts beyond the store's current
        // revision is "synced" at once, while one starting at or below it waits for etcd's
        // catch-up loop (every 100 ms) — which made every handoff ~100 ms.
        let from = resp.header().map_or(0, |h| h.revision()) + 1;
        let pred = pred.key().to_vec();
        let watched = async {
            let mut stream = match me.members.watch_from(pred, from).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(backend = %me.label, name = %me.name, error = %e, "watching our predecessor failed; looking again");
                    tokio::time::sleep(backoff.next_delay()).await;
                    return;
                }
            };
            loop {
                match stream.message().await {
                    Ok(Some(r))
                        if r.events()
                            .iter()
                            .any(|e| e.event_type() == EventType::Delete) =>
                    {
                        on_wake();
                        return;
                    }
                    Ok(Some(r)) if r.canceled() => return,
                    Ok(Some(_)) => {}
                    // The stream broke (a member went away): look again.
                    Ok(None) | Err(_) => return,
                }
            }
        };
        tokio::select! {
            () = watched => {}
            // A watch that stays silent this long is not trusted: look again (a stream stuck
            // on a member that went away reports nothing).
            () = tokio::time::sleep(recheck_every(me.granted)) => {}
            () = deadline.sleep(Duration::MAX) => return Ok(Waited::TimedOut),
            reason = lease_gone.wait() => {
                return Err(LockError::unavailable(
                    &me.label,
                    Some(&me.name),
                    format!("{reason} (the cluster did not answer its keep-alives); retry"),
                    None,
                ));
            }
        }
    }
}

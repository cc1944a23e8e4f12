//! Waiting for our turn: etcd's `waitDeletes`, without a herd.
//!
//! What a contender waits for is its [`Rule`]: a mutex's contender (and a read-write lock's
//! writer) waits until every key created before its own is gone, a reader until every
//! writer's key created before its own is gone (etcd's `recipes.RWMutex`), and a semaphore's
//! admitter until fewer than `max_count` permits are out.
//!
//! A waiter looks up the key with the greatest create revision below its own
//! (`WithLastCreate` + `WithMaxCreateRev(rev - 1)`, a linearizable read) and watches only that
//! key, from the read's revision on, for its deletion; then it looks again. When no key below
//! its own is left, it holds the lock. A release therefore wakes exactly one waiter, waiters
//! are served in the order their keys were created (FIFO), and a waiter that gives up (its key
//! deleted) only makes its successor look again.
//!
//! Only the first look and a look after a deletion read the range (etcd sorts the whole range
//! for it: a read costs as much as the queue is long). Any other look — after a watch that
//! started past the read, ended without a deletion or stayed silent — reads the predecessor's
//! key alone: keys created later have greater revisions, so while that key stands with the
//! create revision the range read found, it is still the newest below ours.
//!
//! A watch that ends without a deletion (a member restarted, a compaction, no leader), or
//! stays silent for half the lease (at most 2 s: a stream stuck on a member that went away
//! reports nothing), is just another reason to look again. Store errors are retried with backoff for as long as our own
//! lease can still be alive (its TTL since the last answer), then returned.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{SortOrder, WatchOptions};
use lock_core::backend::{Backoff, Deadline, LostSignal};
use lock_core::LockError;
use tokio::time::Instant;

use crate::contender::{by_create, Contender};
use crate::error::{is_unreachable, map};
use crate::watches::{Fired, Watching};

/// How long a waiter trusts a silent watch before it reads the range again: half the lease,
/// at most 2 s (one read per waiter per period while the holder keeps the lock).
pub(crate) fn recheck_every(granted: Duration) -> Duration {
    (granted / 2).min(Duration::from_secs(2))
}

/// What a contender waits for, over the keys created before its own.
#[derive(Clone, Debug)]
pub(crate) enum Rule {
    /// Every key in this range created before ours gone. Watches the newest of them.
    After(String),
    /// Fewer than `n` keys in this range created before ours. Watches the range for any
    /// deletion (only a semaphore's admitter waits so: one watcher per name).
    Fewer(String, usize),
}

/// What a client's waiters did, for tests (`EtcdLock::wakeups`, `EtcdLock::range_reads`).
#[derive(Debug, Default)]
pub(crate) struct WaitCounts {
    /// Deletions seen that a waiter waited for.
    pub wakeups: AtomicU64,
    /// Reads of a whole range (not of one key).
    pub range_reads: AtomicU64,
}

/// How a wait ended.
pub(crate) enum Waited {
    /// No key below ours is left: we hold the lock.
    Ours,
    /// The deadline passed first.
    TimedOut,
}

/// Waits until `rule` lets us hold, or `deadline` (an expired deadline looks once: a try).
/// `lease_gone` is set when our own lease expired meanwhile (then this returns an error).
/// `counts` records the deletions seen that we waited for and the range reads.
pub(crate) async fn wait_for_turn(
    me: &Contender,
    rule: &Rule,
    deadline: &Deadline,
    lease_gone: &LostSignal,
    counts: &WaitCounts,
) -> Result<Waited, LockError> {
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
    let mut last_answer = Instant::now();
    // A watch kept for the next look (see below), with the key it watches.
    let mut kept: Option<(Vec<u8>, Watching)> = None;
    // `Rule::After`: the newest key below ours that the last range read found, with its
    // create revision; the next look reads only that key (see the module doc).
    let mut known: Option<(Vec<u8>, i64)> = None;
    let (range, limit) = match rule {
        Rule::After(range) => (range.clone(), 1),
        Rule::Fewer(range, n) => (range.clone(), *n),
    };
    loop {
        let look = match &known {
            Some((key, _)) => (key.clone(), None),
            None => {
                let opts = by_create(SortOrder::Descend)
                    .with_max_create_revision(me.rev - 1)
                    .with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
                (range.clone().into_bytes(), Some(opts))
            }
        };
        if look.1.is_some() {
            counts.range_reads.fetch_add(1, Ordering::Relaxed);
        }
        let got = me
            .members
            .run(|c| {
                let (key, opts) = look.clone();
                async move { c.kv_client().get(key, opts).await }
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
        let watch_prefix = match rule {
            Rule::After(_) => false,
            Rule::Fewer(..) => true,
        };
        let pred = match (known.take(), resp.kvs().first()) {
            // The predecessor stands: still the newest key below ours.
            (Some((key, rev)), Some(kv)) if kv.create_revision() == rev => {
                known = Some((key.clone(), rev));
                key
            }
            // It is gone (or its name was taken again, later than ours): read the range.
            (Some(_), _) => continue,
            (None, Some(_)) if watch_prefix && resp.kvs().len() < limit => return Ok(Waited::Ours),
            (None, Some(_)) if watch_prefix => range.clone().into_bytes(),
            (None, Some(pred)) => {
                known = Some((pred.key().to_vec(), pred.create_revision()));
                pred.key().to_vec()
            }
            (None, None) => return Ok(Waited::Ours),
        };
        if deadline.expired() {
            return Ok(Waited::TimedOut);
        }
        // The watch starts at the member's current revision (served at once; a watch from an
        // older revision waits for etcd's 100 ms catch-up loop). It covers the deletion we
        // wait for only if it started no later than the read that saw the key; a watch that
        // started later is kept while a new read confirms the same key after its start.
        let read_at = resp.header().map_or(0, |h| h.revision());
        let reuse = match kept.take() {
            Some((key, mut w)) if key == pred => (!w.ended()).then_some(w),
            _ => None,
        };
        let mut watching = match reuse {
            Some(w) => w,
            None => {
                let mut opts = WatchOptions::new();
                if watch_prefix {
                    opts = opts.with_prefix();
                }
                match me.members.watch(pred.clone(), opts).await {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::debug!(backend = %me.label, name = %me.name, error = %e, "watching our predecessor failed; looking again");
                        deadline.sleep(backoff.next_delay()).await;
                        continue;
                    }
                }
            }
        };
        if watching.start() > read_at {
            kept = Some((pred, watching));
            continue;
        }
        let watched = async {
            if watching.fired().await == Fired::Deleted {
                counts.wakeups.fetch_add(1, Ordering::SeqCst);
                // A deletion: the next look reads the range.
                true
            } else {
                false
            }
        };
        tokio::select! {
            deleted = watched => {
                if deleted {
                    known = None;
                }
            }
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

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
//! A mutex's (or read-write lock's) waiter reads the range only to start and after a deletion
//! (etcd sorts the whole range for it: a read costs as much as the queue is long; a semaphore's
//! admitter reads its range, at most `max_count` keys, on every look). Any other look — after
//! a watch that started past the read, ended without a deletion or stayed silent — reads the
//! predecessor's key alone: keys created later have greater revisions, so while that key
//! stands with the create revision the range read found, it is still the newest below ours.
//!
//! The read right after a watch reported the predecessor's deletion — a handoff — is first
//! made on the member's own state (serializable, [`holds_by_member_read`]): keys below ours only
//! go away, so a member that has applied our key's creation and shows none below ours is
//! right, and the new holder skips the leader's read index. Only an answer that still shows
//! a key below ours (the predecessor gave up while others wait ahead, or the member lags)
//! is read again linearizably.
//!
//! A watch may be late: etcd (3.4) serves a watch whose start revision has already passed
//! from a catch-up loop that runs every 100 ms, and a watch created without a start revision
//! lands there too when a write commits while the member registers it (it reads its revision,
//! then registers the watch from the next one). Under contention that is a few watches in a
//! thousand, and each one held up its waiter — and every waiter queued behind it — for up to
//! 100 ms: the wait p99 of eight contenders was ~100 ms. The member's answer to the watch does
//! not say which it got. So for the first [`CATCH_UP_WINDOW`] of its watch on a predecessor a
//! range read just found, a mutex's (or read-write lock's) waiter also reads that key every
//! [`LATE_WATCH_READ`] (one key, not the range), keeping the watch, until a read answered at
//! the watch's own start revision proves that no write came between the member reading that
//! revision and registering the watch (so it was served at once), or the window ends. A
//! semaphore's admitter (one per name) does the same with its look, a range read of at most
//! `max_count` keys. A silent watch's recheck (every 2 s) does not read around its new watch.
//!
//! A watch that ends without a deletion (a member restarted, a compaction, no leader), or
//! stays silent for half the lease (at most 2 s: a stream stuck on a member that went away
//! reports nothing), is just another reason to look again. Store errors are retried with
//! backoff for as long as the wait lasts and our own lease can still be alive (its TTL since
//! the last answer), then returned.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use distlock_core::backend::{Backoff, Deadline, LostSignal};
use distlock_core::LockError;
use etcd_client::{SortOrder, WatchOptions};
use tokio::time::Instant;

use crate::contender::{by_create, Contender};
use crate::error::{is_unreachable, map};
use crate::watches::{Fired, Watching};

/// How long a waiter trusts a silent watch before it reads the range again: half the lease,
/// at most 2 s (one read per waiter per period while the holder keeps the lock).
pub(crate) fn recheck_every(granted: Duration) -> Duration {
    (granted / 2).min(Duration::from_secs(2))
}

/// How long a new watch may sit in etcd's catch-up loop, counted from the member's
/// confirmation (it registered the watch before answering): 100 ms between passes plus the
/// pass itself (longer only when the member has more than 512 late watches to catch up at once).
pub(crate) const CATCH_UP_WINDOW: Duration = Duration::from_millis(150);

/// The window of a deaf watch (tests only: `crate::watches::WatchHub::set_deaf`).
const DEAF_WINDOW: Duration = Duration::from_secs(1);

/// How often a waiter looks again itself while its watch may be late (a mutex's waiter reads
/// its predecessor's key; a semaphore's admitter its range).
pub(crate) const LATE_WATCH_READ: Duration = Duration::from_millis(10);

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
    /// Deletions seen that a waiter waited on a watch for (reported by the watch, or found by
    /// the waiter's next look).
    pub wakeups: AtomicU64,
    /// Reads of a whole range (not of one key).
    pub range_reads: AtomicU64,
    /// Deletions a waiter's own read found while its watch might be late and had not
    /// reported them (a late watch, or a deletion whose event was still on its way).
    pub read_before_watch: AtomicU64,
    /// Watches created (confirmed by the member).
    pub watches: AtomicU64,
    /// Handoffs a waiter took on the member's own read (serializable), without a round of
    /// the leader's read index ([`holds_by_member_read`]).
    pub member_reads: AtomicU64,
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
    // A watch kept for the next look (see below), with the key it watches and, while it may
    // be late, when the member confirmed it (see the module doc).
    let mut kept: Option<(Vec<u8>, Watching, Option<Instant>)> = None;
    // This look is a read made while the watch might be late.
    let mut checking_late = false;
    // This look follows a silent watch's recheck.
    let mut rechecking = false;
    // We waited on a watch that reported no deletion since (the next look finds what it may
    // have missed).
    let mut waited_unreported = false;
    // `Rule::After`: the newest key below ours that the last range read found, with its
    // create revision; the next look reads only that key (see the module doc).
    let mut known: Option<(Vec<u8>, i64)> = None;
    // The watch just reported our predecessor's deletion: the member's own read may show
    // that we hold ([`holds_by_member_read`]).
    let mut handed = false;
    let (range, limit) = match rule {
        Rule::After(range) => (range.clone(), 1),
        Rule::Fewer(range, n) => (range.clone(), *n),
    };
    loop {
        if std::mem::take(&mut handed) && holds_by_member_read(me, &range).await {
            counts.member_reads.fetch_add(1, Ordering::SeqCst);
            return Ok(Waited::Ours);
        }
        let look = match &known {
            Some((key, _)) => (key.clone(), None),
            None => {
                let opts = created_before(me).with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
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
            // Retried while the wait lasts and our lease may still be alive; once the wait is
            // over the store's error is the answer (the backoff sleeps only until the
            // deadline, so retrying past it would not sleep at all).
            Err(e)
                if is_unreachable(&e)
                    && last_answer.elapsed() < me.granted
                    && !deadline.expired() =>
            {
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
        let (late_reader, rechecked) = (
            std::mem::take(&mut checking_late),
            std::mem::take(&mut rechecking),
        );
        // A look after a wait whose watch reported nothing: what it finds gone was waited for.
        let waited = std::mem::take(&mut waited_unreported);
        let found_by_reading = || {
            counts.wakeups.fetch_add(1, Ordering::SeqCst);
            if late_reader {
                counts.read_before_watch.fetch_add(1, Ordering::SeqCst);
                tracing::debug!(backend = %me.label, name = %me.name, "our read found the release before its watch said so");
            }
        };
        // `fresh`: the look found what to wait for anew (Rule::After: a range read found the
        // predecessor; Rule::Fewer: any look but a recheck's), so a release reaches us by the
        // watch made now, which is read around while it may be late.
        let (pred, fresh) = match (known.take(), resp.kvs().first()) {
            // The predecessor stands: still the newest key below ours.
            (Some((key, rev)), Some(kv)) if kv.create_revision() == rev => {
                known = Some((key.clone(), rev));
                (key, false)
            }
            // It is gone (or its name was taken again, later than ours): a deletion we waited
            // for, found by reading; read the range.
            (Some(_), _) => {
                found_by_reading();
                continue;
            }
            (None, Some(_)) if watch_prefix && resp.kvs().len() < limit => {
                if waited {
                    found_by_reading();
                }
                return Ok(Waited::Ours);
            }
            (None, Some(_)) if watch_prefix => (range.clone().into_bytes(), !rechecked),
            (None, Some(pred)) => {
                known = Some((pred.key().to_vec(), pred.create_revision()));
                (pred.key().to_vec(), true)
            }
            (None, None) => {
                if waited {
                    found_by_reading();
                }
                return Ok(Waited::Ours);
            }
        };
        distlock_core::backend::handoff::waited();
        if deadline.expired() {
            return Ok(Waited::TimedOut);
        }
        // The watch starts at the member's current revision (a watch from an older revision
        // always waits for etcd's 100 ms catch-up loop; one from now only when a write commits
        // while it is registered). It covers the deletion we wait for only if it started no
        // later than the read that saw the key; a watch that started later is kept while a
        // new read confirms the same key after its start.
        let read_at = resp.header().map_or(0, |h| h.revision());
        let reuse = match kept.take() {
            Some((key, mut w, late)) if key == pred => (!w.ended()).then_some((w, late)),
            _ => None,
        };
        let (mut watching, late) = match reuse {
            // A read at the watch's own start revision proves no write came between the
            // member reading that revision and registering the watch: it is served at once.
            Some((w, _)) if w.proven_prompt_by(read_at) => (w, None),
            Some(w) => w,
            None => {
                // A recheck's watch is not read around: it is on what we have waited for a
                // while already.
                let mut opts = WatchOptions::new();
                if watch_prefix {
                    opts = opts.with_prefix();
                }
                match me.members.watch(pred.clone(), opts).await {
                    Ok(w) => {
                        counts.watches.fetch_add(1, Ordering::SeqCst);
                        // The window counts from the confirmation: the member registered the
                        // watch before it answered (opening a stream can take a while).
                        (w, fresh.then(Instant::now))
                    }
                    Err(e) => {
                        tracing::debug!(backend = %me.label, name = %me.name, error = %e, "watching our predecessor failed; looking again");
                        deadline.sleep(backoff.next_delay()).await;
                        continue;
                    }
                }
            }
        };
        if watching.start() > read_at {
            kept = Some((pred, watching, late));
            continue;
        }
        // A deaf watch (tests only) gets a longer window: a loaded test machine can stall a
        // release past 150 ms.
        let window = match watching.deaf() {
            true => DEAF_WINDOW,
            false => CATCH_UP_WINDOW,
        };
        let may_be_late = late.is_some_and(|confirmed| confirmed.elapsed() < window);
        let silent_for = match may_be_late {
            true => LATE_WATCH_READ,
            false => recheck_every(me.granted),
        };
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
                    handed = matches!(rule, Rule::After(_));
                }
                waited_unreported = !deleted;
            }
            // While the watch may be late, read the key ourselves and keep the watch. After
            // that, a watch that stays silent this long is not trusted: look again (a stream
            // stuck on a member that went away reports nothing).
            () = tokio::time::sleep(silent_for) => {
                waited_unreported = true;
                if may_be_late {
                    kept = Some((pred, watching, late));
                    checking_late = true;
                } else {
                    rechecking = true;
                }
            }
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

/// Options to read the keys of a range created before ours, the newest first (one key unless
/// a limit is set).
fn created_before(me: &Contender) -> etcd_client::GetOptions {
    by_create(SortOrder::Descend).with_max_create_revision(me.rev - 1)
}

/// Whether a serializable read of the member in use shows no key in `range` created before
/// ours: then we hold, one round trip sooner than through a linearizable read (which waits for
/// the leader to confirm its commit index, and behind that for the writes in flight). Used
/// right after a watch reported our predecessor's deletion (a handoff); any other answer — a
/// key still below ours, an error — leaves the decision to the linearizable read that follows.
///
/// Safe although the member may lag the leader: keys created before ours have create
/// revisions below ours and can only go away (a key written again gets a new create revision),
/// so "none below ours" stays true once it was — provided the member has applied our own key's
/// creation, which [`member_saw_us`] checks on the answer's revision. A lagging member can only
/// show keys that are gone already, which the linearizable read then settles.
async fn holds_by_member_read(me: &Contender, range: &str) -> bool {
    let opts = created_before(me).with_serializable();
    let got = me
        .members
        .run(|c| {
            let (key, opts) = (range.to_owned(), opts.clone());
            async move { c.kv_client().get(key, Some(opts)).await }
        })
        .await;
    got.is_ok_and(|r| {
        r.kvs().is_empty() && member_saw_us(r.header().map_or(0, |h| h.revision()), me.rev)
    })
}

/// Whether a member that answered at revision `answered_at` has applied the creation of our
/// key (create revision `ours`), so that every key created before ours is in its state.
fn member_saw_us(answered_at: i64, ours: i64) -> bool {
    answered_at >= ours
}

#[cfg(test)]
mod tests {
    use super::member_saw_us;

    #[test]
    fn a_member_behind_our_key_cannot_say_we_hold() {
        assert!(!member_saw_us(0, 7), "an answer without a revision");
        assert!(!member_saw_us(6, 7), "a member one write behind our key");
        assert!(member_saw_us(7, 7));
        assert!(member_saw_us(9, 7));
    }
}

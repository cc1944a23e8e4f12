//! PostgreSQL row mode: a release hands the lock straight to the head of the name's queue (the
//! row becomes the head's, the token is bumped, and the notification on the head's own channel
//! carries the grant). What must hold around that: a grant whose message went astray is taken
//! at the head's next look, not after its lease; a head that goes away after it was granted
//! passes the lock on at once; a short or unrenewed lease is the caller's, not the grant's
//! three seconds; and the granted head's place leaves with the grant.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockError, LockGuard};
use distlock_sql::SqlLock;
use sqlx::AssertSqlSafe;
use support::*;
use tokio::task::JoinHandle;
use tokio::time::Instant;

fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", &distlock_core::backend::owner_token()[..8])
}

/// A client as another process would have it: a URL of its own gives it its own in-process
/// queue and its own release listener (the clients of one URL in one process queue in the
/// process, and only their head takes a place in the database's queue).
async fn process(name: &str) -> Arc<SqlLock> {
    let url = postgres_url();
    let sep = if url.contains('?') { '&' } else { '?' };
    Arc::new(connect_or_explain(&format!("{url}{sep}application_name={name}")).await)
}

/// Starts `lock`'s acquisition of `name` with `opts` and waits until the queue of `name` has
/// `places` places (the new waiter's is the last).
async fn queue_up(
    admin: &SqlLock,
    lock: &Arc<SqlLock>,
    name: &str,
    opts: &AcquireOptions,
    places: usize,
) -> JoinHandle<Result<LockGuard, LockError>> {
    let task = tokio::spawn({
        let (lock, name, opts) = (Arc::clone(lock), name.to_owned(), opts.clone());
        async move { lock.acquire(&name, &opts).await }
    });
    assert!(
        within(Duration::from_secs(5), || async {
            queued(admin, name).await.len() == places
        })
        .await,
        "the waiter did not queue (wanted {places} places, have {:?})",
        queued(admin, name).await
    );
    task
}

/// Hands the row of `name` to `member` the way a release does (the member's place leaves
/// the queue), but without its notification (a message that went astray), with a lease of
/// 10 s; the holder's guard no longer owns it.
async fn grant_silently(admin: &SqlLock, name: &str, member: &str) {
    let t = &admin.config().table;
    let now = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";
    let done = sqlx::query(AssertSqlSafe(format!(
        "WITH g AS (UPDATE {t} SET owner = $2, expires_at = {now} + 10000 WHERE name = $1 RETURNING name), \
         p AS (DELETE FROM {t}_waitq WHERE name = $1 AND member = $2) \
         INSERT INTO {t}_fences (name, fence) SELECT name, 1 FROM g \
         ON CONFLICT (name) DO UPDATE SET fence = {t}_fences.fence + 1"
    )))
    .bind(name)
    .bind(member)
    .execute(admin.pool())
    .await
    .unwrap();
    assert_eq!(done.rows_affected(), 1, "no row of {name} to hand over");
}

/// Deletes every place in the queue of `name`, as if the waiters' joins had not landed yet.
async fn forget_places(admin: &SqlLock, name: &str) {
    let t = &admin.config().table;
    sqlx::query(AssertSqlSafe(format!(
        "DELETE FROM {t}_waitq WHERE name = $1"
    )))
    .bind(name)
    .execute(admin.pool())
    .await
    .unwrap();
}

/// `waiter` (a client of the holder's process) queues for `name`; its place is then deleted
/// (as if its join had not landed yet), so only its standing as the process's next in line
/// remains when `held` is released. Returns the guard it is served and its queue member.
async fn granted_as_next_in_line(
    admin: &SqlLock,
    held: LockGuard,
    waiter: &Arc<SqlLock>,
    name: &str,
    opts: &AcquireOptions,
) -> (LockGuard, String) {
    let task = queue_up(admin, waiter, name, opts, 1).await;
    let member = queued(admin, name).await.remove(0);
    forget_places(admin, name).await;
    held.release().await.unwrap();
    let g = served_within(task, Duration::from_secs(5), "the next waiter").await;
    (g, member)
}

/// The guard a waiter's task ends with, within `limit`.
async fn served_within(
    task: JoinHandle<Result<LockGuard, LockError>>,
    limit: Duration,
    what: &str,
) -> LockGuard {
    tokio::time::timeout(limit, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: not served within {limit:?}"))
        .unwrap()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_grant_went_astray_takes_the_lock_at_its_next_look() {
    let url = postgres_url();
    let name = fresh("astray");
    let wait = AcquireOptions::new().wait(Duration::from_secs(20));
    let admin = connect_or_explain(&url).await;
    let (waiter, behind) = (process("waiter").await, process("behind").await);
    let held = admin.acquire(&name, &wait).await.unwrap();
    let task = queue_up(&admin, &waiter, &name, &wait, 1).await;
    // A waiter behind it, whose place is the only one left once the grant took the head's.
    let after = queue_up(&admin, &behind, &name, &wait, 2).await;
    let member = queued(&admin, &name).await.remove(0);
    grant_silently(&admin, &name, &member).await;
    let granted = Instant::now();
    // Its safety look comes within a second; the grant's lease would run 10 s.
    let g = served_within(task, Duration::from_secs(5), "the granted head").await;
    assert!(
        granted.elapsed() < Duration::from_secs(5),
        "served after {:?}",
        granted.elapsed()
    );
    assert!(
        g.fencing_token() > held.fencing_token(),
        "token {} after the holder's {}",
        g.fencing_token(),
        held.fencing_token()
    );
    let g_token = g.fencing_token();
    // The row is the waiter's now: the old holder's release finds it gone.
    assert!(matches!(
        held.release().await,
        Err(LockError::NotHeld { .. })
    ));
    g.release().await.unwrap();
    let last = served_within(after, Duration::from_secs(5), "the waiter behind").await;
    assert!(last.fencing_token() > g_token);
    last.release().await.unwrap();
    assert!(admin.try_acquire(&name, &wait).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_head_that_goes_away_passes_the_lock_on() {
    let url = postgres_url();
    let name = fresh("departed");
    let wait = AcquireOptions::new().wait(Duration::from_secs(20));
    let admin = connect_or_explain(&url).await;
    let (first, second) = (process("first").await, process("second").await);
    let held = admin.acquire(&name, &wait).await.unwrap();
    let head = queue_up(&admin, &first, &name, &wait, 1).await;
    let next = queue_up(&admin, &second, &name, &wait, 2).await;
    let member = queued(&admin, &name).await.remove(0);
    // The head is granted the lock and goes away before it learns of it (its next look is
    // up to a second off).
    grant_silently(&admin, &name, &member).await;
    head.abort();
    let gone = Instant::now();
    // Its departure gives the lock back, which grants it to the next head: well before the
    // grant's 10 s lease would have run out.
    let g = served_within(next, Duration::from_secs(5), "the next head").await;
    assert!(
        gone.elapsed() < Duration::from_secs(5),
        "served {:?} after the granted head went away",
        gone.elapsed()
    );
    assert!(g.fencing_token() > held.fencing_token() + 1);
    drop(held);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_lease_is_the_callers_when_short_or_unrenewed() {
    let url = postgres_url();
    let admin = connect_or_explain(&url).await;
    let waiter = Arc::new(connect_or_explain(&url).await);
    for (ttl, renew) in [
        (Duration::from_millis(600), true),
        (Duration::from_secs(5), false),
    ] {
        let name = fresh("short");
        let opts = AcquireOptions::new()
            .wait(Duration::from_secs(20))
            .ttl(ttl)
            .renew(renew);
        let held = admin.acquire(&name, &AcquireOptions::new()).await.unwrap();
        let task = queue_up(&admin, &waiter, &name, &opts, 1).await;
        held.release().await.unwrap();
        let g = served_within(task, Duration::from_secs(5), "the head").await;
        // The grant's lease is the rest of the head's place (up to 3 s); the guard renews it
        // to the caller's ttl before it is handed out.
        let left = admin.inspect(&name).await.unwrap().expires_in.unwrap();
        assert!(
            left <= ttl,
            "ttl {ttl:?} renew {renew}: the row has {left:?} left"
        );
        if !renew {
            assert!(left > Duration::from_secs(3), "ttl {ttl:?}: {left:?} left");
        }
        g.release().await.unwrap();
    }
}

/// The grant takes the head's place out of the queue with it (as a winning take does), so a
/// newcomer after the granted holder's release is not held back; and a place the holder
/// still has at its release (a refresh of it was on its way as the grant landed) goes with the
/// release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_holders_place_leaves_with_the_grant_or_its_release() {
    let url = postgres_url();
    let name = fresh("place");
    let wait = AcquireOptions::new().wait(Duration::from_secs(20));
    let admin = connect_or_explain(&url).await;
    let waiter = Arc::new(connect_or_explain(&url).await);
    let held = admin.acquire(&name, &wait).await.unwrap();
    let task = queue_up(&admin, &waiter, &name, &wait, 1).await;
    let member = queued(&admin, &name).await.remove(0);
    held.release().await.unwrap();
    let g = served_within(task, Duration::from_secs(5), "the head").await;
    assert!(
        queued(&admin, &name).await.is_empty(),
        "the grant left the head's place"
    );
    // A place refreshed back after the grant: the holder's release removes it.
    let t = &admin.config().table;
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {t}_waitq (name, member, expires_at) \
         VALUES ($1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT + 3000)"
    )))
    .bind(&name)
    .bind(&member)
    .execute(admin.pool())
    .await
    .unwrap();
    g.release().await.unwrap();
    assert!(
        queued(&admin, &name).await.is_empty(),
        "the release left the holder's place"
    );
    let again = admin.try_acquire(&name, &wait).await.unwrap();
    assert!(
        again.is_some(),
        "a newcomer could not take the released lock"
    );
}

/// A head whose member no listener made — untagged (32 hex digits) or without the grant mark
/// (48), as foreign rows or a hand-edited queue could hold — is woken, never granted: the row is
/// deleted, not handed to a waiter that would not know it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_no_listener_made_is_not_granted() {
    let url = postgres_url();
    let admin = connect_or_explain(&url).await;
    let t = admin.config().table.clone();
    let token = distlock_core::backend::owner_token();
    for old in [token.clone(), format!("{}{token}", &token[..16])] {
        let name = fresh("older");
        let held = admin.acquire(&name, &AcquireOptions::new()).await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "INSERT INTO {t}_waitq (name, member, expires_at) \
             VALUES ($1, $2, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT + 3000)"
        )))
        .bind(&name)
        .bind(&old)
        .execute(admin.pool())
        .await
        .unwrap();
        held.release().await.unwrap();
        let info = admin.inspect(&name).await.unwrap();
        assert!(
            !info.held,
            "the lock was handed to a head of {} digits: {info:?}",
            old.len()
        );
    }
}

/// Within one process: with no place queued, a release grants the lock to the process's
/// waiter that talks to the database (the head of the in-process queue), even before that
/// waiter has a place — it holds the lock as its member, with no statement of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_grants_the_next_waiter_of_its_process_without_a_place() {
    let url = postgres_url();
    let name = fresh("next");
    let wait = AcquireOptions::new().wait(Duration::from_secs(20));
    let admin = connect_or_explain(&url).await;
    // Two clients of one URL: one process's in-process queue and listener.
    let (holder, waiter) = (process("one").await, process("one").await);
    let held = holder.acquire(&name, &wait).await.unwrap();
    let (g, member) = granted_as_next_in_line(&admin, held, &waiter, &name, &wait).await;
    let info = admin.inspect(&name).await.unwrap();
    assert_eq!(
        info.owner.as_deref(),
        Some(member.as_str()),
        "the waiter should hold the row as granted to its member (a take of its own would \
         own it by a fresh token)"
    );
    g.release().await.unwrap();
    assert!(queued(&admin, &name).await.is_empty());
}

/// A waiter of the releasing process that stops waiting — its wait runs out, or its acquire
/// is dropped — just as the release grants it the lock gives the grant back at once: the lock
/// never sits with nobody for the grant's lease (3 s). Each round aims the release at a
/// moment near the waiter's start, while it stands next without a place yet (a waiter with a
/// place is granted there, and its departure gives it back); whatever the waiter ends with,
/// the lock is either its guard's or free again well before the grant's lease would run out.
/// Rounds in which the stopped waiter had been granted the lock (the name's token moved past
/// the holder's) are counted: the race is reached, not only its two ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_waiter_that_stops_as_it_is_granted_gives_the_lock_back() {
    let url = postgres_url();
    let admin = connect_or_explain(&url).await;
    let t = admin.config().table.clone();
    let (holder, waiter) = (process("stop").await, process("stop").await);
    let hold = AcquireOptions::new().wait(Duration::from_secs(5));
    // The wait runs out right after the first try; a dropped acquire goes a millisecond in.
    let (wait_for, drop_after) = (Duration::from_micros(1), Duration::from_millis(1));
    // Shorter than the grant's 3 s lease, so a grant not given back cannot pass.
    let freed_within = Duration::from_secs(2);
    let (mut served, mut stopped, mut granted_then_stopped) = (0, 0, 0);
    for round in 0..200u32 {
        let name = fresh("stop");
        let held = holder.acquire(&name, &hold).await.unwrap();
        let held_token = held.fencing_token() as i64;
        let dropped = round % 2 == 1;
        let start = Instant::now();
        let task = tokio::spawn({
            let (waiter, name) = (Arc::clone(&waiter), name.clone());
            async move {
                if dropped {
                    // Dropped while waiting: the acquire future goes away mid-wait.
                    let long = AcquireOptions::new().wait(Duration::from_secs(20));
                    tokio::time::timeout(drop_after, waiter.acquire(&name, &long))
                        .await
                        .ok()
                        .map(Result::unwrap)
                } else {
                    let short = AcquireOptions::new().wait(wait_for);
                    match waiter.acquire(&name, &short).await {
                        Ok(g) => Some(g),
                        Err(LockError::Timeout { .. }) => None,
                        Err(e) => panic!("round {round}: {e}"),
                    }
                }
            }
        });
        // From the waiter's start to 1 ms on, 10 µs apart (the timer counts whole
        // milliseconds: a bounded spin instead).
        let at = start + Duration::from_micros(10 * u64::from(round / 2));
        while Instant::now() < at {
            tokio::task::yield_now().await;
        }
        held.release().await.unwrap();
        match tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the waiter did not end")
            .unwrap()
        {
            Some(g) => {
                served += 1;
                let info = admin.inspect(&name).await.unwrap();
                assert_eq!(info.fencing_token, Some(g.fencing_token()), "round {round}");
                g.release().await.unwrap();
            }
            None => {
                stopped += 1;
                assert!(
                    within(freed_within, || async {
                        !admin.inspect(&name).await.unwrap().held
                    })
                    .await,
                    "round {round} (dropped: {dropped}): the waiter stopped and the lock is \
                     still held: {:?}",
                    admin.inspect(&name).await.unwrap()
                );
                let fence: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT fence FROM {t}_fences WHERE name = $1"
                )))
                .bind(&name)
                .fetch_one(admin.pool())
                .await
                .unwrap();
                if fence > held_token {
                    granted_then_stopped += 1;
                }
            }
        }
        // A dropped acquire leaves its place in the background.
        assert!(
            within(freed_within, || async {
                queued(&admin, &name).await.is_empty()
            })
            .await,
            "round {round}: places left {:?}",
            queued(&admin, &name).await
        );
    }
    println!("served {served}, stopped {stopped}, granted then stopped {granted_then_stopped}");
    assert!(
        granted_then_stopped > 0,
        "no round granted the lock to a waiter that then stopped (served {served}, stopped \
         {stopped}): the rounds missed the race"
    );
}

/// However a PostgreSQL row guard came to be — a take of its own, a grant to its place by
/// another process's release, a grant to its process's next waiter — the validity it claims
/// never outlasts the row's lease in the database (the guard asked first, the database right
/// after; it keeps whole milliseconds).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guards_validity_never_outlasts_its_row() {
    let url = postgres_url();
    let admin = connect_or_explain(&url).await;
    let (holder, same_process) = (process("valid").await, process("valid").await);
    let other_process = process("valid-other").await;
    let wait = AcquireOptions::new().wait(Duration::from_secs(20));
    let check = |how: &'static str, name: String, g: LockGuard| {
        let admin = &admin;
        async move {
            // The guard's claim first: a renewal between the two reads can only make the row's
            // lease longer than the claim (the claim ages by the read's time meanwhile).
            let asked = Instant::now();
            let claimed = g.remaining_validity().unwrap();
            let left = admin.inspect(&name).await.unwrap().expires_in.unwrap();
            let aged = asked.elapsed();
            assert!(
                claimed <= left + aged + Duration::from_millis(1),
                "{how}: the guard claims {claimed:?}, the row has {left:?} ({aged:?} later)"
            );
            g.release().await.unwrap();
        }
    };
    for ttl in [Duration::from_secs(2), Duration::from_secs(30)] {
        let opts = wait.clone().ttl(ttl);
        let taken = holder.acquire(&fresh("valid"), &opts).await.unwrap();
        check("taken", taken.name().to_owned(), taken).await;

        let name = fresh("valid");
        let g = holder.acquire(&name, &opts).await.unwrap();
        let task = queue_up(&admin, &other_process, &name, &opts, 1).await;
        g.release().await.unwrap();
        let g = served_within(task, Duration::from_secs(5), "the head").await;
        check("granted to a place", name.clone(), g).await;

        let held = holder.acquire(&name, &opts).await.unwrap();
        let (g, member) = granted_as_next_in_line(&admin, held, &same_process, &name, &opts).await;
        let owner = admin.inspect(&name).await.unwrap().owner;
        assert_eq!(
            owner.as_deref(),
            Some(member.as_str()),
            "not granted as the next in line"
        );
        check("granted to the next waiter", name, g).await;
    }
}

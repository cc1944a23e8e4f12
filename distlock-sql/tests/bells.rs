//! MySQL/MariaDB row mode across processes: a waiter waits on the *bell* of the place ahead of
//! it (a `GET_LOCK` user lock the waiter ahead, or the holder that queued, keeps) instead of
//! polling the lock, a bell is let go with its acquisition however that ends, and a bell is
//! only a hint: a lost one costs polling, never a second holder. Each "process" is a client
//! through its own proxy (its own in-process queue, and requests counted).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockGuard};
use distlock_sql::SqlLock;
use support::{holder_member, mysql_url, queued, within};
use tokio::task::JoinHandle;

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .wait(Duration::from_secs(20))
        .ttl(Duration::from_secs(30))
}

fn waiting(lock: &Arc<SqlLock>, name: &str) -> JoinHandle<LockGuard> {
    let (lock, name) = (Arc::clone(lock), name.to_owned());
    tokio::spawn(async move { lock.acquire(&name, &opts()).await.unwrap() })
}

/// `lock` waiting for `name` in a task, once it has queued (seen by `a`) behind no one else.
async fn queued_waiter(a: &SqlLock, lock: &Arc<SqlLock>, name: &str) -> JoinHandle<LockGuard> {
    let task = waiting(lock, name);
    assert!(
        within(Duration::from_secs(5), || async {
            queued(a, name).await.len() == 1
        })
        .await,
        "the waiter did not queue"
    );
    task
}

/// Whether `member`'s bell is held by some session.
async fn bell_in_use(lock: &SqlLock, member: &str) -> bool {
    let used: i64 = sqlx::query_scalar(
        "SELECT CAST(IS_USED_LOCK(CONCAT('distlock-bell/', ?)) IS NOT NULL AS SIGNED)",
    )
    .bind(member)
    .fetch_one(lock.pool())
    .await
    .unwrap();
    used == 1
}

/// The session id holding `member`'s bell.
async fn bell_session(lock: &SqlLock, member: &str) -> i64 {
    sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(CONCAT('distlock-bell/', ?)) AS SIGNED)")
        .bind(member)
        .fetch_one(lock.pool())
        .await
        .unwrap()
}

/// Three clients: a plain one, and two through proxies; `name` held by the second, which
/// queued behind the first and so holds a bell. Returns the clients, the second's guard and
/// the third's proxy.
async fn held_by_a_queued_holder(
    name: &str,
) -> (
    SqlLock,
    LockGuard,
    Arc<SqlLock>,
    distlock_core::fault::FaultProxy,
    distlock_core::fault::FaultProxy,
) {
    let url = mysql_url();
    let a = support::connect_or_explain(&url).await;
    let (b, pb) = support::through_proxy(&url).await;
    let (c, pc) = support::through_proxy(&url).await;
    let (b, c) = (Arc::new(b), Arc::new(c));
    let first = a.acquire(name, &opts()).await.unwrap();
    let second = queued_waiter(&a, &b, name).await;
    first.release().await.unwrap();
    let held = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the queued client was not granted")
        .unwrap();
    let member = holder_member(&a, name).await;
    assert!(
        bell_in_use(&a, &member).await,
        "a holder that queued keeps its bell"
    );
    drop(b);
    (a, held, c, pc, pb)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_another_process_waits_on_the_bell_ahead_instead_of_polling() {
    let name = format!("bell-{}", &distlock_core::backend::owner_token()[..8]);
    let (a, held, c, pc, _pb) = held_by_a_queued_holder(&name).await;
    let holder = holder_member(&a, &name).await;
    let third = queued_waiter(&a, &c, &name).await;
    // Settled: it waits on the holder's bell (its look, sqlx's pings as connections go back
    // and the bell connection's opening are done). Polling, it would look every millisecond.
    let before = support::quiet(&pc).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let sent = pc.chunks_sent() - before;
    // A bell wait lasts up to a second; one ending in the window is followed by a place
    // refresh, a look and the next wait: at most a few requests, where polling sends hundreds.
    assert!(
        sent <= 6,
        "the waiter sent {sent} requests in 500 ms while the lock was held (it should wait on \
         the holder's bell)"
    );
    assert!(!third.is_finished(), "granted while the lock was held");
    let released = tokio::time::Instant::now();
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the waiter was not granted after the release")
        .unwrap();
    let took = released.elapsed();
    assert!(
        !bell_in_use(&a, &holder).await,
        "the released holder's bell is still held"
    );
    g.release().await.unwrap();
    assert!(
        took < Duration::from_secs(2),
        "granted {took:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_lets_its_bell_go() {
    let name = format!(
        "bell-cancel-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let url = mysql_url();
    let a = support::connect_or_explain(&url).await;
    let (b, _pb) = support::through_proxy(&url).await;
    let b = Arc::new(b);
    let held = a.acquire(&name, &opts()).await.unwrap();
    let waiter = queued_waiter(&a, &b, &name).await;
    let member = queued(&a, &name).await.remove(0);
    assert!(
        bell_in_use(&a, &member).await,
        "a queued waiter holds its bell"
    );
    waiter.abort();
    assert!(
        within(Duration::from_secs(3), || bell_in_use_not(&a, &member)).await,
        "the cancelled waiter's bell is still held"
    );
    held.release().await.unwrap();
}

async fn bell_in_use_not(lock: &SqlLock, member: &str) -> bool {
    !bell_in_use(lock, member).await
}

/// The holder's bell connection is killed: its follower wakes without news, falls back to
/// looking, does not get the lock while it is held, and gets it after the release; the holder
/// keeps its lock (the bell is not the lock).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_whose_bell_is_lost_keeps_its_lock_and_still_hands_over() {
    let name = format!("bell-lost-{}", &distlock_core::backend::owner_token()[..8]);
    let (a, held, c, _pc, _pb) = held_by_a_queued_holder(&name).await;
    let holder = holder_member(&a, &name).await;
    let third = queued_waiter(&a, &c, &name).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let session = bell_session(&a, &holder).await;
    sqlx::query(sqlx::AssertSqlSafe(format!("KILL CONNECTION {session}")))
        .execute(a.pool())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !third.is_finished(),
        "granted while the lock was held (its bell was lost)"
    );
    assert!(!held.is_lost(), "the holder lost its lock");
    let token = held.fencing_token();
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the waiter was not granted after the release")
        .unwrap();
    assert!(g.fencing_token() > token);
    g.release().await.unwrap();
}

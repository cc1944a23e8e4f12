//! SQLite row mode across processes: a waiter waits on the *bell* of the place ahead of it —
//! a listening Unix socket in Linux's abstract namespace that the waiter ahead, or the holder
//! that queued, keeps (`distlock-sql/src/bells/sockets.rs`) — instead of polling the file, and a
//! bell is let go with its acquisition however that ends. Each "process" is a client that
//! spells the database file's path its own way (its own in-process queue). The sockets are
//! read from `/proc/net/unix`.
#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockGuard};
use distlock_sql::SqlLock;
use support::{holder_member, queued, sqlite_url, within};
use tokio::task::JoinHandle;

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .wait(Duration::from_secs(20))
        .ttl(Duration::from_secs(30))
}

/// `n` clients of one SQLite file, each spelling its path differently (`dir/./file`,
/// `dir/././file`, …), so that none shares another's in-process queue.
async fn processes(n: usize) -> Vec<Arc<SqlLock>> {
    let url = sqlite_url();
    let (dir, file) = url.rsplit_once('/').unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let spelled = format!("{dir}/{}{file}", "./".repeat(i));
        out.push(Arc::new(support::connect_or_explain(&spelled).await));
    }
    out
}

fn waiting(lock: &Arc<SqlLock>, name: &str) -> JoinHandle<LockGuard> {
    let (lock, name) = (Arc::clone(lock), name.to_owned());
    tokio::spawn(async move { lock.acquire(&name, &opts()).await.unwrap() })
}

/// `lock` waiting for `name` in a task, once `places` places are queued (seen by `a`).
async fn queued_waiter(
    a: &SqlLock,
    lock: &Arc<SqlLock>,
    name: &str,
    places: usize,
) -> JoinHandle<LockGuard> {
    let task = waiting(lock, name);
    assert!(
        within(Duration::from_secs(5), || async {
            queued(a, name).await.len() == places
        })
        .await,
        "the waiter did not queue"
    );
    task
}

/// The sockets on this machine named after `member`'s bell: its listener and one per waiter
/// connected to it (an accepted connection shows the listener's name too).
fn bell_sockets(member: &str) -> usize {
    let needle = format!("@distlock-bell/{member}");
    std::fs::read_to_string("/proc/net/unix")
        .unwrap()
        .lines()
        .filter(|l| l.ends_with(&needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_another_process_waits_on_the_bell_ahead_and_wakes_at_its_ring() {
    let name = format!("bell-{}", &distlock_core::backend::owner_token()[..8]);
    let clients = processes(3).await;
    let (a, b, c) = (&clients[0], &clients[1], &clients[2]);
    // b queues behind a's hold and so holds a bell, which it keeps once granted.
    let first = a.acquire(&name, &opts()).await.unwrap();
    let second = queued_waiter(a, b, &name, 1).await;
    first.release().await.unwrap();
    let held = tokio::time::timeout(Duration::from_secs(5), second)
        .await
        .expect("the queued client was not granted")
        .unwrap();
    let holder = holder_member(a, &name).await;
    assert_eq!(
        bell_sockets(&holder),
        1,
        "a holder that queued keeps its bell"
    );
    // c queues behind the holder and waits on its bell: connected to it.
    let third = queued_waiter(a, c, &name, 1).await;
    assert!(
        within(Duration::from_secs(5), || async {
            bell_sockets(&holder) >= 2
        })
        .await,
        "the waiter does not wait on the holder's bell"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!third.is_finished(), "granted while the lock was held");
    let released = tokio::time::Instant::now();
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), third)
        .await
        .expect("the waiter was not granted after the release")
        .unwrap();
    let took = released.elapsed();
    // The winning write took the waiter's place out of the queue (a trigger), nothing after.
    assert!(
        queued(a, &name).await.is_empty(),
        "the granted waiter's place is still queued"
    );
    assert_eq!(
        bell_sockets(&holder),
        0,
        "the released holder's bell is still there"
    );
    g.release().await.unwrap();
    // Well within the bell wait's one-second bound: the ring woke it, not a timeout.
    assert!(
        took < Duration::from_millis(500),
        "granted {took:?} after the release"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_lets_its_bell_go() {
    let name = format!(
        "bell-cancel-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let clients = processes(2).await;
    let (a, b) = (&clients[0], &clients[1]);
    let held = a.acquire(&name, &opts()).await.unwrap();
    let waiter = queued_waiter(a, b, &name, 1).await;
    let member = queued(a, &name).await.remove(0);
    assert_eq!(bell_sockets(&member), 1, "a queued waiter holds its bell");
    waiter.abort();
    assert!(
        within(Duration::from_secs(3), || async {
            bell_sockets(&member) == 0
        })
        .await,
        "the cancelled waiter's bell is still there"
    );
    held.release().await.unwrap();
}

/// A client that queued for a name lately tries it next time and, losing, takes its bell and
/// its place in the same write; cancelled anywhere in that (every 0.25 ms over the first
/// 5 ms), it leaves no place behind, and the lock still passes to a waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_try_that_joins_cancelled_anywhere_leaves_no_place() {
    let name = format!("bell-join-{}", &distlock_core::backend::owner_token()[..8]);
    let clients = processes(2).await;
    let (a, b) = (&clients[0], &clients[1]);
    // b queues once, so its next first tries join as they lose.
    let held = a.acquire(&name, &opts()).await.unwrap();
    let first = queued_waiter(a, b, &name, 1).await;
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), first)
        .await
        .unwrap()
        .unwrap();
    g.release().await.unwrap();
    let held = a.acquire(&name, &opts()).await.unwrap();
    for step in 0..20u64 {
        let cancelled_after = Duration::from_micros(250 * step);
        let _ = tokio::time::timeout(cancelled_after, b.acquire(&name, &opts())).await;
        // Settled: a place the cancelled try's statement committed after the cancel is taken
        // back by its own task; none may stay (a leaked one would stay 3 s, until it lapsed).
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            within(Duration::from_secs(2), || async {
                queued(a, &name).await.is_empty()
            })
            .await,
            "cancelled after {cancelled_after:?}: its place is still queued"
        );
    }
    // The waiter after them is served.
    let waiter = queued_waiter(a, b, &name, 1).await;
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter after the cancelled tries was not served")
        .unwrap();
    g.release().await.unwrap();
}

/// A runtime built with timers but no IO driver (enough for sqlx's SQLite): tokio's sockets
/// panic there, so bells cannot be had — waiters fall back to polling and the lock still
/// passes across "processes", with no panic in the caller.
#[test]
fn without_an_io_driver_waiters_poll_instead_of_panicking() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    rt.block_on(async {
        let name = format!("bell-noio-{}", &distlock_core::backend::owner_token()[..8]);
        let clients = processes(2).await;
        let (a, b) = (&clients[0], &clients[1]);
        let held = a.acquire(&name, &opts()).await.unwrap();
        let waiter = queued_waiter(a, b, &name, 1).await;
        let token = held.fencing_token();
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter was not served")
            .expect("the waiter's task panicked");
        assert!(g.fencing_token() > token);
        g.release().await.unwrap();
    });
}

//! A waiter whose watch is late still takes the lock as soon as it is free. etcd 3.4 serves a
//! watch registered while a write commits from its catch-up loop, every 100 ms; under
//! contention a few watches in a thousand landed there, and each held up its waiter and every
//! waiter behind it: eight contenders' wait p99 was ~100 ms. While a watch may be late (its
//! first 150 ms), the waiter reads its predecessor's key itself every 10 ms (`lock_etcd`'s
//! `queue` module).
//!
//! The late watch is made with a test hook (`set_watches_deaf`: the client's watches report no
//! deletion), because which watch etcd registers late cannot be chosen from outside. Its own
//! test binary, so no other test loads the machine inside its 150 ms window.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock, LockGuard};
use lock_etcd::EtcdLock;
use support::{etcd_lock, single_url, unique};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The tests run one at a time: each times a window, and the second counts the member's reads.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_watch_is_late_reads_the_release_itself() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (held, waiter, task) = held_and_waited_for("late-watch", true).await;
    // The waiter has read the range and asks for its watch right after (one round trip).
    let deadline = Instant::now() + Duration::from_secs(5);
    while waiter.range_reads() == 0 {
        assert!(Instant::now() < deadline, "the waiter never looked");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    let token = held.fencing_token();
    let released = Instant::now();
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the waiter was never served")
        .unwrap();
    let took = released.elapsed();
    assert!(g.fencing_token() > token);
    assert!(
        took < Duration::from_secs(1),
        "the waiter took the lock {took:?} after its release (a late watch waited for the \
         silent watch's 2 s recheck)"
    );
    assert_eq!(
        waiter.read_before_watch(),
        1,
        "the waiter's own read should have found the release"
    );
    assert_eq!(waiter.wakeups(), 1, "one wake-up for one handoff");
    g.release().await.unwrap();
}

/// After its first 150 ms a watch is trusted again: a waiter held back longer reads its
/// predecessor only on the silent watch's recheck (every 2 s here), not every 10 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_stops_reading_once_its_watch_is_surely_served() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (held, waiter, task) = held_and_waited_for("late-watch-quiet", false).await;
    let before = reads_of(&single_url()).await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let during = reads_of(&single_url()).await - before;
    // 15 reads of the first 150 ms and a few of the test's own; 150 if it kept reading.
    assert!(
        during <= 40,
        "a waiter held back 1.5 s made {during} reads (it should stop after its watch's first 150 ms)"
    );
    held.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the waiter was never served")
        .unwrap();
    assert_eq!(
        waiter.read_before_watch(),
        0,
        "its prompt watch reported the release"
    );
    g.release().await.unwrap();
}

/// A lock of a fresh name held by one client, and another client's acquisition of it waiting
/// (its watches `deaf` or not). A 10 s lease: a silent watch is rechecked only after 2 s.
async fn held_and_waited_for(
    what: &str,
    deaf: bool,
) -> (LockGuard, Arc<EtcdLock>, JoinHandle<LockGuard>) {
    let holder = etcd_lock(&single_url()).await;
    let waiter = Arc::new(etcd_lock(&single_url()).await);
    waiter.set_watches_deaf(deaf);
    let name = unique(what);
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let task = {
        let waiter = Arc::clone(&waiter);
        tokio::spawn(async move { waiter.acquire(&name, &opts).await.unwrap() })
    };
    (held, waiter, task)
}

/// The member's count of range requests so far.
async fn reads_of(url: &str) -> i64 {
    let page = support::metrics(url).await;
    support::metric(&page, "etcd_debugging_mvcc_range_total")
}

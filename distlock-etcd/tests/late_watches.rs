//! A waiter whose watch is late still takes the lock as soon as it is free. etcd 3.4 serves a
//! watch registered while a write commits from its catch-up loop, every 100 ms; under
//! contention a few watches in a thousand landed there, and each held up its waiter and every
//! waiter behind it: eight contenders' wait p99 was ~100 ms. While a watch may be late (its
//! first 150 ms, until a read proves it prompt), the waiter reads its predecessor's key itself
//! every 10 ms (`distlock_etcd`'s `queue` module).
//!
//! The late watch is made with a test hook (`set_watches_deaf`, cargo feature `test-hooks`: the
//! client's watches report no deletion and, like a watch the member did register late, no
//! read proves them prompt), because which watch etcd registers late cannot be chosen from
//! outside. A deaf watch is read around for 1 s instead of 150 ms, so a loaded test machine
//! stalling the release cannot outlast the window. Its own test binary, so the tests here run
//! one at a time and no other test writes to the member while one counts its reads.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, DistributedSemaphore, LockGuard};
use distlock_etcd::EtcdLock;
use support::{etcd_lock, single_url, unique};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// The tests run one at a time: each times a window, and one counts the member's reads.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_watch_is_late_reads_the_release_itself() {
    let _one = ONE_AT_A_TIME.lock().await;
    let (held, waiter, task) = held_and_waited_for("late-watch", true).await;
    watching(&waiter).await;
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
    // Its deaf watch could not tell it: a read did (one made around the watch, or — when the
    // release came first — the one checking a watch that started past the range read).
    assert!(waiter.read_before_watch() <= 1);
    assert_eq!(waiter.wakeups(), 1, "one wake-up for one handoff");
    g.release().await.unwrap();
}

/// A waiter stops reading around its watch once a read proves the watch prompt (nothing
/// written to the member since the watch's start: the first read, here), or at the latest
/// after 150 ms; a waiter held back 4.5 s then reads its predecessor only on the silent watch's
/// 2 s rechecks, whose own watches are not read around. The proof needs a member nothing else
/// writes to: an attempt during which the member's revision moved by more than the waiter's
/// own enqueue (a lease of an earlier test running out with a key) proves nothing and is made
/// again, at most three times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_stops_reading_once_its_watch_is_proven_prompt() {
    let _one = ONE_AT_A_TIME.lock().await;
    for attempt in 1..=3 {
        let (held, waiter, task) = held_and_waited_for("late-watch-quiet", false).await;
        let before = member_counts().await;
        tokio::time::sleep(Duration::from_millis(4_500)).await;
        let after = member_counts().await;
        let (reads, writes) = (after.0 - before.0, after.1 - before.1);
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the waiter was never served")
            .unwrap();
        g.release().await.unwrap();
        // The waiter's own enqueue may land before `before` or after it.
        if writes > 1 {
            eprintln!("attempt {attempt}: {writes} writes to the member while it waited; again");
            continue;
        }
        // The enqueue, the range read and the proving read to start, two rechecks (a key read
        // each, perhaps a second when a watch started past it): 6 in local runs. Reading the
        // whole window instead of stopping at the proof: 14; never stopping: ~450.
        assert!(
            reads <= 9,
            "a waiter held back 4.5 s made {reads} reads (it should stop once a read proves \
             its watch prompt, and not read around a recheck's watch)"
        );
        assert_eq!(
            waiter.read_before_watch(),
            0,
            "its prompt watch reported the release"
        );
        return;
    }
    panic!("the member was written to by someone else during all three attempts");
}

/// The member's range requests and its revision so far.
async fn member_counts() -> (i64, i64) {
    let page = support::metrics(&single_url()).await;
    (
        support::metric(&page, "etcd_debugging_mvcc_range_total"),
        support::metric(&page, "etcd_debugging_mvcc_current_revision"),
    )
}

/// A semaphore's admitter reads around its late watch too (its look is a range read of at most
/// `max_count` keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_whose_watch_is_late_reads_the_release_itself() {
    let _one = ONE_AT_A_TIME.lock().await;
    let holder = etcd_lock(&single_url()).await;
    let waiter = Arc::new(etcd_lock(&single_url()).await);
    waiter.set_watches_deaf(true);
    let name = unique("late-watch-sem");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(10))
        .wait(Duration::from_secs(10));
    let permit = DistributedSemaphore::acquire(&holder, &name, 1, &opts)
        .await
        .unwrap();
    let task = {
        let (waiter, name, opts) = (Arc::clone(&waiter), name.clone(), opts.clone());
        tokio::spawn(async move {
            DistributedSemaphore::acquire(&*waiter, &name, 1, &opts)
                .await
                .unwrap()
        })
    };
    watching(&waiter).await;
    let released = Instant::now();
    permit.release().await.unwrap();
    let g = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the waiter was never admitted")
        .unwrap();
    let took = released.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the waiter got the permit {took:?} after its release (its late watch waited for the \
         2 s recheck)"
    );
    // A read found the release (around the watch, or the look after a watch that started past
    // the range read).
    assert!(waiter.read_before_watch() <= 1);
    assert_eq!(waiter.wakeups(), 1, "one wake-up for one release");
    g.release().await.unwrap();
}

/// Returns once `waiter` has a watch confirmed (the test then releases well inside the deaf
/// watch's window, 1 s).
async fn watching(waiter: &EtcdLock) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while waiter.waiter_watches() == 0 {
        assert!(Instant::now() < deadline, "the waiter never watched");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
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
    let held = DistributedLock::acquire(&holder, &name, &opts)
        .await
        .unwrap();
    let task = {
        let waiter = Arc::clone(&waiter);
        tokio::spawn(async move {
            DistributedLock::acquire(&*waiter, &name, &opts)
                .await
                .unwrap()
        })
    };
    (held, waiter, task)
}

//! A client's watches share one gRPC watch stream, and none outlives its guard or waiter.
//!
//! Read from the member's own gauges (`/metrics`: `etcd_debugging_mvcc_watch_stream_total`,
//! `etcd_debugging_mvcc_watcher_total`): a stream per watch cost every held lock ~21 KiB of
//! client memory (issue 20's bound is 2 KiB), and a watch left behind would be a leak on the
//! server. One test in this file, so nothing else of this process moves the gauges meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use support::{connect_or_explain, single_url, unique};

/// How many held locks (and waiters) the test keeps at once.
const N: usize = 40;

/// The member's watch streams and watchers now.
async fn gauges() -> (i64, i64) {
    let page = support::metrics(&single_url()).await;
    (
        support::metric(&page, "etcd_debugging_mvcc_watch_stream_total"),
        support::metric(&page, "etcd_debugging_mvcc_watcher_total"),
    )
}

/// Waits (at most 10 s) until `ok` holds for the gauges; returns the last reading.
async fn until(ok: impl Fn((i64, i64)) -> bool) -> (i64, i64) {
    let mut last = gauges().await;
    for _ in 0..200 {
        if ok(last) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = gauges().await;
    }
    last
}

#[tokio::test]
async fn watches_share_one_stream_and_none_outlives_its_guard_or_waiter() {
    let lock: Arc<dyn DistributedLock> = connect_or_explain(&single_url()).await;
    let (streams0, watchers0) = gauges().await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(10));

    // N held locks: each guard watches its own key (its lost() signal).
    let mut guards = Vec::new();
    for i in 0..N {
        guards.push(
            lock.acquire(&unique(&format!("ws{i}")), &opts)
                .await
                .unwrap(),
        );
    }
    let (streams, watchers) = until(|(_, w)| w >= watchers0 + N as i64).await;
    assert!(
        watchers >= watchers0 + N as i64,
        "{N} held locks should keep {N} watches on the member: {watchers0} -> {watchers}"
    );
    assert!(
        streams <= streams0 + 2,
        "{N} held locks of one client should share one watch stream: {streams0} -> {streams}"
    );

    // N waiters on one held name: each watches its predecessor, on the same stream.
    let name = unique("ws-queue");
    let holder = lock.acquire(&name, &opts).await.unwrap();
    let mut waiters = Vec::new();
    for _ in 0..N {
        let (lock, name, opts) = (Arc::clone(&lock), name.clone(), opts.clone());
        waiters.push(tokio::spawn(async move {
            let g = lock.acquire(&name, &opts).await.unwrap();
            let token = g.fencing_token();
            g.release().await.unwrap();
            token
        }));
    }
    let (streams, watchers) = until(|(_, w)| w > watchers0 + 2 * N as i64).await;
    assert!(
        watchers > watchers0 + 2 * N as i64,
        "{N} held locks, a holder and {N} waiters should keep {} watches: {watchers0} -> {watchers}",
        2 * N + 1
    );
    assert!(
        streams <= streams0 + 2,
        "the waiters should watch on the client's one stream too: {streams0} -> {streams}"
    );

    // Everything let go: every watch is cancelled on the member.
    holder.release().await.unwrap();
    let mut tokens = Vec::new();
    for w in waiters {
        tokens.push(w.await.unwrap());
    }
    assert_eq!(tokens.len(), N, "every waiter was served");
    for g in guards {
        g.release().await.unwrap();
    }
    let (_, watchers) = until(|(_, w)| w <= watchers0).await;
    assert!(
        watchers <= watchers0,
        "no watch should outlive its guard or waiter: {watchers0} before, {watchers} after"
    );
}

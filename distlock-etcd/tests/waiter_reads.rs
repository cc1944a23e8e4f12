//! What a queue of etcd waiters reads: etcd sorts a lock's whole range to answer a waiter's
//! predecessor lookup, so each such read costs as much as the queue is long. A waiter reads
//! the range once when it starts waiting and once after each deletion it waited for; every
//! other look (a silent watch's recheck every 2 s, a watch that started past the read) reads
//! its predecessor's key alone. Before, each recheck read the range: 1,000 waiters cost 4.4×
//! as much per handoff as one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use support::{etcd_lock, single_url, unique};

const WAITERS: u64 = 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_read_the_range_only_to_start_and_after_a_deletion() {
    let holder = etcd_lock(&single_url()).await;
    let waiters = Arc::new(etcd_lock(&single_url()).await);
    let name = unique("waiter-reads");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(30));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..WAITERS {
        let (waiters, name, opts) = (Arc::clone(&waiters), name.clone(), opts.clone());
        tasks.push(tokio::spawn(async move {
            let g = waiters.acquire(&name, &opts).await.unwrap();
            let token = g.fencing_token();
            g.release().await.unwrap();
            token
        }));
    }
    // Long enough for two rechecks of every waiter's silent watch (every 2 s).
    tokio::time::sleep(Duration::from_millis(4_500)).await;
    let waiting = waiters.range_reads();
    assert!(
        waiting <= WAITERS + 5,
        "{WAITERS} waiters read the range {waiting} times while the lock was held (once each \
         to start; their rechecks should read one key)"
    );
    let token = held.fencing_token();
    held.release().await.unwrap();
    let mut tokens = Vec::new();
    for t in tasks {
        tokens.push(
            tokio::time::timeout(Duration::from_secs(20), t)
                .await
                .expect("a waiter was never served")
                .unwrap(),
        );
    }
    assert!(tokens.iter().all(|&t| t > token), "{token} then {tokens:?}");
    let mut distinct = tokens.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        tokens.len(),
        "two waiters held with one token: {tokens:?}"
    );
    let all = waiters.range_reads();
    assert!(
        all <= 2 * WAITERS + 5,
        "{WAITERS} waiters read the range {all} times in all (once to start, once after their \
         predecessor's deletion)"
    );
    assert_eq!(waiters.wakeups(), WAITERS, "one wake-up per waiter");
    assert_eq!(
        waiters.member_reads(),
        WAITERS,
        "every waiter, woken by its predecessor's deletion, should have taken the lock on the \
         member's own read (no linearizable read on the handoff)"
    );
}

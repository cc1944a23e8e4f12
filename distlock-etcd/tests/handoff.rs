//! What a waiter does when it is handed the lock: it takes it on the member's own read and
//! its lease's last keep-alive (no linearizable read, no keep-alive, no read of its own key on
//! the handoff), and never holds unnoticed when its key was deleted while it waited — the
//! guard it gets reports the loss, or the acquisition fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockGuard};
use distlock_etcd::EtcdLock;
use support::{contenders, etcd_lock, raw, single_url, unique};

/// A fresh name held by one client on the single member, another client to wait for it, and
/// options with a `ttl_secs` lease that wait up to 20 s.
async fn held_by_another_client(
    what: &str,
    ttl_secs: u64,
) -> (LockGuard, EtcdLock, String, AcquireOptions) {
    let url = single_url();
    let holder = etcd_lock(&url).await;
    let waiter = etcd_lock(&url).await;
    let name = unique(what);
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(ttl_secs))
        .wait(Duration::from_secs(20));
    let held = holder.acquire(&name, &opts).await.unwrap();
    (held, waiter, name, opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_key_was_deleted_while_it_waited_never_holds_unnoticed() {
    let url = single_url();
    let (held, waiter, name, opts) = held_by_another_client("deleted-waiter", 30).await;
    let waiting = {
        let (name, opts) = (name.clone(), opts.clone());
        tokio::spawn(async move { waiter.acquire(&name, &opts).await })
    };
    // Until the waiter's key is in the queue behind the holder's (bounded).
    let mut queue = Vec::new();
    for _ in 0..200 {
        queue = contenders(&url, "", &name).await;
        if queue.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(queue.len(), 2, "the waiter never queued: {queue:?}");
    // An operator deletes the waiter's key, then the holder lets go.
    let (waiters_key, _) = queue[1].clone();
    let deleted = raw(&url)
        .await
        .delete(waiters_key.clone(), None)
        .await
        .unwrap();
    assert_eq!(
        deleted.deleted(),
        1,
        "{waiters_key} was not there to delete"
    );
    held.release().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter neither took the lock nor gave up")
        .unwrap();
    match got {
        // Refused: it saw its key gone.
        Err(_) => {}
        // Taken on the handoff: its guard must say it is lost, and soon (its watch starts at
        // its key's revision, so it sees the deletion that came before).
        Ok(guard) => {
            let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
            assert!(
                lost.is_ok(),
                "the waiter holds with its key {waiters_key} deleted and its guard does not \
                 say it is lost"
            );
        }
    }
    // The name is free for the next one: nothing of the waiter's stays in the queue.
    let next = etcd_lock(&url).await;
    let try_opts = AcquireOptions::new().ttl(Duration::from_secs(5));
    let again = tokio::time::timeout(Duration::from_secs(10), next.try_acquire(&name, &try_opts))
        .await
        .expect("try_acquire did not answer")
        .unwrap();
    assert!(
        again.is_some(),
        "the name stayed taken: {:?}",
        contenders(&url, "", &name).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_over_guard_counts_its_validity_from_a_keep_alive_within_its_ttl() {
    let (held, waiter, name, opts) = held_by_another_client("handed-validity", 3).await;
    let waiting = {
        let (name, opts) = (name.clone(), opts.clone());
        tokio::spawn(async move {
            let g = waiter.acquire(&name, &opts).await.unwrap();
            let left = g.remaining_validity();
            (g, left, waiter.member_reads())
        })
    };
    // Held past two of the waiter's keep-alives (every third of the 3 s lease).
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    held.release().await.unwrap();
    let (guard, left, member_reads) = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the waiter was never served")
        .unwrap();
    assert_eq!(
        member_reads, 1,
        "the handoff was not taken on the member's read"
    );
    let left = left.expect("an etcd guard has a validity");
    // Its last keep-alive was at most a third of the lease ago (plus scheduling): at least
    // half the lease is left, never more than all of it.
    assert!(
        left >= Duration::from_millis(1_500) && left <= Duration::from_secs(3),
        "validity left on the handed-over guard: {left:?}"
    );
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

//! Redlock: a holder's release hands the lock to the head of the queue on every master, and
//! the head holds once a quorum of those grants reached it — the messages that wake it are its
//! grants, so it needs no quorum round of its own. A grant from fewer masters than a quorum is
//! never the lock, the token stays above every earlier holder's, and a head that died while
//! queued holds the lock back no longer than its place in the queues would have.
//!
//! The client under test connects to every master through a fault proxy of its own, which
//! counts what it sends (its command and pub/sub connections both go through it) or cuts it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::AcquireOptions;
use support::grants::*;
use support::*;
use tokio::time::Instant;

/// One thread: nothing runs between the head's grant and its count of what it sent (see
/// `direct_grant.rs`).
#[tokio::test(flavor = "current_thread")]
async fn the_head_holds_on_a_quorum_of_grants_without_a_round_of_its_own() {
    the_head_holds_on_grants_without_a_request(&redlock_url(), None).await;
}

/// A holder whose release reaches only 2 of the 5 masters grants the head there and nowhere
/// else: 2 grants are no quorum, so the head keeps waiting until the holder's keys on the other
/// 3 masters run out, and then holds with a token above the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_from_fewer_masters_than_a_quorum_are_not_the_lock() {
    let (holder, proxies) = proxied(&redlock_url()).await;
    let waiter = connect_or_explain(&redlock_url()).await;
    let name = unique("redlock-minority");
    let ttl = Duration::from_secs(4);
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(20));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let token = held.fencing_token();
    let task = queued(&waiter, &name, opts.clone()).await;
    for p in &proxies[2..] {
        p.blackhole();
    }
    let released = Instant::now();
    assert!(
        held.release().await.is_err(),
        "a release that reached 2 of 5 masters reported success"
    );
    // The holder's keys on the 3 cut masters run out 4 s after its last renewal (at most
    // ttl/3 ago); until then the lock is the holder's on a quorum, not the head's.
    let watch_until = released + Duration::from_millis(1_500);
    while Instant::now() < watch_until {
        assert!(
            !task.is_finished(),
            "the head held on grants from a minority of masters ({:?} after the release)",
            released.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let held_elsewhere = pttls(&redlock_url(), &name).await[2..]
        .iter()
        .filter(|&&p| p > 0)
        .count();
    assert_eq!(
        held_elsewhere, 3,
        "the test meant the holder's keys on the cut masters to outlive the watch"
    );
    let g = tokio::time::timeout(ttl + Duration::from_secs(4), task)
        .await
        .expect("the head never held after the holder's keys ran out")
        .unwrap();
    assert!(g.fencing_token() > token);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_died_while_queued_holds_the_lock_back_at_most_its_place() {
    a_dead_head_holds_the_lock_back_at_most_its_place(&redlock_url()).await;
}

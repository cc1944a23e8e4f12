//! Single instance: a release hands the lock straight to the head of the queue. The message
//! that wakes the head is its grant, so the head holds without a round trip of its own — and
//! the grant keeps every promise an acquire keeps: FIFO, a token above every earlier one, the
//! caller's lease (not the grant's short claim) once held, and a head that died while queued
//! holding the lock back no longer than its place in the queue would have.
//!
//! The waiter under test connects through a fault proxy, which counts what it sends (both its
//! command and its pub/sub connection go through it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::AcquireOptions;
use support::grants::*;
use support::*;

async fn pttl(key: &str) -> i64 {
    pttls(&single_url(), key).await[0]
}

/// One thread: nothing runs between the head's grant and its count of what it sent, so a
/// request that follows the grant (its client unsubscribing from the lock's channel as the last
/// waiter there) cannot be mistaken for one of the handoff's; every request of the acquisition
/// itself was answered, so counted by the proxy, before the acquire returned.
#[tokio::test(flavor = "current_thread")]
async fn the_head_holds_without_a_round_trip_of_its_own_and_then_its_own_lease() {
    the_head_holds_on_grants_without_a_request(&single_url(), None).await;
}

/// The same for a waiter with a holder identity (its queue member is `<token>\n<identity>`,
/// spaces and all): the grant's message still names it.
#[tokio::test(flavor = "current_thread")]
async fn a_head_with_a_holder_identity_is_granted_too() {
    the_head_holds_on_grants_without_a_request(&single_url(), Some("node 7: west 42")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_or_unrenewed_lease_is_the_callers_before_the_guard_is_handed_out() {
    let holder = connect_or_explain(&single_url()).await;
    let waiter = connect_or_explain(&single_url()).await;
    for (ttl, renew) in [
        (Duration::from_secs(1), true),
        (Duration::from_secs(10), false),
    ] {
        let name = unique("grant-lease");
        let opts = AcquireOptions::new()
            .ttl(ttl)
            .renew(renew)
            .wait(Duration::from_secs(10));
        let held = holder.acquire(&name, &opts).await.unwrap();
        let task = queued(&waiter, &name, opts.clone()).await;
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the head was not granted")
            .unwrap();
        let left = pttl(&name).await;
        let want = i64::try_from(ttl.as_millis()).unwrap();
        assert!(
            left > want - 1_000 && left <= want,
            "ttl {ttl:?} renew {renew}: the held lease should be the caller's, {left} ms left"
        );
        g.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_died_while_queued_holds_the_lock_back_at_most_its_place() {
    a_dead_head_holds_the_lock_back_at_most_its_place(&single_url()).await;
}

/// A grant that reaches the head while the head's own round is on its way, and lapses before
/// that round reaches the store, is never taken for the lock: the lock went on to the next
/// waiter meanwhile. The head's requests are delayed 4 s on their way to the store (its
/// answers and the release's message are not): its place lapses with the grant, the next
/// waiter holds, and the head's round lands behind that holder, with the lapsed grant's
/// message already in hand. It must keep waiting, and hold later with a token above the
/// next waiter's. Two checks keep it so: the waiter takes a grant only if its token is above
/// the counter its last round saw (`acquire.rs`), and a guard whose acquisition took half its
/// validity is confirmed by a renewal first (`GuardParts::start`). With either one removed
/// this test passes; with both removed it fails (the head "holds" beside the next waiter).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_that_lapsed_while_the_heads_round_was_on_its_way_is_not_taken() {
    const DELAY: Duration = Duration::from_secs(4);
    let holder = connect_or_explain(&single_url()).await;
    // Replies may take the delay and more without the head's requests timing out.
    let (head, proxies) = proxied_with(&single_url(), "?timeout=20s").await;
    let proxy = &proxies[0];
    let next = connect_or_explain(&single_url()).await;
    let name = unique("grant-lapsed");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(30));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let head_task = queued(&head, &name, opts.clone()).await;
    let next_task = queued(&next, &name, opts.clone()).await;

    // Right after one of the head's heartbeat rounds (once a second): its place now lasts
    // 3 s, and its next round leaves in about 1 s and lands DELAY later.
    let refreshed = after_a_heartbeat(&proxies).await;
    proxy.set_upward_latency(DELAY);
    tokio::time::sleep_until(refreshed + Duration::from_millis(1_500)).await;

    // The release grants the head for the rest of its place (about 1.5 s).
    held.release().await.unwrap();
    let claim = pttl(&name).await;
    assert!(
        claim > 0 && claim <= 1_600,
        "the release should have granted the head for the rest of its place: PTTL {claim}"
    );
    // The grant lapses with the place; the next waiter holds.
    let next_guard = tokio::time::timeout(Duration::from_secs(6), next_task)
        .await
        .expect("the next waiter never got the lock after the head's place lapsed")
        .unwrap();
    // The head's round lands (refreshed + 1 s + DELAY) behind the next waiter's hold.
    tokio::time::sleep_until(
        refreshed + Duration::from_secs(1) + DELAY + Duration::from_millis(1_000),
    )
    .await;
    assert!(
        !head_task.is_finished(),
        "the head took a lapsed grant for the lock while the next waiter holds it"
    );
    assert!(!next_guard.is_lost());
    proxy.heal();
    let next_token = next_guard.fencing_token();
    next_guard.release().await.unwrap();
    let head_guard = tokio::time::timeout(Duration::from_secs(15), head_task)
        .await
        .expect("the head was never served")
        .unwrap();
    assert!(
        head_guard.fencing_token() > next_token,
        "the head holds with token {} after the next waiter's {next_token}: a lapsed grant's token",
        head_guard.fencing_token()
    );
    head_guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_lease_granted_directly_is_renewed() {
    a_long_lease_granted_directly_is_renewed_not_lost(&single_url()).await;
}

//! A client keeps a lock's release channel subscribed for a while (the linger, 1 s) after its
//! last waiter there stopped waiting: a waiter that comes back within it registers on the live
//! subscription before it looks at the lock, so it sends one round and waits — no `SUBSCRIBE`,
//! no second look. A channel nobody waits on is unsubscribed once the linger has passed, so
//! subscriptions never pile up.
//!
//! The waiter under test connects through a fault proxy per server, which counts what it sends
//! (its command and pub/sub connections both go through it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use lock_core::AcquireOptions;
use support::grants::*;
use support::*;
use tokio::time::Instant;

/// How many clients are subscribed to `channel` on the server at `port`.
async fn subscribers(port: u16, channel: &str) -> i64 {
    let reply: Vec<redis::Value> = run(port, redis::cmd("PUBSUB").arg("NUMSUB").arg(channel)).await;
    match reply.get(1) {
        Some(redis::Value::Int(n)) => *n,
        other => panic!("PUBSUB NUMSUB answered {other:?}"),
    }
}

/// What the client behind `proxies` sends while its `acquire` queues behind a holder: the
/// first 300 ms of the acquisition (its heartbeat comes after 1 s).
async fn sent_while_queueing(url: &str) -> (u64, u64) {
    let holder = connect_or_explain(url).await;
    let (waiter, proxies) = proxied(url).await;
    let name = unique("warm");
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(20))
        .wait(Duration::from_secs(10));
    let mut counts = Vec::new();
    for _ in 0..2 {
        let held = holder.acquire(&name, &opts).await.unwrap();
        let before = sent(&proxies);
        let task = queued(&waiter, &name, opts.clone()).await;
        counts.push(sent(&proxies) - before);
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the waiter was not served")
            .unwrap();
        g.release().await.unwrap();
        // A Redlock release returns once a quorum released; the other masters' releases must
        // land before the next count starts.
        let until = Instant::now() + Duration::from_secs(2);
        while pttls(url, &name).await.iter().any(|&p| p != -2) {
            assert!(
                Instant::now() < until,
                "the lock was not released everywhere"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    (counts[0], counts[1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_on_a_warm_channel_sends_one_round_before_it_waits() {
    for url in [single_url(), redlock_url()] {
        let servers = ports(&url).len() as u64;
        let (cold, warm) = sent_while_queueing(&url).await;
        // Cold: a round, the SUBSCRIBE, and a second round (a release between the first round
        // and the subscription must not be missed) on every server, after opening the pub/sub
        // connection the first time.
        assert!(
            cold >= 3 * servers,
            "{url}: a waiter on a cold channel should send a round, SUBSCRIBE and a round to \
             each server: {cold} requests"
        );
        assert_eq!(
            warm, servers,
            "{url}: a waiter whose client was subscribed moments ago should send one round to each server"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_nobody_waits_on_is_unsubscribed_after_the_linger() {
    let url = single_url();
    let port = ports(&url)[0];
    let holder = connect_or_explain(&url).await;
    let waiter = connect_or_explain(&url).await;
    let name = unique("linger");
    let channel = format!("distlock:released:{name}");
    let opts = AcquireOptions::new().wait(Duration::from_secs(10));
    let held = holder.acquire(&name, &opts).await.unwrap();
    let task = queued(&waiter, &name, opts.clone()).await;
    assert_eq!(
        subscribers(port, &channel).await,
        1,
        "the waiter subscribed"
    );
    held.release().await.unwrap();
    let g = task.await.unwrap();
    let stopped_waiting = Instant::now();
    g.release().await.unwrap();
    let deadline = stopped_waiting + Duration::from_secs(5);
    while subscribers(port, &channel).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the channel is still subscribed 5 s after its last waiter stopped waiting"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let unsubscribed_after = stopped_waiting.elapsed();
    assert!(
        unsubscribed_after >= Duration::from_millis(900),
        "unsubscribed {unsubscribed_after:?} after the last waiter: the linger is 1 s"
    );
}

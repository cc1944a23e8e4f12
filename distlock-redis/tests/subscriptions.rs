//! A client keeps a lock's release channel subscribed for a while (the linger, 1 s) after its
//! last waiter there stopped waiting: a waiter that comes back within it registers on the live
//! subscription before it looks at the lock, so it sends one round and waits — no `SUBSCRIBE`,
//! no second look. A channel nobody waits on is unsubscribed once the linger has passed, so
//! subscriptions never pile up. The clients of one process share one subscription per server
//! (on one runtime): a release message reaches the process once.
//!
//! The waiter under test connects through a fault proxy per server, which counts what it sends
//! (its command and pub/sub connections both go through it).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::AcquireOptions;
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

/// How many waiters `url`'s queue of `name` lists on every server, once it lists `n` on each
/// (or after 5 s of looking).
async fn wait_queued(url: &str, name: &str, n: i64) {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let mut lengths = Vec::new();
        for port in ports(url) {
            lengths.push(run::<i64>(port, redis::cmd("ZCARD").arg(aux_key(name, "queue"))).await);
        }
        if lengths.iter().all(|&l| l == n) {
            return;
        }
        assert!(
            Instant::now() < until,
            "{url}: {n} waiters should be queued on every server, found {lengths:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_one_process_share_one_subscription_per_server() {
    for url in [single_url(), redlock_url()] {
        let holder = connect_or_explain(&url).await;
        let name = unique("shared");
        let channel = format!("distlock:released:{name}");
        let opts = AcquireOptions::new().wait(Duration::from_secs(10));
        let held = holder.acquire(&name, &opts).await.unwrap();
        let mut waiters = Vec::new();
        for _ in 0..4 {
            let client = connect_or_explain(&url).await;
            waiters.push(queued(&client, &name, opts.clone()).await);
        }
        wait_queued(&url, &name, 4).await;
        // Settle: a waiter subscribes after its first round queued it.
        tokio::time::sleep(Duration::from_millis(200)).await;
        for port in ports(&url) {
            assert_eq!(
                subscribers(port, &channel).await,
                1,
                "{url}: four clients of one process waiting on port {port} should share one \
                 pub/sub connection (each used to read every release message)"
            );
        }
        // And each is still woken in its turn.
        held.release().await.unwrap();
        for w in waiters {
            let g = tokio::time::timeout(Duration::from_secs(5), w)
                .await
                .expect("a waiter sharing the subscription was not served")
                .unwrap();
            g.release().await.unwrap();
        }
    }
}

/// A subscriber is shared per runtime: its connection is driven by a task of the runtime that
/// opened it and closes with it, so a client on another runtime keeps its own subscription
/// when the first runtime ends (sharing across runtimes would leave its waiter to its
/// heartbeat, 1 s).
#[test]
fn a_client_on_another_runtime_keeps_its_subscription_when_the_first_runtime_ends() {
    let url = single_url();
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(20))
        .wait(Duration::from_secs(10));
    let first = runtime();
    // On the first runtime, a waiter opens its client's subscription.
    let (first_held, first_task) = first.block_on(async {
        let holder = connect_or_explain(&url).await;
        let waiter = connect_or_explain(&url).await;
        let name = unique("rt-first");
        let held = holder.acquire(&name, &opts).await.unwrap();
        (held, queued(&waiter, &name, opts.clone()).await)
    });
    // On the second, a waiter queues while the first runtime's subscription is live.
    let second = runtime();
    let name = unique("rt-second");
    let (held, task) = second.block_on(async {
        let holder = connect_or_explain(&url).await;
        let waiter = connect_or_explain(&url).await;
        let held = holder.acquire(&name, &opts).await.unwrap();
        (held, queued(&waiter, &name, opts.clone()).await)
    });
    first.block_on(async {
        first_task.abort();
        first_held.release().await.unwrap();
    });
    drop(first);
    second.block_on(async {
        // Settle: the server drops a closed connection's subscriptions when it reads the close.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            subscribers(ports(&url)[0], &format!("distlock:released:{name}")).await,
            1,
            "the waiter on the second runtime lost its subscription when the first runtime \
             ended: it was sharing that runtime's connection"
        );
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the waiter on the second runtime was not served")
            .unwrap();
        g.release().await.unwrap();
    });
}

/// A client connected on one runtime and first used on another uses that runtime's subscriber
/// there, so the other clients of the first runtime are not tied to a task of the second: here
/// a current-thread runtime nobody drives once its `block_on` returns (sharing by the runtime a
/// client connected on left the next waiter's `SUBSCRIBE` waiting for it forever).
#[test]
fn a_client_used_on_another_runtime_does_not_tie_the_others_to_it() {
    let url = single_url();
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let side = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_secs(20))
        .wait(Duration::from_secs(10));
    let (holder, first, second) = main.block_on(async {
        (
            connect_or_explain(&url).await,
            connect_or_explain(&url).await,
            connect_or_explain(&url).await,
        )
    });
    // `first` waits once on the side runtime: its subscription is made there.
    let name = unique("side");
    let held = main.block_on(holder.acquire(&name, &opts)).unwrap();
    let releaser = main.spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        held.release().await.unwrap();
    });
    let g = side.block_on(first.acquire(&name, &opts)).unwrap();
    main.block_on(releaser).unwrap();
    side.block_on(g.release()).unwrap();
    // Nobody drives the side runtime now; `second` waits on the main one.
    main.block_on(async {
        let name = unique("main");
        let held = holder.acquire(&name, &opts).await.unwrap();
        let task = queued(&second, &name, opts.clone()).await;
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("a waiter on the main runtime was not served: tied to the side runtime")
            .unwrap();
        g.release().await.unwrap();
    });
}

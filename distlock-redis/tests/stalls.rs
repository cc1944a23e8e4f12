//! Redlock with a stalled minority: a master that keeps its connections open and answers
//! nothing (a paused process, a blackholed route). Every promise holds and no acquisition,
//! renewal or release waits on it while a quorum answers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::{AcquireOptions, DistributedLock};
use support::*;
use tokio::time::Instant;

/// How long each client holds the lock per turn.
const HOLD: Duration = Duration::from_millis(500);
/// Turns each client takes.
const TURNS: usize = 4;
/// The most a call may take: the one that learns a master is stalled waits for Redlock's
/// per-node timeout (750 ms with the defaults).
const LEARNING: Duration = Duration::from_millis(1750);

/// Two Redlock clients over one set of proxies (one per master), default options.
async fn two_clients() -> (Vec<FaultProxy>, [Arc<dyn DistributedLock>; 2]) {
    let (proxies, url) = redlock_proxies().await;
    let clients = [
        connect_or_explain(&url).await,
        connect_or_explain(&url).await,
    ];
    (proxies, clients)
}

/// Two clients take turns on one name (hold, extend, release, ask again at once) while master
/// 2 is stalled from `stall_after` on: every acquisition returns within a hold and a second,
/// but for one per client, which waits at most one per-node timeout to learn the master is
/// stalled (it is then not waited on); the turns alternate (the releaser never re-takes the
/// name ahead of the waiter), every extend and release succeeds, no guard is lost.
async fn take_turns(stall_after: Duration) {
    let (proxies, clients) = two_clients().await;
    let name = unique("stalled-minority");
    let proxies = Arc::new(proxies);
    let stall = {
        let proxies = Arc::clone(&proxies);
        tokio::spawn(async move {
            tokio::time::sleep(stall_after).await;
            proxies[2].blackhole();
        })
    };
    let order = Arc::new(Mutex::new(Vec::new()));
    let began = Instant::now();
    let mut tasks = Vec::new();
    for (who, lock) in clients.into_iter().enumerate() {
        let (name, order) = (name.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            // The second client starts once the first holds, so the turns have an order.
            tokio::time::sleep(Duration::from_millis(100) * who as u32).await;
            let opts = AcquireOptions::new().wait(Duration::from_secs(30));
            for turn in 0..TURNS {
                let asked = Instant::now();
                let g = lock.acquire(&name, &opts).await.unwrap_or_else(|e| {
                    panic!("client {who} turn {turn}: {e} after {:?}", asked.elapsed())
                });
                let waited = asked.elapsed();
                order.lock().unwrap().push((who, waited));
                tokio::time::sleep(HOLD / 2).await;
                // A renewal returns once a quorum renewed.
                let t = Instant::now();
                g.extend(Duration::from_secs(30))
                    .await
                    .unwrap_or_else(|e| panic!("client {who} turn {turn}: extend: {e}"));
                assert!(
                    t.elapsed() < LEARNING,
                    "client {who} turn {turn}: extend took {:?}",
                    t.elapsed()
                );
                tokio::time::sleep(HOLD / 2).await;
                assert!(
                    !g.is_lost(),
                    "client {who} turn {turn}: lost while held: {g:?}"
                );
                let t = Instant::now();
                g.release()
                    .await
                    .unwrap_or_else(|e| panic!("client {who} turn {turn}: release: {e}"));
                assert!(
                    t.elapsed() < LEARNING,
                    "client {who} turn {turn}: release took {:?}",
                    t.elapsed()
                );
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("the turns did not end within 60 s")
            .unwrap();
    }
    stall.await.unwrap();
    for p in proxies.iter() {
        p.heal();
    }
    let order = order.lock().unwrap().clone();
    let whose: Vec<usize> = order.iter().map(|(w, _)| *w).collect();
    let alternating = whose.windows(2).all(|w| w[0] != w[1]);
    assert!(
        alternating,
        "the turns did not alternate (a releaser re-took the name ahead of a waiter): {order:?}"
    );
    // The first acquisition waits for nobody; every later one for the other's hold at most,
    // but for the one call per client that learns of the stall by its timeout.
    let slow: Vec<_> = order
        .iter()
        .filter(|(_, w)| *w > HOLD + Duration::from_secs(1))
        .collect();
    assert!(
        slow.len() <= 2 && slow.iter().all(|(_, w)| *w < HOLD + LEARNING),
        "acquisitions waited on the stalled master: {slow:?} (all: {order:?}, {:?} in all)",
        began.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_takes_turns_with_a_master_stalled_from_the_start() {
    take_turns(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_takes_turns_with_a_master_stalled_midway() {
    take_turns(HOLD * 3).await;
}

/// `inspect` answers what the masters that answered can tell: a holder named by a quorum of
/// them, free when the silent ones could not complete anyone's quorum (before, any silent
/// master made `inspect` fail), and otherwise `Unavailable` — never "free" while the masters
/// that did not answer may complete a holder's quorum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_never_says_free_while_silent_masters_may_hold_it() {
    // A holds on masters 0, 1 and 2 only: its routes to 3 and 4 are cut while it acquires.
    let (a_proxies, a_url) = redlock_proxies().await;
    let a = connect_or_explain(&format!("{a_url}?timeout=1s")).await;
    let name = unique("inspect-silent");
    a_proxies[3].blackhole();
    a_proxies[4].blackhole();
    let g = a
        .acquire(&name, &AcquireOptions::new().ttl(Duration::from_secs(30)))
        .await
        .unwrap();
    let (b_proxies, b_url) = redlock_proxies().await;
    let b = connect_or_explain(&format!("{b_url}?timeout=1s")).await;
    assert_eq!(
        b.inspect(&name).await.unwrap().fencing_token,
        Some(g.fencing_token()),
        "every master answers"
    );
    // Master 0 silent: 1 and 2 name A, 3 and 4 hold nothing; with 0, A may have its quorum.
    b_proxies[0].blackhole();
    match b.inspect(&name).await {
        Err(distlock_core::LockError::Unavailable { .. }) => {}
        other => panic!("one of A's masters silent: {other:?}"),
    }
    // Three silent: nobody can be named by a quorum of the two that answer.
    b_proxies[1].blackhole();
    b_proxies[2].blackhole();
    match b.inspect(&name).await {
        Err(distlock_core::LockError::Unavailable { .. }) => {}
        other => panic!("three masters silent: {other:?}"),
    }
    b_proxies.iter().for_each(FaultProxy::heal);
    a_proxies.iter().for_each(FaultProxy::heal);
    g.release().await.unwrap();
    // Masters 3 and 4 silent after the release: the three that answer name nobody, and the
    // two silent ones cannot make a quorum with nobody.
    b_proxies[3].blackhole();
    b_proxies[4].blackhole();
    assert!(!b.inspect(&name).await.unwrap().held, "free");
}

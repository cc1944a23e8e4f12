//! ZooKeeper-specific behaviour on real servers: herd effect, Curator interop, session expiry,
//! ensemble failover, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::{DistributedLock, LockError};
use support::*;
use tokio::time::Instant;
use zookeeper_client::{Acls, CreateMode};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_release_wakes_one_waiter_of_a_hundred() {
    let url = format!("{}?session_timeout=4s", standalone_url());
    let holder = zk_lock(&url).await;
    let waiters = Arc::new(zk_lock(&url).await);
    let name = unique("herd");
    let g = holder.acquire(&name, &wait(10)).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let (w, name) = (Arc::clone(&waiters), name.clone());
        tasks.push(tokio::spawn(async move {
            let g = w.acquire(&name, &wait(60)).await.unwrap();
            g.release().await.unwrap();
        }));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        waiters.watch_events(),
        0,
        "waiters were woken while the lock was held"
    );
    g.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let events = waiters.watch_events();
    // Each handoff notifies only the next contender: at most one event per waiter (a herd
    // would notify every waiter on every release: ~5,000 events).
    assert!(
        (1..=100).contains(&events),
        "{events} watch events for 100 handoffs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_named_contenders_are_respected_both_ways() {
    let zk = raw(&standalone_url()).await;
    let lock = zk_lock(&standalone_url()).await;
    let name = unique("curator");
    let dir = format!("/distlock/{name}");
    zk.mkdir(&dir, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .unwrap();
    let eph = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    // A Curator contender before ours holds the lock.
    let (_, seq) = zk
        .create(
            &format!("{dir}/_c_11111111-2222-4333-8444-555555555555-lock-"),
            &[],
            &eph,
        )
        .await
        .unwrap();
    let curator_node = format!("{dir}/_c_11111111-2222-4333-8444-555555555555-lock-{seq}");
    assert!(
        lock.try_acquire(&name, &wait(1)).await.unwrap().is_none(),
        "ignored a Curator holder"
    );
    let waiter = tokio::spawn({
        let name = name.clone();
        async move { lock.acquire(&name, &wait(20)).await.map(|g| (g, lock)) }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished());
    zk.delete(&curator_node, None).await.unwrap();
    let (g, _lock) = waiter.await.unwrap().unwrap();
    // Now ours is first: a Curator contender created after it sorts behind it.
    let (_, seq2) = zk
        .create(
            &format!("{dir}/_c_aaaaaaaa-2222-4333-8444-555555555555-lock-"),
            &[],
            &eph,
        )
        .await
        .unwrap();
    let kids = distlock_zk::path::sorted_contenders(zk.get_children(&dir).await.unwrap().0);
    assert_eq!(kids.len(), 2);
    assert!(
        kids[1].ends_with(&seq2.to_string()),
        "Curator contender not behind ours: {kids:?}"
    );
    g.release().await.unwrap();
    let kids = distlock_zk::path::sorted_contenders(zk.get_children(&dir).await.unwrap().0);
    assert_eq!(kids.len(), 1, "our node was not deleted on release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_expiry_makes_the_guard_lost_and_frees_the_lock() {
    let (holder, proxy) = proxied(&standalone_url(), "2s").await;
    let other = zk_lock(&format!("{}?session_timeout=2s", standalone_url())).await;
    let name = unique("expiry");
    let g = holder.acquire(&name, &wait(5)).await.unwrap();
    proxy.blackhole();
    let cut = Instant::now();
    let lost = tokio::time::timeout(Duration::from_millis(3500), g.lost()).await;
    assert!(
        lost.is_ok(),
        "guard not lost {:?} after the cut",
        cut.elapsed()
    );
    let g2 = other.acquire(&name, &wait(10)).await.unwrap();
    assert!(g2.fencing_token() > g.fencing_token());
    g2.release().await.unwrap();
    proxy.heal();
}

/// Restarts an ensemble member when dropped, whatever the test did.
struct Restart(String);

impl Drop for Restart {
    fn drop(&mut self) {
        services(&["start-one", &self.0]);
    }
}

/// The proxy the holder's session runs through, once the holder answers a read of `name`
/// that still names its guard (fencing `token`) as the holder (bounded: 30 s).
async fn holder_proxy(
    holder: &distlock_zk::ZkLock,
    name: &str,
    token: u64,
    proxies: &[FaultProxy],
) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = holder.inspect(name).await;
        let open: Vec<usize> = (0..proxies.len())
            .filter(|&i| proxies[i].open_connections() > 0)
            .collect();
        if let (Ok(info), [one]) = (&info, open.as_slice()) {
            assert_eq!(
                info.fencing_token,
                Some(token),
                "not the holder's: {info:?}"
            );
            return *one;
        }
        assert!(
            Instant::now() < deadline,
            "the holder found no serving member in 30 s: {info:?}, open through {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ensemble_failover_keeps_the_lock() {
    let url = format!("{}?session_timeout=16s", ensemble_url());
    // The holder reaches each member through its own proxy so we know which one it uses.
    let mut proxies = Vec::new();
    for p in ports(&ensemble_url()) {
        proxies.push(FaultProxy::start(([127, 0, 0, 1], p).into()).await.unwrap());
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.addr().port()))
        .collect();
    let holder = zk_lock(&format!("zk://{}?session_timeout=16s", hosts.join(","))).await;
    let other = zk_lock(&url).await;
    let name = unique("failover");
    let g = holder.acquire(&name, &wait(10)).await.unwrap();

    // 1. Kill the leader: the holder keeps the lock, nobody else gets it.
    let leader = leader_port();
    let restart = Restart(format!("zk-{leader}"));
    services(&["stop-one", &format!("zk-{leader}")]);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        !g.is_lost(),
        "holder lost the lock when the leader died: {g:?}"
    );
    let t = other.try_acquire(&name, &wait(1)).await;
    assert!(
        matches!(t, Ok(None) | Err(LockError::Unavailable { .. })),
        "someone else got it: {t:?}"
    );
    drop(restart);

    // 2. Cut the member the holder is connected to: it moves to another and keeps the lock.
    // While the ensemble elects a new leader its members turn clients away, so the holder may
    // be between members here; wait until it answers a read (which goes behind a quorum write)
    // and find the proxy that carries it.
    let used = holder_proxy(&holder, &name, g.fencing_token(), &proxies).await;
    proxies[used].kill();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !g.is_lost(),
        "holder lost the lock when its server went away: {g:?}"
    );
    assert!(other.try_acquire(&name, &wait(1)).await.unwrap().is_none());

    // 3. Waiters proceed after release.
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            other
                .acquire(&name, &wait(20))
                .await
                .map(|g| g.fencing_token())
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let first = g.fencing_token();
    g.release().await.unwrap();
    assert!(waiter.await.unwrap().unwrap() > first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_gives_typed_errors_and_no_stray_nodes() {
    let lock = zk_lock(&standalone_url()).await;
    let zk = raw(&standalone_url()).await;
    let stray = [
        "/distlock/zk-stray-a",
        "/distlock/zk-stray-trailing",
        "/zookeeper/x",
    ];
    for bad in [
        "zk-stray-a/../b",
        "zk-stray-a//b",
        "zk-stray-trailing/",
        "/zookeeper",
        "/zookeeper/x",
        "..",
        "emoji-🔒",
        "/",
    ] {
        let r = lock.acquire(bad, &wait(1)).await;
        assert!(
            matches!(r, Err(LockError::InvalidName { .. })),
            "{bad:?}: {r:?}"
        );
    }
    for path in stray {
        assert!(
            zk.check_stat(path).await.unwrap().is_none(),
            "a rejected name left {path}"
        );
    }
    let t = Instant::now();
    let r = distlock_zk::connect("zk://127.0.0.1:1,127.0.0.1:2?connect_timeout=1s").await;
    assert!(matches!(r, Err(LockError::Unavailable { .. })), "{r:?}");
    assert!(t.elapsed() < Duration::from_secs(5));
    let r = distlock_zk::connect(&format!(
        "{}/no-such-chroot-{}",
        standalone_url(),
        &distlock_core::backend::owner_token()[..6]
    ))
    .await;
    assert!(
        matches!(r, Err(LockError::InvalidConfig(ref m)) if m.contains("chroot")),
        "{r:?}"
    );
    for url in [
        "zk://h:1?bogus=1",
        "zk://h:1?session_timeout=abc",
        "zk://h:99999",
        "zk://u@h:1",
        "zk://h:1?base=/x/lock-0000000001",
    ] {
        assert!(
            matches!(
                distlock_zk::connect(url).await,
                Err(LockError::InvalidConfig(_))
            ),
            "{url}"
        );
    }
}

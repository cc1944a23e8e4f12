//! What a held ZooKeeper guard rides out, as `ZkConfig::stall_tolerance` documents it, on a real
//! server: a stall (no reply at all, injected by black-holing the holder's connection) shorter
//! than the tolerance leaves the guard held; a longer one reports it lost within its validity.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use distlock_zk::ZkConfig;
use support::*;
use tokio::time::Instant;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn guard_rides_out_stalls_within_the_documented_tolerance() {
    let (lock, proxy) = proxied(&standalone_url(), SESSION).await;
    let cfg = ZkConfig::from_url(&format!("zk://h:1?session_timeout={SESSION}")).unwrap();
    let ttl = Duration::from_secs(1);
    let tolerance = cfg.stall_tolerance(ttl);
    let validity = cfg.guard_validity();
    // The backend states its tolerance in its capabilities, as the config computes it.
    assert_eq!(
        lock.capabilities().stall_tolerance,
        Some(cfg.stall_tolerance(distlock_core::DEFAULT_TTL)),
        "capabilities disagree with ZkConfig::stall_tolerance"
    );
    let name = unique("stall");
    let opts = AcquireOptions::new().ttl(ttl).wait(Duration::from_secs(10));
    let g = lock.acquire(&name, &opts).await.unwrap();

    // Stalls of 40 % of the tolerance (the rest is headroom for the machine's own stalls), at
    // every phase of the renewal cycle: held throughout.
    let stall = tolerance * 2 / 5;
    for k in 0..4 {
        tokio::time::sleep(Duration::from_millis(150 + 70 * k)).await;
        proxy.blackhole();
        tokio::time::sleep(stall).await;
        proxy.heal();
        assert!(
            !g.is_lost(),
            "lost after a {stall:?} stall (tolerance {tolerance:?}): {g:?}"
        );
    }
    let other = zk_lock(&standalone_url()).await;
    assert!(other.try_acquire(&name, &opts).await.unwrap().is_none());

    // A stall longer than the validity: reported lost before the validity has passed.
    proxy.blackhole();
    let began = Instant::now();
    let lost = tokio::time::timeout(validity + Duration::from_millis(300), g.lost()).await;
    assert!(
        lost.is_ok(),
        "not lost {:?} into a stall (validity {validity:?})",
        began.elapsed()
    );
    assert!(
        began.elapsed() <= validity,
        "lost only after {:?}",
        began.elapsed()
    );
    proxy.heal();
    // And the lost guard's node goes: the name is free again.
    let g2 = other.acquire(&name, &opts).await.unwrap();
    g2.release().await.unwrap();
}

/// Resumes (SIGCONT) a paused process when dropped, whatever the test did.
struct Resume(i32);

impl Drop for Resume {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-CONT", &self.0.to_string()])
            .status();
    }
}

/// Pauses the ensemble's leader (SIGSTOP: its connections stay open, nothing answers) until
/// the returned guard is dropped.
fn pause_the_leader() -> Resume {
    let leader = leader_port();
    let pid: i32 = services(&["pid", &format!("zk-{leader}")])
        .trim()
        .parse()
        .expect("the leader's pid");
    let paused = std::process::Command::new("kill")
        .args(["-STOP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(paused.success(), "could not pause zk-{leader} ({pid})");
    Resume(pid)
}

/// With the ensemble's leader paused, the others elect a new one within seconds: a client
/// connected before acquires within its wait, and a new one connects within its connect
/// timeout, riding out the election instead of failing ("no available hosts").
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_leader_is_ridden_out_by_connect_and_acquire() {
    let url = format!("{}?connect_timeout=30s", ensemble_url());
    let before = zk_lock(&url).await;
    let name = unique("paused-leader");
    let opts = AcquireOptions::new().wait(Duration::from_secs(30));
    let resume = pause_the_leader();
    let began = Instant::now();
    let (connected, acquired) = tokio::join!(
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            distlock_zk::ZkLock::connect(ZkConfig::from_url(&url).unwrap()).await
        },
        before.acquire(&name, &opts),
    );
    let took = began.elapsed();
    drop(resume);
    let connected = connected.unwrap_or_else(|e| panic!("connect failed after {took:?}: {e}"));
    let g = acquired.unwrap_or_else(|e| panic!("acquire failed after {took:?}: {e}"));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert!(connected.try_acquire(&name, &opts).await.unwrap().is_none());
    g.release().await.unwrap();
}

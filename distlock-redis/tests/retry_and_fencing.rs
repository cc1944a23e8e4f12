//! Redlock rounds on real servers: a retry that finds its own key left by an undo that did not
//! arrive counts it as granted, and fencing tokens keep rising when a master lost its counter
//! and a client's clock runs behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::{AcquireOptions, DistributedLock};
use distlock_redis::{RedisConfig, RedisLock};
use support::*;

fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(Duration::from_secs(5))
        .wait(Duration::from_millis(1500))
}

/// A client built from `url` with the test hooks `hook` sets.
async fn client(url: &str, hook: impl FnOnce(&mut RedisConfig)) -> Arc<dyn DistributedLock> {
    let mut cfg = RedisConfig::from_url(url).unwrap();
    hook(&mut cfg);
    match RedisLock::connect(cfg).await {
        Ok(l) => Arc::new(l),
        Err(e) => {
            panic!("cannot reach {url}: {e}\nstart the test stores with `scripts/services.sh up`")
        }
    }
}

async fn set_px(port: u16, key: &str, value: &str) {
    run::<()>(
        port,
        redis::cmd("SET").arg(key).arg(value).arg("PX").arg(10_000),
    )
    .await;
}

async fn get(port: u16, key: &str) -> Option<String> {
    run(port, redis::cmd("GET").arg(key)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_single_round_that_finds_its_own_key_counts_it_as_granted() {
    // Single instance: the key already holds this client's token (a reply that came too late
    // to use, then a retry).
    let url = single_url();
    let port = ports(&url)[0];
    let token = distlock_core::backend::owner_token();
    let single = client(&url, |c| c.test_hooks.owner_token = Some(token.clone())).await;
    let name = unique("ownkey");
    set_px(port, &name, &token).await;
    let g = single
        .try_acquire(&name, &opts())
        .await
        .unwrap()
        .expect("single: our own key counted as another holder's");
    assert!(g.fencing_token() > 0);
    let pttl: i64 = run(port, redis::cmd("PTTL").arg(&name)).await;
    assert!(
        (1..=5_000).contains(&pttl),
        "lease not set to the ttl: {pttl}"
    );
    g.release().await.unwrap();
    assert_eq!(get(port, &name).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redlock_round_that_finds_its_own_keys_counts_them_as_granted() {
    // Redlock: an undo that did not reach masters 1 and 2 left our token there; masters 4 and
    // 5 are held by someone else; master 3 is free. Our keys make the quorum (1, 2, 3).
    let url = redlock_url();
    let masters = ports(&url);
    let token = distlock_core::backend::owner_token();
    let redlock = client(&url, |c| c.test_hooks.owner_token = Some(token.clone())).await;
    let name = unique("ownkey-rl");
    for &p in &masters[..2] {
        set_px(p, &name, &token).await;
    }
    for &p in &masters[3..] {
        set_px(p, &name, "someone-else").await;
    }
    let g = redlock
        .try_acquire(&name, &opts())
        .await
        .unwrap()
        .expect("redlock: our own keys on 2 masters counted as another holder's");
    assert!(g.fencing_token() > 0);
    for &p in &masters[..3] {
        assert_eq!(
            get(p, &name).await.as_deref(),
            Some(token.as_str()),
            "on {p}"
        );
    }
    g.release().await.unwrap();
    for &p in &masters[..3] {
        assert_eq!(get(p, &name).await, None, "not released on {p}");
    }
    for &p in &masters[3..] {
        assert_eq!(
            get(p, &name).await.as_deref(),
            Some("someone-else"),
            "another holder's key changed on {p}"
        );
        run::<i64>(p, redis::cmd("DEL").arg(&name)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redlock_tokens_rise_after_a_master_lost_its_counter_with_a_client_clock_behind() {
    let url = redlock_url();
    let masters = ports(&url);
    let name = unique("skew");
    let fence = aux_key(&name, "fence");
    // Client A reaches masters 1–3 only (4 and 5 are cut off while it holds): its token is
    // stored on exactly a quorum.
    let mut proxies = Vec::new();
    for &p in &masters {
        proxies.push(FaultProxy::start(([127, 0, 0, 1], p).into()).await.unwrap());
    }
    let hosts: Vec<String> = proxies
        .iter()
        .map(|p| format!("127.0.0.1:{}", p.addr().port()))
        .collect();
    let a = client(
        &format!("redlock://{}?timeout=500ms", hosts.join(",")),
        |_| {},
    )
    .await;
    proxies[3].kill();
    proxies[4].kill();
    let ga = a.acquire(&name, &opts()).await.unwrap();
    let first = ga.fencing_token();
    ga.release().await.unwrap();
    drop(proxies);
    // Master 1 restarts without persistence (its counter is gone), and another contender
    // holds masters 2 and 3 right now.
    run::<i64>(masters[0], redis::cmd("DEL").arg(&fence)).await;
    for &p in &masters[1..3] {
        set_px(p, &name, "contender").await;
    }
    // Client B's clock runs an hour behind: its floor says nothing. Masters 1, 4 and 5 grant
    // it the lock; only the held masters 2 and 3 remember A's token.
    let b = client(&url, |c| {
        c.test_hooks.clock_behind = Duration::from_secs(3600)
    })
    .await;
    // (Retried briefly: another test binary may be restarting a shared master right now.)
    let mut gb = None;
    for _ in 0..20 {
        gb = b.try_acquire(&name, &opts()).await.unwrap_or(None);
        if gb.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let gb = gb.expect("B gets masters 1, 4 and 5");
    let second = gb.fencing_token();
    assert!(
        second > first,
        "a later holder got a lower token: {second} after {first}"
    );
    // The token is stored on a quorum before the lock counts as held.
    let mut stored = 0;
    for &p in &masters {
        let c: Option<u64> = run(p, redis::cmd("GET").arg(&fence)).await;
        stored += usize::from(c.is_some_and(|c| c >= second));
    }
    assert!(
        stored >= 3,
        "token {second} stored on only {stored} masters"
    );
    gb.release().await.unwrap();
    for &p in &masters[1..3] {
        run::<i64>(p, redis::cmd("DEL").arg(&name)).await;
    }
    // And the next holder (an on-time clock) is above both.
    let c = connect_or_explain(&url).await;
    let gc = c.acquire(&name, &opts()).await.unwrap();
    assert!(gc.fencing_token() > second);
    gc.release().await.unwrap();
}

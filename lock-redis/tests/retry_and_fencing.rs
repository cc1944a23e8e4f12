//! Acquisition rounds on real servers: a retry that finds its own key left by an undo that did
//! not arrive counts it as granted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock};
use lock_redis::{RedisConfig, RedisLock};
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
    let token = lock_core::owner_token();
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
    let token = lock_core::owner_token();
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

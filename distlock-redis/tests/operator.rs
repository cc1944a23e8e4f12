//! `list` and `break_lock` (`distlock ls`, `distlock break`) on a real Redis and a Redlock of
//! five masters (and breaking on Sentinel and Cluster), by the shared operator cases (`distlock_core::conformance`), the broken holder
//! fenced out by `distlock_redis::fence`; and what a listing leaves out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance;
use distlock_core::{AcquireOptions, LockError};
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_a_broken_holder_is_fenced_out() {
    let (_, write, read) = fenced_register(ports(&single_url())[0]);
    conformance::a_broken_holder_is_fenced_out(&RedisHarness::single(), write, read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_broken_holder_is_fenced_out() {
    let (_, write, read) = fenced_register(ports(&single_url())[0]);
    conformance::a_broken_holder_is_fenced_out(&RedisHarness::redlock(), write, read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_a_broken_holder_is_fenced_out() {
    let (_, write, read) = fenced_register(ports(&single_url())[0]);
    conformance::a_broken_holder_is_fenced_out(&RedisHarness::sentinel(), write, read).await;
}

/// A cluster breaks (the lock's keys share one slot) but does not list (`SCAN` sees one node).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_broken_holder_is_fenced_out() {
    let (_, write, read) = fenced_register(ports(&single_url())[0]);
    conformance::a_broken_holder_is_fenced_out(&RedisHarness::cluster(), write, read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_a_listing_is_bounded() {
    conformance::a_listing_is_bounded(&RedisHarness::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_a_listing_is_bounded() {
    conformance::a_listing_is_bounded(&RedisHarness::redlock()).await;
}

/// Strings under the prefix that are not distlock's locks (a key without a fencing counter, one
/// without expiry, a hash, distlock's own counters) are not listed, and a break refuses them
/// (redis-py's, a fenced value, another application's) instead of deleting them.
#[tokio::test]
async fn other_keys_under_the_prefix_are_neither_listed_nor_broken() {
    let url = single_url();
    let port = ports(&url)[0];
    let lock = connect_or_explain(&url).await;
    let prefix = unique("ls-other");
    let held = format!("{prefix}-held");
    let guard = lock.acquire(&held, &AcquireOptions::new()).await.unwrap();
    let (plain, hash) = (format!("{prefix}-plain"), format!("{prefix}-hash"));
    let _: () = run(port, redis::cmd("SET").arg(&plain).arg("someone else's")).await;
    let _: () = run(port, redis::cmd("HSET").arg(&hash).arg("f").arg("v")).await;
    // A value with no expiry at a name distlock locked once (its counter stays).
    let persistent = format!("{prefix}-persistent");
    let g = lock
        .acquire(&persistent, &AcquireOptions::new())
        .await
        .unwrap();
    g.release().await.unwrap();
    let _: () = run(port, redis::cmd("SET").arg(&persistent).arg("a value")).await;
    let listing = lock.list(&prefix, 10).await.unwrap();
    let names: Vec<_> = listing.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, [held.as_str()], "{listing:?}");
    for key in [&plain, &persistent] {
        let err = lock.break_lock(key).await.unwrap_err();
        assert!(matches!(err, LockError::Backend { .. }), "{err:?}");
        let still: Option<String> = run(port, redis::cmd("GET").arg(key)).await;
        assert!(still.is_some(), "the foreign key {key} was touched");
    }
    guard.release().await.unwrap();
    let _: () = run(
        port,
        redis::cmd("DEL").arg(&plain).arg(&hash).arg(&persistent),
    )
    .await;
}

/// A prefix with glob metacharacters matches them literally.
#[tokio::test]
async fn a_prefix_is_matched_literally() {
    let lock = connect_or_explain(&single_url()).await;
    let base = unique("ls-glob");
    let (star, other) = (format!("{base}*x"), format!("{base}-x"));
    let g1 = lock.acquire(&star, &AcquireOptions::new()).await.unwrap();
    let g2 = lock.acquire(&other, &AcquireOptions::new()).await.unwrap();
    let listing = lock.list(&format!("{base}*"), 10).await.unwrap();
    let names: Vec<_> = listing.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, [star.as_str()]);
    g1.release().await.unwrap();
    g2.release().await.unwrap();
}

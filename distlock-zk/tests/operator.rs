//! `list` and `break_lock` (`distlock ls`, `distlock break`) on a real ZooKeeper, by the shared
//! operator cases (`distlock_core::conformance`), the broken holder fenced out by
//! `distlock_zk::fence`; and names nested in directories.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance;
use distlock_core::AcquireOptions;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_holder_is_fenced_out() {
    let (_, _, write, read) = fenced_register(&standalone_url(), "break-reg").await;
    conformance::a_broken_holder_is_fenced_out(&ZkHarness::standalone(), write, read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_is_bounded() {
    conformance::a_listing_is_bounded(&ZkHarness::standalone()).await;
}

/// A name with `/` is a nested directory: listed under its full name, found by a prefix that
/// ends inside a segment or at a `/`, and held apart from its parent; a break of the nested
/// name leaves the parent held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_names_are_listed_and_broken_apart() {
    let lock = connect_or_explain(&standalone_url()).await;
    let parent = unique("ls-nest");
    let child = format!("{parent}/jobs/nightly");
    let g1 = lock.acquire(&parent, &AcquireOptions::new()).await.unwrap();
    let g2 = lock.acquire(&child, &AcquireOptions::new()).await.unwrap();
    let all = lock.list(&parent, 10).await.unwrap();
    let names: Vec<_> = all.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, [parent.as_str(), child.as_str()]);
    let nested = lock.list(&format!("{parent}/jo"), 10).await.unwrap();
    assert_eq!(nested.locks.len(), 1, "{nested:?}");
    let broken = lock.break_lock(&child).await.unwrap();
    assert_eq!(broken.fencing_token, Some(g2.fencing_token()));
    tokio::time::timeout(std::time::Duration::from_secs(5), g2.lost())
        .await
        .expect("the broken guard was told at once");
    assert!(!g1.is_lost(), "breaking a nested name broke its parent");
    let left = lock.list(&parent, 10).await.unwrap();
    assert_eq!(left.locks.len(), 1, "{left:?}");
    g1.release().await.unwrap();
}

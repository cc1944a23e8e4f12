//! `list` and `break_lock` (`distlock ls`, `distlock break`) on a real etcd member and a
//! 3-member cluster, by the shared operator cases (`distlock_core::conformance`), the broken
//! holder fenced out by `distlock_etcd::fence`; and what a listing leaves out.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance;
use distlock_core::AcquireOptions;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_a_broken_holder_is_fenced_out() {
    let (write, read) = fenced_register(&single_url(), "break-reg");
    conformance::a_broken_holder_is_fenced_out(&EtcdHarness::single(), write, read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_broken_holder_is_fenced_out() {
    let (write, read) = fenced_register(&single_url(), "break-reg");
    conformance::a_broken_holder_is_fenced_out(&EtcdHarness::cluster(), write, read).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_a_listing_is_bounded() {
    conformance::a_listing_is_bounded(&EtcdHarness::single()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_listing_is_bounded() {
    conformance::a_listing_is_bounded(&EtcdHarness::cluster()).await;
}

/// Keys under the prefix that are no mutex contender's (a plain key shaped like one but with
/// no lease, a semaphore's permit keys) are not listed; names with `/` and `%` come back
/// unescaped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_mutex_contenders_are_listed() {
    let url = single_url();
    let lock = connect_or_explain(&url).await;
    let base = unique("ls-only");
    let odd = format!("{base}/a%b");
    let g = lock.acquire(&odd, &AcquireOptions::new()).await.unwrap();
    let sem = distlock_etcd::connect_semaphore(&url).await.unwrap();
    let permit = sem
        .acquire(&format!("{base}-sem"), 2, &AcquireOptions::new())
        .await
        .unwrap();
    let mut raw = raw(&url).await;
    let fake = format!("{base}-fake/1f");
    raw.put(fake.as_str(), "", None).await.unwrap();
    let listing = lock.list(&base, 10).await.unwrap();
    let names: Vec<_> = listing.locks.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, [odd.as_str()], "{listing:?}");
    permit.release().await.unwrap();
    g.release().await.unwrap();
    raw.delete(fake.as_str(), None).await.unwrap();
}

//! A client reuses its leases: an uncontended acquire + release is two raft writes (the
//! enqueue and the delete), like the raw put + delete it is measured against, instead of four
//! (a lease grant and a revoke around them). A reused lease keeps every promise a fresh one
//! made: the guard is lost when the lease goes, and a lease gone while pooled is replaced.
//!
//! Counted from the member's own counters (`/metrics`), so the tests of this file run one
//! after another ([`SERIAL`]): nothing else grants leases on the member meanwhile (test
//! binaries run one at a time).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use support::{metric, metrics, single_url, unique};

/// Held by each test for its whole run.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Leases the member has granted so far.
async fn granted() -> i64 {
    metric(
        &metrics(&single_url()).await,
        "etcd_debugging_lease_granted_total",
    )
}

/// The lease (hex, as in the key `<name>/<lease hex>`) that holds `name` now.
async fn holding_lease(lock: &dyn DistributedLock, name: &str) -> String {
    lock.inspect(name)
        .await
        .unwrap()
        .owner
        .expect("a held etcd lock names its lease")
}

/// Revokes the lease named `hex` behind the client's back, as an operator's
/// `etcdctl lease revoke` would.
async fn revoke(hex: &str) {
    support::raw(&single_url())
        .await
        .lease_client()
        .revoke(i64::from_str_radix(hex, 16).unwrap())
        .await
        .unwrap();
}

#[tokio::test]
async fn uncontended_cycles_grant_no_lease_after_the_first() {
    let _serial = SERIAL.lock().await;
    let lock = support::connect_or_explain(&single_url()).await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(60));
    let names = [unique("reuse-a"), unique("reuse-b")];
    const CYCLES: usize = 20;
    let before = granted().await;
    let mut leases = std::collections::BTreeSet::new();
    for i in 0..CYCLES {
        let g = lock.acquire(&names[i % 2], &opts).await.unwrap();
        leases.insert(holding_lease(lock.as_ref(), &names[i % 2]).await);
        g.release().await.unwrap();
    }
    let grants = granted().await - before;
    // A lease is reused for a tenth of its TTL (6 s here), which the cycles take well within.
    assert_eq!(
        leases.len(),
        1,
        "{CYCLES} uncontended cycles of one client held on {} leases: {leases:?}",
        leases.len()
    );
    assert!(
        grants <= 1,
        "{CYCLES} uncontended acquire + release cycles of one client granted {grants} leases (a raft write each); one lease, reused, is enough"
    );
}

#[tokio::test]
async fn a_guard_on_a_reused_lease_is_lost_when_that_lease_goes() {
    let _serial = SERIAL.lock().await;
    let lock = support::connect_or_explain(&single_url()).await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(60));
    let name = unique("reuse-lost");

    let first = lock.acquire(&name, &opts).await.unwrap();
    let lease = holding_lease(lock.as_ref(), &name).await;
    let token = first.fencing_token();
    first.release().await.unwrap();

    let second = lock.acquire(&name, &opts).await.unwrap();
    assert_eq!(
        holding_lease(lock.as_ref(), &name).await,
        lease,
        "the second acquisition should reuse the first one's lease"
    );
    assert!(
        second.fencing_token() > token,
        "a reused lease still gets a new fencing token: {} after {token}",
        second.fencing_token()
    );

    // The lease revoked behind our back (an operator's `etcdctl lease revoke`): the guard on
    // it is lost, and the lock is free.
    revoke(&lease).await;
    let lost = tokio::time::timeout(Duration::from_secs(5), second.lost()).await;
    assert!(
        lost.is_ok(),
        "the guard on the revoked lease was not lost within 5 s"
    );
    let info = lock.inspect(&name).await.unwrap();
    assert!(!info.held, "the lock should be free: {info:?}");
}

#[tokio::test]
async fn a_lease_gone_while_pooled_is_replaced() {
    let _serial = SERIAL.lock().await;
    let lock = support::connect_or_explain(&single_url()).await;
    let opts = AcquireOptions::new().ttl(Duration::from_secs(60));
    let name = unique("reuse-gone");

    let first = lock.acquire(&name, &opts).await.unwrap();
    let lease = holding_lease(lock.as_ref(), &name).await;
    first.release().await.unwrap();
    // Revoked while idle in the client's pool.
    revoke(&lease).await;

    let second = lock.acquire(&name, &opts).await.unwrap();
    let now = holding_lease(lock.as_ref(), &name).await;
    assert_ne!(now, lease, "a revoked lease cannot hold a key");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        lock.inspect(&name).await.unwrap().held,
        "the guard's key should still be there"
    );
    second.release().await.unwrap();
}

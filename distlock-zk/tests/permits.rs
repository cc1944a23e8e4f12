//! The semaphore and read-write lock on ZooKeeper (standalone 12181 and the 3-node ensemble,
//! `scripts/services.sh up`): the shared conformance cases, Curator's node layouts, and
//! foreign (Curator-shaped) nodes counted. Interop with real Curator is in the workspace's
//! `distlock-cli/tests/curator_permits.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::conformance::{proxies, Crash, RwLockHarness, SemaphoreHarness};
use distlock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore};
use distlock_zk::path::NodeKind;
use support::{hosts, ports, raw, unique, zk_lock, ZkHarness, SESSION};
use zookeeper_client::{Acls, CreateMode};

/// Session timeout of the crashed holder: its permit is free about this long after the crash.
const CRASH_SESSION_SECS: u64 = 3;

async fn client(h: &ZkHarness) -> Arc<distlock_zk::ZkLock> {
    Arc::new(zk_lock(&format!("zk://{}?session_timeout={SESSION}", hosts(&h.url))).await)
}

#[async_trait]
impl SemaphoreHarness for ZkHarness {
    async fn semaphore(&self) -> Arc<dyn DistributedSemaphore> {
        client(self).await
    }

    async fn crashable(&self) -> (Arc<dyn DistributedSemaphore>, Crash, Duration) {
        let (hosts, crash) = proxies(&ports(&self.url)).await;
        let url = format!("zk://{hosts}?session_timeout={CRASH_SESSION_SECS}s");
        // The ensemble expires the session, then its expiry tick frees the node.
        let bound = Duration::from_secs(CRASH_SESSION_SECS + 3);
        (Arc::new(zk_lock(&url).await), crash, bound)
    }
}

#[async_trait]
impl RwLockHarness for ZkHarness {
    async fn rwlock(&self) -> Arc<dyn DistributedRwLock> {
        client(self).await
    }
}

mod standalone {
    use super::*;
    mod semaphore {
        use super::*;
        distlock_core::semaphore_suite!(ZkHarness::standalone());
    }
    mod rwlock {
        use super::*;
        distlock_core::rwlock_suite!(ZkHarness::standalone());
    }
}

mod ensemble {
    use super::*;
    mod semaphore {
        use super::*;
        distlock_core::semaphore_suite!(ZkHarness::ensemble());
    }
    mod rwlock {
        use super::*;
        distlock_core::rwlock_suite!(ZkHarness::ensemble());
    }
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(10))
}

/// Curator's `InterProcessSemaphoreV2` layout: a lease node per permit under `leases`, with
/// the count as data; the internal mutex under `locks` is empty once the permits are granted.
#[tokio::test]
async fn semaphore_nodes_are_curators() {
    let h = ZkHarness::standalone();
    let (s, zk) = (client(&h).await, raw(&h.url).await);
    let name = unique("sem-layout");
    let dir = ZkHarness::dir(&name);
    let opts = opts().holder("worker-1");
    let g1 = s.acquire(&name, 2, &opts).await.unwrap();
    let g2 = s.acquire(&name, 2, &opts).await.unwrap();
    let leases = zk.get_children(&format!("{dir}/leases")).await.unwrap().0;
    assert_eq!(leases.len(), 2, "{leases:?}");
    for lease in &leases {
        assert!(
            lease.starts_with("_c_") && NodeKind::Lease.sequence_of(lease).is_some(),
            "not Curator's lease name: {lease}"
        );
        let (data, stat) = zk.get_data(&format!("{dir}/leases/{lease}")).await.unwrap();
        assert_eq!(data, b"max_count=2\nworker-1");
        assert!(stat.ephemeral_owner != 0, "a lease is not ephemeral");
        assert!([g1.fencing_token(), g2.fencing_token()].contains(&(stat.czxid as u64)));
    }
    assert_eq!(
        zk.get_children(&format!("{dir}/locks")).await.unwrap().0,
        Vec::<String>::new()
    );
    g1.release().await.unwrap();
    g2.release().await.unwrap();
    assert!(zk
        .get_children(&format!("{dir}/leases"))
        .await
        .unwrap()
        .0
        .is_empty());
}

/// A lease without distlock's count (a Curator process's: its address as data) counts toward
/// the limit and sets no count.
#[tokio::test]
async fn a_foreign_lease_counts_and_sets_no_count() {
    let h = ZkHarness::standalone();
    let (s, zk) = (client(&h).await, raw(&h.url).await);
    let name = unique("sem-foreign");
    // Make the directories as distlock would, then a Curator-shaped lease of another session.
    let g = s.acquire(&name, 1, &opts()).await.unwrap();
    g.release().await.unwrap();
    let leases = format!("{}/leases", ZkHarness::dir(&name));
    let seq = CreateMode::EphemeralSequential.with_acls(Acls::anyone_all());
    let (_, n) = zk
        .create(
            &format!("{leases}/_c_00000000-0000-4000-8000-000000000000-lease-"),
            b"10.0.0.7",
            &seq,
        )
        .await
        .unwrap();
    assert!(
        s.try_acquire(&name, 1, &opts()).await.unwrap().is_none(),
        "the foreign lease was not counted"
    );
    let info = DistributedSemaphore::inspect(&*s, &name).await.unwrap();
    assert_eq!((info.max_count, info.holders), (None, 1), "{info:?}");
    let g = s
        .try_acquire(&name, 2, &opts())
        .await
        .unwrap()
        .expect("a second permit of 2");
    assert_eq!(
        DistributedSemaphore::inspect(&*s, &name)
            .await
            .unwrap()
            .max_count,
        Some(2)
    );
    g.release().await.unwrap();
    zk.delete(
        &format!("{leases}/_c_00000000-0000-4000-8000-000000000000-lease-{n}"),
        None,
    )
    .await
    .unwrap();
}

/// Curator's `InterProcessReadWriteLock` layout: readers and writers in one directory,
/// `__READ__` and `__WRIT__` nodes, and `inspect` reads them.
#[tokio::test]
async fn rwlock_nodes_are_curators() {
    let h = ZkHarness::standalone();
    let (l, zk) = (client(&h).await, raw(&h.url).await);
    let name = unique("rw-layout");
    let dir = ZkHarness::dir(&name);
    let r1 = l.read(&name, &opts()).await.unwrap();
    let r2 = l.read(&name, &opts()).await.unwrap();
    let writer = tokio::spawn({
        let (l, name) = (Arc::clone(&l), name.clone());
        async move { l.write(&name, &opts()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let kids = NodeKind::Read.sorted(zk.get_children(&dir).await.unwrap().0);
    assert_eq!(kids.len(), 3, "{kids:?}");
    assert!(
        kids[..2]
            .iter()
            .all(|k| k.starts_with("_c_") && k.contains("-__READ__")),
        "{kids:?}"
    );
    assert!(
        kids[2].starts_with("_c_") && kids[2].contains("-__WRIT__"),
        "{kids:?}"
    );
    let info = DistributedRwLock::inspect(&*l, &name).await.unwrap();
    assert_eq!(
        (info.readers, info.writer, info.waiters),
        (2, false, 1),
        "{info:?}"
    );
    drop((r1, r2));
    let w = writer.await.unwrap().unwrap();
    let info = DistributedRwLock::inspect(&*l, &name).await.unwrap();
    assert_eq!(
        (info.readers, info.writer, info.waiters),
        (0, true, 0),
        "{info:?}"
    );
    w.release().await.unwrap();
}

/// A mutex, a semaphore and a read-write lock of one name share its directory (Curator's
/// layouts) and never exclude each other.
#[tokio::test]
async fn a_mutex_a_semaphore_and_a_rwlock_of_one_name_are_separate() {
    let h = ZkHarness::standalone();
    let c = client(&h).await;
    let name = unique("separate");
    let o = opts();
    let m = distlock_core::DistributedLock::try_acquire(&*c, &name, &o)
        .await
        .unwrap()
        .expect("mutex");
    let s = c
        .try_acquire(&name, 1, &o)
        .await
        .unwrap()
        .expect("semaphore beside the mutex");
    let w = c
        .try_write(&name, &o)
        .await
        .unwrap()
        .expect("writer beside the mutex and the semaphore");
    assert!(distlock_core::DistributedLock::try_acquire(&*c, &name, &o)
        .await
        .unwrap()
        .is_none());
    assert!(c.try_acquire(&name, 1, &o).await.unwrap().is_none());
    assert!(c.try_read(&name, &o).await.unwrap().is_none());
    for g in [m, s, w] {
        g.release().await.unwrap();
    }
}

//! The semaphore and read-write lock on etcd (one member and the 3-member cluster,
//! `scripts/services.sh up`): the shared conformance cases, and the key layout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::conformance::{RwLockHarness, SemaphoreHarness};
use distlock_core::{AcquireOptions, DistributedLock, DistributedRwLock, DistributedSemaphore};
use etcd_client::GetOptions;
use support::{etcd_lock, hosts, raw, unique, EtcdHarness};

async fn client(h: &EtcdHarness) -> Arc<distlock_etcd::EtcdLock> {
    Arc::new(etcd_lock(&h.client_url(&hosts(&h.url))).await)
}

#[async_trait]
impl SemaphoreHarness for EtcdHarness {
    async fn semaphore(&self) -> Arc<dyn DistributedSemaphore> {
        client(self).await
    }
}

#[async_trait]
impl RwLockHarness for EtcdHarness {
    async fn rwlock(&self) -> Arc<dyn DistributedRwLock> {
        client(self).await
    }
}

mod single {
    use super::*;
    mod semaphore {
        use super::*;
        distlock_core::semaphore_suite!(EtcdHarness::single());
    }
    mod rwlock {
        use super::*;
        distlock_core::rwlock_suite!(EtcdHarness::single());
    }
}

mod cluster {
    use super::*;
    mod semaphore {
        use super::*;
        distlock_core::semaphore_suite!(EtcdHarness::cluster());
    }
    mod rwlock {
        use super::*;
        distlock_core::rwlock_suite!(EtcdHarness::cluster());
    }
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(10))
}

/// The keys of `range` (prefix) with their values.
async fn keys(h: &EtcdHarness, range: &str) -> Vec<(String, String)> {
    let mut kv = raw(&h.url).await;
    let resp = kv
        .get(range, Some(GetOptions::new().with_prefix()))
        .await
        .unwrap();
    resp.kvs()
        .iter()
        .map(|k| {
            (
                k.key_str().unwrap().to_owned(),
                k.value_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Permits are keys in `<name>%sem/leases/` carrying the count; readers and writers are keys
/// in `<name>%rw/read/` and `<name>%rw/write/`; a mutex of the same name (`<name>/`) is apart
/// from both and excluded by neither.
#[tokio::test]
async fn permits_readers_and_writers_have_ranges_of_their_own() {
    let h = EtcdHarness::single();
    let c = client(&h).await;
    let name = unique("layout");
    let m = DistributedLock::try_acquire(&*c, &name, &opts())
        .await
        .unwrap()
        .expect("mutex");
    let p = DistributedSemaphore::try_acquire(&*c, &name, 2, &opts().holder("w1"))
        .await
        .unwrap()
        .expect("a permit beside the mutex");
    let r = c
        .try_read(&name, &opts())
        .await
        .unwrap()
        .expect("a reader beside the mutex");
    let permits = keys(&h, &format!("{name}%sem/leases/")).await;
    assert_eq!(permits.len(), 1, "{permits:?}");
    assert_eq!(permits[0].1, "max_count=2\nw1");
    assert!(
        keys(&h, &format!("{name}%sem/lock/")).await.is_empty(),
        "the admission lock was kept"
    );
    assert_eq!(keys(&h, &format!("{name}%rw/read/")).await.len(), 1);
    assert_eq!(
        keys(&h, &format!("{name}/")).await.len(),
        1,
        "the mutex range holds more than the mutex"
    );
    assert!(c.try_write(&name, &opts()).await.unwrap().is_none());
    for g in [m, p, r] {
        g.release().await.unwrap();
    }
    for range in [
        format!("{name}%sem/"),
        format!("{name}%rw/"),
        format!("{name}/"),
    ] {
        assert!(
            keys(&h, &range).await.is_empty(),
            "{range} left keys behind"
        );
    }
}

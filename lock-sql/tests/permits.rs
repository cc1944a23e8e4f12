//! The semaphore and read-write lock in row mode on PostgreSQL, MariaDB (`scripts/services.sh
//! up`) and SQLite: the shared conformance cases, and the typed refusal of the modes that do
//! not offer them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use lock_core::conformance::{Crash, RwLockHarness, SemaphoreHarness};
use lock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockError};
use support::{mysql_url, postgres_url, sqlite_url};

/// Clients of one database URL (row mode, the default).
struct Row(fn() -> String);

impl Row {
    fn url(&self) -> String {
        (self.0)()
    }
}

/// One SQLite file for every client of a test binary run.
fn sqlite() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(sqlite_url).clone()
}

#[async_trait]
impl SemaphoreHarness for Row {
    async fn semaphore(&self) -> Arc<dyn DistributedSemaphore> {
        lock_sql::connect_semaphore(&self.url())
            .await
            .unwrap_or_else(|e| panic!("{e}; start the stores with `scripts/services.sh up`"))
    }

    /// for_update: a client through a proxy; killing it closes the holder's connection, and
    /// the database ends its transaction at once.
    async fn crashable(&self) -> (Arc<dyn DistributedSemaphore>, Crash, Duration) {
        let (lock, proxy) = support::through_proxy(&self.url()).await;
        let crash: Crash = Box::new(move || {
            Box::pin(async move {
                proxy.kill();
                drop(proxy);
            })
        });
        (Arc::new(lock), crash, Duration::from_secs(5))
    }
}

#[async_trait]
impl RwLockHarness for Row {
    async fn rwlock(&self) -> Arc<dyn DistributedRwLock> {
        lock_sql::connect_rwlock(&self.url())
            .await
            .unwrap_or_else(|e| panic!("{e}; start the stores with `scripts/services.sh up`"))
    }
}

mod postgres_semaphore {
    lock_core::semaphore_suite!(super::Row(super::postgres_url));
}
mod postgres_rwlock {
    lock_core::rwlock_suite!(super::Row(super::postgres_url));
}
mod mysql_semaphore {
    lock_core::semaphore_suite!(super::Row(super::mysql_url));
}
mod mysql_rwlock {
    lock_core::rwlock_suite!(super::Row(super::mysql_url));
}
mod sqlite_semaphore {
    lock_core::semaphore_suite!(super::Row(super::sqlite));
}
mod sqlite_rwlock {
    lock_core::rwlock_suite!(super::Row(super::sqlite));
}

/// PostgreSQL advisory mode offers the read-write lock (shared and exclusive advisory locks).
fn postgres_advisory() -> String {
    format!("{}?mode=advisory", postgres_url())
}

mod postgres_advisory_rwlock {
    lock_core::rwlock_suite!(super::Row(super::postgres_advisory));
}

/// for_update mode offers both: the semaphore (slot rows taken `SKIP LOCKED`) and the
/// read-write lock (shared and exclusive row locks), each behind a gate row.
fn postgres_for_update() -> String {
    format!("{}?mode=for_update", postgres_url())
}

fn mysql_for_update() -> String {
    format!("{}?mode=for_update", mysql_url())
}

mod postgres_for_update_semaphore {
    lock_core::semaphore_suite!(super::Row(super::postgres_for_update));
}

mod mysql_for_update_semaphore {
    lock_core::semaphore_suite!(super::Row(super::mysql_for_update));
}

mod postgres_for_update_rwlock {
    lock_core::rwlock_suite!(super::Row(super::postgres_for_update));
}

mod mysql_for_update_rwlock {
    lock_core::rwlock_suite!(super::Row(super::mysql_for_update));
}

/// The modes without a semaphore or read-write lock refuse with a typed error naming where
/// they are offered, never a leased stand-in: advisory's semaphore, and advisory's read-write
/// lock on MySQL/MariaDB (`GET_LOCK` has no shared mode).
#[tokio::test]
async fn modes_without_the_primitive_refuse_with_unsupported() {
    for base in [postgres_url(), mysql_url()] {
        let url = format!("{base}?mode=advisory");
        let mut refused = vec![lock_sql::connect_semaphore(&url).await.map(drop)];
        if base == mysql_url() {
            refused.push(lock_sql::connect_rwlock(&url).await.map(drop));
        }
        {
            for e in refused {
                match e {
                    Err(LockError::Unsupported { operation, .. }) => {
                        assert!(operation.contains("mode=row"), "{url}: {operation}")
                    }
                    other => panic!("{url}: {other:?}"),
                }
            }
        }
    }
    // The same client type refuses at the call too.
    let lock = support::connect_or_explain(&format!("{}?mode=advisory", postgres_url())).await;
    let e = DistributedSemaphore::try_acquire(&lock, "x", 2, &AcquireOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Unsupported { .. }), "{e}");
    let lock = support::connect_or_explain(&format!("{}?mode=advisory", mysql_url())).await;
    let e = lock
        .try_read("x", &AcquireOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Unsupported { .. }), "{e}");
}

/// On PostgreSQL advisory, a read-write lock and a mutex of one name never meet: the mutex
/// locks the name's key in the `bigint` key space, the read-write lock in the two-`int` one.
#[tokio::test]
async fn postgres_advisory_rwlock_and_mutex_of_one_name_are_apart() {
    use lock_core::DistributedLock;
    let lock = support::connect_or_explain(&postgres_advisory()).await;
    let name = format!("apart-{}", &lock_core::backend::owner_token()[..8]);
    let o = AcquireOptions::new();
    let m = DistributedLock::try_acquire(&lock, &name, &o)
        .await
        .unwrap()
        .expect("mutex");
    let w = lock
        .try_write(&name, &o)
        .await
        .unwrap()
        .expect("a writer beside the mutex");
    assert!(DistributedLock::try_acquire(&lock, &name, &o)
        .await
        .unwrap()
        .is_none());
    assert!(lock.try_read(&name, &o).await.unwrap().is_none());
    w.release().await.unwrap();
    m.release().await.unwrap();
}

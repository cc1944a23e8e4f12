//! The semaphore and read-write lock in row mode on PostgreSQL, MariaDB (`scripts/services.sh
//! up`) and SQLite: the shared conformance cases, and the typed refusal of the modes that do
//! not offer them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use lock_core::conformance::{RwLockHarness, SemaphoreHarness};
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

/// for_update and advisory modes do not offer either yet: a typed error naming `mode=row`,
/// never a leased stand-in.
#[tokio::test]
async fn for_update_and_advisory_refuse_with_unsupported() {
    for base in [postgres_url(), mysql_url()] {
        for mode in ["for_update", "advisory"] {
            let url = format!("{base}?mode={mode}");
            for e in [
                lock_sql::connect_semaphore(&url)
                    .await
                    .map(drop)
                    .unwrap_err(),
                lock_sql::connect_rwlock(&url).await.map(drop).unwrap_err(),
            ] {
                match e {
                    LockError::Unsupported { operation, .. } => {
                        assert!(operation.contains("mode=row"), "{url}: {operation}")
                    }
                    other => panic!("{url}: {other}"),
                }
            }
        }
    }
    // The same client type refuses at the call too.
    let lock = support::connect_or_explain(&format!("{}?mode=for_update", postgres_url())).await;
    let e = DistributedSemaphore::try_acquire(&lock, "x", 2, &AcquireOptions::new())
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Unsupported { .. }), "{e}");
}

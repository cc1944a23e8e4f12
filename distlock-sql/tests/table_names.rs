//! A table name is at most `MAX_TABLE_LEN` (48) bytes, so every name derived from it fits the
//! databases' identifiers: PostgreSQL truncates longer ones to 63 bytes (a 63-byte name once
//! turned `<table>_waitq_order` into the lock table's own name, and `distlock_<table>` past 63
//! bytes failed every `NOTIFY`, so every release), MariaDB refuses names past 64. The longest
//! derived name is the for_update semaphore's `<table>_semgate_fences`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use distlock_sql::config::MAX_TABLE_LEN;
use support::*;

/// The longest accepted table name, starting with `prefix` (each mode keeps its own table).
fn longest(prefix: &str) -> String {
    format!("{prefix}{}", "l".repeat(MAX_TABLE_LEN - prefix.len()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_table_name_works_in_every_mode_and_primitive() {
    let name = format!("long-{}", &distlock_core::backend::owner_token()[..8]);
    let opts = AcquireOptions::new().wait(Duration::from_secs(10));
    for base in [postgres_url(), mysql_url()] {
        for mode in ["row", "for_update", "advisory"] {
            let url = format!("{base}?mode={mode}&table={}", longest(mode));
            // A waiter queued behind a holder is woken by the release (row mode on PostgreSQL:
            // the release's NOTIFY on `distlock_<table>`).
            let (holder, waiter) = (
                connect_or_explain(&url).await,
                connect_or_explain(&url).await,
            );
            let held = DistributedLock::acquire(&holder, &name, &opts)
                .await
                .unwrap();
            let next = tokio::spawn({
                let (name, opts) = (name.clone(), opts.clone());
                async move { DistributedLock::acquire(&waiter, &name, &opts).await }
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
            held.release()
                .await
                .unwrap_or_else(|e| panic!("{url}: the release failed: {e}"));
            let g = tokio::time::timeout(Duration::from_secs(5), next)
                .await
                .unwrap_or_else(|_| panic!("{url}: the waiter was not served"))
                .unwrap()
                .unwrap();
            g.release().await.unwrap();
            let semaphore = distlock_sql::connect_semaphore(&url)
                .await
                .unwrap_or_else(|e| panic!("{url}: the semaphore: {e}"));
            semaphore
                .acquire(&name, 2, &opts)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            let rw = distlock_sql::connect_rwlock(&url)
                .await
                .unwrap_or_else(|e| panic!("{url}: the read-write lock: {e}"));
            rw.write(&name, &opts)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            rw.read(&name, &opts)
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }
    }
}

#[test]
fn a_longer_table_name_is_refused_naming_it() {
    let longer = format!("{}x", longest("row"));
    let refused = distlock_sql::SqlConfig::from_url(&format!("{}?table={longer}", postgres_url()))
        .unwrap_err();
    assert!(
        matches!(refused, distlock_core::LockError::InvalidConfig(_))
            && refused.to_string().contains(&longer),
        "{refused}"
    );
}

//! PostgreSQL row mode wakes waiters with `LISTEN/NOTIFY`: the clients of one process (on one
//! runtime) share one `LISTEN` connection per database and lock table, so a release's
//! notification reaches the process once, not once per client that ever waited.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use lock_core::{AcquireOptions, DistributedLock};
use support::*;

/// How many connections of application `app` are `LISTEN` connections.
async fn listeners(admin: &sqlx::AnyPool, app: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE 'LISTEN%'",
    )
    .bind(app)
    .fetch_one(admin)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_of_one_process_share_one_listen_connection() {
    sqlx::any::install_default_drivers();
    let app = format!(
        "distlock-listen-{}",
        &lock_core::backend::owner_token()[..8]
    );
    let url = format!("{}?mode=row&application_name={app}", postgres_url());
    let admin = sqlx::AnyPool::connect(&postgres_url()).await.unwrap();
    let name = format!("listen-{}", &lock_core::backend::owner_token()[..8]);
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    let holder = connect_or_explain(&url).await;
    // Kept until the count: a dropped client's share of the listener goes with it.
    let mut clients = Vec::new();
    // Three clients, each of which waits once (a waiting client starts its listener).
    for _ in 0..3 {
        let client = Arc::new(connect_or_explain(&url).await);
        let held = holder.acquire(&name, &wait).await.unwrap();
        let waiter = tokio::spawn({
            let (client, name, wait) = (Arc::clone(&client), name.clone(), wait.clone());
            async move { client.acquire(&name, &wait).await.unwrap() }
        });
        assert!(
            within(Duration::from_secs(5), || async {
                !queued(&holder, &name).await.is_empty()
            })
            .await,
            "the waiter did not queue"
        );
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter was not served")
            .unwrap();
        g.release().await.unwrap();
        clients.push(client);
    }
    assert_eq!(
        listeners(&admin, &app).await,
        1,
        "three clients of one process that each waited should share one LISTEN connection \
         (each would otherwise receive every release's notification)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_longest_table_name_works_and_a_longer_one_is_refused() {
    // 51 bytes: `<table>_waitq_order` is 63, PostgreSQL's longest identifier, and the
    // `distlock_<table>` channel fits too. A 63-byte name used to be accepted and broke the
    // schema (PostgreSQL truncated `<table>_waitq_order` to the lock table's own name).
    let table = format!("long_{}", "l".repeat(lock_sql::config::MAX_TABLE_LEN - 5));
    let url = format!("{}?mode=row&table={table}", postgres_url());
    let (holder, waiter) = (
        connect_or_explain(&url).await,
        Arc::new(connect_or_explain(&url).await),
    );
    let name = format!("long-{}", &lock_core::backend::owner_token()[..8]);
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    let held = holder.acquire(&name, &wait).await.unwrap();
    let task = tokio::spawn({
        let (waiter, name, wait) = (Arc::clone(&waiter), name.clone(), wait.clone());
        async move { waiter.acquire(&name, &wait).await.unwrap() }
    });
    assert!(
        within(Duration::from_secs(5), || async {
            !queued(&holder, &name).await.is_empty()
        })
        .await,
        "the waiter did not queue"
    );
    held.release()
        .await
        .expect("a release on the longest table name should succeed");
    let g = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the waiter was not served")
        .unwrap();
    g.release().await.unwrap();
    let longer = format!("{}?mode=row&table={table}x", postgres_url());
    let refused = lock_sql::SqlConfig::from_url(&longer).unwrap_err();
    assert!(
        matches!(refused, lock_core::LockError::InvalidConfig(_))
            && refused.to_string().contains(&format!("{table}x")),
        "{refused}"
    );
}

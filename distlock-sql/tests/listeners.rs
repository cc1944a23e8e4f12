//! PostgreSQL row mode wakes waiters with `LISTEN/NOTIFY`: the clients of one process (on one
//! runtime) share one `LISTEN` connection per database and lock table, so a release's
//! notification reaches the process once, not once per client that ever waited; and a release
//! whose queue head is a waiter of this version notifies that waiter's listener alone (with
//! the grant of the lock, `tests/grants.rs`), so of many waiting processes only the head's
//! hears it.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockGuard};
use distlock_sql::SqlLock;
use support::*;
use tokio::task::JoinHandle;

/// `holder` holding `name`, and `waiter`'s acquisition of it queued behind.
async fn waiting_behind(
    holder: &SqlLock,
    waiter: &Arc<SqlLock>,
    name: &str,
) -> (LockGuard, JoinHandle<LockGuard>) {
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    let held = holder.acquire(name, &wait).await.unwrap();
    let task = tokio::spawn({
        let (waiter, name) = (Arc::clone(waiter), name.to_owned());
        async move { waiter.acquire(&name, &wait).await.unwrap() }
    });
    assert!(
        within(Duration::from_secs(5), || async {
            !queued(holder, name).await.is_empty()
        })
        .await,
        "the waiter did not queue"
    );
    (held, task)
}

/// The waiter's guard once it is served (within 5 s).
async fn served(task: JoinHandle<LockGuard>) -> LockGuard {
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the waiter was not served")
        .unwrap()
}

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
        &distlock_core::backend::owner_token()[..8]
    );
    let url = format!("{}?mode=row&application_name={app}", postgres_url());
    let admin = sqlx::AnyPool::connect(&postgres_url()).await.unwrap();
    let name = format!("listen-{}", &distlock_core::backend::owner_token()[..8]);
    let holder = connect_or_explain(&url).await;
    // Kept until the count: a dropped client's share of the listener goes with it.
    let mut clients = Vec::new();
    // Three clients, each of which waits once (a waiting client starts its listener).
    for _ in 0..3 {
        let client = Arc::new(connect_or_explain(&url).await);
        let (held, task) = waiting_behind(&holder, &client, &name).await;
        held.release().await.unwrap();
        served(task).await.release().await.unwrap();
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
async fn a_release_notifies_only_the_listener_of_the_head() {
    let table = format!("listen_{}", &distlock_core::backend::owner_token()[..8]);
    let url = format!("{}?mode=row&table={table}", postgres_url());
    let (holder, waiter) = (
        connect_or_explain(&url).await,
        Arc::new(connect_or_explain(&url).await),
    );
    let name = format!("head-{}", &distlock_core::backend::owner_token()[..8]);
    let (held, task) = waiting_behind(&holder, &waiter, &name).await;
    let member = queued(&holder, &name).await.remove(0);
    assert_eq!(member.len(), 49, "a tagged member: {member}");
    // What every waiting process hears (the table's channel), and what only the head's does.
    let table_channel = format!("distlock_{table}");
    let own_channel = format!("distlock_w_{}", &member[..16]);
    let mut ear = sqlx::postgres::PgListener::connect(&postgres_url())
        .await
        .unwrap();
    ear.listen_all([table_channel.as_str(), own_channel.as_str()])
        .await
        .unwrap();
    held.release().await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(5), ear.recv())
        .await
        .expect("the release notified nobody")
        .unwrap();
    // The head holds now, by the grant the notification names (the head, then its token).
    let g = served(task).await;
    assert_eq!(
        (first.channel(), first.payload()),
        (
            own_channel.as_str(),
            format!("{member}={}/{name}", g.fencing_token()).as_str()
        ),
        "the release should notify the head's own listener, granting it the lock"
    );
    // Nothing else was said on either channel.
    let more = tokio::time::timeout(Duration::from_millis(300), ear.recv()).await;
    assert!(
        more.is_err(),
        "a second notification for one release: {:?}",
        more.map(|n| n.map(|n| (n.channel().to_owned(), n.payload().to_owned())))
    );
    g.release().await.unwrap();
}

/// The listener also listens on the table's channel, which carries the releases that name no
/// head ("nobody queued").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_also_listens_on_the_table_channel() {
    sqlx::any::install_default_drivers();
    let table = format!("listen_{}", &distlock_core::backend::owner_token()[..8]);
    let app = format!(
        "distlock-listen-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let url = format!(
        "{}?mode=row&table={table}&application_name={app}",
        postgres_url()
    );
    let (holder, waiter) = (
        connect_or_explain(&url).await,
        Arc::new(connect_or_explain(&url).await),
    );
    let table_channel = format!("distlock_{table}");
    let name = format!("listen-{}", &distlock_core::backend::owner_token()[..8]);
    let (held, task) = waiting_behind(&holder, &waiter, &name).await;
    let admin = sqlx::AnyPool::connect(&postgres_url()).await.unwrap();
    let listens: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query LIKE $2",
    )
    .bind(&app)
    .bind(format!("%LISTEN \"{table_channel}\"%"))
    .fetch_one(&admin)
    .await
    .unwrap();
    assert_eq!(listens, 1, "the listener should listen on {table_channel}");
    held.release().await.unwrap();
    served(task).await.release().await.unwrap();
}

//! Row mode: an `acquire` cancelled at any point leaves no row behind — including while
//! `LockGuard::start` renews a lease whose acquire reply came late. A proxy with 100 ms of
//! latency each way makes every reply take more than half of a 300 ms lease, so every won row
//! goes through that extra renewal (and is given back when the renewal is as slow); cancelling
//! on a 50 ms grid lands in every phase: queueing, the acquire statement(s), the renewal inside
//! `LockGuard::start`, the give-back, the wait before the next attempt.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::conformance::Harness;
use distlock_core::{AcquireOptions, DistributedLock};
use distlock_sql::{Dialect, Mode};
use support::*;
use tokio::time::Instant;

/// Cancels one acquisition of a fresh name at each point of `grid` (all at once, on one
/// client) and returns the (name, cancelled after) of every one that left a row behind.
async fn cancel_on_grid(
    h: &SqlHarness,
    lock: Arc<dyn DistributedLock>,
    grid: Vec<Duration>,
    opts: AcquireOptions,
) -> Vec<(String, Duration)> {
    let base = distlock_core::backend::owner_token()[..8].to_owned();
    let mut tasks = Vec::new();
    for (i, after) in grid.into_iter().enumerate() {
        let (lock, opts) = (Arc::clone(&lock), opts.clone());
        let name = format!("cancel-{base}-{i}");
        tasks.push(tokio::spawn(async move {
            match tokio::time::timeout(after, lock.acquire(&name, &opts)).await {
                // Won before the cut (possible only on a fast path): give it back.
                Ok(Ok(g)) => g.release().await.unwrap(),
                Ok(Err(e)) => panic!("{name}: acquire failed instead of being cancelled: {e}"),
                Err(_) => {}
            }
            (name, after)
        }));
    }
    let mut cancelled = Vec::new();
    for t in tasks {
        cancelled.push(t.await.unwrap());
    }
    // Cleanups and cancelled attempts finish in the background, over the slow link: a row
    // still there after 15 s stays for good (its lease ran out long ago; nothing deletes it).
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let mut left = Vec::new();
        for (name, after) in &cancelled {
            if h.traces(name).await > 0 {
                left.push((name.clone(), *after));
            }
        }
        if left.is_empty() || Instant::now() >= until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn slow_link_cancellations(dialect: Dialect) {
    let h = SqlHarness::new(dialect, Mode::Row).await;
    let url = format!("{}&max_connections=300", h.url());
    let (lock, proxy) = through_proxy(&url).await;
    // Open the pool's connections while the link is fast, so the grid measures statements only.
    let conns = futures::future::join_all((0..200).map(|_| lock.pool().acquire())).await;
    drop(conns);
    proxy.set_latency(Duration::from_millis(100));
    let grid = (0..60).map(|i| Duration::from_millis(50 * i)).collect();
    let opts = AcquireOptions::new()
        .ttl(Duration::from_millis(300))
        .wait(Duration::from_secs(30));
    let left = cancel_on_grid(&h, Arc::new(lock), grid, opts).await;
    proxy.heal();
    assert!(
        left.is_empty(),
        "{dialect:?} row: cancelled acquisitions left rows behind (name, cancelled after): {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_row_cancelled_anywhere_leaves_no_row() {
    slow_link_cancellations(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_row_cancelled_anywhere_leaves_no_row() {
    slow_link_cancellations(Dialect::MySql).await;
}

/// SQLite has no link to slow down: cancel on a fine grid around a prompt acquisition.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_row_cancelled_anywhere_leaves_no_row() {
    let h = SqlHarness::new(Dialect::Sqlite, Mode::Row).await;
    let grid = (0..100).map(|i| Duration::from_micros(40 * i)).collect();
    let opts = AcquireOptions::new().wait(Duration::from_secs(30));
    let left = cancel_on_grid(&h, h.client().await, grid, opts).await;
    assert!(left.is_empty(), "sqlite row: rows left behind: {left:?}");
}

/// How many connections of `lock`'s pool are inside a transaction while they all sit idle in
/// the pool: on MariaDB each is asked for `@@in_transaction` (all taken at once); PostgreSQL
/// shows them as `idle in transaction` to `admin` (they carry `application_name` `app`).
async fn open_transactions(
    lock: &distlock_sql::SqlLock,
    dialect: Dialect,
    admin: &distlock_sql::SqlLock,
    app: &str,
) -> usize {
    if dialect == Dialect::Postgres {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
        )
        .bind(app)
        .fetch_one(admin.pool())
        .await
        .unwrap();
        return usize::try_from(n).unwrap();
    }
    let mut conns = Vec::new();
    for _ in 0..lock.pool().size() {
        conns.push(lock.pool().acquire().await.unwrap());
    }
    let mut open = 0;
    for c in &mut conns {
        let n: i64 = sqlx::query_scalar("SELECT CAST(@@in_transaction AS SIGNED)")
            .fetch_one(&mut **c)
            .await
            .unwrap();
        open += usize::from(n != 0);
    }
    open
}

/// for_update: an acquisition cancelled while its transaction's `BEGIN` is on the way leaves
/// no transaction open on the pooled connection. sqlx records a transaction only once `BEGIN`
/// is answered, so a cancel in between gave the pool back a connection inside a transaction
/// nobody would end; on MariaDB the next token draw on it (meant to commit on its own) joined
/// it, and the token handed out was not committed. With 30 ms of latency each way, cancels on
/// a 10 ms grid land around `BEGIN`'s answer; after each, no pooled connection may be inside a
/// transaction, and (MariaDB) the next guards' tokens must be the committed counter, as another
/// connection reads it.
async fn cancelled_begins_leave_no_open_transaction(base: String, dialect: Dialect) {
    let app = format!(
        "begin_cancel_{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let url = match dialect {
        Dialect::Postgres => {
            format!("{base}?mode=for_update&max_connections=2&application_name={app}")
        }
        _ => format!("{base}?mode=for_update&max_connections=2"),
    };
    let (lock, proxy) = through_proxy(&url).await;
    let admin = connect_or_explain(&format!("{base}?mode=for_update")).await;
    let fences = format!("{}_fences", admin.config().table);
    let name = format!(
        "begin-cancel-{}",
        &distlock_core::backend::owner_token()[..8]
    );
    let opts = AcquireOptions::new().wait(Duration::from_secs(5));
    for round in 0..12u64 {
        proxy.set_latency(Duration::from_millis(30));
        let after = Duration::from_millis(40 + 10 * (round % 6));
        let _ = tokio::time::timeout(after, lock.acquire(&name, &opts)).await;
        proxy.heal();
        // The cancelled call's connections go back to the pool first (bounded: 3 s), so that
        // each is asked below. (Found writing this test: a two-connection pool could stall
        // here for its 5 s timeout, a cancelled locking read holding one connection behind
        // the next holder, which needed the other for its token draw; token draws now use the
        // side pool, `tests/pool.rs` `a_cancelled_for_update_acquire_does_not_stall_the_next`.)
        let t = Instant::now();
        while lock.pool().num_idle() < lock.pool().size() as usize {
            assert!(
                t.elapsed() < Duration::from_secs(3),
                "{url}: round {round}: the pool did not take its connections back"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            open_transactions(&lock, dialect, &admin, &app).await,
            0,
            "{url}: round {round} (cancelled after {after:?}): a pooled connection was left \
             inside a transaction"
        );
        for _ in 0..2 {
            let g = lock.acquire(&name, &opts).await.unwrap();
            if dialect == Dialect::MySql {
                let sql = format!("SELECT fence FROM {fences} WHERE name = ?");
                let committed: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .bind(&name)
                    .fetch_optional(admin.pool())
                    .await
                    .unwrap();
                assert_eq!(
                    committed.and_then(|c| u64::try_from(c).ok()),
                    Some(g.fencing_token()),
                    "{url}: round {round} (cancelled after {after:?}): the guard's token is \
                     not the committed counter (drawn inside a transaction left open)"
                );
            }
            g.release().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_for_update_cancelled_begin_leaves_no_open_transaction() {
    cancelled_begins_leave_no_open_transaction(mysql_url(), Dialect::MySql).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_for_update_cancelled_begin_leaves_no_open_transaction() {
    cancelled_begins_leave_no_open_transaction(postgres_url(), Dialect::Postgres).await;
}

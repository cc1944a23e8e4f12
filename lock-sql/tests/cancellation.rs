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

use lock_core::conformance::Harness;
use lock_core::{AcquireOptions, DistributedLock};
use lock_sql::{Dialect, Mode};
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
    let base = lock_core::backend::owner_token()[..8].to_owned();
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

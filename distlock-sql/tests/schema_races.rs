//! Many clients starting at once on a database that lacks distlock's tables (a fresh deployment:
//! every replica of a service comes up together) all succeed: whoever creates a table first
//! wins and the others use it. PostgreSQL reports two `CREATE TABLE IF NOT EXISTS` of one name
//! at the same moment as a unique violation on its catalog (`pg_type_typname_nsp_index`), the
//! `IF NOT EXISTS` notwithstanding; a clean-clone run failed a semaphore's connect on it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use futures::future::join_all;
use sqlx::AssertSqlSafe;
use support::*;

/// Clients that start together.
const CLIENTS: usize = 8;
/// Fresh tables per case: the race is a few ms wide.
const ROUNDS: usize = 4;

fn fresh(prefix: &str) -> String {
    format!("{prefix}_{}", &distlock_core::backend::owner_token()[..10])
}

/// `connect_semaphore` in for_update mode creates a gate table and a slots table.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn semaphores_connecting_together_on_a_fresh_table_all_connect() {
    for base in [postgres_url(), mysql_url()] {
        for _ in 0..ROUNDS {
            let url = format!("{base}?mode=for_update&table={}", fresh("race_sem"));
            let connects =
                join_all((0..CLIENTS).map(|_| distlock_sql::connect_semaphore(&url))).await;
            for c in connects {
                if let Err(e) = c {
                    panic!("{url}: a semaphore failed to connect beside others: {e}");
                }
            }
        }
    }
}

/// The first acquisitions with a holder identity create `<table>_holders` (row mode) or
/// `<table>_sessions` (for_update) when missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn first_holders_together_on_a_missing_identity_table_all_acquire() {
    let opts = AcquireOptions::new()
        .wait(Duration::from_secs(10))
        .holder("replica");
    for (base, mode, extra) in [
        (postgres_url(), "row", "holders"),
        (mysql_url(), "row", "holders"),
        (postgres_url(), "for_update", "sessions"),
        (mysql_url(), "for_update", "sessions"),
    ] {
        for _ in 0..ROUNDS {
            let table = fresh("race_ids");
            let url = format!("{base}?mode={mode}&table={table}");
            let mut clients = Vec::new();
            for _ in 0..CLIENTS {
                clients.push(connect_or_explain(&url).await);
            }
            sqlx::query(AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {table}_{extra}"
            )))
            .execute(clients[0].pool())
            .await
            .unwrap();
            let names: Vec<String> = (0..CLIENTS).map(|i| format!("n{i}")).collect();
            let taken =
                join_all(clients.iter().zip(&names).map(|(c, n)| c.acquire(n, &opts))).await;
            for g in taken {
                match g {
                    Ok(g) => g.release().await.unwrap(),
                    Err(e) => panic!("{url}: a first holder failed beside others: {e}"),
                }
            }
        }
    }
}

//! SQL-specific behaviour on real servers: names stored verbatim, concurrent table creation,
//! SQLite shared by processes, deadlock retry under load, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock, LockError};
use distlock_sql::{SqlConfig, SqlLock};
use sqlx::{AssertSqlSafe, Row};
use support::*;

fn wait(secs: u64) -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(secs))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hostile_names_are_stored_verbatim() {
    for url in [
        format!("{}?mode=row", postgres_url()),
        format!("{}?mode=row", mysql_url()),
        sqlite_url(),
    ] {
        let lock = connect_or_explain(&url).await;
        let pg = url.starts_with("postgres");
        for hostile in [
            "'; DROP TABLE distlock_locks; --",
            "a\"b\\c",
            "ключ ",
            "%_*",
            "Name",
            "name",
        ] {
            let name = format!("{}{hostile}", &distlock_core::backend::owner_token()[..6]);
            let g = lock.acquire(&name, &wait(5)).await.unwrap();
            let sql = if pg {
                "SELECT name FROM distlock_locks WHERE name = $1"
            } else {
                "SELECT name FROM distlock_locks WHERE name = ?"
            };
            let row = sqlx::query(sql)
                .bind(&name)
                .fetch_one(lock.pool())
                .await
                .unwrap();
            let stored: Vec<u8> = match row.try_get::<String, _>(0) {
                Ok(s) => s.into_bytes(),
                Err(_) => row.try_get::<Vec<u8>, _>(0).unwrap(),
            };
            assert_eq!(
                stored,
                name.as_bytes(),
                "{url}: name not stored byte for byte"
            );
            g.release().await.unwrap();
        }
        // Case and trailing spaces make different locks (no collation folding).
        let base = distlock_core::backend::owner_token()[..6].to_owned();
        let g1 = lock
            .acquire(&format!("{base}Name"), &wait(5))
            .await
            .unwrap();
        let g2 = lock
            .try_acquire(&format!("{base}name"), &wait(5))
            .await
            .unwrap()
            .expect("case folded");
        let g3 = lock
            .try_acquire(&format!("{base}name "), &wait(5))
            .await
            .unwrap()
            .expect("trailing space ignored");
        for g in [g1, g2, g3] {
            g.release().await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_clients_create_a_fresh_table_at_once() {
    for base in [postgres_url(), mysql_url()] {
        for mode in ["row", "for_update"] {
            let table = format!("t_{}", &distlock_core::backend::owner_token()[..10]);
            let url = format!("{base}?mode={mode}&table={table}");
            let mut tasks = Vec::new();
            for _ in 0..10 {
                let url = url.clone();
                tasks.push(tokio::spawn(async move {
                    SqlLock::connect(SqlConfig::from_url(&url).unwrap()).await
                }));
            }
            let mut clients = Vec::new();
            for t in tasks {
                clients.push(
                    t.await
                        .unwrap()
                        .unwrap_or_else(|e| panic!("{url}: concurrent creation failed: {e}")),
                );
            }
            let g = clients[0].acquire("x", &wait(5)).await.unwrap();
            assert!(clients[1]
                .try_acquire("x", &wait(5))
                .await
                .unwrap()
                .is_none());
            g.release().await.unwrap();
            for t in [
                table.clone(),
                format!("{table}_fences"),
                format!("{table}_fence"),
            ] {
                let _ = sqlx::query(AssertSqlSafe(format!("DROP TABLE IF EXISTS {t}")))
                    .execute(clients[0].pool())
                    .await;
                let _ = sqlx::query(AssertSqlSafe(format!("DROP SEQUENCE IF EXISTS {t}")))
                    .execute(clients[0].pool())
                    .await;
            }
        }
    }
}

/// The child side of `sqlite_file_is_shared_between_processes` (does nothing in a normal run).
#[tokio::test]
async fn sqlite_child_holder() {
    let (Ok(url), Ok(marker)) = (
        std::env::var("DISTLOCK_SQLITE_CHILD_URL"),
        std::env::var("DISTLOCK_SQLITE_CHILD_MARKER"),
    ) else {
        return;
    };
    let lock = connect_or_explain(&url).await;
    let g = lock.acquire("shared", &wait(10)).await.unwrap();
    std::fs::write(&marker, g.fencing_token().to_string()).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_file_is_shared_between_processes() {
    let url = sqlite_url();
    let marker = std::env::temp_dir().join(format!(
        "distlock-child-{}",
        distlock_core::backend::owner_token()
    ));
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "sqlite_child_holder", "--nocapture"])
        .env("DISTLOCK_SQLITE_CHILD_URL", &url)
        .env("DISTLOCK_SQLITE_CHILD_MARKER", &marker)
        .spawn()
        .unwrap();
    let lock = connect_or_explain(&url).await;
    let mut child_token = None;
    for _ in 0..100 {
        if let Ok(t) = std::fs::read_to_string(&marker) {
            child_token = t.trim().parse::<u64>().ok();
            if child_token.is_some() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let child_token = child_token.expect("child never held the lock");
    assert!(
        lock.try_acquire("shared", &wait(1))
            .await
            .unwrap()
            .is_none(),
        "both processes held the lock"
    );
    let g = lock.acquire("shared", &wait(10)).await.unwrap();
    assert!(g.fencing_token() > child_token);
    g.release().await.unwrap();
    assert!(child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mariadb_row_mode_under_load_surfaces_no_deadlock() {
    let url = format!("{}?mode=row", mysql_url());
    let clients: Vec<Arc<dyn DistributedLock>> = vec![
        Arc::new(connect_or_explain(&url).await),
        Arc::new(connect_or_explain(&url).await),
    ];
    let names: Vec<String> = (0..4)
        .map(|i| format!("hammer-{i}-{}", &distlock_core::backend::owner_token()[..6]))
        .collect();
    let mut tasks = Vec::new();
    for i in 0..16 {
        let (lock, names) = (Arc::clone(&clients[i % 2]), names.clone());
        tasks.push(tokio::spawn(async move {
            for r in 0..15 {
                let g = lock.acquire(&names[(i + r) % 4], &wait(60)).await?;
                g.release().await?;
            }
            Ok::<_, LockError>(())
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn bad_input_is_typed_and_never_leaks_the_password() {
    for (url, quoted) in [
        ("sqlite://./x.db?mode=for_update", "for_update"),
        (
            "postgres://u:hunter2@127.0.0.1:15432/distlock?table=x;drop",
            "x;drop",
        ),
        ("postgres://u:hunter2@127.0.0.1:15432/distlock?wat=1", "wat"),
        (
            "mysql://u:hunter2@127.0.0.1:13306/distlock?mode=nope",
            "mode=nope",
        ),
    ] {
        let e = distlock_sql::connect(url).await.unwrap_err();
        assert!(matches!(e, LockError::InvalidConfig(_)), "{url}: {e}");
        assert!(e.to_string().contains(quoted), "{e}");
        assert!(
            !e.to_string().contains("hunter2") && !format!("{e:?}").contains("hunter2"),
            "{e:?}"
        );
    }
    let e = distlock_sql::connect("postgres://nobody:hunter2@127.0.0.1:15432/distlock")
        .await
        .unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let e = distlock_sql::connect("mysql://root@127.0.0.1:1/distlock?connect_timeout=1s")
        .await
        .unwrap_err();
    assert!(matches!(e, LockError::Unavailable { .. }), "{e}");
}

/// Every pooled SQLite connection syncs the WAL at each commit (`synchronous = FULL` = 2): with
/// `NORMAL` a power loss can roll back the last commits, and with them the fencing counter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_commits_survive_power_loss() {
    let lock = connect_or_explain(&sqlite_url()).await;
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(lock.pool().acquire().await.unwrap());
    }
    for conn in &mut conns {
        let row = sqlx::query("PRAGMA synchronous")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(
            row.try_get::<i64, _>(0).unwrap(),
            2,
            "synchronous is not FULL"
        );
        let row = sqlx::query("PRAGMA journal_mode")
            .fetch_one(&mut **conn)
            .await
            .unwrap();
        assert_eq!(row.try_get::<String, _>(0).unwrap(), "wal");
    }
}

/// MariaDB for_update: a zero wait on a held name is one `NOWAIT` try, not a 1 s lock wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_for_update_zero_wait_on_a_held_name_answers_at_once() {
    let url = format!("{}?mode=for_update", mysql_url());
    let (c1, c2) = (
        connect_or_explain(&url).await,
        connect_or_explain(&url).await,
    );
    let name = format!("zero-held-{}", &distlock_core::backend::owner_token()[..8]);
    let g = c1.acquire(&name, &wait(5)).await.unwrap();
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let e = c2
            .acquire(&name, &AcquireOptions::new().wait(Duration::ZERO))
            .await
            .unwrap_err();
        assert!(matches!(e, LockError::Timeout { .. }), "{e}");
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "a zero wait took {:?}",
            t.elapsed()
        );
    }
    g.release().await.unwrap();
}

/// for_update on MariaDB: a lock transaction begins in one round trip — the session's bounds
/// (idle, lock wait) and then `BEGIN`, sent together — so an uncontended acquisition is five
/// requests: the begin, the locking read, the token's draw on a connection of the side pool and
/// sqlx's ping as that connection goes back to the pool, and the proof that the row lock was
/// held throughout (it was six: the bounds went on their own). PostgreSQL keeps six: its
/// bounds are `SET LOCAL`, inside the transaction, and a `BEGIN` sent with them would leave an
/// aborted transaction on the pooled connection if one failed. Counted through a proxy after
/// a first cycle has prepared the statements, the fewest of five.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_update_lock_transaction_begins_in_one_round_trip() {
    for (base, expected) in [(mysql_url(), 5), (postgres_url(), 6)] {
        let url = format!("{base}?mode=for_update&max_connections=2");
        let (lock, proxy) = through_proxy(&url).await;
        let name = format!("begin-{}", &distlock_core::backend::owner_token()[..8]);
        let mut fewest = u64::MAX;
        for cycle in 0..6 {
            let before = proxy.chunks_sent();
            let g = lock.acquire(&name, &wait(2)).await.unwrap();
            // The pool's ping of the token's connection, off the caller's path, is counted.
            tokio::time::sleep(Duration::from_millis(50)).await;
            if cycle > 0 {
                fewest = fewest.min(proxy.chunks_sent() - before);
            }
            g.release().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            fewest, expected,
            "{url}: an uncontended acquisition sent {fewest} requests"
        );
    }
}

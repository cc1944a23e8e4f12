//! `distlock_sql::fence` on real PostgreSQL, MariaDB and SQLite: the fenced-register check
//! (`distlock_core::conformance::fence`), a stalled holder's write refused after the next
//! holder's, plus the `distlock_fence` function a shell job calls through `psql`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::fence::{a_stalled_holders_write_is_refused, Read, Write};
use distlock_core::fence::FenceError;
use distlock_sql::{fence, Dialect, Mode};
use futures::FutureExt;
use support::*;

macro_rules! fenced_register_case {
    ($test:ident, $dialect:ident, $dial:ident, $url:expr, $connect:expr, $create:expr, $upsert:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let url: String = $url;
            let pool = ($connect)(url.clone()).await.unwrap();
            fence::$dialect::install(&pool).await.unwrap();
            let unique = distlock_core::backend::owner_token();
            let table = format!("fence_reg_{}", &unique[..12]);
            let resource = format!("register-{unique}");
            sqlx::query(sqlx::AssertSqlSafe(format!($create, table)))
                .execute(&pool)
                .await
                .unwrap();
            let write: Write = Box::new({
                let (pool, table) = (pool.clone(), table.clone());
                move |token, body| {
                    let (pool, table, resource) = (pool.clone(), table.clone(), resource.clone());
                    async move {
                        let mut tx = pool
                            .begin()
                            .await
                            .map_err(|e| FenceError::Store(e.to_string()))?;
                        fence::$dialect::check(&mut tx, &resource, token)
                            .await
                            .map_err(|e| e.map_store(|e| e.to_string()))?;
                        sqlx::query(sqlx::AssertSqlSafe(format!($upsert, table)))
                            .bind(body)
                            .execute(&mut *tx)
                            .await
                            .map_err(|e| FenceError::Store(e.to_string()))?;
                        tx.commit()
                            .await
                            .map_err(|e| FenceError::Store(e.to_string()))
                    }
                    .boxed()
                }
            });
            let read: Read = Box::new(move || {
                let (pool, table) = (pool.clone(), table.clone());
                async move {
                    let sql = format!("SELECT body FROM {table} WHERE id = 1");
                    sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                        .fetch_one(&pool)
                        .await
                        .unwrap()
                }
                .boxed()
            });
            a_stalled_holders_write_is_refused(
                &SqlHarness::new(Dialect::$dial, Mode::Row).await,
                &format!("fence-{unique}"),
                write,
                read,
            )
            .await;
        }
    };
}

fenced_register_case!(
    postgres_refuses_a_stalled_holders_write,
    postgres,
    Postgres,
    postgres_url(),
    |url: String| async move { sqlx::PgPool::connect(&url).await },
    "CREATE TABLE {} (id INT PRIMARY KEY, body TEXT NOT NULL)",
    "INSERT INTO {} (id, body) VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET body = EXCLUDED.body"
);

fenced_register_case!(
    mysql_refuses_a_stalled_holders_write,
    mysql,
    MySql,
    mysql_url(),
    |url: String| async move { sqlx::MySqlPool::connect(&url).await },
    "CREATE TABLE {} (id INT PRIMARY KEY, body TEXT NOT NULL) ENGINE=InnoDB",
    "INSERT INTO {} (id, body) VALUES (1, ?) ON DUPLICATE KEY UPDATE body = VALUES(body)"
);

fenced_register_case!(
    sqlite_refuses_a_stalled_holders_write,
    sqlite,
    Sqlite,
    sqlite_url(),
    |url: String| async move {
        let opts: sqlx::sqlite::SqliteConnectOptions = url.parse().unwrap();
        sqlx::SqlitePool::connect_with(opts.create_if_missing(true)).await
    },
    "CREATE TABLE {} (id INT PRIMARY KEY, body TEXT NOT NULL)",
    "INSERT INTO {} (id, body) VALUES (1, ?1) ON CONFLICT (id) DO UPDATE SET body = excluded.body"
);

/// The shell form under `distlock exec`: a `psql` transaction that calls `distlock_fence`
/// aborts when the token is stale, so its `UPDATE` never lands.
#[tokio::test]
async fn postgres_distlock_fence_function_aborts_a_stale_transaction() {
    let pool = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    fence::postgres::install(&pool).await.unwrap();
    let resource = format!("fn-{}", distlock_core::backend::owner_token());
    let call = |token: i64| {
        let (pool, resource) = (pool.clone(), resource.clone());
        async move {
            sqlx::query_scalar::<_, i64>("SELECT distlock_fence($1, $2)")
                .bind(resource)
                .bind(token)
                .fetch_one(&pool)
                .await
        }
    };
    assert_eq!(call(5).await.unwrap(), 5);
    assert_eq!(call(9).await.unwrap(), 9);
    let err = call(5).await.unwrap_err().to_string();
    assert!(
        err.contains("token 5") && err.contains("9 already seen"),
        "{err}"
    );
    assert_eq!(call(9).await.unwrap(), 9, "the current holder goes on");
}

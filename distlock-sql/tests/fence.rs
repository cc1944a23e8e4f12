//! `distlock_sql::fence` on real PostgreSQL, MariaDB and SQLite: the fenced-register check
//! (`distlock_core::conformance::fence`), a stalled holder's write refused after the next
//! holder's, plus the `distlock_fence` function a shell job calls through `psql`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use distlock_core::conformance::fence::a_stalled_holders_write_is_refused;
use distlock_sql::{fence, Dialect, Mode};
use support::*;

macro_rules! fenced_register_case {
    ($test:ident, $dialect:ident, $dial:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let (write, read) = fenced_register!($dialect);
            a_stalled_holders_write_is_refused(
                &SqlHarness::new(Dialect::$dial, Mode::Row).await,
                &format!("fence-{}", distlock_core::backend::owner_token()),
                write,
                read,
            )
            .await;
        }
    };
}

fenced_register_case!(postgres_refuses_a_stalled_holders_write, postgres, Postgres);
fenced_register_case!(mysql_refuses_a_stalled_holders_write, mysql, MySql);
fenced_register_case!(sqlite_refuses_a_stalled_holders_write, sqlite, Sqlite);

/// Installs racing each other (several instances of an application starting at once) all
/// succeed: PostgreSQL refuses concurrent `CREATE OR REPLACE FUNCTION`s of one function
/// ("tuple concurrently updated") unless they are serialized.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_installs_may_race() {
    let pool = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    let installs: Vec<_> = (0..8)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move { fence::postgres::install(&pool).await })
        })
        .collect();
    for i in installs {
        i.await.unwrap().expect("a racing install failed");
    }
}

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

//! advisory mode on real PostgreSQL and MariaDB, beyond the conformance suite: names that only a
//! careless key would fold together, a cancelled wait that leaves no lock held, and pooled
//! connections returned clean after a release.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use sqlx::Row;
use support::*;
use tokio::time::Instant;

fn advisory_urls(extra: &str) -> [String; 2] {
    [
        format!("{}?mode=advisory{extra}", postgres_url()),
        format!("{}?mode=advisory{extra}", mysql_url()),
    ]
}

fn wait_ms(ms: u64) -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_millis(ms))
}

/// Case variants, trailing spaces, and long names sharing their first 200 characters (beyond
/// `GET_LOCK`'s 64-character limit) are all different locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn case_variants_and_long_names_stay_distinct() {
    for url in advisory_urls("") {
        let (a, b) = (
            connect_or_explain(&url).await,
            connect_or_explain(&url).await,
        );
        let base = &distlock_core::backend::owner_token()[..8];
        let long = "x".repeat(200);
        let names: Vec<String> = [
            "Job".to_owned(),
            "job".to_owned(),
            "job ".to_owned(),
            format!("{long}a"),
            format!("{long}b"),
            format!("{long}A"),
        ]
        .iter()
        .map(|n| format!("{base}-{n}"))
        .collect();
        let mut held = Vec::new();
        for n in &names {
            // Each is free although every other one is held.
            held.push(a.acquire(n, &wait_ms(2000)).await.unwrap());
        }
        for n in &names {
            assert!(
                b.try_acquire(n, &AcquireOptions::new())
                    .await
                    .unwrap()
                    .is_none(),
                "{url}: {n:?}"
            );
            assert!(b.inspect(n).await.unwrap().held, "{url}: {n:?}");
        }
        for g in held {
            g.release().await.unwrap();
        }
        for n in &names {
            assert!(!b.inspect(n).await.unwrap().held, "{url}: {n:?}");
        }
    }
}

/// PostgreSQL: how many sessions wait in the lock queue of advisory lock `name` (default table).
async fn pg_waiting(pool: &sqlx::AnyPool, name: &str) -> i64 {
    sqlx::query(
        "SELECT count(*) FROM pg_locks l, \
         (SELECT ('x' || left(encode(sha256(convert_to('distlock_advisory:' || $1, 'UTF8')), 'hex'), 16))::bit(64)::bigint AS k) k \
         WHERE l.locktype = 'advisory' AND NOT l.granted \
         AND l.classid = ((k.k >> 32) & 4294967295)::oid AND l.objid = (k.k & 4294967295)::oid",
    )
    .bind(name)
    .fetch_one(pool)
    .await
    .unwrap()
    .try_get::<i64, _>(0)
    .unwrap()
}

/// An acquire dropped while waiting in the database leaves nothing behind: once the holder
/// releases, a third client gets the lock at once (no waiter granted it on behalf of nobody).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelled_wait_leaves_no_lock_held() {
    for url in advisory_urls("") {
        let name = format!(
            "cancel-wait-{}",
            &distlock_core::backend::owner_token()[..8]
        );
        let holder = connect_or_explain(&url).await;
        let waiter = connect_or_explain(&url).await;
        let third = connect_or_explain(&url).await;
        let g = holder.acquire(&name, &wait_ms(2000)).await.unwrap();
        let opts = AcquireOptions::new().wait_forever();
        let cut = tokio::time::timeout(Duration::from_millis(500), waiter.acquire(&name, &opts));
        assert!(cut.await.is_err(), "{url}: the waiter got a held lock");
        // Give the server time to see the waiter's connection close.
        tokio::time::sleep(Duration::from_millis(600)).await;
        if url.starts_with("postgres") {
            // The cancelled waiter left PostgreSQL's lock queue.
            let waiting = pg_waiting(holder.pool(), &name).await;
            assert_eq!(waiting, 0, "the cancelled waiter still queues for the lock");
        }
        g.release().await.unwrap();
        let started = Instant::now();
        let g = third.acquire(&name, &wait_ms(3000)).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_millis(1000),
            "{url}: the lock stayed held {:?} after its release",
            started.elapsed()
        );
        g.release().await.unwrap();
    }
}

/// A released guard's connection goes back to the pool (the same session serves the next
/// statement) with its session settings put back (the idle bound set while held would otherwise
/// have the server close the pooled connection).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn released_connection_returns_to_the_pool_clean() {
    for url in advisory_urls("&max_connections=1") {
        let lock = connect_or_explain(&url).await;
        let pg = url.starts_with("postgres");
        let (session_sql, clean_sql) = if pg {
            (
                "SELECT CAST(pg_backend_pid() AS BIGINT)",
                // The values RESET gives, and none of the three set by the session any more (a
                // reload of the server's configuration reaches the connection).
                "SELECT CAST((current_setting('idle_session_timeout') = '0' AND current_setting('lock_timeout') = '0' AND current_setting('client_connection_check_interval') = '0' AND NOT EXISTS (SELECT 1 FROM pg_settings WHERE name IN ('idle_session_timeout', 'lock_timeout', 'client_connection_check_interval') AND source = 'session')) AS INT)::BIGINT",
            )
        } else {
            (
                "SELECT CAST(CONNECTION_ID() AS SIGNED)",
                "SELECT CAST(@@SESSION.wait_timeout = @@GLOBAL.wait_timeout AS SIGNED)",
            )
        };
        let one = |sql: &'static str| {
            let pool = lock.pool().clone();
            async move {
                let row = sqlx::query(sql).fetch_one(&pool).await.unwrap();
                row.try_get::<i64, _>(0).unwrap()
            }
        };
        let session = one(session_sql).await;
        // The same session serves the next statement, with every setting as it was.
        let reused_clean = |when: &'static str| {
            let (one, url) = (&one, &url);
            async move {
                assert_eq!(
                    one(session_sql).await,
                    session,
                    "{url}: the session was not reused{when}"
                );
                assert_eq!(
                    one(clean_sql).await,
                    1,
                    "{url}: session settings left behind{when}"
                );
            }
        };
        let name = format!("reuse-{}", &distlock_core::backend::owner_token()[..8]);
        let opts = wait_ms(2000).ttl(Duration::from_millis(300));
        let mut last = 0;
        for _ in 0..3 {
            let g = lock.acquire(&name, &opts).await.unwrap();
            assert!(g.fencing_token() > last, "{url}");
            last = g.fencing_token();
            g.release().await.unwrap();
            reused_clean("").await;
        }
        // A lock taken after a wait (which sets the wait's bounds on the session too) goes back
        // clean as well.
        let other = connect_or_explain(&url.replace("&max_connections=1", "")).await;
        let held = other.acquire(&name, &opts).await.unwrap();
        let (waited, released) = tokio::join!(lock.acquire(&name, &opts), async {
            // Released once the other is queued (PostgreSQL shows it; MariaDB's `GET_LOCK`
            // queue is invisible to other sessions: a pause instead).
            let start = Instant::now();
            if pg {
                while pg_waiting(other.pool(), &name).await == 0 {
                    assert!(
                        start.elapsed() < Duration::from_secs(5),
                        "{url}: nobody queued"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            } else {
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            held.release().await
        });
        released.unwrap();
        waited.unwrap().release().await.unwrap();
        reused_clean(" after a wait").await;
        assert!(!lock.inspect(&name).await.unwrap().held, "{url}");
    }
}

/// PostgreSQL keys are 64 bits, so two names can in principle share one. Simulated here: name
/// `a` is registered (as a real collision would leave it) under the key name `b` would take
/// first. `b` then gets a key of its own, and the two are two locks: both held at once, each
/// excluding only itself — also for a client that never saw the registration happen.
#[tokio::test]
async fn postgres_names_whose_keys_collide_stay_two_locks() {
    let table = format!(
        "adv_collide_{}",
        &distlock_core::backend::owner_token()[..10]
    );
    let url = format!("{}?mode=advisory&table={table}", postgres_url());
    let (one, two) = (
        connect_or_explain(&url).await,
        connect_or_explain(&url).await,
    );
    let hash_of_b = format!(
        "('x' || left(encode(sha256(convert_to('{table}:' || 'b', 'UTF8')), 'hex'), 16))::bit(64)::bigint"
    );
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table}_keys (name, key) VALUES ('a', {hash_of_b})"
    )))
    .execute(one.pool())
    .await
    .unwrap();
    let a = one.try_acquire("a", &AcquireOptions::new()).await.unwrap();
    let b = two.try_acquire("b", &AcquireOptions::new()).await.unwrap();
    assert!(a.is_some(), "`a` was not free");
    assert!(b.is_some(), "`b` shared `a`'s lock: its key collided");
    assert!(
        one.try_acquire("b", &AcquireOptions::new())
            .await
            .unwrap()
            .is_none(),
        "`b` held twice"
    );
    let keys: Vec<(String, i64)> = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT name, key FROM {table}_keys ORDER BY name"
    )))
    .fetch_all(one.pool())
    .await
    .unwrap()
    .into_iter()
    .map(|r| (r.get(0), r.get(1)))
    .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    assert_ne!(keys[0].1, keys[1].1, "two names, one key: {keys:?}");
    drop((a, b));
    for stmt in [
        format!("DROP TABLE {table}_keys"),
        format!("DROP SEQUENCE {table}_fence"),
    ] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(stmt))
            .execute(one.pool())
            .await;
    }
}

/// PostgreSQL: an uncontended acquisition is one statement — the try, the token drawn only once
/// the lock is held, and the idle bound together (it was four: the wait's bound, the lock, the
/// token, the idle bound) — and the token still rises above every earlier holder's. A release
/// is one statement too: the unlock with the session's settings put back (it was two; sqlx's
/// ping as the connection goes back to the pool comes after it, off the caller's path). Counted
/// through a proxy on a one-connection pool, after a first cycle has prepared the statements
/// (5 requests before: four statements and the pool's liveness ping, which a connection used
/// moments ago now skips).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_uncontended_acquire_and_release_are_one_statement_each() {
    let (lock, proxy) = through_proxy(&format!(
        "{}?mode=advisory&max_connections=1",
        postgres_url()
    ))
    .await;
    let other = connect_or_explain(&format!("{}?mode=advisory", postgres_url())).await;
    let name = format!("one-stmt-{}", &distlock_core::backend::owner_token()[..8]);
    let mut last = 0;
    let (mut fewest, mut fewest_release) = (u64::MAX, u64::MAX);
    for cycle in 0..6 {
        let before = proxy.chunks_sent();
        let g = lock.acquire(&name, &wait_ms(2000)).await.unwrap();
        if cycle > 0 {
            // A request split over two reads counts twice: the fewest of five cycles counts.
            fewest = fewest.min(proxy.chunks_sent() - before);
        }
        assert!(
            g.fencing_token() > last,
            "tokens {last} then {}",
            g.fencing_token()
        );
        last = g.fencing_token();
        assert!(
            other
                .try_acquire(&name, &AcquireOptions::new())
                .await
                .unwrap()
                .is_none(),
            "cycle {cycle}: the lock is not held after the one-statement acquire"
        );
        let before = proxy.chunks_sent();
        g.release().await.unwrap();
        // sqlx pings a connection as it goes back to the pool, from a task of its own that may
        // send before or after the release returns: wait for it (bounded: 1 s), so that every
        // count has it, and a little longer for anything else the release would send.
        let t = tokio::time::Instant::now();
        while proxy.chunks_sent() - before < 2 && t.elapsed() < Duration::from_secs(1) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        if cycle > 0 {
            fewest_release = fewest_release.min(proxy.chunks_sent() - before);
        }
        // Another client's turn in between: the token stays ordered across clients.
        let o = other.acquire(&name, &wait_ms(2000)).await.unwrap();
        assert!(o.fencing_token() > last);
        last = o.fencing_token();
        o.release().await.unwrap();
    }
    assert_eq!(
        fewest, 1,
        "an uncontended acquire sent {fewest} requests (one statement expected: a connection \
         used moments ago is not pinged)"
    );
    assert_eq!(
        fewest_release, 2,
        "a release sent {fewest_release} requests (the unlock with the session's reset, and \
         sqlx's ping as the connection goes back to the pool, expected)"
    );
}

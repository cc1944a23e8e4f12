//! The semaphore and read-write lock on PostgreSQL, MariaDB (`scripts/services.sh up`) and
//! SQLite, in every mode: the shared conformance cases, and what each mode's design adds (keys
//! that never meet, crashed holders, inspect).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::conformance::{Crash, RwLockHarness, SemaphoreHarness};
use distlock_core::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockError};
use support::{mysql_url, postgres_url, sqlite_url};

/// Clients of one database URL (row mode, the default).
struct Row(fn() -> String);

impl Row {
    fn url(&self) -> String {
        (self.0)()
    }
}

/// One SQLite file for every client of a test binary run.
fn sqlite() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(sqlite_url).clone()
}

#[async_trait]
impl SemaphoreHarness for Row {
    async fn semaphore(&self) -> Arc<dyn DistributedSemaphore> {
        distlock_sql::connect_semaphore(&self.url())
            .await
            .unwrap_or_else(|e| panic!("{e}; start the stores with `scripts/services.sh up`"))
    }

    /// for_update: a client through a proxy; killing it closes the holder's connection, and
    /// the database ends its transaction at once.
    async fn crashable(&self) -> (Arc<dyn DistributedSemaphore>, Crash, Duration) {
        let (lock, proxy) = support::through_proxy(&self.url()).await;
        let crash: Crash = Box::new(move || {
            Box::pin(async move {
                proxy.kill();
                drop(proxy);
            })
        });
        (Arc::new(lock), crash, Duration::from_secs(5))
    }
}

#[async_trait]
impl RwLockHarness for Row {
    async fn rwlock(&self) -> Arc<dyn DistributedRwLock> {
        distlock_sql::connect_rwlock(&self.url())
            .await
            .unwrap_or_else(|e| panic!("{e}; start the stores with `scripts/services.sh up`"))
    }
}

mod postgres_semaphore {
    distlock_core::semaphore_suite!(super::Row(super::postgres_url));
}
mod postgres_rwlock {
    distlock_core::rwlock_suite!(super::Row(super::postgres_url));
}
mod mysql_semaphore {
    distlock_core::semaphore_suite!(super::Row(super::mysql_url));
}
mod mysql_rwlock {
    distlock_core::rwlock_suite!(super::Row(super::mysql_url));
}
mod sqlite_semaphore {
    distlock_core::semaphore_suite!(super::Row(super::sqlite));
}
mod sqlite_rwlock {
    distlock_core::rwlock_suite!(super::Row(super::sqlite));
}

/// PostgreSQL advisory mode offers the read-write lock (shared and exclusive advisory locks).
fn postgres_advisory() -> String {
    format!("{}?mode=advisory", postgres_url())
}

mod postgres_advisory_rwlock {
    distlock_core::rwlock_suite!(super::Row(super::postgres_advisory));
}

/// Advisory mode offers the semaphore on both databases (a gate and slot advisory locks per
/// name, `advisory/semaphore.rs`).
fn mysql_advisory() -> String {
    format!("{}?mode=advisory", mysql_url())
}

mod postgres_advisory_semaphore {
    distlock_core::semaphore_suite!(super::Row(super::postgres_advisory));
}

mod mysql_advisory_semaphore {
    distlock_core::semaphore_suite!(super::Row(super::mysql_advisory));
}

/// for_update mode offers both: the semaphore (slot rows taken `SKIP LOCKED`) and the
/// read-write lock (shared and exclusive row locks), each behind a gate row.
fn postgres_for_update() -> String {
    format!("{}?mode=for_update", postgres_url())
}

fn mysql_for_update() -> String {
    format!("{}?mode=for_update", mysql_url())
}

mod postgres_for_update_semaphore {
    distlock_core::semaphore_suite!(super::Row(super::postgres_for_update));
}

mod mysql_for_update_semaphore {
    distlock_core::semaphore_suite!(super::Row(super::mysql_for_update));
}

mod postgres_for_update_rwlock {
    distlock_core::rwlock_suite!(super::Row(super::postgres_for_update));
}

mod mysql_for_update_rwlock {
    distlock_core::rwlock_suite!(super::Row(super::mysql_for_update));
}

/// MySQL/MariaDB advisory mode offers the read-write lock too, built from exclusive `GET_LOCK`
/// locks: a gate, reader slots and a writer mark (`advisory/gated_rw.rs`).
mod mysql_advisory_rwlock {
    distlock_core::rwlock_suite!(super::Row(super::mysql_advisory));
}

/// MySQL/MariaDB advisory: a reader whose connection dies frees its slot, so a writer waiting
/// for it gets the lock with a greater token; inspect shows the reader, then the waiting
/// writer, then the writer alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_advisory_rwlock_crashed_reader_lets_the_writer_in() {
    let url = mysql_advisory();
    let name = format!("rw-crash-{}", &distlock_core::backend::owner_token()[..8]);
    let (reader, proxy) = support::through_proxy(&url).await;
    let r = reader.read(&name, &AcquireOptions::new()).await.unwrap();
    let writers = distlock_sql::connect_rwlock(&url).await.unwrap();
    let info = writers.inspect(&name).await.unwrap();
    assert_eq!(
        (info.readers, info.writer, info.waiters),
        (1, false, 0),
        "{info:?}"
    );
    let w = tokio::spawn({
        let (writers, name) = (Arc::clone(&writers), name.clone());
        async move {
            let o = AcquireOptions::new().wait(Duration::from_secs(10));
            writers.write(&name, &o).await
        }
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!w.is_finished(), "a writer beside a live reader");
    let info = writers.inspect(&name).await.unwrap();
    assert_eq!(
        (info.readers, info.writer, info.waiters),
        (1, false, 1),
        "{info:?}"
    );
    let crashed = tokio::time::Instant::now();
    proxy.kill();
    let g = tokio::time::timeout(Duration::from_secs(5), w)
        .await
        .expect("the writer still waits for a crashed reader")
        .unwrap()
        .unwrap();
    assert!(
        crashed.elapsed() < Duration::from_secs(3),
        "{:?}",
        crashed.elapsed()
    );
    assert!(g.fencing_token() > r.fencing_token());
    let info = writers.inspect(&name).await.unwrap();
    assert_eq!((info.readers, info.writer), (0, true), "{info:?}");
    g.release().await.unwrap();
    let info = writers.inspect(&name).await.unwrap();
    assert_eq!(
        (info.readers, info.writer, info.waiters),
        (0, false, 0),
        "{info:?}"
    );
    drop(r);
}

/// On PostgreSQL advisory, a read-write lock and a mutex of one name never meet: the mutex
/// locks the name's key in the `bigint` key space, the read-write lock in the two-`int` one.
#[tokio::test]
async fn postgres_advisory_rwlock_and_mutex_of_one_name_are_apart() {
    use distlock_core::DistributedLock;
    let lock = support::connect_or_explain(&postgres_advisory()).await;
    let name = format!("apart-{}", &distlock_core::backend::owner_token()[..8]);
    let o = AcquireOptions::new();
    let m = DistributedLock::try_acquire(&lock, &name, &o)
        .await
        .unwrap()
        .expect("mutex");
    let w = lock
        .try_write(&name, &o)
        .await
        .unwrap()
        .expect("a writer beside the mutex");
    assert!(DistributedLock::try_acquire(&lock, &name, &o)
        .await
        .unwrap()
        .is_none());
    assert!(lock.try_read(&name, &o).await.unwrap().is_none());
    w.release().await.unwrap();
    m.release().await.unwrap();
}

/// The advisory semaphore's gate and slot locks never meet another lock: neither the mutex nor
/// the read-write lock of the same name, nor a lock whose name is crafted to look like one of
/// the semaphore's internal names. The internal names are read from PostgreSQL's key registry
/// (a private table, so it holds only this test's names); MySQL/MariaDB derives its `GET_LOCK`
/// names from the same internal names, so they are tried there too. Each internal name must be
/// refused as a lock name (it is longer than a name may be), and every look-alike must be a
/// lock of its own, held beside the semaphore's permit; with all of them held, the permit is
/// taken again through the gate at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_semaphore_keys_never_meet_other_locks() {
    use distlock_core::DistributedLock;
    use sqlx::Row;
    let table = format!(
        "adv_sem_keys_{}",
        &distlock_core::backend::owner_token()[..10]
    );
    let name = "apart";
    let (o, wait) = (
        AcquireOptions::new(),
        AcquireOptions::new().wait(Duration::from_secs(3)),
    );
    let pg = format!("{}?mode=advisory&table={table}", postgres_url());
    let my = format!("{}?mode=advisory&table={table}", mysql_url());
    let lock = support::connect_or_explain(&pg).await;
    let p = DistributedSemaphore::acquire(&lock, name, 1, &wait)
        .await
        .unwrap();
    let internal: Vec<String> = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT name FROM {table}_keys WHERE name <> $1 ORDER BY name"
    )))
    .bind(name)
    .fetch_all(lock.pool())
    .await
    .unwrap()
    .into_iter()
    .map(|r| r.get(0))
    .collect();
    p.release().await.unwrap();
    assert!(!internal.is_empty(), "no internal names registered");
    // Look-alikes: each internal name without its padding, cut to the longest name allowed, and
    // with the lock name's own bytes only.
    let mut crafted: Vec<String> = Vec::new();
    for s in &internal {
        assert!(s.ends_with(name), "{s:?}");
        let squeezed: String = s
            .split(' ')
            .filter(|w| !w.is_empty())
            .collect::<Vec<_>>()
            .join(" ");
        crafted.push(squeezed.replace(": ", ":"));
        crafted.push(squeezed);
        let mut cut = 256;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        crafted.push(s[..cut].to_owned());
        crafted.push(s.trim_end_matches(name).trim_end().to_owned());
    }
    for url in [pg, my] {
        let (a, b) = (
            support::connect_or_explain(&url).await,
            support::connect_or_explain(&url).await,
        );
        let permit = DistributedSemaphore::acquire(&a, name, 1, &wait)
            .await
            .unwrap();
        let mut held = Vec::new();
        for s in &internal {
            let e = DistributedLock::try_acquire(&b, s, &o).await.unwrap_err();
            assert!(
                matches!(e, LockError::InvalidName { .. }),
                "{url}: {s:?}: {e}"
            );
        }
        for n in std::iter::once(name.to_owned()).chain(crafted.iter().cloned()) {
            let g = DistributedLock::try_acquire(&b, &n, &o).await.unwrap();
            held.push(g.unwrap_or_else(|| panic!("{url}: mutex {n:?} met the semaphore")));
        }
        let writer = Some(
            b.try_write(name, &o)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{url}: the writer met the semaphore or a mutex")),
        );
        // Still one permit only, and taken again at once through the gate.
        assert!(DistributedSemaphore::try_acquire(&b, name, 1, &o)
            .await
            .unwrap()
            .is_none());
        permit.release().await.unwrap();
        let again = DistributedSemaphore::try_acquire(&b, name, 1, &o)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{url}: the permit met another lock"));
        again.release().await.unwrap();
        if let Some(w) = writer {
            w.release().await.unwrap();
        }
        for g in held {
            g.release().await.unwrap();
        }
    }
    let lock = support::connect_or_explain(&format!("{}?mode=advisory", mysql_url())).await;
    for t in ["fences", "semcounts", "sessions"] {
        let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {table}_{t}"
        )))
        .execute(lock.pool())
        .await;
    }
    let lock = support::connect_or_explain(&postgres_advisory()).await;
    for stmt in [
        "TABLE IF EXISTS {t}_keys",
        "TABLE IF EXISTS {t}_semcounts",
        "TABLE IF EXISTS {t}_sessions",
        "SEQUENCE IF EXISTS {t}_fence",
    ] {
        let stmt = format!("DROP {}", stmt.replace("{t}", &table));
        let _ = sqlx::query(sqlx::AssertSqlSafe(stmt))
            .execute(lock.pool())
            .await;
    }
}

/// Advisory semaphore waiters cancelled both while holding the gate (polling for a slot) and
/// while queued behind it leave nothing held: once the holder releases, a caller that does not
/// wait (`try_acquire`, refused while the gate is held) gets the permit within moments.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn advisory_semaphore_cancelled_waiters_leave_nothing() {
    for url in [postgres_advisory(), mysql_advisory()] {
        let name = format!(
            "adv-sem-cancel-{}",
            &distlock_core::backend::owner_token()[..8]
        );
        let holder = distlock_sql::connect_semaphore(&url).await.unwrap();
        let g = holder
            .acquire(&name, 1, &AcquireOptions::new())
            .await
            .unwrap();
        let mut waiters = Vec::new();
        for _ in 0..2 {
            // Separate clients, so each waits in the database, not in this process's queue.
            let (s, name) = (
                distlock_sql::connect_semaphore(&url).await.unwrap(),
                name.clone(),
            );
            waiters.push(tokio::spawn(async move {
                s.acquire(&name, 1, &AcquireOptions::new().wait_forever())
                    .await
                    .map(drop)
            }));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let third = distlock_sql::connect_semaphore(&url).await.unwrap();
        assert!(third
            .try_acquire(&name, 1, &AcquireOptions::new())
            .await
            .unwrap()
            .is_none());
        for w in waiters {
            w.abort();
            assert!(w.await.unwrap_err().is_cancelled());
        }
        g.release().await.unwrap();
        let started = tokio::time::Instant::now();
        let got = loop {
            if let Some(p) = third
                .try_acquire(&name, 1, &AcquireOptions::new())
                .await
                .unwrap()
            {
                break p;
            }
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{url}: a cancelled waiter kept the gate or a slot"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        println!("{url}: free {:?} after the release", started.elapsed());
        got.release().await.unwrap();
        let info = third.inspect(&name).await.unwrap();
        assert_eq!((info.holders, info.waiters), (0, 0), "{url}: {info:?}");
    }
}

/// A permit's renewal whose commit lands late, or whose reply is lost, never leaves the holder
/// believing in more lease than the database keeps (PostgreSQL and MariaDB permits).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permit_extend_of_unknown_outcome_is_not_believed() {
    for url in [postgres_url(), mysql_url()] {
        let (proxied, proxy) = support::proxied_url(&url).await;
        let a = distlock_sql::connect_semaphore(&proxied).await.unwrap();
        let b = distlock_sql::connect_semaphore(&url).await.unwrap();
        distlock_core::conformance::permit_extend_of_unknown_outcome_is_not_believed(
            &*a,
            std::slice::from_ref(&proxy),
            &*b,
        )
        .await;
    }
}

//! Row mode is FIFO across processes: a client that releases a lock while a client of another
//! process waits for it does not get it straight back — the waiter does. Two "processes" here
//! are two clients whose in-process queues differ (a connection through a proxy, or another
//! spelling of the SQLite file's path), so only the database orders them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use distlock_sql::SqlLock;
use support::{mysql_url, postgres_url, sqlite_url};

/// Two clients of one database that do not share an in-process queue, and what keeps the
/// second one's connection path alive.
async fn two_processes(url: &str) -> (SqlLock, SqlLock, Option<distlock_core::fault::FaultProxy>) {
    let a = support::connect_or_explain(url).await;
    if let Some(path) = url.strip_prefix("sqlite://") {
        let (dir, file) = path.rsplit_once('/').unwrap();
        let b = support::connect_or_explain(&format!("sqlite://{dir}/./{file}")).await;
        return (a, b, None);
    }
    let (b, proxy) = support::through_proxy(url).await;
    (a, b, Some(proxy))
}

async fn releaser_does_not_barge_past_a_waiter_of_another_process(url: &str) {
    let (a, b, _proxy) = two_processes(url).await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    let name = format!("fair-{}", &distlock_core::backend::owner_token()[..8]);
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    for round in 0..5 {
        let held = a.acquire(&name, &wait).await.unwrap();
        let waiter = tokio::spawn({
            let (b, name, wait) = (Arc::clone(&b), name.clone(), wait.clone());
            async move { b.acquire(&name, &wait).await }
        });
        // The waiter has tried once and queued.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let token = held.fencing_token();
        held.release().await.unwrap();
        // Straight back: a try, and an acquire that may wait a little.
        let again = a.try_acquire(&name, &AcquireOptions::new()).await.unwrap();
        assert!(
            again.is_none(),
            "{url} round {round}: the releasing client took the lock back past a waiting client"
        );
        let g = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap_or_else(|_| panic!("{url} round {round}: the waiter was not granted"))
            .unwrap()
            .unwrap();
        assert!(g.fencing_token() > token);
        // The releaser, now queued behind nobody, is served after the waiter's release.
        let next = tokio::spawn({
            let (a, name, wait) = (Arc::clone(&a), name.clone(), wait.clone());
            async move { a.acquire(&name, &wait).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        g.release().await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(5), next)
            .await
            .unwrap_or_else(|_| panic!("{url} round {round}: the next waiter was not granted"))
            .unwrap()
            .unwrap();
        n.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_row_is_fifo_across_processes() {
    releaser_does_not_barge_past_a_waiter_of_another_process(&postgres_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_row_is_fifo_across_processes() {
    releaser_does_not_barge_past_a_waiter_of_another_process(&mysql_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_row_is_fifo_across_processes() {
    releaser_does_not_barge_past_a_waiter_of_another_process(&sqlite_url()).await;
}

/// SQLite: a waiter of another process gets its place in the queue while the holder releases
/// and takes the lock again in a tight loop (nothing held in between): the holder re-takes
/// only a few times before the waiter is served. Every write of SQLite waits for the file;
/// in SQLite's own busy handler the waiter's first writes slept 1, 2, 5 … 100 ms at a time
/// while the holder kept releasing and re-taking — dozens of re-takes per round, 80% of all
/// acquisitions with two processes in the benchmark (`crate::sqlite_busy` in distlock-sql).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_a_tight_loop_lets_a_waiter_of_another_process_in() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    const ROUNDS: usize = 15;
    let (a, b, _) = two_processes(&sqlite_url()).await;
    let (a, b) = (Arc::new(a), Arc::new(b));
    let name = format!("tight-{}", &distlock_core::backend::owner_token()[..8]);
    let wait = AcquireOptions::new().wait(Duration::from_secs(10));
    let (cycles, stop) = (
        Arc::new(AtomicU64::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let looper = tokio::spawn({
        let (a, name, wait) = (Arc::clone(&a), name.clone(), wait.clone());
        let (cycles, stop) = (Arc::clone(&cycles), Arc::clone(&stop));
        async move {
            // Bounded: the test's rounds end well within this.
            let end = tokio::time::Instant::now() + Duration::from_secs(60);
            while !stop.load(Ordering::SeqCst) && tokio::time::Instant::now() < end {
                let g = a.acquire(&name, &wait).await.unwrap();
                cycles.fetch_add(1, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }
    });
    let mut retakes = Vec::new();
    for round in 0..ROUNDS {
        // The loop runs before each round's waiter arrives.
        let from = cycles.load(Ordering::SeqCst);
        let until = tokio::time::Instant::now() + Duration::from_secs(10);
        while cycles.load(Ordering::SeqCst) < from + 20 {
            assert!(
                !looper.is_finished() && tokio::time::Instant::now() < until,
                "round {round}: the looping client stopped looping"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let asked = cycles.load(Ordering::SeqCst);
        let g = tokio::time::timeout(Duration::from_secs(15), b.acquire(&name, &wait))
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter was not served"))
            .unwrap();
        retakes.push(cycles.load(Ordering::SeqCst) - asked);
        g.release().await.unwrap();
    }
    stop.store(true, Ordering::SeqCst);
    looper.await.unwrap();
    retakes.sort_unstable();
    // Four rounds in five (in SQLite's own handler: 8 to 90 re-takes there; these steps: 1–2).
    let most = retakes[ROUNDS * 4 / 5 - 1];
    eprintln!("re-takes by the looping client per waiter, sorted: {retakes:?}");
    assert!(
        most <= 5,
        "the looping client took the lock back up to {most} times in four rounds of five \
         ({retakes:?}) before a waiter of another process was served"
    );
}

/// A waiter that vanished without leaving the queue (its process frozen or killed) holds the
/// others back only until its place lapses (3 s after its last refresh): at first a try yields
/// to it, then an acquire gets the lock once the place has lapsed.
async fn a_lapsed_place_stops_holding_others_back(url: &str) {
    let lock = support::connect_or_explain(url).await;
    let name = format!("lapse-{}", &distlock_core::backend::owner_token()[..8]);
    let t = lock.config().table.clone();
    let (now, p) = if url.starts_with("postgres") {
        (
            "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
            ["$1", "$2"],
        )
    } else if url.starts_with("mysql") {
        ("CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)", ["?", "?"])
    } else {
        (
            "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
            ["?1", "?2"],
        )
    };
    let plant = format!(
        "INSERT INTO {t}_waitq (name, member, expires_at) VALUES ({}, {}, {now} + 3000)",
        p[0], p[1]
    );
    sqlx::query(sqlx::AssertSqlSafe(plant))
        .bind(&name)
        .bind("a-waiter-that-vanished")
        .execute(lock.pool())
        .await
        .unwrap();
    let planted = tokio::time::Instant::now();
    assert!(
        lock.try_acquire(&name, &AcquireOptions::new())
            .await
            .unwrap()
            .is_none(),
        "{url}: a try went ahead of a live place"
    );
    let g = lock
        .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(10)))
        .await
        .unwrap_or_else(|e| panic!("{url}: the lapsed place still held the lock back: {e}"));
    let waited = planted.elapsed();
    assert!(
        waited >= Duration::from_millis(2500) && waited < Duration::from_secs(6),
        "{url}: granted {waited:?} after the place was planted (it lapses after 3 s)"
    );
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lapsed_places_stop_holding_others_back() {
    for url in [postgres_url(), mysql_url(), sqlite_url()] {
        a_lapsed_place_stops_holding_others_back(&url).await;
    }
}

/// PostgreSQL: a release wakes only the head of the queue across processes. The last of a
/// line of waiting "processes" (each a client through its own proxy, which counts what the
/// client sends) stays silent while the lock is handed along the line ahead of it — before,
/// every release made every waiting process try the lock and read the queue, ~2 statements
/// per waiter per handoff of which only the head's could win. It is still served in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_release_wakes_only_the_head_of_the_queue() {
    const AHEAD: usize = 6;
    let url = postgres_url();
    let name = format!("head-{}", &distlock_core::backend::owner_token()[..8]);
    let wait = AcquireOptions::new()
        .wait(Duration::from_secs(20))
        .ttl(Duration::from_secs(30));
    let first = support::connect_or_explain(&url).await;
    let held = first.acquire(&name, &wait).await.unwrap();
    // AHEAD processes, then the last one, queued in this order (each has tried and joined
    // before the next starts). Each of the line holds until told, then releases.
    let mut line = Vec::new();
    for _ in 0..=AHEAD {
        let (lock, proxy) = support::through_proxy(&url).await;
        let (granted_tx, granted_rx) = tokio::sync::oneshot::channel::<u64>();
        let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn({
            let (name, wait) = (name.clone(), wait.clone());
            async move {
                let g = lock.acquire(&name, &wait).await.unwrap();
                let _ = granted_tx.send(g.fencing_token());
                let _ = go_rx.await;
                g.release().await.unwrap();
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        line.push((proxy, granted_rx, go_tx, task));
    }
    let (last, rest) = line.split_last_mut().unwrap();
    let before = last.0.chunks_sent();
    let handing = tokio::time::Instant::now();
    held.release().await.unwrap();
    // The lock goes along the line ahead of the last process, one release at a time.
    let mut tokens = Vec::new();
    for (_, granted, go, _) in rest.iter_mut() {
        let token = tokio::time::timeout(Duration::from_secs(5), granted)
            .await
            .expect("a waiter ahead was not granted in turn")
            .unwrap();
        tokens.push(token);
        let _ = std::mem::replace(go, tokio::sync::oneshot::channel().0).send(());
    }
    let sent = last.0.chunks_sent() - before;
    // Its own looks (about once a second: a place refresh and a queue read) may fall into the
    // handoffs, more of them on a loaded machine; a herd is at least 2 per handoff.
    let allowed = 2 + 2 * handing.elapsed().as_secs();
    assert!(
        sent <= allowed,
        "the last waiter sent {sent} requests (at most {allowed} expected) while the lock went \
         through the {AHEAD} processes ahead of it (only the queue's head should be woken)"
    );
    let token = tokio::time::timeout(Duration::from_secs(5), &mut last.1)
        .await
        .expect("the last waiter was not granted in turn")
        .unwrap();
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]) && tokens.last() < Some(&token),
        "tokens in grant order: {tokens:?} then {token}"
    );
    let _ = std::mem::replace(&mut last.2, tokio::sync::oneshot::channel().0).send(());
    for (_, _, _, task) in line {
        task.await.unwrap();
    }
}

/// PostgreSQL: the release is the queue head's grant — the release statement hands the row to
/// the head and its notification carries the token, so the head holds the lock without a
/// request of its own (before: one, the take; before that, two, the take and a leave).
/// Counted by the proxy in front of the waiter's client from the release until the waiter has
/// gone quiet, the fewest over eight handoffs; each grant's token is above the holder's. The waiter's client has one connection, so
/// its statements are prepared after the first round and the pool never hands it one idle long
/// enough to be pinged first (a pool that rotated its connections did, on a loaded machine);
/// each release waits until the waiter's place is in the queue and the waiter has gone quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_release_is_the_heads_grant() {
    let url = postgres_url();
    let name = format!("one-trip-{}", &distlock_core::backend::owner_token()[..8]);
    let wait = AcquireOptions::new()
        .wait(Duration::from_secs(10))
        .ttl(Duration::from_secs(30));
    let holder = support::connect_or_explain(&url).await;
    let (proxied, proxy) = support::proxied_url(&url).await;
    let sep = if proxied.contains('?') { '&' } else { '?' };
    let waiter =
        Arc::new(support::connect_or_explain(&format!("{proxied}{sep}max_connections=1")).await);
    let mut fewest = u64::MAX;
    for round in 0..8 {
        let held = holder.acquire(&name, &wait).await.unwrap();
        let task = tokio::spawn({
            let (waiter, name, wait) = (Arc::clone(&waiter), name.clone(), wait.clone());
            async move { waiter.acquire(&name, &wait).await }
        });
        // The waiter has tried and queued (its look follows the join at once).
        let queued = support::within(Duration::from_secs(5), || async {
            !support::queued(&holder, &name).await.is_empty()
        })
        .await;
        assert!(queued, "round {round}: the waiter did not queue within 5 s");
        // ... and looked: it sends nothing more until the release (its refresh and safety
        // look are a second away; on a loaded machine its look can come well after the join).
        let before = support::quiet(&proxy).await;
        let held_token = held.fencing_token();
        held.release().await.unwrap();
        let g = tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .unwrap_or_else(|_| panic!("round {round}: the waiter was not granted"))
            .unwrap()
            .unwrap();
        fewest = fewest.min(support::quiet(&proxy).await - before);
        assert!(
            g.fencing_token() > held_token,
            "round {round}: granted token {} after the holder's {held_token}",
            g.fencing_token()
        );
        g.release().await.unwrap();
    }
    // sqlx pings a connection as it goes back to the pool: a statement is two requests on
    // its one connection (before this, the take and its ping).
    assert_eq!(
        fewest, 0,
        "the waiter sent {fewest} requests from the release to its grant (fewest of 8 \
         handoffs; none expected: the release's notification is the grant)"
    );
}

//! The conformance cases. Each is a public async function over a [`Harness`] that panics with a
//! message naming the broken promise.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{unique_name, Harness};
use crate::backend::handoff;
use crate::{AcquireOptions, DistributedLock, LockError, LockGuard};

pub(super) fn opts() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(30))
}

pub(super) async fn must_acquire(
    lock: &dyn DistributedLock,
    name: &str,
    o: &AcquireOptions,
) -> LockGuard {
    match lock.acquire(name, o).await {
        Ok(g) => g,
        Err(e) => panic!("{}: acquire {name:?} failed: {e}", lock.backend_name()),
    }
}

pub(super) async fn must_try(lock: &dyn DistributedLock, name: &str) -> Option<LockGuard> {
    match lock.try_acquire(name, &opts()).await {
        Ok(g) => g,
        Err(e) => panic!("{}: try_acquire {name:?} failed: {e}", lock.backend_name()),
    }
}

/// Tries `name` every 20 ms until it is taken or `within` has passed.
async fn try_within(lock: &dyn DistributedLock, name: &str, within: Duration) -> Option<LockGuard> {
    let t = Instant::now();
    loop {
        if let Some(g) = must_try(lock, name).await {
            return Some(g);
        }
        if t.elapsed() >= within {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `try_acquire` on a held lock returns `None` at once, from another client and from the
/// holder's own client (locks are not reentrant), and succeeds once released.
pub async fn try_acquire_on_held_lock(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("try");
    let g = must_acquire(&*c1, &name, &opts()).await;
    let t = Instant::now();
    assert!(
        must_try(&*c2, &name).await.is_none(),
        "second client got a held lock"
    );
    assert!(
        must_try(&*c1, &name).await.is_none(),
        "same client re-entered a held lock"
    );
    assert!(
        t.elapsed() < Duration::from_secs(3),
        "try_acquire waited {:?}",
        t.elapsed()
    );
    g.release().await.unwrap();
    let g2 = must_try(&*c2, &name)
        .await
        .expect("free lock not acquired by try_acquire");
    g2.release().await.unwrap();
}

/// A blocked `acquire` is woken by the holder's release, promptly (well under a second), and
/// counts as a handoff ([`crate::backend::handoff`]) where the free acquisition before it did
/// not — except in the modes whose database waits inside one lock statement and does not say
/// whether it waited (`FOR UPDATE`, MySQL/MariaDB `GET_LOCK`).
pub async fn acquire_woken_by_release(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("wake");
    let (g, waited) = handoff::scope(must_acquire(&*c1, &name, &opts())).await;
    assert!(!waited, "a free lock's acquisition counted as a handoff");
    let first = g.fencing_token();
    let label = c1.backend_name().to_owned();
    let waiter = tokio::spawn({
        let name = name.clone();
        handoff::scope(async move {
            let g = c2.acquire(&name, &opts()).await;
            (Instant::now(), g)
        })
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "waiter acquired a held lock");
    let released = Instant::now();
    g.release().await.unwrap();
    let ((woke, g2), waited) = waiter.await.unwrap();
    let g2 = g2.unwrap();
    let silent = label.ends_with("for_update") || label.starts_with("mysql-advisory");
    assert!(
        waited || silent,
        "{label}: a waiter's grant was not counted as a handoff"
    );
    let delay = woke - released;
    assert!(
        delay < Duration::from_millis(1000),
        "waiter woke {delay:?} after release"
    );
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}

/// `acquire` with `wait` fails with `Timeout` never early and at most 1 s late.
pub async fn wait_timeout_honoured(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("timeout");
    let g = must_acquire(&*c1, &name, &opts()).await;
    let wait = Duration::from_millis(700);
    let t = Instant::now();
    let res = c2.acquire(&name, &AcquireOptions::new().wait(wait)).await;
    let took = t.elapsed();
    assert!(
        matches!(res, Err(LockError::Timeout { .. })),
        "expected Timeout, got {res:?}"
    );
    assert!(took >= wait, "timed out early: {took:?} < {wait:?}");
    assert!(
        took <= wait + Duration::from_secs(1),
        "timed out late: {took:?}"
    );
    let msg = res.unwrap_err().to_string();
    assert!(
        msg.contains(&name),
        "timeout message does not name the lock: {msg}"
    );
    g.release().await.unwrap();
}

/// ≥16 tasks over 2 independent clients never overlap: a non-atomic counter under the lock
/// ends exact, an overlap detector never fires, and tokens grow in acquisition order.
pub async fn mutual_exclusion_under_contention(h: &dyn Harness) {
    const TASKS: usize = 16;
    const ROUNDS: usize = 5;
    let clients = [h.client().await, h.client().await];
    let name = unique_name("mutex");
    let inside = Arc::new(AtomicBool::new(false));
    let counter = Arc::new(AtomicU64::new(0));
    let last_token = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let lock = Arc::clone(&clients[i % 2]);
        let (name, inside, counter, last_token) = (
            name.clone(),
            inside.clone(),
            counter.clone(),
            last_token.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..ROUNDS {
                let o = AcquireOptions::new().wait(Duration::from_secs(120));
                let g = lock.acquire(&name, &o).await.unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let prev = last_token.swap(g.fencing_token(), Ordering::SeqCst);
                assert!(
                    g.fencing_token() > prev,
                    "token {} after {prev}",
                    g.fencing_token()
                );
                let v = counter.load(Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                counter.store(v + 1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        (TASKS * ROUNDS) as u64,
        "lost updates"
    );
}

/// Tokens strictly increase across holders and clients.
pub async fn fencing_tokens_strictly_increase(h: &dyn Harness) {
    let clients = [h.client().await, h.client().await, h.client().await];
    let name = unique_name("fence");
    let mut last = 0u64;
    for i in 0..12 {
        let g = must_acquire(&*clients[i % 3], &name, &opts()).await;
        assert!(
            g.fencing_token() > last,
            "token {} not > {last}",
            g.fencing_token()
        );
        last = g.fencing_token();
        if i % 4 == 3 {
            drop(g);
            tokio::time::sleep(Duration::from_millis(100)).await;
        } else {
            g.release().await.unwrap();
        }
    }
}

/// A guard whose lock expired (or was lost) and was taken over gets `NotHeld` on release, and
/// that release does not free the new holder.
pub async fn stale_release_is_not_held(h: &dyn Harness) {
    let (c1, c2, c3) = (h.client().await, h.client().await, h.client().await);
    let name = unique_name("stale");
    let stale = if c1.capabilities().lease {
        let o = AcquireOptions::new()
            .ttl(Duration::from_secs(1))
            .renew(false);
        let g = must_acquire(&*c1, &name, &o).await;
        let lost = tokio::time::timeout(Duration::from_secs(3), g.lost()).await;
        assert!(
            lost.is_ok(),
            "unrenewed 1s lease not reported lost after 3s"
        );
        g
    } else {
        let g = must_acquire(&*c1, &name, &opts()).await;
        h.remove_underneath(&name).await;
        let lost = tokio::time::timeout(Duration::from_secs(20), g.lost()).await;
        assert!(lost.is_ok(), "lock removed underneath not reported lost");
        g
    };
    assert!(stale.is_lost());
    let g2 = must_acquire(&*c2, &name, &opts()).await;
    assert!(g2.fencing_token() > stale.fencing_token());
    let res = stale.release().await;
    assert!(
        matches!(res, Err(LockError::NotHeld { .. })),
        "stale release gave {res:?}"
    );
    assert!(
        must_try(&*c3, &name).await.is_none(),
        "stale release freed the new holder"
    );
    g2.release().await.unwrap();
}

/// A holder that crashes (connection cut, nothing released) frees the lock within its
/// lease/session bound.
pub async fn holder_crash_frees_lock(h: &dyn Harness) {
    let crashable = h.crashable_client().await;
    let c2 = h.client().await;
    let name = unique_name("crash");
    let ttl = Duration::from_secs(2);
    let g = must_acquire(&*crashable.lock, &name, &opts().ttl(ttl)).await;
    let first = g.fencing_token();
    (crashable.crash)().await;
    let crashed = Instant::now();
    g.abandon();
    let bound = h.crash_release_bound(ttl);
    let g2 = must_acquire(
        &*c2,
        &name,
        &AcquireOptions::new().wait(bound + Duration::from_secs(5)),
    )
    .await;
    let took = crashed.elapsed();
    assert!(
        took <= bound,
        "crashed holder kept the lock {took:?} (bound {bound:?})"
    );
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
}

/// Dropping a guard releases the lock in the background, promptly.
pub async fn guard_drop_releases(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("drop");
    let g = must_acquire(&*c1, &name, &opts()).await;
    drop(g);
    let t = Instant::now();
    let g2 = must_acquire(
        &*c2,
        &name,
        &AcquireOptions::new().wait(Duration::from_secs(5)),
    )
    .await;
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "drop released only after {:?}",
        t.elapsed()
    );
    g2.release().await.unwrap();
}

pub(super) async fn wait_for_no_traces(h: &dyn Harness, name: &str, within: Duration) {
    if let Err(e) = traces_gone(h, name, within).await {
        panic!("{e}");
    }
}

/// Waits until the store holds no entry for `name`; `Err` naming what was left after `within`.
pub(super) async fn traces_gone(
    h: &dyn Harness,
    name: &str,
    within: Duration,
) -> Result<(), String> {
    traces_at_most(h, name, 0, within).await
}

/// Waits until the store holds at most `most` entries for `name`; `Err` naming what was left
/// after `within`.
pub(super) async fn traces_at_most(
    h: &dyn Harness,
    name: &str,
    most: usize,
    within: Duration,
) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let n = h.traces(name).await;
        if n <= most {
            return Ok(());
        }
        if t.elapsed() >= within {
            return Err(format!("{n} traces of {name:?} left after {within:?}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A cancelled `acquire` (its future dropped), whether waiting on a holder or in the middle of
/// taking a free lock, leaves nothing behind.
pub async fn cancelled_acquire_leaves_no_trace(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("cancel");
    let g = must_acquire(&*c1, &name, &opts()).await;
    let waiter = tokio::spawn({
        let (c2, name) = (Arc::clone(&c2), name.clone());
        async move { c2.acquire(&name, &AcquireOptions::new()).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    g.release().await.unwrap();
    wait_for_no_traces(h, &name, Duration::from_secs(3)).await;
    // A statement the cancelled waiter had on its way (joining the queue, say) may still land
    // after the look above, and its own task then takes it back: free again within a second,
    // well before a leaked place would lapse (SQL row mode's waiter places live 3 s).
    let g = try_within(&*c1, &name, Duration::from_secs(1))
        .await
        .expect("lock blocked by a cancelled waiter");
    g.release().await.unwrap();

    // Cancel uncontended acquisitions at varied points of their round trips.
    for i in 0..20u64 {
        let task = tokio::spawn({
            let (c2, name) = (Arc::clone(&c2), name.clone());
            async move {
                if let Ok(g) = c2.acquire(&name, &opts()).await {
                    // Completed before the abort: hold until cancelled (then drop releases).
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    drop(g);
                }
            }
        });
        tokio::time::sleep(Duration::from_micros(i * 300)).await;
        task.abort();
        let _ = task.await;
    }
    wait_for_no_traces(h, &name, Duration::from_secs(3)).await;
    let g = must_acquire(
        &*c1,
        &name,
        &AcquireOptions::new().wait(Duration::from_secs(3)),
    )
    .await;
    g.release().await.unwrap();
}

/// `lost()` resolves when the lock is removed underneath the holder, and the lock can be
/// taken by someone else.
pub async fn lost_fires_when_removed_underneath(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("lost");
    let ttl = Duration::from_secs(3);
    let g = must_acquire(&*c1, &name, &opts().ttl(ttl)).await;
    assert!(!g.is_lost());
    let cancelled = g.cancellation_token();
    assert!(!cancelled.is_cancelled());
    h.remove_underneath(&name).await;
    let t = Instant::now();
    let lost = tokio::time::timeout(ttl + Duration::from_secs(3), g.lost()).await;
    assert!(
        matches!(lost, Ok(LockError::Lost { .. })),
        "lost() did not fire within {:?} of removal",
        t.elapsed()
    );
    assert!(g.is_lost());
    assert!(
        cancelled.is_cancelled(),
        "the cancellation token outlived the loss"
    );
    assert!(g.cancellation_token().is_cancelled());
    let g2 = must_acquire(&*c2, &name, &opts()).await;
    assert!(g2.fencing_token() > g.fencing_token());
    assert!(
        g.release().await.is_err(),
        "release of a lost lock reported success"
    );
    g2.release().await.unwrap();
}

/// Background renewal keeps a 1 s lease held for 3 s; `extend` works while held.
pub async fn renewal_keeps_short_lease(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("renew");
    let g = must_acquire(&*c1, &name, &opts().ttl(Duration::from_secs(1))).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!g.is_lost(), "renewed lease lost: {:?}", g);
    assert!(
        must_try(&*c2, &name).await.is_none(),
        "renewed lease was taken over"
    );
    g.extend(Duration::from_secs(2)).await.unwrap();
    assert_eq!(g.ttl(), Duration::from_secs(2));
    g.release().await.unwrap();
}

/// Hostile names either work as distinct locks or fail with `InvalidName`; illegal names always
/// fail with `InvalidName` and a bounded message.
pub async fn hostile_names(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let prefix = unique_name("hostile");
    let legal = [
        "'; DROP TABLE distlock_locks; --",
        "a'b",
        "a\"b",
        "a`b",
        "%",
        "_",
        "a b",
        "\\",
        "\\0",
        "ключ",
        "🔒",
        "a/b",
        "-- x",
        "${x}",
        "redis.call('DEL', KEYS[1])",
        "{slot}",
        "*",
        "\n\t\r",
        "a.b",
    ];
    let mut held = Vec::new();
    for suffix in legal {
        let name = format!("{prefix}{suffix}");
        match c1.try_acquire(&name, &opts()).await {
            Ok(Some(g)) => held.push((name, g)),
            Ok(None) => panic!("legal name {name:?} collided with another name"),
            Err(LockError::InvalidName { .. }) => {}
            Err(e) => panic!("legal name {name:?}: unexpected error {e}"),
        }
    }
    let long = format!("{prefix}{}", "x".repeat(256 - prefix.len()));
    match c1.try_acquire(&long, &opts()).await {
        Ok(Some(g)) => held.push((long, g)),
        Ok(None) => panic!("256-byte name collided"),
        Err(LockError::InvalidName { .. }) => {}
        Err(e) => panic!("256-byte name: unexpected error {e}"),
    }
    for (name, _) in &held {
        assert!(
            must_try(&*c2, name).await.is_none(),
            "{name:?} not exclusive"
        );
    }
    let accepted = held.len();
    let mut released = Vec::new();
    for (name, g) in held {
        g.release().await.unwrap();
        released.push(name);
    }
    // No key, row or node outlives the release of an odd name.
    for name in &released {
        wait_for_no_traces(h, name, Duration::from_secs(5)).await;
    }
    assert!(accepted >= 10, "only {accepted} ordinary names accepted");
    let too_long = format!("{prefix}{}", "x".repeat(257 - prefix.len()));
    for bad in [
        String::new(),
        "a\0b".to_owned(),
        too_long,
        "y".repeat(10_000),
    ] {
        let t = Instant::now();
        let res = c1.acquire(&bad, &opts()).await;
        match res {
            Err(e @ LockError::InvalidName { .. }) => {
                assert!(
                    e.to_string().len() < 400,
                    "message too long: {} bytes",
                    e.to_string().len()
                );
            }
            other => panic!("illegal name of {} bytes gave {other:?}", bad.len()),
        }
        assert!(t.elapsed() < Duration::from_secs(2));
    }
}

/// A store that does not answer gives `Unavailable` promptly (no hang, no panic).
pub async fn unreachable_store_errors_promptly(h: &dyn Harness) {
    let t = Instant::now();
    let res = match h.unreachable().await {
        Err(e) => Err(e),
        Ok(lock) => lock
            .acquire(
                &unique_name("unreach"),
                &AcquireOptions::new().wait(Duration::from_secs(3)),
            )
            .await
            .map(|_| ()),
    };
    let took = t.elapsed();
    assert!(
        matches!(res, Err(LockError::Unavailable { .. })),
        "expected Unavailable, got {res:?}"
    );
    assert!(res.unwrap_err().is_retryable());
    assert!(
        took < Duration::from_secs(15),
        "unreachable store took {took:?} to fail"
    );
}

/// Holding one name never blocks another.
pub async fn independent_names_do_not_block(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let (a, b) = (unique_name("indep-a"), unique_name("indep-b"));
    let ga = must_acquire(&*c1, &a, &opts()).await;
    let t = Instant::now();
    let gb = must_acquire(
        &*c2,
        &b,
        &AcquireOptions::new().wait(Duration::from_secs(2)),
    )
    .await;
    assert!(t.elapsed() < Duration::from_secs(1));
    let gb2 = must_try(&*c1, &format!("{b}-2"))
        .await
        .expect("third name blocked");
    ga.release().await.unwrap();
    gb.release().await.unwrap();
    gb2.release().await.unwrap();
}

/// Waiters of one process are served in arrival order, each woken promptly by the previous
/// holder's release, and a holder that releases and at once asks again queues behind them
/// (no barging), even from another client object.
pub async fn local_waiters_served_in_arrival_order(h: &dyn Harness) {
    const WAITERS: usize = 5;
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("order");
    let g = must_acquire(&*c1, &name, &opts()).await;
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..WAITERS {
        let (c2, name, served) = (Arc::clone(&c2), name.clone(), Arc::clone(&served));
        tasks.push(tokio::spawn(async move {
            let g = must_acquire(&*c2, &name, &opts()).await;
            served.lock().unwrap().push((i, Instant::now()));
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await.unwrap();
        }));
        // Each waiter is queued before the next one arrives.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let released = Instant::now();
    g.release().await.unwrap();
    let again = must_acquire(&*c1, &name, &opts()).await;
    let regained = Instant::now();
    for t in tasks {
        t.await.unwrap();
    }
    let served = served.lock().unwrap().clone();
    let order: Vec<usize> = served.iter().map(|(i, _)| *i).collect();
    assert_eq!(
        order,
        (0..WAITERS).collect::<Vec<_>>(),
        "{}: waiters served out of arrival order",
        c1.backend_name()
    );
    assert!(
        served.iter().all(|(_, at)| *at < regained),
        "{}: the releasing holder asked again and jumped the queue",
        c1.backend_name()
    );
    let took = regained - released;
    assert!(
        took < Duration::from_secs(3),
        "{}: {WAITERS} handoffs of 20 ms holds took {took:?}",
        c1.backend_name()
    );
    again.release().await.unwrap();
}

/// At most one [`thousand_locks_held_at_once`] at a time in a test process: the SQL for_update
/// and advisory modes keep a connection per held lock, and two of these cases at once on one
/// server (PostgreSQL for_update beside PostgreSQL advisory) need more connections than the
/// private server allows (1,500); a run of the seven at once saw the pool time out.
static THOUSAND_AT_ONCE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// One client holds 1,000 locks at once; another client sees them held; all release.
pub async fn thousand_locks_held_at_once(h: &dyn Harness) {
    let _one_at_a_time = THOUSAND_AT_ONCE.lock().await;
    let (c1, c2) = (h.client().await, h.client().await);
    let prefix = unique_name("many");
    let guards = Arc::new(Mutex::new(Vec::new()));
    let sem = Arc::new(tokio::sync::Semaphore::new(32));
    let mut tasks = Vec::new();
    for i in 0..1000 {
        let (c1, guards, sem) = (Arc::clone(&c1), guards.clone(), sem.clone());
        let name = format!("{prefix}-{i}");
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            let g = c1.acquire(&name, &opts()).await.unwrap();
            guards.lock().unwrap().push(g);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let guards: Vec<LockGuard> = std::mem::take(&mut *guards.lock().unwrap());
    assert_eq!(guards.len(), 1000);
    for i in (0..1000).step_by(97) {
        assert!(must_try(&*c2, &format!("{prefix}-{i}")).await.is_none());
    }
    let mut tasks = Vec::new();
    for g in guards {
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire().await.unwrap();
            g.release().await.unwrap();
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    for i in (0..1000).step_by(97) {
        let g = must_try(&*c2, &format!("{prefix}-{i}"))
            .await
            .expect("not released");
        g.release().await.unwrap();
    }
}

/// Names shaped like another name's auxiliary store entries (Redis counter and queue keys,
/// ZooKeeper contender nodes, nested paths) and case, space and accent variants are distinct
/// locks: holding any of them never blocks, clobbers or is clobbered by another, in either
/// order, and nothing is left behind.
pub async fn look_alike_names_are_distinct(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let base = unique_name("alike");
    let shapes: Vec<String> = vec![
        format!("{{{base}}}:fence"),
        format!("{{{base}}}:queue"),
        format!("{{{base}}}:qexp"),
        format!("{{{base}}}"),
        format!("{base}:fence"),
        format!("distlock:released:{base}"),
        format!("{base}/lock-0"),
        format!("{base}/lock-0000000001"),
        format!("{base}/block-"),
        format!("{base}/x-lock-"),
        format!("{base}/_c_00000000-0000-0000-0000-000000000000-lock-0000000001"),
        format!("{base}/a/lock-"),
        base.to_uppercase(),
        format!("{base} "),
        format!(" {base}"),
        format!("{base}\u{e9}"),
        format!("{base}e\u{301}"),
        format!("{base}:"),
        format!("{base}/"),
    ];
    let quick = AcquireOptions::new().wait(Duration::from_secs(3));
    let mut accepted = Vec::new();
    // The base name held first: every look-alike is free, and taking it leaves the base held.
    let g = must_acquire(&*c1, &base, &opts()).await;
    let mut held = Vec::new();
    for name in &shapes {
        let t = Instant::now();
        match c2.acquire(name, &quick).await {
            Ok(g2) => {
                accepted.push(name.clone());
                held.push(g2);
            }
            Err(LockError::InvalidName { .. }) => {}
            Err(e) => panic!(
                "{}: {name:?} while {base:?} is held: {e} after {:?}",
                c1.backend_name(),
                t.elapsed()
            ),
        }
    }
    assert!(
        must_try(&*c2, &base).await.is_none(),
        "{}: taking look-alike names freed {base:?}",
        c1.backend_name()
    );
    assert!(
        !g.is_lost(),
        "{}: look-alikes made {base:?} lost",
        c1.backend_name()
    );
    for g2 in held.drain(..) {
        g2.release().await.unwrap();
    }
    assert!(
        must_try(&*c2, &base).await.is_none(),
        "{}: releasing look-alike names freed {base:?}",
        c1.backend_name()
    );
    let first = g.fencing_token();
    g.release().await.unwrap();

    // The look-alikes held first: the base name is free, twice in a row, with rising tokens.
    for name in &accepted {
        held.push(must_acquire(&*c2, name, &quick).await);
    }
    let mut last = first;
    for round in 0..2 {
        let t = Instant::now();
        let g = match c1.acquire(&base, &quick).await {
            Ok(g) => g,
            Err(e) => panic!(
                "{}: {base:?} (round {round}) while its look-alikes are held: {e} after {:?}",
                c1.backend_name(),
                t.elapsed()
            ),
        };
        assert!(
            g.fencing_token() > last,
            "{}: token went back",
            c1.backend_name()
        );
        last = g.fencing_token();
        g.release().await.unwrap();
    }
    for name in &accepted {
        assert!(
            must_try(&*c1, name).await.is_none(),
            "{}: {name:?} no longer held after {base:?} was taken",
            c1.backend_name()
        );
    }
    for g2 in held {
        g2.release().await.unwrap();
    }
    assert!(
        accepted.len() >= 10,
        "{}: only {} look-alike names accepted: {accepted:?}",
        c1.backend_name(),
        accepted.len()
    );
    wait_for_no_traces(h, &base, Duration::from_secs(5)).await;
    for name in &accepted {
        wait_for_no_traces(h, name, Duration::from_secs(5)).await;
    }
}

/// A zero wait means "try once": `acquire` and `try_acquire` with `wait(0)` on a name never
/// used before get the lock, whether or not the client holds another name; on a held name
/// `acquire` with a zero wait fails with `Timeout` at once.
pub async fn zero_wait_on_fresh_name(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let zero = AcquireOptions::new().wait(Duration::ZERO);
    let other = unique_name("zero-other");
    let mut other_guard = None;
    for with_other in [false, true] {
        if with_other {
            other_guard = Some(must_acquire(&*c1, &other, &opts()).await);
        }
        let fresh = unique_name("zero-try");
        let g = match c1.try_acquire(&fresh, &zero).await {
            Ok(Some(g)) => g,
            other => panic!(
                "{}: try_acquire with a zero wait on a fresh name (another held: {with_other}) gave {other:?}",
                c1.backend_name()
            ),
        };
        g.release().await.unwrap();
        let fresh = unique_name("zero-acq");
        let t = Instant::now();
        let g = match c1.acquire(&fresh, &zero).await {
            Ok(g) => g,
            Err(e) => panic!(
                "{}: acquire with a zero wait on a fresh name (another held: {with_other}): {e}",
                c1.backend_name()
            ),
        };
        assert!(t.elapsed() < Duration::from_secs(2));
        // Held: a zero wait from another client is a prompt Timeout.
        let t = Instant::now();
        match c2.acquire(&fresh, &zero).await {
            Err(LockError::Timeout { .. }) => {}
            other => panic!(
                "{}: zero wait on a held name gave {other:?}",
                c1.backend_name()
            ),
        }
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "zero wait took {:?}",
            t.elapsed()
        );
        g.release().await.unwrap();
        wait_for_no_traces(h, &fresh, Duration::from_secs(3)).await;
    }
    if let Some(g) = other_guard {
        g.release().await.unwrap();
    }
}

/// `extend` to a shorter lease reschedules renewal: the lock stays held for several of the
/// new, shorter leases, and no other client gets it meanwhile.
pub async fn extend_shorter_keeps_lock(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("shorter");
    let g = must_acquire(&*c1, &name, &opts().ttl(Duration::from_secs(9))).await;
    // Let the renewal task settle on the 9 s lease's schedule first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.extend(Duration::from_secs(1)).await.unwrap();
    assert_eq!(g.ttl(), Duration::from_secs(1));
    let until = Instant::now() + Duration::from_millis(3500);
    while Instant::now() < until {
        assert!(
            !g.is_lost(),
            "{}: lost after extend to a shorter lease: {g:?}",
            c1.backend_name()
        );
        assert!(
            must_try(&*c2, &name).await.is_none(),
            "{}: another client took the lock after extend to a shorter lease",
            c1.backend_name()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    g.release().await.unwrap();
}

//! The conformance cases. Each is a public async function over a [`Harness`] that panics with a
//! message naming the broken promise.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::{unique_name, Harness};
use crate::{AcquireOptions, DistributedLock, LockError, LockGuard};

fn opts() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(30))
}

async fn must_acquire(lock: &dyn DistributedLock, name: &str, o: &AcquireOptions) -> LockGuard {
    match lock.acquire(name, o).await {
        Ok(g) => g,
        Err(e) => panic!("{}: acquire {name:?} failed: {e}", lock.backend_name()),
    }
}

async fn must_try(lock: &dyn DistributedLock, name: &str) -> Option<LockGuard> {
    match lock.try_acquire(name, &opts()).await {
        Ok(g) => g,
        Err(e) => panic!("{}: try_acquire {name:?} failed: {e}", lock.backend_name()),
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

/// A blocked `acquire` is woken by the holder's release, promptly (well under a second).
pub async fn acquire_woken_by_release(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("wake");
    let g = must_acquire(&*c1, &name, &opts()).await;
    let first = g.fencing_token();
    let waiter = tokio::spawn({
        let name = name.clone();
        async move {
            let g = c2.acquire(&name, &opts()).await;
            (Instant::now(), g)
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "waiter acquired a held lock");
    let released = Instant::now();
    g.release().await.unwrap();
    let (woke, g2) = waiter.await.unwrap();
    let g2 = g2.unwrap();
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

async fn wait_for_no_traces(h: &dyn Harness, name: &str, within: Duration) {
    let t = Instant::now();
    loop {
        let n = h.traces(name).await;
        if n == 0 {
            return;
        }
        assert!(
            t.elapsed() < within,
            "{n} traces of {name:?} left after {within:?}"
        );
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
    let g = must_try(&*c1, &name)
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
    h.remove_underneath(&name).await;
    let t = Instant::now();
    let lost = tokio::time::timeout(ttl + Duration::from_secs(3), g.lost()).await;
    assert!(
        matches!(lost, Ok(LockError::Lost { .. })),
        "lost() did not fire within {:?} of removal",
        t.elapsed()
    );
    assert!(g.is_lost());
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

/// One client holds 1,000 locks at once; another client sees them held; all release.
pub async fn thousand_locks_held_at_once(h: &dyn Harness) {
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

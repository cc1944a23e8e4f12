//! The semaphore and read-write lock cases: what [`DistributedSemaphore`] and
//! [`DistributedRwLock`] promise, run unchanged on every backend that offers them
//! ([`semaphore_suite!`](crate::semaphore_suite), [`rwlock_suite!`](crate::rwlock_suite)).
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use super::harness::Crash;
use super::unique_name;
use crate::{AcquireOptions, DistributedRwLock, DistributedSemaphore, LockError, MAX_PERMITS};

/// What a backend supplies to run the semaphore cases: independent clients of one store.
#[async_trait]
pub trait SemaphoreHarness: Send + Sync {
    /// A new client (its own connection or session).
    async fn semaphore(&self) -> Arc<dyn DistributedSemaphore>;

    /// For a backend without leases ([`crate::Capabilities::lease`] false): a client that the
    /// returned [`Crash`] cuts off from the store, and the longest a crashed holder may keep
    /// its permit. The default panics: such a backend must supply one.
    async fn crashable(&self) -> (Arc<dyn DistributedSemaphore>, Crash, Duration) {
        panic!("a semaphore backend without leases must supply SemaphoreHarness::crashable")
    }
}

/// What a backend supplies to run the read-write lock cases.
#[async_trait]
pub trait RwLockHarness: Send + Sync {
    /// A new client (its own connection or session).
    async fn rwlock(&self) -> Arc<dyn DistributedRwLock>;
}

fn opts() -> AcquireOptions {
    AcquireOptions::new().wait(Duration::from_secs(30))
}

/// At most `max_count` permits are out at once; a released one can be taken again; every
/// grant's token is greater than the one before; `inspect` counts the holders.
pub async fn semaphore_admits_at_most_max(h: &dyn SemaphoreHarness) {
    let (a, b, c) = (
        h.semaphore().await,
        h.semaphore().await,
        h.semaphore().await,
    );
    let name = unique_name("sem-max");
    let g1 = a.acquire(&name, 2, &opts()).await.expect("first permit");
    let g2 = b.acquire(&name, 2, &opts()).await.expect("second permit");
    assert!(g2.fencing_token() > g1.fencing_token());
    assert!(
        c.try_acquire(&name, 2, &opts()).await.unwrap().is_none(),
        "a third permit of 2 was granted"
    );
    if let Ok(info) = c.inspect(&name).await {
        assert_eq!((info.max_count, info.holders), (Some(2), 2), "{info:?}");
    }
    let t2 = g2.fencing_token();
    g1.release().await.unwrap();
    let g3 = c
        .try_acquire(&name, 2, &opts())
        .await
        .unwrap()
        .expect("a released permit was not free again");
    assert!(g3.fencing_token() > t2);
    g3.release().await.unwrap();
    g2.release().await.unwrap();
}

/// A name in use with one `max_count` refuses another with a typed error naming both, and
/// takes a new count once nobody holds or waits; 0 and counts above the limit are refused.
pub async fn semaphore_mismatched_count_is_an_error(h: &dyn SemaphoreHarness) {
    let (a, b) = (h.semaphore().await, h.semaphore().await);
    let name = unique_name("sem-count");
    let g = a.acquire(&name, 2, &opts()).await.unwrap();
    match b.try_acquire(&name, 3, &opts()).await {
        Err(LockError::InvalidConfig(m)) => {
            assert!(m.contains('2') && m.contains('3'), "{m}")
        }
        other => panic!("max_count 3 on a name in use with 2: {other:?}"),
    }
    g.release().await.unwrap();
    let g = b
        .acquire(&name, 3, &opts())
        .await
        .expect("a free name takes a new count");
    g.release().await.unwrap();
    for bad in [0, MAX_PERMITS + 1] {
        assert!(
            matches!(
                a.try_acquire(&name, bad, &opts()).await,
                Err(LockError::InvalidConfig(_))
            ),
            "max_count {bad} was accepted"
        );
    }
}

/// Waiters are woken by a release (not a poll interval) and served in arrival order.
pub async fn semaphore_waiters_served_in_arrival_order(h: &dyn SemaphoreHarness) {
    let holder = h.semaphore().await;
    let name = unique_name("sem-fifo");
    let g = holder.acquire(&name, 1, &opts()).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..3 {
        let (s, name, order) = (h.semaphore().await, name.clone(), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            let g = s.acquire(&name, 1, &opts()).await.unwrap();
            order.lock().unwrap().push((i, Instant::now()));
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await.unwrap();
        }));
        // Arrival order is what the store saw: leave it time to queue each one.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let released = Instant::now();
    g.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let ids: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(ids, vec![0, 1, 2], "permits not granted in arrival order");
    let first = order[0].1 - released;
    assert!(
        first < Duration::from_secs(1),
        "the first waiter got the permit {first:?} after the release"
    );
}

/// A permit whose lease runs out unrenewed frees its slot, and its guard reports it lost; on a
/// backend without leases, a crashed holder's permit is freed within the store's bound.
pub async fn semaphore_expired_permit_frees(h: &dyn SemaphoreHarness) {
    let (a, b) = (h.semaphore().await, h.semaphore().await);
    if !a.capabilities().lease {
        return semaphore_crashed_holder_frees(h).await;
    }
    let name = unique_name("sem-expiry");
    let short = AcquireOptions::new()
        .ttl(Duration::from_millis(500))
        .renew(false);
    let g = a.acquire(&name, 1, &short).await.unwrap();
    let g2 = b
        .acquire(
            &name,
            1,
            &AcquireOptions::new().wait(Duration::from_secs(5)),
        )
        .await
        .expect("an expired permit stayed taken");
    assert!(g.is_lost(), "the expired permit's guard was not lost");
    assert!(g2.fencing_token() > g.fencing_token());
    g2.release().await.unwrap();
    // Once every permit expired or was released, nothing of the name is left: a new count is
    // taken, even while the expired permit's guard still exists.
    let g3 = a.acquire(&name, 1, &short).await.unwrap();
    // The store may grant a longer lease than asked (etcd's minimum TTL): wait for the loss.
    tokio::time::timeout(Duration::from_secs(5), g3.lost())
        .await
        .expect("an unrenewed permit was not lost within 5 s");
    // The guard counts its lease from before the store did: the store frees it a little
    // later (etcd's leader revokes expired leases every 500 ms).
    let mut g4 = b.try_acquire(&name, 3, &opts()).await;
    for _ in 0..30 {
        if matches!(g4, Ok(Some(_))) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        g4 = b.try_acquire(&name, 3, &opts()).await;
    }
    let g4 = g4
        .expect("a name whose only permit expired kept its old count")
        .expect("an expired permit stayed taken");
    if let Ok(info) = b.inspect(&name).await {
        assert_eq!((info.max_count, info.holders), (Some(3), 1), "{info:?}");
    }
    g4.release().await.unwrap();
    drop((g, g3));
}

/// A holder cut off from the store (nothing released) frees its permit within the backend's
/// bound; the next grant's token is greater, and the name then takes a new count.
async fn semaphore_crashed_holder_frees(h: &dyn SemaphoreHarness) {
    let (crashable, crash, bound) = h.crashable().await;
    let b = h.semaphore().await;
    let name = unique_name("sem-crash");
    let g = crashable.acquire(&name, 1, &opts()).await.unwrap();
    let first = g.fencing_token();
    crash().await;
    let crashed = Instant::now();
    g.abandon();
    let g2 = b
        .acquire(
            &name,
            1,
            &AcquireOptions::new().wait(bound + Duration::from_secs(5)),
        )
        .await
        .expect("a crashed holder's permit stayed taken");
    let took = crashed.elapsed();
    assert!(
        took <= bound,
        "a crashed holder kept its permit {took:?} (bound {bound:?})"
    );
    assert!(g2.fencing_token() > first);
    g2.release().await.unwrap();
    let g3 = b
        .try_acquire(&name, 3, &opts())
        .await
        .expect("a name whose only holder crashed kept its old count")
        .expect("a crashed holder's permit stayed taken");
    g3.release().await.unwrap();
}

/// A waiter cancelled mid-wait leaves no queued place behind: the next caller is not held up.
pub async fn semaphore_cancelled_acquire_leaves_no_trace(h: &dyn SemaphoreHarness) {
    let (a, b) = (h.semaphore().await, h.semaphore().await);
    let name = unique_name("sem-cancel");
    let g = a.acquire(&name, 1, &opts()).await.unwrap();
    let waiter = tokio::spawn({
        let (b, name) = (Arc::clone(&b), name.clone());
        async move {
            b.acquire(&name, 1, &AcquireOptions::new())
                .await
                .map(|_| ())
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    waiter.abort();
    assert!(waiter.await.unwrap_err().is_cancelled());
    g.release().await.unwrap();
    let mut left = None;
    for _ in 0..30 {
        match b.inspect(&name).await {
            Ok(i) if i.waiters == 0 && i.holders == 0 => {
                left = None;
                break;
            }
            Ok(i) => left = Some(i),
            Err(_) => break,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(left.is_none(), "left behind: {left:?}");
    // Where inspect cannot see waiters (for_update), the same 3 s bound applies to the try: a
    // cancelled waiter's statement may stay queued in the database until it notices the closed
    // connection (PostgreSQL: within 250 ms).
    let mut g = None;
    for _ in 0..30 {
        g = b.try_acquire(&name, 1, &opts()).await.unwrap();
        if g.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    g.expect("a cancelled waiter blocked the permit for 3 s")
        .release()
        .await
        .unwrap();
}

/// Many tasks cycling through a semaphore of 3 never hold more than 3 at once, all get
/// permits, and no token is handed out twice.
pub async fn semaphore_contention_never_exceeds_max(h: &dyn SemaphoreHarness) {
    let name = unique_name("sem-stress");
    let holding = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let s = h.semaphore().await;
        let (name, holding, most, tokens) = (
            name.clone(),
            Arc::clone(&holding),
            Arc::clone(&most),
            Arc::clone(&tokens),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let g = s.acquire(&name, 3, &opts()).await.unwrap();
                let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokens.lock().unwrap().push(g.fencing_token());
                tokio::time::sleep(Duration::from_millis(5)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(most.load(Ordering::SeqCst) <= 3, "more than 3 permits out");
    let mut tokens = tokens.lock().unwrap().clone();
    let n = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!((n, tokens.len()), (64, 64), "a token was handed out twice");
}

/// Readers share; a writer excludes readers and other writers.
pub async fn rwlock_readers_share_writer_excludes(h: &dyn RwLockHarness) {
    let (a, b, c) = (h.rwlock().await, h.rwlock().await, h.rwlock().await);
    let name = unique_name("rw-share");
    let r1 = a.read(&name, &opts()).await.unwrap();
    let r2 = b
        .try_read(&name, &opts())
        .await
        .unwrap()
        .expect("a second reader was refused");
    assert!(c.try_write(&name, &opts()).await.unwrap().is_none());
    if let Ok(info) = c.inspect(&name).await {
        assert_eq!((info.readers, info.writer), (2, false), "{info:?}");
    }
    let r1_token = r1.fencing_token();
    r1.release().await.unwrap();
    assert!(c.try_write(&name, &opts()).await.unwrap().is_none());
    let readers_token = r2.fencing_token().max(r1_token);
    r2.release().await.unwrap();
    let w = c.write(&name, &opts()).await.unwrap();
    assert!(
        w.fencing_token() > readers_token,
        "a writer's token not above the readers'"
    );
    assert!(a.try_read(&name, &opts()).await.unwrap().is_none());
    assert!(b.try_write(&name, &opts()).await.unwrap().is_none());
    w.release().await.unwrap();
    let r = a
        .try_read(&name, &opts())
        .await
        .unwrap()
        .expect("the released writer still excluded readers");
    r.release().await.unwrap();
}

/// Once a writer waits, readers that arrive after it wait behind it, even while readers hold
/// the lock; the writer gets it when the earlier readers are done, with a token greater than
/// theirs.
pub async fn rwlock_waiting_writer_is_not_starved(h: &dyn RwLockHarness) {
    let (a, b, c) = (h.rwlock().await, h.rwlock().await, h.rwlock().await);
    let name = unique_name("rw-starve");
    let r1 = a.read(&name, &opts()).await.unwrap();
    let reader_token = r1.fencing_token();
    let writer = tokio::spawn({
        let (b, name) = (Arc::clone(&b), name.clone());
        async move { b.write(&name, &opts()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        c.try_read(&name, &opts()).await.unwrap().is_none(),
        "a new reader overtook a waiting writer"
    );
    let late = c
        .read(
            &name,
            &AcquireOptions::new().wait(Duration::from_millis(300)),
        )
        .await;
    assert!(
        matches!(late, Err(LockError::Timeout { .. })),
        "a reader arriving after a waiting writer: {late:?}"
    );
    let released = Instant::now();
    r1.release().await.unwrap();
    let w = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer was not granted after the readers left")
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(2),
        "the writer waited {:?} after the last reader left",
        released.elapsed()
    );
    assert!(w.fencing_token() > reader_token);
    w.release().await.unwrap();
}

/// A waiting writer that is cancelled stops holding back the readers queued behind it.
pub async fn rwlock_cancelled_writer_lets_readers_in(h: &dyn RwLockHarness) {
    let (a, b, c) = (h.rwlock().await, h.rwlock().await, h.rwlock().await);
    let name = unique_name("rw-cancel");
    let r1 = a.read(&name, &opts()).await.unwrap();
    let writer = tokio::spawn({
        let (b, name) = (Arc::clone(&b), name.clone());
        async move { b.write(&name, &AcquireOptions::new()).await.map(|_| ()) }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reader = tokio::spawn({
        let (c, name) = (Arc::clone(&c), name.clone());
        async move { c.read(&name, &opts()).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    writer.abort();
    assert!(writer.await.unwrap_err().is_cancelled());
    let r2 = tokio::time::timeout(Duration::from_secs(3), reader)
        .await
        .expect("a reader stayed behind a cancelled writer")
        .unwrap()
        .unwrap();
    r2.release().await.unwrap();
    r1.release().await.unwrap();
}

/// Readers and writers mixed at random never break the rule: a writer alone, or readers only.
pub async fn rwlock_contention_keeps_exclusion(h: &dyn RwLockHarness) {
    let name = unique_name("rw-stress");
    let state = Arc::new(Mutex::new((0usize, 0usize))); // (readers, writers)
    let broken = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..6usize {
        let l = h.rwlock().await;
        let (name, state, broken) = (name.clone(), Arc::clone(&state), Arc::clone(&broken));
        tasks.push(tokio::spawn(async move {
            for i in 0..8usize {
                let write = (t + i) % 3 == 0;
                let g = if write {
                    l.write(&name, &opts()).await.unwrap()
                } else {
                    l.read(&name, &opts()).await.unwrap()
                };
                {
                    let mut s = state.lock().unwrap();
                    if write {
                        s.1 += 1
                    } else {
                        s.0 += 1
                    }
                    if s.1 > 1 || (s.1 == 1 && s.0 > 0) {
                        broken.fetch_add(1, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                {
                    let mut s = state.lock().unwrap();
                    if write {
                        s.1 -= 1
                    } else {
                        s.0 -= 1
                    }
                }
                g.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        broken.load(Ordering::SeqCst),
        0,
        "a writer overlapped another holder"
    );
}

/// Instantiates every semaphore case as a `#[tokio::test]` for a [`SemaphoreHarness`]
/// expression.
#[macro_export]
macro_rules! semaphore_suite {
    ($harness:expr) => {
        $crate::conformance_suite!(@cases $harness;
            semaphore_admits_at_most_max,
            semaphore_mismatched_count_is_an_error,
            semaphore_waiters_served_in_arrival_order,
            semaphore_expired_permit_frees,
            semaphore_cancelled_acquire_leaves_no_trace,
            semaphore_contention_never_exceeds_max,
        );
    };
}

/// Instantiates every read-write lock case as a `#[tokio::test]` for an [`RwLockHarness`]
/// expression.
#[macro_export]
macro_rules! rwlock_suite {
    ($harness:expr) => {
        $crate::conformance_suite!(@cases $harness;
            rwlock_readers_share_writer_excludes,
            rwlock_waiting_writer_is_not_starved,
            rwlock_cancelled_writer_lets_readers_in,
            rwlock_contention_keeps_exclusion,
        );
    };
}

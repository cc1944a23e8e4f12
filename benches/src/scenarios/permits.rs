//! The semaphore and read-write lock scenarios: W workers (each its own client) on one name.
//!
//! * `semaphore`: every worker cycles through one of `max` permits. Reports grants/s and the
//!   wait for a permit, and checks the bound: the peak number of concurrent holders (in the
//!   row's `param`) must never exceed `max` — each excess counts as a violation.
//! * `rwlock`: every worker reads 9 times in 10 and writes once. Reports grants/s and the wait;
//!   a writer beside any other holder, or a writer's token not above every earlier grant's,
//!   counts as a violation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock_core::{Access, AcquireOptions, DistributedRwLock, DistributedSemaphore, LockGuard};
use tokio::time::Instant;

use super::{fresh_name, ResultRow};
use crate::stats::{jain, Latencies};

/// Who holds now, and what was granted so far.
#[derive(Default)]
struct Books {
    /// (readers or permits, writers) holding now.
    holding: Mutex<(u64, u64)>,
    peak: AtomicU64,
    violations: AtomicU64,
    /// The greatest token granted so far.
    last_token: AtomicU64,
}

impl Books {
    /// Books a grant of `access` (`None`: a permit) with `token`, checking it against `max`.
    fn enter(&self, access: Option<Access>, token: u64, max: u64) {
        let mut h = self.holding.lock().unwrap_or_else(|p| p.into_inner());
        match access {
            Some(Access::Write) => h.1 += 1,
            _ => h.0 += 1,
        }
        let bad = match access {
            None => h.0 > max,
            Some(_) => h.1 > 1 || (h.1 == 1 && h.0 > 0),
        };
        self.peak.fetch_max(h.0 + h.1, Ordering::SeqCst);
        // Every grant's token is above every earlier grant's. Only a writer can be held to it
        // here: it holds alone, so every earlier grant was booked before it; concurrent grants
        // (permits, readers) may be booked in another order than the store granted them.
        let before = self.last_token.fetch_max(token, Ordering::SeqCst);
        let stale = access == Some(Access::Write) && token <= before;
        if bad || stale {
            self.violations.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn leave(&self, access: Option<Access>) {
        let mut h = self.holding.lock().unwrap_or_else(|p| p.into_inner());
        match access {
            Some(Access::Write) => h.1 -= 1,
            _ => h.0 -= 1,
        }
    }
}

/// One worker's loop: `take` until `end`, holding each grant for a yield.
async fn cycle<F, Fut>(
    books: Arc<Books>,
    end: Instant,
    max: u64,
    mut take: F,
) -> Result<(Latencies, u64), String>
where
    F: FnMut(u64) -> (Option<Access>, Fut),
    Fut: std::future::Future<Output = Result<LockGuard, distlock_core::LockError>>,
{
    let (mut waits, mut count) = (Latencies::default(), 0u64);
    while Instant::now() < end {
        let t0 = Instant::now();
        let (access, fut) = take(count);
        let g = fut.await.map_err(|e| e.to_string())?;
        waits.record(t0.elapsed());
        count += 1;
        books.enter(access, g.fencing_token(), max);
        tokio::task::yield_now().await;
        books.leave(access);
        g.release().await.map_err(|e| e.to_string())?;
    }
    Ok((waits, count))
}

fn row(
    label: &str,
    scenario: &str,
    books: &Books,
    results: Vec<(Latencies, u64)>,
    started: Instant,
    note: String,
) -> ResultRow {
    let mut waits = Latencies::default();
    let counts: Vec<u64> = results.iter().map(|(_, c)| *c).collect();
    for (w, _) in &results {
        waits.merge(w);
    }
    let total: u64 = counts.iter().sum();
    ResultRow {
        backend: label.to_owned(),
        scenario: scenario.into(),
        ops_per_sec: total as f64 / started.elapsed().as_secs_f64(),
        p50_us: waits.quantile_us(0.5),
        p99_us: waits.quantile_us(0.99),
        p999_us: waits.quantile_us(0.999),
        jain_index: Some(jain(&counts)),
        violations: books.violations.load(Ordering::SeqCst),
        param: Some(books.peak.load(Ordering::SeqCst)),
        note,
        ..Default::default()
    }
}

/// `clients.len()` workers cycle through `max` permits of one semaphore for `duration`.
pub async fn semaphore(
    label: &str,
    clients: Vec<Arc<dyn DistributedSemaphore>>,
    max: u32,
    duration: Duration,
) -> Result<ResultRow, String> {
    let name = fresh_name("semaphore");
    let books = Arc::new(Books::default());
    let (started, end) = (Instant::now(), Instant::now() + duration);
    let workers = clients.len();
    let mut tasks = Vec::new();
    for s in clients {
        let (name, books) = (name.clone(), Arc::clone(&books));
        tasks.push(tokio::spawn(async move {
            let opts = AcquireOptions::new().wait(Duration::from_secs(30));
            cycle(books, end, u64::from(max), |_| {
                let (s, name, opts) = (Arc::clone(&s), name.clone(), opts.clone());
                (None, async move { s.acquire(&name, max, &opts).await })
            })
            .await
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.map_err(|e| e.to_string())??);
    }
    let note = format!(
        "{workers} workers, {max} permits; p50/p99 = wait for a permit; param = peak concurrent holders (must be ≤ {max})"
    );
    Ok(row(label, "semaphore", &books, results, started, note))
}

/// `clients.len()` workers read 9 times in 10 and write once, on one read-write lock.
pub async fn rwlock(
    label: &str,
    clients: Vec<Arc<dyn DistributedRwLock>>,
    duration: Duration,
) -> Result<ResultRow, String> {
    let name = fresh_name("rwlock");
    let books = Arc::new(Books::default());
    let (started, end) = (Instant::now(), Instant::now() + duration);
    let workers = clients.len();
    let mut tasks = Vec::new();
    for (id, rw) in clients.into_iter().enumerate() {
        let (name, books) = (name.clone(), Arc::clone(&books));
        tasks.push(tokio::spawn(async move {
            let opts = AcquireOptions::new().wait(Duration::from_secs(30));
            cycle(books, end, u64::MAX, |n| {
                // Workers write at different turns, so writes spread over the run.
                let access = if (n + id as u64).is_multiple_of(10) {
                    Access::Write
                } else {
                    Access::Read
                };
                let (rw, name, opts) = (Arc::clone(&rw), name.clone(), opts.clone());
                (
                    Some(access),
                    async move { rw.lock(&name, access, &opts).await },
                )
            })
            .await
        }));
    }
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.map_err(|e| e.to_string())??);
    }
    let note = format!(
        "{workers} workers, 90% reads; p50/p99 = wait for either side; param = peak concurrent holders"
    );
    Ok(row(label, "rwlock", &books, results, started, note))
}

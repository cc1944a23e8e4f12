//! Scaling: many waiters on one name (per-handoff time), and many names held by one client
//! (acquire rate and resident memory).

use std::sync::Arc;
use std::time::Duration;

use distlock_core::{AcquireOptions, DistributedLock};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::{fresh_name, ResultRow};

/// `n` tasks over the given clients each take the lock once.
pub async fn waiters(
    label: &str,
    clients: &[Arc<dyn DistributedLock>],
    n: usize,
) -> Result<ResultRow, String> {
    let name = fresh_name("waiters");
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..n {
        let (lock, name) = (Arc::clone(&clients[i % clients.len()]), name.clone());
        tasks.push(tokio::spawn(async move {
            let g = lock
                .acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(300)))
                .await
                .map_err(|e| e.to_string())?;
            g.release().await.map_err(|e| e.to_string())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    let elapsed = start.elapsed();
    Ok(ResultRow {
        backend: label.to_owned(),
        scenario: "scaling-waiters".into(),
        ops_per_sec: n as f64 / elapsed.as_secs_f64(),
        p50_us: elapsed.as_secs_f64() * 1e6 / n as f64,
        param: Some(n as u64),
        note: "p50_us = mean time per handoff".into(),
        ..Default::default()
    })
}

fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

/// One client holds `n` distinct names at once, taken in waves up to a hundredth, a tenth and
/// all of `n`, its memory read after each (the memory line's points).
pub async fn names(
    label: &str,
    lock: Arc<dyn DistributedLock>,
    n: usize,
) -> Result<ResultRow, String> {
    let prefix = fresh_name("names");
    let before = rss_kb();
    let heap_before = crate::heap::live();
    let sem = Arc::new(Semaphore::new(64));
    let start = Instant::now();
    let mut guards = Vec::with_capacity(n);
    let mut points = Vec::new();
    for wave in [n / 100, n / 10, n] {
        let mut tasks = Vec::new();
        for i in guards.len()..wave {
            let (lock, sem, name) = (Arc::clone(&lock), Arc::clone(&sem), format!("{prefix}-{i}"));
            tasks.push(tokio::spawn(async move {
                let _p = sem.acquire().await.map_err(|e| e.to_string())?;
                lock.acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(60)))
                    .await
                    .map_err(|e| e.to_string())
            }));
        }
        for t in tasks {
            guards.push(t.await.map_err(|e| e.to_string())??);
        }
        if !guards.is_empty() {
            let rss = rss_kb().saturating_sub(before) * 1024;
            let heap = crate::heap::live().saturating_sub(heap_before);
            points.push([guards.len() as u64, rss.max(heap) / guards.len() as u64]);
        }
    }
    let elapsed = start.elapsed();
    let grown = rss_kb().saturating_sub(before);
    let heap_grown = crate::heap::live().saturating_sub(heap_before);
    for g in guards {
        g.release().await.map_err(|e| e.to_string())?;
    }
    points.dedup_by_key(|p| p[0]);
    Ok(ResultRow {
        backend: label.to_owned(),
        scenario: "scaling-names".into(),
        ops_per_sec: n as f64 / elapsed.as_secs_f64(),
        param: Some(n as u64),
        rss_kb: Some(grown),
        heap_bytes: Some(heap_grown),
        memory_per_lock: points,
        note: "acquisitions/s while holding all; rss_kb = resident memory growth, heap_bytes = live heap growth".into(),
        ..Default::default()
    })
}

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

/// One client holds `n` distinct names at once.
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
    let mut tasks = Vec::new();
    for i in 0..n {
        let (lock, sem, name) = (Arc::clone(&lock), Arc::clone(&sem), format!("{prefix}-{i}"));
        tasks.push(tokio::spawn(async move {
            let _p = sem.acquire().await.map_err(|e| e.to_string())?;
            lock.acquire(&name, &AcquireOptions::new().wait(Duration::from_secs(60)))
                .await
                .map_err(|e| e.to_string())
        }));
    }
    let mut guards = Vec::with_capacity(n);
    for t in tasks {
        guards.push(t.await.map_err(|e| e.to_string())??);
    }
    let elapsed = start.elapsed();
    let grown = rss_kb().saturating_sub(before);
    let heap_grown = crate::heap::live().saturating_sub(heap_before);
    for g in guards {
        g.release().await.map_err(|e| e.to_string())?;
    }
    Ok(ResultRow {
        backend: label.to_owned(),
        scenario: "scaling-names".into(),
        ops_per_sec: n as f64 / elapsed.as_secs_f64(),
        param: Some(n as u64),
        rss_kb: Some(grown),
        heap_bytes: Some(heap_grown),
        note: "acquisitions/s while holding all; rss_kb = resident memory growth, heap_bytes = live heap growth".into(),
        ..Default::default()
    })
}

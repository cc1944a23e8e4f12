//! Every series `distlock_core::metrics` documents, seen by a recording test recorder around real
//! acquisitions on the in-memory reference backend and a scripted store.
#![cfg(feature = "metrics")]
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{Attempt, GuardParts, Lease, LockBackend};
use distlock_core::memory::MemoryStore;
use distlock_core::{AcquireOptions, Capabilities, DistributedLock, LockError, LockGuard};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

/// A store that is unreachable for acquisitions, and whose leases fail their first renewal.
#[derive(Debug)]
struct Flaky;

struct FailsOnce(AtomicUsize);

#[async_trait]
impl Lease for FailsOnce {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            Err(LockError::unavailable(
                "flaky",
                None,
                "connection reset",
                None,
            ))
        } else {
            Ok(Some(ttl))
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        Ok(())
    }
}

#[async_trait]
impl LockBackend for Flaky {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        _: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        if name == "down" {
            return Err(LockError::unavailable(
                "flaky",
                Some(name),
                "unreachable",
                None,
            ));
        }
        let lease = Arc::new(FailsOnce(AtomicUsize::new(0)));
        let now = tokio::time::Instant::now();
        Ok(Some(
            GuardParts::leased(name, "flaky", 1, opts, now, opts.ttl, lease).into_guard(),
        ))
    }

    fn capabilities(&self) -> Capabilities {
        DistributedLock::capabilities(&*MemoryStore::new().client())
    }

    fn backend_name(&self) -> &str {
        "flaky"
    }
}

/// A recorded series: its name, its labels and its value.
type Series = (String, Vec<(String, String)>, DebugValue);

#[test]
fn every_documented_series_is_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let store = MemoryStore::new();
            let (a, b) = (store.client(), store.client());
            let opts = AcquireOptions::new().wait(Duration::from_millis(50));
            // acquired, busy, timed out; a hold released.
            let g = a.acquire("m", &opts).await.unwrap();
            assert!(b.try_acquire("m", &opts).await.unwrap().is_none());
            assert!(b.acquire("m", &opts).await.is_err());
            g.release().await.unwrap();
            // A handoff: b waits behind a's hold and is granted at its release.
            let g = a.acquire("m", &opts).await.unwrap();
            let waiter = {
                let b = Arc::clone(&b);
                let long = opts.clone().wait(Duration::from_secs(5));
                tokio::spawn(async move { b.acquire("m", &long).await })
            };
            tokio::time::sleep(Duration::from_millis(20)).await;
            g.release().await.unwrap();
            waiter.await.unwrap().unwrap().release().await.unwrap();
            // A lease not renewed runs out; a lock removed underneath.
            let short = opts.clone().ttl(Duration::from_millis(50)).renew(false);
            let g = a.acquire("short", &short).await.unwrap();
            let _ = g.lost().await;
            drop(g);
            let renewed = opts.clone().ttl(Duration::from_millis(300));
            let g = a.acquire("removed", &renewed).await.unwrap();
            store.remove("removed");
            let _ = tokio::time::timeout(Duration::from_secs(2), g.lost()).await;
            drop(g);
            // An unreachable store; a renewal that fails once and is retried.
            let flaky: Arc<dyn DistributedLock> = Arc::new(Flaky);
            assert!(flaky.acquire("down", &opts).await.is_err());
            let renewing = opts.clone().ttl(Duration::from_millis(300));
            let g = flaky.acquire("renewing", &renewing).await.unwrap();
            tokio::time::sleep(Duration::from_millis(250)).await;
            assert!(!g.is_lost(), "{g:?}");
            g.release().await.unwrap();
        });
    });
    let seen: Vec<Series> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(k, _, _, v)| {
            let key = k.key();
            let labels = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            (key.name().to_owned(), labels, v)
        })
        .collect();
    let count = |name: &str, label: (&str, &str)| -> u64 {
        seen.iter()
            .filter(|(n, l, _)| {
                n == name && l.iter().any(|(k, v)| (k.as_str(), v.as_str()) == label)
            })
            .map(|(_, _, v)| match v {
                DebugValue::Counter(c) => *c,
                DebugValue::Histogram(h) => h.len() as u64,
                DebugValue::Gauge(_) => 0,
            })
            .sum()
    };
    let acq = "distlock_acquisitions_total";
    assert!(count(acq, ("outcome", "acquired")) >= 6, "{seen:?}");
    // Of the acquisitions, only the waiter's was handed over by another holder.
    assert_eq!(
        count("distlock_handoffs_total", ("backend", "memory")),
        1,
        "{seen:?}"
    );
    assert_eq!(count(acq, ("outcome", "busy")), 1, "{seen:?}");
    assert_eq!(count(acq, ("outcome", "timed_out")), 1, "{seen:?}");
    assert_eq!(count(acq, ("outcome", "error")), 1, "{seen:?}");
    assert!(
        count("distlock_wait_seconds", ("backend", "memory")) >= 3,
        "{seen:?}"
    );
    assert!(
        count("distlock_hold_seconds", ("backend", "memory")) >= 3,
        "{seen:?}"
    );
    assert_eq!(
        count("distlock_hold_seconds", ("backend", "flaky")),
        1,
        "{seen:?}"
    );
    let lost = "distlock_lost_total";
    assert_eq!(count(lost, ("reason", "lease_ran_out")), 1, "{seen:?}");
    assert_eq!(
        count(lost, ("reason", "store")) + count(lost, ("reason", "refused")),
        1,
        "{seen:?}"
    );
    assert_eq!(
        count("distlock_renewal_failures_total", ("backend", "flaky")),
        1,
        "{seen:?}"
    );
    // No name label unless asked for.
    assert!(seen
        .iter()
        .all(|(_, l, _)| l.iter().all(|(k, _)| k != "name")));
}

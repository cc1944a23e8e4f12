//! Conformance cases for the recipes on the lock ([`crate::LockExt`]): they run on every
//! backend like the mutex cases.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::cases::{must_acquire, must_try, opts, wait_for_no_traces};
use super::{unique_name, Harness};
use crate::{LockError, LockExt};

/// `run_locked` returns the work's output and leaves the lock free; when the lock is removed
/// underneath the work, the work's future is dropped at the loss (code after its next await
/// never runs), the call returns `Lost`, and another client gets the lock.
pub async fn run_locked_stops_work_at_loss(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let name = unique_name("run-locked");
    let token = c1
        .run_locked(&name, &opts(), |ctx| async move { ctx.fencing_token() })
        .await
        .unwrap();
    let g = must_try(&*c2, &name)
        .await
        .unwrap_or_else(|| panic!("{}: run_locked left the lock held", c1.backend_name()));
    assert!(g.fencing_token() > token);
    g.release().await.unwrap();

    let ttl = Duration::from_secs(3);
    let wrote = Arc::new(AtomicBool::new(false));
    let w = Arc::clone(&wrote);
    let started = Arc::new(tokio::sync::Notify::new());
    let s = Arc::clone(&started);
    let (c, n) = (Arc::clone(&c1), name.clone());
    let run = tokio::spawn(async move {
        c.run_locked(&n, &opts().ttl(ttl), |_ctx| async move {
            s.notify_one();
            tokio::time::sleep(ttl * 4).await;
            w.store(true, Ordering::SeqCst);
        })
        .await
    });
    started.notified().await;
    h.remove_underneath(&name).await;
    let t = Instant::now();
    let res = tokio::time::timeout(ttl + Duration::from_secs(3), run).await;
    let res = match res {
        Ok(joined) => joined.unwrap(),
        Err(_) => panic!(
            "{}: run_locked did not return within {:?} of the removal",
            c1.backend_name(),
            t.elapsed()
        ),
    };
    assert!(
        matches!(res, Err(LockError::Lost { .. })),
        "{}: run_locked after a loss returned {res:?}",
        c1.backend_name()
    );
    assert!(!wrote.load(Ordering::SeqCst), "the work ran past the loss");
    let g = must_acquire(&*c2, &name, &opts()).await;
    g.release().await.unwrap();
    wait_for_no_traces(h, &name, Duration::from_secs(10)).await;
}

/// `acquire_all` takes all or nothing within one wait budget, never deadlocks on overlapping
/// sets asked for in opposite orders, reports a lost member through `lost()`, and leaves
/// nothing behind.
pub async fn acquire_all_is_all_or_nothing(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let base = unique_name("all");
    let (a, b, c) = (
        format!("{base}-a"),
        format!("{base}-b"),
        format!("{base}-c"),
    );
    let held = must_acquire(&*c2, &b, &opts()).await;
    let t = Instant::now();
    let e = c1
        .acquire_all(&[&c, &a, &b], &opts().wait(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(
        matches!(&e, LockError::Timeout { name, .. } if *name == b),
        "{}: acquire_all with one member held gave {e}",
        c1.backend_name()
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "the wait budget was not honoured"
    );
    for free in [&a, &c] {
        let g = must_try(&*c2, free)
            .await
            .unwrap_or_else(|| panic!("{}: a failed acquire_all kept {free}", c1.backend_name()));
        g.release().await.unwrap();
    }
    held.release().await.unwrap();

    // Opposite orders, overlapping sets: both finish.
    let rounds = 10;
    let run = |l: Arc<dyn crate::DistributedLock>, names: Vec<String>| async move {
        for _ in 0..rounds {
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let g = l
                .acquire_all(&refs, &opts().wait(Duration::from_secs(30)))
                .await
                .unwrap();
            g.release().await.unwrap();
        }
    };
    let both = futures::future::join(
        run(Arc::clone(&c1), vec![a.clone(), b.clone(), c.clone()]),
        run(Arc::clone(&c2), vec![c.clone(), b.clone(), a.clone()]),
    );
    assert!(
        tokio::time::timeout(Duration::from_secs(120), both)
            .await
            .is_ok(),
        "{}: acquire_all in opposite orders did not finish",
        c1.backend_name()
    );

    // A lost member ends the set.
    let ttl = Duration::from_secs(3);
    let set = c1.acquire_all(&[&a, &b], &opts().ttl(ttl)).await.unwrap();
    assert_eq!(set.names(), {
        let mut v = vec![a.as_str(), b.as_str()];
        v.sort_unstable();
        v
    });
    h.remove_underneath(&b).await;
    let lost = tokio::time::timeout(ttl + Duration::from_secs(3), set.lost()).await;
    assert!(
        matches!(lost, Ok(LockError::Lost { .. })),
        "{}: a removed member did not end the set",
        c1.backend_name()
    );
    assert!(set.is_lost());
    assert!(
        set.release().await.is_err(),
        "release of a lost set reported success"
    );
    for n in [&a, &b, &c] {
        wait_for_no_traces(h, n, Duration::from_secs(10)).await;
    }
}

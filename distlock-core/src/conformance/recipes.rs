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

/// What `leader()` must answer while `expected` leads: its identity and token, or
/// `Unsupported` where the backend says it records no holder identity.
async fn assert_leader(
    observer: &dyn crate::DistributedLock,
    group: &str,
    expected: Option<(&str, u64)>,
) {
    let seen = observer.leader(group).await;
    if !observer.capabilities().holder_identity {
        assert!(
            matches!(seen, Err(LockError::Unsupported { .. })),
            "{}: leader() without holder identities gave {seen:?}",
            observer.backend_name()
        );
        return;
    }
    let seen = seen.unwrap_or_else(|e| panic!("{}: leader() failed: {e}", observer.backend_name()));
    assert_eq!(
        seen.as_ref()
            .map(|l| (l.identity.as_str(), l.fencing_token)),
        expected,
        "{}: leader() named the wrong leader",
        observer.backend_name()
    );
}

/// Among four candidates on two clients exactly one leads at a time, every leader's token is
/// higher than the last, `leader()` names each winner with its token (without campaigning),
/// resigning hands over, and a bad identity is a typed error before anything is sent.
pub async fn election_one_leader_at_a_time(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let group = unique_name("elect");
    let e = crate::elect(Arc::clone(&c1), &group, "bad\nid").unwrap_err();
    assert!(matches!(e, LockError::InvalidIdentity { .. }), "{e}");
    assert_leader(&*c2, &group, None).await;

    let o = opts().wait(Duration::from_secs(60));
    let mut pending: Vec<crate::Leadership> = (0..4)
        .map(|i| {
            let c = if i % 2 == 0 { &c1 } else { &c2 };
            crate::elect_with(Arc::clone(c), &group, &format!("candidate-{i}"), &o).unwrap()
        })
        .collect();
    let mut last = 0;
    let mut led = Vec::new();
    while !pending.is_empty() {
        // Whoever leads next: race every candidate's wait.
        let (token, idx) = {
            let waits = pending
                .iter()
                .enumerate()
                .map(|(i, l)| Box::pin(async move { (l.await_leadership().await, i) }));
            let ((res, i), _, _) = futures::future::select_all(waits).await;
            (res.unwrap_or_else(|e| panic!("campaign failed: {e}")), i)
        };
        // Let a second leader show itself if there were one.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let leaders: Vec<&str> = pending
            .iter()
            .filter(|l| l.is_leader())
            .map(|l| l.identity())
            .collect();
        assert_eq!(
            leaders,
            vec![pending[idx].identity()],
            "{}: not exactly one leader",
            c1.backend_name()
        );
        assert!(token > last, "leader token {token} not above {last}");
        assert_eq!(pending[idx].fencing_token(), Some(token));
        last = token;
        assert_leader(&*c1, &group, Some((pending[idx].identity(), token))).await;
        let winner = pending.remove(idx);
        led.push(winner.identity().to_owned());
        winner.resign().await.unwrap();
    }
    led.sort();
    assert_eq!(
        led,
        ["candidate-0", "candidate-1", "candidate-2", "candidate-3"]
    );
    assert_leader(&*c2, &group, None).await;
    wait_for_no_traces(h, &group, Duration::from_secs(10)).await;
}

/// A leadership whose lock is removed underneath ends: `lost()` fires, `is_leader` turns
/// false, and the next candidate leads with a higher token. (The next candidate campaigns only
/// after the removal: the SQL harnesses find the connection to kill through the lock's wait
/// queue, where a waiting candidate would be mistaken for the holder.)
pub async fn election_loss_ends_leadership(h: &dyn Harness) {
    let (c1, c2) = (h.client().await, h.client().await);
    let group = unique_name("elect-lost");
    let ttl = Duration::from_secs(3);
    let o = opts().ttl(ttl);
    let a = crate::elect_with(Arc::clone(&c1), &group, "a", &o).unwrap();
    let first = a.await_leadership().await.unwrap();
    assert!(a.is_leader());
    let lost = a.lost();
    h.remove_underneath(&group).await;
    let t = Instant::now();
    let e = tokio::time::timeout(ttl + Duration::from_secs(3), lost).await;
    assert!(
        matches!(e, Ok(LockError::Lost { .. })),
        "{}: lost() did not fire within {:?} of the removal: {e:?}",
        c1.backend_name(),
        t.elapsed()
    );
    assert!(!a.is_leader());
    assert_eq!(a.fencing_token(), None);
    assert!(matches!(
        a.await_leadership().await,
        Err(LockError::Lost { .. })
    ));
    let b = crate::elect_with(Arc::clone(&c2), &group, "b", &o).unwrap();
    let second = b.await_leadership().await.unwrap();
    assert!(second > first, "token {second} not above {first}");
    assert_leader(&*c1, &group, Some(("b", second))).await;
    drop(a);
    b.resign().await.unwrap();
    wait_for_no_traces(h, &group, Duration::from_secs(10)).await;
}

/// The next value of `changes` within a bound, checked against the one before it (`last`):
/// never the same twice in a row.
async fn next_leader(
    changes: &mut crate::LeaderChanges,
    last: &mut Option<Option<crate::Leader>>,
    backend: &str,
) -> Option<crate::Leader> {
    let bound = Duration::from_secs(20);
    let now = match tokio::time::timeout(bound, changes.next()).await {
        Ok(Some(Ok(now))) => now,
        Ok(Some(Err(e))) => panic!("{backend}: observe yielded an error: {e}"),
        Ok(None) => panic!("{backend}: observe ended"),
        Err(_) => panic!("{backend}: observe yielded nothing within {bound:?}"),
    };
    assert_ne!(
        last.as_ref(),
        Some(&now),
        "{backend}: observe yielded the same value twice in a row"
    );
    *last = Some(now.clone());
    now
}

/// `observe` yields the current leader first, then each change: nobody, A, (nobody,) B with a
/// higher token than A's, nobody after B resigns; never one value twice in a row. Where the
/// backend records no holder identity, its one item is `Unsupported`.
pub async fn election_observe_yields_each_leader(h: &dyn Harness) {
    let (c1, c2, watcher) = (h.client().await, h.client().await, h.client().await);
    let backend = watcher.backend_name().to_owned();
    let group = unique_name("observe");
    let every = Duration::from_millis(50);
    let mut changes = crate::observe_every(Arc::clone(&watcher), &group, every).unwrap();
    if !watcher.capabilities().holder_identity {
        let first = changes.next().await;
        assert!(
            matches!(first, Some(Err(LockError::Unsupported { .. }))),
            "{backend}: observe without holder identities gave {first:?}"
        );
        assert!(changes.next().await.is_none(), "{backend}: did not end");
        return;
    }
    let mut last = None;
    assert_eq!(next_leader(&mut changes, &mut last, &backend).await, None);

    let o = opts().wait(Duration::from_secs(60));
    let a = crate::elect_with(Arc::clone(&c1), &group, "a", &o).unwrap();
    let ta = a.await_leadership().await.unwrap();
    let seen = next_leader(&mut changes, &mut last, &backend).await;
    assert_eq!(seen, Some(crate::Leader::new("a", ta)), "{backend}");

    let b = crate::elect_with(Arc::clone(&c2), &group, "b", &o).unwrap();
    a.resign().await.unwrap();
    let tb = b.await_leadership().await.unwrap();
    assert!(tb > ta, "{backend}: token {tb} not above {ta}");
    // The hand-over may show an interregnum first, never anyone but B after A.
    let mut seen = next_leader(&mut changes, &mut last, &backend).await;
    if seen.is_none() {
        seen = next_leader(&mut changes, &mut last, &backend).await;
    }
    assert_eq!(seen, Some(crate::Leader::new("b", tb)), "{backend}");

    b.resign().await.unwrap();
    assert_eq!(next_leader(&mut changes, &mut last, &backend).await, None);
    drop(changes);
    wait_for_no_traces(h, &group, Duration::from_secs(10)).await;
}

//! Gray failures: the store applies a command late (a stalled store or a slow route) or
//! applies it and the reply is lost. The client cannot tell either from a command never
//! applied, so every guarantee must hold whichever happened.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::cases::{must_acquire, opts};
use super::{unique_name, Harness};
use crate::backend::STALL_BOUND;
use crate::fault::FaultProxy;
use crate::{AcquireOptions, DistributedSemaphore, LockError, LockGuard};

/// A gray fault between one client and the store.
#[derive(Clone, Copy, Debug)]
enum Gray {
    /// Requests reach the store 3 s late; replies come at once.
    LateRequests,
    /// Requests reach the store; every reply is held until healed.
    LostReplies,
}

impl Gray {
    fn apply(self, proxies: &[FaultProxy]) {
        for p in proxies {
            match self {
                Gray::LateRequests => p.set_upward_latency(Duration::from_secs(3)),
                Gray::LostReplies => p.hold_replies(),
            }
        }
    }
}

/// An `extend` to a shorter lease whose outcome the client cannot learn never leaves two
/// holders: by the time another client acquires the name, the first guard reports itself lost,
/// and `extend` did not return `Ok` for a time-bounded lease it could not confirm in time.
/// (An in-process store has no request or reply to lose: nothing to check there.)
pub async fn extend_of_unknown_outcome_is_not_believed(h: &dyn Harness) {
    for gray in [Gray::LateRequests, Gray::LostReplies] {
        let a = h.crashable_client().await;
        if a.proxies.is_empty() {
            return;
        }
        let b = h.client().await;
        let name = unique_name("gray-extend");
        let g = must_acquire(&*a.lock, &name, &lease()).await;
        let other = |o: AcquireOptions| async move { b.acquire(&name, &o).await };
        extend_under(g, &a.proxies, gray, other).await;
    }
}

/// [`extend_of_unknown_outcome_is_not_believed`] for a semaphore permit: `a` reaches the store
/// through `proxies`, `b` directly.
pub async fn permit_extend_of_unknown_outcome_is_not_believed(
    a: &dyn DistributedSemaphore,
    proxies: &[FaultProxy],
    b: &dyn DistributedSemaphore,
) {
    for gray in [Gray::LateRequests, Gray::LostReplies] {
        let name = unique_name("gray-permit");
        let g = a.acquire(&name, 1, &lease()).await.unwrap();
        let other = |o: AcquireOptions| async move { b.acquire(&name, 1, &o).await };
        extend_under(g, proxies, gray, other).await;
    }
}

/// A lease short enough that a store which keeps it whole on renewal (etcd fixes a lease's TTL
/// when granting it) frees the name well within the other client's wait.
fn lease() -> AcquireOptions {
    opts().ttl(Duration::from_secs(6))
}

/// Extends `g` to 2 s under `gray` on `proxies`, then has `other` acquire the same name.
async fn extend_under<F, Fut>(g: LockGuard, proxies: &[FaultProxy], gray: Gray, other: F)
where
    F: FnOnce(AcquireOptions) -> Fut,
    Fut: Future<Output = Result<LockGuard, LockError>>,
{
    let backend = g.backend().to_owned();
    let time_bounded = g.remaining_validity().is_some();
    gray.apply(proxies);
    let started = Instant::now();
    let extended = tokio::time::timeout(Duration::from_secs(40), g.extend(Duration::from_secs(2)))
        .await
        .unwrap_or_else(|_| panic!("{backend} ({gray:?}): extend hung for 40 s"));
    if time_bounded {
        assert!(
            extended.is_err(),
            "{backend} ({gray:?}): extend to 2 s returned Ok after {:?}, though no reply could \
             confirm it in time",
            started.elapsed()
        );
        // Lost by now, or believed for no longer than the 2 s the store may have applied.
        if let Some(left) = g.remaining_validity() {
            assert!(
                left.is_zero() || started.elapsed() + left <= Duration::from_secs(2),
                "{backend} ({gray:?}): the guard believes {left:?} more after a 2 s extend of \
                 unknown outcome: {g:?}"
            );
        }
    }
    // Another client waits for the name: whenever it gets it, the first guard is lost.
    let wait = if time_bounded { 20 } else { 5 };
    match other(AcquireOptions::new().wait(Duration::from_secs(wait))).await {
        Ok(gb) => {
            assert!(
                g.is_lost(),
                "{backend} ({gray:?}): two holders {:?} after an extend of unknown outcome: \
                 the first still reports {:?} left",
                started.elapsed(),
                g.remaining_validity()
            );
            gb.release().await.unwrap();
        }
        Err(LockError::Timeout { .. }) if !time_bounded => {}
        Err(e) => panic!("{backend} ({gray:?}): the name was never freed: {e}"),
    }
    for p in proxies {
        p.heal();
    }
    // Owner-checked: it frees a session-bound lock still held and touches no other holder.
    let _ = tokio::time::timeout(Duration::from_secs(10), g.release()).await;
}

/// A store that stops answering (every proxy blackholed: the connections stay open, nothing
/// comes back) bounds every wait: an `acquire` returns within its wait and
/// [`STALL_BOUND`], a `try_acquire` within the bound, each with `Timeout` or `Unavailable`.
pub async fn a_stalled_store_bounds_every_wait(h: &dyn Harness) {
    let a = h.crashable_client().await;
    if a.proxies.is_empty() {
        return;
    }
    let b = h.client().await;
    let name = unique_name("stalled-wait");
    // Warm: `a` has its connections (and sessions) open before the stall.
    must_acquire(&*a.lock, &name, &opts())
        .await
        .release()
        .await
        .unwrap();
    let held = must_acquire(&*b, &name, &opts()).await;
    let backend = held.backend().to_owned();
    for p in a.proxies.iter() {
        p.blackhole();
    }
    let wait = Duration::from_secs(1);
    let asked = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(30),
        a.lock.acquire(&name, &opts().wait(wait)),
    )
    .await;
    let took = asked.elapsed();
    assert!(
        took <= wait + STALL_BOUND + SLACK,
        "{backend}: acquire with a {wait:?} wait on a stalled store took {took:?}: {got:?}"
    );
    assert!(
        matches!(
            got,
            Ok(Err(
                LockError::Unavailable { .. } | LockError::Timeout { .. }
            ))
        ),
        "{backend}: acquire on a stalled store: {got:?}"
    );
    let asked = Instant::now();
    let got =
        tokio::time::timeout(Duration::from_secs(30), a.lock.try_acquire(&name, &opts())).await;
    let took = asked.elapsed();
    assert!(
        took <= STALL_BOUND + SLACK,
        "{backend}: try_acquire on a stalled store took {took:?}: {got:?}"
    );
    assert!(
        matches!(got, Ok(Ok(None) | Err(LockError::Unavailable { .. }))),
        "{backend}: try_acquire on a stalled store: {got:?}"
    );
    for p in a.proxies.iter() {
        p.heal();
    }
    held.release().await.unwrap();
}

/// A holder cut off from a store that stops answering (its proxies blackholed) reports its
/// loss no later than another client is granted the name — by its lease running out, its
/// session expiring or the store ending the silent connection, whichever the backend has.
pub async fn a_cut_off_holder_knows_first(h: &dyn Harness) {
    let a = h.crashable_client().await;
    if a.proxies.is_empty() {
        return;
    }
    let b = h.client().await;
    let name = unique_name("cut-off");
    let short = opts()
        .ttl(Duration::from_secs(2))
        .wait(Duration::from_secs(60));
    let held = must_acquire(&*a.lock, &name, &short).await;
    let backend = held.backend().to_owned();
    for p in a.proxies.iter() {
        p.blackhole();
    }
    let cut = Instant::now();
    let lost = tokio::spawn(async move {
        let _ = held.lost().await;
        Instant::now()
    });
    let next = must_acquire(&*b, &name, &short).await;
    let granted = Instant::now();
    let lost_at = tokio::time::timeout(Duration::from_secs(60), lost)
        .await
        .unwrap_or_else(|_| panic!("{backend}: the cut-off holder never reported its loss"))
        .unwrap();
    assert!(
        lost_at <= granted,
        "{backend}: the next holder was granted {:?} after the cut, the cut-off holder \
         learned of its loss only {:?} after it",
        granted - cut,
        lost_at - cut
    );
    next.release().await.unwrap();
    for p in a.proxies.iter() {
        p.heal();
    }
}

/// What a timer may add to a bound on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(500);

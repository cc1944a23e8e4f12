//! Gray failures: the store applies a command late (a stalled store or a slow route) or
//! applies it and the reply is lost. The client cannot tell either from a command never
//! applied, so every guarantee must hold whichever happened.
#![allow(clippy::unwrap_used)]

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::cases::{must_acquire, opts};
use super::{unique_name, Harness};
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

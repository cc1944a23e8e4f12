//! The operator's cases: [`DistributedLock::list`] and [`DistributedLock::break_lock`] as
//! `distlock ls` and `distlock break` use them, run unchanged by every backend and mode that
//! offers them (and the refusals by those that do not).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use tokio::time::Instant;

use super::cases::must_acquire;
use super::fence::{Read, Write};
use super::{unique_name, Harness};
use crate::{AcquireOptions, DistributedLock, Listed, LockError, LockGuard};

/// The lease the holders of these cases take: renewed every second.
const TTL: Duration = Duration::from_secs(3);

/// How long a broken holder's guard may take to report itself lost: its next renewal (every
/// `TTL / 3`) plus time for the reply.
const LOST_WITHIN: Duration = Duration::from_secs(4);

/// The one entry for `name` in a listing of the prefix `name`.
async fn listed(operator: &dyn DistributedLock, name: &str) -> Listed {
    let listing = operator
        .list(name, 10)
        .await
        .unwrap_or_else(|e| panic!("{}: list {name:?}: {e}", operator.backend_name()));
    assert!(!listing.truncated, "one name listed as truncated");
    match listing.locks.as_slice() {
        [one] if one.name == name => one.clone(),
        other => panic!("listing of {name:?} should be that name alone: {other:?}"),
    }
}

/// Waits (at most 10 s) until `waiters` contenders wait for `name` where the backend counts
/// them; elsewhere gives a waiter a moment to queue.
async fn until_waiting(operator: &dyn DistributedLock, name: &str, waiters: usize) {
    if !operator.capabilities().queue_length {
        tokio::time::sleep(Duration::from_millis(300)).await;
        return;
    }
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(10) {
        if operator.inspect(name).await.unwrap().waiters == Some(waiters) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{waiters} waiter(s) for {name:?} never showed");
}

/// Checks that `name` is listed as held by `holder` with `token`, its lease left, and one
/// waiter, each where the backend reports it.
async fn shows_holder(operator: &dyn DistributedLock, name: &str, holder: &LockGuard) {
    let caps = operator.capabilities();
    let Listed { info, .. } = listed(operator, name).await;
    let backend = operator.backend_name();
    assert!(info.held, "{backend}: listed but not held: {info:?}");
    assert_eq!(
        info.fencing_token,
        Some(holder.fencing_token()),
        "{backend}: listed token"
    );
    if caps.holder_identity {
        assert_eq!(
            info.holder.as_deref(),
            Some("holder-a"),
            "{backend}: identity"
        );
    }
    if caps.lease {
        let left = info
            .expires_in
            .expect("a leased backend lists the lease left");
        assert!(left <= TTL, "{backend}: {left:?} left of a {TTL:?} lease");
    }
    if caps.queue_length {
        assert_eq!(info.waiters, Some(1), "{backend}: one waiter");
    }
}

/// Holder A (identity `holder-a`) takes `name` and waiter B queues behind it: B's acquisition.
async fn held_and_awaited(
    h: &dyn Harness,
    name: &str,
) -> (LockGuard, tokio::task::JoinHandle<LockGuard>) {
    let (a_client, b_client) = (h.client().await, h.client().await);
    let a = must_acquire(
        &*a_client,
        name,
        &AcquireOptions::new().ttl(TTL).holder("holder-a"),
    )
    .await;
    let b = tokio::spawn({
        let name = name.to_owned();
        async move {
            let opts = AcquireOptions::new()
                .ttl(TTL)
                .wait(Duration::from_secs(30))
                .holder("holder-b");
            must_acquire(&*b_client, &name, &opts).await
        }
    });
    (a, b)
}

/// `list` names a held lock with its holder's token, identity, lease left and waiters (where the
/// backend reports each) and nothing else under the name as prefix.
pub async fn a_listing_shows_the_holder(h: &dyn Harness) {
    let operator = h.client().await;
    assert!(operator.capabilities().list, "capabilities deny listing");
    let name = unique_name("ls-holder");
    let (a, b) = held_and_awaited(h, &name).await;
    until_waiting(&*operator, &name, 1).await;
    shows_holder(&*operator, &name, &a).await;
    a.release().await.unwrap();
    b.await.unwrap().release().await.unwrap();
}

/// A listing holds at most `limit` names, says when it left some out, and filters by prefix;
/// released names leave it.
pub async fn a_listing_is_bounded(h: &dyn Harness) {
    let (client, operator) = (h.client().await, h.client().await);
    let prefix = unique_name("ls-page");
    let mut guards = Vec::new();
    for i in 1..=3 {
        let name = format!("{prefix}-{i}");
        let opts = AcquireOptions::new().holder(format!("holder-{i}"));
        guards.push(must_acquire(&*client, &name, &opts).await);
    }
    let page = operator.list(&prefix, 2).await.unwrap();
    assert_eq!((page.locks.len(), page.truncated), (2, true), "{page:?}");
    let all = operator.list(&prefix, 3).await.unwrap();
    assert_eq!((all.locks.len(), all.truncated), (3, false), "{all:?}");
    let names: Vec<_> = all.locks.iter().map(|l| l.name.clone()).collect();
    assert_eq!(names, ["1", "2", "3"].map(|i| format!("{prefix}-{i}")));
    let tokens: Vec<_> = all.locks.iter().map(|l| l.info.fencing_token).collect();
    let held: Vec<_> = guards.iter().map(|g| Some(g.fencing_token())).collect();
    assert_eq!(tokens, held, "listed tokens");
    if operator.capabilities().holder_identity {
        let holders: Vec<_> = all.locks.iter().map(|l| l.info.holder.clone()).collect();
        assert_eq!(
            holders,
            ["1", "2", "3"].map(|i| Some(format!("holder-{i}")))
        );
    }
    let one = operator.list(&format!("{prefix}-2"), 10).await.unwrap();
    assert_eq!(one.locks.len(), 1, "{one:?}");
    for g in guards {
        g.release().await.unwrap();
    }
    let none = operator.list(&prefix, 10).await.unwrap();
    assert!(none.locks.is_empty() && !none.truncated, "{none:?}");
}

/// The whole operator story on one name: A holds and B waits; `list` shows A (where the
/// backend lists: a Redis Cluster breaks but does not list); `break_lock`
/// returns A's token; A's guard reports itself lost within its renewal period; B gets the lock
/// with a higher token; after B's fenced write (`write`), A's write with its old token is
/// refused as stale (`read` shows B's). A later break of the free name is `NotHeld`.
pub async fn a_broken_holder_is_fenced_out(h: &dyn Harness, write: Write, read: Read) {
    let operator = h.client().await;
    let caps = operator.capabilities();
    assert!(caps.break_lock, "capabilities deny break");
    let name = unique_name("break");
    let (a, b) = held_and_awaited(h, &name).await;
    let a_token = a.fencing_token();
    write(a_token, "a").await.expect("A's write while it holds");
    until_waiting(&*operator, &name, 1).await;
    if caps.list {
        shows_holder(&*operator, &name, &a).await;
    }

    let broken = operator.break_lock(&name).await.expect("break");
    assert_eq!(broken.name, name);
    assert_eq!(broken.fencing_token, Some(a_token), "the broken token");
    if caps.holder_identity {
        assert_eq!(broken.holder.as_deref(), Some("holder-a"));
    }
    let lost = tokio::time::timeout(LOST_WITHIN, a.lost()).await;
    assert!(
        matches!(lost, Ok(LockError::Lost { .. })),
        "A was not told of its loss within {LOST_WITHIN:?}: {lost:?}"
    );

    let b = tokio::time::timeout(Duration::from_secs(20), b)
        .await
        .expect("B got the lock after the break")
        .unwrap();
    let b_token = b.fencing_token();
    assert!(
        b_token > a_token,
        "tokens rise across a break: {a_token} then {b_token}"
    );
    write(b_token, "b").await.expect("B's write");
    let err = write(a_token, "a, late")
        .await
        .expect_err("the broken holder's write was accepted");
    let stale = err
        .stale()
        .unwrap_or_else(|| panic!("a store error, not a refusal: {err}"));
    assert_eq!((stale.token, stale.seen), (a_token, b_token));
    assert_eq!(read().await, "b", "the refused write left nothing");

    // A's guard, lost, frees nothing of B's.
    drop(a);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let now = operator.inspect(&name).await.unwrap();
    assert_eq!(now.fencing_token, Some(b_token), "B holds on: {now:?}");
    b.release().await.unwrap();
    breaks_nothing_free(&*operator, &name).await;
}

/// A break of a name nobody holds is `NotHeld`.
async fn breaks_nothing_free(operator: &dyn DistributedLock, name: &str) {
    let got = operator.break_lock(name).await;
    assert!(
        matches!(got, Err(LockError::NotHeld { .. })),
        "break of a free name: {got:?}"
    );
}

/// A backend that cannot break safely says so (`Unsupported`, capabilities agree) and leaves
/// the holder holding.
pub async fn breaking_is_refused(h: &dyn Harness) {
    let (client, operator) = (h.client().await, h.client().await);
    assert!(
        !operator.capabilities().break_lock,
        "capabilities claim break"
    );
    let name = unique_name("no-break");
    let g = must_acquire(&*client, &name, &AcquireOptions::new()).await;
    let err = operator.break_lock(&name).await.unwrap_err();
    assert!(matches!(err, LockError::Unsupported { .. }), "{err:?}");
    assert!(!g.is_lost(), "a refused break lost the lock");
    assert!(operator
        .try_acquire(&name, &AcquireOptions::new())
        .await
        .unwrap()
        .is_none());
    g.release().await.unwrap();
}

/// A backend that cannot list says so (`Unsupported`, capabilities agree).
pub async fn listing_is_refused(h: &dyn Harness) {
    let operator = h.client().await;
    assert!(!operator.capabilities().list, "capabilities claim list");
    let err = operator.list("", 10).await.unwrap_err();
    assert!(matches!(err, LockError::Unsupported { .. }), "{err:?}");
}

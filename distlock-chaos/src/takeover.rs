//! The pieces every fault scenario shares: the lease, the fenced resource per scenario, fault
//! proxies per target, and the take-over pattern — a holder writes with its token until its
//! `lost()` fires while another client takes the lock over and writes with a greater one.

use std::time::Duration;

use distlock_core::fault::FaultProxy;
use distlock_core::{AcquireOptions, DistributedLock};
use tokio::time::Instant;

use crate::backends::Target;
use crate::fenced::FencedResource;
use crate::history::History;

/// The lease every scenario uses (ZooKeeper: its 2 s session).
pub const LEASE: Duration = Duration::from_secs(1);

/// The acquire options of a scenario's holders: the [`LEASE`], waiting up to 15 s.
pub(crate) fn opts() -> AcquireOptions {
    AcquireOptions::new()
        .ttl(LEASE)
        .wait(Duration::from_secs(15))
}

/// A fresh fenced resource for one scenario on one target.
pub(crate) async fn resource(
    pg: &str,
    scenario: &str,
    t: &Target,
) -> Result<FencedResource, String> {
    FencedResource::create(
        pg,
        &format!(
            "{scenario}-{}-{}",
            t.label,
            &distlock_core::backend::owner_token()[..6]
        ),
    )
    .await
}

/// One fault proxy (on loopback) per store host of the target.
pub(crate) async fn proxies(t: &Target) -> Result<Vec<FaultProxy>, String> {
    let mut v = Vec::new();
    for p in &t.hosts {
        v.push(FaultProxy::start(*p).await.map_err(|e| e.to_string())?);
    }
    Ok(v)
}

/// Writes to `res` with the guard's token every 30 ms for at most `max`, or until `lost()`
/// fires; the hold ends in `history` at the instant the guard's `lost()` future completes (not
/// when this loop notices). Returns when `lost()` fired, if it did.
pub(crate) async fn hold_writing(
    g: &distlock_core::LockGuard,
    res: &FencedResource,
    history: &History,
    who: &str,
    max: Duration,
) -> Option<Instant> {
    let idx = history.acquired(who, g.fencing_token());
    let mut watcher = history.end_when_lost(idx, g);
    let end = Instant::now() + max;
    let lost_at = loop {
        tokio::select! {
            at = &mut watcher => break at.ok(),
            _ = tokio::time::sleep_until(end) => break None,
            _ = async {
                let _ = res.write(who, g.fencing_token()).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            } => {}
        }
    };
    watcher.abort();
    history.ended(idx, false);
    lost_at
}

/// A holder task: [`hold_writing`] for up to 10 s, then drops the guard without releasing.
pub(crate) fn writer(
    g: distlock_core::LockGuard,
    res: FencedResource,
    history: History,
    who: &'static str,
) -> tokio::task::JoinHandle<Option<Instant>> {
    tokio::spawn(async move {
        let lost_at = hold_writing(&g, &res, &history, who, Duration::from_secs(10)).await;
        g.abandon();
        lost_at
    })
}

/// The taking-over client's acquire: a 5 s lease, waiting up to `wait`.
pub(crate) async fn take_over(
    other: &dyn DistributedLock,
    name: &str,
    wait: Duration,
) -> Result<(distlock_core::LockGuard, Instant), String> {
    let g = other
        .acquire(
            name,
            &AcquireOptions::new().ttl(Duration::from_secs(5)).wait(wait),
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok((g, Instant::now()))
}

/// The new holder writes five times while the old one's `writer` task runs out; returns when the
/// old holder's `lost()` fired, if it did.
pub(crate) async fn after_take_over(
    g2: distlock_core::LockGuard,
    res: &FencedResource,
    history: &History,
    old: tokio::task::JoinHandle<Option<Instant>>,
) -> Result<Option<Instant>, String> {
    let i2 = history.acquired("other", g2.fencing_token());
    for _ in 0..5 {
        res.write("other", g2.fencing_token()).await?;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lost_at = old.await.map_err(|e| e.to_string())?;
    history.ended(i2, false);
    let _ = g2.release().await;
    Ok(lost_at)
}

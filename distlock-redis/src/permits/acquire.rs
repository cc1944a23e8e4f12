//! The acquisition loop of a semaphore permit or a read-write lock side on one server: admission
//! attempts, the waiter's place in the queue, pub/sub wake-ups, and the guard once admitted.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{handoff, CleanupOnDrop, Deadline, GuardParts};
use distlock_core::{AcquireOptions, LockError, LockGuard};
use tokio::time::Instant;

use super::calls::{self, Granted};
use super::keys::PermitKeys;
use super::lease::PermitLease;
use crate::acquire::{nap, WAITER_TTL};
use crate::error::map;
use crate::node::Node;
use crate::subscriber::{Subscriber, Waiting};

/// One acquisition's fixed terms.
pub(crate) struct Request<'a> {
    /// The name as the caller gave it (for messages).
    pub name: &'a str,
    /// The backend label.
    pub label: &'a str,
    /// The name's keys.
    pub keys: PermitKeys,
    /// This acquisition's member (kind letter + random token).
    pub member: String,
    /// A semaphore's count (`None`: a read-write lock).
    pub max: Option<u32>,
    /// Bound on each reply.
    pub timeout: Duration,
}

/// Acquires for `req` on `node`: attempts until admitted, the wait runs out, or (`try_only`)
/// the first attempt is refused. Waiters queue (FIFO) and sleep until a wake-up message, the
/// earliest holder's lease end, or their heartbeat.
///
/// # Cancel safety
/// Dropping the future takes this member out of the holders and the queue (in the
/// background).
pub(crate) async fn acquire(
    node: &Node,
    subscriber: &Arc<Subscriber>,
    req: Request<'_>,
    opts: &AcquireOptions,
    try_only: bool,
) -> Result<Option<LockGuard>, LockError> {
    let deadline = Deadline::after(opts.wait);
    let (n, k, m) = (node.clone(), req.keys.clone(), req.member.clone());
    let mut armed = CleanupOnDrop::new(move || {
        Box::pin(async move {
            let _ = calls::release(&n, &k, &m).await;
            let _ = calls::leave(&n, &k, &m).await;
        })
    });
    let queue = (!try_only).then_some(WAITER_TTL);
    let mut waiting: Option<Waiting> = None;
    loop {
        let started = Instant::now();
        let granted = attempt(node, &req, opts.ttl, queue).await?;
        let first_expiry_ms = match granted {
            Granted::Yes(token) => {
                let made = admitted(node, &req, token, opts, started).await;
                match armed.after_grant(made, try_only, &deadline).await {
                    Some(done) => return done,
                    None => continue,
                }
            }
            Granted::No { first_expiry_ms } => first_expiry_ms,
            Granted::OtherCount(have) => {
                armed.run_now().await;
                let max = req.max.unwrap_or(0);
                return Err(distlock_core::semaphore::other_count(req.name, have, max));
            }
            Granted::Foreign(f) => {
                armed.run_now().await;
                let what = f.describe_as(req.keys.role(&f.key));
                return Err(LockError::backend(req.label, Some(req.name), what, None));
            }
        };
        handoff::waited();
        if let Some(done) = armed.after_refusal(try_only, &deadline).await {
            return done;
        }
        // Subscribed once the first attempt is refused, then one more attempt at once so a
        // release in between is not missed.
        let Some(w) = waiting.as_ref() else {
            waiting = Some(
                subscriber
                    .wait_on(&node.client(), &req.keys.channel, &req.member, req.timeout)
                    .await,
            );
            continue;
        };
        let nap = nap(first_expiry_ms, false);
        tokio::select! {
            _ = w.wake.notify.notified() => {}
            _ = deadline.sleep(nap) => {}
        }
    }
}

/// One admission attempt, bounded by the request's reply timeout.
async fn attempt(
    node: &Node,
    req: &Request<'_>,
    ttl: Duration,
    queue: Option<Duration>,
) -> Result<Granted, LockError> {
    let call = calls::acquire(node, &req.keys, &req.member, ttl, queue, req.max);
    match tokio::time::timeout(req.timeout, call).await {
        Ok(Ok(g)) => Ok(g),
        Ok(Err(e)) => Err(map(e, req.label, Some(req.name))),
        Err(_) => Err(LockError::unavailable(
            req.label,
            Some(req.name),
            format!("no reply within {:?}", req.timeout),
            None,
        )),
    }
}

/// The guard of an admitted member.
async fn admitted(
    node: &Node,
    req: &Request<'_>,
    token: u64,
    opts: &AcquireOptions,
    started: Instant,
) -> Result<LockGuard, LockError> {
    let lease = PermitLease {
        node: node.clone(),
        keys: req.keys.clone(),
        member: req.member.clone(),
        name: req.name.to_owned(),
        label: req.label.to_owned(),
        timeout: req.timeout,
    };
    GuardParts::leased(
        req.name,
        req.label,
        token,
        opts,
        started,
        opts.ttl,
        Arc::new(lease),
    )
    .start()
    .await
}

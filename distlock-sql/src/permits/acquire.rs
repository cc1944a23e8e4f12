//! The acquisition loop of a permit or a read-write lock side in row mode: admission attempts
//! (each run to completion in its own task), the waiter's polling with backoff and local
//! wake-ups, and the guard once admitted.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Backoff, CleanupOnDrop, Deadline, GuardParts};
use distlock_core::{AcquireOptions, LockError, LockGuard};
use tokio::sync::futures::Notified;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use super::admit::{admit, looks_admissible, Admission, Ask, WAITER_TTL};
use super::lease::{Member, PermitLease};
use super::wake;
use crate::error::Failure;

/// Deadlock retries in a row before the error is surfaced.
const MAX_RETRIES: u32 = 50;
use distlock_core::backend::HEARTBEAT;

/// One admission, run to completion in its own task: if the acquire was dropped meanwhile,
/// whatever the admission won or queued is taken out again.
async fn attempt(who: &Member, ask: &Ask) -> Result<Admission, Failure> {
    let (reply, answer) = oneshot::channel();
    let (who, ask) = (who.clone(), ask.clone());
    let label = who.client.label.clone();
    tokio::spawn(async move {
        let outcome = admit(&who.client, &who.sql, &ask).await;
        if let Err(Ok(Admission::Granted(_) | Admission::Waiting { .. })) = reply.send(outcome) {
            tracing::debug!("the acquire was cancelled during its admission; taking it out");
            let _ = who.forget().await;
        }
    });
    answer.await.unwrap_or_else(|_| {
        Err(Failure::Error(LockError::backend(
            label,
            None,
            "the admission ended without an answer",
            None,
        )))
    })
}

/// Acquires `ask` for `who`: admissions until granted, the wait runs out, or (`try_only`) the
/// first one is refused.
///
/// # Cancel safety
/// Dropping the future takes this member's holder and waiter rows out (in the background).
pub(crate) async fn acquire(
    who: Member,
    ask: Ask,
    opts: &AcquireOptions,
    try_only: bool,
) -> Result<Option<LockGuard>, LockError> {
    let deadline = Deadline::after(opts.wait);
    let gone = who.clone();
    let mut armed = CleanupOnDrop::new(move || {
        Box::pin(async move {
            let _ = gone.forget().await;
        })
    });
    let signal = wake::signal(&who.wake_key);
    let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
    let mut retries = 0;
    loop {
        let notified = signal.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let sent = Instant::now();
        let first_expiry_ms = match attempt(&who, &ask).await {
            Err(Failure::Retry | Failure::Busy) if retries < MAX_RETRIES => {
                retries += 1;
                tokio::time::sleep(backoff.next_delay()).await;
                continue;
            }
            Err(Failure::Retry | Failure::Busy) => {
                armed.run_now().await;
                return Err(LockError::backend(
                    &who.client.label,
                    Some(&who.name),
                    format!("{MAX_RETRIES} admissions in a row hit deadlocks"),
                    None,
                ));
            }
            Err(Failure::Error(e)) => {
                armed.run_now().await;
                return Err(e);
            }
            Ok(Admission::OtherCount(have)) => {
                armed.run_now().await;
                return Err(distlock_core::semaphore::other_count(
                    &who.name,
                    have,
                    ask.max.unwrap_or(0),
                ));
            }
            Ok(Admission::Granted(token)) => {
                let made = admitted(&who, token, opts, sent).await;
                match armed.after_grant(made, try_only, &deadline).await {
                    Some(done) => return done,
                    None => continue,
                }
            }
            Ok(Admission::Waiting { first_expiry_ms }) => first_expiry_ms,
        };
        distlock_core::backend::handoff::waited();
        retries = 0;
        if let Some(done) = armed.after_refusal(try_only, &deadline).await {
            return done;
        }
        poll(
            &who,
            &ask,
            &signal,
            notified,
            &mut backoff,
            &deadline,
            first_expiry_ms,
        )
        .await;
    }
}

/// The guard of an admitted member, its validity counted from when the admission was `sent`.
async fn admitted(
    who: &Member,
    token: u64,
    opts: &AcquireOptions,
    sent: Instant,
) -> Result<LockGuard, LockError> {
    let validity = crate::row::lease_validity(opts.ttl);
    let lease = Arc::new(PermitLease(who.clone()));
    GuardParts::leased(
        &who.name,
        &who.client.label,
        token,
        opts,
        sent,
        validity,
        lease,
    )
    .start()
    .await
}

/// Polls without writing until the admission looks worth its write transaction (which every
/// other admission on the name waits for), the earliest lease ends (`first_expiry_ms`) or the
/// wait runs out; a local release (`notified`, enabled before the admission was sent) makes the
/// next poll at once; the place in the queue is refreshed by one statement on the heartbeat
/// (if it is gone, the next admission queues us again).
async fn poll<'s>(
    who: &Member,
    ask: &Ask,
    signal: &'s Notify,
    mut notified: Pin<&mut Notified<'s>>,
    backoff: &mut Backoff,
    deadline: &Deadline,
    first_expiry_ms: Option<i64>,
) {
    let mut heartbeat = Instant::now() + HEARTBEAT;
    let expiry =
        first_expiry_ms.map(|left| Instant::now() + Duration::from_millis(left.max(0) as u64 + 1));
    loop {
        let mut nap = backoff.next_delay();
        if let Some(at) = expiry {
            nap = nap.min(at.saturating_duration_since(Instant::now()));
        }
        tokio::select! {
            // Woken by a local release: check (without writing) whether it is our turn, so a
            // release does not send every local waiter into a write transaction.
            _ = &mut notified => {
                backoff.reset();
                notified.set(signal.notified());
                notified.as_mut().enable();
            }
            _ = deadline.sleep(nap) => {}
        }
        if deadline.expired() || expiry.is_some_and(|at| Instant::now() >= at) {
            return;
        }
        if looks_admissible(&who.client, &who.sql, ask)
            .await
            .unwrap_or(true)
        {
            return;
        }
        if Instant::now() >= heartbeat {
            match who.refresh(WAITER_TTL).await {
                Ok(true) => heartbeat = Instant::now() + HEARTBEAT,
                _ => return,
            }
        }
    }
}

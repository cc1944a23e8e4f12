//! The acquisition loop both topologies share: rounds, the waiter's place in the queue,
//! pub/sub wake-ups, heartbeats, and the guard once a round wins.
//!
//! What a round is differs by topology and lives with it: one script call on one server
//! (`single.rs`), or a quorum round with validity and a fencing write-back (`redlock.rs`).
//! Each supplies [`Rounds`]; [`acquire`] is written once over it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::wait::random_up_to;
use distlock_core::backend::{handoff, CleanupOnDrop, Deadline, GuardParts};
use distlock_core::{AcquireOptions, LockError, LockGuard};
use futures::future::join_all;
use futures::FutureExt;
use redis::RedisResult;
use tokio::time::Instant;

use crate::keys::Keys;
use crate::lease::RedisLease;
use crate::node::{Attempt, Handoff, Node};
use crate::quorum::gather;
use crate::subscriber::{Grant, Subscriber, Waiting};

pub(crate) use distlock_core::backend::{HEARTBEAT, WAITER_TTL};

/// How one acquisition round ended.
pub(crate) enum Round {
    /// Ours, with this fencing token, valid for `validity` from the round's start.
    Acquired { token: u64, validity: Duration },
    /// Not ours. `partial`: a Redlock round that won some masters but no quorum (a split
    /// vote while queues converge), worth retrying at once. `seen`: per node, the fencing
    /// counter the round saw there (`u64::MAX` where it did not answer or was undone, since an
    /// undo also removes a grant that landed before it), so only a grant drawn after the round
    /// counts.
    Held {
        pttl_ms: i64,
        partial: bool,
        seen: Vec<u64>,
    },
}

/// What a topology supplies to [`acquire`]: its round, and the terms its guards live by.
pub(crate) trait Rounds: Sync {
    /// The servers: a waiter subscribes on each, a cancelled attempt is cleaned up on each,
    /// and the guard renews and releases on each.
    fn nodes(&self) -> &Arc<[Node]>;

    /// The backend label used in messages.
    fn label(&self) -> &str;

    /// How many nodes must renew or release a held lock for it to count.
    fn quorum(&self) -> usize;

    /// Each node's reply bound for a lock of `ttl`.
    fn per_node_timeout(&self, ttl: Duration) -> Duration;

    /// How long a lease of `ttl`, granted or renewed at some instant, can be relied on from
    /// that instant (a plain function, so the guard's lease can keep it).
    fn validity(ttl: Duration) -> Duration;

    /// This waiter's place in every queue (`None`: its arrival at the server).
    fn queue_score(&self) -> Option<u64>;

    /// After a round that found the store unavailable, rounds having failed so for
    /// `failing_for`: the pause before the next round, or `None` to give up with the error.
    fn retry_pause(&self, ttl: Duration, failing_for: Duration) -> Option<Duration>;

    /// One acquisition round. Whatever a failed round took is undone before it returns.
    fn round(&self, bid: &Bid<'_>) -> impl Future<Output = Result<Round, LockError>> + Send;

    /// Whose clock floors the fencing token a release draws for the head it hands the lock
    /// to (`node::Handoff`): `None`, each server's own; Redlock, this client's, behind by this
    /// lag (a test hook; zero in use).
    fn clock_lag(&self) -> Option<Duration>;

    /// How long a waiter that fewer nodes than a quorum granted waits for the rest of the
    /// release's grants ([`GRANT_GATHER`]; a single node never waits: one grant is a quorum).
    fn grant_gather(&self) -> Duration {
        GRANT_GATHER
    }

    /// The fencing token of a lock that releases handed us (`grants[i]`: the token node `i`
    /// granted, each drawn after our last round), once a quorum of nodes is known to store it
    /// (Redlock writes it back where the grants differ); `None` when the grants are no quorum
    /// or the token could not be stored on one — the next round then counts the grants.
    fn settle_grants(
        &self,
        bid: &Bid<'_>,
        grants: &[Option<u64>],
    ) -> impl Future<Output = Option<u64>> + Send;
}

/// What every round of one acquisition asks each node.
pub(crate) struct Bid<'a> {
    /// The lock name (for messages).
    pub name: &'a str,
    /// The lock's keys.
    pub keys: &'a Keys,
    /// This acquisition's owner token.
    pub token: &'a str,
    /// The lease asked for.
    pub ttl: Duration,
    /// Join (or refresh a place in) the waiter queue when the lock is held.
    pub queue: bool,
    /// The place in the queue (see [`Rounds::queue_score`]).
    pub score: Option<u64>,
}

impl Bid<'_> {
    /// This bid's acquire script call on `node`, drawing a fencing token of at least `floor`
    /// (`None`: the server's clock).
    pub(crate) async fn on(&self, node: &Node, floor: Option<u64>) -> RedisResult<Attempt> {
        node.acquire(
            self.keys, self.token, self.ttl, self.queue, WAITER_TTL, self.score, floor,
        )
        .await
    }
}

/// The round a quorum of direct grants stands for (`lua/release.lua`): the lock key holds our
/// token with the rest of our queue place as its lease — at least [`WAITER_TTL`] from the start
/// of the round that last refreshed the place, since the server refreshed it after that start
/// (less the topology's drift allowance: `validity`, [`Rounds::validity`] of it). When
/// the caller's lease is shorter than that, or will not be renewed, a validity of zero makes
/// the guard renew to the caller's `ttl` before it is handed out (`GuardParts::start`), so the
/// lease is the caller's from then on; otherwise the guard's first renewal, a third of the
/// way, does it.
fn direct_grant(fence: u64, opts: &AcquireOptions, validity: Duration) -> Round {
    let validity = if opts.ttl < WAITER_TTL || !opts.renew {
        Duration::ZERO
    } else {
        validity
    };
    Round::Acquired {
        token: fence,
        validity,
    }
}

/// Acquires `name` on `rounds` with owner `token`: rounds until one wins, the lock stays
/// held past `opts.wait`, or (`try_only`) the first round finds it held. Waiters queue (FIFO)
/// and sleep until a release message (`subscribers`, one per node) or their heartbeat.
///
/// # Cancel safety
/// Dropping the future removes this attempt's key and queue entries on every node (in the
/// background).
pub(crate) async fn acquire<R: Rounds>(
    rounds: &R,
    subscribers: &[Arc<Subscriber>],
    keys: Keys,
    token: String,
    name: &str,
    opts: &AcquireOptions,
    try_only: bool,
) -> Result<Option<LockGuard>, LockError> {
    let deadline = Deadline::after(opts.wait);
    let per_node = rounds.per_node_timeout(opts.ttl);
    let bid = Bid {
        name,
        keys: &keys,
        token: &token,
        ttl: opts.ttl,
        queue: !try_only,
        score: rounds.queue_score(),
    };
    let mut waits = (!try_only)
        .then(|| already_subscribed(subscribers, &keys.channel, &token))
        .flatten();
    // Whatever an interrupted attempt or a departed waiter left behind is removed.
    let mut armed = cleanup(rounds, &keys, &token);
    let mut first_failure: Option<Instant> = None;
    // Releases that handed us the lock on a quorum of nodes: its fencing token, and when the
    // round that last refreshed our queue places started.
    let mut granted: Option<(u64, Instant)> = None;
    // Per node, the wake-ups without a grant that had reached us when the last round was sent.
    let mut plain_before_round = Vec::new();
    loop {
        let (started, outcome) = if let Some((fence, refreshed)) = granted.take() {
            (
                refreshed,
                direct_grant(fence, opts, R::validity(WAITER_TTL)),
            )
        } else {
            // Read before the round is sent: a wake-up that comes while the round is out is
            // news the round may not have seen (see `gather_grants`); whatever came before, the
            // round sees for itself.
            plain_before_round = waits.as_deref().map_or_else(Vec::new, before_a_round);
            let started = Instant::now();
            let outcome = match rounds.round(&bid).await {
                Err(e @ LockError::Unavailable { .. }) if !try_only => {
                    let failing_for = first_failure.get_or_insert_with(Instant::now).elapsed();
                    retry_after(rounds.retry_pause(opts.ttl, failing_for), &deadline, e).await?;
                    continue;
                }
                other => other?,
            };
            (started, outcome)
        };
        match outcome {
            Round::Acquired {
                token: fence,
                validity,
            } => {
                let made = guard(rounds, &keys, &token, name, fence, opts, started, validity).await;
                match armed.after_grant(made, try_only, &deadline).await {
                    Some(done) => return done,
                    None => continue,
                }
            }
            Round::Held {
                pttl_ms,
                partial,
                seen,
            } => {
                handoff::waited();
                if let Some(done) = armed.after_refusal(try_only, &deadline).await {
                    return done;
                }
                let Some(waits) = waits.as_ref() else {
                    waits =
                        Some(subscribe(rounds, subscribers, &keys.channel, &token, per_node).await);
                    continue;
                };
                let nap = nap(pttl_ms, partial);
                granted = await_release(
                    rounds,
                    &bid,
                    waits,
                    &seen,
                    &plain_before_round,
                    &deadline,
                    nap,
                )
                .await
                .map(|fence| (fence, started));
            }
        }
    }
}

/// Sleeps until a release wakes us or `nap` (bounded by the deadline) ends. Returns the fencing
/// token when the releases that woke us handed us the lock on a quorum of nodes, so no round is
/// needed (`seen`, `plain_before_round`: see [`gather_grants`]).
async fn await_release<R: Rounds>(
    rounds: &R,
    bid: &Bid<'_>,
    waits: &[Waiting],
    seen: &[u64],
    plain_before_round: &[u64],
    deadline: &Deadline,
    nap: Duration,
) -> Option<u64> {
    let woken =
        futures::future::select_all(waits.iter().map(|w| Box::pin(w.wake.notify.notified())));
    tokio::select! {
        _ = woken => {}
        _ = deadline.sleep(nap) => {}
    }
    let (quorum, gather) = (rounds.quorum(), rounds.grant_gather());
    let grants = gather_grants(waits, seen, plain_before_round, quorum, gather).await;
    let fences = one_release(&grants, quorum)?;
    rounds.settle_grants(bid, &fences).await
}

/// The waiter's registrations when every node's channel is subscribed already (other waiters,
/// or a recent one's linger): it then registers before its first round. Otherwise it
/// subscribes only once the lock turns out to be held (a free lock costs one round trip),
/// followed at once by another round so a release in between is not missed.
fn already_subscribed(
    subscribers: &[Arc<Subscriber>],
    channel: &str,
    token: &str,
) -> Option<Vec<Waiting>> {
    subscribers
        .iter()
        .map(|s| s.join_if_subscribed(channel, token))
        .collect()
}

/// Sleeps `pause` before the next round after one that found the store unavailable, or
/// returns its error `e` when the topology gives up (`None`) or the wait is over.
async fn retry_after(
    pause: Option<Duration>,
    deadline: &Deadline,
    e: LockError,
) -> Result<(), LockError> {
    match pause {
        Some(pause) if !deadline.expired() => {
            tokio::time::sleep(pause).await;
            Ok(())
        }
        _ => Err(e),
    }
}

/// What removes an interrupted attempt's or a departed waiter's traces on every node. On each
/// node the queue is left first: a release can then no longer grant us the lock, and a grant
/// that landed before is given back (passed on) by the release after it — one release for
/// every node, as a holder's is.
fn cleanup<R: Rounds>(rounds: &R, keys: &Keys, token: &str) -> CleanupOnDrop {
    let (nodes, keys, token, lag) = (
        Arc::clone(rounds.nodes()),
        keys.clone(),
        token.to_owned(),
        rounds.clock_lag(),
    );
    CleanupOnDrop::new(move || {
        Box::pin(async move {
            let handoff = Handoff::new(lag);
            let (keys, token) = (&keys, &token);
            join_all(nodes.iter().map(|n| async move {
                let _ = n.leave(keys, token).await;
                let _ = n.release(keys, token, handoff).await;
            }))
            .await;
        })
    })
}

/// The guard of a won round: its lease renews and releases on every node with the quorum of
/// the topology.
#[allow(clippy::too_many_arguments)]
async fn guard<R: Rounds>(
    rounds: &R,
    keys: &Keys,
    token: &str,
    name: &str,
    fence: u64,
    opts: &AcquireOptions,
    started: Instant,
    validity: Duration,
) -> Result<LockGuard, LockError> {
    let lease = RedisLease {
        nodes: Arc::clone(rounds.nodes()),
        keys: keys.clone(),
        token: token.to_owned(),
        quorum: rounds.quorum(),
        validity: R::validity,
        name: name.to_owned(),
        label: rounds.label().to_owned(),
        per_node_timeout: rounds.per_node_timeout(opts.ttl),
        clock_lag: rounds.clock_lag(),
    };
    GuardParts::leased(
        name,
        rounds.label(),
        fence,
        opts,
        started,
        validity,
        Arc::new(lease),
    )
    .start()
    .await
}

/// How long a waiter sleeps unless a release wakes it: until the holder's lease runs out (with
/// up to 3 ms of jitter), at most a [`HEARTBEAT`]; after a `partial` round (some masters
/// granted, others had not yet seen the release, woken by the first master's message, or list
/// an older waiter still in flight) at most ~2 ms: the queues converge within a round trip or
/// two.
pub(crate) fn nap(pttl_ms: i64, partial: bool) -> Duration {
    let until_expiry = match u64::try_from(pttl_ms) {
        Ok(ms) => Duration::from_millis(ms) + random_up_to(Duration::from_millis(3)),
        Err(_) => HEARTBEAT,
    };
    let nap = until_expiry.min(HEARTBEAT);
    if partial {
        return nap.min(Duration::from_micros(500) + random_up_to(Duration::from_millis(2)));
    }
    nap
}

/// Joins `channel`'s waiters on every node as `token`, once a quorum of nodes confirmed the
/// subscription (the others go on subscribing in tasks of their own: a stalled node's
/// wake-ups may be missed, the quorum's are not).
async fn subscribe<R: Rounds>(
    rounds: &R,
    subscribers: &[Arc<Subscriber>],
    channel: &str,
    token: &str,
    per_node: Duration,
) -> Vec<Waiting> {
    let joined = subscribers.iter().map(|s| s.join(channel, token)).collect();
    // The pub/sub connection is not the node's command connection: its outcome says nothing
    // of the stalled mark.
    let confirmations = rounds.nodes().iter().zip(subscribers).map(|(n, s)| {
        let subscription = s.subscription(n.client(), channel.to_owned(), per_node);
        Some(tokio::spawn(async move {
            matches!(subscription.await, Ok(true))
        }))
    });
    let quorum = rounds.quorum();
    let confirmed = |r: &[Option<Result<bool, tokio::task::JoinError>>]| {
        r.iter().filter(|c| matches!(c, Some(Ok(true)))).count() >= quorum
    };
    gather(rounds.nodes(), confirmations, confirmed).await;
    joined
}

/// How long a waiter that some nodes granted the lock waits for the other grants of the same
/// release before it runs a round of its own (Redlock: the releaser sends to every master at
/// once, so their messages arrive close together — within a few ms on a quiet machine, but a
/// clean-clone test run on two busy cores once spread them past 5 ms). The wait ends early
/// when a quorum of grants is in, or a round is known to win (see [`gather_grants`]); it runs
/// out only when neither comes.
pub(crate) const GRANT_GATHER: Duration = Duration::from_millis(50);

/// Clears what reached `waits` before a round is sent — a stored wake-up (else it would end the
/// nap after the round at once, a round more for each) and a grant (the round takes a key
/// that holds our token, or undoes it) — and returns, per node, the count of wake-ups without
/// a grant so far: one counted after it came while the round was out.
fn before_a_round(waits: &[Waiting]) -> Vec<u64> {
    waits
        .iter()
        .map(|w| {
            let _ = w.wake.notify.notified().now_or_never();
            let _ = w.wake.take_grant();
            w.wake.plain_wakeups()
        })
        .collect()
}

/// Per node, the grant a release handed us there since our last round, if any. Only a grant
/// drawn after the round ran counts (its token is above the counter the round saw there,
/// `seen`): the round refreshed our place, so the grant's lease — the rest of the place — lasts
/// at least [`WAITER_TTL`] from the round's start. An older grant (one that landed while the
/// round was on its way, and lapsed or was taken back) is dropped.
///
/// Once some nodes granted in one release and fewer than `quorum`, the others' messages are
/// awaited for up to `gather` ([`GRANT_GATHER`]), unless a round is known to win now, or the
/// gather to fail:
/// * the nodes whose keys hold our token and those that said the lock is free reach a quorum:
///   the counted grants of every release (an earlier release granted us on some nodes, a later
///   holder's release on others and found the first ones' keys ours and left them; grants of
///   different releases never make the lock by themselves, since a token drawn before a later
///   holder's could be below it) and the nodes without a grant that woke us without one since
///   the round was sent (`plain_before_round`, per node: a message naming us, or an empty one,
///   says the lock is free there with nobody ahead of us). A wake-up that came while the round
///   was out counts: the round may not have seen it. Tests in `tests/redlock_grant.rs`; seen in
///   the benchmark as a head four masters had granted running its next round ~50 ms later;
/// * a grant came that cannot be counted (a node our round undid grants us: the key there may
///   be ours, but its counter is unknown; seen in the same benchmark as a head holding a
///   quorum of masters unknowingly for 50 ms while the other process waited);
/// * the nodes that listed us can no longer make a quorum of this release (the round's undone
///   nodes were freed by the undo itself and send no grant: seen there as a head gathering
///   50 ms beside two free masters).
///
/// A wake-up without a grant that makes no quorum with the grants does not end the gather: a
/// round then would win too few nodes and undo the grants it has.
async fn gather_grants(
    waits: &[Waiting],
    seen: &[u64],
    plain_before_round: &[u64],
    quorum: usize,
    gather: Duration,
) -> Vec<Option<Grant>> {
    let mut grants = vec![None; waits.len()];
    // Whether a grant came that cannot be counted from a node our round undid (its counter
    // unknown): the key there may hold our token now, which a round takes at once. (A grant
    // at or below a counter the round did see was drawn before the round looked, when the key
    // was not ours: void, and no reason to stop.)
    let mut uncounted = false;
    // The grants of the release with the most; and whether a round is known to win now (see
    // above) or a grant came that cannot be counted.
    let mut take = |grants: &mut Vec<Option<Grant>>| {
        for ((g, w), &s) in grants.iter_mut().zip(waits).zip(seen) {
            match w.wake.take_grant() {
                Some(grant) if grant.fence > s => *g = Some(grant),
                Some(_) if s == u64::MAX => uncounted = true,
                Some(_) => {}
                None => {}
            }
        }
        let ours = grants.iter().flatten().count();
        let free = grants
            .iter()
            .zip(waits)
            .zip(plain_before_round)
            .filter(|((g, w), &before)| g.is_none() && w.wake.plain_wakeups() > before)
            .count();
        (
            largest_release(grants).map_or(0, |(_, n)| n),
            uncounted || ours + free >= quorum,
        )
    };
    // Only a node where the round found the lock held (it listed us there, `seen` known) can
    // still grant us in this release; nodes it won and undid, or that did not answer, cannot.
    let reachable = |grants: &[Option<Grant>], have: usize| {
        have + grants
            .iter()
            .zip(seen)
            .filter(|(g, &s)| g.is_none() && s != u64::MAX)
            .count()
            >= quorum
    };
    let (mut have, mut stop) = take(&mut grants);
    let until = Instant::now() + gather;
    while have > 0 && have < quorum && !stop && reachable(&grants, have) && Instant::now() < until {
        let woken =
            futures::future::select_all(waits.iter().map(|w| Box::pin(w.wake.notify.notified())));
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        (have, stop) = take(&mut grants);
    }
    grants
}

/// The release that granted us on the most nodes, and on how many.
fn largest_release(grants: &[Option<Grant>]) -> Option<(Option<u64>, usize)> {
    grants
        .iter()
        .flatten()
        .map(|g| {
            let n = grants
                .iter()
                .flatten()
                .filter(|o| o.release == g.release)
                .count();
            (g.release, n)
        })
        .max_by_key(|&(_, n)| n)
}

/// Per node, the fencing token one release granted us there, when that release granted us on
/// a quorum of nodes (grants of different releases never make a quorum together: a grant a
/// release drew before a later holder stored its token on that node could carry a token below
/// it); `None` otherwise.
fn one_release(grants: &[Option<Grant>], quorum: usize) -> Option<Vec<Option<u64>>> {
    let (release, n) = largest_release(grants)?;
    (n >= quorum).then(|| {
        grants
            .iter()
            .map(|g| g.filter(|g| g.release == release).map(|g| g.fence))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::one_release;
    use crate::subscriber::Grant;

    #[test]
    fn a_quorum_of_grants_comes_from_one_release() {
        let g = |fence, release| Some(Grant { fence, release });
        // Single instance: its one grant.
        assert_eq!(one_release(&[g(5, None)], 1), Some(vec![Some(5)]));
        assert_eq!(one_release(&[None], 1), None);
        // Three of five from one release.
        assert_eq!(
            one_release(
                &[g(9, Some(1)), None, g(9, Some(1)), g(9, Some(1)), None],
                3
            ),
            Some(vec![Some(9), None, Some(9), Some(9), None])
        );
        // Three of five, but from two releases: no quorum.
        assert_eq!(
            one_release(
                &[g(9, Some(1)), g(4, Some(2)), g(9, Some(1)), None, None],
                3
            ),
            None
        );
        // The release with a quorum wins; the other's grant is left out.
        assert_eq!(
            one_release(
                &[
                    g(9, Some(1)),
                    g(4, Some(2)),
                    g(9, Some(1)),
                    g(9, Some(1)),
                    None
                ],
                3
            ),
            Some(vec![Some(9), None, Some(9), Some(9), None])
        );
    }
}

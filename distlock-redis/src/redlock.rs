//! [`Redlock`]: the quorum path (`redlock://h1:p1,h2:p2,h3:p3`) — where a round counts its
//! quorum, computes its validity and settles its fencing token.
//!
//! # A round
//! The acquire script goes to all N masters concurrently, each reply bounded by a quarter of
//! the lease (capped by `timeout`). The round is won when
//! * at least a quorum (N/2 + 1) granted,
//! * the fencing token above every counter heard of is stored on a quorum (`redlock/fence.rs`),
//! * and validity remains after both: `ttl − elapsed − drift`, drift = ttl·1% + 2 ms.
//!
//! The guard then counts `ttl − drift` from the round's start. A round that is not won is
//! undone before anyone retries on every master that granted it or did not answer (not where
//! another holder's key stood); one that found fewer than a quorum of masters answering is
//! retried after a random pause for up to half a lease, then reported `Unavailable`.
//!
//! # Queue order
//! Every master orders its queue by the waiter's own arrival time (the same score
//! everywhere), so the same waiter heads every queue and wins a quorum; a split round (some
//! masters granted, others had not yet seen the release) is retried within ~2 ms. Clock skew
//! between clients bends the order, never safety.
//!
//! # Handoff
//! A holder's release hands the lock to the head of each master's queue (`lua/release.lua`),
//! every grant's token drawn above one reading of the releasing client's clock, so masters whose
//! counters agree grant one token. The head holds once a quorum of grants reached it
//! ([`Rounds::settle_grants`]: the token is stored on a quorum — written back where the grants
//! differ — before the lock counts as held), with no round of its own; fewer grants are counted
//! by its next round. A round that missed its quorum undoes itself without granting, and after
//! an undo (which would also have removed a grant that landed meanwhile) no earlier grant
//! counts.

mod fence;

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::wait::random_up_to;
use distlock_core::LockError;
use futures::future::join_all;
use tokio::time::Instant;

use self::fence::{write_back, Fence};
use crate::acquire::{Bid, Round, Rounds, GRANT_GATHER, WAITER_TTL};
use crate::clock;
use crate::config::RedisConfig;
use crate::keys::Keys;
use crate::node::{Attempt, Foreign, Node};
use crate::quorum::gather;

/// Redlock's clock-drift allowance: ttl·1% + 2 ms.
fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// N independent masters, quorum N/2 + 1.
pub(crate) struct Redlock {
    /// The masters (shared with every guard: a guard does not copy them).
    nodes: Arc<[Node]>,
    quorum: usize,
    /// Bound on each reply (further capped per round by the lease).
    timeout: Duration,
    /// Test hook: this client's clock runs this far behind.
    clock_behind: Duration,
    /// How long a waiter some masters granted waits for the rest (`acquire::GRANT_GATHER`
    /// unless a test hook says otherwise).
    grant_gather: Duration,
    label: String,
}

impl Redlock {
    /// Connects to every master; at least a quorum must answer now, the others are retried on
    /// every later call. A master that refuses the credentials or may evict lock keys fails
    /// the connect even while a quorum of others answered.
    pub(crate) async fn connect(cfg: &RedisConfig, label: &str) -> Result<Self, LockError> {
        let mut checks = join_all((0..cfg.nodes.len()).map(|i| Node::connect(cfg, i, label))).await;
        let up = checks.iter().filter(|c| c.is_ok()).count();
        if let Some(i) = checks
            .iter()
            .position(|c| matches!(c, Err(LockError::InvalidConfig { .. })))
        {
            return Err(checks.swap_remove(i).err().unwrap_or_else(|| {
                LockError::invalid_config("a Redlock master refused the configuration")
            }));
        }
        if up < cfg.quorum() {
            return Err(LockError::unavailable(
                label,
                None,
                format!(
                    "only {up} of {} Redlock masters answered; a quorum of {} is needed",
                    cfg.nodes.len(),
                    cfg.quorum()
                ),
                None,
            ));
        }
        for (i, c) in checks.iter().enumerate() {
            if let Err(e) = c {
                tracing::warn!(backend = %label, server = %cfg.nodes[i], error = %e, "Redlock master unreachable at connect; retried on every call");
            }
        }
        // Keep the connections that answered; the others reconnect lazily on later calls.
        let nodes = checks
            .into_iter()
            .enumerate()
            .map(|(i, c)| c.or_else(|_| Node::lazy(cfg, i, label)))
            .collect::<Result<Vec<_>, _>>()?
            .into();
        Ok(Redlock {
            nodes,
            quorum: cfg.quorum(),
            timeout: cfg.timeout,
            clock_behind: cfg.test_hooks.clock_behind,
            grant_gather: cfg.test_hooks.grant_gather.unwrap_or(GRANT_GATHER),
            label: label.to_owned(),
        })
    }

    /// The client's clock in µs: the token floor of a round and a waiter's queue score.
    fn now_us(&self) -> u64 {
        clock::now_us(self.clock_behind)
    }

    /// Releases whatever a failed round took, on the masters `on` names (each bounded by `t`),
    /// granting nothing: the head is woken for a round of its own.
    ///
    /// A stalled master's undo runs in a task of its own, not waited for: it goes out on its
    /// connection ahead of this client's next round there, and a key it did not reach runs out
    /// with its lease anyway.
    async fn undo(&self, keys: &Keys, token: &str, t: Duration, on: &[bool]) {
        let calls = (self.nodes.iter().zip(on)).map(|(node, &on)| {
            if on && node.is_stalled() {
                let (node, keys, token) = (node.clone(), keys.clone(), token.to_owned());
                tokio::spawn(async move { node.within(t, node.undo(&keys, &token)).await });
                return None;
            }
            on.then(|| node.within(t, node.undo(keys, token)))
        });
        gather(&self.nodes, calls, |_| false).await;
    }

    /// Undoes a failed round before anyone retries, on every master that granted or did not
    /// answer (its reply may have been lost) — not where someone else held the lock when the
    /// round ran (`held`), which has no key of ours (a grant it hands us since is drawn above
    /// the counter `seen` keeps for it, and counts). An undo also removes any grant a holder's
    /// release handed us meanwhile (the key then holds our token), so no grant drawn so far on
    /// an undone master may count: `seen` knows no counter there until the next round.
    async fn undo_failed(
        &self,
        keys: &Keys,
        token: &str,
        t: Duration,
        held: &[bool],
        seen: &mut [u64],
    ) {
        let undo_on: Vec<bool> = held.iter().map(|h| !h).collect();
        if undo_on.contains(&true) {
            self.undo(keys, token, t, &undo_on).await;
            for (s, _) in seen.iter_mut().zip(&undo_on).filter(|(_, &u)| u) {
                *s = u64::MAX;
            }
        }
    }

    /// The error of a round that fewer masters than a quorum answered.
    fn too_few(
        &self,
        name: &str,
        answered: usize,
        last_err: Option<redis::RedisError>,
    ) -> LockError {
        let quorum = self.quorum;
        tracing::warn!(backend = %self.label, name, answered, masters = self.nodes.len(), quorum, "Redlock round missed quorum: too few masters answered");
        LockError::unavailable(
            &self.label,
            Some(name),
            format!(
                "only {answered} of {} masters answered; a quorum of {quorum} is needed{}",
                self.nodes.len(),
                last_err.map_or_else(String::new, |e| format!(" (last error: {e})"))
            ),
            None,
        )
    }
}

impl Rounds for Redlock {
    fn nodes(&self) -> &Arc<[Node]> {
        &self.nodes
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn quorum(&self) -> usize {
        self.quorum
    }

    /// A quarter of the lease (capped by `timeout`), so a dead master cannot eat the lease
    /// (acquire + token write-back take at most half of it) while a slow link (e.g. 100 ms
    /// round trips under a 1 s lease) still gets its answers counted; and at most a quarter of
    /// a waiter's queue place, so the round that learns a master is stalled (by its timeout)
    /// never lets the place lapse and a later waiter overtake.
    fn per_node_timeout(&self, ttl: Duration) -> Duration {
        self.timeout
            .min((ttl / 4).min(WAITER_TTL / 4).max(Duration::from_millis(10)))
    }

    /// `ttl − drift`: each master expires the key by its own clock, which may run faster than
    /// ours by up to the drift over a lease.
    fn validity(ttl: Duration) -> Duration {
        ttl.saturating_sub(drift(ttl))
    }

    /// The waiter's own arrival time, the same on every master.
    fn queue_score(&self) -> Option<u64> {
        Some(self.now_us())
    }

    /// Rounds that missed a quorum of answers are retried after 20–100 ms for up to half a
    /// lease.
    fn retry_pause(&self, ttl: Duration, failing_for: Duration) -> Option<Duration> {
        (failing_for < ttl / 2)
            .then(|| Duration::from_millis(20) + random_up_to(Duration::from_millis(80)))
    }

    /// The built-in gather, or a test hook's.
    fn grant_gather(&self) -> Duration {
        self.grant_gather
    }

    /// One reading of this client's clock floors the token every master grants.
    fn clock_lag(&self) -> Option<Duration> {
        Some(self.clock_behind)
    }

    /// A quorum of masters granted: the token is the highest granted (each master drew it
    /// above its own counter, and a quorum overlaps the quorum that stores any earlier token),
    /// stored on a quorum before the lock counts as held — the masters that granted exactly
    /// it, and where they are too few, the write-back elsewhere (`redlock/fence.rs`). We stay
    /// listed in the queues until our release takes us out.
    async fn settle_grants(&self, bid: &Bid<'_>, grants: &[Option<u64>]) -> Option<u64> {
        if grants.iter().flatten().count() < self.quorum {
            return None;
        }
        let fence = Fence::settle(grants, &[]);
        let t = self.per_node_timeout(bid.ttl);
        let stored = write_back(&self.nodes, bid.keys, bid.token, &fence, self.quorum, t).await;
        (stored >= self.quorum).then_some(fence.token)
    }

    async fn round(&self, bid: &Bid<'_>) -> Result<Round, LockError> {
        let (name, keys, token, ttl) = (bid.name, bid.keys, bid.token, bid.ttl);
        let started = Instant::now();
        let t = self.per_node_timeout(ttl);
        // One token floor for the whole round, so masters whose counters agree grant the same
        // token (the fast path in redlock/fence.rs).
        let floor = Some(self.now_us());
        // Every master that answers is waited for (the round queues us there, and may find
        // foreign data); a stalled one only briefly.
        let calls = (self.nodes.iter()).map(|node| Some(node.within(t, bid.on(node, floor))));
        let results = gather(&self.nodes, calls, |_| false).await;
        let Tally {
            granted,
            counters,
            mut seen,
            held,
            pttl,
            answered,
            last_err,
            foreign,
        } = Tally::of(results, &self.nodes, &self.label, name, t);
        let grants = granted.iter().flatten().count();
        if let Some(f) = foreign {
            // Another application's data at one of the lock's keys: no lock here. Whatever
            // other masters granted is undone before the error is returned.
            if grants > 0 {
                self.undo(keys, token, t, &vec![true; self.nodes.len()])
                    .await;
            }
            return Err(LockError::backend(
                &self.label,
                Some(name),
                f.describe(keys),
                None,
            ));
        }
        let quorum = self.quorum;
        // Quorum, validity = ttl − elapsed − drift, and the fencing token above every counter
        // heard of, stored on a quorum before the lock counts as held (see redlock/fence.rs).
        let valid = || {
            !ttl.saturating_sub(started.elapsed())
                .saturating_sub(drift(ttl))
                .is_zero()
        };
        if grants >= quorum && valid() {
            let fence = Fence::settle(&granted, &counters);
            let stored = write_back(&self.nodes, keys, token, &fence, quorum, t).await;
            if stored >= quorum && valid() {
                return Ok(Round::Acquired {
                    token: fence.token,
                    validity: Self::validity(ttl),
                });
            }
        }
        self.undo_failed(keys, token, t, &held, &mut seen).await;
        if answered < quorum {
            return Err(self.too_few(name, answered, last_err));
        }
        if grants > 0 {
            tracing::debug!(backend = %self.label, name, grants, quorum, elapsed = ?started.elapsed(), "Redlock round missed quorum (split vote, or validity ran out); undone");
        }
        Ok(Round::Held {
            pttl_ms: if pttl == i64::MAX { 0 } else { pttl },
            // Worth a quick retry only while a quorum is still within reach: when a quorum of
            // masters holds the lock for someone else (a holder on a bare quorum, the others
            // free), the next round could only split again — wait for a release instead.
            partial: grants > 0 && held.iter().filter(|&&h| h).count() < quorum,
            seen,
        })
    }
}

/// What the masters answered one round.
struct Tally {
    /// Per master: the token it drew if it granted.
    granted: Vec<Option<u64>>,
    /// The counters of the masters that answered without granting.
    counters: Vec<u64>,
    /// Per master: the counter the round left there (no answer: none known, `u64::MAX`).
    seen: Vec<u64>,
    /// Per master: it answered that someone else holds the lock (no key of ours to undo there).
    held: Vec<bool>,
    /// The shortest remaining lease among the masters that hold it for someone else
    /// (`i64::MAX`: none).
    pttl: i64,
    /// How many masters answered at all.
    answered: usize,
    last_err: Option<redis::RedisError>,
    /// Another application's data at one of the lock's keys, on some master.
    foreign: Option<Foreign>,
}

impl Tally {
    fn of(
        results: Vec<Option<Result<redis::RedisResult<Attempt>, tokio::time::error::Elapsed>>>,
        nodes: &[Node],
        label: &str,
        name: &str,
        t: Duration,
    ) -> Tally {
        let n = nodes.len();
        let mut tally = Tally {
            granted: vec![None; n],
            counters: Vec::new(),
            seen: vec![u64::MAX; n],
            held: vec![false; n],
            pttl: i64::MAX,
            answered: 0,
            last_err: None,
            foreign: None,
        };
        for (i, (r, node)) in results.into_iter().zip(nodes).enumerate() {
            // Not waited for: it is stalled.
            let Some(r) = r else { continue };
            tally.answered += usize::from(matches!(r, Ok(Ok(_))));
            match r {
                Ok(Ok(Attempt::Acquired { token })) => tally.granted[i] = Some(token),
                // The shortest remaining lease among the masters that have one (a master
                // without the key, or one that never expires it, says nothing about when the
                // holder's quorum runs out).
                Ok(Ok(Attempt::Held { pttl_ms, counter })) => {
                    tally.pttl = shortest_pttl(tally.pttl, pttl_ms);
                    tally.counters.push(counter);
                    tally.seen[i] = counter;
                    tally.held[i] = true;
                }
                Ok(Ok(Attempt::Foreign(f))) => tally.foreign = Some(f),
                // Redlock takes no `replicas=` (RedisConfig::validate): never seen here.
                Ok(Ok(Attempt::Unacknowledged { .. })) => {}
                Ok(Err(e)) => {
                    tracing::debug!(backend = %label, server = %node.addr(), name, error = %e, "Redlock master failed the acquire round");
                    tally.last_err = Some(e);
                }
                Err(_) => {
                    tracing::debug!(backend = %label, server = %node.addr(), name, timeout = ?t, "Redlock master did not answer the acquire round in time");
                }
            }
        }
        tally
    }
}

/// Folds one master's remaining lease `q` (ms; negative: no key, or a key that never expires)
/// into the round's shortest so far `acc` (`i64::MAX` before any reply): the shortest
/// non-negative lease wins; a negative one stands only while no master reported any other.
fn shortest_pttl(acc: i64, q: i64) -> i64 {
    match (acc, q) {
        (i64::MAX, q) => q,
        (acc, q) if q < 0 => acc,
        (acc, q) if acc < 0 => q,
        (acc, q) => acc.min(q),
    }
}

#[cfg(test)]
mod tests {
    use super::shortest_pttl;

    #[test]
    fn the_shortest_known_lease_wins_and_unknown_ones_only_stand_alone() {
        let fold = |v: &[i64]| v.iter().fold(i64::MAX, |acc, &q| shortest_pttl(acc, q));
        assert_eq!(fold(&[]), i64::MAX);
        assert_eq!(fold(&[500, 200, 900]), 200);
        assert_eq!(fold(&[-2, 300, -1, 100]), 100);
        assert_eq!(fold(&[300, -2]), 300);
        assert_eq!(fold(&[-2, -1]), -2);
    }
}

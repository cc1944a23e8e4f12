//! Redlock fencing: the token a won round settles on, and the write-back that makes a quorum
//! store it before the lock counts as held.
//!
//! # The rule
//! Every master that grants draws `max(counter + 1, floor)` (one client-clock floor per round),
//! every master that does not grant reports its counter. The round's token `t` is above all of
//! them: `t = max(every granted token, every reported counter + 1)`. The lock counts as held
//! only once a quorum is known to store a counter ≥ `t`: the masters that granted exactly `t`,
//! plus those that confirmed the write-back (`SET counter max(counter, t)`, sent to every
//! master that does not store `t` yet). Fast path: when a quorum granted exactly `t` (their
//! counters agreed, so the shared floor gave them one token), no write-back is sent at all —
//! the lagging counters stay behind, which the argument below allows for, and a holder still
//! listed in a master's queue leaves it with its release.
//!
//! # What Redlock fencing assumes
//! A token `t` is stored on a quorum `Q` before its lock counts as held. A later round that
//! wins the lock hears from a set `S` of masters (at least the quorum that granted it), and
//! `S` and `Q` share at least one master (two majorities of the same N overlap). If that master
//! still has its counter, the later token is above `t`: a granting master draws at least
//! `counter + 1`, a holding one reports its counter and the token is set above it.
//!
//! So tokens strictly increase as long as, between two acquisitions, no master in that overlap
//! loses its counter (a restart without persistence, `FLUSHALL`, an evicted key, a failover to
//! a replica that had not received it). Masters that answer but hold the lock for someone else
//! count too (their reported counters are used): a round hearing from `s` masters overlaps `Q`
//! in at least `s + quorum − N`, so with every master answering up to `quorum − 1` lost
//! counters are survived, with a bare quorum answering none (N = 5: 2 and 0). Beyond that
//! only the floor keeps tokens rising, and the floor is the acquiring client's clock in µs:
//! tokens then rise only if that clock is not behind the clocks of the earlier holders at
//! their acquisitions. While the counters survive, nothing is assumed about client clocks.
//!
//! # Grants
//! A head that holds on the grants of a holder's release (`Rounds::settle_grants`) settles its
//! token by the same rule over the grants alone: every grant was drawn `max(counter + 1,
//! floor)` by a master the release reached after the holder's token was stored on a quorum, so
//! the granting quorum overlaps that quorum and the token is above it. Only grants of one
//! release count together (each release's messages carry one random id): a grant drawn before
//! a later holder stored its token on that master could carry a token below it.
//!
//! Mutual exclusion has its own assumptions (bounded drift, restarted masters staying down for
//! a lease; see the crate docs); fencing is what protects the resource when those fail.

use std::time::Duration;

use tokio::sync::mpsc;

use crate::keys::Keys;
use crate::node::Node;

/// The token a won round settles on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Fence {
    /// Above every counter any master reported in the round.
    pub token: u64,
    /// Per master: whether it is already known to store a counter ≥ `token` (it granted
    /// exactly `token`).
    pub stored: Vec<bool>,
}

impl Fence {
    /// `granted[i]`: master `i`'s drawn token if it granted; `counters`: the counters reported by
    /// the masters that answered without granting.
    pub(crate) fn settle(granted: &[Option<u64>], counters: &[u64]) -> Fence {
        let drawn = granted.iter().flatten().copied().max().unwrap_or(0);
        let above = counters
            .iter()
            .map(|c| c.saturating_add(1))
            .max()
            .unwrap_or(0);
        let token = drawn.max(above);
        Fence {
            token,
            stored: granted.iter().map(|g| *g == Some(token)).collect(),
        }
    }

    /// How many masters are known to store the token already.
    pub(crate) fn stored_on(&self) -> usize {
        self.stored.iter().filter(|s| **s).count()
    }
}

/// Stores `fence` on a quorum: nothing to send when a quorum granted exactly its token
/// already (the lagging counters may stay behind: any later round overlaps that quorum, and a
/// holder still listed in a queue leaves it with its release, `lua/release.lua`). Otherwise the
/// write-back (raise the counter, leave the queue) goes to every master that does not store the
/// token yet, each bounded by `per_node`. Returns how many masters are then known to store a
/// counter ≥ the token: as soon as confirmations make a quorum (the other write-backs go on in
/// the background), or when every write-back has answered or timed out.
pub(crate) async fn write_back(
    nodes: &[Node],
    keys: &Keys,
    owner: &str,
    fence: &Fence,
    quorum: usize,
    per_node: Duration,
) -> usize {
    let mut stored = fence.stored_on();
    if stored >= quorum {
        return stored;
    }
    let (tx, mut rx) = mpsc::unbounded_channel();
    for (i, n) in nodes.iter().enumerate() {
        if fence.stored[i] {
            continue;
        }
        let (n, keys, owner, tx, token) = (
            n.clone(),
            keys.clone(),
            owner.to_owned(),
            tx.clone(),
            fence.token,
        );
        tokio::spawn(async move {
            let r = tokio::time::timeout(per_node, n.writeback(&keys, token, &owner)).await;
            let _ = tx.send((i, matches!(r, Ok(Ok(Ok(c))) if c >= token)));
        });
    }
    drop(tx);
    while stored < quorum {
        match rx.recv().await {
            Some((i, true)) if !fence.stored[i] => stored += 1,
            Some(_) => {}
            None => break,
        }
    }
    stored
}

#[cfg(test)]
mod tests {
    use super::Fence;

    #[test]
    fn the_token_is_above_every_counter_heard_of() {
        // All granted alike: a quorum stores it already (fast path).
        let f = Fence::settle(&[Some(100), Some(100), Some(100), None, None], &[]);
        assert_eq!((f.token, f.stored_on()), (100, 3));
        // A holding master remembers a higher counter: the token goes above it, and nobody
        // stores it yet.
        let f = Fence::settle(&[Some(5), None, None, Some(5), Some(5)], &[900, 900]);
        assert_eq!((f.token, f.stored_on()), (901, 0));
        // Granting masters disagree: the highest wins, stored only where it was drawn.
        let f = Fence::settle(&[Some(7), Some(9), Some(7)], &[3]);
        assert_eq!(
            (f.token, f.stored_on(), f.stored),
            (9, 1, vec![false, true, false])
        );
        assert_eq!(Fence::settle(&[None], &[]).token, 0);
        assert_eq!(Fence::settle(&[None], &[u64::MAX]).token, u64::MAX);
    }
}

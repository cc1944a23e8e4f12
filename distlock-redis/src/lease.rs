//! [`RedisLease`]: renew and release one held lock on one node (single) or a quorum (Redlock).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::Lease;
use distlock_core::LockError;
use tokio::time::Instant;

use crate::error::map;
use crate::keys::Keys;
use crate::node::{Foreign, Handoff, Node};
use crate::quorum::gather;

/// The store side of a Redis guard.
pub(crate) struct RedisLease {
    /// The topology's nodes, shared (not copied) by every guard.
    pub nodes: Arc<[Node]>,
    pub keys: Keys,
    pub token: String,
    pub quorum: usize,
    /// How long a renewal vouches for (the topology's rule: see `Rounds::validity`).
    pub validity: fn(Duration) -> Duration,
    pub name: String,
    pub label: String,
    pub per_node_timeout: Duration,
    /// Whose clock floors the token a release grants the next waiter (`Rounds::clock_lag`).
    pub clock_lag: Option<Duration>,
}

/// One node's answer to a release or extend, bounded by the per-node timeout.
pub(crate) type NodeReply =
    Result<redis::RedisResult<Result<bool, Foreign>>, tokio::time::error::Elapsed>;

/// Per-node outcomes of one release or extend round.
#[derive(Default)]
pub(crate) struct Tally {
    /// Nodes that did it.
    pub yes: usize,
    /// Nodes where the lock was not ours (foreign data included).
    pub no: usize,
    /// Nodes that failed or did not answer in time.
    pub errors: usize,
    /// The last node error.
    pub last_err: Option<redis::RedisError>,
    /// Foreign data a node reported (it then changed nothing).
    pub foreign: Option<Foreign>,
}

pub(crate) fn tally<'a>(results: impl IntoIterator<Item = &'a NodeReply>) -> Tally {
    let mut t = Tally::default();
    for r in results {
        match r {
            Ok(Ok(Ok(true))) => t.yes += 1,
            Ok(Ok(Ok(false))) => t.no += 1,
            Ok(Ok(Err(f))) => {
                t.no += 1;
                t.foreign = Some(f.clone());
            }
            Ok(Err(e)) => {
                t.errors += 1;
                t.last_err = Some(e.clone());
            }
            Err(_) => t.errors += 1,
        }
    }
    t
}

impl RedisLease {
    fn unavailable(&self, what: &str, yes: usize, err: Option<redis::RedisError>) -> LockError {
        match err {
            Some(e) if self.nodes.len() == 1 => map(e, &self.label, Some(&self.name)),
            _ => LockError::unavailable(
                &self.label,
                Some(&self.name),
                format!(
                    "{what} reached only {yes} of {} nodes (quorum {})",
                    self.nodes.len(),
                    self.quorum
                ),
                None,
            ),
        }
    }
}

#[async_trait]
impl Lease for RedisLease {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        let started = Instant::now();
        let t = self.per_node_timeout;
        let calls = (self.nodes.iter())
            .map(|node| Some(node.within(t, node.extend(&self.keys, &self.token, ttl))));
        // Every master that answers is renewed and waited for; a stalled one only briefly.
        let results = gather(&self.nodes, calls, |_| false).await;
        let Tally {
            yes,
            no,
            last_err,
            foreign,
            ..
        } = tally(results.iter().flatten());
        if yes >= self.quorum {
            let validity = (self.validity)(ttl);
            if started.elapsed() < validity {
                return Ok(Some(validity));
            }
        }
        if no > self.nodes.len() - self.quorum {
            tracing::debug!(name = %self.name, backend = %self.label, renewed = yes, refused = no, nodes = self.nodes.len(), "renewal refused: the lock is no longer ours");
            return Err(LockError::not_held(
                &self.name,
                &self.label,
                foreign.map_or_else(
                    || "the key is gone or holds another token".to_owned(),
                    |f| f.describe(&self.keys),
                ),
            ));
        }
        tracing::debug!(name = %self.name, backend = %self.label, renewed = yes, refused = no, quorum = self.quorum, nodes = self.nodes.len(), "renewal reached too few nodes, or too late");
        Err(self.unavailable("renewal", yes, last_err))
    }

    async fn release(&self) -> Result<(), LockError> {
        let t = self.per_node_timeout;
        // One handoff for every node: nodes whose counters agree grant the next waiter one
        // token, and it counts their grants as one release's.
        let handoff = Handoff::new(self.clock_lag);
        let (keys, token) = (
            Arc::new(self.keys.clone()),
            Arc::<str>::from(self.token.as_str()),
        );
        // Each node's release is a task of its own: it goes on (and hands the lock to the
        // next waiter there) after the answer is known.
        let calls = (0..self.nodes.len()).map(|i| {
            let (nodes, keys, token) = (
                Arc::clone(&self.nodes),
                Arc::clone(&keys),
                Arc::clone(&token),
            );
            Some(tokio::spawn(async move {
                nodes[i]
                    .within(t, nodes[i].release(&keys, &token, handoff))
                    .await
            }))
        });
        // Decided once a quorum answered: our key is then left on no quorum (released), or
        // was not there (not held).
        let quorum = self.quorum;
        let answered = |replies: &[Option<Result<NodeReply, tokio::task::JoinError>>]| {
            tally(replies.iter().flatten().filter_map(|r| r.as_ref().ok()))
        };
        let decided = |replies: &[Option<Result<NodeReply, _>>]| {
            let t = answered(replies);
            t.yes + t.no >= quorum
        };
        let results = gather(&self.nodes, calls, decided).await;
        // A node not waited for counts as one that did not answer.
        let unanswered = results.iter().filter(|r| !matches!(r, Some(Ok(_)))).count();
        let Tally {
            yes,
            no,
            errors,
            last_err,
            foreign,
        } = answered(&results);
        let errors = errors + unanswered;
        if yes >= self.quorum {
            Ok(())
        } else if let Some(f) = foreign {
            Err(LockError::backend(
                &self.label,
                Some(&self.name),
                format!(
                    "release refused: {}; the lock, if still ours, frees itself when its lease runs out",
                    f.describe(&self.keys)
                ),
                None,
            ))
        } else if no > self.nodes.len() - self.quorum {
            tracing::debug!(name = %self.name, backend = %self.label, released = yes, refused = no, unreachable = errors, "release found the lock no longer ours (NotHeld)");
            Err(LockError::not_held(
                &self.name,
                &self.label,
                "the lease expired and the key was taken over or removed",
            ))
        } else if yes > 0 && yes + no >= self.quorum {
            // Our key is left on no quorum (at most on masters that did not answer, where its
            // lease runs out): the lock is free for the next holder.
            Ok(())
        } else if errors == 0 {
            tracing::debug!(name = %self.name, backend = %self.label, released = yes, refused = no, unreachable = errors, "release found the lock no longer ours (NotHeld)");
            Err(LockError::not_held(
                &self.name,
                &self.label,
                "the lease expired and the key was taken over or removed",
            ))
        } else {
            Err(self.unavailable("release", yes, last_err))
        }
    }
}

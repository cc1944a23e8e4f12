//! [`RedisLease`]: renew and release one held lock on one node (single) or a quorum (Redlock).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use lock_core::backend::Lease;
use lock_core::LockError;
use tokio::time::Instant;

use crate::error::map;
use crate::keys::Keys;
use crate::node::{Foreign, Handoff, Node};

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

pub(crate) fn tally(results: Vec<NodeReply>) -> Tally {
    let mut t = Tally::default();
    for r in results {
        match r {
            Ok(Ok(Ok(true))) => t.yes += 1,
            Ok(Ok(Ok(false))) => t.no += 1,
            Ok(Ok(Err(f))) => {
                t.no += 1;
                t.foreign = Some(f);
            }
            Ok(Err(e)) => {
                t.errors += 1;
                t.last_err = Some(e);
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
        let results = join_all(
            self.nodes
                .iter()
                .map(|n| tokio::time::timeout(t, n.extend(&self.keys, &self.token, ttl))),
        )
        .await;
        let Tally {
            yes,
            no,
            last_err,
            foreign,
            ..
        } = tally(results);
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
        let mut pending: FuturesUnordered<_> =
            (0..self.nodes.len())
                .map(|i| {
                    let (nodes, keys, token) = (
                        Arc::clone(&self.nodes),
                        Arc::clone(&keys),
                        Arc::clone(&token),
                    );
                    async move {
                        tokio::time::timeout(t, nodes[i].release(&keys, &token, handoff)).await
                    }
                })
                .collect();
        // Released once a quorum said so: the rest go on in the background (the answer cannot
        // change, and the next holder's grants do not wait for it).
        let (mut results, mut released) = (Vec::with_capacity(self.nodes.len()), 0);
        while let Some(r) = pending.next().await {
            released += usize::from(matches!(r, Ok(Ok(Ok(true)))));
            results.push(r);
            if released >= self.quorum && !pending.is_empty() {
                tokio::spawn(async move { while pending.next().await.is_some() {} });
                break;
            }
        }
        let Tally {
            yes,
            no,
            errors,
            last_err,
            foreign,
        } = tally(results);
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
        } else if errors == 0 || no > self.nodes.len() - self.quorum {
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

//! [`RedisLease`]: renew and release one held lock on one node (single) or a quorum (Redlock).

use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use lock_core::{Lease, LockError};
use tokio::time::Instant;

use crate::error::map;
use crate::keys::Keys;
use crate::node::Node;

/// Redlock's clock-drift allowance: ttl·1% + 2 ms.
pub(crate) fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The store side of a Redis guard.
pub(crate) struct RedisLease {
    pub nodes: Vec<Node>,
    pub keys: Keys,
    pub token: String,
    pub quorum: usize,
    pub redlock: bool,
    pub name: String,
    pub label: String,
    pub per_node_timeout: Duration,
}

/// Per-node outcomes of one round: (true replies, false replies, errors).
pub(crate) fn tally(
    results: Vec<Result<Result<bool, redis::RedisError>, tokio::time::error::Elapsed>>,
) -> (usize, usize, Option<redis::RedisError>, usize) {
    let (mut yes, mut no, mut errors, mut last) = (0, 0, 0, None);
    for r in results {
        match r {
            Ok(Ok(true)) => yes += 1,
            Ok(Ok(false)) => no += 1,
            Ok(Err(e)) => {
                errors += 1;
                last = Some(e);
            }
            Err(_) => errors += 1,
        }
    }
    (yes, no, last, errors)
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
        let (yes, no, err, _) = tally(results);
        if yes >= self.quorum {
            let validity = if self.redlock {
                ttl.saturating_sub(drift(ttl))
            } else {
                ttl
            };
            if started.elapsed() < validity {
                return Ok(Some(validity));
            }
        }
        if no > self.nodes.len() - self.quorum {
            return Err(LockError::not_held(
                &self.name,
                &self.label,
                "the key is gone or holds another token",
            ));
        }
        Err(self.unavailable("renewal", yes, err))
    }

    async fn release(&self) -> Result<(), LockError> {
        let t = self.per_node_timeout;
        let results = join_all(
            self.nodes
                .iter()
                .map(|n| tokio::time::timeout(t, n.release(&self.keys, &self.token))),
        )
        .await;
        let (yes, no, err, errors) = tally(results);
        if yes >= self.quorum {
            Ok(())
        } else if errors == 0 || no > self.nodes.len() - self.quorum {
            Err(LockError::not_held(
                &self.name,
                &self.label,
                "the lease expired and the key was taken over or removed",
            ))
        } else {
            let _ = no;
            Err(self.unavailable("release", yes, err))
        }
    }
}

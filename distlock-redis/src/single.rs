//! [`Single`]: the single-instance path (`redis://`). A round is ONE script call on the one
//! server: it takes the key if it is free (and no live waiter is queued ahead), draws the
//! fencing token from the server's clock and counter, or joins the queue (`lua/acquire.lua`).
//! The lease is the key's expiry, valid for the whole `ttl`. `redis+sentinel://` is the same
//! path on the master the sentinels name, followed through failovers (`sentinel.rs`); there,
//! and with `replicas=`, a round that finds the store unavailable is retried within the wait
//! (a failover takes seconds), where a plain single server reports it at once.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::LockError;

use crate::acquire::{Bid, Round, Rounds};
use crate::cluster;
use crate::config::{RedisConfig, Topology};
use crate::error::map;
use crate::node::{Attempt, Node};
use crate::sentinel::Sentinels;

/// One Redis server.
pub(crate) struct Single {
    /// The one server (shared with every guard: a guard does not copy it).
    nodes: Arc<[Node]>,
    /// Bound on each reply.
    timeout: Duration,
    label: String,
    /// Retry unavailable rounds within the wait (Sentinel, `replicas=`).
    retry: bool,
    /// Sentinel and Cluster: the task that follows failovers, stopped with this client.
    _follower: Option<AbortOnDrop>,
}

/// A task that ends when its owner is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Single {
    /// Connects to the configured server (for Sentinel, the master the sentinels name), which
    /// must answer now.
    pub(crate) async fn connect(cfg: &RedisConfig, label: &str) -> Result<Self, LockError> {
        let (node, follower) = if cfg.topology == Topology::Sentinel {
            let sentinels = Sentinels::new(cfg, label);
            let node = sentinels.connect().await?;
            let follower = AbortOnDrop(sentinels.follow(node.clone()));
            (node, Some(follower))
        } else if cfg.topology == Topology::Cluster {
            let node = Node::connect_cluster(cfg, label).await?;
            let follower = cluster::follow(cfg.clone(), label.to_owned(), node.clone());
            (node, Some(AbortOnDrop(follower)))
        } else {
            (Node::connect(cfg, 0, label).await?, None)
        };
        Ok(Single {
            nodes: Arc::new([node]),
            timeout: cfg.timeout,
            label: label.to_owned(),
            retry: follower.is_some() || cfg.replicas > 0,
            _follower: follower,
        })
    }
}

impl Rounds for Single {
    fn nodes(&self) -> &Arc<[Node]> {
        &self.nodes
    }

    fn label(&self) -> &str {
        &self.label
    }

    fn quorum(&self) -> usize {
        1
    }

    fn per_node_timeout(&self, _ttl: Duration) -> Duration {
        self.timeout
    }

    /// The server expires the key itself: the whole `ttl`.
    fn validity(ttl: Duration) -> Duration {
        ttl
    }

    /// The server stamps each waiter's arrival with its own clock.
    fn queue_score(&self) -> Option<u64> {
        None
    }

    /// An unreachable server is reported at once, but a Sentinel master or a Cluster primary
    /// (which a failover replaces) or a grant that too few replicas acknowledged is tried again every 100 ms.
    fn retry_pause(&self, _ttl: Duration, _failing_for: Duration) -> Option<Duration> {
        self.retry.then_some(Duration::from_millis(100))
    }

    /// Each grant's token comes from the server's clock.
    fn clock_lag(&self) -> Option<Duration> {
        None
    }

    /// The one server's grant is the lock: the server stored its token as it drew it.
    async fn settle_grants(&self, _bid: &Bid<'_>, grants: &[Option<u64>]) -> Option<u64> {
        grants.first().copied().flatten()
    }

    async fn round(&self, bid: &Bid<'_>) -> Result<Round, LockError> {
        let t = self.timeout;
        let reply = self.nodes[0].within(t, bid.on(&self.nodes[0], None)).await;
        match reply {
            Ok(Ok(Attempt::Acquired { token, .. })) => Ok(Round::Acquired {
                token,
                validity: bid.ttl,
            }),
            Ok(Ok(Attempt::Unacknowledged { acks })) => {
                // Granted on the master only: given back, so nobody waits out its lease.
                let node = &self.nodes[0];
                let _ = tokio::time::timeout(t, node.undo(bid.keys, bid.token)).await;
                Err(LockError::unavailable(
                    &self.label,
                    Some(bid.name),
                    format!("the grant was acknowledged by {acks} replica(s), fewer than replicas= requires, within {:?}; it was given back", t / 2),
                    None,
                ))
            }
            Ok(Ok(Attempt::Held { pttl_ms, counter })) => Ok(Round::Held {
                pttl_ms,
                partial: false,
                seen: vec![counter],
            }),
            // Another application's data at one of the lock's keys: no lock here.
            Ok(Ok(Attempt::Foreign(f))) => Err(LockError::backend(
                &self.label,
                Some(bid.name),
                f.describe(bid.keys),
                None,
            )),
            Ok(Err(e)) => Err(map(e, &self.label, Some(bid.name))),
            Err(_) => Err(LockError::unavailable(
                &self.label,
                Some(bid.name),
                format!("no reply within {t:?}"),
                None,
            )),
        }
    }
}

//! [`Single`]: the single-instance path (`redis://`). A round is ONE script call on the one
//! server: it takes the key if it is free (and no live waiter is queued ahead), draws the
//! fencing token from the server's clock and counter, or joins the queue (`lua/acquire.lua`).
//! The lease is the key's expiry, valid for the whole `ttl`.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::LockError;

use crate::acquire::{Bid, Round, Rounds};
use crate::config::RedisConfig;
use crate::error::map;
use crate::node::{Attempt, Node};

/// One Redis server.
pub(crate) struct Single {
    /// The one server (shared with every guard: a guard does not copy it).
    nodes: Arc<[Node]>,
    /// Bound on each reply.
    timeout: Duration,
    label: String,
}

impl Single {
    /// Connects to the configured server, which must answer now.
    pub(crate) async fn connect(cfg: &RedisConfig, label: &str) -> Result<Self, LockError> {
        Ok(Single {
            nodes: Arc::new([Node::connect(cfg, 0, label).await?]),
            timeout: cfg.timeout,
            label: label.to_owned(),
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

    /// An unreachable server is reported at once.
    fn retry_pause(&self, _ttl: Duration, _failing_for: Duration) -> Option<Duration> {
        None
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
        let reply = tokio::time::timeout(t, bid.on(&self.nodes[0], None)).await;
        match reply {
            Ok(Ok(Attempt::Acquired { token, .. })) => Ok(Round::Acquired {
                token,
                validity: bid.ttl,
            }),
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

//! [`ZkLease`]: the store side of a ZooKeeper guard — our contender node.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::{Lease, LockError};
use tokio::task::JoinHandle;
use zookeeper_client::Error;

use crate::error::map;
use crate::session::Session;

pub(crate) struct ZkLease {
    pub session: Arc<Session>,
    pub node: String,
    pub name: String,
    pub label: String,
    /// Watches our own node so a deletion by someone else is reported at once.
    pub own_watch: JoinHandle<()>,
    /// How long a check that reached the leader vouches for the session: see [`leader_validity`].
    pub validity: Duration,
}

/// How long after the start of a round trip that went through the ZooKeeper leader (a `sync`)
/// the session is certainly still alive there: a third of the session timeout `t`.
///
/// A client connected to a follower that is cut from its leader keeps its connection (the
/// follower notices the lost leader only after `syncLimit` ticks) while the leader, no longer
/// hearing of the session, expires it after `t` — and hands the lock on. The leader learns of a
/// session's activity from the follower's ping replies (every `tickTime / 2`); the client pings
/// at least every `t / 3` when idle. So when a `sync` sent at `t0` reached the leader, the leader
/// had heard of the session at some time ≥ `t0 − t/3 − tickTime/2`, and cannot expire it before
/// `t0 + 2t/3 − tickTime/2` ≥ `t0 + 5t/12` (ZooKeeper's default `minSessionTimeout` is
/// `2 × tickTime`, so `tickTime ≤ t/2`). `t/3` stays below that with a `t/12` margin.
pub(crate) fn leader_validity(session_timeout: Duration) -> Duration {
    session_timeout / 3
}

impl Drop for ZkLease {
    fn drop(&mut self) {
        self.own_watch.abort();
    }
}

impl ZkLease {
    fn gone(&self) -> LockError {
        LockError::not_held(
            &self.name,
            &self.label,
            format!(
                "lock node {} is gone (session expired or node deleted)",
                self.node
            ),
        )
    }
}

#[async_trait]
impl Lease for ZkLease {
    /// A liveness check through the leader: `sync` (answered only once the leader has seen it),
    /// then our node's existence. Vouches for the session for [`leader_validity`] from the start.
    async fn renew(&self, _ttl: Duration) -> Result<Option<Duration>, LockError> {
        if self.session.is_dead() {
            return Err(self.gone());
        }
        if let Err(e) = self.session.client.sync(&self.node).await {
            return Err(match e {
                Error::NoNode => self.gone(),
                e => map(e, &self.label, Some(&self.name)),
            });
        }
        match self.session.client.check_stat(&self.node).await {
            Ok(Some(_)) => Ok(Some(self.validity)),
            Ok(None) => Err(self.gone()),
            Err(e) => Err(map(e, &self.label, Some(&self.name))),
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        self.own_watch.abort();
        match self.session.client.delete(&self.node, None).await {
            Ok(()) => Ok(()),
            Err(Error::NoNode) | Err(Error::SessionExpired) | Err(Error::ClientClosed) => {
                Err(self.gone())
            }
            Err(e) => Err(map(e, &self.label, Some(&self.name))),
        }
    }
}

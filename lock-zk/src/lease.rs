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
    /// A liveness check: ZooKeeper has no lease; the session keeps the node.
    async fn renew(&self, _ttl: Duration) -> Result<Option<Duration>, LockError> {
        if self.session.is_dead() {
            return Err(self.gone());
        }
        match self.session.client.check_stat(&self.node).await {
            Ok(Some(_)) => Ok(None),
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

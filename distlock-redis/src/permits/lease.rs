//! [`PermitLease`]: renew and release one held permit or side of a read-write lock.

use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::Lease;
use distlock_core::LockError;

use super::calls;
use super::keys::PermitKeys;
use crate::error::map;
use crate::node::{Foreign, Node};

/// The store side of a semaphore or read-write lock guard on one server.
pub(crate) struct PermitLease {
    pub node: Node,
    pub keys: PermitKeys,
    pub member: String,
    pub name: String,
    pub label: String,
    /// Bound on each reply.
    pub timeout: Duration,
}

impl PermitLease {
    /// A script's answer as the lease's outcome: done, no longer ours, or a store error.
    fn judge(
        &self,
        what: &str,
        reply: Result<redis::RedisResult<Result<bool, Foreign>>, tokio::time::error::Elapsed>,
    ) -> Result<(), LockError> {
        match reply {
            Ok(Ok(Ok(true))) => Ok(()),
            Ok(Ok(Ok(false))) => Err(LockError::not_held(
                &self.name,
                &self.label,
                "the lease ran out before this call (another caller may hold the place now)",
            )),
            Ok(Ok(Err(f))) => Err(LockError::not_held(
                &self.name,
                &self.label,
                f.describe_as(self.keys.role(&f.key)),
            )),
            Ok(Err(e)) => Err(map(e, &self.label, Some(&self.name))),
            Err(_) => Err(LockError::unavailable(
                &self.label,
                Some(&self.name),
                format!("no reply to the {what} within {:?}", self.timeout),
                None,
            )),
        }
    }
}

#[async_trait]
impl Lease for PermitLease {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        let reply = tokio::time::timeout(
            self.timeout,
            calls::extend(&self.node, &self.keys, &self.member, ttl),
        )
        .await;
        self.judge("renewal", reply).map(|()| Some(ttl))
    }

    async fn release(&self) -> Result<(), LockError> {
        let reply = tokio::time::timeout(
            self.timeout,
            calls::release(&self.node, &self.keys, &self.member),
        )
        .await;
        self.judge("release", reply)
    }
}

//! The read-write lock as Apache Curator's `InterProcessReadWriteLock` lays it out, so Java
//! services using Curator and Rust services using distlock share one lock.
//!
//! # The layout (Curator 5)
//! Read-write lock `name` is the directory `/distlock/<name>`; readers create
//! `_c_<uuid>-__READ__<sequence>` and writers `_c_<uuid>-__WRIT__<sequence>`, both
//! `EPHEMERAL_SEQUENTIAL`, with the holder identity as data. They form one queue ordered by
//! sequence:
//! * a writer holds when it is first, and otherwise watches its predecessor (of either kind);
//! * a reader holds when no writer is ahead of it, and otherwise watches the first writer.
//!
//! So a waiting writer holds back every reader that arrives after it: writers are not starved.
//!
//! # Tokens
//! A grant's token is its node's `czxid`. A writer's is greater than every earlier grant's
//! (every earlier holder's node was created before the writer's), and every grant after a
//! writer's has a greater token than the writer's. Two readers that share the lock may be
//! granted in a different order than their tokens (both were admitted by the same listing).

use async_trait::async_trait;
use distlock_core::backend::{Attempt, RwLockBackend};
use distlock_core::{Access, AcquireOptions, Capabilities, LockError, LockGuard, RwLockInfo};

use crate::backend::{Node, ZkLock};
use crate::error::map;
use crate::path::{lock_path, NodeKind};

fn kind(access: Access) -> NodeKind {
    match access {
        Access::Read => NodeKind::Read,
        Access::Write => NodeKind::Write,
    }
}

#[async_trait]
impl RwLockBackend for ZkLock {
    async fn attempt(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let node = Node::of(&self.config().base, name, kind(access), opts)?;
        self.acquire_inner(node, opts, how == Attempt::Try).await
    }

    fn capabilities(&self) -> Capabilities {
        distlock_core::DistributedLock::capabilities(self).with_holder_identity(false)
    }

    fn backend_name(&self) -> &str {
        self.label()
    }

    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        let dir = lock_path(&self.config().base, name)?;
        let session = self.session().await?;
        let queue = match crate::read::children_now(&session.client, &dir).await {
            Ok(kids) => NodeKind::Read.sorted(kids.unwrap_or_default()),
            Err(e) => return Err(map(e, self.label(), Some(name))),
        };
        let is_writer = |c: &String| NodeKind::Write.sequence_of(c).is_some();
        let (readers, writer) = match queue.first() {
            Some(first) if is_writer(first) => (0, true),
            _ => (queue.iter().take_while(|c| !is_writer(c)).count(), false),
        };
        let holders = readers + usize::from(writer);
        let mut info = RwLockInfo::default();
        (info.readers, info.writer, info.waiters) = (readers, writer, queue.len() - holders);
        Ok(info)
    }
}

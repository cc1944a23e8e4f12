//! The semaphore as Apache Curator's `InterProcessSemaphoreV2` lays it out, so Java services
//! using Curator and Rust services using distlock share one set of permits.
//!
//! # The layout (Curator 5)
//! Semaphore `name` is the directory `/distlock/<name>` with two children:
//! * `locks`: an `InterProcessMutex` (`_c_<uuid>-lock-<sequence>` contenders). Only its holder
//!   (the admitter) may add a permit, so admissions happen one at a time, in arrival order;
//! * `leases`: one `EPHEMERAL_SEQUENTIAL` node `_c_<uuid>-lease-<sequence>` per permit.
//!
//! The admitter creates its lease and holds a permit while the leases number at most
//! `max_count`; otherwise it waits, still holding the mutex, on a watch of the `leases`
//! children (one watcher, no herd: everyone else queues on the mutex). Once it holds a permit
//! it releases the mutex. Releasing a permit deletes its lease.
//!
//! # What distlock adds
//! * `max_count` is checked. Curator keeps it in each process's memory and trusts every caller
//!   to pass the same. A distlock lease carries `max_count=N` (then the holder identity, if
//!   any) as its data, and an admitter first reads the count of the first distlock lease:
//!   a different count is [`LockError::InvalidConfig`] naming both. Curator's leases (the
//!   process's IP address as data) carry no count and are counted, not checked.
//! * The count is checked after the create too (the listing that comes back with it), as
//!   Curator does, so even an admitter whose mutex was lost to a session expiry cannot take a
//!   permit beyond `max_count`.
//! * Tokens: the lease's `czxid`. Leases are created one at a time by the admitter, after every
//!   earlier grant, so every grant's token is greater than every earlier grant's.
//!
//! A crashed holder's permit is freed when the ensemble expires its session (no lease timer).

use async_trait::async_trait;
use distlock_core::backend::{Attempt, Deadline, SemaphoreBackend};
use distlock_core::semaphore::{count_in_record, count_record};
use distlock_core::{AcquireOptions, Capabilities, LockError, LockGuard, SemaphoreInfo};
use zookeeper_client::Error;

use crate::backend::{Node, ZkLock};
use crate::error::map;
use crate::path::{lock_path, NodeKind};
use crate::session::Session;

/// Curator's directory of the semaphore's internal mutex.
pub const LOCKS: &str = "locks";
/// Curator's directory of the semaphore's leases.
pub const LEASES: &str = "leases";
impl ZkLock {
    /// The children of `dir` of `kind`, in order (none when `dir` does not exist).
    async fn nodes(
        &self,
        session: &Session,
        dir: &str,
        name: &str,
        kind: NodeKind,
    ) -> Result<Vec<String>, LockError> {
        match session.client.get_children(dir).await {
            Ok((kids, _)) => Ok(kind.sorted(kids)),
            Err(Error::NoNode) => Ok(Vec::new()),
            Err(e) => Err(map(e, self.label(), Some(name))),
        }
    }

    /// The count of the first distlock lease of semaphore `dir` (`None`: no distlock lease).
    async fn count_in_use(
        &self,
        session: &Session,
        dir: &str,
        name: &str,
    ) -> Result<Option<u32>, LockError> {
        let leases = format!("{dir}/{LEASES}");
        for lease in self.nodes(session, &leases, name, NodeKind::Lease).await? {
            match session.client.get_data(&format!("{leases}/{lease}")).await {
                Ok((data, _)) => {
                    if let Some(n) = count_in_record(&data) {
                        return Ok(Some(n));
                    }
                }
                // Released since the listing.
                Err(Error::NoNode) => {}
                Err(e) => return Err(map(e, self.label(), Some(name))),
            }
        }
        Ok(None)
    }

    /// Holding the internal mutex: checks the count and takes a lease.
    async fn admit(
        &self,
        name: &str,
        dir: &str,
        max_count: u32,
        opts: &AcquireOptions,
        try_only: bool,
    ) -> Result<Option<LockGuard>, LockError> {
        let session = self.session().await?;
        if let Some(in_use) = self.count_in_use(&session, dir, name).await? {
            if in_use != max_count {
                return Err(distlock_core::semaphore::other_count(
                    name, in_use, max_count,
                ));
            }
        }
        let lease = Node {
            name,
            dir: format!("{dir}/{LEASES}"),
            kind: NodeKind::Lease,
            data: count_record(max_count, opts.holder.as_deref()).into_bytes(),
            max_leases: max_count as usize,
        };
        self.acquire_inner(lease, opts, try_only).await
    }
}

#[async_trait]
impl SemaphoreBackend for ZkLock {
    async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        let dir = lock_path(&self.config().base, name)?;
        let deadline = Deadline::after(opts.wait);
        // Curator's internal mutex: one admitter at a time, in arrival order.
        let mutex = Node {
            name,
            dir: format!("{dir}/{LOCKS}"),
            kind: NodeKind::Lock,
            data: count_record(max_count, opts.holder.as_deref()).into_bytes(),
            max_leases: 0,
        };
        let Some(admitter) = self.acquire_inner(mutex, opts, try_only).await? else {
            return Ok(None);
        };
        let mut rest = opts.clone();
        rest.wait = deadline.remaining();
        let admitted = self.admit(name, &dir, max_count, &rest, try_only).await;
        // The next admitter may go (Curator releases the mutex in `finally`). A mutex lost
        // meanwhile is no harm: the count was checked after our lease's create.
        if let Err(e) = admitter.release().await {
            tracing::debug!(backend = %self.label(), name, error = %e, "the semaphore's internal mutex was lost before its release");
        }
        admitted
    }

    fn capabilities(&self) -> Capabilities {
        distlock_core::DistributedLock::capabilities(self).with_holder_identity(false)
    }

    fn backend_name(&self) -> &str {
        self.label()
    }

    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let dir = lock_path(&self.config().base, name)?;
        // The reads below, on the same session, see the ensemble's state as of here
        // (`read.rs`).
        let session = self.session().await?;
        crate::read::catch_up(&session.client)
            .await
            .map_err(|e| map(e, self.label(), Some(name)))?;
        let holders = self
            .nodes(&session, &format!("{dir}/{LEASES}"), name, NodeKind::Lease)
            .await?
            .len();
        let waiters = self
            .nodes(&session, &format!("{dir}/{LOCKS}"), name, NodeKind::Lock)
            .await?
            .len();
        let max_count = if holders > 0 {
            self.count_in_use(&session, &dir, name).await?
        } else {
            None
        };
        let mut info = SemaphoreInfo::default();
        (info.max_count, info.holders, info.waiters) = (max_count, holders, waiters);
        Ok(info)
    }
}

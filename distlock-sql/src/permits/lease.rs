//! [`PermitLease`]: renew and release one held permit or read-write lock side; and
//! [`Member`], the statements that name one member.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::Lease;
use distlock_core::LockError;
use sqlx::AssertSqlSafe;

use super::wake;
use crate::client::SqlClient;
use crate::error::map;
use crate::liveness::{resend_on_dead_connection, unclear_release};
use crate::statements::PermitStatements;

/// One member of one name: what its holder or waiter runs on its own rows.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    pub client: Arc<SqlClient>,
    pub sql: Arc<PermitStatements>,
    pub name: String,
    /// `sem` or `rw`.
    pub family: &'static str,
    pub member: String,
    /// The process-local wake-up key of the name (see `wake.rs`).
    pub wake_key: String,
}

impl Member {
    /// Runs `stmt` bound to `(…args before, name, family, member)`: rows affected.
    async fn run(&self, stmt: &str, ttl: Option<Duration>) -> Result<u64, LockError> {
        Ok(self.run_resent(stmt, ttl).await?.0)
    }

    /// [`Self::run`], with the first failure when the statement was sent again because its
    /// connection died under it (each of these statements names only this member, so running
    /// one twice is safe; see [`resend_on_dead_connection`]).
    async fn run_resent(
        &self,
        stmt: &str,
        ttl: Option<Duration>,
    ) -> Result<(u64, Option<LockError>), LockError> {
        let who = (self.client.label.as_str(), self.name.as_str());
        resend_on_dead_connection(&self.client.pool, who, || async {
            let mut q = sqlx::query(AssertSqlSafe(stmt.to_owned()));
            if let Some(ttl) = ttl {
                q = q.bind(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1));
            }
            q.bind(self.name.clone())
                .bind(self.family)
                .bind(self.member.clone())
                .execute(&self.client.pool)
                .await
                .map(|r| r.rows_affected())
                .map_err(|e| map(e, &self.client.label, Some(&self.name)))
        })
        .await
    }

    /// Takes every trace of this member out (holder and waiter rows) and wakes this process's
    /// waiters of the name.
    pub(crate) async fn forget(&self) -> Result<(), LockError> {
        let held = self.run(&self.sql.forget, None).await;
        let queued = self.run(&self.sql.leave, None).await;
        wake::wake(&self.wake_key);
        held.and(queued).map(drop)
    }

    /// Keeps this waiter's place in the queue for another `ttl`: `false` when it has none
    /// (it lapsed, or was granted).
    pub(crate) async fn refresh(&self, ttl: Duration) -> Result<bool, LockError> {
        Ok(self.run(&self.sql.refresh_waiter, Some(ttl)).await? > 0)
    }

    fn not_held(&self) -> LockError {
        LockError::not_held(
            &self.name,
            &self.client.label,
            "the lease ran out before this call (another caller may hold the place now)",
        )
    }
}

/// The store side of a semaphore or read-write lock guard (row mode).
pub(crate) struct PermitLease(pub Member);

#[async_trait]
impl Lease for PermitLease {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        match self.0.run(&self.0.sql.renew, Some(ttl)).await? {
            0 => Err(self.0.not_held()),
            _ => Ok(Some(crate::row::lease_validity(ttl))),
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        let (released, resent) = self.0.run_resent(&self.0.sql.release, None).await?;
        if let (0, Some(first)) = (released, resent) {
            let _ = self.0.forget().await;
            return Err(unclear_release(&self.0.client.label, &self.0.name, first));
        }
        if released == 0 {
            // Lapsed: take what is left of it out all the same.
            let _ = self.0.forget().await;
            return Err(self.0.not_held());
        }
        wake::wake(&self.0.wake_key);
        Ok(())
    }
}

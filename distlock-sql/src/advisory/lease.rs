//! The store side of an advisory guard ([`AdvisoryLease`]): its liveness ping, and its
//! release on the session that holds the lock.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::Lease;
use distlock_core::LockError;
use sqlx::{AssertSqlSafe, Executor};
use tokio::sync::Mutex;

use super::session::{fetch_i64, Session};
use crate::error::{is_connection_gone, map};
use crate::held::Held;
use crate::sessions::{self, Forget};
use crate::statements::AdvisoryStatements;

/// The store side of an advisory guard: the session holding the lock.
pub(super) struct AdvisoryLease {
    pub(super) session: Mutex<Option<Session>>,
    /// The holder identity's record, deleted before the unlock.
    pub(super) forget: Option<Forget>,
    /// The names the lock statements bind, given back in this order: the lock's own, or the
    /// internal names a semaphore permit or a read-write lock side holds.
    pub(super) keys: Vec<String>,
    /// The statement that gives the lock back.
    pub(super) unlock: String,
    /// PostgreSQL: `unlock` with the session's reset, for the last key (see
    /// `LockTexts::unlock_reset`).
    pub(super) unlock_reset: Option<String>,
    pub(super) sql: Arc<AdvisoryStatements>,
    pub(super) held: Held,
}

#[async_trait]
impl Lease for AdvisoryLease {
    async fn renew(&self, _ttl: Duration) -> Result<Option<Duration>, LockError> {
        let mut slot = self.session.lock().await;
        let Some(session) = slot.as_mut() else {
            return Err(self.held.gone());
        };
        let outcome = session.conn().execute(self.sql.ping).await;
        self.held.pinged(outcome, &mut slot)
    }

    async fn release(&self) -> Result<(), LockError> {
        let held = &self.held;
        let Some(mut session) = self.session.lock().await.take() else {
            return Err(held.gone());
        };
        if let Some(f) = &self.forget {
            if let Err(e) = sessions::forget(session.conn(), f).await {
                // The record must not outlive the hold on a connection that lives on: close it
                // (dropping the session), which frees the lock.
                tracing::warn!(backend = %held.label, name = %held.name, error = %e, "could not delete the holder identity's record; closing the lock's connection instead");
                drop(session);
                return Ok(());
            }
        }
        let last = self.keys.len().saturating_sub(1);
        for (i, key) in self.keys.iter().enumerate() {
            let unlock = match &self.unlock_reset {
                Some(both) if i == last => both,
                _ => &self.unlock,
            };
            let q = sqlx::query(AssertSqlSafe(unlock.as_str())).bind(key.as_str());
            // On any failure the session is dropped, so closed: the database frees the lock.
            match fetch_i64(q, session.conn()).await {
                Ok(1) => {}
                Ok(_) => return Err(held.gone()),
                Err(e) if is_connection_gone(&e) || matches!(e, sqlx::Error::Database(_)) => {
                    return Err(held.lost(&e))
                }
                Err(e) => return Err(map(e, &held.label, Some(&held.name))),
            }
        }
        if self.unlock_reset.is_some() {
            // The last unlock put the settings back.
            session.give_back();
        } else {
            session.recycle(self.sql.reset).await;
        }
        tracing::debug!(backend = %held.label, name = %held.name, "advisory lock released");
        Ok(())
    }
}

//! for_update mode's semaphore ([`ForUpdateSemaphore`]): a row per permit in `<table>_slots`
//! (`name`, `slot` `0..max_count`, `max_count`), behind a gate row per name in
//! `<table>_semgate`.
//!
//! A caller takes the name's gate row `FOR UPDATE` (a queue in the database, in arrival order
//! where the database serves row locks so), then, holding it, the lowest free slot with
//! `FOR UPDATE SKIP LOCKED` in a transaction held open for the guard's life like the mutex's.
//! While no slot is free it looks again with backoff (2 → 100 ms), still holding the gate:
//! only the head of the queue looks, and nobody behind it can overtake it. Then it lets the
//! gate go. A crashed holder's connection ends its transaction, which frees its slot.
//!
//! The slots are made on first use for the caller's count. A caller with another count fails
//! with [`LockError::InvalidConfig`] naming both, unless no slot is held: then the slots are
//! made again for the new count. Tokens are drawn after the grant from the lock table's
//! counter, as the mutex's are. `inspect` answers `Unsupported`: the waiters queue on a row
//! lock, which another session cannot count.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Attempt, Backoff, Deadline};
use distlock_core::{AcquireOptions, LockError, LockGuard};
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use super::ForUpdateLock;
use crate::client::SqlClient;
use crate::config::{Dialect, Mode};
use crate::error::{map, Failure};
use crate::statements::{self, SlotStatements};

/// Conflicts (a transaction that ended while its token was drawn) per acquisition.
const MAX_CONFLICTS: u32 = 50;

/// The gate, the slot statements, and the row-lock machinery (guards, tokens) of for_update's
/// semaphore.
#[derive(Debug)]
pub(crate) struct ForUpdateSemaphore {
    client: Arc<SqlClient>,
    gate: ForUpdateLock,
    rows: ForUpdateLock,
    sql: SlotStatements,
}

fn unavailable(d: Dialect) -> LockError {
    LockError::invalid_config(format!(
        "mode=for_update is not available on {}: use mode=row",
        d.label()
    ))
}

impl ForUpdateSemaphore {
    /// The semaphore of `client` (not SQLite), creating its tables when missing.
    ///
    /// # Errors
    /// Store errors creating the tables; [`LockError::InvalidConfig`] on SQLite.
    pub(crate) async fn new(client: &Arc<SqlClient>) -> Result<Self, LockError> {
        let (d, t) = (client.cfg.dialect, &client.cfg.table);
        let gate = format!("{t}_semgate");
        client
            .create_schema(&statements::client(d, Mode::ForUpdate, &gate))
            .await?;
        let sql = statements::slots(d, t).ok_or_else(|| unavailable(d))?;
        crate::client::create_if_missing(&client.pool, &sql.create)
            .await
            .map_err(|e| map(e, &client.label, None))?;
        let on = |sql, tag, gate| ForUpdateLock::on(Arc::clone(client), sql, (tag, None), gate);
        Ok(ForUpdateSemaphore {
            client: Arc::clone(client),
            gate: on(
                statements::for_update(d, &gate).ok_or_else(|| unavailable(d))?,
                "\0semgate",
                true,
            ),
            rows: on(
                statements::for_update(d, t).ok_or_else(|| unavailable(d))?,
                "\0sem",
                false,
            ),
            sql,
        })
    }

    /// One acquisition of a permit of `name`: through the gate, then a slot.
    pub(crate) async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        self.gate
            .through(name, opts, how, |rest| async move {
                let deadline = Deadline::after(rest.wait);
                self.admit(name, max_count, &rest, try_only, &deadline)
                    .await
            })
            .await
    }

    /// Holding the gate: checks the count, then takes the lowest free slot (looking again
    /// with backoff until `deadline`).
    async fn admit(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        try_only: bool,
        deadline: &Deadline,
    ) -> Result<Option<LockGuard>, LockError> {
        let label = &self.client.label;
        let m = |e| map(e, label, Some(name));
        self.ensure_count(name, max_count, opts.ttl).await?;
        let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
        let mut conflicts = 0;
        loop {
            let started = Instant::now();
            let mut tx = self.rows.begin_bounded(name, opts.ttl).await?;
            let slot = sqlx::query(AssertSqlSafe(self.sql.take.as_str()))
                .bind(name)
                .fetch_optional(&mut *tx)
                .await
                .map_err(m)?;
            if slot.is_some() {
                match self.rows.draw_token(&mut tx, name).await {
                    Ok(token) => {
                        let parts = self.rows.guard_parts(tx, None, name, token, opts, started);
                        return parts.start().await.map(Some);
                    }
                    Err(Failure::Error(e)) => return Err(e),
                    Err(Failure::Busy | Failure::Retry) if conflicts < MAX_CONFLICTS => {
                        conflicts += 1;
                        continue;
                    }
                    Err(_) => {
                        return Err(LockError::backend(
                            label,
                            Some(name),
                            "kept losing the slot while drawing its token; retry later",
                            None,
                        ))
                    }
                }
            }
            let _ = tx.rollback().await;
            if try_only || deadline.expired() {
                return Ok(None);
            }
            deadline.sleep(backoff.next_delay()).await;
        }
    }

    /// Makes the name's slots for `max_count` on first use; refuses another count while a
    /// slot is held, and makes them again for it when none is.
    async fn ensure_count(
        &self,
        name: &str,
        max_count: u32,
        ttl: Duration,
    ) -> Result<(), LockError> {
        let label = &self.client.label;
        let m = |e| map(e, label, Some(name));
        let in_use: Option<i64> = match sqlx::query(AssertSqlSafe(self.sql.max_count.as_str()))
            .bind(name)
            .fetch_optional(&self.client.pool)
            .await
            .map_err(m)?
        {
            Some(r) => Some(r.try_get(0).map_err(m)?),
            None => None,
        };
        match in_use {
            Some(n) if n == i64::from(max_count) => Ok(()),
            None => {
                let mut tx = self.rows.begin_bounded(name, ttl).await?;
                self.fill(&mut tx, name, max_count).await?;
                tx.commit().await.map_err(m)
            }
            Some(n) => {
                // Another count: only if every slot is free (and now locked by us) may it change.
                let mut tx = self.rows.begin_bounded(name, ttl).await?;
                let free = sqlx::query(AssertSqlSafe(self.sql.free.as_str()))
                    .bind(name)
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(m)?
                    .len();
                if i64::try_from(free).unwrap_or(i64::MAX) < n {
                    let _ = tx.rollback().await;
                    return Err(distlock_core::semaphore::other_count(name, n, max_count));
                }
                sqlx::query(AssertSqlSafe(self.sql.clear.as_str()))
                    .bind(name)
                    .execute(&mut *tx)
                    .await
                    .map_err(m)?;
                self.fill(&mut tx, name, max_count).await?;
                tx.commit().await.map_err(m)
            }
        }
    }

    /// Makes the slots `0..max_count` of `name` in `tx`.
    async fn fill(
        &self,
        tx: &mut sqlx::Transaction<'static, sqlx::Any>,
        name: &str,
        max_count: u32,
    ) -> Result<(), LockError> {
        let n = i64::from(max_count);
        let q = sqlx::query(AssertSqlSafe(self.sql.fill.as_str()));
        let q = match self.client.cfg.dialect {
            Dialect::MySql => q.bind(n).bind(name).bind(n),
            _ => q.bind(name).bind(n),
        };
        q.execute(&mut **tx)
            .await
            .map(drop)
            .map_err(|e| map(e, &self.client.label, Some(name)))
    }
}

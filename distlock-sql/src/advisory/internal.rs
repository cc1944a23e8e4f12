//! The advisory locks a semaphore or a read-write lock takes besides the name's own:
//! *internal names* ([`internal_name`]) that never meet a lock name, and taking, waiting for
//! and giving back their locks on one session.

use std::time::Duration;

use distlock_core::backend::name::MAX_NAME_BYTES;
use distlock_core::backend::Deadline;
use distlock_core::LockError;
use sqlx::AssertSqlSafe;

use super::session::{fetch_i64, Session};
use super::AdvisoryLock;
use crate::client::SqlClient;
use crate::config::Mode;
use crate::error::{map, Failure};
use crate::statements::{self, CountStatements};

/// The internal name of `part` of the `kind` (`semaphore`, `rwlock`) of lock `name`:
/// `distlock <kind> <part>:` padded with spaces to one byte more than a lock name may have
/// ([`MAX_NAME_BYTES`]), then the name. Longer than every lock name, so never a user's (those
/// are refused as `InvalidName`); the fixed-width prefix keeps the mapping one-to-one.
pub(super) fn internal_name(kind: &str, part: &str, name: &str) -> String {
    let mut s = format!("distlock {kind} {part}:");
    let pad = (MAX_NAME_BYTES + 1).saturating_sub(s.len());
    s.extend(std::iter::repeat_n(' ', pad));
    s.push_str(name);
    s
}

/// The count statements of `client`'s dialect, creating their table when missing (the
/// semaphore's counts and the read-write lock's reader slots live there).
///
/// # Errors
/// Store errors creating the table; [`LockError::InvalidConfig`] on SQLite.
pub(super) async fn count_table(client: &SqlClient) -> Result<CountStatements, LockError> {
    let (d, t) = (client.cfg.dialect, &client.cfg.table);
    let counts = statements::counts(d, t).ok_or_else(|| {
        LockError::invalid_config(format!(
            "mode=advisory is not available on {}: use mode=row",
            d.label()
        ))
    })?;
    let mut schema = statements::client(d, Mode::Advisory, t);
    schema.schema = vec![counts.create.clone()];
    client.create_schema(&schema).await?;
    Ok(counts)
}

impl AdvisoryLock {
    /// Takes the lock of internal name `key` (of lock `name`) on `session`, waiting in the
    /// database's queue until `deadline` (trying once if `try_only`): whether it was granted.
    /// `slice`: the longest one lock statement waits before it is sent again (`None`: the
    /// mode's own slice) — a statement's wait goes on in the database after its caller is
    /// dropped, so a wait that holds others back is cut short.
    pub(super) async fn wait_take(
        &self,
        session: &mut Session,
        (name, key): (&str, &str),
        try_only: bool,
        deadline: &Deadline,
        slice: Option<Duration>,
    ) -> Result<bool, LockError> {
        self.ensure_key(key).await?;
        loop {
            let remaining = match (deadline.remaining(), slice) {
                (Some(r), Some(s)) => Some(r.min(s)),
                (r, s) => r.or(s),
            };
            let nowait = try_only || deadline.remaining().is_some_and(|r| r.is_zero());
            let outcome = self.lock(session, (name, key), remaining, nowait).await;
            if Failure::or_not_now(outcome)? {
                return Ok(true);
            }
            if nowait || deadline.expired() {
                return Ok(false);
            }
        }
    }

    /// Takes the lock of internal name `key` (of lock `name`) on `session` without
    /// waiting: whether it was free.
    pub(super) async fn try_take(
        &self,
        session: &mut Session,
        name: &str,
        key: &str,
    ) -> Result<bool, LockError> {
        self.ensure_key(key).await?;
        let q = sqlx::query(AssertSqlSafe(self.sql.try_lock.as_str())).bind(key);
        match fetch_i64(q, session.conn())
            .await
            .map_err(|e| map(e, &self.client.label, Some(name)))?
        {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(LockError::backend(
                &self.client.label,
                Some(name),
                format!("the advisory lock call on an internal name failed (returned {other})"),
                None,
            )),
        }
    }

    /// Gives back the lock of internal name `key` that `session` holds.
    pub(super) async fn give_back(
        &self,
        session: &mut Session,
        name: &str,
        key: &str,
    ) -> Result<(), LockError> {
        let q = sqlx::query(AssertSqlSafe(self.sql.unlock.as_str())).bind(key);
        match fetch_i64(q, session.conn())
            .await
            .map_err(|e| map(e, &self.client.label, Some(name)))?
        {
            1 => Ok(()),
            other => Err(LockError::backend(
                &self.client.label,
                Some(name),
                format!(
                    "giving back an advisory lock of an internal name failed (returned {other}); its connection is closed instead"
                ),
                None,
            )),
        }
    }
}

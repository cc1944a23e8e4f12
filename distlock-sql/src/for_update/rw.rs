//! for_update mode's read-write lock ([`ForUpdateRw`]): shared and exclusive locks on a row per
//! name in `<table>_rw`, behind a gate row per name in `<table>_rwgate`.
//!
//! A reader locks its row `FOR SHARE` (PostgreSQL) / `LOCK IN SHARE MODE` (MySQL/MariaDB), a
//! writer `FOR UPDATE`, each in a transaction held open for the guard's life, as the mutex's
//! row. Row-level share locks do not queue behind a waiting `FOR UPDATE` (a reader arriving
//! while readers hold goes in at once), so readers alone could starve a writer. Every
//! acquisition therefore first takes the name's gate row `FOR UPDATE` — a queue in arrival
//! order in the database — takes its side of the lock while holding it, and then lets the
//! gate go: a writer waiting for readers to leave holds the gate, so readers that come after
//! it wait behind it. `try_read` fails while a writer waits (the gate is taken).
//!
//! A waiting writer's locking statement is sent again every second on MySQL/MariaDB: a
//! writer whose acquisition is cancelled leaves its connection closed, but the server notices
//! only when that statement's lock wait ends, and until then its queued exclusive request keeps
//! new readers out (PostgreSQL ends it at once).
//!
//! Tokens are drawn after the grant from the `<table>_rw` counters, as the mutex's are from
//! the lock table's: a writer's token is greater than every earlier grant's. `inspect` cannot
//! count the readers holding a shared row lock from another session: it answers
//! `Unsupported`.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Attempt, LockBackend};
use distlock_core::{Access, AcquireOptions, LockError, LockGuard};

use super::ForUpdateLock;
use crate::client::SqlClient;
use crate::config::{Dialect, Mode};
use crate::statements;

/// MySQL/MariaDB: how long a writer's locking statement waits before it is sent again.
const WRITER_SLICE: Duration = Duration::from_secs(1);

/// The gate, and the read and write sides, of for_update's read-write lock.
#[derive(Debug)]
pub(crate) struct ForUpdateRw {
    gate: ForUpdateLock,
    read: ForUpdateLock,
    write: ForUpdateLock,
}

impl ForUpdateRw {
    /// The read-write lock of `client` (not SQLite), creating its tables when missing.
    ///
    /// # Errors
    /// Store errors creating the tables; [`LockError::InvalidConfig`] on SQLite.
    pub(crate) async fn new(client: &Arc<SqlClient>) -> Result<Self, LockError> {
        let d = client.cfg.dialect;
        let (gate, rows) = (
            format!("{}_rwgate", client.cfg.table),
            format!("{}_rw", client.cfg.table),
        );
        for t in [&gate, &rows] {
            client
                .create_schema(&statements::client(d, Mode::ForUpdate, t))
                .await?;
        }
        let none = || {
            LockError::invalid_config(format!(
                "mode=for_update is not available on {}: use mode=row",
                d.label()
            ))
        };
        let on =
            |sql, tag, slice, gate| ForUpdateLock::on(Arc::clone(client), sql, (tag, slice), gate);
        let writer_slice = (d == Dialect::MySql).then_some(WRITER_SLICE);
        Ok(ForUpdateRw {
            gate: on(
                statements::for_update(d, &gate).ok_or_else(none)?,
                "\0rwgate",
                None,
                true,
            ),
            read: on(
                statements::for_share(d, &rows).ok_or_else(none)?,
                "\0rw",
                None,
                false,
            ),
            write: on(
                statements::for_update(d, &rows).ok_or_else(none)?,
                "\0rw",
                writer_slice,
                false,
            ),
        })
    }

    /// One acquisition of `name` with `access`: through the gate, then the side.
    pub(crate) async fn attempt(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let side = match access {
            Access::Read => &self.read,
            Access::Write => &self.write,
        };
        self.gate
            .through(name, opts, how, |rest| async move {
                side.attempt(name, &rest, how).await
            })
            .await
    }
}

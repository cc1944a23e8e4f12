//! Every SQL statement the backend runs: one file per dialect (`postgres.rs`, `mysql.rs`,
//! `sqlite.rs`), what each statement must do and the invariant it keeps in `sets.rs`, and here
//! the one choice of dialect.
//!
//! The table name is the only text put into SQL (validated by
//! [`crate::config::validate_table`]), besides integers the backend computed itself (session
//! bounds, an `AUTO_INCREMENT` start); lock names, owner tokens and durations are always bound
//! as parameters. Expiry is computed by the database clock in epoch milliseconds, never by the
//! client's. Tokens are drawn only by the statement that won the lock row (or after the row
//! lock is granted), so they are serialized by the lock itself: a token drawn before the row
//! was won could otherwise be issued after a later holder's (a database process descheduled
//! between drawing and inserting).

mod counts;
mod mysql;
mod operator;
mod permits;
mod postgres;
mod queue;
mod sets;
mod slots;
mod sqlite;

pub(crate) use counts::{counts, CountStatements};
pub(crate) use operator::{operator, Atomic, OperatorStatements, RowBreak};
pub(crate) use permits::{permits, PermitStatements};
pub(crate) use sets::{
    AdvisoryStatements, BoundedBegin, ClientStatements, ForUpdateStatements, LockTexts,
    RowStatements, TokenDraw,
};
pub(crate) use slots::{slots, SlotStatements};

use crate::config::{Dialect, Mode};

/// What a client of table `t` runs when it connects.
pub(crate) fn client(d: Dialect, mode: Mode, t: &str) -> ClientStatements {
    match d {
        Dialect::Postgres => postgres::client(mode, t),
        Dialect::MySql => mysql::client(mode, t),
        Dialect::Sqlite => sqlite::client(t),
    }
}

/// Row mode's statements on table `t`.
pub(crate) fn row(d: Dialect, t: &str) -> RowStatements {
    match d {
        Dialect::Postgres => postgres::row(t),
        Dialect::MySql => mysql::row(t),
        Dialect::Sqlite => sqlite::row(t),
    }
}

/// for_update mode's statements on table `t`; `None` on SQLite, which has no `FOR UPDATE`.
pub(crate) fn for_update(d: Dialect, t: &str) -> Option<ForUpdateStatements> {
    match d {
        Dialect::Postgres => Some(postgres::for_update(t)),
        Dialect::MySql => Some(mysql::for_update(t)),
        Dialect::Sqlite => None,
    }
}

/// for_update's statements on table `t` with shared row locks instead (a read-write lock's
/// readers): PostgreSQL `FOR SHARE`, MySQL/MariaDB `LOCK IN SHARE MODE`; `None` on SQLite.
pub(crate) fn for_share(d: Dialect, t: &str) -> Option<ForUpdateStatements> {
    let shared = match d {
        Dialect::Postgres => "FOR SHARE",
        Dialect::MySql => "LOCK IN SHARE MODE",
        Dialect::Sqlite => return None,
    };
    let mut sql = for_update(d, t)?;
    sql.lock_row = sql.lock_row.replace("FOR UPDATE", shared);
    sql.try_lock_row = sql.try_lock_row.replace("FOR UPDATE", shared);
    Some(sql)
}

/// Advisory mode's statements for table `t` (its fencing counter; the locks need no table);
/// `None` on SQLite, which has no advisory locks.
pub(crate) fn advisory(d: Dialect, t: &str) -> Option<AdvisoryStatements> {
    match d {
        Dialect::Postgres => Some(postgres::advisory(t)),
        Dialect::MySql => Some(mysql::advisory(t)),
        Dialect::Sqlite => None,
    }
}

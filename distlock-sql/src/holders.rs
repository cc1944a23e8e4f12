//! Holder identities in row mode ([`distlock_core::AcquireOptions::holder`], used by leader
//! election): a table `<table>_holders (name, fence, holder)`, one row per name, written right
//! after an acquisition that carries an identity and read by `inspect`.
//!
//! # Never another holder's identity
//! A record names the fencing token of the acquisition that wrote it, and `inspect` reports it
//! only when that token is the current holder's. Between a grant and its record (one statement
//! later), or when a record was lost, the holder has no identity yet — `leader()` waits a moment
//! and then says so with an error — but a stale record is never shown as the new holder's.
//!
//! # Tables of earlier versions
//! The table is created the first time an identity is recorded and it is missing (no DDL is
//! sent while it exists, as for the lock tables). It keeps one row per name ever taken with an
//! identity, like the fencing counters.
//!
//! for_update and advisory modes record identities by holding session instead (see
//! `sessions.rs`): their `inspect` knows no token of its own.

use distlock_core::LockError;
use sqlx::{AnyPool, AssertSqlSafe, Row};

use crate::config::Dialect;
use crate::error::map;

/// The statements of one dialect for the holders table of lock table `t`.
pub(crate) struct HolderStatements {
    /// Creates the table (only after a write found it missing).
    create: String,
    /// Records `(name, fence, holder)`, replacing the name's record of a lower token only (a
    /// late record of an earlier holder never overwrites a later one's).
    record: String,
    /// The name's record: `(fence, holder)`.
    recorded: String,
}

impl HolderStatements {
    pub(crate) fn new(dialect: Dialect, t: &str) -> Self {
        let h = format!("{t}_holders");
        match dialect {
            Dialect::Postgres => HolderStatements {
                create: format!("CREATE TABLE IF NOT EXISTS {h} (name TEXT PRIMARY KEY, fence BIGINT NOT NULL, holder TEXT NOT NULL)"),
                record: format!("INSERT INTO {h} (name, fence, holder) VALUES ($1, $2, $3) ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence, holder = EXCLUDED.holder WHERE {h}.fence < EXCLUDED.fence"),
                recorded: format!("SELECT fence, holder FROM {h} WHERE name = $1"),
            },
            // Names as VARBINARY like the lock table (never case- or space-folded); identities
            // are at most 128 bytes of UTF-8.
            Dialect::MySql => HolderStatements {
                create: format!("CREATE TABLE IF NOT EXISTS {h} (name VARBINARY(1024) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL, holder VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL) ENGINE=InnoDB"),
                record: format!("INSERT INTO {h} (name, fence, holder) VALUES (?, ?, ?) ON DUPLICATE KEY UPDATE holder = IF(VALUES(fence) > fence, VALUES(holder), holder), fence = GREATEST(fence, VALUES(fence))"),
                recorded: format!("SELECT fence, holder FROM {h} WHERE name = ?"),
            },
            Dialect::Sqlite => HolderStatements {
                create: format!("CREATE TABLE IF NOT EXISTS {h} (name TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL, holder TEXT NOT NULL)"),
                record: format!("INSERT INTO {h} (name, fence, holder) VALUES (?1, ?2, ?3) ON CONFLICT (name) DO UPDATE SET fence = excluded.fence, holder = excluded.holder WHERE {h}.fence < excluded.fence"),
                recorded: format!("SELECT fence, holder FROM {h} WHERE name = ?1"),
            },
        }
    }

    /// Records `holder` for the acquisition of `name` with token `fence` (committed at once),
    /// creating the table when it is missing.
    pub(crate) async fn record(
        &self,
        pool: &AnyPool,
        label: &str,
        name: &str,
        fence: u64,
        holder: &str,
    ) -> Result<(), LockError> {
        let fence = fence as i64;
        let write = || {
            sqlx::query(AssertSqlSafe(self.record.as_str()))
                .bind(name)
                .bind(fence)
                .bind(holder)
                .execute(pool)
        };
        match write().await {
            Ok(_) => Ok(()),
            Err(e) if is_missing_table(&e) => {
                crate::client::create_if_missing(pool, &self.create)
                    .await
                    .map_err(|e| map(e, label, Some(name)))?;
                write()
                    .await
                    .map(|_| ())
                    .map_err(|e| map(e, label, Some(name)))
            }
            Err(e) => Err(map(e, label, Some(name))),
        }
    }

    /// The holder recorded for the acquisition of `name` with token `fence`, if any.
    pub(crate) async fn lookup(
        &self,
        pool: &AnyPool,
        label: &str,
        name: &str,
        fence: u64,
    ) -> Result<Option<String>, LockError> {
        let recorded = self.recorded(pool, label, name).await?;
        Ok(recorded.and_then(|(f, holder)| (f == fence).then_some(holder)))
    }

    /// The name's record, whichever acquisition wrote it: its token and holder.
    pub(crate) async fn recorded(
        &self,
        pool: &AnyPool,
        label: &str,
        name: &str,
    ) -> Result<Option<(u64, String)>, LockError> {
        let row = sqlx::query(AssertSqlSafe(self.recorded.as_str()))
            .bind(name)
            .fetch_optional(pool)
            .await;
        let m = |e| map(e, label, Some(name));
        match row {
            Ok(Some(r)) => {
                let fence: i64 = r.try_get(0).map_err(m)?;
                Ok(Some((fence as u64, r.try_get(1).map_err(m)?)))
            }
            Ok(None) => Ok(None),
            // Nobody recorded an identity yet on this database.
            Err(e) if is_missing_table(&e) => Ok(None),
            Err(e) => Err(m(e)),
        }
    }
}

/// PostgreSQL `42P01`, MySQL/MariaDB 1146, SQLite "no such table".
pub(crate) fn is_missing_table(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            db.code()
                .is_some_and(|c| c == "42P01" || c == "1146" || c == "42S02")
                || db.message().contains("no such table")
        }
        _ => false,
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    /// A late record of an earlier holder (token 5, written after the next holder's token 6)
    /// leaves the later holder's record in place, so `leader()` keeps naming it.
    #[tokio::test]
    async fn a_late_record_of_an_earlier_holder_never_overwrites_a_later_one() {
        sqlx::any::install_default_drivers();
        let pool = sqlx::any::AnyPoolOptions::new()
            .max_connections(1)
            .connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite");
        let h = HolderStatements::new(Dialect::Sqlite, "t");
        h.record(&pool, "sqlite-row", "job", 6, "b")
            .await
            .expect("record 6");
        h.record(&pool, "sqlite-row", "job", 5, "a")
            .await
            .expect("record 5");
        let got = h
            .lookup(&pool, "sqlite-row", "job", 6)
            .await
            .expect("lookup");
        assert_eq!(got.as_deref(), Some("b"));
        assert_eq!(
            h.lookup(&pool, "sqlite-row", "job", 5)
                .await
                .expect("lookup"),
            None
        );
    }
}

//! Holder identities in for_update and advisory modes ([`distlock_core::AcquireOptions::holder`],
//! used by leader election): which database session holds a lock, and what it recorded.
//!
//! A holder that carries an identity records `(name, conn, fence, holder)` in
//! `<table>_sessions` right after its grant (committed at once, on the side pool's connection),
//! where `conn` is the id of the connection that holds the lock (PostgreSQL `pg_backend_pid()`,
//! MySQL/MariaDB `CONNECTION_ID()`). Its release deletes the record before it lets the lock go
//! (for_update: in the holding transaction, so both happen at once).
//!
//! # Never another holder's identity
//! `inspect` reports a record only when the database itself says that the recorded connection
//! holds the lock now:
//! * PostgreSQL advisory: the session holding the advisory key in `pg_locks`;
//! * PostgreSQL for_update: the session whose transaction locked the row (the row's `xmax`,
//!   held as a transaction id lock in `pg_locks`);
//! * MySQL/MariaDB advisory: `IS_USED_LOCK`;
//! * MySQL/MariaDB for_update: the recorded connection has an open InnoDB transaction
//!   (`information_schema.INNODB_TRX`) while the row is locked. InnoDB does not say which
//!   transaction locks a row; the record is deleted in the holding transaction at release, and
//!   a connection id is not reused while the server runs, so a record outlives its hold only
//!   when the hold ended without a release and its connection lives on (a server-side
//!   rollback of an idle holder, which this mode's timeouts end by closing the connection).
//!
//! Between a grant and its record the holder has no identity yet: `leader()` waits a moment
//! and then says so with an error, as in row mode. The account needs `PROCESS` on MySQL/MariaDB
//! to read `INNODB_TRX` (for_update's `leader()` only).

use distlock_core::LockError;
use sqlx::{AnyConnection, AnyPool, AssertSqlSafe, Row};

use crate::config::{Dialect, Mode};
use crate::error::map;

/// The statements of one dialect and mode for the sessions table of lock table `t`.
#[derive(Debug)]
pub(crate) struct SessionStatements {
    create: String,
    /// Records `(name, conn, fence, holder)`, replacing the name's record of a lower token only.
    record: String,
    /// The id of the connection that runs it.
    conn_id: &'static str,
    /// Deletes the record `(name, fence)`.
    forget: String,
    /// `(fence, holder)` of the name's record if its connection holds the lock now.
    current: String,
    /// How often `current` binds the name.
    current_binds: usize,
}

/// A record to delete at release: `(statement, name, fence)`.
pub(crate) type Forget = (String, String, i64);

impl SessionStatements {
    /// The statements for `dialect` in `mode` (`None`: row mode and SQLite keep identities
    /// elsewhere or have no such mode).
    pub(crate) fn new(dialect: Dialect, mode: Mode, t: &str) -> Option<Self> {
        let s = format!("{t}_sessions");
        let sql = match (dialect, mode) {
            (_, Mode::Row) | (Dialect::Sqlite, _) => return None,
            (Dialect::Postgres, mode) => SessionStatements {
                create: format!("CREATE TABLE IF NOT EXISTS {s} (name TEXT PRIMARY KEY, conn BIGINT NOT NULL, fence BIGINT NOT NULL, holder TEXT NOT NULL)"),
                record: format!("INSERT INTO {s} (name, conn, fence, holder) VALUES ($1, $2, $3, $4) ON CONFLICT (name) DO UPDATE SET conn = EXCLUDED.conn, fence = EXCLUDED.fence, holder = EXCLUDED.holder WHERE {s}.fence < EXCLUDED.fence"),
                conn_id: "SELECT CAST(pg_backend_pid() AS BIGINT)",
                forget: format!("DELETE FROM {s} WHERE name = $1 AND fence = $2"),
                current: match mode {
                    // A bigint key shows in pg_locks as classid (high 32 bits), objid (low),
                    // objsubid 1.
                    Mode::Advisory => format!(
                        "SELECT s.fence, s.holder FROM {s} s WHERE s.name = $1 AND s.conn = (\
                         SELECT l.pid FROM pg_locks l, (SELECT key AS k FROM {t}_keys WHERE name = $1) k \
                         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
                         AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                         AND l.classid = ((k.k >> 32) & 4294967295)::oid AND l.objid = (k.k & 4294967295)::oid LIMIT 1)"
                    ),
                    // Every transaction holds its own transaction id lock; the row's xmax is
                    // the id of the transaction that locked it last.
                    _ => format!(
                        "SELECT s.fence, s.holder FROM {s} s WHERE s.name = $1 AND s.conn = (\
                         SELECT l.pid FROM {t} r JOIN pg_locks l ON l.locktype = 'transactionid' \
                         AND l.transactionid = r.xmax AND l.granted AND l.mode = 'ExclusiveLock' \
                         WHERE r.name = $1 LIMIT 1)"
                    ),
                },
                current_binds: 1,
            },
            (Dialect::MySql, mode) => SessionStatements {
                create: format!("CREATE TABLE IF NOT EXISTS {s} (name VARBINARY(1024) NOT NULL PRIMARY KEY, conn BIGINT NOT NULL, fence BIGINT NOT NULL, holder VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL) ENGINE=InnoDB"),
                record: format!("INSERT INTO {s} (name, conn, fence, holder) VALUES (?, ?, ?, ?) ON DUPLICATE KEY UPDATE conn = IF(VALUES(fence) > fence, VALUES(conn), conn), holder = IF(VALUES(fence) > fence, VALUES(holder), holder), fence = GREATEST(fence, VALUES(fence))"),
                conn_id: "SELECT CAST(CONNECTION_ID() AS SIGNED)",
                forget: format!("DELETE FROM {s} WHERE name = ? AND fence = ?"),
                current: match mode {
                    Mode::Advisory => format!(
                        "SELECT fence, holder FROM {s} WHERE name = ? AND conn = IS_USED_LOCK(SHA2(CONCAT('{t}:', ?), 256))"
                    ),
                    _ => format!(
                        "SELECT s.fence, s.holder FROM {s} s JOIN information_schema.INNODB_TRX x \
                         ON x.trx_mysql_thread_id = s.conn WHERE s.name = ?"
                    ),
                },
                current_binds: match mode {
                    Mode::Advisory => 2,
                    _ => 1,
                },
            },
        };
        Some(sql)
    }

    /// Records `holder` for the acquisition of `name` with token `fence`, held by `holding`
    /// (its id read there; the record committed at once through `pool`), creating the table
    /// when it is missing. Returns what release must run to delete it.
    pub(crate) async fn record(
        &self,
        holding: &mut AnyConnection,
        pool: &AnyPool,
        label: &str,
        (name, fence, holder): (&str, u64, &str),
    ) -> Result<Forget, LockError> {
        let m = |e| map(e, label, Some(name));
        let conn: i64 = sqlx::query(self.conn_id)
            .fetch_one(holding)
            .await
            .and_then(|r| r.try_get(0))
            .map_err(m)?;
        let fence = fence as i64;
        let write = || {
            sqlx::query(AssertSqlSafe(self.record.as_str()))
                .bind(name)
                .bind(conn)
                .bind(fence)
                .bind(holder)
                .execute(pool)
        };
        match write().await {
            Ok(_) => {}
            Err(e) if crate::holders::is_missing_table(&e) => {
                crate::client::create_if_missing(pool, &self.create)
                    .await
                    .map_err(m)?;
                write().await.map_err(m)?;
            }
            Err(e) => return Err(m(e)),
        }
        Ok((self.forget.clone(), name.to_owned(), fence))
    }

    /// The token and identity recorded by the session that holds `name` now, if it recorded
    /// them.
    pub(crate) async fn current(
        &self,
        pool: &AnyPool,
        label: &str,
        name: &str,
    ) -> Result<Option<(u64, String)>, LockError> {
        let mut q = sqlx::query(AssertSqlSafe(self.current.as_str()));
        for _ in 0..self.current_binds {
            q = q.bind(name);
        }
        match q.fetch_optional(pool).await {
            Ok(Some(r)) => {
                let fence: i64 = r.try_get(0).map_err(|e| map(e, label, Some(name)))?;
                let holder: String = r.try_get(1).map_err(|e| map(e, label, Some(name)))?;
                Ok(Some((fence as u64, holder)))
            }
            Ok(None) => Ok(None),
            // Nobody recorded an identity yet on this database.
            Err(e) if crate::holders::is_missing_table(&e) => Ok(None),
            Err(e) => Err(map(e, label, Some(name))),
        }
    }
}

/// Runs a [`Forget`] on `conn` (the holding connection, before it lets the lock go).
pub(crate) async fn forget(conn: &mut AnyConnection, forget: &Forget) -> Result<(), sqlx::Error> {
    let (sql, name, fence) = forget;
    sqlx::query(AssertSqlSafe(sql.as_str()))
        .bind(name.as_str())
        .bind(*fence)
        .execute(conn)
        .await
        .map(drop)
}

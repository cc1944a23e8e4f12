//! [`SqlClient`]: what every mode shares — one database's connection pools
//! (with each dialect's session settings), the configuration, the backend label, the lock
//! tables (created at connect when missing) and this process's waiter-queue keys.
//!
//! A statement made while a lock holds a connection of one pool never waits for another
//! connection of that same pool: acquisitions that each hold one and wait for a second would
//! wait for each other (with a pool of N, N acquisitions of different names at once stalled
//! for the pool's timeout and failed; a pool of one could take no for_update lock at all). So
//! the short statements made while a lock connection is held — token draws, holder records,
//! PostgreSQL's advisory key registrations — run on the [`side`](SqlClient::side) pool, and the gate rows of for_update's read-write lock
//! and semaphore, held while their side of the lock is taken, on the
//! [`gates`](SqlClient::gates) pool. Neither opens a connection before it is first used.
//! The reads that look at a lock (`inspect`, and so `leader`) run on the side pool too: the
//! client's own locks may hold every lock connection (a leader on a pool of one asking who
//! leads).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use distlock_core::backend::local_queue::Turn;
use distlock_core::backend::{Deadline, LocalQueue};
use distlock_core::LockError;
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::AssertSqlSafe;
use sqlx::{AnyPool, Executor, Row};

use crate::config::SqlConfig;
use crate::error::{classify, map, Failure};
use crate::statements::{self, ClientStatements};

/// The side pool's connections: `max_connections` within these bounds (each statement on it is
/// one short autocommitted round trip, and sqlx's ping as it goes back).
pub(crate) const SIDE_CONNECTIONS: (u32, u32) = (2, 16);

/// One client of one database: its pools, configuration and label. Every mode's lock types
/// ([`crate::row::RowLock`], [`crate::for_update::ForUpdateLock`], the advisory locks) run
/// over it.
pub(crate) struct SqlClient {
    pub(crate) cfg: SqlConfig,
    /// The lock connections (at most `max_connections`).
    pub(crate) pool: AnyPool,
    /// Short autocommitted statements made while a lock connection is held
    /// (`max_connections` within [`SIDE_CONNECTIONS`]): a statement on it never waits for
    /// anything but its own turn.
    pub(crate) side: AnyPool,
    /// for_update's gate rows, held while a connection of `pool` is taken (at most
    /// `max_connections`).
    pub(crate) gates: AnyPool,
    /// The backend label (`postgres-row`, …): the only name of the database in messages and
    /// logs (the URL is secret).
    pub(crate) label: String,
}

impl fmt::Debug for SqlClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlClient")
            .field("url", &self.cfg.redacted())
            .field("mode", &self.cfg.mode)
            .field("table", &self.cfg.table)
            .finish()
    }
}

impl SqlClient {
    /// Validates `cfg`, opens the pool (lazily: at most `max_connections`, each new connection
    /// running the dialect's session settings) and creates the missing lock tables.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a bad configuration, [`LockError::Unavailable`] when the
    /// database cannot be reached within `connect_timeout`.
    pub(crate) async fn connect(cfg: SqlConfig) -> Result<Self, LockError> {
        cfg.validate()?;
        sqlx::any::install_default_drivers();
        let label = cfg.backend_label();
        #[cfg(feature = "sqlite")]
        if cfg.dialect == crate::config::Dialect::Sqlite {
            crate::sqlite_busy::install().map_err(|rc| {
                LockError::backend(
                    &label,
                    None,
                    format!("SQLite refused distlock's busy handler hook (result code {rc})"),
                    None,
                )
            })?;
        }
        let opts = AnyConnectOptions::from_str(cfg.driver_url()).map_err(|e| {
            LockError::invalid_config(format!("bad database URL {:?}: {e}", cfg.redacted()))
        })?;
        let sql = statements::client(cfg.dialect, cfg.mode, &cfg.table);
        let session = sql.session;
        let options = |max| {
            crate::liveness::check_when_idle(AnyPoolOptions::new())
                .max_connections(max)
                .min_connections(0)
                .acquire_timeout(cfg.connect_timeout)
                .after_connect(move |conn, _| {
                    Box::pin(async move {
                        for setting in session {
                            conn.execute(*setting).await?;
                        }
                        Ok(())
                    })
                })
        };
        let pool = options(cfg.max_connections)
            .connect_with(opts.clone())
            .await
            .map_err(|e| map(e, &label, None))?;
        let (least, most) = SIDE_CONNECTIONS;
        let side = options(cfg.max_connections.clamp(least, most)).connect_lazy_with(opts.clone());
        let gates = options(cfg.max_connections).connect_lazy_with(opts);
        let client = SqlClient {
            cfg,
            pool,
            side,
            gates,
            label,
        };
        client.create_schema(&sql).await?;
        Ok(client)
    }

    /// This process's waiter-queue key for `name` (see [`distlock_core::backend::LocalQueue`]):
    /// shared by every client of the same database and table.
    pub(crate) fn queue_key(&self, name: &str) -> String {
        distlock_core::backend::local_queue::key(self.cfg.driver_url(), &self.cfg.table, name)
    }

    /// Waits for this acquisition's turn among this process's waiters for `name` (arrival
    /// order; only the head talks to the database); a try (`try_only`) does not queue.
    pub(crate) async fn local_turn(
        &self,
        name: &str,
        try_only: bool,
        deadline: &Deadline,
    ) -> Option<Turn> {
        match try_only {
            false => Some(LocalQueue::wait_turn(self.queue_key(name), deadline).await),
            true => None,
        }
    }

    /// Creates the tables (and counter) that are missing. Safe when many processes start at
    /// once: PostgreSQL serializes creators with a transaction-scoped advisory lock; "already
    /// exists" races are tolerated everywhere. Bounded: 10 attempts, 20–200 ms apart.
    pub(crate) async fn create_schema(&self, sql: &ClientStatements) -> Result<(), LockError> {
        for attempt in 0..10u32 {
            match self.try_create_schema(sql).await {
                Ok(()) => return Ok(()),
                Err(Failure::Retry) | Err(Failure::Busy) => {
                    tracing::debug!(
                        backend = %self.label,
                        table = %self.cfg.table,
                        attempt,
                        "schema creation conflicted with another client; retrying"
                    );
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt + 1))).await;
                }
                Err(Failure::Error(e)) => return Err(e),
            }
        }
        Err(LockError::backend(
            &self.label,
            None,
            format!(
                "could not create lock table `{}`: kept conflicting with concurrent creators",
                self.cfg.table
            ),
            None,
        ))
    }

    async fn try_create_schema(&self, sql: &ClientStatements) -> Result<(), Failure> {
        let c = |e| classify(e, &self.label, None);
        // MySQL DDL, even `IF NOT EXISTS`, queues for an exclusive metadata lock behind every
        // open for_update transaction and blocks all later statements on the table meanwhile;
        // PostgreSQL checks the CREATE privilege before `IF NOT EXISTS`, so a user with only
        // SELECT/INSERT/UPDATE/DELETE on existing tables could not connect otherwise. So only
        // what is missing is created.
        let mut missing = Vec::new();
        for ddl in &sql.schema {
            match (&ddl.object, sql.object_exists) {
                (Some(object), Some(exists)) if self.exists(object, exists).await? => {}
                _ => missing.push(ddl.sql.clone()),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        tracing::debug!(
            backend = %self.label,
            table = %self.cfg.table,
            statements = missing.len(),
            "creating the missing lock tables"
        );
        let mut tx = crate::begin::begin(&self.pool, None).await.map_err(c)?;
        if let Some(schema_lock) = sql.schema_lock {
            tx.execute(schema_lock).await.map_err(c)?;
        }
        for stmt in missing {
            if let Err(e) = tx.execute(AssertSqlSafe(stmt)).await {
                if !already_exists(&e) {
                    return Err(c(e));
                }
            }
        }
        tx.commit().await.map_err(c)
    }

    /// Whether `object` exists, by `sql` (one bound name, returns a count).
    async fn exists(&self, object: &str, sql: &str) -> Result<bool, Failure> {
        Ok(self.fetch_i64(sql, Some(object)).await? > 0)
    }

    /// The first column of the one row `sql` returns (with `arg` bound, if any).
    async fn fetch_i64(&self, sql: &str, arg: Option<&str>) -> Result<i64, Failure> {
        let mut query = sqlx::query(AssertSqlSafe(sql));
        if let Some(arg) = arg {
            query = query.bind(arg);
        }
        let row = query
            .fetch_one(&self.pool)
            .await
            .map_err(|e| classify(e, &self.label, None))?;
        row.try_get(0)
            .map_err(|e| Failure::Error(map(e, &self.label, None)))
    }
}

/// Runs `ddl`, a `CREATE … IF NOT EXISTS`: another client creating the same object at the same
/// moment is no error (PostgreSQL reports that race as a unique violation on its catalog,
/// `IF NOT EXISTS` notwithstanding; `tests/schema_races.rs`).
pub(crate) async fn create_if_missing(pool: &AnyPool, ddl: &str) -> Result<(), sqlx::Error> {
    match sqlx::query(AssertSqlSafe(ddl)).execute(pool).await {
        Err(e) if !already_exists(&e) => Err(e),
        _ => Ok(()),
    }
}

/// Whether a DDL error says a concurrent creator got there first.
fn already_exists(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            code == "42P07"
                || code == "23505"
                || code == "42S01"
                || db.message().contains("already exists")
        }
        _ => false,
    }
}

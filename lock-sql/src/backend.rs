//! [`SqlLock`]: one client (one connection pool) of one database, in row or for_update mode.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Attempt, LockBackend};
use lock_core::{
    AcquireOptions, Capabilities, CrashRelease, DistributedLock, LockError, LockGuard, LockInfo,
    Wakeup,
};
use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::AssertSqlSafe;
use sqlx::{AnyPool, Executor, Row};

use crate::config::{Dialect, Mode, SqlConfig};
use crate::error::{classify, map, Failure};
use crate::notify::Wakeups;
use crate::statements::{
    object_exists, statements, Statements, MYSQL_SEQUENCE_EXISTS, MYSQL_SESSION, PG_SCHEMA_LOCK,
    SQLITE_SESSION,
};
use crate::{for_update, row};

/// A SQL lock client: a connection pool, the statements for its table, and (PostgreSQL) the
/// shared release listener. Cheap to share behind an `Arc`.
pub struct SqlLock {
    pub(crate) cfg: SqlConfig,
    pub(crate) pool: AnyPool,
    pub(crate) sql: Arc<Statements>,
    pub(crate) wakeups: Wakeups,
    pub(crate) label: String,
}

impl fmt::Debug for SqlLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLock")
            .field("url", &self.cfg.redacted())
            .field("mode", &self.cfg.mode)
            .field("table", &self.cfg.table)
            .finish()
    }
}

impl SqlLock {
    /// Connects (one pool per client), creating the lock table if missing.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a bad configuration, [`LockError::Unavailable`] when the
    /// database cannot be reached within `connect_timeout`.
    pub async fn connect(cfg: SqlConfig) -> Result<Self, LockError> {
        cfg.validate()?;
        sqlx::any::install_default_drivers();
        let label = cfg.backend_label();
        let opts = AnyConnectOptions::from_str(cfg.driver_url()).map_err(|e| {
            LockError::invalid_config(format!("bad database URL {:?}: {e}", cfg.redacted()))
        })?;
        let sqlite = cfg.dialect == Dialect::Sqlite;
        let mysql = cfg.dialect == Dialect::MySql;
        let pool = AnyPoolOptions::new()
            .max_connections(cfg.max_connections)
            .min_connections(0)
            .acquire_timeout(cfg.connect_timeout)
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if mysql {
                        conn.execute(MYSQL_SESSION).await?;
                    }
                    if sqlite {
                        for pragma in SQLITE_SESSION {
                            conn.execute(*pragma).await?;
                        }
                    }
                    Ok(())
                })
            })
            .connect_with(opts)
            .await
            .map_err(|e| map(e, &label, None))?;
        let sql = Arc::new(statements(cfg.dialect, cfg.mode, &cfg.table));
        let lock = SqlLock {
            cfg,
            pool,
            sql,
            wakeups: Wakeups::default(),
            label,
        };
        lock.create_schema().await?;
        Ok(lock)
    }

    /// The configuration in use.
    pub fn config(&self) -> &SqlConfig {
        &self.cfg
    }

    /// This process's waiter-queue key for `name` (see [`lock_core::local_queue`]).
    pub(crate) fn queue_key(&self, name: &str) -> String {
        lock_core::backend::local_queue::key(self.cfg.driver_url(), &self.cfg.table, name)
    }

    /// The connection pool (for operators and tests).
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    /// Creates the tables (and counter) that are missing. Safe when many processes start at
    /// once: PostgreSQL serializes creators with a transaction-scoped advisory lock; "already
    /// exists" races are tolerated everywhere. Bounded: 10 attempts, 20–200 ms apart.
    async fn create_schema(&self) -> Result<(), LockError> {
        for attempt in 0..10u32 {
            match self.try_create_schema().await {
                Ok(()) => return Ok(()),
                Err(Failure::Retry) | Err(Failure::Busy) => {
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

    async fn try_create_schema(&self) -> Result<(), Failure> {
        let c = |e| classify(e, &self.label, None);
        // MySQL DDL, even `IF NOT EXISTS`, queues for an exclusive metadata lock behind every
        // open for_update transaction and blocks all later statements on the table meanwhile;
        // PostgreSQL checks the CREATE privilege before `IF NOT EXISTS`, so a user with only
        // SELECT/INSERT/UPDATE/DELETE on existing tables could not connect otherwise. So only
        // what is missing is created.
        let mut missing = Vec::new();
        for ddl in &self.sql.schema {
            match &ddl.object {
                Some(object) if self.exists(object, object_exists(self.cfg.dialect)).await? => {}
                _ => missing.push(ddl.sql.clone()),
            }
        }
        if missing.is_empty() {
            return Ok(());
        }
        let floor = self.token_floor().await?;
        let mut tx = self.pool.begin().await.map_err(c)?;
        if self.cfg.dialect == Dialect::Postgres {
            tx.execute(PG_SCHEMA_LOCK).await.map_err(c)?;
        }
        for stmt in missing {
            let stmt = stmt.replace("{floor}", &floor.to_string());
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
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(object)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| classify(e, &self.label, None))?;
        let n: i64 = row
            .try_get(0)
            .map_err(|e| Failure::Error(map(e, &self.label, None)))?;
        Ok(n > 0)
    }

    /// MySQL for_update: the first token the token table hands out. Above every token an
    /// earlier version issued from its MariaDB sequence `<table>_fence`, when that exists (a
    /// value drawn from it now exceeds all of them); 1 otherwise. Only read while the token
    /// table is being created: clients of the earlier version must be stopped by then.
    async fn token_floor(&self) -> Result<i64, Failure> {
        let Some((sequence, next)) = &self.sql.old_sequence else {
            return Ok(1);
        };
        if !self.exists(sequence, MYSQL_SEQUENCE_EXISTS).await? {
            return Ok(1);
        }
        let row = sqlx::query(AssertSqlSafe(next.as_str()))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| classify(e, &self.label, None))?;
        let v: i64 = row
            .try_get(0)
            .map_err(|e| Failure::Error(map(e, &self.label, None)))?;
        Ok(v.max(1))
    }
}

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

#[async_trait]
impl LockBackend for SqlLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        match self.cfg.mode {
            Mode::Row => row::acquire(self, name, opts, try_only).await,
            Mode::ForUpdate => for_update::acquire(self, name, opts, try_only).await,
        }
    }

    fn capabilities(&self) -> Capabilities {
        match (self.cfg.mode, self.cfg.dialect) {
            (Mode::Row, Dialect::Postgres) => Capabilities::leased(Wakeup::Notify, false),
            (Mode::Row, _) => Capabilities::leased(Wakeup::Backoff, false),
            (Mode::ForUpdate, d) => Capabilities::bound(
                CrashRelease::Connection,
                Wakeup::LockQueue,
                d == Dialect::Postgres,
            ),
        }
    }

    fn backend_name(&self) -> &str {
        &self.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        match self.cfg.mode {
            Mode::Row => row::inspect(self, name).await,
            Mode::ForUpdate => for_update::inspect(self, name).await,
        }
    }
}

/// Connects from a URL (`postgres://`, `mysql://`, `sqlite://`…).
///
/// # Errors
/// As [`SqlConfig::from_url`] and [`SqlLock::connect`].
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Ok(Arc::new(SqlLock::connect(SqlConfig::from_url(url)?).await?))
}

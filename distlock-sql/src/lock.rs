//! [`SqlLock`]: the public client. It connects once ([`SqlClient`]) and hands every operation
//! to its mode's lock type, [`RowLock`], [`ForUpdateLock`] or [`AdvisoryLock`], chosen here and
//! only here.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::backend::{Attempt, LockBackend};
use distlock_core::{
    Access, AcquireOptions, Broken, Capabilities, DistributedLock, Listing, LockError, LockGuard,
    LockInfo,
};
use sqlx::AnyPool;

use crate::advisory::gated_rw::GatedRw;
use crate::advisory::semaphore::AdvisorySemaphore;
use crate::advisory::AdvisoryLock;
use crate::client::SqlClient;
use crate::config::{Mode, SqlConfig};
use crate::for_update::rw::ForUpdateRw;
use crate::for_update::semaphore::ForUpdateSemaphore;
use crate::for_update::ForUpdateLock;
use crate::holders::HolderStatements;
use crate::row::RowLock;
use crate::sessions::SessionStatements;
use crate::statements::PermitStatements;

/// A distributed lock on one SQL database: one client with its own connection pool, in the
/// mode its [`SqlConfig`] names (row, for_update or advisory; the crate docs say what each guarantees).
/// Implements [`DistributedLock`]; share it behind an `Arc`. A guard holds its own handle on
/// the pool, so it stays usable after the `SqlLock` it came from is dropped.
pub struct SqlLock {
    client: Arc<SqlClient>,
    /// The mode's implementation, over `client`.
    mode: Box<dyn LockBackend>,
    /// Holder identities: row mode (see `holders.rs`).
    holders: Option<HolderStatements>,
    /// Holder identities: for_update and advisory modes (see `sessions.rs`).
    sessions: Option<SessionStatements>,
    /// Advisory mode on PostgreSQL: the read-write lock's read and write sides.
    advisory_rw: Option<[AdvisoryLock; 2]>,
    /// for_update mode: the read-write lock, once its tables exist (`for_update/rw.rs`).
    for_update_rw: tokio::sync::OnceCell<Arc<ForUpdateRw>>,
    /// for_update mode: the semaphore, once its tables exist (`for_update/semaphore.rs`).
    for_update_semaphore: tokio::sync::OnceCell<Arc<ForUpdateSemaphore>>,
    /// advisory mode: the semaphore, once its count table exists (`advisory/semaphore.rs`).
    advisory_semaphore: tokio::sync::OnceCell<Arc<AdvisorySemaphore>>,
    /// advisory mode on MySQL/MariaDB: the read-write lock from exclusive locks, once its
    /// count table exists (`advisory/gated_rw.rs`).
    advisory_gated_rw: tokio::sync::OnceCell<Arc<GatedRw>>,
    /// The semaphore and read-write lock statements, once their tables exist (`permits/`).
    permits: tokio::sync::OnceCell<Arc<PermitStatements>>,
}

impl fmt::Debug for SqlLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLock")
            .field("url", &self.client.cfg.redacted())
            .field("mode", &self.client.cfg.mode)
            .field("table", &self.client.cfg.table)
            .finish()
    }
}

impl SqlLock {
    /// Connects (one pool per client) and creates the lock tables that are missing. The
    /// database is reached at least once before this returns.
    ///
    /// # Errors
    /// [`LockError::InvalidConfig`] for a bad configuration (for_update or advisory on SQLite, a bad table
    /// name or URL, refused credentials, missing privileges), [`LockError::Unavailable`] when
    /// the database cannot be reached within `connect_timeout`.
    pub async fn connect(cfg: SqlConfig) -> Result<Self, LockError> {
        let client = Arc::new(SqlClient::connect(cfg).await?);
        let mode: Box<dyn LockBackend> = match client.cfg.mode {
            Mode::Row => Box::new(RowLock::new(Arc::clone(&client))),
            Mode::ForUpdate => Box::new(ForUpdateLock::new(Arc::clone(&client))?),
            Mode::Advisory => Box::new(AdvisoryLock::new(Arc::clone(&client))?),
        };
        let holders = (client.cfg.mode == Mode::Row)
            .then(|| HolderStatements::new(client.cfg.dialect, &client.cfg.table));
        let sessions =
            SessionStatements::new(client.cfg.dialect, client.cfg.mode, &client.cfg.table);
        let advisory_rw = match client.cfg.mode {
            Mode::Advisory => {
                let side = |access| AdvisoryLock::side(Arc::clone(&client), access);
                side(Access::Read)?
                    .zip(side(Access::Write)?)
                    .map(|(r, w)| [r, w])
            }
            _ => None,
        };
        Ok(SqlLock {
            client,
            mode,
            holders,
            sessions,
            advisory_rw,
            for_update_rw: tokio::sync::OnceCell::new(),
            for_update_semaphore: tokio::sync::OnceCell::new(),
            advisory_semaphore: tokio::sync::OnceCell::new(),
            advisory_gated_rw: tokio::sync::OnceCell::new(),
            permits: tokio::sync::OnceCell::new(),
        })
    }

    /// The configuration in use (its `Debug` never shows the password).
    pub fn config(&self) -> &SqlConfig {
        &self.client.cfg
    }

    /// The connected client.
    pub(crate) fn client(&self) -> &Arc<SqlClient> {
        &self.client
    }

    /// Advisory mode on PostgreSQL: the read-write lock's side for `access`.
    pub(crate) fn advisory_side(&self, access: Access) -> Option<&AdvisoryLock> {
        let sides = self.advisory_rw.as_ref()?;
        Some(&sides[usize::from(access == Access::Write)])
    }

    /// for_update mode: the read-write lock (its tables created on first use); `None` in the
    /// other modes.
    pub(crate) async fn for_update_rw(&self) -> Result<Option<Arc<ForUpdateRw>>, LockError> {
        if self.client.cfg.mode != Mode::ForUpdate {
            return Ok(None);
        }
        self.for_update_rw
            .get_or_try_init(|| async { Ok(Arc::new(ForUpdateRw::new(&self.client).await?)) })
            .await
            .cloned()
            .map(Some)
    }

    /// for_update mode: the semaphore (its tables created on first use); `None` in the other
    /// modes.
    pub(crate) async fn for_update_semaphore(
        &self,
    ) -> Result<Option<Arc<ForUpdateSemaphore>>, LockError> {
        if self.client.cfg.mode != Mode::ForUpdate {
            return Ok(None);
        }
        self.for_update_semaphore
            .get_or_try_init(|| async {
                Ok(Arc::new(ForUpdateSemaphore::new(&self.client).await?))
            })
            .await
            .cloned()
            .map(Some)
    }

    /// advisory mode: the semaphore (its count table created on first use); `None` in the
    /// other modes.
    pub(crate) async fn advisory_semaphore(
        &self,
    ) -> Result<Option<Arc<AdvisorySemaphore>>, LockError> {
        if self.client.cfg.mode != Mode::Advisory {
            return Ok(None);
        }
        self.advisory_semaphore
            .get_or_try_init(|| async { Ok(Arc::new(AdvisorySemaphore::new(&self.client).await?)) })
            .await
            .cloned()
            .map(Some)
    }

    /// advisory mode without shared advisory locks (MySQL/MariaDB): the read-write lock (its
    /// count table created on first use); `None` elsewhere.
    pub(crate) async fn advisory_gated_rw(&self) -> Result<Option<Arc<GatedRw>>, LockError> {
        if self.client.cfg.mode != Mode::Advisory || self.advisory_rw.is_some() {
            return Ok(None);
        }
        self.advisory_gated_rw
            .get_or_try_init(|| async { Ok(Arc::new(GatedRw::new(&self.client).await?)) })
            .await
            .cloned()
            .map(Some)
    }

    /// Where the semaphore and read-write lock statements are kept once set up.
    pub(crate) fn permit_cell(&self) -> &tokio::sync::OnceCell<Arc<PermitStatements>> {
        &self.permits
    }

    /// The connection pool the locks use (for operators and tests). Statements run on it do
    /// not take part in any lock; a for_update or advisory guard keeps one of its connections
    /// while held.
    pub fn pool(&self) -> &AnyPool {
        &self.client.pool
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
        let won = self.mode.attempt(name, opts, how).await?;
        if let (Some(g), Some(holders), Some(holder)) = (&won, &self.holders, &opts.holder) {
            let (pool, label) = (&self.client.pool, &self.client.label);
            if let Err(e) = holders
                .record(pool, label, name, g.fencing_token(), holder)
                .await
            {
                // The lock is held all the same; `leader()` reports the missing identity.
                tracing::warn!(backend = %label, name, error = %e, "could not record the holder identity");
            }
        }
        Ok(won)
    }

    fn capabilities(&self) -> Capabilities {
        let operator = crate::operator::statements(&self.client);
        self.mode
            .capabilities()
            .with_holder_identity(self.holders.is_some() || self.sessions.is_some())
            .with_operator(operator.list.is_ok(), operator.break_row.is_ok())
    }

    fn backend_name(&self) -> &str {
        self.mode.backend_name()
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let info = self.mode.inspect(name).await?;
        if let (Some(sessions), true) = (&self.sessions, info.held) {
            let (pool, label) = (&self.client.side, &self.client.label);
            return Ok(match sessions.current(pool, label, name).await? {
                Some((token, holder)) => {
                    LockInfo::held(Some(token), None, None, info.waiters).with_holder(Some(holder))
                }
                None => info,
            });
        }
        match (&self.holders, info.held, info.fencing_token) {
            (Some(holders), true, Some(token)) => {
                let (pool, label) = (&self.client.side, &self.client.label);
                let holder = holders.lookup(pool, label, name, token).await?;
                Ok(info.with_holder(holder))
            }
            _ => Ok(info),
        }
    }

    /// See `operator.rs`: row mode everywhere, for_update and advisory on PostgreSQL.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Listing, LockError> {
        crate::operator::list(&self.client, prefix, limit).await
    }

    /// See `operator.rs`: row mode only.
    async fn break_lock(&self, name: &str) -> Result<Broken, LockError> {
        crate::operator::break_lock(&self.client, self.holders.as_ref(), name).await
    }
}

/// Connects from a URL (`postgres://`, `postgresql://`, `mysql://`, `mariadb://`,
/// `sqlite://`; distlock's parameters `mode`, `table`, `max_connections`, `connect_timeout`).
/// The facade's scheme registry calls this.
///
/// # Errors
/// As [`SqlConfig::from_url`] and [`SqlLock::connect`].
pub async fn connect(url: &str) -> Result<Arc<dyn DistributedLock>, LockError> {
    Ok(Arc::new(SqlLock::connect(SqlConfig::from_url(url)?).await?))
}

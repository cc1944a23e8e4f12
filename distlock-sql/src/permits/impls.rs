//! [`SqlLock`] as a [`SemaphoreBackend`] and an [`RwLockBackend`] (row mode here; the other
//! modes' implementations are dispatched to), and the connect functions the facade's registry
//! calls.

use std::sync::Arc;

use async_trait::async_trait;
use distlock_core::backend::{owner_token, Attempt, LockBackend, RwLockBackend, SemaphoreBackend};
use distlock_core::{
    Access, AcquireOptions, Capabilities, DistributedRwLock, DistributedSemaphore, LockError,
    LockGuard, RwLockInfo, SemaphoreInfo, Wakeup,
};
use sqlx::{AssertSqlSafe, Row};

use super::acquire::acquire;
use super::admit::Ask;
use super::lease::Member;
use crate::config::{Mode, SqlConfig};
use crate::error::map;
use crate::statements::{self, PermitStatements};
use crate::SqlLock;

/// Leased (database clock), polled with backoff and woken by local releases, FIFO across
/// processes (the queue is in the database), queue lengths known.
fn capabilities() -> Capabilities {
    Capabilities::leased(Wakeup::Backoff, true).with_queue_length(true)
}

/// for_update and advisory modes' semaphore and read-write lock: held by a connection, waiters
/// in the database's lock queue (a gate per name), FIFO where its locks are (PostgreSQL).
fn held_capabilities(lock: &SqlLock) -> Capabilities {
    Capabilities::bound(
        distlock_core::CrashRelease::Connection,
        Wakeup::LockQueue,
        lock.client().cfg.dialect == crate::config::Dialect::Postgres,
    )
}

/// The live holders by kind, the live waiters and the count, of one name.
struct Peek {
    shared: usize,
    writer: bool,
    waiting: usize,
    max: Option<u32>,
}

impl SqlLock {
    /// The permit statements, the tables created on first use; row mode only.
    async fn permits(&self, what: &str) -> Result<Arc<PermitStatements>, LockError> {
        let client = self.client();
        if client.cfg.mode != Mode::Row {
            return Err(LockError::unsupported(
                &client.label,
                format!(
                    "{what} (offered in mode=row and mode=for_update; in mode=advisory a semaphore on PostgreSQL and MySQL/MariaDB, a read-write lock on PostgreSQL only)"
                ),
            ));
        }
        self.permit_cell()
            .get_or_try_init(|| async {
                let sql = statements::permits(client.cfg.dialect, &client.cfg.table);
                let mut schema =
                    statements::client(client.cfg.dialect, Mode::Row, &client.cfg.table);
                schema.schema = sql.schema.clone();
                client.create_schema(&schema).await?;
                Ok(Arc::new(sql))
            })
            .await
            .cloned()
    }

    async fn permit_attempt(
        &self,
        what: &str,
        ask: Ask,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let sql = self.permits(what).await?;
        let client = Arc::clone(self.client());
        let who = Member {
            wake_key: format!("{}\0{}", client.queue_key(&ask.name), ask.family),
            client,
            sql,
            name: ask.name.clone(),
            family: ask.family,
            member: ask.member.clone(),
        };
        acquire(who, ask, opts, how == Attempt::Try).await
    }

    async fn permit_peek(&self, what: &str, name: &str, family: &str) -> Result<Peek, LockError> {
        let sql = self.permits(what).await?;
        let client = self.client();
        let m = |e| map(e, &client.label, Some(name));
        let q = |s: &str| {
            sqlx::query(AssertSqlSafe(s.to_owned()))
                .bind(name.to_owned())
                .bind(family.to_owned())
        };
        let mut p = Peek {
            shared: 0,
            writer: false,
            waiting: 0,
            max: None,
        };
        for r in q(&sql.live_holders)
            .fetch_all(&client.pool)
            .await
            .map_err(m)?
        {
            let (kind, n): (String, i64) = (r.try_get(0).map_err(m)?, r.try_get(1).map_err(m)?);
            match kind.as_str() {
                "W" => p.writer = n > 0,
                _ => p.shared += n.max(0) as usize,
            }
        }
        let waiting: i64 = q(&sql.live_waiters)
            .fetch_one(&client.pool)
            .await
            .map_err(m)?
            .try_get(0)
            .map_err(m)?;
        p.waiting = waiting.max(0) as usize;
        if p.shared + p.waiting > 0 || p.writer {
            let max: Option<i64> = match q(&sql.max_count)
                .fetch_optional(&client.pool)
                .await
                .map_err(m)?
            {
                Some(r) => r.try_get(0).map_err(m)?,
                None => None,
            };
            p.max = max.and_then(|v| u32::try_from(v).ok());
        }
        Ok(p)
    }
}

fn ask(name: &str, family: &'static str, kind: &'static str, opts: &AcquireOptions) -> Ask {
    Ask {
        name: name.to_owned(),
        family,
        member: format!("{kind}{}", owner_token()),
        kind,
        max: None,
        ttl: opts.ttl,
        queue: true,
    }
}

#[async_trait]
impl SemaphoreBackend for SqlLock {
    async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        if let Some(sem) = self.for_update_semaphore().await? {
            return sem.attempt(name, max_count, opts, how).await;
        }
        if let Some(sem) = self.advisory_semaphore().await? {
            return sem.attempt(name, max_count, opts, how).await;
        }
        let mut a = ask(name, "sem", "P", opts);
        a.max = Some(max_count);
        a.queue = how == Attempt::Wait;
        self.permit_attempt("semaphore", a, opts, how).await
    }

    fn capabilities(&self) -> Capabilities {
        let pg = self.client().cfg.dialect == crate::config::Dialect::Postgres;
        match self.client().cfg.mode {
            Mode::ForUpdate => held_capabilities(self),
            // PostgreSQL shows the gate's queue in `pg_locks`.
            Mode::Advisory => held_capabilities(self).with_queue_length(pg),
            Mode::Row => capabilities(),
        }
    }

    fn backend_name(&self) -> &str {
        &self.client().label
    }

    async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        if let Some(sem) = self.advisory_semaphore().await? {
            return sem.inspect(name).await;
        }
        if self.client().cfg.mode == Mode::ForUpdate {
            // Another session cannot count the waiters queued on the gate's row lock.
            return Err(LockError::unsupported(
                &self.client().label,
                "inspect of a semaphore in mode=for_update",
            ));
        }
        let p = self.permit_peek("semaphore", name, "sem").await?;
        let mut info = SemaphoreInfo::default();
        info.max_count = p.max;
        info.holders = p.shared;
        info.waiters = p.waiting;
        Ok(info)
    }
}

#[async_trait]
impl RwLockBackend for SqlLock {
    async fn attempt(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        if let Some(side) = self.advisory_side(access) {
            return LockBackend::attempt(side, name, opts, how).await;
        }
        if let Some(rw) = self.advisory_gated_rw().await? {
            return rw.attempt(name, access, opts, how).await;
        }
        if let Some(rw) = self.for_update_rw().await? {
            return rw.attempt(name, access, opts, how).await;
        }
        let kind = match access {
            Access::Read => "R",
            Access::Write => "W",
        };
        let mut a = ask(name, "rw", kind, opts);
        a.queue = how == Attempt::Wait;
        self.permit_attempt("read-write lock", a, opts, how).await
    }

    fn capabilities(&self) -> Capabilities {
        match self.advisory_side(Access::Read) {
            Some(side) => LockBackend::capabilities(side),
            // MySQL/MariaDB's gated read-write lock: held by a session, as for_update's.
            None if self.client().cfg.mode != Mode::Row => held_capabilities(self),
            None => capabilities(),
        }
    }

    fn backend_name(&self) -> &str {
        &self.client().label
    }

    async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        if let Some(side) = self.advisory_side(Access::Read) {
            let (readers, writers, waiting) = side.rw_state(name).await?;
            let mut info = RwLockInfo::default();
            (info.readers, info.writer, info.waiters) = (readers, writers > 0, waiting);
            return Ok(info);
        }
        if let Some(rw) = self.advisory_gated_rw().await? {
            return rw.inspect(name).await;
        }
        if self.client().cfg.mode == Mode::ForUpdate {
            // Another session cannot count the readers holding a shared row lock.
            return Err(LockError::unsupported(
                &self.client().label,
                "inspect of a read-write lock in mode=for_update",
            ));
        }
        let p = self.permit_peek("read-write lock", name, "rw").await?;
        let mut info = RwLockInfo::default();
        info.readers = p.shared;
        info.writer = p.writer;
        info.waiters = p.waiting;
        Ok(info)
    }
}

/// Connects a semaphore from a SQL URL: row mode (the default), for_update mode (slot rows) or
/// advisory mode (slot advisory locks, PostgreSQL and MySQL/MariaDB).
///
/// # Errors
/// As [`crate::connect`].
pub async fn connect_semaphore(url: &str) -> Result<Arc<dyn DistributedSemaphore>, LockError> {
    let lock = SqlLock::connect(SqlConfig::from_url(url)?).await?;
    if lock.for_update_semaphore().await?.is_none() && lock.advisory_semaphore().await?.is_none() {
        lock.permits("semaphore").await?;
    }
    Ok(Arc::new(lock))
}

/// Connects a read-write lock from a SQL URL: row mode (the default), for_update mode (`FOR
/// SHARE` / `LOCK IN SHARE MODE` against `FOR UPDATE` behind a gate row), or advisory mode
/// (PostgreSQL: `pg_advisory_lock_shared` / `pg_advisory_lock`; MySQL/MariaDB, whose `GET_LOCK`
/// has no shared mode: a gate lock and reader slot locks, `advisory/gated_rw.rs`).
///
/// # Errors
/// As [`crate::connect`].
pub async fn connect_rwlock(url: &str) -> Result<Arc<dyn DistributedRwLock>, LockError> {
    let lock = SqlLock::connect(SqlConfig::from_url(url)?).await?;
    if lock.advisory_side(Access::Read).is_none()
        && lock.for_update_rw().await?.is_none()
        && lock.advisory_gated_rw().await?.is_none()
    {
        lock.permits("read-write lock").await?;
    }
    Ok(Arc::new(lock))
}

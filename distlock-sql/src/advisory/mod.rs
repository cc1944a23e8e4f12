//! advisory mode ([`AdvisoryLock`]): the database's own named locks, held by a session. A guard
//! owns a dedicated pooled connection whose session holds the lock ([`AdvisoryLease`]):
//! PostgreSQL's session-level `pg_advisory_lock` on a 64-bit key, MySQL/MariaDB's `GET_LOCK`
//! on a 64-character name. The statements are in `statements/<dialect>.rs`.
//!
//! # Keys
//! The key is a SHA-256 digest of `<table>:<name>` computed by the database: PostgreSQL takes
//! its first 8 bytes as the `bigint` key, MySQL/MariaDB all 64 hex digits as the `GET_LOCK`
//! name (its limit is 64 characters, and lock names compare case-insensitively: a hex digest is
//! lowercase whatever the name, so `Job` and `job` stay two locks). Names of any length map to
//! a key; the table name keeps clients of different tables apart.
//!
//! Two different names never share a key. On MySQL/MariaDB that would need a SHA-256
//! collision. On PostgreSQL the key has 64 bits, so a collision is possible in principle (among
//! a million names, the chance that any two share a digest prefix is about 3 in 10⁸): every
//! name is registered once, before its first lock, in `<table>_keys (name PRIMARY KEY, key
//! UNIQUE)` under its digest prefix, or — when another name already has that key — under the
//! first free of 15 variations (the prefix XOR 1…15). A name's key never changes once
//! registered, and every client reads it from the registry, so all of them lock the same key
//! for a name and no two names exclude each other. (Clients of an earlier version computed the
//! key without the registry: stop them before the first client of this one starts.)
//!
//! # Waiting
//! The waiters of one process queue in arrival order
//! ([`LocalQueue`](distlock_core::backend::LocalQueue)) and only the head holds a
//! connection, waiting in the database: PostgreSQL `pg_advisory_lock` bounded by the session's
//! `lock_timeout` (ms, 0 = forever; its lock manager queues waiters in order, so the mode is
//! FIFO across processes); MySQL/MariaDB `GET_LOCK(key, seconds)` (fractional seconds, one hour
//! at most per call, repeated for longer or endless waits; its metadata-lock queue is not
//! documented as FIFO, so the mode does not claim it there). A zero wait tries once
//! (`pg_try_advisory_lock`, `GET_LOCK(key, 0)`).
//!
//! # Fencing, loss, release
//! Tokens are drawn after the lock is granted from for_update's counters: PostgreSQL's sequence
//! `<table>_fence`, MySQL/MariaDB's `AUTO_INCREMENT` table `<table>_fences` (committed at
//! once: autocommit). If the connection dies the database releases the lock; the guard's
//! liveness check (a ping every ttl/3) then reports it lost, and the database ends a session
//! silent for 2 × ttl (PostgreSQL `idle_session_timeout`, so PostgreSQL ≥ 14; MySQL
//! `wait_timeout`). Release unlocks on the same connection, puts the session settings back and
//! returns it to the pool.
//!
//! # Cancel safety
//! Whenever the lock may be held by a connection nobody will release it on (a dropped acquire,
//! a failed release, a guard won too late), the connection is closed instead of returned to the
//! pool: the database then frees the lock. A PostgreSQL waiter whose acquire was dropped leaves
//! the lock queue within 250 ms (`client_connection_check_interval`).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{Attempt, Deadline, GuardParts, LockBackend, LostSignal};
use distlock_core::{
    Access, AcquireOptions, Capabilities, CrashRelease, LockError, LockGuard, LockInfo, Wakeup,
};
use sqlx::AssertSqlSafe;
use sqlx::Row;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::client::SqlClient;
use crate::config::{Dialect, Mode};
use crate::error::{classify, map, Failure};
use crate::for_update::bounds;
use crate::held::Held;
use crate::sessions::{Forget, SessionStatements};
use crate::statements::{self, AdvisoryStatements, LockTexts};
use crate::token;

pub(crate) mod gated_rw;
mod internal;
mod lease;
pub(crate) mod semaphore;
mod session;

use lease::AdvisoryLease;
use session::{fetch_i64, Session};

/// MySQL: the longest wait of one `GET_LOCK` call (s); longer and endless waits repeat it.
const MYSQL_WAIT_SLICE_SECS: f64 = 3600.0;

/// PostgreSQL: keys tried per name before giving up (each a 64-bit collision with a name
/// registered earlier).
const KEY_PROBES: i64 = 16;

/// advisory mode over one client: the advisory statements of its dialect, and (PostgreSQL) the
/// names this client knows to have a registered key.
#[derive(Debug)]
pub(crate) struct AdvisoryLock {
    client: Arc<SqlClient>,
    sql: Arc<AdvisoryStatements>,
    /// The kind of lock this client takes: the mutex's, or one side of the read-write lock.
    texts: LockTexts,
    /// Tells this kind's in-process waiting queue apart from the other kinds' of a name.
    queue_tag: &'static str,
    /// Holder identities (see `sessions.rs`).
    sessions: Option<SessionStatements>,
    registered: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl AdvisoryLock {
    /// # Errors
    /// [`LockError::InvalidConfig`] on SQLite, which has no advisory locks (already refused by
    /// [`crate::SqlConfig::validate`]).
    pub(crate) fn new(client: Arc<SqlClient>) -> Result<Self, LockError> {
        let sql = statements::advisory(client.cfg.dialect, &client.cfg.table).ok_or_else(|| {
            LockError::invalid_config(format!(
                "mode=advisory is not available on {}: it has no advisory locks; use mode=row",
                client.cfg.dialect.label()
            ))
        })?;
        let sessions =
            SessionStatements::new(client.cfg.dialect, Mode::Advisory, &client.cfg.table);
        let texts = LockTexts {
            lock: sql.lock.clone(),
            try_lock: sql.try_lock.clone(),
            unlock: sql.unlock.clone(),
            try_draw: sql.try_draw.clone(),
            unlock_reset: sql.unlock_reset.clone(),
        };
        Ok(AdvisoryLock {
            client,
            sql: Arc::new(sql),
            texts,
            queue_tag: "",
            sessions,
            registered: Default::default(),
        })
    }

    /// One side of the name's read-write lock (PostgreSQL; `None` on MySQL/MariaDB, whose
    /// `GET_LOCK` has no shared mode). Records no holder identities.
    pub(crate) fn side(client: Arc<SqlClient>, access: Access) -> Result<Option<Self>, LockError> {
        let mut lock = Self::new(client)?;
        let Some(rw) = lock.sql.rw.clone() else {
            return Ok(None);
        };
        lock.texts = match access {
            Access::Read => rw.read,
            Access::Write => rw.write,
        };
        lock.queue_tag = "\0rw";
        lock.sessions = None;
        Ok(Some(lock))
    }

    /// The read-write lock's state of `name`: (readers, writers, waiting), from `pg_locks`.
    pub(crate) async fn rw_state(&self, name: &str) -> Result<(usize, usize, usize), LockError> {
        let label = &self.client.label;
        let m = |e| map(e, label, Some(name));
        let Some(rw) = &self.sql.rw else {
            return Err(LockError::unsupported(label, "read-write lock"));
        };
        self.ensure_key(name).await?;
        let row = sqlx::query(AssertSqlSafe(rw.state.as_str()))
            .bind(name)
            .fetch_one(&self.client.side)
            .await
            .map_err(m)?;
        let n = |i: usize| -> Result<usize, LockError> {
            let v: i64 = row.try_get(i).map_err(m)?;
            Ok(usize::try_from(v).unwrap_or(0))
        };
        Ok((n(0)?, n(1)?, n(2)?))
    }

    /// PostgreSQL: makes sure `name` has a key in the registry (its digest's first 8 bytes, or
    /// on a collision with another name the first free of 15 variations), so no two names ever
    /// share an advisory lock. Cached per client; a no-op on MySQL. On the side pool: a
    /// semaphore registers its slots' keys while its session is held (see `crate::client`).
    async fn ensure_key(&self, name: &str) -> Result<(), LockError> {
        let Some(register) = &self.sql.register else {
            return Ok(());
        };
        let known = |r: &Self| {
            r.registered
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(name)
        };
        if known(self) {
            return Ok(());
        }
        let label = &self.client.label;
        for probe in 0..KEY_PROBES {
            let q = sqlx::query(AssertSqlSafe(register.as_str()))
                .bind(name)
                .bind(probe);
            let row = q
                .fetch_one(&self.client.side)
                .await
                .map_err(|e| map(e, label, Some(name)))?;
            let has: i64 = row.try_get(0).map_err(|e| map(e, label, Some(name)))?;
            if has > 0 {
                if probe > 0 {
                    tracing::debug!(backend = %label, name, probe, "the name's first-choice advisory key belongs to another name; registered a variation");
                }
                self.registered
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(name.to_owned());
                return Ok(());
            }
        }
        Err(LockError::backend(
            label,
            Some(name),
            format!("no free advisory key among {KEY_PROBES} variations of the name's digest"),
            None,
        ))
    }

    fn pg(&self) -> bool {
        self.client.cfg.dialect == Dialect::Postgres
    }

    /// A dedicated pooled connection, for lock `name`.
    async fn session(&self, name: &str) -> Result<Session, LockError> {
        let conn = self
            .client
            .pool
            .acquire()
            .await
            .map_err(|e| map(e, &self.client.label, Some(name)))?;
        Ok(Session::new(conn))
    }

    /// One attempt to take the lock of `key` (for lock `name`: the name itself, or a
    /// semaphore's internal name) on `session`, waiting at most `remaining` (`None` = forever;
    /// MySQL: one slice at most) unless `nowait`: whether it was granted.
    async fn lock(
        &self,
        session: &mut Session,
        (name, key): (&str, &str),
        remaining: Option<Duration>,
        nowait: bool,
    ) -> Result<bool, Failure> {
        let c = |e| classify(e, &self.client.label, Some(name));
        let conn = &mut **session.conn();
        let granted = if nowait {
            fetch_i64(
                sqlx::query(AssertSqlSafe(self.texts.try_lock.as_str())).bind(key),
                conn,
            )
            .await
            .map_err(c)?
        } else if let Some(lock_wait) = self.sql.lock_wait {
            let (_, wait_ms) =
                bounds::tx_bounds(Dialect::Postgres, Duration::ZERO, remaining, false);
            sqlx::raw_sql(AssertSqlSafe(lock_wait(wait_ms)))
                .execute(&mut *conn)
                .await
                .map_err(c)?;
            fetch_i64(
                sqlx::query(AssertSqlSafe(self.texts.lock.as_str())).bind(key),
                conn,
            )
            .await
            .map_err(c)?
        } else {
            let secs = remaining.map_or(MYSQL_WAIT_SLICE_SECS, |r| {
                r.as_secs_f64().clamp(0.001, MYSQL_WAIT_SLICE_SECS)
            });
            let q = sqlx::query(AssertSqlSafe(self.texts.lock.as_str()))
                .bind(key)
                .bind(secs);
            fetch_i64(q, conn).await.map_err(c)?
        };
        match granted {
            1 => Ok(true),
            0 => Ok(false),
            other => Err(Failure::Error(LockError::backend(
                &self.client.label,
                Some(name),
                format!("the advisory lock call failed (returned {other})"),
                None,
            ))),
        }
    }

    /// PostgreSQL's one-statement try ([`LockTexts::try_draw`] `sql`) on `session`: the fencing
    /// token when granted (the idle bound is set then too), `None` when the lock is taken.
    /// On an error the session may hold the lock: the caller must close it.
    /// The one-statement try ([`Self::try_draw`]): the token when it won. A failed statement
    /// may have taken the lock before it failed (session locks outlive a failed statement and
    /// stack): that session is closed, which frees whatever it took, and the wait goes on on a
    /// fresh one — closed before the fresh one is asked for: with every connection of the pool
    /// taken, the fresh one is this one's (a pool of one waited for itself). On an error the
    /// session is dropped (closed) with it.
    async fn fast_try(
        &self,
        session: &mut Session,
        name: &str,
        sql: &str,
        ttl: Duration,
    ) -> Result<Option<u64>, LockError> {
        match self.try_draw(session, name, sql, ttl).await {
            Ok(token) => Ok(token),
            Err(Failure::Busy) | Err(Failure::Retry) => {
                session.close();
                *session = self.session(name).await?;
                Ok(None)
            }
            Err(Failure::Error(e)) => Err(e),
        }
    }

    /// Records `opts.holder` as the holder of `name` with `token`, when asked to and a sessions
    /// table serves this dialect; `None` (logged) when it could not be recorded.
    async fn record_holder(
        &self,
        session: &mut Session,
        name: &str,
        token: u64,
        opts: &AcquireOptions,
    ) -> Option<Forget> {
        let (sessions, holder) = (self.sessions.as_ref()?, opts.holder.as_deref()?);
        let label = &self.client.label;
        sessions
            .record(session.conn(), &self.client.side, label, (name, token, holder))
            .await
            .inspect_err(|e| tracing::warn!(backend = %label, name, error = %e, "could not record the holder identity"))
            .ok()
    }

    async fn try_draw(
        &self,
        session: &mut Session,
        name: &str,
        sql: &str,
        ttl: Duration,
    ) -> Result<Option<u64>, Failure> {
        let (idle, _) = bounds::tx_bounds(self.client.cfg.dialect, ttl, None, false);
        let q = sqlx::query(AssertSqlSafe(sql))
            .bind(name)
            .bind(idle.to_string());
        fetch_i64(q, session.conn())
            .await
            .map(|token| u64::try_from(token).ok().filter(|&t| t > 0))
            .map_err(|e| classify(e, &self.client.label, Some(name)))
    }

    /// Once the lock is granted on `session`: draws the fencing token and bounds how long the
    /// database keeps the session once it goes silent.
    async fn granted(
        &self,
        session: &mut Session,
        name: &str,
        ttl: Duration,
    ) -> Result<u64, LockError> {
        let label = &self.client.label;
        let token = token::draw(&self.sql.draw_token, session.conn(), label, name).await?;
        self.bound_idle(session, name, ttl).await?;
        Ok(token)
    }

    /// Bounds how long the database keeps `session` (which holds a lock of `name`) once it
    /// goes silent: 2 × `ttl`.
    async fn bound_idle(
        &self,
        session: &mut Session,
        name: &str,
        ttl: Duration,
    ) -> Result<(), LockError> {
        let (idle, _) = bounds::tx_bounds(self.client.cfg.dialect, ttl, None, false);
        sqlx::raw_sql(AssertSqlSafe((self.sql.idle)(idle)))
            .execute(&mut **session.conn())
            .await
            .map(drop)
            .map_err(|e| map(e, &self.client.label, Some(name)))
    }

    /// The parts of a guard whose lock `session` holds: `(name, keys, what)` are the lock's name,
    /// the names its lock statements bind, given back in this order on release (the name
    /// itself, or internal names) and what it is, for messages. `forget`: the holder identity's record, if any.
    fn guard_parts(
        &self,
        session: Session,
        (name, keys, what): (&str, Vec<String>, &'static str),
        token: u64,
        forget: Option<Forget>,
        opts: &AcquireOptions,
        started: Instant,
    ) -> GuardParts {
        let label = &self.client.label;
        let idle = bounds::idle_bound(opts.ttl);
        GuardParts {
            name: name.to_owned(),
            backend: label.clone(),
            fencing_token: token,
            ttl: opts.ttl,
            renew: opts.renew,
            acquired_at: started,
            validity: Some(idle),
            lease: Arc::new(AdvisoryLease {
                session: Mutex::new(Some(session)),
                forget,
                keys,
                unlock: self.texts.unlock.clone(),
                unlock_reset: self.texts.unlock_reset.clone(),
                sql: Arc::clone(&self.sql),
                held: Held::new(name, label, what, idle),
            }),
            lost: LostSignal::new(),
        }
    }
}

#[async_trait]
impl LockBackend for AdvisoryLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        let deadline = Deadline::after(opts.wait);
        // One pooled connection per process waits in the database's lock queue instead of one
        // per waiting task.
        self.ensure_key(name).await?;
        let queued = format!("{name}{}", self.queue_tag);
        let _turn = self.client.local_turn(&queued, try_only, &deadline).await;
        // Dropped (closed) if this future is dropped: a lock granted meanwhile is freed.
        let mut session = self.session(name).await?;
        // PostgreSQL tries first with one statement that also draws the token and bounds the
        // idle session: an uncontended acquisition is one round trip. A try that conflicts
        // with a queued waiter fails (PostgreSQL's lock manager refuses it), so FIFO holds.
        let mut fast = self.texts.try_draw.clone();
        loop {
            let started = Instant::now();
            let remaining = deadline.remaining();
            // A wait that is over (or zero) tries once, like try_acquire.
            let nowait = try_only || remaining.is_some_and(|r| r.is_zero());
            let tried = fast.is_some();
            let drawn = match fast.take() {
                Some(sql) => self.fast_try(&mut session, name, &sql, opts.ttl).await?,
                None => None,
            };
            if tried && drawn.is_none() {
                distlock_core::backend::handoff::waited();
            }
            let token = match drawn {
                Some(token) => token,
                // The one-statement try was this attempt's only look.
                None if tried && nowait => {
                    session.recycle(self.sql.reset).await;
                    return Ok(None);
                }
                None => {
                    let granted = self.lock(&mut session, (name, name), remaining, nowait);
                    if !Failure::or_not_now(granted.await)? {
                        distlock_core::backend::handoff::waited();
                        if nowait || deadline.expired() {
                            session.recycle(self.sql.reset).await;
                            return Ok(None);
                        }
                        tracing::debug!(
                            "held by another client: the lock wait ran out; waiting again"
                        );
                        continue;
                    }
                    // On error the session is dropped, so closed: the database frees the lock.
                    self.granted(&mut session, name, opts.ttl).await?
                }
            };
            let forget = self.record_holder(&mut session, name, token, opts).await;
            let started = self
                .guard_parts(
                    session,
                    (name, vec![name.to_owned()], "advisory lock"),
                    token,
                    forget,
                    opts,
                    started,
                )
                .start()
                .await;
            match started {
                Ok(g) => return Ok(Some(g)),
                Err(e) if try_only || deadline.expired() => return Err(e),
                Err(e) => {
                    // The lease (and its connection, closed) went with the failed guard.
                    tracing::debug!(token, error = %e, "won the advisory lock too late to use it; gave it back, retrying");
                    session = self.session(name).await?;
                }
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::bound(CrashRelease::Connection, Wakeup::LockQueue, self.pg())
    }

    fn backend_name(&self) -> &str {
        &self.client.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let label = &self.client.label;
        let mut conn = self
            .client
            .side
            .acquire()
            .await
            .map_err(|e| map(e, label, Some(name)))?;
        let q = sqlx::query(AssertSqlSafe(self.sql.held.as_str())).bind(name);
        let holders = fetch_i64(q, &mut conn)
            .await
            .map_err(|e| map(e, label, Some(name)))?;
        Ok(if holders > 0 {
            LockInfo::held(None, None, None, None)
        } else {
            LockInfo::free()
        })
    }
}

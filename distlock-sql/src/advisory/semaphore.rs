//! advisory mode's counting semaphore ([`AdvisorySemaphore`]): at most `max_count` holders of a
//! name at once, each holding one of the name's slot locks on a session of its own.
//!
//! # Design
//! Per name, a *gate* lock and *slot* locks `0..max_count`, all of them the mode's advisory
//! locks (PostgreSQL `pg_advisory_lock` on a registered key, MySQL/MariaDB `GET_LOCK`). A caller
//! takes the gate on the session that will hold its permit, waiting in the database's lock
//! queue; holding it, it tries the slots in order without waiting and keeps the first free
//! one. While none is free it looks again with backoff (2 → 100 ms), still holding the gate:
//! only the head of the queue looks, and nobody behind it overtakes it. Then it lets the gate
//! go. The slot lock stays held by the session for the guard's life, so a crashed holder's
//! slot is freed when the database sees its connection close (or after 2 × ttl of silence).
//!
//! # Keys that never meet another lock's
//! The gate and the slots lock *internal names*: `distlock semaphore gate:` or
//! `distlock semaphore slot <i>:`, padded with spaces to one byte more than a lock name may
//! have ([`MAX_NAME_BYTES`](distlock_core::backend::name::MAX_NAME_BYTES)), then the name. An internal name is longer than every lock name,
//! so it is never a user's lock name (those are refused as `InvalidName`), and the fixed-width
//! prefix of each part keeps the mapping one-to-one. Internal names get their keys as lock
//! names do (PostgreSQL: registered in `<table>_keys`, where no two names share a key;
//! MySQL/MariaDB: the SHA-256 digest), so a semaphore never meets a mutex or a read-write lock,
//! of its own name or any other. (`tests/permits.rs`
//! `advisory_semaphore_keys_never_meet_other_locks` holds each beside the others.)
//!
//! # The count
//! `<table>_semcounts` keeps each name's count (`statements/counts.rs`), read and written only
//! by the gate's holder. A caller with another count fails with [`LockError::InvalidConfig`]
//! naming both, unless no slot of the recorded count is held (the gate's holder takes each
//! without waiting and gives them back): then its count is recorded.
//!
//! # Fencing
//! As the advisory mutex's: drawn once the slot is granted, from the mode's counter under the
//! lock name, so every grant's token is greater than every earlier grant's.
//!
//! # Fairness
//! PostgreSQL queues the gate's waiters in arrival order, so permits go out FIFO across
//! processes; MySQL/MariaDB's `GET_LOCK` queue is not documented as FIFO, so no claim there.
//! Within a process the waiters for a name queue locally, and only the head holds a
//! connection.
//!
//! # Inspect
//! Holders: one statement per slot (PostgreSQL `pg_locks`, MySQL/MariaDB `IS_USED_LOCK`).
//! Waiters: on PostgreSQL the gate's holder and queue, from `pg_locks`; on MySQL/MariaDB only
//! the gate's holder (the head): callers queued in `GET_LOCK` are invisible to other sessions.
//!
//! # Cancel safety
//! The gate and the slot are held by the acquisition's own session, closed (not returned to
//! the pool) if the acquire is dropped: the database frees both. A PostgreSQL waiter queued for
//! the gate leaves the queue within 250 ms (`client_connection_check_interval`).

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Attempt, Backoff, Deadline};
use distlock_core::{AcquireOptions, LockError, LockGuard, SemaphoreInfo, MAX_PERMITS};
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use super::session::{fetch_i64, Session};
use super::AdvisoryLock;
use crate::client::SqlClient;
use crate::error::map;
use crate::statements::CountStatements;
use crate::token;

/// The internal name of `part` of semaphore `name` (see the module docs): longer than any lock
/// name may be.
fn internal(part: &str, name: &str) -> String {
    super::internal::internal_name("semaphore", part, name)
}

fn gate(name: &str) -> String {
    internal("gate", name)
}

fn slot(i: u32, name: &str) -> String {
    internal(&format!("slot {i}"), name)
}

/// The advisory semaphore over one client: the mode's lock machinery (keys, sessions,
/// statements) applied to internal names, and the count statements.
#[derive(Debug)]
pub(crate) struct AdvisorySemaphore {
    locks: AdvisoryLock,
    counts: CountStatements,
}

impl AdvisorySemaphore {
    /// The semaphore of `client` (not SQLite), creating the count table when missing.
    ///
    /// # Errors
    /// Store errors creating the table; [`LockError::InvalidConfig`] on SQLite.
    pub(crate) async fn new(client: &Arc<SqlClient>) -> Result<Self, LockError> {
        let locks = AdvisoryLock::new(Arc::clone(client))?;
        let counts = super::internal::count_table(client).await?;
        Ok(AdvisorySemaphore { locks, counts })
    }

    fn label(&self) -> &str {
        &self.locks.client.label
    }

    /// One acquisition of a permit of `name`: through the gate, then a slot.
    pub(crate) async fn attempt(
        &self,
        name: &str,
        max_count: u32,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        let deadline = Deadline::after(opts.wait);
        let gate = gate(name);
        self.locks.ensure_key(&gate).await?;
        let queued = format!("{name}\0advsem");
        let _turn = self
            .locks
            .client
            .local_turn(&queued, try_only, &deadline)
            .await;
        loop {
            // Dropped (closed) if this future is dropped: the database frees what it holds.
            let mut session = self.locks.session(name).await?;
            if !self
                .locks
                .wait_take(&mut session, (name, &gate), try_only, &deadline, None)
                .await?
            {
                session.recycle(self.locks.sql.reset).await;
                return Ok(None);
            }
            // On any error the session is dropped, so closed: the database frees the gate and
            // whatever slot it holds.
            let admitted = self
                .admit(&mut session, name, max_count, opts.ttl, try_only, &deadline)
                .await?;
            self.locks.give_back(&mut session, name, &gate).await?;
            let Some((slot, started)) = admitted else {
                session.recycle(self.locks.sql.reset).await;
                return Ok(None);
            };
            let label = self.label();
            let token =
                token::draw(&self.locks.sql.draw_token, session.conn(), label, name).await?;
            let parts = self.locks.guard_parts(
                session,
                (name, vec![slot], "semaphore permit"),
                token,
                None,
                opts,
                started,
            );
            match parts.start().await {
                Ok(g) => return Ok(Some(g)),
                Err(e) if try_only || deadline.expired() => return Err(e),
                // The lease (and its connection, closed) went with the failed guard.
                Err(e) => {
                    tracing::debug!(token, error = %e, "won a permit too late to use it; gave it back, retrying")
                }
            }
        }
    }

    /// Holding the gate: checks the count, then takes the first free slot, looking again with
    /// backoff until `deadline`. The slot's internal name, and when the look that found it
    /// started.
    async fn admit(
        &self,
        session: &mut Session,
        name: &str,
        max_count: u32,
        ttl: Duration,
        try_only: bool,
        deadline: &Deadline,
    ) -> Result<Option<(String, Instant)>, LockError> {
        // The gate's holder may wait a while: the database must not keep it past a crash.
        self.locks.bound_idle(session, name, ttl).await?;
        self.ensure_count(session, name, max_count).await?;
        let mut backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(100));
        loop {
            let started = Instant::now();
            for i in 0..max_count {
                let slot = slot(i, name);
                if self.locks.try_take(session, name, &slot).await? {
                    return Ok(Some((slot, started)));
                }
            }
            if try_only || deadline.expired() {
                return Ok(None);
            }
            deadline.sleep(backoff.next_delay()).await;
        }
    }

    /// Holding the gate: records `max_count` for `name` on first use; refuses another count
    /// while a slot of the recorded one is held, and records it when none is.
    async fn ensure_count(
        &self,
        session: &mut Session,
        name: &str,
        max_count: u32,
    ) -> Result<(), LockError> {
        let m = |e| map(e, self.label(), Some(name));
        let recorded: Option<i64> = match sqlx::query(AssertSqlSafe(self.counts.get.as_str()))
            .bind(name)
            .fetch_optional(&mut **session.conn())
            .await
            .map_err(m)?
        {
            Some(r) => Some(r.try_get(0).map_err(m)?),
            None => None,
        };
        if recorded == Some(i64::from(max_count)) {
            return Ok(());
        }
        if let Some(n) = recorded {
            // Taking every slot of the old count without waiting proves none is held; they
            // are given back at once (nobody else can take one meanwhile: we hold the gate).
            let slots = u32::try_from(n).unwrap_or(0).min(MAX_PERMITS);
            let mut taken = Vec::new();
            let mut in_use = false;
            for i in 0..slots {
                let s = slot(i, name);
                if !self.locks.try_take(session, name, &s).await? {
                    in_use = true;
                    break;
                }
                taken.push(s);
            }
            for s in &taken {
                self.locks.give_back(session, name, s).await?;
            }
            if in_use {
                return Err(distlock_core::semaphore::other_count(name, n, max_count));
            }
        }
        sqlx::query(AssertSqlSafe(self.counts.set.as_str()))
            .bind(name)
            .bind(i64::from(max_count))
            .execute(&mut **session.conn())
            .await
            .map(drop)
            .map_err(m)
    }

    /// The name's count, holders and waiters now (see the module docs).
    pub(crate) async fn inspect(&self, name: &str) -> Result<SemaphoreInfo, LockError> {
        let m = |e| map(e, self.label(), Some(name));
        let mut conn = self.locks.client.side.acquire().await.map_err(m)?;
        let recorded: Option<i64> = match sqlx::query(AssertSqlSafe(self.counts.get.as_str()))
            .bind(name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(m)?
        {
            Some(r) => Some(r.try_get(0).map_err(m)?),
            None => None,
        };
        let mut info = SemaphoreInfo::default();
        let Some(n) = recorded.and_then(|n| u32::try_from(n).ok()) else {
            return Ok(info);
        };
        let mut holders = 0;
        for i in 0..n.min(MAX_PERMITS) {
            let q = sqlx::query(AssertSqlSafe(self.locks.sql.held.as_str())).bind(slot(i, name));
            holders += usize::from(fetch_i64(q, &mut conn).await.map_err(m)? > 0);
        }
        let q = sqlx::query(AssertSqlSafe(self.locks.sql.queued.as_str())).bind(gate(name));
        let waiters = usize::try_from(fetch_i64(q, &mut conn).await.map_err(m)?).unwrap_or(0);
        if holders + waiters > 0 {
            info.max_count = Some(n);
        }
        (info.holders, info.waiters) = (holders, waiters);
        Ok(info)
    }
}

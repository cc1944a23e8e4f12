//! advisory mode's read-write lock where the database has exclusive named locks only
//! (MySQL/MariaDB `GET_LOCK`): [`GatedRw`]. PostgreSQL has shared advisory locks and uses them
//! instead (`AdvisoryLock::side`).
//!
//! # Design
//! Per name, three kinds of advisory locks on *internal names* (`internal.rs`: longer than any
//! lock name, so they never meet a mutex, a semaphore or a user's name):
//! - the **gate**: every reader and writer takes it first, on the session that will hold its
//!   side, waiting in the database's lock queue;
//! - **reader slots** `0, 1, …`: a reader, holding the gate, keeps the lowest slot nobody holds
//!   (taken without waiting), then lets the gate go. The number of slots ever needed (the
//!   most readers at once since the last writer) is kept in `<table>_semcounts` under an
//!   internal name, read and written by the gate's holder only;
//! - the **writer** mark: a writer, holding the gate, waits for each reader slot in turn (the
//!   database's lock wait: woken when that reader lets go, or its connection closes), gives
//!   it straight back, takes the mark (for `inspect`) and keeps the gate for its whole hold.
//!
//! No reader can take a slot without the gate, so once a writer holds the gate and has seen
//! every slot free, no reader holds the lock, and none can until the writer lets the gate go:
//! a writer excludes readers and writers. Readers hold only their slot, so they share.
//!
//! # Writers are not starved
//! A writer waits for the readers *holding the gate*: readers that arrive after it wait for
//! the gate behind it, so a stream of readers cannot keep a waiting writer out. Among callers
//! queued for the gate itself, MySQL/MariaDB's `GET_LOCK` queue is not documented as FIFO, so
//! the mode claims no arrival order there (within a process, callers queue in order).
//!
//! # Fencing, loss, release, cancel
//! As the advisory mutex's: tokens drawn after the grant from the mode's counter; the guard's
//! session holds its slot (reader) or its mark and gate (writer), so a crashed holder's locks
//! are freed when the database sees its connection close; a dropped acquire closes its
//! session. A writer waits for a reader in statements of 500 ms at most: MariaDB goes on
//! waiting for a dropped connection until its statement ends (it notices only when it
//! answers), so a writer cancelled while it waits for readers lets the gate go within 500 ms
//! and the readers queued behind it come in.
//!
//! # Inspect
//! Readers: the slots held (`IS_USED_LOCK`); writer: the mark held. Waiters: at most 1, the
//! gate's holder while no writer holds the lock (a writer waiting for readers, or a caller
//! being admitted): callers queued in `GET_LOCK` are invisible to other sessions.

use std::sync::Arc;
use std::time::Duration;

use distlock_core::backend::{Attempt, Deadline};
use distlock_core::{Access, AcquireOptions, LockError, LockGuard, RwLockInfo};
use sqlx::{AssertSqlSafe, Row};
use tokio::time::Instant;

use super::internal::internal_name;
use super::session::{fetch_i64, Session};
use super::AdvisoryLock;
use crate::client::SqlClient;
use crate::error::map;
use crate::statements::CountStatements;
use crate::token;

/// A writer waiting for a reader re-sends its lock statement this often: the database goes on
/// waiting after a cancelled writer's connection is dropped (MariaDB notices only when it
/// answers), still holding the gate — readers queued behind it would wait that long.
const READER_WAIT_SLICE: Duration = Duration::from_millis(500);

/// More reader slots than this at once is refused (a bound on the slots a reader tries and a
/// writer waits for, far above any pool's connections).
const MAX_READER_SLOTS: i64 = 10_000;

fn gate(name: &str) -> String {
    internal_name("rwlock", "gate", name)
}

fn writer(name: &str) -> String {
    internal_name("rwlock", "writer", name)
}

fn reader(i: i64, name: &str) -> String {
    internal_name("rwlock", &format!("reader {i}"), name)
}

/// Where the number of reader slots is recorded.
fn slots_key(name: &str) -> String {
    internal_name("rwlock", "slots", name)
}

/// The gated read-write lock over one client (see the module docs).
#[derive(Debug)]
pub(crate) struct GatedRw {
    locks: AdvisoryLock,
    counts: CountStatements,
}

impl GatedRw {
    /// The read-write lock of `client` (not SQLite), creating the count table when missing.
    ///
    /// # Errors
    /// Store errors creating the table; [`LockError::InvalidConfig`] on SQLite.
    pub(crate) async fn new(client: &Arc<SqlClient>) -> Result<Self, LockError> {
        let mut locks = AdvisoryLock::new(Arc::clone(client))?;
        locks.queue_tag = "\0advrw";
        let counts = super::internal::count_table(client).await?;
        Ok(GatedRw { locks, counts })
    }

    fn label(&self) -> &str {
        &self.locks.client.label
    }

    /// One acquisition of `access` to `name`: through the gate, then a reader slot (read) or
    /// every reader gone (write).
    pub(crate) async fn attempt(
        &self,
        name: &str,
        access: Access,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        let deadline = Deadline::after(opts.wait);
        let gate = gate(name);
        // Readers and writers of a name queue together in the process, in arrival order.
        let queued = format!("{name}{}", self.locks.queue_tag);
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
            let started = Instant::now();
            // The gate's holder may wait a while: the database must not keep it past a crash.
            // On any error the session is dropped, so closed: the database frees its locks.
            self.locks.bound_idle(&mut session, name, opts.ttl).await?;
            let (keys, what) = match access {
                Access::Read => {
                    let slot = self.reader_slot(&mut session, name).await?;
                    self.locks.give_back(&mut session, name, &gate).await?;
                    (vec![slot], "read lock")
                }
                Access::Write => {
                    if !self
                        .readers_gone(&mut session, name, try_only, &deadline)
                        .await?
                    {
                        self.locks.give_back(&mut session, name, &gate).await?;
                        session.recycle(self.locks.sql.reset).await;
                        return Ok(None);
                    }
                    let mark = writer(name);
                    if !self.locks.try_take(&mut session, name, &mark).await? {
                        return Err(LockError::backend(
                            self.label(),
                            Some(name),
                            "the read-write lock's writer mark is held by a session without the gate",
                            None,
                        ));
                    }
                    (vec![mark, gate.clone()], "write lock")
                }
            };
            let label = self.label();
            let token =
                token::draw(&self.locks.sql.draw_token, session.conn(), label, name).await?;
            let parts =
                self.locks
                    .guard_parts(session, (name, keys, what), token, None, opts, started);
            match parts.start().await {
                Ok(g) => return Ok(Some(g)),
                Err(e) if try_only || deadline.expired() => return Err(e),
                // The lease (and its connection, closed) went with the failed guard.
                Err(e) => {
                    tracing::debug!(token, error = %e, "won the read-write lock too late to use it; gave it back, retrying")
                }
            }
        }
    }

    /// The recorded number of reader slots of `name` (0: none recorded).
    async fn slots(&self, conn: &mut sqlx::AnyConnection, name: &str) -> Result<i64, LockError> {
        let m = |e| map(e, self.label(), Some(name));
        match sqlx::query(AssertSqlSafe(self.counts.get.as_str()))
            .bind(slots_key(name))
            .fetch_optional(conn)
            .await
            .map_err(m)?
        {
            Some(r) => Ok(r
                .try_get::<i64, _>(0)
                .map_err(m)?
                .clamp(0, MAX_READER_SLOTS)),
            None => Ok(0),
        }
    }

    /// Records `n` reader slots for `name` (the gate's holder only).
    async fn set_slots(&self, session: &mut Session, name: &str, n: i64) -> Result<(), LockError> {
        sqlx::query(AssertSqlSafe(self.counts.set.as_str()))
            .bind(slots_key(name))
            .bind(n)
            .execute(&mut **session.conn())
            .await
            .map(drop)
            .map_err(|e| map(e, self.label(), Some(name)))
    }

    /// Holding the gate: takes the lowest reader slot nobody holds (recording one more slot
    /// when all are held), and returns its internal name.
    async fn reader_slot(&self, session: &mut Session, name: &str) -> Result<String, LockError> {
        let n = self.slots(session.conn(), name).await?;
        for i in 0..n {
            let slot = reader(i, name);
            if self.locks.try_take(session, name, &slot).await? {
                return Ok(slot);
            }
        }
        if n >= MAX_READER_SLOTS {
            return Err(LockError::backend(
                self.label(),
                Some(name),
                format!("{MAX_READER_SLOTS} readers already hold the read-write lock"),
                None,
            ));
        }
        // Recorded first: a slot beyond the record is never taken, so a writer sees them all.
        self.set_slots(session, name, n + 1).await?;
        let slot = reader(n, name);
        if self.locks.try_take(session, name, &slot).await? {
            return Ok(slot);
        }
        Err(LockError::backend(
            self.label(),
            Some(name),
            "a reader slot beyond the recorded ones is held by another session",
            None,
        ))
    }

    /// Holding the gate: waits until no reader holds a slot of `name` (until `deadline`; once
    /// if `try_only`), then forgets the slots: whether every reader was gone.
    async fn readers_gone(
        &self,
        session: &mut Session,
        name: &str,
        try_only: bool,
        deadline: &Deadline,
    ) -> Result<bool, LockError> {
        let n = self.slots(session.conn(), name).await?;
        for i in 0..n {
            let slot = reader(i, name);
            if !self
                .locks
                .wait_take(
                    session,
                    (name, &slot),
                    try_only,
                    deadline,
                    Some(READER_WAIT_SLICE),
                )
                .await?
            {
                return Ok(false);
            }
            self.locks.give_back(session, name, &slot).await?;
        }
        if n > 0 {
            // Every slot is free and none can be taken while we hold the gate.
            self.set_slots(session, name, 0).await?;
        }
        Ok(true)
    }

    /// The readers, writer and (at most one) waiter of `name` now (see the module docs).
    pub(crate) async fn inspect(&self, name: &str) -> Result<RwLockInfo, LockError> {
        let m = |e| map(e, self.label(), Some(name));
        let mut conn = self.locks.client.side.acquire().await.map_err(m)?;
        let held = |key: String| sqlx::query(AssertSqlSafe(self.locks.sql.held.as_str())).bind(key);
        let n = self.slots(&mut conn, name).await?;
        let mut readers = 0;
        for i in 0..n {
            readers += usize::from(
                fetch_i64(held(reader(i, name)), &mut conn)
                    .await
                    .map_err(m)?
                    > 0,
            );
        }
        let writer = fetch_i64(held(writer(name)), &mut conn).await.map_err(m)? > 0;
        let gate_held = fetch_i64(held(gate(name)), &mut conn).await.map_err(m)? > 0;
        let mut info = RwLockInfo::default();
        (info.readers, info.writer, info.waiters) =
            (readers, writer, usize::from(gate_held && !writer));
        Ok(info)
    }
}

//! for_update mode ([`ForUpdateLock`]): a row per name (created on first use). A guard owns a
//! pooled connection with an open transaction that locked the row and then drew the fencing
//! token ([`ForUpdateLease`]); release commits. The statements are in
//! `statements/<dialect>.rs`.
//!
//! The waiters of one process queue in arrival order
//! ([`LocalQueue`](distlock_core::backend::LocalQueue)) and only the head holds
//! a connection, waiting in the database's own lock queue, bounded by its lock-wait setting
//! (PostgreSQL `lock_timeout` in milliseconds; MySQL/MariaDB `innodb_lock_wait_timeout` in whole
//! seconds rounded up, at most an hour per statement, repeated while the caller waits longer or
//! forever; the arithmetic is in `bounds.rs`). A zero wait tries once (`NOWAIT`). If the
//! connection dies the database releases the row lock; the guard's liveness check (a ping
//! every ttl/3) then reports it lost.
//!
//! Fencing tokens are drawn after the row lock is granted, from a counter no rollback takes
//! back (PostgreSQL's sequence `<table>_fence`, MySQL/MariaDB's `AUTO_INCREMENT` table
//! `<table>_fences`), by a statement that commits on its own on the side pool (`crate::client`)
//! before the guard is handed out (`crate::token`), so a server crash cannot hand it out again.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{Attempt, Deadline, GuardParts, Lease, LockBackend, LostSignal};
use distlock_core::{
    AcquireOptions, Capabilities, CrashRelease, LockError, LockGuard, LockInfo, Wakeup,
};
use sqlx::AssertSqlSafe;
use sqlx::{Any, AnyPool, Executor, Transaction};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::client::SqlClient;
use crate::config::{Dialect, Mode};
use crate::error::{classify, is_connection_gone, map, Failure};
use crate::held::Held;
use crate::liveness::resend_on_dead_connection;
use crate::sessions::{self, Forget, SessionStatements};
use crate::statements::{self, ForUpdateStatements};
use crate::token;

pub(crate) mod bounds;
pub(crate) mod rw;
pub(crate) mod semaphore;

/// Conflicts (deadlocks, a row that had to be created, a guard won too late) per acquisition.
const MAX_CONFLICTS: u32 = 50;
/// What the acquire loop does next.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// Another attempt.
    Again,
    /// The caller's wait is over (or it only tried): no lock.
    TimedOut,
    /// Too many conflicts: give up with an error.
    GiveUp,
}

/// The acquire loop's bounds. A lock wait that ran out (its slice) ends the loop only when the
/// caller's wait is over: the number of slices is unbounded, each slice is bounded in time
/// (waiting forever means forever). Conflicts are bounded in number.
#[derive(Debug, Default)]
struct Budget {
    conflicts: u32,
}

impl Budget {
    /// A statement's lock wait ran out with the row still held by someone else.
    fn busy(&self, try_only: bool, deadline: &Deadline) -> Next {
        distlock_core::backend::handoff::waited();
        if try_only || deadline.expired() {
            Next::TimedOut
        } else {
            Next::Again
        }
    }

    /// After the locking statement failed (its transaction rolled back): a lock wait that ran
    /// out is [`Self::busy`], a deadlock a conflict; an error is returned.
    fn after(
        &mut self,
        failure: Failure,
        try_only: bool,
        deadline: &Deadline,
    ) -> Result<Next, LockError> {
        Ok(match failure {
            Failure::Busy => {
                let next = self.busy(try_only, deadline);
                if next == Next::Again {
                    tracing::debug!("held by another client: the lock wait ran out; waiting again");
                }
                next
            }
            Failure::Retry => match self.conflict() {
                Next::Again if try_only || deadline.expired() => Next::TimedOut,
                next => {
                    tracing::debug!(
                        conflicts = self.conflicts,
                        "the locking statement conflicted (deadlock)"
                    );
                    next
                }
            },
            Failure::Error(e) => return Err(e),
        })
    }

    /// A deadlock, a row created meanwhile, or a guard won too late to be of use.
    fn conflict(&mut self) -> Next {
        self.conflicts += 1;
        if self.conflicts > MAX_CONFLICTS {
            Next::GiveUp
        } else {
            Next::Again
        }
    }
}

/// for_update mode over one client: the for_update statements of its dialect.
#[derive(Debug)]
pub(crate) struct ForUpdateLock {
    client: Arc<SqlClient>,
    /// Where this lock's transactions run: the client's lock connections, or its gates'.
    pool: AnyPool,
    sql: ForUpdateStatements,
    /// Tells this lock's in-process waiting queue apart from other row locks of a name (the
    /// read-write lock's tables, see `rw.rs`).
    queue_tag: &'static str,
    /// The longest one locking statement waits before it is sent again (`None`: as long as
    /// the caller waits, up to the dialect's cap).
    slice: Option<Duration>,
    /// Holder identities (see `sessions.rs`).
    sessions: Option<SessionStatements>,
}

impl ForUpdateLock {
    /// # Errors
    /// [`LockError::InvalidConfig`] on SQLite, which has no `SELECT … FOR UPDATE` (already
    /// refused by [`crate::SqlConfig::validate`]).
    pub(crate) fn new(client: Arc<SqlClient>) -> Result<Self, LockError> {
        let sql =
            statements::for_update(client.cfg.dialect, &client.cfg.table).ok_or_else(|| {
                LockError::invalid_config(format!(
                    "mode=for_update is not available on {}: use mode=row",
                    client.cfg.dialect.label()
                ))
            })?;
        let sessions =
            SessionStatements::new(client.cfg.dialect, Mode::ForUpdate, &client.cfg.table);
        Ok(ForUpdateLock {
            pool: client.pool.clone(),
            client,
            sql,
            queue_tag: "",
            slice: None,
            sessions,
        })
    }

    /// A row lock on another table of this client (`sql`'s), queued in the process apart
    /// from the others by `queue_tag`, each locking statement waiting at most `slice`, its
    /// transactions on the client's gate connections when `gate` (a gate row is held while
    /// a lock connection is taken: see `crate::client`); records no holder identities.
    pub(crate) fn on(
        client: Arc<SqlClient>,
        sql: ForUpdateStatements,
        (queue_tag, slice): (&'static str, Option<Duration>),
        gate: bool,
    ) -> Self {
        ForUpdateLock {
            pool: match gate {
                true => client.gates.clone(),
                false => client.pool.clone(),
            },
            client,
            sql,
            queue_tag,
            slice,
            sessions: None,
        }
    }

    /// A lock transaction on a pooled connection, bounded by the database itself: how long it
    /// keeps the transaction when its holder goes silent and how long its statements wait for
    /// a row lock (`None` = forever; `NOWAIT` attempts get a short bound; see
    /// [`bounds::tx_bounds`]). One round trip where the dialect sets the bounds before its
    /// `BEGIN` (MySQL), two where they go inside the transaction (PostgreSQL).
    async fn begin_bounded_tx(
        &self,
        ttl: Duration,
        wait: Option<Duration>,
        nowait: bool,
    ) -> Result<Transaction<'static, Any>, sqlx::Error> {
        let (idle, wait) = bounds::tx_bounds(self.client.cfg.dialect, ttl, wait, nowait);
        crate::begin::begin(&self.pool, Some((self.sql.begin)(idle, wait))).await
    }

    /// Records the holder identity of `opts`, if any, for the lock `tx` holds with `token`:
    /// what release must delete, or `None` (nothing to record, or it failed: the lock is held
    /// all the same, and `leader()` reports the missing identity).
    async fn record_holder(
        &self,
        tx: &mut Transaction<'static, Any>,
        name: &str,
        token: u64,
        opts: &AcquireOptions,
    ) -> Option<Forget> {
        let (sessions, holder) = (self.sessions.as_ref()?, opts.holder.as_deref()?);
        // On the side pool: this lock's connection is held (see `crate::client`).
        let (pool, label) = (&self.client.side, &self.client.label);
        sessions
            .record(tx, pool, label, (name, token, holder))
            .await
            .inspect_err(|e| tracing::warn!(backend = %label, name, error = %e, "could not record the holder identity"))
            .ok()
    }

    /// Locks the row of `name` in `tx` (without waiting when `nowait`) and draws its fencing
    /// token (committed on its own): `Some(token)`, or `None` when the row does not exist yet.
    async fn lock_row(
        &self,
        tx: &mut Transaction<'static, Any>,
        name: &str,
        nowait: bool,
    ) -> Result<Option<u64>, Failure> {
        let label = &self.client.label;
        let c = |e| classify(e, label, Some(name));
        let sql = if nowait {
            &self.sql.try_lock_row
        } else {
            &self.sql.lock_row
        };
        let Some(_row) = sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(name)
            .fetch_optional(&mut **tx)
            .await
            .map_err(c)?
        else {
            return Ok(None);
        };
        // Drawn on a connection of the side pool and committed there, before the guard exists:
        // see `crate::token`.
        let token = self.draw_token(tx, name).await?;
        Ok(Some(token))
    }

    /// Takes this lock (a gate row) for `name`, runs `inner` while holding it with the options
    /// left (`opts` with the wait that remains), and lets it go: the next in line may go once
    /// `inner` holds or gave up. A gate lost meanwhile is logged; what `inner` holds stands.
    pub(crate) async fn through<F, Fut>(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
        inner: F,
    ) -> Result<Option<LockGuard>, LockError>
    where
        F: FnOnce(AcquireOptions) -> Fut,
        Fut: std::future::Future<Output = Result<Option<LockGuard>, LockError>>,
    {
        let deadline = Deadline::after(opts.wait);
        let mut gate_opts = opts.clone();
        gate_opts.holder = None;
        let Some(gate) = self.attempt(name, &gate_opts, how).await? else {
            return Ok(None);
        };
        let mut rest = opts.clone();
        rest.wait = deadline.remaining();
        let got = inner(rest).await;
        if let Err(e) = gate.release().await {
            tracing::debug!(name, error = %e, "a gate row lock was lost before its release");
        }
        got
    }

    /// The guard of a row lock `tx` holds for `name` with `token` (`forget`: the holder
    /// identity's record, deleted at release), acquired from `started`.
    pub(crate) fn guard_parts(
        &self,
        tx: Transaction<'static, Any>,
        forget: Option<Forget>,
        name: &str,
        token: u64,
        opts: &AcquireOptions,
        started: Instant,
    ) -> GuardParts {
        let label = &self.client.label;
        GuardParts {
            name: name.to_owned(),
            backend: label.clone(),
            fencing_token: token,
            ttl: opts.ttl,
            renew: opts.renew,
            acquired_at: started,
            validity: Some(bounds::idle_bound(opts.ttl)),
            lease: Arc::new(ForUpdateLease {
                tx: Mutex::new(Some(tx)),
                forget,
                ping: self.sql.ping,
                held: Held::new(name, label, "row lock", bounds::idle_bound(opts.ttl)),
            }),
            lost: LostSignal::new(),
        }
    }

    /// Draws the fencing token of `name` for a row lock `tx` holds (committed on its own on
    /// a connection of the side pool, never waiting for a lock connection: see
    /// `crate::client`) and checks that `tx` still holds it.
    pub(crate) async fn draw_token(
        &self,
        tx: &mut Transaction<'static, Any>,
        name: &str,
    ) -> Result<u64, Failure> {
        let label = &self.client.label;
        // A draw sent again after its connection died only skips a token.
        let side = &self.client.side;
        let (token, _) = resend_on_dead_connection(side, (label, name), || async {
            let mut conn = side
                .acquire()
                .await
                .map_err(|e| map(e, label, Some(name)))?;
            token::draw(&self.sql.draw_token, &mut conn, label, name).await
        })
        .await
        .map_err(Failure::Error)?;
        // The draw ran on another connection: the lock transaction may have died meanwhile (a
        // server-side kill) and another client taken the row and drawn a lower token. A ping
        // that succeeds in the lock transaction now proves it held the row lock throughout the
        // draw, so the token is ordered with the lock; otherwise this attempt is over.
        if let Err(e) = sqlx::raw_sql(self.sql.ping).execute(&mut **tx).await {
            tracing::debug!(token, error = %e, "the lock transaction ended while its token was drawn; trying again");
            return Err(Failure::Retry);
        }
        Ok(token)
    }

    /// A transaction for `name` bounded as a lock transaction of `ttl` whose statements do not
    /// wait for row locks.
    pub(crate) async fn begin_bounded(
        &self,
        name: &str,
        ttl: Duration,
    ) -> Result<Transaction<'static, Any>, LockError> {
        self.begin_bounded_tx(ttl, None, true)
            .await
            .map_err(|e| map(e, &self.client.label, Some(name)))
    }

    /// Creates the missing row of `name` in `tx` (bounded by its lock wait) and commits.
    async fn create_row(
        &self,
        mut tx: Transaction<'static, Any>,
        name: &str,
    ) -> Result<(), Failure> {
        let c = |e| classify(e, &self.client.label, Some(name));
        sqlx::query(AssertSqlSafe(self.sql.ensure_row.as_str()))
            .bind(name)
            .execute(&mut *tx)
            .await
            .map_err(c)?;
        tx.commit().await.map_err(c)?;
        tracing::debug!("first use of the name: created its row");
        Ok(())
    }
}

#[async_trait]
impl LockBackend for ForUpdateLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        let label = &self.client.label;
        let deadline = Deadline::after(opts.wait);
        // One pooled connection per process waits in the database's lock queue instead of one
        // per waiting task.
        let queued = format!("{name}{}", self.queue_tag);
        let _turn = self.client.local_turn(&queued, try_only, &deadline).await;
        let mut budget = Budget::default();
        loop {
            let started = Instant::now();
            let remaining = deadline.remaining();
            // A wait that is over (or zero) tries once, like try_acquire.
            let nowait = try_only || remaining.is_some_and(|r| r.is_zero());
            // The transaction owns its pooled connection; if this future is dropped once it has
            // begun, sqlx rolls it back before the connection is reused, so a cancelled acquire
            // holds nothing.
            let this_wait = match self.slice {
                Some(slice) => Some(remaining.map_or(slice, |r| r.min(slice))),
                None => remaining,
            };
            // A connection used moments ago is not pinged (`crate::liveness`): one that a fault
            // killed since fails its `BEGIN`, before anything is locked, so a fresh one is
            // asked for at once (at most once per idle connection, and once more).
            let (mut tx, _) = resend_on_dead_connection(&self.pool, (label, name), || async {
                self.begin_bounded_tx(opts.ttl, this_wait, nowait)
                    .await
                    .map_err(|e| map(e, label, Some(name)))
            })
            .await?;
            let next = match self.lock_row(&mut tx, name, nowait).await {
                Ok(Some(token)) => {
                    let forget = self.record_holder(&mut tx, name, token, opts).await;
                    // The database's idle bound counts from the last statement; a waiter that
                    // waited long starts with one more round trip that resets it (see
                    // `GuardParts::start`).
                    let started = self
                        .guard_parts(tx, forget, name, token, opts, started)
                        .start()
                        .await;
                    match started {
                        Ok(g) => return Ok(Some(g)),
                        Err(e) if try_only || deadline.expired() => return Err(e),
                        Err(e) => {
                            tracing::debug!(token, error = %e, "won the row lock too late to use it; gave it back, retrying");
                            budget.conflict()
                        }
                    }
                }
                // First use of the name: create its row, then try again at once (this attempt
                // found nothing to lock, so it does not count as the one try of a zero wait).
                Ok(None) => match self.create_row(tx, name).await {
                    Ok(()) | Err(Failure::Retry) => budget.conflict(),
                    Err(Failure::Busy) => budget.busy(try_only, &deadline),
                    Err(Failure::Error(e)) => return Err(e),
                },
                Err(failure) => {
                    let _ = tx.rollback().await;
                    budget.after(failure, try_only, &deadline)?
                }
            };
            match next {
                Next::Again => {}
                Next::TimedOut => return Ok(None),
                Next::GiveUp => {
                    return Err(LockError::backend(
                        label,
                        Some(name),
                        "kept conflicting with other clients; retry later",
                        None,
                    ))
                }
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::bound(
            CrashRelease::Connection,
            Wakeup::LockQueue,
            self.client.cfg.dialect == Dialect::Postgres,
        )
    }

    fn backend_name(&self) -> &str {
        &self.client.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        let label = &self.client.label;
        // On the side pool: every lock connection may be held (see `crate::client`); the
        // peek does not wait for the row lock.
        let mut tx = crate::begin::begin(&self.client.side, None)
            .await
            .map_err(|e| map(e, label, Some(name)))?;
        let res = sqlx::query(AssertSqlSafe(self.sql.peek_row.as_str()))
            .bind(name)
            .fetch_optional(&mut *tx)
            .await;
        let _ = tx.rollback().await;
        match res {
            Ok(_) => Ok(LockInfo::free()),
            Err(e) => match classify(e, label, Some(name)) {
                Failure::Busy => Ok(LockInfo::held(None, None, None, None)),
                Failure::Retry => Ok(LockInfo::held(None, None, None, None)),
                Failure::Error(e) => Err(e),
            },
        }
    }
}

/// The store side of a for_update guard: the open transaction holding the row lock.
struct ForUpdateLease {
    tx: Mutex<Option<Transaction<'static, Any>>>,
    /// The holder identity's record, deleted in the transaction before it commits.
    forget: Option<Forget>,
    /// The liveness check run in the transaction.
    ping: &'static str,
    held: Held,
}

#[async_trait]
impl Lease for ForUpdateLease {
    async fn renew(&self, _ttl: Duration) -> Result<Option<Duration>, LockError> {
        let mut slot = self.tx.lock().await;
        let Some(tx) = slot.as_mut() else {
            return Err(self.held.gone());
        };
        // The database keeps a silent holder's session for `idle` after this ping (the bound
        // set when the lock was taken; `extend` does not change it).
        let outcome = tx.execute(self.ping).await;
        self.held.pinged(outcome, &mut slot)
    }

    async fn release(&self) -> Result<(), LockError> {
        let held = &self.held;
        let Some(mut tx) = self.tx.lock().await.take() else {
            return Err(held.gone());
        };
        if let Some(f) = &self.forget {
            if let Err(e) = sessions::forget(&mut tx, f).await {
                tracing::warn!(backend = %held.label, name = %held.name, error = %e, "could not delete the holder identity's record");
            }
        }
        tx.commit().await.map_err(|e| {
            if is_connection_gone(&e) || matches!(e, sqlx::Error::Database(_)) {
                held.lost(&e)
            } else {
                map(e, &held.label, Some(&held.name))
            }
        })?;
        tracing::debug!(backend = %held.label, name = %held.name, "lock transaction committed; row lock released");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn waiting_forever_never_runs_out_of_lock_wait_slices() {
        let mut budget = Budget::default();
        let forever = Deadline::after(None);
        // A year of one-hour slices, and more.
        for _ in 0..10_000 {
            assert_eq!(budget.busy(false, &forever), Next::Again);
        }
        // A finite wait ends when its deadline passes; try_acquire after its one try.
        let finite = Deadline::after(Some(Duration::from_secs(3600)));
        assert_eq!(budget.busy(false, &finite), Next::Again);
        assert_eq!(budget.busy(true, &finite), Next::TimedOut);
        let over = Deadline::after(Some(Duration::ZERO));
        assert_eq!(budget.busy(false, &over), Next::TimedOut);
        // Conflicts stay bounded, whatever the wait.
        for _ in 0..MAX_CONFLICTS {
            assert_eq!(budget.conflict(), Next::Again);
        }
        assert_eq!(budget.conflict(), Next::GiveUp);
    }
}

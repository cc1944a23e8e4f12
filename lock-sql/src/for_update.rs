//! for_update mode: a row per name (created on first use). A guard owns a pooled connection with
//! an open transaction that locked the row and then drew the fencing token; release commits.
//! The waiters of one process queue in arrival order ([`LocalQueue`]) and only the head holds a
//! connection, waiting in the database's own lock queue, bounded by its lock-wait setting
//! (PostgreSQL `lock_timeout` in milliseconds; MySQL/MariaDB `innodb_lock_wait_timeout` in whole
//! seconds rounded up, at most an hour per statement, repeated while the caller waits longer or
//! forever). A zero wait tries once (`NOWAIT`). If the connection dies the database releases
//! the row lock; the guard's liveness check (`SELECT 1` every ttl/3) then reports it lost.
//!
//! Fencing tokens are drawn after the row lock is granted, from a counter no rollback takes
//! back: PostgreSQL's sequence `<table>_fence` (in the locking statement), MySQL/MariaDB's
//! `AUTO_INCREMENT` table `<table>_fences` (the next statement of the lock transaction).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::backend::{Deadline, GuardParts, Lease, LocalQueue, LostSignal};
use lock_core::{AcquireOptions, LockError, LockGuard, LockInfo};
use sqlx::AssertSqlSafe;
use sqlx::{Any, Executor, Row, Transaction};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::backend::SqlLock;
use crate::config::Dialect;
use crate::error::{classify, is_connection_gone, map, Failure};
use crate::statements::for_update_bounds;

/// Conflicts (deadlocks, a row that had to be created, a guard won too late) per acquisition.
const MAX_CONFLICTS: u32 = 50;
/// MySQL: the longest lock wait of one statement; longer and endless waits repeat it.
const MYSQL_LOCK_WAIT_SLICE_SECS: u64 = 3600;
/// PostgreSQL: the largest `lock_timeout` / `idle_in_transaction_session_timeout` (ms).
const PG_MAX_MS: u64 = i32::MAX as u64;
/// The lock wait of a `NOWAIT` attempt's other statements (creating a missing row can wait on
/// a concurrent creator): PostgreSQL ms, MySQL s.
const NOWAIT_BOUND: Duration = Duration::from_secs(1);

/// How long the database keeps a silent holder's transaction: twice the lease. The guard pings
/// every ttl/3, so only a holder cut off from the database (a partition, a frozen process) goes
/// silent that long; the database then ends its session and frees the lock, and the guard,
/// unable to ping, reports itself lost before that moment.
pub(crate) fn idle_bound(ttl: Duration) -> Duration {
    ttl * 2
}

/// `d` in whole units of `unit`, rounded UP: a database bound set from it is never shorter
/// than `d` (a guard counts the exact duration, so a shorter bound would free the lock while the
/// guard still believes it is held).
fn ceil_units(d: Duration, unit: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(unit.as_nanos())).unwrap_or(u64::MAX)
}

/// MySQL `wait_timeout` (whole seconds, at least 1) for the idle bound `idle`.
fn mysql_idle_secs(idle: Duration) -> u64 {
    ceil_units(idle, Duration::from_secs(1)).max(1)
}

/// MySQL `innodb_lock_wait_timeout` (whole seconds) for one waiting statement: the time left
/// rounded up (never early, less than 1 s late), at least 1 s, at most one slice; forever is
/// one slice, repeated.
fn mysql_lock_wait_secs(remaining: Option<Duration>) -> u64 {
    remaining.map_or(MYSQL_LOCK_WAIT_SLICE_SECS, |r| {
        ceil_units(r, Duration::from_secs(1)).clamp(1, MYSQL_LOCK_WAIT_SLICE_SECS)
    })
}

/// PostgreSQL `lock_timeout` (ms; 0 = forever) for one waiting statement.
fn pg_lock_wait_ms(remaining: Option<Duration>) -> u64 {
    remaining.map_or(0, |r| {
        ceil_units(r, Duration::from_millis(1)).clamp(1, PG_MAX_MS)
    })
}

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
        if try_only || deadline.expired() {
            Next::TimedOut
        } else {
            Next::Again
        }
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

/// Sets, in `tx`, how long the database keeps it when its holder goes silent and how long its
/// statements wait for a row lock (`None` = forever; `NOWAIT` attempts get [`NOWAIT_BOUND`]).
async fn bound_tx(
    lock: &SqlLock,
    tx: &mut Transaction<'static, Any>,
    ttl: Duration,
    wait: Option<Duration>,
    nowait: bool,
) -> Result<(), sqlx::Error> {
    let idle = idle_bound(ttl);
    let wait = if nowait { Some(NOWAIT_BOUND) } else { wait };
    let sql = match lock.cfg.dialect {
        Dialect::Postgres => for_update_bounds(
            Dialect::Postgres,
            ceil_units(idle, Duration::from_millis(1)).clamp(1, PG_MAX_MS),
            pg_lock_wait_ms(wait),
        ),
        d => for_update_bounds(d, mysql_idle_secs(idle), mysql_lock_wait_secs(wait)),
    };
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

/// Locks the row of `name` in `tx` (without waiting when `nowait`) and draws its fencing token:
/// `Some(token)`, or `None` when the row does not exist yet.
async fn lock_row(
    lock: &SqlLock,
    tx: &mut Transaction<'static, Any>,
    name: &str,
    nowait: bool,
) -> Result<Option<u64>, Failure> {
    let c = |e| classify(e, &lock.label, Some(name));
    let sql = if nowait {
        &lock.sql.try_lock_row
    } else {
        &lock.sql.lock_row
    };
    let Some(row) = sqlx::query(AssertSqlSafe(sql.as_str()))
        .bind(name)
        .fetch_optional(&mut **tx)
        .await
        .map_err(c)?
    else {
        return Ok(None);
    };
    let token = match lock.cfg.dialect {
        Dialect::Postgres => row
            .try_get::<i64, _>(0)
            .map_err(|e| Failure::Error(map(e, &lock.label, Some(name))))?,
        _ => sqlx::query(AssertSqlSafe(lock.sql.draw_token.as_str()))
            .bind(name)
            .execute(&mut **tx)
            .await
            .map_err(c)?
            .last_insert_id()
            .unwrap_or(0),
    };
    match u64::try_from(token) {
        Ok(t) if t > 0 => Ok(Some(t)),
        _ => Err(Failure::Error(LockError::backend(
            &lock.label,
            Some(name),
            format!("the fencing counter returned no token ({token})"),
            None,
        ))),
    }
}

/// Creates the missing row of `name` in `tx` (bounded by its lock wait) and commits.
async fn create_row(
    lock: &SqlLock,
    mut tx: Transaction<'static, Any>,
    name: &str,
) -> Result<(), Failure> {
    let c = |e| classify(e, &lock.label, Some(name));
    sqlx::query(AssertSqlSafe(lock.sql.ensure_row.as_str()))
        .bind(name)
        .execute(&mut *tx)
        .await
        .map_err(c)?;
    tx.commit().await.map_err(c)
}

pub(crate) async fn acquire(
    lock: &SqlLock,
    name: &str,
    opts: &AcquireOptions,
    try_only: bool,
) -> Result<Option<LockGuard>, LockError> {
    let deadline = Deadline::after(opts.wait);
    // Waiters of this process queue here: one pooled connection per process waits in the
    // database's lock queue instead of one per waiting task.
    let _turn = match try_only {
        false => Some(LocalQueue::wait_turn(lock.queue_key(name), &deadline).await),
        true => None,
    };
    let mut budget = Budget::default();
    loop {
        let started = Instant::now();
        let remaining = deadline.remaining();
        // A wait that is over (or zero) tries once, like try_acquire.
        let nowait = try_only || remaining.is_some_and(|r| r.is_zero());
        // The transaction owns its pooled connection; if this future is dropped, sqlx rolls it
        // back before the connection is reused, so a cancelled acquire holds nothing.
        let mut tx = lock
            .pool
            .begin()
            .await
            .map_err(|e| map(e, &lock.label, Some(name)))?;
        let outcome = match bound_tx(lock, &mut tx, opts.ttl, remaining, nowait).await {
            Ok(()) => lock_row(lock, &mut tx, name, nowait).await,
            Err(e) => Err(classify(e, &lock.label, Some(name))),
        };
        let next = match outcome {
            Ok(Some(token)) => {
                // The database's idle bound counts from the last statement; a waiter that waited
                // long starts with one more round trip that resets it (see `GuardParts::start`).
                let started = GuardParts {
                    name: name.to_owned(),
                    backend: lock.label.clone(),
                    fencing_token: token,
                    ttl: opts.ttl,
                    renew: opts.renew,
                    acquired_at: started,
                    validity: Some(idle_bound(opts.ttl)),
                    lease: Arc::new(ForUpdateLease {
                        tx: Mutex::new(Some(tx)),
                        idle: idle_bound(opts.ttl),
                        name: name.to_owned(),
                        label: lock.label.clone(),
                    }),
                    lost: LostSignal::new(),
                }
                .start()
                .await;
                match started {
                    Ok(g) => return Ok(Some(g)),
                    Err(e) if try_only || deadline.expired() => return Err(e),
                    Err(_) => budget.conflict(),
                }
            }
            // First use of the name: create its row, then try again at once (this attempt
            // found nothing to lock, so it does not count as the one try of a zero wait).
            Ok(None) => match create_row(lock, tx, name).await {
                Ok(()) | Err(Failure::Retry) => budget.conflict(),
                Err(Failure::Busy) => budget.busy(try_only, &deadline),
                Err(Failure::Error(e)) => return Err(e),
            },
            Err(Failure::Busy) => {
                let _ = tx.rollback().await;
                budget.busy(try_only, &deadline)
            }
            Err(Failure::Retry) => {
                let _ = tx.rollback().await;
                match budget.conflict() {
                    Next::Again if try_only || deadline.expired() => Next::TimedOut,
                    next => next,
                }
            }
            Err(Failure::Error(e)) => return Err(e),
        };
        match next {
            Next::Again => {}
            Next::TimedOut => return Ok(None),
            Next::GiveUp => {
                return Err(LockError::backend(
                    &lock.label,
                    Some(name),
                    "kept conflicting with other clients; retry later",
                    None,
                ))
            }
        }
    }
}

pub(crate) async fn inspect(lock: &SqlLock, name: &str) -> Result<LockInfo, LockError> {
    let mut tx = lock
        .pool
        .begin()
        .await
        .map_err(|e| map(e, &lock.label, Some(name)))?;
    let res = sqlx::query(AssertSqlSafe(lock.sql.peek_row.as_str()))
        .bind(name)
        .fetch_optional(&mut *tx)
        .await;
    let _ = tx.rollback().await;
    match res {
        Ok(_) => Ok(LockInfo::free()),
        Err(e) => match classify(e, &lock.label, Some(name)) {
            Failure::Busy => Ok(LockInfo::held(None, None, None, None)),
            Failure::Retry => Ok(LockInfo::held(None, None, None, None)),
            Failure::Error(e) => Err(e),
        },
    }
}

/// The store side of a for_update guard: the open transaction holding the row lock.
struct ForUpdateLease {
    tx: Mutex<Option<Transaction<'static, Any>>>,
    /// How long the database keeps the session once it goes silent.
    idle: Duration,
    name: String,
    label: String,
}

impl ForUpdateLease {
    fn gone(&self) -> LockError {
        LockError::not_held(
            &self.name,
            &self.label,
            "the connection holding the row lock died, so the database released the lock",
        )
    }
}

#[async_trait]
impl Lease for ForUpdateLease {
    async fn renew(&self, _ttl: Duration) -> Result<Option<Duration>, LockError> {
        let mut slot = self.tx.lock().await;
        let Some(tx) = slot.as_mut() else {
            return Err(self.gone());
        };
        match tx.execute("SELECT 1").await {
            // The database keeps a silent holder's session for `idle` after this ping (the
            // bound set when the lock was taken; `extend` does not change it).
            Ok(_) => Ok(Some(self.idle)),
            Err(e) if is_connection_gone(&e) => {
                slot.take();
                Err(self.gone())
            }
            Err(e) => Err(map(e, &self.label, Some(&self.name))),
        }
    }

    async fn release(&self) -> Result<(), LockError> {
        let Some(tx) = self.tx.lock().await.take() else {
            return Err(self.gone());
        };
        tx.commit().await.map_err(|e| {
            if is_connection_gone(&e) || matches!(e, sqlx::Error::Database(_)) {
                self.gone()
            } else {
                map(e, &self.label, Some(&self.name))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_bounds_round_up_never_down() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        // The guard counts 2 × ttl exactly; the database must keep the holder at least that long.
        for (ttl, secs) in [
            (ms(1200), 3),
            (ms(1500), 3),
            (ms(1000), 2),
            (ms(10), 1),
            (ms(2001), 5),
            (s(24 * 3600), 48 * 3600),
        ] {
            let idle = idle_bound(ttl);
            assert_eq!(mysql_idle_secs(idle), secs, "ttl {ttl:?}");
            assert!(s(mysql_idle_secs(idle)) >= idle);
            assert!(ms(ceil_units(idle, ms(1))) >= idle);
        }
        assert_eq!(ceil_units(Duration::from_micros(20_001), ms(1)), 21);
        // Lock waits: never early, less than a unit late, within each database's range.
        assert_eq!(mysql_lock_wait_secs(Some(ms(1))), 1);
        assert_eq!(mysql_lock_wait_secs(Some(ms(1001))), 2);
        assert_eq!(mysql_lock_wait_secs(Some(s(10 * 3600))), 3600);
        assert_eq!(mysql_lock_wait_secs(None), 3600);
        assert_eq!(pg_lock_wait_ms(None), 0);
        assert_eq!(pg_lock_wait_ms(Some(Duration::from_micros(1))), 1);
        assert_eq!(pg_lock_wait_ms(Some(s(100 * 24 * 3600))), PG_MAX_MS);
    }

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

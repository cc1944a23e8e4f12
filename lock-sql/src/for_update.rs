//! for_update mode: a row per name (created on first use) with a fencing counter. A guard owns
//! a pooled connection with an open transaction that locked the row and bumped the counter in
//! one statement; release commits. The waiters of one process queue in arrival order
//! ([`LocalQueue`]) and only the head holds a connection, waiting in the database's own lock
//! queue, bounded by its lock-wait setting (PostgreSQL `lock_timeout`, MariaDB
//! `innodb_lock_wait_timeout` per statement, whole seconds). If the connection dies the
//! database releases the row lock; the guard's liveness check (`SELECT 1` every ttl/3) then
//! reports it lost.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lock_core::local_queue::LocalQueue;
use lock_core::{
    AcquireOptions, Deadline, GuardParts, Lease, LockError, LockGuard, LockInfo, LostSignal,
};
use sqlx::AssertSqlSafe;
use sqlx::{Any, Executor, Row, Transaction};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::backend::SqlLock;
use crate::config::Dialect;
use crate::error::{classify, is_connection_gone, map, Failure};

/// Retries after deadlocks or a row created concurrently, per acquisition.
const MAX_RETRIES: u32 = 50;
/// MariaDB: the lock-wait bound used when the caller waits forever (the attempt repeats).
const MYSQL_FOREVER_SLICE_SECS: u64 = 3600;

/// Locks the row of `name` in `tx` and draws its fencing token: `Some(token)`, or `None` when
/// the row does not exist yet.
/// How long the database keeps a silent holder's transaction: twice the lease. The guard pings
/// every ttl/3, so only a holder cut off from the database (a partition, a frozen process) goes
/// silent that long; the database then ends its session and frees the lock, and the guard,
/// unable to ping, reports itself lost before that moment.
pub(crate) fn idle_bound(ttl: Duration) -> Duration {
    ttl * 2
}

/// Bounds how long the database keeps this transaction when its holder goes silent.
async fn bound_idle(
    lock: &SqlLock,
    tx: &mut Transaction<'static, Any>,
    ttl: Duration,
    wait: Option<Duration>,
    try_only: bool,
) -> Result<(), sqlx::Error> {
    let idle = idle_bound(ttl);
    let sql = match lock.cfg.dialect {
        Dialect::Postgres => {
            // Whole milliseconds; lock_timeout 0 = wait forever, so a finite wait is at least 1.
            let lock_ms = match (try_only, wait) {
                (false, Some(w)) => w.as_millis().clamp(1, u128::from(u32::MAX)),
                _ => 0,
            };
            format!(
                "SET LOCAL idle_in_transaction_session_timeout = {}; SET LOCAL lock_timeout = {lock_ms}",
                idle.as_millis().clamp(1, u128::from(i32::MAX as u32))
            )
        }
        _ => format!("SET SESSION wait_timeout = {}", idle.as_secs().max(1)),
    };
    sqlx::raw_sql(AssertSqlSafe(sql))
        .execute(&mut **tx)
        .await
        .map(|_| ())
}

#[allow(clippy::too_many_arguments)]
async fn lock_row(
    lock: &SqlLock,
    tx: &mut Transaction<'static, Any>,
    name: &str,
    wait: Option<Duration>,
    ttl: Duration,
    try_only: bool,
) -> Result<Option<u64>, Failure> {
    let c = |e| classify(e, &lock.label, Some(name));
    bound_idle(lock, tx, ttl, wait, try_only).await.map_err(c)?;
    let sql = match (lock.cfg.dialect, try_only) {
        (_, true) => lock.sql.try_lock_row.clone(),
        (Dialect::Postgres, false) => lock.sql.lock_row.clone(),
        (_, false) => {
            // Whole seconds, rounded up: never early, less than 1 s late.
            let secs = wait.map_or(MYSQL_FOREVER_SLICE_SECS, |w| {
                (w.as_millis().div_ceil(1000) as u64).clamp(1, MYSQL_FOREVER_SLICE_SECS)
            });
            lock.sql.lock_row.replace("{timeout}", &secs.to_string())
        }
    };
    let mut row = sqlx::query(AssertSqlSafe(sql))
        .bind(name)
        .fetch_optional(&mut **tx)
        .await
        .map_err(c)?;
    if try_only && lock.cfg.dialect == Dialect::MySql && row.is_some() {
        row = Some(
            sqlx::query(AssertSqlSafe(lock.sql.next_token.as_str()))
                .fetch_one(&mut **tx)
                .await
                .map_err(c)?,
        );
    }
    row.map(|r| r.try_get::<i64, _>(0).map(|v| v as u64))
        .transpose()
        .map_err(|e| Failure::Error(map(e, &lock.label, Some(name))))
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
    for _ in 0..MAX_RETRIES {
        let started = Instant::now();
        // The transaction owns its pooled connection; if this future is dropped, sqlx rolls it
        // back before the connection is reused, so a cancelled acquire holds nothing.
        let mut tx = lock
            .pool
            .begin()
            .await
            .map_err(|e| map(e, &lock.label, Some(name)))?;
        let outcome = lock_row(
            lock,
            &mut tx,
            name,
            deadline.remaining(),
            opts.ttl,
            try_only,
        )
        .await;
        match outcome {
            Ok(Some(token)) => {
                // The database's idle bound counts from the last statement; a waiter that waited
                // long starts with one more round trip that resets it (see `LockGuard::start`).
                let started = LockGuard::start(GuardParts {
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
                })
                .await;
                match started {
                    Ok(g) => return Ok(Some(g)),
                    Err(_) if !try_only && !deadline.expired() => continue,
                    Err(e) => return Err(e),
                }
            }
            Ok(None) => {
                let _ = tx.rollback().await;
                sqlx::query(AssertSqlSafe(lock.sql.ensure_row.as_str()))
                    .bind(name)
                    .execute(&lock.pool)
                    .await
                    .map_err(|e| map(e, &lock.label, Some(name)))?;
            }
            Err(Failure::Busy) => {
                let _ = tx.rollback().await;
                if try_only || deadline.expired() {
                    return Ok(None);
                }
            }
            Err(Failure::Retry) => {
                let _ = tx.rollback().await;
            }
            Err(Failure::Error(e)) => return Err(e),
        }
        if !try_only && deadline.expired() {
            return Ok(None);
        }
    }
    Err(LockError::backend(
        &lock.label,
        Some(name),
        "kept conflicting with other clients; retry later",
        None,
    ))
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

//! The store side of a row-mode lock ([`RowLease`]): take, renew and release one name's row
//! by owner token; a PostgreSQL release may grant the lock to the next waiter on the way
//! (`statements/postgres.rs`); and what the row loop (`row/mod.rs`) shares with it: the lease's
//! validity, the queue statements (join, leave) and how an attempt ended ([`Taken`]).

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::{Lease, LocalQueue, WAITER_TTL};
use distlock_core::LockError;
use sqlx::{AnyPool, AssertSqlSafe, Row};
use tokio::time::Instant;
use tracing::Instrument;

use crate::bells::{Bell, Bells};
use crate::config::Dialect;
use crate::error::{classify, map, retrying, Failure};
use crate::liveness::{resend_on_dead_connection, unclear_release};
use crate::notify::Wakeups;
use crate::statements::RowStatements;

/// How long a lease of `ttl` granted (or renewed) by the database can be relied on from the
/// moment its statement was sent: `ttl` less what the database's clock can take from it — its
/// expiry is kept in whole milliseconds (the grant's millisecond is truncated: up to 1 ms) and
/// measured by its wall clock, which may run up to 0.1% faster than ours (NTP slews at most
/// 0.05%) — and 1 ms more to spare. Without it, a waiter looking every millisecond could take
/// an expired row while its frozen holder still believed its lease good for a fraction of a
/// millisecond (seen by the nemesis on SQLite).
pub(crate) fn lease_validity(ttl: Duration) -> Duration {
    ttl.saturating_sub(ttl / 1000 + Duration::from_millis(2))
}

pub(super) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// How an attempt ended.
#[derive(Debug)]
pub(super) enum Taken {
    /// We hold the lock, with this fencing token.
    Won(u64),
    /// Not ours (held, or a place is ahead).
    Lost,
    /// Not ours, and we have a place in the queue now (and our bell, if one could be had).
    Joined(Option<Bell>),
}

impl From<Option<u64>> for Taken {
    fn from(won: Option<u64>) -> Self {
        won.map_or(Taken::Lost, Taken::Won)
    }
}

/// A statement bound for the row statements of a dialect.
pub(super) type SqlQuery<'a> = sqlx::query::Query<'a, sqlx::Any, sqlx::any::AnyArguments>;

/// Joins the queue of `name` as `member`, or refreshes that place (its lease: [`WAITER_TTL`]).
pub(super) fn enqueue_query<'a>(
    sql: &'a RowStatements,
    name: &'a str,
    member: &'a str,
) -> SqlQuery<'a> {
    sqlx::query(AssertSqlSafe(sql.enqueue.as_str()))
        .bind(name)
        .bind(member)
        .bind(ms(WAITER_TTL))
}

/// Leaves the queue of `row`'s name as `member`, sweeping the name's lapsed places (again
/// after a deadlock, and when the connection died under it: a place left behind would hold
/// every other waiter back until it lapsed).
pub(super) async fn leave(row: &NamedRow, member: &str) -> Result<u64, LockError> {
    let (label, name) = (row.label.as_str(), row.name.as_str());
    let once = || {
        retrying(label, name, || async {
            sqlx::query(AssertSqlSafe(row.sql.leave.as_str()))
                .bind(name)
                .bind(member)
                .execute(&row.pool)
                .await
                .map(|r| r.rows_affected())
                .map_err(|e| classify(e, label, Some(name)))
        })
    };
    Ok(resend_on_dead_connection(&row.pool, (label, name), once)
        .await?
        .0)
}

/// One name's row and queue as an acquisition sees them, resolved once for all its leases:
/// the client's pool, statements and label, the name, its in-process queue key and
/// (PostgreSQL) this process's release listener.
#[derive(Debug)]
pub(super) struct NamedRow {
    pub(super) pool: AnyPool,
    pub(super) sql: Arc<RowStatements>,
    pub(super) dialect: Dialect,
    pub(super) label: String,
    pub(super) name: String,
    /// This lock's in-process queue key, woken after a release.
    pub(super) queue_key: String,
    /// PostgreSQL: the process's release listener, which a release that granted the lock to
    /// one of its waiters hands the grant to directly ([`Wakeups::deliver`]).
    /// Weak: a guard does not keep the listener (and its connection) alive once the clients
    /// that share it are gone.
    pub(super) local: Option<Weak<Wakeups>>,
}

impl NamedRow {
    /// The lease of this row as held by `owner`.
    pub(super) fn lease(self: &Arc<Self>, owner: &str) -> RowLease {
        RowLease {
            row: Arc::clone(self),
            owner: owner.to_owned(),
            bell: Mutex::new(None),
        }
    }
}

/// The store side of a row-mode guard: our row, by name and owner token.
pub(super) struct RowLease {
    row: Arc<NamedRow>,
    owner: String,
    /// MySQL: the holder's bell, rung after its release (dropped with the lease otherwise,
    /// which rings it too).
    bell: Mutex<Option<Bell>>,
}

impl RowLease {
    /// This lease, ringing `bell` after its release.
    pub(super) fn ringing(self, bell: Option<Bell>) -> Self {
        RowLease {
            bell: Mutex::new(bell),
            ..self
        }
    }

    /// Rings the holder's bell, if any: the waiter behind it tries at once.
    async fn ring(&self) {
        let bell = self.bell.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(bell) = bell {
            bell.ring().await;
        }
    }

    /// The acquiring statement as `member`'s place (`None`: without one, every live place is
    /// ahead), bound for this lease's name and owner.
    fn acquire_query<'a>(&'a self, ttl: Duration, member: Option<&'a str>) -> SqlQuery<'a> {
        let name = self.row.name.as_str();
        let text = match member {
            Some(_) => &self.row.sql.acquire,
            None => &self.row.sql.acquire_first,
        };
        let q = sqlx::query(AssertSqlSafe(text.as_str()))
            .bind(name)
            .bind(self.owner.as_str())
            .bind(ms(ttl));
        match (member, self.row.sql.positional) {
            (Some(m), true) => q.bind(name).bind(m).bind(name).bind(m),
            (Some(m), false) => q.bind(m),
            (None, true) => q.bind(name),
            (None, false) => q,
        }
    }

    /// Takes the lock if the row is absent or expired and no live waiter is queued ahead of
    /// `member`'s place (`None`: no place, so any live waiter is ahead; see
    /// `statements/queue.rs`): `Some(token)` if we now hold it.
    pub(super) async fn take(
        &self,
        ttl: Duration,
        member: Option<&str>,
    ) -> Result<Option<u64>, Failure> {
        let name = self.row.name.as_str();
        let c = |e| classify(e, &self.row.label, Some(name));
        let q = self.acquire_query(ttl, member);
        let Some(bump) = &self.row.sql.bump else {
            // The acquiring statement returns the token of a won row.
            let row = q.fetch_optional(&self.row.pool).await.map_err(c)?;
            let won = row
                .map(|r| r.try_get::<i64, _>(0).map(|v| v as u64))
                .transpose()
                .map_err(|e| Failure::Error(map(e, &self.row.label, Some(name))))?;
            if won.is_some() {
                self.leave_after_win(member).await;
            }
            return Ok(won);
        };
        let done = q.execute(&self.row.pool).await.map_err(c)?;
        if done.last_insert_id() != Some(1) || done.rows_affected() == 0 {
            return Ok(None);
        }
        // We hold the row: draw the token now (the next holder can only draw after we release),
        // and leave the queue meanwhile on another connection (one round trip for both).
        let bumping = sqlx::query(AssertSqlSafe(bump.as_str()))
            .bind(name)
            .execute(&self.row.pool);
        let (bumped, ()) = tokio::join!(bumping, self.leave_after_win(member));
        let bumped = bumped.map_err(c);
        match bumped.map(|r| r.last_insert_id().unwrap_or(0)) {
            Ok(token) if token > 0 => Ok(Some(token as u64)),
            other => {
                let _ = self.release().await;
                Err(other.err().unwrap_or_else(|| {
                    Failure::Error(LockError::backend(
                        &self.row.label,
                        Some(name),
                        "the fencing counter returned no token",
                        None,
                    ))
                }))
            }
        }
    }

    /// [`super::Try::FirstOrJoin`]: a first try, and when it loses, `member`'s place in the queue
    /// (SQLite: and its bell), in one statement (PostgreSQL) or one transaction (SQLite: one
    /// wait for the file) — no moment in which the try has failed but the place is not there
    /// yet.
    pub(super) async fn take_or_join(
        &self,
        ttl: Duration,
        member: &str,
        bells: Option<Arc<Bells>>,
    ) -> Result<Taken, Failure> {
        let name = self.row.name.as_str();
        let c = |e| classify(e, &self.row.label, Some(name));
        if let Some(text) = &self.row.sql.acquire_or_join {
            // One statement (PostgreSQL): the token won, or the place joined.
            let row = sqlx::query(AssertSqlSafe(text.as_str()))
                .bind(name)
                .bind(self.owner.as_str())
                .bind(ms(ttl))
                .bind(member)
                .bind(ms(WAITER_TTL))
                .fetch_one(&self.row.pool)
                .await
                .map_err(c)?;
            let won: Option<i64> = row
                .try_get(0)
                .map_err(|e| Failure::Error(map(e, &self.row.label, Some(name))))?;
            return Ok(won.map_or(Taken::Joined(None), |t| Taken::Won(t as u64)));
        }
        // Our bell before our place, so whoever finds the place finds the bell held; and
        // before the transaction, which holds the file's write lock from its first statement
        // (let go at once if the try wins).
        let bell = match &bells {
            Some(bells) => bells.take(member).await,
            None => None,
        };
        let mut tx = crate::begin::begin(&self.row.pool, None).await.map_err(c)?;
        let row = self
            .acquire_query(ttl, None)
            .fetch_optional(&mut *tx)
            .await
            .map_err(c)?;
        if let Some(row) = row {
            let token = row
                .try_get::<i64, _>(0)
                .map_err(|e| Failure::Error(map(e, &self.row.label, Some(name))))?;
            tx.commit().await.map_err(c)?;
            return Ok(Taken::Won(token as u64));
        }
        enqueue_query(&self.row.sql, name, member)
            .execute(&mut *tx)
            .await
            .map_err(c)?;
        tx.commit().await.map_err(c)?;
        Ok(Taken::Joined(bell))
    }

    /// Leaves the queue as `member` (if it had a place) after a win, unless the acquiring
    /// statement did (see [`RowStatements::acquire_leaves`]). A failure is only logged by
    /// [`leave`]'s retries: the place lapses by itself.
    async fn leave_after_win(&self, member: Option<&str>) {
        if let (Some(m), false) = (member, self.row.sql.acquire_leaves) {
            let _ = leave(&self.row, m).await;
        }
    }

    pub(super) async fn delete(&self) -> Result<u64, Failure> {
        let q = sqlx::query(AssertSqlSafe(self.row.sql.release.as_str()))
            .bind(&self.row.name)
            .bind(&self.owner);
        let c = |e| classify(e, &self.row.label, Some(&self.row.name));
        if self.row.dialect == Dialect::Postgres {
            // This process's waiter that stands next, to which the release may grant the lock.
            let local = self.row.local.as_ref().and_then(Weak::upgrade);
            let next = (local.as_ref())
                .and_then(|w| w.next_of(&self.row.name))
                .unwrap_or_default();
            let sent = Instant::now();
            let row = q.bind(next).fetch_one(&self.row.pool).await.map_err(c)?;
            let get = |e| Failure::Error(map(e, &self.row.label, Some(&self.row.name)));
            let n: i64 = row.try_get(0).map_err(get)?;
            // The member the release granted the lock to, its token, and whether it was
            // granted to a place (NULLs: none).
            let granted: Option<String> = row.try_get(2).map_err(get)?;
            let token: Option<i64> = row.try_get(3).map_err(get)?;
            let placed: Option<bool> = row.try_get(4).map_err(get)?;
            if let (Some(local), Some(member), Some(token)) = (&local, granted, token) {
                let next_since = (placed == Some(false)).then_some(sent);
                if !local.deliver(&self.row.name, &member, token as u64, next_since) {
                    // Granted to the next in line, which stepped out meanwhile: given back
                    // (and passed on).
                    self.row.lease(&member).give_back();
                }
            }
            Ok(n as u64)
        } else {
            Ok(q.execute(&self.row.pool).await.map_err(c)?.rows_affected())
        }
    }

    /// Releases this lease's row in the background (a grant nobody will use), on the current
    /// runtime if there is one (otherwise the row's lease runs out).
    pub(super) fn give_back(self) {
        let releasing: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            Box::pin(async move {
                let _ = self.on_a_live_connection(|| self.delete()).await;
            });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(releasing.in_current_span());
        }
    }

    async fn with_retries<T, F, Fut>(&self, f: F) -> Result<T, LockError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        retrying(&self.row.label, &self.row.name, f).await
    }

    /// [`Self::with_retries`], sent again when the connection died under it (with the first
    /// such failure, see [`resend_on_dead_connection`]): for the lease's own statements, keyed
    /// by its owner, which are safe to run twice.
    pub(super) async fn on_a_live_connection<T, F, Fut>(
        &self,
        f: F,
    ) -> Result<(T, Option<LockError>), LockError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        let who = (self.row.label.as_str(), self.row.name.as_str());
        resend_on_dead_connection(&self.row.pool, who, || self.with_retries(&f)).await
    }
}

#[async_trait]
impl Lease for RowLease {
    async fn renew(&self, ttl: Duration) -> Result<Option<Duration>, LockError> {
        // A renewal sent twice finds its row the second time too (it counts matched rows).
        let (n, _) = self
            .on_a_live_connection(|| async {
                sqlx::query(AssertSqlSafe(self.row.sql.renew.as_str()))
                    .bind(ms(ttl))
                    .bind(&self.row.name)
                    .bind(&self.owner)
                    .execute(&self.row.pool)
                    .await
                    .map(|r| r.rows_affected())
                    .map_err(|e| classify(e, &self.row.label, Some(&self.row.name)))
            })
            .await
            .inspect_err(|e| {
                tracing::debug!(backend = %self.row.label, name = %self.row.name, error = %e, "row renewal failed");
            })?;
        if n == 0 {
            tracing::debug!(
                backend = %self.row.label,
                name = %self.row.name,
                "renewal found no row of ours: expired and taken over, or removed"
            );
            return Err(LockError::not_held(
                &self.row.name,
                &self.row.label,
                "the row is gone, expired or owned by another holder",
            ));
        }
        Ok(Some(lease_validity(ttl)))
    }

    async fn release(&self) -> Result<(), LockError> {
        let deleted = self.on_a_live_connection(|| self.delete()).await;
        // This process's waiters are woken first (no round trip), then the bell rung for
        // another process's, whatever the outcome (the bell is a hint).
        let outcome = self.outcome(deleted);
        self.ring().await;
        outcome
    }
}

impl RowLease {
    /// A release's answer from its delete, waking this process's waiters when the row is
    /// gone (or may be).
    fn outcome(
        &self,
        deleted: Result<(u64, Option<LockError>), LockError>,
    ) -> Result<(), LockError> {
        // A release that failed may still have run (and granted the lock to a waiter of this
        // process, which is not notified of it): the waiters look.
        let deleted = deleted.inspect_err(|_| LocalQueue::wake(&self.row.queue_key));
        match deleted? {
            (0, Some(first)) => {
                LocalQueue::wake(&self.row.queue_key);
                Err(unclear_release(&self.row.label, &self.row.name, first))
            }
            (0, None) => {
                tracing::debug!(
                    backend = %self.row.label,
                    name = %self.row.name,
                    "release found no row of ours: expired and taken over, or removed"
                );
                Err(LockError::not_held(
                    &self.row.name,
                    &self.row.label,
                    "the lease expired and the row was taken over or removed",
                ))
            }
            (_, _) => {
                tracing::debug!(backend = %self.row.label, name = %self.row.name, "row deleted; waking this process's waiters");
                LocalQueue::wake(&self.row.queue_key);
                Ok(())
            }
        }
    }
}

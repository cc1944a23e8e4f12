//! Row mode ([`RowLock`]): a row per held lock (name, owner token, fencing token, expiry by
//! the database clock). Acquire is one `INSERT … ON CONFLICT/DUPLICATE KEY` that also takes
//! over an expired row; release deletes by name and owner; renewal extends by owner
//! ([`lease::RowLease`]). The statements are in `statements/<dialect>.rs`.
//!
//! Waiting: the waiters of one process queue in arrival order ([`LocalQueue`](distlock_core::backend::LocalQueue)); only the head
//! talks to the database, and a release by this process wakes it at once. Across processes the
//! heads queue in the database (`<t>_waitq`, `statements/queue.rs`): a head whose first try
//! fails takes a place, refreshes it every second (a place lapses 3 s after its last refresh)
//! and leaves it once it wins (PostgreSQL: in the winning statement), gives up or is dropped; the acquire statement takes the lock
//! only when no live place is ahead of the caller's, so a client that releases while another
//! process waits goes to the back of the line. FIFO within a process and across processes.
//! The lock row alone decides who holds the lock; the queue only decides who may try.
//!
//! How heads learn of a release: PostgreSQL's release statement `NOTIFY`s (one shared listener
//! per client; a woken head tries at once, with a 1 s safety re-check); on MySQL/MariaDB and
//! SQLite (Linux) a head waits on the bell of the place ahead of it, or of the holder
//! (`crate::bells`), and tries when it rings; without a bell to wait on the head of the queue
//! looks about every millisecond (MySQL: by trying; SQLite: by a read, as a write would wait
//! for the file) and a head with k places ahead k times less often, up to 100 ms. Every head also
//! wakes when the holder's lease runs out.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_core::backend::wait::random_up_to;
use distlock_core::backend::{
    owner_token, Attempt, CleanupOnDrop, Deadline, GuardParts, Lease, LockBackend, LostSignal,
    Share,
};
use distlock_core::{AcquireOptions, Capabilities, LockError, LockGuard, LockInfo, Wakeup};
use sqlx::AssertSqlSafe;
use sqlx::Row;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Instrument;

use crate::bells::{self, Bell, BellWait, Bells};
use crate::client::SqlClient;
use crate::config::Dialect;
use crate::error::{classify, map, retrying, Failure, MAX_RETRIES};
use crate::notify::Wakeups;
use crate::recently_queued::RecentlyQueued;
use crate::statements::{self, RowStatements};

mod lease;
mod place;

pub(crate) use lease::lease_validity;
use lease::{enqueue_query, leave, ms, NamedRow, Taken};
use place::{NextInLine, Place};

/// PostgreSQL waiters re-check at least this often in case a notification was missed.
const NOTIFY_SAFETY_POLL: Duration = Duration::from_secs(1);
pub(crate) use distlock_core::backend::{HEARTBEAT, WAITER_TTL};
/// MySQL/SQLite: the head of the queue looks at the lock about this often (a read); a waiter
/// with k places ahead, k times less often, down to [`MAX_POLL`].
const HEAD_POLL: Duration = Duration::from_millis(1);
/// The longest a MySQL/SQLite waiter sleeps between looks (unless the holder's lease is
/// known to last longer).
const MAX_POLL: Duration = Duration::from_millis(100);

/// What a waiter sees at a look ([`RowLock::state`]).
struct Look {
    /// The holder's milliseconds left (`None`: no row).
    left: Option<i64>,
    /// The live places ahead of ours.
    ahead: i64,
    /// The holder's row owner (`None`: no row).
    holder: Option<String>,
    /// The member of the live place just ahead of ours (`None`: none).
    before: Option<String>,
}

impl Look {
    /// Whether no live row holds the lock.
    fn free(&self) -> bool {
        self.left.is_none_or(|l| l <= 0)
    }

    /// The member whose bell to wait on (`crate::bells`): the place just ahead, or, at the
    /// head of the queue, the holder's (if it queued); `None` when there is nothing to wait
    /// for or no bell to wait on.
    fn bell(&self) -> Option<String> {
        match (self.ahead, self.free()) {
            (0, true) => None,
            (0, false) => self
                .holder
                .as_deref()
                .and_then(bells::member_of)
                .map(str::to_owned),
            _ => self.before.clone(),
        }
    }
}

/// What kind of try an attempt makes (see [`RowLock::take`]).
#[derive(Debug, Clone, Copy)]
enum Try<'a> {
    /// Without a place: every live place is ahead of us.
    First,
    /// As the member of a place in the queue: only the places ahead of it count.
    Queued(&'a str),
    /// SQLite and PostgreSQL, for a name this client queued for lately
    /// (`crate::recently_queued`): a first try that, lost, takes a place for this member in the
    /// same write (SQLite: and its bell before anyone can see the place), so that no release
    /// fits between a waiter's failed try and its place. SQLite: two writes, each waiting for
    /// the file, left that gap, and with two processes and bells 43–57% of acquisitions were
    /// re-takes. PostgreSQL: the release that follows finds the place and grants the lock to
    /// it (`statements/postgres.rs`), where a release in the gap deleted the row and the
    /// waiter needed three more statements (join, look, take) — the common case for the next
    /// waiter of a process, whose turn starts as the holder's does.
    FirstOrJoin(&'a str),
}

/// [`Try`] for the attempt's own task.
enum OwnedTry {
    First,
    Queued(String),
    FirstOrJoin(String),
}

impl Try<'_> {
    fn owned(self) -> OwnedTry {
        match self {
            Try::First => OwnedTry::First,
            Try::Queued(m) => OwnedTry::Queued(m.to_owned()),
            Try::FirstOrJoin(m) => OwnedTry::FirstOrJoin(m.to_owned()),
        }
    }
}

/// Row mode over one client: the row statements of its dialect and (PostgreSQL) the release
/// listener it shares with the process's other clients of the database.
#[derive(Debug)]
pub(crate) struct RowLock {
    client: Arc<SqlClient>,
    sql: Arc<RowStatements>,
    /// PostgreSQL: this client's share of the process's release listener (`None` for the
    /// dialects without one).
    wakeups: Option<Share<Wakeups>>,
    /// MySQL/MariaDB and SQLite: the bells waiters wait on across processes (`crate::bells`).
    bells: Option<Arc<Bells>>,
    /// SQLite: the names this client queued for lately (their first tries join on losing);
    /// `None` for the dialects that do not read it.
    queued_lately: Option<RecentlyQueued>,
}

impl RowLock {
    pub(crate) fn new(client: Arc<SqlClient>) -> Self {
        let sql = Arc::new(statements::row(client.cfg.dialect, &client.cfg.table));
        let bells = Bells::new(client.cfg.dialect, client.cfg.driver_url()).map(Arc::new);
        let queued_lately = matches!(client.cfg.dialect, Dialect::Sqlite | Dialect::Postgres)
            .then(RecentlyQueued::default);
        let wakeups = sql.notify_channel.as_ref().map(|_| Share::default());
        RowLock {
            client,
            sql,
            wakeups,
            bells,
            queued_lately,
        }
    }

    /// PostgreSQL: the release listener this client shares on the current runtime, and its
    /// channel (`None` for the dialects without one).
    fn wakeups(&self) -> Option<(Arc<Wakeups>, &String)> {
        let url = self.client.cfg.driver_url();
        (self.sql.notify_channel.as_ref())
            .zip(self.wakeups.as_ref())
            .map(|(channel, share)| (Wakeups::shared(share, url, channel), channel))
    }

    /// `name`'s row and queue for one acquisition; `local`: this process's release listener
    /// (PostgreSQL), resolved once by the caller.
    fn named_row(&self, name: &str, local: Option<&Arc<Wakeups>>) -> Arc<NamedRow> {
        Arc::new(NamedRow {
            pool: self.client.pool.clone(),
            sql: Arc::clone(&self.sql),
            dialect: self.client.cfg.dialect,
            label: self.client.label.clone(),
            name: name.to_owned(),
            queue_key: self.client.queue_key(name),
            local: local.map(Arc::downgrade),
        })
    }

    /// Notes that an acquisition of `name` queued (SQLite and PostgreSQL: see
    /// [`Try::FirstOrJoin`]).
    fn note_queued(&self, name: &str) {
        if let Some(q) = &self.queued_lately {
            q.note(name);
        }
    }

    /// One acquisition attempt as `owner`, the kind `how` says: won, lost, or (a first try
    /// that joins) lost with a place in the queue.
    ///
    /// The attempt runs in its own task, to completion even when the acquire is cancelled
    /// meanwhile: a statement already on its way may still insert the row (or the place) after
    /// the cancel, so the attempt gives back what it won, and leaves the place it took, once no
    /// one is left to take them (no timing assumption).
    async fn take(
        &self,
        row: &Arc<NamedRow>,
        owner: &str,
        how: Try<'_>,
        ttl: Duration,
    ) -> Result<Taken, Failure> {
        let attempt = row.lease(owner);
        // A place a joining try took may be granted the lock before it is left.
        let departure = match how {
            Try::FirstOrJoin(m) => Some(departure(row, m)),
            _ => None,
        };
        let how = how.owned();
        let bells = self.bells.clone();
        let (reply, answer) = oneshot::channel();
        tokio::spawn(
            async move {
                let taken = match &how {
                    OwnedTry::First => attempt.take(ttl, None).await.map(Taken::from),
                    OwnedTry::Queued(m) => attempt.take(ttl, Some(m)).await.map(Taken::from),
                    OwnedTry::FirstOrJoin(m) => attempt.take_or_join(ttl, m, bells).await,
                };
                match reply.send(taken) {
                    Err(Ok(Taken::Won(_))) => {
                        tracing::debug!(
                            "the acquire was cancelled after its attempt won; giving the row back"
                        );
                        let _ = attempt.release().await;
                    }
                    Err(Ok(Taken::Joined(_))) => {
                        if let Some(departure) = departure {
                            departure.await;
                        }
                    }
                    _ => {}
                }
            }
            .in_current_span(),
        );
        answer.await.unwrap_or_else(|_| {
            Err(Failure::Error(LockError::backend(
                &self.client.label,
                Some(&row.name),
                "the acquisition attempt ended without an answer",
                None,
            )))
        })
    }

    /// The holder's (owner, token, ms left), if a row exists.
    async fn lookup(&self, name: &str) -> Result<Option<(String, i64, i64)>, LockError> {
        let label = &self.client.label;
        let row = sqlx::query(AssertSqlSafe(self.sql.lookup.as_str()))
            .bind(name)
            .fetch_optional(&self.client.pool)
            .await
            .map_err(|e| map(e, label, Some(name)))?;
        row.map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .transpose()
            .map_err(|e: sqlx::Error| map(e, label, Some(name)))
    }

    /// Joins the queue of `name` as `member`, or refreshes that place.
    ///
    /// The statement runs in its own task, to completion even when the acquire is cancelled
    /// meanwhile: a statement already on its way may still insert the place after the cancel,
    /// so the task removes the place once no one is left to use it (as [`RowLock::take`]).
    async fn join(&self, row: &Arc<NamedRow>, member: &str) -> Result<(), LockError> {
        let (r, m) = (Arc::clone(row), member.to_owned());
        let (reply, answer) = oneshot::channel();
        // A release may grant the place the lock before it is left.
        let departure = departure(row, member);
        tokio::spawn(
            async move {
                let joined = retrying(&r.label, &r.name, || async {
                    enqueue_query(&r.sql, &r.name, &m)
                        .execute(&r.pool)
                        .await
                        .map(drop)
                        .map_err(|e| classify(e, &r.label, Some(&r.name)))
                })
                .await;
                if reply.send(joined).is_err() {
                    departure.await;
                }
            }
            .in_current_span(),
        );
        answer.await.unwrap_or_else(|_| {
            Err(LockError::backend(
                &self.client.label,
                Some(&row.name),
                "joining the waiter queue ended without an answer",
                None,
            ))
        })
    }

    /// What a waiter as `member` sees of `name` (see [`Look`]).
    async fn state(&self, name: &str, member: &str) -> Result<Look, LockError> {
        let label = &self.client.label;
        let q = sqlx::query(AssertSqlSafe(self.sql.state.as_str())).bind(name);
        let q = match self.sql.positional {
            true => q
                .bind(name)
                .bind(member)
                .bind(name)
                .bind(member)
                .bind(name)
                .bind(name)
                .bind(member)
                .bind(name)
                .bind(member),
            false => q.bind(member),
        };
        let row = q
            .fetch_one(&self.client.pool)
            .await
            .map_err(|e| map(e, label, Some(name)))?;
        let get = |e| map(e, label, Some(name));
        Ok(Look {
            left: row.try_get(0).map_err(get)?,
            ahead: row.try_get(1).map_err(get)?,
            holder: row.try_get(2).map_err(get)?,
            // MySQL's member column is VARBINARY: bytes there, text elsewhere.
            before: match row.try_get::<Option<String>, _>(3) {
                Ok(m) => m,
                Err(_) => row
                    .try_get::<Option<Vec<u8>>, _>(3)
                    .map_err(get)?
                    .map(|b| String::from_utf8_lossy(&b).into_owned()),
            },
        })
    }

    /// The guard for a won row; `Unavailable` if the database answered so late that most of
    /// the lease had passed (see [`GuardParts::start`]).
    async fn guard(
        &self,
        row: &Arc<NamedRow>,
        owner: &str,
        token: u64,
        opts: &AcquireOptions,
        started: Instant,
        bell: Option<Bell>,
    ) -> Result<LockGuard, LockError> {
        GuardParts {
            name: row.name.clone(),
            backend: self.client.label.clone(),
            fencing_token: token,
            ttl: opts.ttl,
            renew: opts.renew,
            acquired_at: started,
            validity: Some(lease_validity(opts.ttl)),
            lease: Arc::new(row.lease(owner).ringing(bell)),
            lost: LostSignal::new(),
        }
        .start()
        .await
    }

    /// The guard for the lock a release granted to `member` (PostgreSQL,
    /// `statements/postgres.rs`): the row is ours, with the rest of our place in the queue as
    /// its lease — at least [`WAITER_TTL`] from `refreshed`, when the statement that last
    /// refreshed the place was sent (the database refreshed it after that). When the caller's
    /// lease is shorter, or will not be renewed, a validity of zero makes the guard renew to
    /// the caller's `ttl` before it is handed out ([`GuardParts::start`]), so the lease is the
    /// caller's from then on; otherwise the guard's first renewal, a third of the way, does
    /// it. The grant took our place out of the queue (a refresh on its way then may have put
    /// it back: the guard's release removes it).
    async fn granted(
        &self,
        row: &Arc<NamedRow>,
        member: &str,
        token: u64,
        opts: &AcquireOptions,
        refreshed: Instant,
    ) -> Result<LockGuard, LockError> {
        let validity = match opts.ttl < WAITER_TTL || !opts.renew {
            true => Duration::ZERO,
            false => lease_validity(WAITER_TTL),
        };
        let lease = Arc::new(row.lease(member));
        GuardParts::leased(
            &row.name,
            &self.client.label,
            token,
            opts,
            refreshed,
            validity,
            lease,
        )
        .start()
        .await
    }
}

#[async_trait]
impl LockBackend for RowLock {
    async fn attempt(
        &self,
        name: &str,
        opts: &AcquireOptions,
        how: Attempt,
    ) -> Result<Option<LockGuard>, LockError> {
        let try_only = how == Attempt::Try;
        let deadline = Deadline::after(opts.wait);
        let pg = self.client.cfg.dialect == Dialect::Postgres;
        // Only the head of this process's waiters talks to the database.
        let turn = self.client.local_turn(name, try_only, &deadline).await;
        // PostgreSQL: the listener the process's clients share on this runtime, and its channel.
        let url = self.client.cfg.driver_url();
        let wakeups = self.wakeups();
        let registration = match (&wakeups, try_only) {
            (Some((wakeups, channel)), false) => {
                wakeups.ensure_listener(url, channel, &self.client.label);
                Some(wakeups.register(name))
            }
            _ => None,
        };
        // This acquisition's place in the name's queue across processes (statements/queue.rs),
        // joined after the first try fails; left (or swept once lapsed) however it ends.
        // PostgreSQL: tagged with this process's listener, so a release notifies it alone.
        let member = wakeups
            .as_ref()
            .map_or_else(owner_token, |(w, _)| w.member());
        let row = self.named_row(name, wakeups.as_ref().map(|(w, _)| w));
        // PostgreSQL: we are the one waiter of this process that talks to the database now, so
        // a release by it may grant us the lock even before we have a place (`NextInLine`) —
        // from the start, as the holder's release is commonly on its way as our first try is.
        // Not while we build a guard: a row we won too late is given back by a release, which
        // must not grant it to us again (we stand again when we wait). Declared after the
        // registration, so it steps out while the registration still finds a grant for us.
        let stand = |w: &Arc<Wakeups>| NextInLine::stand(w, &row, &member);
        let mut next: Option<NextInLine> = match (&wakeups, try_only) {
            (Some((w, _)), false) => Some(stand(w)),
            _ => None,
        };
        let mut place: Option<Place> = None;
        let mut retries = 0u32;
        let mut misses = 0u32;
        let mut try_now = true;
        // MySQL: our own bell, held from before we join until the acquisition ends (or, won,
        // until the guard releases); and the member whose bell last rang for us.
        let mut bell: Option<Bell> = None;
        let mut rung = String::new();
        // Wait without looking first (PostgreSQL, just joined by the try).
        let mut skip_look = false;
        loop {
            // Armed before the attempt so a release between the attempt and the wait still
            // wakes us.
            let notified = registration.as_ref().map(|r| r.signal.notified());
            let released = turn.as_ref().map(|t| t.released());
            tokio::pin!(notified, released);
            if let Some(n) = notified.as_mut().as_pin_mut() {
                n.enable();
            }
            if let Some(n) = released.as_mut().as_pin_mut() {
                n.enable();
            }
            // PostgreSQL: a release handed us the lock (its notification carried the grant, or
            // its releaser of this process handed it over). Its lease counts from our place's
            // `grant_base`, or (granted without one) from before the release was sent.
            let grant = (registration.as_ref())
                .and_then(|r| r.signal.take_grant(&member))
                .and_then(|(token, since)| {
                    since
                        .or(place.as_ref().map(|p| p.grant_base))
                        .map(|at| (token, at))
                });
            if let Some((token, refreshed)) = grant {
                next = None;
                // Given back (and passed on) if this future ends before the guard owns it.
                let armed = cleanup(&row, &member);
                match self.granted(&row, &member, token, opts, refreshed).await {
                    Ok(g) => {
                        armed.disarm();
                        if let Some(queued) = place.take() {
                            // The grant removed our place (see `granted`).
                            queued.cleanup.disarm();
                        }
                        return Ok(Some(g));
                    }
                    // Granted too late to be of use (the lease had mostly passed) and given
                    // back by the guard's start, which passed it on and removed our place:
                    // queue again. (Not again as this grant: the release already ran, and a
                    // second one could hand away a later grant to the same member.)
                    Err(e) if !deadline.expired() => {
                        armed.disarm();
                        tracing::debug!(token, error = %e, "granted the row too late to use it; gave it back, queueing again");
                        if let Some(p) = &mut place {
                            p.refresh_now = true;
                        }
                        try_now = false;
                        continue;
                    }
                    Err(e) => {
                        armed.disarm();
                        return Err(e);
                    }
                }
            }
            if try_now {
                // A try with a bell names it to whoever waits behind us (`crate::bells`);
                // SQLite's queued tries name their member always: the won row's trigger takes
                // the place out of the queue by it (`statements/sqlite.rs`).
                let sqlite_queued = place.is_some() && self.client.cfg.dialect == Dialect::Sqlite;
                let owner = match (&bell, sqlite_queued) {
                    (Some(_), _) | (None, true) => bells::owner_for(&member),
                    (None, false) => owner_token(),
                };
                let started = Instant::now();
                let armed = cleanup(&row, &owner);
                // Without a place, every live place is ahead of us (the cheaper statement).
                let how = match (&place, try_only) {
                    (Some(_), _) => Try::Queued(&member),
                    (None, false)
                        if self.queued_lately.as_ref().is_some_and(|q| q.lately(name)) =>
                    {
                        Try::FirstOrJoin(&member)
                    }
                    (None, _) => Try::First,
                };
                // The place a joining try may take is left however this future ends: armed
                // before the try, as a cancel after the answer was sent but before this
                // future read it would otherwise leave the place behind (as `join` does).
                let joining =
                    matches!(how, Try::FirstOrJoin(_)).then(|| leave_on_drop(&row, &member));
                let taken = self.take(&row, &owner, how, opts.ttl).await;
                let joined = match (&taken, joining) {
                    (Ok(Taken::Joined(_)), joining) => joining,
                    // An error that leaves open whether the statement took effect (the
                    // connection died before the answer): the place is left, in case.
                    (Err(Failure::Error(_)), joining) => {
                        drop(joining);
                        None
                    }
                    (_, Some(unused)) => {
                        unused.disarm();
                        None
                    }
                    (_, None) => None,
                };
                match taken {
                    Ok(Taken::Won(token)) => {
                        next = None;
                        if let Some(queued) = place.take() {
                            // The attempt left our place before answering (the acquiring
                            // statement or one beside it): a release must never find it still
                            // ahead of the next waiter.
                            queued.cleanup.disarm();
                        }
                        // The cleanup stays armed until the guard owns the row:
                        // `GuardParts::start` may still renew a late reply, and a cancel there
                        // would leave the row held for a lease.
                        match self
                            .guard(&row, &owner, token, opts, started, bell.take())
                            .await
                        {
                            Ok(g) => {
                                armed.disarm();
                                return Ok(Some(g));
                            }
                            // Won too late to be of use and given back (the still-armed
                            // cleanup deletes the row again in case that failed): retry while
                            // the wait allows.
                            Err(e) if !try_only && !deadline.expired() => {
                                tracing::debug!(token, error = %e, "won the row too late to use it; gave it back, retrying");
                                continue;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(Taken::Lost) | Err(Failure::Busy) => armed.disarm(),
                    Ok(Taken::Joined(rung_by)) => {
                        armed.disarm();
                        // PostgreSQL: the release that follows notifies (or grants) us;
                        // nothing to look at meanwhile.
                        skip_look = pg;
                        let cleanup = joined.unwrap_or_else(|| leave_on_drop(&row, &member));
                        place = Some(Place::joined(cleanup, started));
                        bell = rung_by;
                        self.note_queued(name);
                        tracing::debug!("held by another client, or waiters are ahead: queued");
                    }
                    Err(Failure::Retry) => {
                        armed.disarm();
                        // A win whose token draw deadlocked was given back after its place was
                        // left: join again at the next look (a refresh if the place is there),
                        // and let our bell go (whoever waits on it looks again; a rare path,
                        // so followers poll us for the rest of this acquisition).
                        bell = None;
                        if let Some(p) = &mut place {
                            p.refresh_now = true;
                        }
                        retries += 1;
                        if retries > MAX_RETRIES {
                            return Err(LockError::backend(
                                &self.client.label,
                                Some(name),
                                "kept deadlocking with other clients; retry later",
                                None,
                            ));
                        }
                        tracing::debug!(
                            retries,
                            "the acquire statement conflicted (deadlock); retrying"
                        );
                        tokio::time::sleep(random_up_to(Duration::from_millis(5))).await;
                        continue;
                    }
                    Err(Failure::Error(e)) => return Err(e),
                }
            }
            distlock_core::backend::handoff::waited();
            if try_only || deadline.expired() {
                // Out of line first: our departure's give-back must not grant the lock to us.
                drop(next.take());
                if let Some(queued) = place.take() {
                    leave_now(&row, queued.cleanup, &member).await;
                }
                if let Some(bell) = bell.take() {
                    bell.ring().await;
                }
                return Ok(None);
            }
            match &mut place {
                None => {
                    // Our bell first, so whoever finds our place finds it held.
                    if let (Some(bells), None) = (&self.bells, &bell) {
                        bell = bells.take(&member).await;
                    }
                    // Armed first: a cancel after the join answered but before this future
                    // ran again would otherwise leave the place behind.
                    let cleanup = leave_on_drop(&row, &member);
                    let sent = Instant::now();
                    self.join(&row, &member).await?;
                    place = Some(Place::joined(cleanup, sent));
                    self.note_queued(name);
                    // The look below follows at once, so a release in between is not missed.
                    tracing::debug!("held by another client, or waiters are ahead: queued");
                }
                Some(p) if p.refresh_now || p.sent.elapsed() >= HEARTBEAT => {
                    let sent = Instant::now();
                    // Until this refresh is known to be in, a grant may carry the lease the
                    // last one gave the place.
                    p.grant_base = p.sent;
                    self.join(&row, &member).await?;
                    (p.sent, p.refresh_now) = (sent, false);
                }
                Some(_) => {}
            }
            let look = match std::mem::take(&mut skip_look) {
                // Until a notification, or the safety look a second on.
                true => Look {
                    left: Some(ms(NOTIFY_SAFETY_POLL)),
                    ahead: 1,
                    holder: None,
                    before: None,
                },
                false => self.state(name, &member).await?,
            };
            if pg && look.holder.as_deref() == Some(member.as_str()) {
                // A release granted us the lock and its message went astray: the take claims
                // the row (`statements/postgres.rs`).
                try_now = true;
                continue;
            }
            let (left, ahead) = (look.left, look.ahead);
            if ahead == 0 && look.free() {
                // Our turn by the queue; a take that still fails (a row just taken by a
                // client that ignores the queue, a place lapsing in between) pauses a little.
                misses = if try_now { misses + 1 } else { 0 };
                try_now = true;
                if misses < 3 {
                    continue;
                }
                misses = 0;
            }
            let until_expiry = left
                .map(|left| {
                    Duration::from_millis(left.max(0) as u64)
                        + random_up_to(Duration::from_millis(5))
                })
                .unwrap_or(MAX_POLL);
            let nap = if pg {
                until_expiry.min(NOTIFY_SAFETY_POLL)
            } else {
                // The head looks often; the others as often as their place warrants.
                let places = u32::try_from(ahead).unwrap_or(u32::MAX).max(1);
                let base = until_expiry.min(HEAD_POLL.saturating_mul(places).min(MAX_POLL));
                base / 2 + random_up_to(base / 2)
            };
            if let (None, Some((w, _))) = (&next, &wakeups) {
                next = Some(stand(w));
            }
            // MySQL: wait on the bell of the place ahead (the holder's, for the head) instead,
            // unless that bell answered without news last time (it has none: poll it).
            // A bell wait lasts until the holder's lease runs out, at most a second.
            let ring = self.bells.as_ref().zip(look.bell().filter(|m| *m != rung));
            let within = deadline.clamp(match left {
                Some(_) => until_expiry.min(NOTIFY_SAFETY_POLL),
                None => NOTIFY_SAFETY_POLL,
            });
            // `Some(how)` after a bell wait, `None` after a nap.
            let sleep = async {
                match &ring {
                    Some((bells, m)) => Some(bells.wait(m, within).await),
                    None => {
                        deadline.sleep(nap).await;
                        None
                    }
                }
            };
            tokio::pin!(sleep);
            let woken = loop {
                tokio::select! {
                    _ = either(notified.as_mut().as_pin_mut()) => {}
                    _ = either(released.as_mut().as_pin_mut()) => break true,
                    by_bell = &mut sleep => match (by_bell, &ring) {
                        // Rung: look now. Should the same place still be ahead, its bell
                        // told nothing (it has none): poll it instead.
                        (Some(BellWait::Rung), Some((_, m))) => {
                            rung.clone_from(m);
                            break true;
                        }
                        // This bell cannot be waited on now: poll that place.
                        (Some(BellWait::Failed), Some((_, m))) => {
                            rung.clone_from(m);
                            break false;
                        }
                        (Some(_), _) => {
                            rung.clear();
                            break false;
                        }
                        (None, _) => break false,
                    },
                }
                // A release that named another process's waiter as the queue's head: not our
                // turn, nothing to look at. Armed again before the head is read, so a release
                // naming us in between is not missed (only a registration's notification gets
                // here).
                let Some(r) = registration.as_ref() else {
                    break true;
                };
                notified.set(Some(r.signal.notified()));
                if let Some(n) = notified.as_mut().as_pin_mut() {
                    n.enable();
                }
                if !r.signal.for_other(&member) {
                    break true;
                }
            };
            // Woken by a release, or MySQL's head looking again: straight to the take, which
            // lets only the head in (one round trip from the release to the grant). Otherwise
            // look at the queue before writing anything (SQLite: a write waits for the file).
            try_now = woken || (ahead == 0 && self.client.cfg.dialect == Dialect::MySql);
        }
    }

    fn capabilities(&self) -> Capabilities {
        match self.client.cfg.dialect {
            Dialect::Postgres => Capabilities::leased(Wakeup::Notify, true),
            _ => Capabilities::leased(Wakeup::Backoff, true),
        }
    }

    fn backend_name(&self) -> &str {
        &self.client.label
    }

    async fn inspect(&self, name: &str) -> Result<LockInfo, LockError> {
        Ok(match self.lookup(name).await? {
            Some((owner, token, left)) if left > 0 => LockInfo::held(
                Some(token as u64),
                Some(owner),
                Some(Duration::from_millis(left as u64)),
                None,
            ),
            _ => LockInfo::free(),
        })
    }
}

/// A waiter's departure from the queue of `row`'s name as `member`: it leaves its place and
/// (PostgreSQL) gives back a lock a release granted it meanwhile, which passes the lock on to
/// the next head at once instead of leaving it idle until the grant's lease runs out.
fn departure(
    row: &Arc<NamedRow>,
    member: &str,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    let (row, member) = (Arc::clone(row), member.to_owned());
    async move {
        let _ = leave(&row, &member).await;
        if row.sql.notify_channel.is_some() {
            // Finds no row of ours unless a release granted us the lock meanwhile.
            let granted = row.lease(&member);
            let _ = granted.on_a_live_connection(|| granted.delete()).await;
        }
    }
    .in_current_span()
}

/// Leaves the queue of `row`'s name (sweeping its lapsed places) when dropped or run: however
/// the acquisition ends, its place does not hold others back.
fn leave_on_drop(row: &Arc<NamedRow>, member: &str) -> CleanupOnDrop {
    let departure = departure(row, member);
    CleanupOnDrop::new(move || Box::pin(departure))
}

/// Leaves the queue of `row`'s name now and waits for it; the statements run in their own
/// task, so a cancel while waiting does not stop them (`cleanup`, the place's drop guard, is
/// disarmed: this replaces it).
async fn leave_now(row: &Arc<NamedRow>, cleanup: CleanupOnDrop, member: &str) {
    cleanup.disarm();
    let _ = tokio::spawn(departure(row, member)).await;
}

/// Deletes our row if the acquire is cancelled after the attempt won it and before the
/// guard owns it (an attempt cancelled before its answer gives its row back itself, see
/// [`RowLock::take`]).
fn cleanup(row: &Arc<NamedRow>, owner: &str) -> CleanupOnDrop {
    let lease = row.lease(owner);
    CleanupOnDrop::new(move || {
        Box::pin(async move {
            let _ = lease.release().await;
        })
    })
}

/// Completes with `f`, or never when there is none.
async fn either<F: std::future::Future>(f: Option<F>) {
    match f {
        Some(f) => {
            f.await;
        }
        None => std::future::pending().await,
    }
}

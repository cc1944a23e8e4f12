//! What every dialect supplies: the statements a client runs at connect ([`ClientStatements`]),
//! in row mode ([`RowStatements`]), in for_update mode ([`ForUpdateStatements`]) and in advisory
//! mode ([`AdvisoryStatements`]), each with
//! the invariant it keeps. The texts themselves are in `postgres.rs`, `mysql.rs`, `sqlite.rs`.

/// One schema statement and the table or sequence it creates.
#[derive(Debug, Clone)]
pub(crate) struct Ddl {
    /// The object created; the statement is skipped when it exists (MySQL DDL, even
    /// `IF NOT EXISTS`, waits behind open transactions on the table; PostgreSQL checks the CREATE
    /// privilege first). `None`: always run (SQLite, where neither applies).
    pub object: Option<String>,
    /// The statement (idempotent).
    pub sql: String,
}

impl Ddl {
    /// `sql`, skipped when `object` exists.
    pub(crate) fn table(object: impl Into<String>, sql: String) -> Self {
        Ddl {
            object: Some(object.into()),
            sql,
        }
    }
}

/// What a client runs when it connects: session settings and the schema.
#[derive(Debug, Clone)]
pub(crate) struct ClientStatements {
    /// Run, in order, on every new pooled connection.
    pub session: &'static [&'static str],
    /// Serializes concurrent schema creators for the creating transaction (PostgreSQL's
    /// transaction-scoped advisory lock); `None` where "already exists" races are enough.
    pub schema_lock: Option<&'static str>,
    /// Whether a table or sequence exists (one bound name, returns a count); `None` where every
    /// schema statement always runs.
    pub object_exists: Option<&'static str>,
    /// Schema creation, run in order at connect (only the missing objects).
    pub schema: Vec<Ddl>,
}

/// Row mode: a row per held lock. Binding orders are the same in every dialect:
/// `acquire(name, owner, ttl_ms)`, `bump(name)`, `lookup(name)`, `renew(ttl_ms, name, owner)`,
/// `release(name, owner)`.
#[derive(Debug, Clone)]
pub(crate) struct RowStatements {
    /// Take the lock if the row is absent or expired and no live waiter of the name's queue
    /// is ahead of the caller's place (binds: name, owner, ttl ms, member — see
    /// [`RowStatements::positional`]). Where `bump` is `None` it returns the fencing token (no
    /// row: not won); otherwise it reports a win as `LAST_INSERT_ID() = 1` and `bump` draws the
    /// token.
    /// Invariant: a token is drawn only after the lock row is won, from a counter that
    /// survives the row's deletion, so tokens strictly increase in acquisition order. The
    /// queue only decides who may try: mutual exclusion rests on the row alone.
    pub acquire: String,
    /// `acquire` for a caller without a place in the queue (every live place is ahead of it):
    /// binds name, owner, ttl ms (MySQL: then name again). The uncontended path.
    pub acquire_first: String,
    /// Join, or refresh a place in, the name's waiter queue `<t>_waitq` (binds: name, member,
    /// waiter ttl ms); a place is kept until it lapses or its member leaves.
    pub enqueue: String,
    /// PostgreSQL: `acquire_first` and, when it does not win, `enqueue` in one statement
    /// (binds: name, owner, ttl ms, member, waiter ttl ms); returns the token won (NULL: not
    /// won) and the places joined. `None` where a transaction does it (SQLite) or nothing does.
    pub acquire_or_join: Option<String>,
    /// Leave the name's queue, sweeping its lapsed places too (binds: name, member).
    pub leave: String,
    /// Whether `acquire` itself leaves the queue when it wins (PostgreSQL: the same statement
    /// deletes the winner's place; SQLite: a trigger does, for a queued try's owner
    /// `<member>/…`; lapsed places go with the next `leave`). Elsewhere the winner
    /// sends `leave` before its guard is handed out (MySQL: beside `bump`, on another
    /// connection). Either way no release can find the winner's place still ahead of the next
    /// waiter.
    pub acquire_leaves: bool,
    /// The holder's milliseconds left (NULL: no row), how many live places are ahead of
    /// the member's (all live places when it has none), the holder's owner (NULL: no row) and,
    /// for the bells of MySQL and SQLite, the member of the live place just ahead (NULL: none;
    /// always NULL on PostgreSQL) (binds: name, member — see [`RowStatements::positional`]).
    pub state: String,
    /// MySQL: placeholders are `?`, so `acquire` binds name, owner, ttl, then name, member
    /// twice, and `state` binds name, then name, member twice, name, then name, member twice;
    /// elsewhere they are numbered.
    pub positional: bool,
    /// MySQL: draw the next token for a name we just won (`LAST_INSERT_ID`).
    pub bump: Option<String>,
    /// The holder's owner, token and milliseconds left on its lease, if a row exists.
    pub lookup: String,
    /// Extend the lease only if we still own it and it has not expired.
    pub renew: String,
    /// Delete only our own row. PostgreSQL also `pg_notify`s waiters in the same statement
    /// and returns the number of rows deleted.
    pub release: String,
    /// PostgreSQL: the channel `release` notifies (the lock name is the payload).
    pub notify_channel: Option<String>,
}

/// How a for_update lock transaction begins with its bounds (see [`ForUpdateStatements::begin`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BoundedBegin {
    /// One text query that sets the bounds and then begins, in one round trip (sqlx's
    /// `Pool::begin_with`). The settings come first, so a failing one leaves no transaction
    /// open.
    OneTrip(String),
    /// A plain `BEGIN`, then this statement inside the transaction.
    ThenInside(String),
}

impl BoundedBegin {
    /// The statement that carries the bounds.
    #[cfg(test)]
    pub(crate) fn sql(&self) -> &str {
        match self {
            BoundedBegin::OneTrip(sql) | BoundedBegin::ThenInside(sql) => sql,
        }
    }
}

/// for_update mode: a row per name, locked by a transaction held open for the guard's life.
/// Every statement binds only the lock name.
#[derive(Debug, Clone)]
pub(crate) struct ForUpdateStatements {
    /// How a lock transaction begins bounded by the database itself — how long it keeps the
    /// transaction when its holder goes silent (`idle`) and how long a statement waits for a
    /// row lock (`lock_wait`), in the dialect's units (PostgreSQL milliseconds, 0 = forever;
    /// MySQL seconds, at least 1).
    pub begin: fn(idle: u64, lock_wait: u64) -> BoundedBegin,
    /// Create the row for a name on first use, in the lock transaction (then committed), so
    /// its lock wait is the transaction's bounded one.
    pub ensure_row: String,
    /// Lock the row, waiting in the database's lock queue (bounded by `begin`); returns the
    /// name (no row: the name has no row yet).
    pub lock_row: String,
    /// The same without waiting (`NOWAIT`).
    pub try_lock_row: String,
    /// Whether the name's row is locked by someone (for `inspect`); fails when it is.
    pub peek_row: String,
    /// The next token, drawn once the row lock is held, outside the lock transaction.
    pub draw_token: TokenDraw,
    /// The guard's liveness check on its open transaction (also resets the idle bound).
    pub ping: &'static str,
}

/// Drawing the next fencing token of a name (bound as the only parameter) once its lock is
/// held: PostgreSQL returns the sequence's `nextval`; MySQL/MariaDB bumps the
/// `AUTO_INCREMENT` table with `REPLACE` (one row per name, holding its latest token) and the
/// token is the statement's last insert id. Run autocommitted (see `crate::token`).
/// Invariant: drawn only while the lock is held, from a counter that never goes back — not on
/// rollback (a sequence, an `AUTO_INCREMENT` value) and not across a restart once committed
/// (MySQL ≥ 8.0, MariaDB ≥ 10.2.4 persist the `AUTO_INCREMENT` counter; the committed row
/// holds it too).
#[derive(Debug, Clone)]
pub(crate) struct TokenDraw {
    /// The statement.
    pub sql: String,
    /// Whether it returns the token as a row (PostgreSQL) or as the last insert id (MySQL).
    pub in_row: bool,
}

/// Advisory mode: the database's own named locks, held by a session (a dedicated pooled
/// connection) for the guard's life. Every lock statement binds the lock name first; the
/// database-side key is a SHA-256 digest of `<table>:<name>` (PostgreSQL: its first 8 bytes as a
/// `bigint`; MySQL/MariaDB: all 64 hex digits as the `GET_LOCK` name), so any name of any length
/// and case maps to a key of the database's fixed size, and clients of different tables never
/// share one.
#[derive(Debug, Clone)]
pub(crate) struct AdvisoryStatements {
    /// PostgreSQL: registers a name's key (`name`, probe `i64`); one BIGINT, > 0 once the name
    /// has a key. Run (and cached) before a name's first lock: the lock statements read the
    /// key from the registry. `None` on MySQL, whose keys are whole digests.
    pub register: Option<String>,
    /// PostgreSQL: sets, on the session, how long `lock` waits (ms, 0 = forever); run before
    /// every `lock`. `None` on MySQL, where the wait is `lock`'s second parameter (seconds,
    /// fractional).
    pub lock_wait: Option<fn(lock_wait_ms: u64) -> String>,
    /// Take the lock, waiting in the database's queue. One BIGINT: 1 granted, 0 the wait ran out
    /// (MySQL; PostgreSQL fails with `55P03` instead), anything else an error.
    pub lock: String,
    /// Take the lock without waiting. One BIGINT: 1 granted, 0 held by another session.
    pub try_lock: String,
    /// See [`LockTexts::try_draw`].
    pub try_draw: Option<String>,
    /// Release the lock this session holds. One BIGINT: 1 released, anything else: this
    /// session did not hold it.
    pub unlock: String,
    /// See [`LockTexts::unlock_reset`].
    pub unlock_reset: Option<String>,
    /// Whether anyone holds the lock (for `inspect`): one BIGINT, > 0 when held.
    pub held: String,
    /// How many sessions hold or wait for the lock (the semaphore's `inspect` of its gate): one
    /// BIGINT. PostgreSQL counts both from `pg_locks`; MySQL/MariaDB only the holder (0 or 1):
    /// the callers queued in `GET_LOCK` are not visible to another session.
    pub queued: String,
    /// The next fencing token, drawn once the lock is granted, from the same counter as
    /// for_update mode.
    pub draw_token: TokenDraw,
    /// Sets how long the database keeps the session once it goes silent (PostgreSQL ms,
    /// MySQL s); run on the held connection once the lock is granted.
    pub idle: fn(idle: u64) -> String,
    /// Puts back the session settings `lock_wait` and `idle` changed, before the connection
    /// returns to the pool.
    pub reset: &'static str,
    /// The guard's liveness check on its session.
    pub ping: &'static str,
    /// PostgreSQL: the read-write lock's statements. `None` on MySQL: `GET_LOCK` has no
    /// shared mode.
    pub rw: Option<RwTexts>,
}

/// The statements that take and give back one kind of advisory lock on a name (bound first),
/// answering as [`AdvisoryStatements::lock`], `try_lock` and `unlock` do.
#[derive(Debug, Clone)]
pub(crate) struct LockTexts {
    pub lock: String,
    pub try_lock: String,
    pub unlock: String,
    /// PostgreSQL: the uncontended acquisition in one statement — take the lock without
    /// waiting, draw the next fencing token only once it is held (a `CASE`, which evaluates its
    /// `THEN` only when its condition held: the token is never drawn before the grant), and
    /// bound how long the server keeps the session once silent (`$2`, ms, as
    /// `AdvisoryStatements::idle`). One BIGINT: the token, 0 when not granted. `None` on
    /// MySQL/MariaDB.
    pub try_draw: Option<String>,
    /// PostgreSQL: `unlock` and `AdvisoryStatements::reset` in one statement (its first column
    /// answers as `unlock`; the settings go back whatever it answers): a release's last unlock,
    /// after which the connection returns to the pool with no further round trip. `None` on
    /// MySQL/MariaDB.
    pub unlock_reset: Option<String>,
}

/// PostgreSQL advisory read-write lock: shared (`read`) and exclusive (`write`) locks on the
/// name's registered key in the two-`int` key space (`objsubid` 2 in `pg_locks`), apart from the
/// mutex's `bigint` one, so a read-write lock and a mutex of one name never meet. PostgreSQL's
/// lock manager queues a request behind any waiting request it conflicts with: a reader that
/// comes after a waiting writer waits behind it.
#[derive(Debug, Clone)]
pub(crate) struct RwTexts {
    pub read: LockTexts,
    pub write: LockTexts,
    /// One row: readers holding, writers holding, requests waiting (three BIGINTs).
    pub state: String,
}

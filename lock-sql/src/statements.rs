//! Every SQL statement the backend runs, per dialect and mode, in one place.
//!
//! The table name is the only text put into SQL (validated by
//! [`crate::config::validate_table`]); lock names, owner tokens and durations are always bound
//! as parameters. Expiry is computed by the database clock in epoch milliseconds, never by the
//! client's. Binding orders are the same in every dialect: `acquire(name, owner, ttl_ms)`,
//! `renew(ttl_ms, name, owner)`, `release(name, owner)`, `lookup(name)`.

use crate::config::{Dialect, Mode};

/// The statements of one client, with its table name filled in.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// Idempotent schema creation, run in order at connect.
    pub schema: Vec<String>,
    /// Row mode: take the lock if absent or expired; PostgreSQL and SQLite return the fencing
    /// token; MySQL reports rows affected and draws the token with `bump`.
    /// Invariant: a token is drawn only after the lock row is won, from a per-name counter that
    /// survives the row's deletion, so tokens strictly increase in acquisition order.
    pub acquire: String,
    /// Row mode: milliseconds left on the holder's lease (`lookup(name)`), with owner and token.
    pub lookup: String,
    /// Row mode: extend the lease only if we still own it and it has not expired.
    pub renew: String,
    /// Row mode: delete only our own row. PostgreSQL also `pg_notify`s waiters in the same
    /// statement and returns the number of rows deleted.
    pub release: String,
    /// for_update: create the row for a name on first use (never blocks on a held lock).
    pub ensure_row: String,
    /// for_update: lock the row and draw the next fencing token in one statement (waits in the
    /// database's lock queue). `{timeout}` is replaced by the lock-wait setting (MariaDB).
    pub lock_row: String,
    /// for_update: the same without waiting (`NOWAIT`).
    pub try_lock_row: String,
    /// for_update: whether the name's row is locked by someone (for `inspect`).
    pub peek_row: String,
    /// for_update (MariaDB try_acquire): the next token, drawn after the row lock is held.
    pub next_token: String,
    /// Row mode, MySQL: draw the next token for a name we just won (`LAST_INSERT_ID`).
    pub bump: String,
    /// Tables and sequences the schema consists of (to skip DDL when they exist).
    pub objects: Vec<String>,
}

/// Epoch milliseconds by the database clock.
fn now_ms(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
        Dialect::MySql => "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
        Dialect::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    }
}

/// The PostgreSQL channel release notifications go to.
pub(crate) fn notify_channel(table: &str) -> String {
    format!("distlock_{table}")
}

pub(crate) fn statements(d: Dialect, mode: Mode, t: &str) -> Statements {
    let now = now_ms(d);
    let schema = match (d, mode) {
        // `<t>_fences` keeps each name's last token after its lock row is deleted.
        (Dialect::Postgres, Mode::Row) => vec![
            format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY, owner TEXT NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)"),
            format!("CREATE TABLE IF NOT EXISTS {t}_fences (name TEXT PRIMARY KEY, fence BIGINT NOT NULL)"),
        ],
        (Dialect::MySql, Mode::Row) => vec![
            // VARBINARY: byte-exact names (the default collations fold case and pad spaces).
            format!("CREATE TABLE IF NOT EXISTS {t} (name VARBINARY(1024) NOT NULL PRIMARY KEY, owner VARCHAR(64) NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB"),
            format!("CREATE TABLE IF NOT EXISTS {t}_fences (name VARBINARY(1024) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=InnoDB"),
        ],
        (Dialect::Sqlite, _) => vec![
            format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL)"),
            format!("CREATE TABLE IF NOT EXISTS {t}_fence (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL)"),
            format!("INSERT OR IGNORE INTO {t}_fence (id, value) VALUES (1, 0)"),
            // The counter follows every token handed out, so tokens survive row deletion.
            format!("CREATE TRIGGER IF NOT EXISTS {t}_fence_ins AFTER INSERT ON {t} BEGIN UPDATE {t}_fence SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END"),
            format!("CREATE TRIGGER IF NOT EXISTS {t}_fence_upd AFTER UPDATE OF fence ON {t} BEGIN UPDATE {t}_fence SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END"),
        ],
        (Dialect::Postgres, Mode::ForUpdate) => vec![
            format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY)"),
            format!("CREATE SEQUENCE IF NOT EXISTS {t}_fence"),
        ],
        (Dialect::MySql, Mode::ForUpdate) => vec![
            format!("CREATE TABLE IF NOT EXISTS {t} (name VARBINARY(1024) NOT NULL PRIMARY KEY) ENGINE=InnoDB"),
            format!("CREATE SEQUENCE IF NOT EXISTS {t}_fence ENGINE=InnoDB"),
        ],
    };
    // Tokens are drawn only by the statement that won the lock row, so they are serialized by
    // the lock itself: a token drawn before the row was won could otherwise be issued after a
    // later holder's (a database process descheduled between drawing and inserting).
    let acquire = match d {
        // The row upsert and the per-name counter bump are one statement (data-modifying CTEs);
        // the counter row stays locked until commit.
        Dialect::Postgres => format!(
            "WITH won AS (INSERT INTO {t} (name, owner, fence, expires_at) VALUES ($1, $2, 0, {now} + $3) \
             ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at \
             WHERE {t}.expires_at <= {now} RETURNING name), \
             bump AS (INSERT INTO {t}_fences (name, fence) SELECT name, 1 FROM won \
             ON CONFLICT (name) DO UPDATE SET fence = {t}_fences.fence + 1 RETURNING fence) \
             SELECT fence FROM bump"
        ),
        // LAST_INSERT_ID (in the OK packet) is 1 when we won (inserted, or took over an expired
        // row) and 0 when the row is held; the token is then drawn by `bump` while we hold it.
        // Assignments run left to right: `owner` reads the old `expires_at`.
        Dialect::MySql => format!(
            "INSERT INTO {t} (name, owner, fence, expires_at) VALUES (?, ?, LAST_INSERT_ID(1), {now} + ?) \
             ON DUPLICATE KEY UPDATE \
             owner = IF(expires_at <= {now}, VALUES(owner), owner), \
             expires_at = IF(expires_at <= {now}, VALUES(expires_at), expires_at + 0 * LAST_INSERT_ID(0))"
        ),
        // SQLite serializes writers, so the counter read in VALUES cannot race.
        Dialect::Sqlite => format!(
            "INSERT INTO {t} (name, owner, fence, expires_at) VALUES (?1, ?2, (SELECT value + 1 FROM {t}_fence WHERE id = 1), {now} + ?3) \
             ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, fence = MAX(excluded.fence, {t}.fence + 1), expires_at = excluded.expires_at \
             WHERE {t}.expires_at <= {now} RETURNING fence"
        ),
    };
    let bump = format!(
        "INSERT INTO {t}_fences (name, fence) VALUES (?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
    );
    let p = |i: usize| match d {
        Dialect::Postgres => format!("${i}"),
        Dialect::MySql => "?".to_owned(),
        Dialect::Sqlite => format!("?{i}"),
    };
    let lookup = match d {
        Dialect::Sqlite => format!("SELECT owner, fence, expires_at - {now} AS left_ms FROM {t} WHERE name = ?1"),
        _ => format!(
            "SELECT l.owner, COALESCE(f.fence, 0), l.expires_at - {now} AS left_ms FROM {t} l LEFT JOIN {t}_fences f ON f.name = l.name WHERE l.name = {}",
            p(1)
        ),
    };
    let renew = format!(
        "UPDATE {t} SET expires_at = {now} + {} WHERE name = {} AND owner = {} AND expires_at > {now}",
        p(1),
        p(2),
        p(3)
    );
    let release = match d {
        Dialect::Postgres => format!(
            "WITH d AS (DELETE FROM {t} WHERE name = $1 AND owner = $2 RETURNING name) \
             SELECT (SELECT count(*) FROM d) AS deleted, \
             (SELECT count(*) FROM (SELECT pg_notify('{}', name) FROM d) n) AS notified",
            notify_channel(t)
        ),
        _ => format!("DELETE FROM {t} WHERE name = {} AND owner = {}", p(1), p(2)),
    };
    // for_update tokens come from a sequence, drawn only AFTER the row lock is granted (the
    // outer SELECT evaluates `nextval` on rows the locking subquery has already returned).
    // Sequences are never rolled back, so a holder whose transaction died (and whose
    // uncommitted writes vanished) can never share a token with the next holder.
    let (ensure_row, lock_row, try_lock_row, peek_row) = match d {
        Dialect::Postgres => (
            format!("INSERT INTO {t} (name) VALUES ($1) ON CONFLICT (name) DO NOTHING"),
            format!("SELECT nextval('{t}_fence') FROM (SELECT name FROM {t} WHERE name = $1 FOR UPDATE) AS locked"),
            format!("SELECT nextval('{t}_fence') FROM (SELECT name FROM {t} WHERE name = $1 FOR UPDATE NOWAIT) AS locked"),
            format!("SELECT name FROM {t} WHERE name = $1 FOR UPDATE NOWAIT"),
        ),
        // InnoDB evaluates the select list after the locking read returns the row. MariaDB's
        // SET STATEMENT bounds this statement's lock wait (whole seconds; 0 = no wait).
        _ => (
            format!("INSERT IGNORE INTO {t} (name) VALUES (?)"),
            format!("SET STATEMENT innodb_lock_wait_timeout = {{timeout}} FOR SELECT NEXTVAL({t}_fence) FROM {t} WHERE name = ? FOR UPDATE"),
            // NOWAIT would also refuse to wait for the sequence's own brief internal lock, so
            // try_acquire locks the row with NOWAIT first and draws the token afterwards.
            format!("SELECT name FROM {t} WHERE name = ? FOR UPDATE NOWAIT"),
            format!("SELECT name FROM {t} WHERE name = ? FOR UPDATE NOWAIT"),
        ),
    };
    Statements {
        schema,
        acquire,
        lookup,
        renew,
        release,
        ensure_row,
        lock_row,
        try_lock_row,
        peek_row,
        next_token: format!("SELECT NEXTVAL({t}_fence)"),
        bump,
        objects: match mode {
            Mode::Row => vec![t.to_owned(), format!("{t}_fences")],
            Mode::ForUpdate => vec![t.to_owned(), format!("{t}_fence")],
        },
    }
}

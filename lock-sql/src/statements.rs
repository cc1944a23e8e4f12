//! Every SQL statement the backend runs, per dialect and mode, in one place.
//!
//! The table name is the only text put into SQL (validated by
//! [`crate::config::validate_table`]), besides integers the backend computed itself (session
//! bounds, an `AUTO_INCREMENT` start); lock names, owner tokens and durations are always bound
//! as parameters. Expiry is computed by the database clock in epoch milliseconds, never by the
//! client's. Binding orders are the same in every dialect: `acquire(name, owner, ttl_ms)`,
//! `renew(ttl_ms, name, owner)`, `release(name, owner)`, `lookup(name)`.
//!
//! MySQL/MariaDB statements use only SQL that MySQL 8 and MariaDB ≥ 10.3 both accept (no
//! sequences, no `SET STATEMENT`, no `RETURNING`); only the upgrade path from the sequence an
//! earlier version created on MariaDB reads one, and only where it exists.

use crate::config::{Dialect, Mode};

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

/// The statements of one client, with its table name filled in.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// Schema creation, run in order at connect.
    pub schema: Vec<Ddl>,
    /// Row mode: take the lock if absent or expired; PostgreSQL and SQLite return the fencing
    /// token; MySQL reports rows affected and draws the token with `bump`.
    /// Invariant: a token is drawn only after the lock row is won, from a counter that
    /// survives the row's deletion, so tokens strictly increase in acquisition order.
    pub acquire: String,
    /// Row mode: milliseconds left on the holder's lease (`lookup(name)`), with owner and token.
    pub lookup: String,
    /// Row mode: extend the lease only if we still own it and it has not expired.
    pub renew: String,
    /// Row mode: delete only our own row. PostgreSQL also `pg_notify`s waiters in the same
    /// statement and returns the number of rows deleted.
    pub release: String,
    /// Row mode, MySQL: draw the next token for a name we just won (`LAST_INSERT_ID`).
    pub bump: String,
    /// for_update: create the row for a name on first use, in the lock transaction (then
    /// committed), so its lock wait is the transaction's bounded one.
    pub ensure_row: String,
    /// for_update: lock the row, waiting in the database's lock queue (bounded by the
    /// transaction's lock-wait setting). PostgreSQL draws the fencing token in the same
    /// statement; MySQL returns the name and draws it with `draw_token`.
    pub lock_row: String,
    /// for_update: the same without waiting (`NOWAIT`).
    pub try_lock_row: String,
    /// for_update: whether the name's row is locked by someone (for `inspect`).
    pub peek_row: String,
    /// for_update, MySQL: the next token, drawn in the lock transaction after the row lock is
    /// held. Invariant: an `AUTO_INCREMENT` value is never handed out twice, even when the
    /// transaction that drew it rolls back (a holder whose connection died), and the counter
    /// persists across restarts (MySQL ≥ 8.0, MariaDB ≥ 10.2.4); `REPLACE` keeps one row per
    /// name, holding that name's latest token.
    pub draw_token: String,
    /// for_update, MySQL: the sequence an earlier version drew tokens from (MariaDB), and the
    /// statement drawing a value above every token it issued, to start `draw_token` from.
    pub old_sequence: Option<(String, String)>,
}

/// Run on every new MySQL/MariaDB connection: no gap locks, so a lock on one missing name never
/// blocks another name.
pub(crate) const MYSQL_SESSION: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// Run on every new SQLite connection. WAL lets readers and one writer share the file across
/// processes; the busy timeout makes writers queue instead of failing; `synchronous = FULL`
/// syncs the WAL at every commit, so a power loss cannot roll back a handed-out fencing token
/// (`NORMAL` in WAL mode may lose the last commits, and with them the counter's advance).
pub(crate) const SQLITE_SESSION: &[&str] = &[
    "PRAGMA journal_mode = WAL",
    "PRAGMA busy_timeout = 10000",
    "PRAGMA synchronous = FULL",
];

/// PostgreSQL: serializes concurrent schema creators (transaction-scoped advisory lock).
pub(crate) const PG_SCHEMA_LOCK: &str = "SELECT pg_advisory_xact_lock(7261982733)";

/// Whether a table or sequence exists (PostgreSQL: on the search path; MySQL: in the current
/// database); one bound name, returns a count.
pub(crate) fn object_exists(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "SELECT CAST((to_regclass($1) IS NOT NULL)::int AS BIGINT)",
        _ => "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
    }
}

/// MySQL/MariaDB: whether a sequence exists in the current database (MySQL has none).
pub(crate) const MYSQL_SEQUENCE_EXISTS: &str = "SELECT COUNT(*) FROM information_schema.tables \
     WHERE table_schema = DATABASE() AND table_name = ? AND table_type = 'SEQUENCE'";

/// for_update: bounds, for the lock transaction about to run, how long the database keeps it
/// when its holder goes silent (`idle`: PostgreSQL milliseconds, MySQL seconds) and how long a
/// statement waits for a row lock (`lock_wait`: PostgreSQL milliseconds, 0 = forever; MySQL
/// seconds, at least 1). PostgreSQL's are transaction-local; MySQL's are session settings that
/// stay on the pooled connection, so every for_update transaction sets both first.
pub(crate) fn for_update_bounds(d: Dialect, idle: u64, lock_wait: u64) -> String {
    match d {
        Dialect::Postgres => format!(
            "SET LOCAL idle_in_transaction_session_timeout = {idle}; SET LOCAL lock_timeout = {lock_wait}"
        ),
        _ => format!("SET SESSION wait_timeout = {idle}, innodb_lock_wait_timeout = {lock_wait}"),
    }
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
    let table = |object: String, sql: String| Ddl {
        object: Some(object),
        sql,
    };
    let schema = match (d, mode) {
        // `<t>_fences` keeps each name's last token after its lock row is deleted.
        (Dialect::Postgres, Mode::Row) => vec![
            table(t.to_owned(), format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY, owner TEXT NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL)")),
            table(format!("{t}_fences"), format!("CREATE TABLE IF NOT EXISTS {t}_fences (name TEXT PRIMARY KEY, fence BIGINT NOT NULL)")),
        ],
        (Dialect::MySql, Mode::Row) => vec![
            // VARBINARY: byte-exact names (the default collations fold case and pad spaces).
            table(t.to_owned(), format!("CREATE TABLE IF NOT EXISTS {t} (name VARBINARY(1024) NOT NULL PRIMARY KEY, owner VARCHAR(64) NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB")),
            table(format!("{t}_fences"), format!("CREATE TABLE IF NOT EXISTS {t}_fences (name VARBINARY(1024) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=InnoDB")),
        ],
        (Dialect::Sqlite, _) => [
            format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL)"),
            format!("CREATE TABLE IF NOT EXISTS {t}_fence (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL)"),
            format!("INSERT OR IGNORE INTO {t}_fence (id, value) VALUES (1, 0)"),
            // The counter follows every token handed out, so tokens survive row deletion.
            format!("CREATE TRIGGER IF NOT EXISTS {t}_fence_ins AFTER INSERT ON {t} BEGIN UPDATE {t}_fence SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END"),
            format!("CREATE TRIGGER IF NOT EXISTS {t}_fence_upd AFTER UPDATE OF fence ON {t} BEGIN UPDATE {t}_fence SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END"),
        ]
        .into_iter()
        .map(|sql| Ddl { object: None, sql })
        .collect(),
        (Dialect::Postgres, Mode::ForUpdate) => vec![
            table(t.to_owned(), format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY)")),
            table(format!("{t}_fence"), format!("CREATE SEQUENCE IF NOT EXISTS {t}_fence")),
        ],
        (Dialect::MySql, Mode::ForUpdate) => vec![
            table(t.to_owned(), format!("CREATE TABLE IF NOT EXISTS {t} (name VARBINARY(1024) NOT NULL PRIMARY KEY) ENGINE=InnoDB")),
            // `{floor}`: the first token (above an earlier version's sequence, if any).
            table(format!("{t}_fences"), format!("CREATE TABLE IF NOT EXISTS {t}_fences (name VARBINARY(1024) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL AUTO_INCREMENT, KEY (fence)) ENGINE=InnoDB AUTO_INCREMENT={{floor}}")),
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
    // PostgreSQL for_update tokens come from a sequence, drawn only AFTER the row lock is
    // granted (the outer SELECT evaluates `nextval` on rows the locking subquery has already
    // returned). Sequences are never rolled back, so a holder whose transaction died (and whose
    // uncommitted writes vanished) can never share a token with the next holder. MySQL draws
    // from an AUTO_INCREMENT counter (`draw_token`) after the locking read, for the same reason.
    let (ensure_row, lock_row, try_lock_row, peek_row) = match d {
        Dialect::Postgres => (
            format!("INSERT INTO {t} (name) VALUES ($1) ON CONFLICT (name) DO NOTHING"),
            format!("SELECT nextval('{t}_fence') FROM (SELECT name FROM {t} WHERE name = $1 FOR UPDATE) AS locked"),
            format!("SELECT nextval('{t}_fence') FROM (SELECT name FROM {t} WHERE name = $1 FOR UPDATE NOWAIT) AS locked"),
            format!("SELECT name FROM {t} WHERE name = $1 FOR UPDATE NOWAIT"),
        ),
        // The lock wait is the session's `innodb_lock_wait_timeout` (see `for_update_bounds`).
        _ => (
            format!("INSERT IGNORE INTO {t} (name) VALUES (?)"),
            format!("SELECT name FROM {t} WHERE name = ? FOR UPDATE"),
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
        bump,
        ensure_row,
        lock_row,
        try_lock_row,
        peek_row,
        draw_token: format!("REPLACE INTO {t}_fences (name) VALUES (?)"),
        old_sequence: (d == Dialect::MySql && mode == Mode::ForUpdate)
            .then(|| (format!("{t}_fence"), format!("SELECT NEXTVAL({t}_fence)"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every MySQL/MariaDB statement sticks to SQL MySQL 8 accepts too (the upgrade path's read
    /// of an earlier version's MariaDB sequence is separate and guarded by its existence).
    #[test]
    fn mysql_statements_are_portable_to_mysql_8() {
        for mode in [Mode::Row, Mode::ForUpdate] {
            let s = statements(Dialect::MySql, mode, "t");
            let mut all: Vec<String> = s.schema.iter().map(|d| d.sql.clone()).collect();
            all.extend([
                s.acquire,
                s.lookup,
                s.renew,
                s.release,
                s.bump,
                s.ensure_row,
                s.lock_row,
                s.try_lock_row,
                s.peek_row,
                s.draw_token,
                for_update_bounds(Dialect::MySql, 3, 1),
                MYSQL_SESSION.to_owned(),
                object_exists(Dialect::MySql).to_owned(),
            ]);
            for sql in &all {
                for mariadb_only in ["SEQUENCE", "NEXTVAL", "SET STATEMENT", "RETURNING"] {
                    assert!(
                        !sql.to_uppercase().contains(mariadb_only),
                        "{mode:?}: MariaDB-only {mariadb_only} in {sql}"
                    );
                }
            }
        }
    }
}

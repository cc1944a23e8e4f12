//! MySQL/MariaDB's statements: row mode with a per-name token table bumped by a second
//! statement; for_update mode with an `AUTO_INCREMENT` token table; advisory mode with
//! `GET_LOCK` on a SHA-256 hex digest of the name and the same token table.
//!
//! Only SQL that MySQL 8 and MariaDB ≥ 10.3 both accept (no sequences, no `SET STATEMENT`, no
//! `RETURNING`; a test below checks the texts).

use super::sets::{
    AdvisoryStatements, BoundedBegin, ClientStatements, Ddl, ForUpdateStatements, RowStatements,
    TokenDraw,
};
use crate::config::Mode;

/// Epoch milliseconds by the database clock.
pub(super) const NOW_MS: &str = "CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)";

/// Run on every new connection: no gap locks, so a lock on one missing name never blocks
/// another name.
const SESSION: &[&str] = &["SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED"];

/// Whether a table or sequence exists in the current database; returns a count.
const OBJECT_EXISTS: &str = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?";

pub(crate) fn client(mode: Mode, t: &str) -> ClientStatements {
    // VARBINARY: byte-exact names (the default collations fold case and pad spaces).
    let schema = match mode {
        // `<t>_fences` keeps each name's last token after its lock row is deleted.
        Mode::Row => vec![
            Ddl::table(t, format!("CREATE TABLE IF NOT EXISTS {t} (name VARBINARY(1024) NOT NULL PRIMARY KEY, owner VARCHAR(64) NOT NULL, fence BIGINT NOT NULL, expires_at BIGINT NOT NULL) ENGINE=InnoDB")),
            Ddl::table(format!("{t}_fences"), format!("CREATE TABLE IF NOT EXISTS {t}_fences (name VARBINARY(1024) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL) ENGINE=InnoDB")),
            Ddl::table(format!("{t}_waitq"), format!("CREATE TABLE IF NOT EXISTS {t}_waitq (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARBINARY(1024) NOT NULL, member VARBINARY(64) NOT NULL, expires_at BIGINT NOT NULL, UNIQUE KEY name_member (name, member), KEY name_seq (name, seq)) ENGINE=InnoDB")),
        ],
        Mode::ForUpdate => vec![
            Ddl::table(t, format!("CREATE TABLE IF NOT EXISTS {t} (name VARBINARY(1024) NOT NULL PRIMARY KEY) ENGINE=InnoDB")),
            token_table(t),
        ],
        // The advisory locks need no table: only the token table.
        Mode::Advisory => vec![token_table(t)],
    };
    ClientStatements {
        session: SESSION,
        schema_lock: None,
        object_exists: Some(OBJECT_EXISTS),
        schema,
    }
}

/// for_update's and advisory's `AUTO_INCREMENT` token table `<t>_fences`.
fn token_table(t: &str) -> Ddl {
    Ddl::table(format!("{t}_fences"), format!("CREATE TABLE IF NOT EXISTS {t}_fences (name VARBINARY(1024) NOT NULL PRIMARY KEY, fence BIGINT NOT NULL AUTO_INCREMENT, KEY (fence)) ENGINE=InnoDB"))
}

/// Draws the next token from the token table (its `AUTO_INCREMENT` value is the statement's last
/// insert id); `REPLACE` keeps one row per name, holding that name's latest token.
fn draw_token(t: &str) -> TokenDraw {
    TokenDraw {
        sql: format!("REPLACE INTO {t}_fences (name) VALUES (?)"),
        in_row: false,
    }
}

pub(crate) fn row(t: &str) -> RowStatements {
    let now = NOW_MS;
    let acquire = |ahead: String| {
        format!(
            "INSERT INTO {t} (name, owner, fence, expires_at) SELECT ?, ?, LAST_INSERT_ID(1), {now} + ? FROM DUAL \
             WHERE NOT EXISTS ({ahead}) \
             ON DUPLICATE KEY UPDATE \
             owner = IF({t}.expires_at <= {now}, VALUES(owner), {t}.owner), \
             expires_at = IF({t}.expires_at <= {now}, VALUES(expires_at), {t}.expires_at + 0 * LAST_INSERT_ID(0))",
        )
    };
    RowStatements {
        // LAST_INSERT_ID (in the OK packet) is 1 when we won (inserted, or took over an expired
        // row) and 0 when the row is held; the token is then drawn by `bump` while we hold it,
        // so tokens are serialized by the lock itself. Assignments run left to right: `owner`
        // reads the old `expires_at`.
        // No row selected (a waiter is ahead): nothing inserted, LAST_INSERT_ID not called, so
        // the OK packet's id is 0 — and no row is affected (both are checked). The queue is
        // read without locks (the session's READ COMMITTED).
        acquire: acquire(super::queue::ahead(t, now, "?", "?")),
        acquire_first: acquire(super::queue::anyone(t, now, "?")),
        enqueue: super::queue::enqueue_upsert(t, now, ["?", "?", "?"], "ON DUPLICATE KEY UPDATE expires_at = VALUES(expires_at)"),
        leave: super::queue::leave(t, now, "?", "?"),
        acquire_or_join: None,
        acquire_leaves: false,
        state: super::queue::state(t, now, "?", "?", super::queue::Seen::HolderAndBefore),
        positional: true,
        bump: Some(format!(
            "INSERT INTO {t}_fences (name, fence) VALUES (?, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE fence = LAST_INSERT_ID(fence + 1)"
        )),
        lookup: format!(
            "SELECT l.owner, COALESCE(f.fence, 0), l.expires_at - {now} AS left_ms FROM {t} l LEFT JOIN {t}_fences f ON f.name = l.name WHERE l.name = ?"
        ),
        renew: format!(
            "UPDATE {t} SET expires_at = {now} + ? WHERE name = ? AND owner = ? AND expires_at > {now}"
        ),
        release: format!("DELETE FROM {t} WHERE name = ? AND owner = ?"),
        notify_channel: None,
    }
}

/// Session settings (they stay on the pooled connection, so every lock transaction sets both):
/// how long the server keeps a silent connection and how long a statement waits for a row
/// lock, both in whole seconds; then `BEGIN`, last, so that a failing setting leaves no
/// transaction open.
fn begin(idle: u64, lock_wait: u64) -> BoundedBegin {
    BoundedBegin::OneTrip(format!(
        "SET SESSION wait_timeout = {idle}, innodb_lock_wait_timeout = {lock_wait}; BEGIN"
    ))
}

pub(crate) fn for_update(t: &str) -> ForUpdateStatements {
    // The lock wait is the session's `innodb_lock_wait_timeout` (see `begin`). Tokens are
    // drawn by `draw_token`, autocommitted, after the locking read: an `AUTO_INCREMENT` bump
    // inside the open lock transaction reaches the redo log only when something commits, and a
    // server crash handed it out again (seed 2026112304).
    ForUpdateStatements {
        begin,
        ensure_row: format!("INSERT IGNORE INTO {t} (name) VALUES (?)"),
        lock_row: format!("SELECT name FROM {t} WHERE name = ? FOR UPDATE"),
        try_lock_row: format!("SELECT name FROM {t} WHERE name = ? FOR UPDATE NOWAIT"),
        peek_row: format!("SELECT name FROM {t} WHERE name = ? FOR UPDATE NOWAIT"),
        draw_token: draw_token(t),
        ping: "SELECT 1",
    }
}

/// The `GET_LOCK` name of the name bound first, for table `t`: the 64 lowercase hex digits of
/// SHA-256(`<t>:<name>`). Exactly the 64 characters `GET_LOCK` allows, whatever the name's
/// length, and never folded together by the server's case-insensitive lock names.
fn advisory_key(t: &str) -> String {
    format!("SHA2(CONCAT('{t}:', ?), 256)")
}

/// Session: how long the server keeps a silent holder's connection (s).
fn advisory_idle(idle: u64) -> String {
    format!("SET SESSION wait_timeout = {idle}")
}

pub(crate) fn advisory(t: &str) -> AdvisoryStatements {
    let key = advisory_key(t);
    AdvisoryStatements {
        // A SHA-256 hex digest as the key: names sharing one would need a SHA-256 collision.
        register: None,
        lock_wait: None,
        // GET_LOCK: 1 granted, 0 timed out, NULL an error (made -1).
        lock: format!("SELECT CAST(COALESCE(GET_LOCK({key}, ?), -1) AS SIGNED)"),
        try_lock: format!("SELECT CAST(COALESCE(GET_LOCK({key}, 0), -1) AS SIGNED)"),
        try_draw: None,
        unlock_reset: None,
        unlock: format!("SELECT CAST(COALESCE(RELEASE_LOCK({key}), -1) AS SIGNED)"),
        held: format!("SELECT CAST(COALESCE(IS_USED_LOCK({key}), 0) AS SIGNED)"),
        // Callers queued in GET_LOCK cannot be seen (without performance_schema): the holder
        // only.
        queued: format!("SELECT CAST(IS_USED_LOCK({key}) IS NOT NULL AS SIGNED)"),
        draw_token: draw_token(t),
        idle: advisory_idle,
        reset: "SET SESSION wait_timeout = @@GLOBAL.wait_timeout",
        ping: "SELECT 1",
        rw: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every MySQL/MariaDB statement sticks to SQL MySQL 8 accepts too.
    #[test]
    fn mysql_statements_are_portable_to_mysql_8() {
        let (r, f, a) = (row("t"), for_update("t"), advisory("t"));
        let mut all = vec![
            r.acquire,
            r.lookup,
            r.renew,
            r.release,
            f.ensure_row,
            f.lock_row,
            f.try_lock_row,
            f.peek_row,
            (f.begin)(3, 1).sql().to_owned(),
            f.ping.to_owned(),
            OBJECT_EXISTS.to_owned(),
            a.lock,
            a.try_lock,
            a.unlock,
            a.held,
            a.queued,
            a.draw_token.sql,
            f.draw_token.sql,
            (a.idle)(3),
            a.reset.to_owned(),
        ];
        all.extend(r.bump);
        all.extend(SESSION.iter().map(|s| (*s).to_owned()));
        for mode in [Mode::Row, Mode::ForUpdate, Mode::Advisory] {
            all.extend(client(mode, "t").schema.into_iter().map(|d| d.sql));
        }
        for sql in &all {
            for mariadb_only in ["SEQUENCE", "NEXTVAL", "SET STATEMENT", "RETURNING"] {
                assert!(
                    !sql.to_uppercase().contains(mariadb_only),
                    "MariaDB-only {mariadb_only} in {sql}"
                );
            }
        }
    }
}

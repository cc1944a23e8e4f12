//! SQLite's statements: row mode only (SQLite has no `SELECT … FOR UPDATE`), with one token
//! counter for the table kept by triggers.

use super::sets::{ClientStatements, Ddl, RowStatements};

/// Epoch milliseconds by the database clock.
pub(super) const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";

/// Run on every new connection. WAL lets readers and one writer share the file across
/// processes; the busy timeout makes writers queue instead of failing, in short steps
/// (`crate::sqlite_busy`, which replaces SQLite's own handler); `synchronous = FULL`
/// syncs the WAL at every commit, so a power loss cannot roll back a handed-out fencing token
/// (`NORMAL` in WAL mode may lose the last commits, and with them the counter's advance).
const SESSION: &[&str] = &[
    "PRAGMA journal_mode = WAL",
    "PRAGMA busy_timeout = 10000",
    "SELECT distlock_busy_steps(10000)",
    "PRAGMA synchronous = FULL",
];

/// Whether the new row's owner names a queued member (`<32 hex>/<24 hex>`).
const QUEUED_OWNER: &str = "length(NEW.owner) = 57 AND substr(NEW.owner, 33, 1) = '/'";

/// The winner's place out of the queue, and the name's lapsed places with it: `leave` for the
/// member the new row's owner names (in a trigger on the lock table).
fn won_leaves(t: &str) -> String {
    super::queue::leave(t, NOW_MS, "NEW.name", "substr(NEW.owner, 1, 32)")
}

pub(crate) fn client(t: &str) -> ClientStatements {
    let schema = [
        format!("CREATE TABLE IF NOT EXISTS {t} (name TEXT PRIMARY KEY NOT NULL, owner TEXT NOT NULL, fence INTEGER NOT NULL, expires_at INTEGER NOT NULL)"),
        format!("CREATE TABLE IF NOT EXISTS {t}_fence (id INTEGER PRIMARY KEY CHECK (id = 1), value INTEGER NOT NULL)"),
        format!("INSERT OR IGNORE INTO {t}_fence (id, value) VALUES (1, 0)"),
        format!("CREATE TABLE IF NOT EXISTS {t}_waitq (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, member TEXT NOT NULL, expires_at INTEGER NOT NULL, UNIQUE (name, member))"),
        format!("CREATE INDEX IF NOT EXISTS {t}_waitq_order ON {t}_waitq (name, seq)"),
        // The counter follows every token handed out, so tokens survive row deletion.
        format!("CREATE TRIGGER IF NOT EXISTS {t}_fence_ins AFTER INSERT ON {t} BEGIN UPDATE {t}_fence SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END"),
        format!("CREATE TRIGGER IF NOT EXISTS {t}_fence_upd AFTER UPDATE OF fence ON {t} BEGIN UPDATE {t}_fence SET value = NEW.fence WHERE id = 1 AND value < NEW.fence; END"),
        // A queued try's owner is `<member>/<24 hex>` (`crate::bells::owner_for`): the row it
        // wins (inserted, or an expired one taken over) takes its place out of the queue in
        // the same write, instead of a second write waiting for the file again.
        format!("CREATE TRIGGER IF NOT EXISTS {t}_won_ins AFTER INSERT ON {t} WHEN {QUEUED_OWNER} BEGIN {LEAVE}; END", LEAVE = won_leaves(t)),
        format!("CREATE TRIGGER IF NOT EXISTS {t}_won_upd AFTER UPDATE OF owner ON {t} WHEN {QUEUED_OWNER} BEGIN {LEAVE}; END", LEAVE = won_leaves(t)),
    ]
    .into_iter()
    .map(|sql| Ddl { object: None, sql })
    .collect();
    ClientStatements {
        session: SESSION,
        schema_lock: None,
        object_exists: None,
        schema,
    }
}

pub(crate) fn row(t: &str) -> RowStatements {
    let now = NOW_MS;
    let acquire = |ahead: String| {
        format!(
            "INSERT INTO {t} (name, owner, fence, expires_at) SELECT ?1, ?2, (SELECT value + 1 FROM {t}_fence WHERE id = 1), {now} + ?3 \
             WHERE NOT EXISTS ({ahead}) \
             ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, fence = MAX(excluded.fence, {t}.fence + 1), expires_at = excluded.expires_at \
             WHERE {t}.expires_at <= {now} RETURNING fence",
        )
    };
    RowStatements {
        // SQLite serializes writers, so the counter read in VALUES cannot race; a takeover
        // gets `max(counter + 1, old + 1)`.
        acquire: acquire(super::queue::ahead(t, now, "?1", "?4")),
        acquire_first: acquire(super::queue::anyone(t, now, "?1")),
        enqueue: super::queue::enqueue_upsert(t, now, ["?1", "?2", "?3"], "ON CONFLICT (name, member) DO UPDATE SET expires_at = excluded.expires_at"),
        leave: super::queue::leave(t, now, "?1", "?2"),
        // By the triggers `<t>_won_ins` / `<t>_won_upd`, for a queued try's owner.
        acquire_or_join: None,
        acquire_leaves: true,
        state: super::queue::state(t, now, "?1", "?2", super::queue::Seen::HolderAndBefore),
        positional: false,
        bump: None,
        lookup: format!(
            "SELECT owner, fence, expires_at - {now} AS left_ms FROM {t} WHERE name = ?1"
        ),
        renew: format!(
            "UPDATE {t} SET expires_at = {now} + ?1 WHERE name = ?2 AND owner = ?3 AND expires_at > {now}"
        ),
        release: format!("DELETE FROM {t} WHERE name = ?1 AND owner = ?2"),
        notify_channel: None,
    }
}

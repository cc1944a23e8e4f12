//! advisory mode's semaphore count: one row per name in `<table>_semcounts (name, max_count)`,
//! the count the name's permits are handed out for (see `advisory/semaphore.rs`).
//!
//! Invariant: read and written only by the session holding the name's gate lock, so no two
//! callers decide on the count at once; a count changes only while no slot of the old one is
//! held.

use super::sets::Ddl;
use crate::config::Dialect;

/// The count statements of one dialect. Each binds the name first.
#[derive(Debug, Clone)]
pub(crate) struct CountStatements {
    /// Creates the table (skipped when it exists).
    pub create: Ddl,
    /// The name's count (no row: never used).
    pub get: String,
    /// Sets the name's count (binds: name, count).
    pub set: String,
}

pub(crate) fn counts(d: Dialect, t: &str) -> Option<CountStatements> {
    let s = format!("{t}_semcounts");
    Some(match d {
        Dialect::Postgres => CountStatements {
            create: Ddl::table(&s, format!("CREATE TABLE IF NOT EXISTS {s} (name TEXT PRIMARY KEY, max_count INT NOT NULL)")),
            get: format!("SELECT CAST(max_count AS BIGINT) FROM {s} WHERE name = $1"),
            set: format!("INSERT INTO {s} (name, max_count) VALUES ($1, CAST($2 AS INT)) ON CONFLICT (name) DO UPDATE SET max_count = EXCLUDED.max_count"),
        },
        // VARBINARY: byte-exact names, as the other tables.
        Dialect::MySql => CountStatements {
            create: Ddl::table(&s, format!("CREATE TABLE IF NOT EXISTS {s} (name VARBINARY(1024) NOT NULL PRIMARY KEY, max_count INT NOT NULL) ENGINE=InnoDB")),
            get: format!("SELECT CAST(max_count AS SIGNED) FROM {s} WHERE name = ?"),
            set: format!("INSERT INTO {s} (name, max_count) VALUES (?, ?) ON DUPLICATE KEY UPDATE max_count = VALUES(max_count)"),
        },
        Dialect::Sqlite => return None,
    })
}

//! for_update mode's semaphore: a row per permit (`<table>_slots (name, slot, max_count)`, slots
//! `0..max_count`), taken with `FOR UPDATE SKIP LOCKED` (see `for_update/semaphore.rs`).

use crate::config::Dialect;

/// The slot statements of one dialect. Each binds the name first, but MySQL's `fill`.
#[derive(Debug, Clone)]
pub(crate) struct SlotStatements {
    /// Creates the table (only after a statement found it missing).
    pub create: String,
    /// The count the name's slots were made for (no row: none yet).
    pub max_count: String,
    /// Makes the name's slots `0..n` for count `n` (binds: name, n); existing ones stay.
    pub fill: String,
    /// Locks every free slot of the name (in a throwaway transaction: how many are free).
    pub free: String,
    /// Deletes the name's slots (once every one is free and locked by the deleter).
    pub clear: String,
    /// Locks the lowest free slot of the name, without waiting.
    pub take: String,
}

pub(crate) fn slots(d: Dialect, t: &str) -> Option<SlotStatements> {
    let s = format!("{t}_slots");
    Some(match d {
        Dialect::Postgres => SlotStatements {
            create: format!("CREATE TABLE IF NOT EXISTS {s} (name TEXT NOT NULL, slot INT NOT NULL, max_count INT NOT NULL, PRIMARY KEY (name, slot))"),
            max_count: format!("SELECT CAST(max_count AS BIGINT) FROM {s} WHERE name = $1 LIMIT 1"),
            fill: format!("INSERT INTO {s} (name, slot, max_count) SELECT $1, g, CAST($2 AS INT) FROM generate_series(0, CAST($2 AS INT) - 1) AS g ON CONFLICT DO NOTHING"),
            free: format!("SELECT slot FROM {s} WHERE name = $1 FOR UPDATE SKIP LOCKED"),
            clear: format!("DELETE FROM {s} WHERE name = $1"),
            take: format!("SELECT slot FROM {s} WHERE name = $1 ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED"),
        },
        Dialect::MySql => SlotStatements {
            create: format!("CREATE TABLE IF NOT EXISTS {s} (name VARBINARY(1024) NOT NULL, slot INT NOT NULL, max_count INT NOT NULL, PRIMARY KEY (name, slot)) ENGINE=InnoDB"),
            max_count: format!("SELECT CAST(max_count AS SIGNED) FROM {s} WHERE name = ? LIMIT 1"),
            // Binds: the count, the name, the count again.
            fill: format!("INSERT IGNORE INTO {s} (name, slot, max_count) WITH RECURSIVE seq (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM seq WHERE n + 1 < ?) SELECT ?, n, ? FROM seq"),
            free: format!("SELECT slot FROM {s} WHERE name = ? FOR UPDATE SKIP LOCKED"),
            clear: format!("DELETE FROM {s} WHERE name = ?"),
            take: format!("SELECT slot FROM {s} WHERE name = ? ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED"),
        },
        Dialect::Sqlite => return None,
    })
}

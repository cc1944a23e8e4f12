//! distlock's SQL backend: PostgreSQL, MySQL/MariaDB and SQLite, in two modes.
//!
//! * **Row mode** (`mode=row`, the default; every dialect): a lock table (default
//!   `distlock_locks`, created if missing) with one row per held lock: `name` (primary key,
//!   byte-exact), `owner` (a 128-bit random token), `fence`, `expires_at` (epoch ms by the
//!   DATABASE clock). Acquire is one statement that inserts the row or atomically takes over an
//!   expired one; release deletes by name and owner; renewal (every ttl/3) extends by owner.
//!   A crashed holder's lock frees when its lease runs out.
//! * **for_update mode** (`mode=for_update`; PostgreSQL and MariaDB): a row per name (default
//!   table `distlock_rows`) locked by a transaction held open on a dedicated pooled connection
//!   for the life of the guard; the fencing counter is bumped by the statement that takes the
//!   row lock; release commits. A crashed holder's lock frees when the database sees its
//!   connection close. SQLite has no `FOR UPDATE`: asking for it is `InvalidConfig`.
//!
//! # Fencing tokens
//! Row mode: PostgreSQL and MariaDB draw tokens from a sequence `<table>_fence` (MariaDB ≥ 10.3
//! sequences; plain MySQL is not supported in row mode), SQLite from a counter row kept by
//! triggers; a takeover of an expired row always gets `max(new, old + 1)`. for_update: the row's
//! own counter. Tokens strictly increase per name as long as the table and sequence are not
//! dropped or reset.
//!
//! # Waiting and fairness
//! In both modes the waiters of one process for one lock queue in arrival order in the process
//! (shared by every client of the same database and table); only the head of that queue talks
//! to the database, so N local waiters cost one poller (row mode) or one pooled connection
//! (for_update), and a local release wakes the head at once. Across processes, row mode on
//! PostgreSQL wakes heads by `LISTEN/NOTIFY` (one listener connection per client, the release
//! statement notifies); MySQL and SQLite heads back off with jitter, 2 ms → 100 ms; every head
//! also wakes at the holder's expiry. Row mode is FIFO within a process, not across processes.
//! for_update heads wait in the database's lock queue (FIFO on PostgreSQL).
//!
//! # Cancel safety
//! A dropped row-mode acquire deletes any row it may have inserted (twice, to catch an insert
//! still in flight on another pooled connection); a dropped for_update acquire rolls back its
//! transaction before the connection is reused.
//!
//! # Pooling
//! One sqlx pool per client (`max_connections`, default 16 in row mode, 100 in for_update mode);
//! a for_update guard holds one pooled connection while held, and the waiters of one process
//! for one name hold one between them (the head's). Lock names, tokens and durations are
//! always bound parameters; the table name is the only text in SQL and is validated as an
//! identifier.

mod backend;
pub mod config;
mod error;
mod for_update;
mod notify;
mod row;
mod statements;

pub use backend::{connect, SqlLock};
pub use config::{Dialect, Mode, SqlConfig};

/// URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["postgres", "postgresql", "mysql", "mariadb", "sqlite"];

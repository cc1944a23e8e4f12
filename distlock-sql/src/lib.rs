//! distlock's SQL backend: PostgreSQL, MySQL/MariaDB and SQLite, in three modes.
//!
//! * **Row mode** (`mode=row`, the default; every dialect): a lock table (default
//!   `distlock_locks`, created if missing) with one row per held lock: `name` (primary key,
//!   byte-exact), `owner` (a 128-bit random token), `fence`, `expires_at` (epoch ms by the
//!   DATABASE clock). Acquire is one statement that inserts the row or atomically takes over an
//!   expired one; release deletes by name and owner; renewal (every ttl/3) extends by owner.
//!   A crashed holder's lock frees when its lease runs out.
//! * **for_update mode** (`mode=for_update`; PostgreSQL and MySQL/MariaDB): a row per name
//!   (default table `distlock_rows`, the row created on first use) locked by a transaction held
//!   open on a dedicated pooled connection for the life of the guard; the fencing token is drawn
//!   after the row lock is granted; release commits. A crashed holder's lock frees when the
//!   database sees its connection close, or after 2 × ttl of silence (the transaction's idle
//!   bound). SQLite has no `FOR UPDATE`: asking for it is `InvalidConfig`.
//! * **advisory mode** (`mode=advisory`; PostgreSQL ≥ 14 and MySQL/MariaDB): the database's own
//!   advisory lock — PostgreSQL's session-level `pg_advisory_lock` on a 64-bit key,
//!   MySQL/MariaDB's `GET_LOCK` — held by a dedicated pooled connection for the life of the
//!   guard; no lock table (the default name `distlock_advisory` names the token counter and
//!   namespaces the keys). The key is a SHA-256 digest of `<table>:<name>` (PostgreSQL: its
//!   first 8 bytes, so two names could in principle share a key and then exclude each other;
//!   MySQL/MariaDB: all 64 hex digits, which also keeps names differing only in case apart). A
//!   crashed holder's lock frees when the database sees its connection close, or after 2 × ttl
//!   of silence. SQLite has no advisory locks: asking for them is `InvalidConfig`.
//!
//! # Fencing tokens
//! Every token is drawn only once the lock is won, from a counter that survives the lock row's
//! deletion and is never rolled back:
//!
//! | mode | PostgreSQL | MySQL/MariaDB | SQLite |
//! |---|---|---|---|
//! | row | per-name counter `<table>_fences`, bumped in the acquiring statement | per-name counter `<table>_fences`, bumped by a second statement while the row is held | one counter row `<table>_fence` for the table (kept by triggers); a takeover gets `max(counter + 1, old + 1)` |
//! | for_update | sequence `<table>_fence`, `nextval` autocommitted once the row lock is granted | `AUTO_INCREMENT` table `<table>_fences` (`REPLACE`, autocommitted, once the row lock is granted) | – |
//! | advisory | sequence `<table>_fence`, `nextval` autocommitted once the lock is granted | `AUTO_INCREMENT` table `<table>_fences` (`REPLACE`, autocommitted, once the lock is granted) | – |
//!
//! Tokens strictly increase per name as long as these tables and the sequence are not dropped
//! or reset.
//!
//! Where the guarantee ends: every mode commits each token before handing it out (for_update
//! and advisory draw it with a statement of its own that commits before the guard exists), so
//! it survives a database crash when commits are durable. SQLite runs with
//! `synchronous = FULL` for this; distlock's PostgreSQL sessions set `synchronous_commit = on`
//! whatever the server's default (the server still needs `fsync = on` to survive a machine
//! crash rather than a server crash); MySQL/MariaDB need `innodb_flush_log_at_trx_commit = 1`
//! (or `2`, which survives a server crash but not a machine crash) — a server-wide setting
//! distlock cannot change for its own sessions. A database restored from a backup can always
//! hand a token out again.
//!
//! # Waiting and fairness
//! In both modes the waiters of one process for one lock queue in arrival order in the process
//! (shared by every client of the same database and table); only the head of that queue talks
//! to the database, so N local waiters cost one poller (row mode) or one pooled connection
//! (for_update), and a local release wakes the head at once. Across processes, row mode's heads
//! queue in the database (`<table>_waitq`: the acquire statement takes the lock only when no
//! live waiter is queued ahead; a place lapses 3 s after its process stops refreshing it), so
//! row mode is FIFO within a process and across processes. PostgreSQL wakes heads by
//! `LISTEN/NOTIFY` (one listener connection per process, database and table, shared by its
//! clients on one runtime; the release statement notifies the head's listener alone); on MySQL
//! a head waits on the *bell* of the place ahead of it (a `GET_LOCK` user lock, see
//! `bells.rs`), and where there is no bell to wait on, and on SQLite, the queue's head looks
//! about every millisecond and the others less often by their place, up to 100 ms; every head
//! also wakes at the holder's expiry.
//! for_update and advisory heads wait in the database's lock queue (FIFO on PostgreSQL; MySQL's
//! `GET_LOCK` queue is not documented as FIFO, so no claim there), bounded by
//! `lock_timeout` (PostgreSQL, ms) or `innodb_lock_wait_timeout` (MySQL for_update, whole seconds
//! rounded up) / `GET_LOCK`'s timeout (MySQL advisory, fractional seconds), one hour at most per
//! statement on MySQL and repeated for longer or endless waits. A zero wait tries once, on a
//! name never used before too.
//!
//! # Cancel safety
//! A row-mode acquisition attempt runs to completion in its own task; if the acquire was
//! dropped meanwhile, the attempt deletes the row it won. Once the attempt has answered, a
//! dropped acquire deletes the row until the guard owns it (including while the guard's start
//! renews a late reply). A dropped for_update acquire rolls back its transaction before the
//! connection is reused. A dropped advisory acquire closes its connection (the database frees
//! whatever it was granted) instead of returning it to the pool.
//!
//! # Pooling
//! One sqlx pool of lock connections per client (`max_connections`, default 16 in row mode,
//! 100 in for_update and advisory modes); a for_update or advisory guard holds one pooled
//! connection while held, and the waiters of one process for one name hold one between them
//! (the head's). An acquisition holding a connection never waits for another of the same pool:
//! for_update's token draws, the holder records of both modes and PostgreSQL's advisory key
//! registrations run on a side pool (`max_connections` kept within 2..=16), for_update's gate
//! rows on a gates pool of up to `max_connections` (both opened on first use; see
//! `client.rs`). Lock names, tokens and durations are
//! always bound parameters; the table name is the only text in SQL and is validated as an
//! identifier.
//!
//! # Semaphores and read-write locks
//! Row mode (every dialect) also offers [`distlock_core::DistributedSemaphore`] and
//! [`distlock_core::DistributedRwLock`] ([`connect_semaphore`], [`connect_rwlock`]): a gate row
//! per name serializes admissions, holders are leased rows, waiters queue in the database in
//! arrival order (FIFO across processes; a waiting writer holds back later readers). Tokens
//! come from the gate's counter, committed with the grant. for_update mode offers both over
//! row locks behind a gate row (`for_update/semaphore.rs`, `for_update/rw.rs`). advisory mode
//! offers both on PostgreSQL and MySQL/MariaDB: the semaphore as a gate and slot advisory
//! locks per name (`advisory/semaphore.rs`); the read-write lock as PostgreSQL's shared and
//! exclusive advisory locks, and on MySQL/MariaDB, whose `GET_LOCK` has no shared mode, as a
//! gate, reader slot locks and a writer mark (`advisory/gated_rw.rs`).
//!
//! # Listing and breaking locks (operators)
//! [`DistributedLock::list`](distlock_core::DistributedLock::list) and
//! [`break_lock`](distlock_core::DistributedLock::break_lock) (`distlock ls`, `distlock break`):
//! row mode lists the rows whose lease has not run out and breaks a lock by deleting its row
//! and bumping its counter at once (the broken holder's next renewal finds no row of its own
//! and reports the guard lost; the next holder's token is higher). for_update and advisory
//! locks are held by a database session, which only ending the session would free: never
//! broken. PostgreSQL lists them from `pg_locks` (token and identity where the holder recorded
//! an identity); MySQL/MariaDB cannot show them (`operator.rs`).
//!
//! # Servers tested
//! PostgreSQL 15 (row, for_update, advisory), MariaDB 10.11 (row, for_update, advisory) and the SQLite bundled by
//! sqlx (row) run the whole test suite. MySQL 8: every MySQL/MariaDB statement is SQL that
//! MySQL 8 documents (no sequences, `SET STATEMENT` or `RETURNING`; a unit test checks the
//! statement texts), but no MySQL server has run the tests.
//!
//! # Where things are
//! | file | what it holds |
//! |---|---|
//! | `lock.rs` | [`SqlLock`], the public client, and [`connect`]: picks the mode's lock type once |
//! | `client.rs` | what every mode shares: the pool and its session settings, the label, the lock tables' creation, the waiter-queue key |
//! | `row/mod.rs` | row mode: its acquire loop, `inspect`, joining and leaving the queue; `row/lease.rs` the row of one name and the guard's lease (take, renew, release of the row, and a PostgreSQL release's grant); `row/place.rs` an acquisition's place in the queue and its standing as its process's next in line |
//! | `for_update/mod.rs` | for_update mode: its acquire loop, `inspect`, and the guard's lease (the open transaction) |
//! | `for_update/semaphore.rs`, `for_update/rw.rs` | for_update mode's semaphore (slot rows taken `SKIP LOCKED`; `statements/slots.rs`) and read-write lock (`FOR SHARE` / `FOR UPDATE`), each behind a gate row |
//! | `advisory/mod.rs` | advisory mode: the key of a name, its acquire loop, `inspect`; `advisory/session.rs` the connection a lock is held on, `advisory/lease.rs` the guard's lease (ping and release on that session) |
//! | `advisory/semaphore.rs` | advisory mode's semaphore: a gate and slot advisory locks per name under internal names no lock name can take, the count in `<table>_semcounts` (`statements/counts.rs`) |
//! | `held.rs` | for_update and advisory: a lock held by one connection, its loss and its liveness ping |
//! | `operator.rs` | what `list` and `break_lock` can do per mode and dialect (`distlock ls`, `distlock break`); `statements/operator.rs` their SQL |
//! | `holders.rs` | row mode: holder identities (`<table>_holders`), read by `inspect` and `leader()` |
//! | `sessions.rs` | for_update and advisory: holder identities by holding session (`<table>_sessions`), checked against the database's own view of who holds |
//! | `for_update/bounds.rs` | for_update and advisory: the database's idle and lock-wait bounds on the lock session, rounded never to end early |
//! | `notify.rs` | row mode on PostgreSQL: the shared `LISTEN` connection that wakes waiters on release |
//! | `permits/` | row mode's semaphore and read-write lock ([`connect_semaphore`], [`connect_rwlock`]): `admit.rs` the admission transaction and its one rule, `acquire.rs` the waiting loop, `lease.rs` a holder's renewal and release, `wake.rs` local wake-ups, `impls.rs` the trait impls; `statements/permits.rs` their SQL |
//! | `statements/` | every SQL statement: `postgres.rs`, `mysql.rs`, `sqlite.rs` hold each dialect's texts, `sets.rs` what each statement must do and the invariant it keeps, `mod.rs` the choice of dialect |
//! | `config.rs` | [`SqlConfig`]: what a URL selects (dialect, mode, table, pool) |
//! | `error.rs` | the one place sqlx errors become [`LockError`](distlock_core::LockError)s |

mod advisory;
mod begin;
mod bells;
mod client;
pub mod config;
mod error;
pub mod fence;
mod for_update;
mod held;
mod holders;
pub mod liveness;
mod lock;
mod notify;
mod operator;
mod permits;
mod recently_queued;
mod row;
mod sessions;
#[cfg(feature = "sqlite")]
mod sqlite_busy;
mod statements;
mod token;

pub use config::{Dialect, Mode, SqlConfig};
pub use lock::{connect, SqlLock};
pub use permits::{connect_rwlock, connect_semaphore};

//! The counting semaphore and the read-write lock in row mode, on every dialect
//! ([`distlock_core::DistributedSemaphore`] and [`distlock_core::DistributedRwLock`] for
//! [`SqlLock`](crate::SqlLock) with `mode=row`).
//!
//! # Design
//! Three tables beside the lock table (see `statements/permits.rs`): a gate row per name and
//! family holding the fencing counter, the semaphore count in use and the arrival counter; a
//! holder row per grant with its lease end by the database clock; a waiter row per queued
//! caller, lapsing unless refreshed. Every admission is one short transaction that locks the
//! gate row first (`FOR UPDATE`; SQLite serializes writers), drops lapsed holders and
//! waiters, applies the one admission rule (`admit.rs`, the same as the Redis scripts' and
//! distlock-core's reference) and writes the grant or the waiter's place — so two decisions on one
//! name never interleave, and a grant's token (the gate counter, committed with the grant) is
//! greater than every earlier grant's on that name.
//!
//! # Waiting and fairness
//! Waiters are queued in the database in arrival order, across processes: a permit goes to the
//! queue's head only, a reader waits behind any writer queued before it, a writer behind
//! everyone queued before it. Waiters poll with backoff (2 → 100 ms, plus the earliest lease
//! end), and a release or departure in the same process wakes its waiters at once.
//!
//! # for_update and advisory modes
//! Those modes hold a lock by an open transaction or session, and so do their semaphores and
//! read-write locks: `for_update/semaphore.rs`, `for_update/rw.rs`, `advisory/semaphore.rs`,
//! and PostgreSQL's advisory read-write lock in `advisory/mod.rs` (`impls.rs` dispatches to
//! them). The one primitive not offered, MySQL/MariaDB advisory's read-write lock (`GET_LOCK`
//! has no shared mode), answers [`distlock_core::LockError::Unsupported`] naming `mode=row`, never
//! a leased stand-in.

mod acquire;
mod admit;
mod impls;
mod lease;
mod wake;

pub use impls::{connect_rwlock, connect_semaphore};

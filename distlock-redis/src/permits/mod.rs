//! The counting semaphore and the read-write lock on a single Redis instance
//! ([`distlock_core::DistributedSemaphore`] and [`distlock_core::DistributedRwLock`] for
//! [`RedisLock`](crate::RedisLock)).
//!
//! # Layout
//! One name's holders are a sorted set of members scored by their lease end (server ms), its
//! waiters a FIFO queue scored by arrival (server µs) beside a waiter-expiry set, a
//! semaphore's count a string kept while anyone holds or waits, and one fencing counter per
//! name (see [`keys`] for the key names; semaphores and read-write locks are separate
//! namespaces, apart from the mutex's too). A member is a kind letter (`P` permit, `R` reader,
//! `W` writer) and the acquisition's random token.
//!
//! # Admission (one rule, in `lua/permit_prelude.lua`)
//! * permit: nobody queued ahead of it, and fewer than `max_count` live holders;
//! * reader: no writer holds and no writer is queued ahead of it, so a waiting writer holds
//!   back every reader that arrives after it (writers are not starved);
//! * writer: nobody holds and nobody is queued ahead of it.
//!
//! Every script runs atomically on the server, checks the rule and writes in one step; a
//! holder whose lease ended no longer counts (scripts drop it before deciding). Each grant
//! and each release or departure wakes the queue's head over pub/sub if it may hold now, so
//! free permits and readers behind a departed writer are handed out one after another without
//! polling; waiters also re-check every second and when the earliest lease ends.
//!
//! # Fencing
//! `max(counter + 1, server TIME in µs)` from the name's one counter, for every kind: a grant's
//! token is greater than every earlier grant's on that name, so a writer's is greater than
//! every earlier reader's.
//!
//! # Not on Redlock
//! Only a single instance (`redis://`) offers these two. A Redlock quorum of permit sets has
//! no argument for safety we could test (masters can disagree on who the N holders are, and a
//! quorum per member does not bound the total), so `redlock://` answers
//! [`distlock_core::LockError::InvalidConfig`] instead of a weaker version.

mod acquire;
mod calls;
mod impls;
mod keys;
mod lease;

pub use impls::{connect_rwlock, connect_semaphore};

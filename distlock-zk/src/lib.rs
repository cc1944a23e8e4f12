//! distlock's ZooKeeper backend: Apache Curator's `InterProcessMutex` recipe, and its
//! `InterProcessSemaphoreV2`, `InterProcessReadWriteLock` and `LeaderLatch` layouts.
//!
//! # The recipe
//! The lock for `name` is the directory `/distlock/<name>` (a name starting with `/` is the
//! absolute path; see `path` for the rules). Each contender creates an `EPHEMERAL_SEQUENTIAL`
//! child named exactly as Curator names them, `_c_<uuid>-lock-<10-digit sequence>`, and
//! children are ordered by sequence as Curator orders them, so a Java service using Curator on
//! the same path and a Rust service using distlock exclude each other. The lowest sequence holds
//! the lock; every other contender watches ONLY its predecessor, so a release wakes exactly one
//! waiter (no herd), and waiters are served in arrival order (FIFO). Parent directories are
//! created on demand as CONTAINER nodes, which the server reclaims once empty.
//!
//! # Why not zookeeper-client's own `Client::lock`
//! zookeeper-client ships a Curator-compatible recipe, but it hands back neither the contender
//! node's `czxid` (our fencing token) nor a lost signal wired to session expiry and node
//! deletion, and it lists children only after the create returns. This crate builds on the
//! client's primitives instead: the create and the first children listing are issued back to
//! back on the ordered session (a free lock costs one round trip of latency; release is one
//! delete).
//!
//! # Fencing tokens
//! The `czxid` of the contender's own node: zxids grow monotonically across the ensemble, so
//! every later holder's token is strictly greater.
//!
//! # Failures
//! * Connection loss during create: the create may have happened, so the directory is listed
//!   again behind a `sync` (a lagging server cannot hide our node) and every child with this
//!   acquisition's unique `_c_<uuid>-` prefix is ours: the lowest is our contender, the others
//!   are deleted. A client never waits on its own node, and leaves none behind (see
//!   `contender`).
//! * A cancelled or timed-out acquire deletes its node.
//! * Session expiry makes every guard of that session lost at once; the next acquisition opens
//!   a new session.
//! * While disconnected, a guard stays held (the session may survive a server failover) and
//!   `lost()` does not fire; if the disconnection lasts a quarter of the session timeout, the
//!   guard is reported lost, before the ensemble can have expired the session, and the session
//!   is retired and closed on the ensemble as soon as it can be reached (see `session`).
//! * The lock node deleted by someone else fires `lost()` at once (a watch on our own node).
//! * A guard reported lost deletes its node (it is ours by its unique name) and a release of a
//!   lost guard answers `NotHeld`: nothing keeps the name locked past the loss.
//! * A holder connected to a follower that is cut from its leader stays connected while the
//!   leader expires its session. With `renew` on (the default) a guard is therefore valid only
//!   for a third of the session timeout after its last round trip through the leader (the
//!   create, a `sync` before a waiter's re-list, a `sync` + `exists` every
//!   `min(ttl, session_timeout/2)/3`), and reports `lost()` when that runs out — before the
//!   leader can expire the session (the bound and its assumption are in `validity.rs`).
//!
//! `ttl` in [`distlock_core::AcquireOptions`] does not set a lease: the session timeout bounds how
//! long a crashed holder keeps the lock; `ttl` (capped at half the session timeout) only paces
//! the checks through the leader.
//!
//! # What a guard rides out
//! A store stall (no reply: an fsync stall behind the ensemble's writes, a GC pause, a leader
//! election) shorter than [`ZkConfig::stall_tolerance`] — a bit less than a third of the
//! session timeout minus one renewal interval, e.g. 0.4 s with `session_timeout=2s` whatever
//! the `ttl`, 2 s with the defaults — leaves a guard held; a longer one reports it lost. Pick the session timeout
//! from the stalls the ensemble's disks show, not from the `ttl`.
//!
//! # Listing and breaking locks (operators)
//! `list` walks the directories under the base path (bounded in directories and time; a walk
//! cut short is marked truncated) and names each one with contenders, its first contender's
//! `czxid`, identity and the waiters behind it. `break_lock` deletes the holder's node: the
//! broken guard's watch on its own node reports it lost at once, and the next holder's node,
//! created later, has a higher `czxid` (`operator.rs`).
//!
//! # Logs
//! `tracing` events (sessions by id, nodes by path, never credentials): `warn` when a session
//! expires or authentication fails (every guard of it is lost), when a session is retired
//! after a quarter of its timeout disconnected, and when a held lock's node is deleted by
//! someone else; `debug` for sessions opened, disconnects and reconnects, a closed or replaced
//! session, a create that lost its connection (and the `sync` + listing that looks for its
//! node), leftover nodes of ours being deleted, a renewal or release that finds the node gone,
//! and a lost guard's node being deleted.
//!
//! # Layout
//! * `backend.rs`: [`ZkLock`] — connect, the acquisition loop (contender, predecessor watch,
//!   re-list behind a `sync`) and the one `LockBackend` impl.
//! * `semaphore.rs`: the semaphore as Curator's `InterProcessSemaphoreV2` (an internal mutex
//!   in `locks`, one lease node per permit in `leases`, the count checked from lease data).
//! * `rwlock.rs`: the read-write lock as Curator's `InterProcessReadWriteLock` (`__READ__`
//!   and `__WRIT__` nodes in one queue).
//! * `election.rs`: leader election as Curator's `LeaderLatch` (`latch-` nodes, identity as
//!   node data), and reading a directory's first node for `inspect` and `leader`.
//! * `contender.rs`: this acquisition's node, and the nodes a create whose reply was lost may
//!   have left.
//! * `read.rs`: reads behind a write of their own, so `inspect` and `leader()` see the
//!   ensemble's state as of the call, not a lagging member's.
//! * `session.rs`: one session, its state watcher and the guards it loses when it dies.
//! * `lease.rs`: the store side of a guard (renew through the leader, release).
//! * `operator.rs`: `list` and `break_lock` (`distlock ls`, `distlock break`).
//! * `validity.rs`: how long a check through the leader vouches for a guard, and why.
//! * `path.rs`: names to paths, Curator's contender naming and order; `config.rs`:
//!   [`ZkConfig`] from a URL; `error.rs`: zookeeper-client errors to [`distlock_core::LockError`].

mod backend;
pub mod config;
mod contender;
mod dial;
mod election;
mod error;
pub mod fence;
mod lease;
mod operator;
mod own_watch;
pub mod path;
mod read;
mod rwlock;
pub mod semaphore;
mod session;
mod validity;

#[doc(hidden)]
pub use backend::BeforeCreate;
pub use backend::{connect, connect_rwlock, connect_semaphore, ZkLock};
pub use config::ZkConfig;

//! distlock's ZooKeeper backend: Apache Curator's `InterProcessMutex` recipe.
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
//! * Connection loss during create: our node is found again by its unique `_c_<uuid>-` prefix,
//!   never left as an orphan.
//! * A cancelled or timed-out acquire deletes its node.
//! * Session expiry makes every guard of that session lost at once; the next acquisition opens
//!   a new session.
//! * While disconnected, a guard stays held (the session may survive a server failover) and
//!   `lost()` does not fire; if the disconnection lasts a quarter of the session timeout, the
//!   guard is reported lost, before the ensemble can have expired the session (see `session`).
//! * The lock node deleted by someone else fires `lost()` at once (a watch on our own node).
//! * A holder connected to a follower that is cut from its leader stays connected while the
//!   leader expires its session. With `renew` on (the default) a guard is therefore valid only
//!   for a third of the session timeout after its last round trip through the leader (the
//!   create, a `sync` before a waiter's re-list, a `sync` + `exists` every
//!   `min(ttl, session_timeout/2)/3`), and reports `lost()` when that runs out — before the
//!   leader can expire the session (the bound and its assumption are on `leader_validity`).
//!
//! `ttl` in [`lock_core::AcquireOptions`] does not set a lease: the session timeout bounds how
//! long a crashed holder keeps the lock; `ttl` (capped at half the session timeout) only paces
//! the checks through the leader.

mod backend;
pub mod config;
mod error;
mod lease;
pub mod path;
mod session;

pub use backend::{connect, ZkLock};
pub use config::ZkConfig;

/// URL schemes this backend serves.
pub const SCHEMES: &[&str] = &["zk", "zookeeper"];

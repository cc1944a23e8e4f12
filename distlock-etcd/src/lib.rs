//! distlock's etcd backend: etcd's own v3 lock recipe (`concurrency.Mutex`), so a Rust
//! process using distlock and `etcdctl lock` (or a Go service using `concurrency.Mutex`)
//! exclude each other on the same name.
//!
//! # The recipe
//! Each acquisition has a lease of its own (the `ttl`, in whole seconds, at least 1 s): one
//! that an earlier released lock of this client left without a key, kept alive within the
//! last tenth of its TTL (see `lease_pool`: granting
//! and revoking a lease are raft writes, so an uncontended acquire + release is two writes, not
//! four), or else a fresh grant. In one transaction it creates the key
//! `<prefix>/<name>/<lease id in hex>` under that lease unless it exists,
//! reading the range's first key by create revision in the same round trip (see
//! `contender`). The key with the lowest create revision holds the lock. Every other
//! contender watches only the key created just before its own for deletion (see `queue`), so
//! a release wakes exactly one waiter (no herd) and waiters are served in arrival order.
//! Key layout and name escaping (a name with `/` or `%` is escaped so that no two names
//! share keys; other names are used verbatim, as `etcdctl lock NAME` uses them) are in
//! [`key`].
//!
//! # Holder identities
//! An acquisition with a holder identity ([`distlock_core::AcquireOptions::holder`], leader
//! election) puts it as its key's value, as `concurrency.Election` keeps its proposal;
//! `inspect` and `leader()` read it from the holder's own key, so they never name an earlier
//! holder. (`etcdctl lock` leaves the value empty: such a holder has no identity.)
//!
//! # Fencing tokens
//! The create revision of the holder's key. etcd's revision grows with every write to the
//! cluster, and a later holder's key was created after every earlier holder's key (the holder
//! is the oldest key left), so every later holder's token is strictly greater. The guarantee
//! holds for one cluster: a cluster restored from an older snapshot starts from an older
//! revision.
//!
//! # Leases, renewal and loss
//! The guard keeps the lease alive (one keep-alive every third of the granted TTL) and counts
//! it valid for the granted TTL from when each keep-alive was sent: the server can only expire
//! it later than that. `lost()` fires when a keep-alive says the lease is gone, when the
//! cluster stays unreachable until the lease runs out, and at once when the key is deleted
//! (a watch on it: someone deleted it, or the lease was revoked or expired). etcd sets a
//! lease's TTL when it is granted: `extend` renews it but cannot change its length, so the
//! lease a guard reports ([`distlock_core::LockGuard::remaining_validity`]) is the granted one.
//! The server grants at least its minimum TTL (1.5 election timeouts, rounded up to whole
//! seconds: 2 s with etcd's defaults), which then bounds how long a crashed holder keeps
//! the lock.
//!
//! # Failures
//! * A cancelled, timed-out or failed acquisition revokes its lease, which deletes its key:
//!   nothing is left behind (if the cluster cannot be reached, the lease runs out).
//! * A waiter keeps its lease alive while it waits and rides out store errors for as long as
//!   its lease may still live. Handed the lock with its lease kept alive within half its TTL,
//!   it holds at once (the lease, and its key with it, stands for the TTL from that
//!   keep-alive, where the guard's validity counts from); a key deleted while it waited is
//!   reported by the guard's `lost()`. Otherwise it renews the lease and confirms that its key
//!   survived first, as `Mutex.Lock` does.
//! * Release deletes the key only if it is still ours (same create revision) and keeps the
//!   lease, now without a key, for the client's next acquisition; a key that is gone answers
//!   `NotHeld` and its lease is revoked. A client's idle leases run out on the server within
//!   their TTL once it stops using them.
//! * The client talks to one member at a time and moves to the next when its member is
//!   unreachable, leaderless or silent past the request timeout (`timeout`; a keep-alive gives
//!   each member a quarter of the lease): etcd-client's balanced channel kept sending a third
//!   of all requests to a killed member (see `members`). A member or the leader killed and
//!   restarted during holds loses no guard and lets no two holders overlap
//!   (`tests/faults.rs`).
//! * Clients require a leader (`require_leader`): a member cut from the cluster refuses
//!   requests instead of answering from stale state, so a partitioned holder's keep-alives fail
//!   and its guard is reported lost when the lease runs out, no later than the server expires it.
//!
//! # Listing and breaking locks (operators)
//! `list` reads the contender keys under the name prefix in key order (bounded in pages; a
//! read cut short is marked truncated), counting only keys shaped as contenders and attached
//! to the lease they name; each name is held by its oldest key (token, identity, lease time
//! to live), the others wait. `break_lock` deletes the holder's key if it is still the one
//! read: the broken guard's watch reports it lost at once, and the next holder's key, younger,
//! has a higher create revision (`operator.rs`).
//!
//! # Layout
//! * `backend.rs`: [`EtcdLock`] — connect, the acquisition and the one `LockBackend` impl.
//! * `contender.rs`: one acquisition's lease and key, the enqueue transaction.
//! * `lease_pool.rs`: leases that released locks left without a key, for the next ones.
//! * `permits.rs`: the semaphore (an admission mutex and permit keys, as Curator's
//!   `InterProcessSemaphoreV2`) and the read-write lock (etcd's `recipes.RWMutex` rule).
//! * `queue.rs`: waiting for our turn (a predecessor's deletion, or a count).
//! * `watch.rs`: the held key's deletion watcher behind `lost()`.
//! * `lease.rs`: the store side of a guard (keep-alive, release).
//! * `operator.rs`: `list` and `break_lock` (`distlock ls`, `distlock break`).
//! * `members.rs`: one connection per member, failover between them.
//! * [`key`]: names to keys; `config.rs`: [`EtcdConfig`] from a URL; `error.rs`: etcd-client
//!   errors to [`distlock_core::LockError`].
//!
//! # Building
//! etcd-client generates its gRPC code at build time and needs `protoc` (Debian
//! `protobuf-compiler`); the facade therefore compiles this crate only with its `etcd`
//! feature, which is not a default one.

mod backend;
pub mod config;
mod contender;
mod error;
pub mod fence;
pub mod key;
mod lease;
mod lease_pool;
mod members;
mod operator;
mod permits;
mod queue;
mod watch;
mod watches;

pub use backend::{connect, EtcdLock};
pub use config::EtcdConfig;
pub use permits::{connect_rwlock, connect_semaphore};

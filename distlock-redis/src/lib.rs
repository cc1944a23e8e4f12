//! distlock's Redis backend: one server, or a Redlock quorum over independent masters.
//!
//! # Single instance (`redis://host:port/db?prefix=…`)
//! Acquire is ONE round trip: a Lua script sets `prefix + name` to a 128-bit random token with
//! the lease as expiry (only if the key does not exist, as `SET NX PX` would) and draws the
//! fencing token in the same script. Release and extend are token-checked scripts (`EVALSHA`;
//! a server that lacks one runs it by `EVAL` of its source); release also `PUBLISH`es the next waiter's token. The
//! default prefix is empty, so a redis-py `Lock(name)` and distlock exclude each other on the
//! same key. distlock's own keys beside it (`{key}\0fence`, `{key}\0queue`, `{key}\0qexp`)
//! contain a NUL byte, which no name or prefix may, so no lock's key is ever another lock's
//! counter or queue (see `keys` for the layout and the argument). Data of a type or shape
//! distlock does not write, at any of these keys, is reported as an error naming the key and
//! never touched.
//!
//! # Fencing tokens
//! `max(counter + 1, server TIME in µs)`, kept in `{key}\0fence`: strictly increasing per name,
//! and still increasing after a restart without persistence wiped the counter (as long as the
//! server clock does not go backwards past the last token).
//!
//! # Waiting and fairness
//! Waiters do not poll. The clients of a process share ONE pub/sub connection per node (and
//! runtime); a release wakes the waiter at the head of a FIFO queue kept in Redis beside the
//! lock (`{key}\0queue`), and only the head may take a free lock while live waiters are queued —
//! so a releasing client cannot barge ahead of waiters (try_acquire also yields to queued
//! waiters). Waiters refresh their place every second (a departed waiter's place lapses after
//! 3 s; a cancelled or timed-out waiter leaves at once) and otherwise sleep until the holder's
//! lease runs out.
//!
//! # Redlock (`redlock://h1:p1,h2:p2,h3:p3`)
//! N independent masters (N odd, ≥ 3), requests to all nodes concurrently, quorum N/2+1,
//! validity = ttl − elapsed − drift (drift = ttl·1% + 2 ms); per-master reply bound a quarter of
//! the lease (capped by `timeout`); a failed round is undone on every node; release goes to every
//! node; renewal needs a quorum within the validity or the guard is lost.
//!
//! Fencing (`redlock/fence.rs`): each granting master draws `max(counter + 1, floor)`, with one
//! client-clock floor per round, and each master that does not grant reports its counter; the
//! token `t` is above all of them. The lock counts as held once a quorum stores a counter ≥ `t`:
//! at once when a quorum granted `t` itself (their counters agreed), otherwise after `t` is
//! written back (`SET counter max(counter, t)`) to enough masters. A later holder's token is
//! strictly greater as long as a master where the two rounds overlap kept its counter; the
//! client clock only keeps tokens rising beyond that (see `redlock/fence.rs` for the exact terms).
//!
//! Waiting: Redlock waiters queue too. Every master orders its queue by the waiter's own arrival
//! time (the same score everywhere), so the same waiter heads every queue and wins a quorum; a
//! split round (some masters granted, others had not yet seen the release) is retried within
//! ~2 ms, and a waiter keeps its place until it holds the lock. Clock skew between clients bends
//! the order, never safety. A holder's release hands the lock to the head of each master's
//! queue, with a token drawn above one floor from the releasing client's clock; the head holds
//! once a quorum of those grants reached it (each drawn after its last round, so each lasts
//! the waiter ttl, 3 s, from that round's start), with no round of its own. Fewer grants than
//! a quorum are only its place: its next round counts them (`tests/redlock_grant.rs`).
//!
//! # Assumptions
//! Redlock assumes bounded clock drift between the masters and the client (1% of the lease),
//! and that a master which restarts without persistence stays down for at least one lease
//! (ttl) before rejoining, so it cannot help a second client reach a quorum while the first
//! holder's validity lasts. A single instance restarted without persistence forgets its locks:
//! two holders can overlap then, and only fencing tokens (which stay monotonic) protect the
//! resource.
//!
//! Every server must not evict keys: `connect` reads `maxmemory-policy` from each one (each
//! Redlock master; one that was down then, before its first lock) and refuses any policy but
//! `noeviction` with `InvalidConfig`, unless the URL says `eviction=warn` (see `config` and
//! `eviction.rs`). A server that will not tell (CONFIG disabled or not permitted) is used with
//! a warning.
//!
//! # Holder identities (leader election)
//! An acquisition's holder identity is kept in the lock key's value after the owner token
//! (`<token>\n<identity>`, see `holder`), so `inspect` and `leader` report it with no key of
//! its own and every token check unchanged.
//!
//! # Listing and breaking locks (operators)
//! `list` scans each server's string keys under the prefix (bounded in steps, time and names;
//! a listing cut short is marked truncated) and lists a name only when a quorum names its
//! holder and distlock's fencing counter sits beside its key. `break_lock` runs one script per
//! server that deletes the lock key whoever holds it and raises the counter past the holder's
//! token; Redlock reports it broken once a quorum took it. The broken holder's next renewal is
//! refused and its guard lost (`operator.rs`).
//!
//! # Logs
//! `tracing` events, never with a password or URL (servers appear as `host:port`): `warn` for
//! a Redlock round or a connect that too few masters answered, an unusable or unchecked
//! eviction policy, and a failed pub/sub connection; `debug` for each master that failed a
//! round, a round that won some masters but no quorum, the pub/sub connection closing and
//! reconnecting, a refused renewal and a release that found the lock no longer ours.
//!
//! # Layout
//! * `backend.rs`: [`RedisLock`] — connect, and the one `LockBackend` impl, which picks the
//!   topology's rounds once per acquisition.
//! * `acquire.rs`: the acquisition loop both topologies share (queue, pub/sub wake-ups,
//!   heartbeats, retries, the guard), written over the `Rounds` a topology supplies.
//! * `single.rs`: the single-instance round (one script call on one server).
//! * `redlock.rs`: the Redlock round — concurrent requests, quorum, validity
//!   (`ttl − elapsed − drift`), undo; `redlock/fence.rs`: its fencing token and write-back.
//! * `lease.rs`: renewal and release of a held lock (one node, or a quorum).
//! * `operator.rs`: `list` and `break_lock` (`distlock ls`, `distlock break`); `lua/break.lua`.
//! * `node.rs`: one server and the script calls made on it; `scripts.rs` and `lua/`: the
//!   scripts; `keys.rs`: how names become keys; `subscriber.rs`: the pub/sub connection.
//! * `permits/`: the semaphore and read-write lock on a single instance ([`connect_semaphore`],
//!   [`connect_rwlock`]): key layout, script calls, the waiting loop, the lease; their scripts
//!   are `lua/permit_*.lua`.
//! * `config.rs`: [`RedisConfig`] from a URL; `eviction.rs`: the `maxmemory-policy` check;
//!   `error.rs`: redis errors to [`distlock_core::LockError`].

mod acquire;
mod backend;
mod clock;
mod cluster;
pub mod config;
mod conn;
mod error;
mod eviction;
pub mod fence;
mod holder;
mod keys;
mod lease;
mod node;
mod operator;
mod permits;
mod quorum;
pub use permits::{connect_rwlock, connect_semaphore};
mod redlock;
mod replicas;
mod scripts;
mod sentinel;
mod single;
mod subscriber;

pub use backend::{connect, RedisLock};
pub use config::{EvictionCheck, RedisConfig, Topology};

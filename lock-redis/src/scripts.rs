//! The Lua scripts, loaded once per connection and run by `EVALSHA` (redis-rs falls back to
//! `EVAL`+`SCRIPT LOAD` on `NOSCRIPT`). Each `.lua` file states the invariant it keeps.

use std::sync::LazyLock;

use redis::Script;

/// Take the lock (fair queue, fencing token) in one round trip.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/acquire.lua")));
/// Release our own lock and wake the next waiter.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/release.lua")));
/// Extend our own lease.
pub(crate) static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/extend.lua")));
/// Leave the waiter queue.
pub(crate) static LEAVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/leave.lua")));
/// Redlock: raise a node's fencing counter to the agreed token.
pub(crate) static FENCE_WRITEBACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/fence_writeback.lua")));

//! The Lua scripts, loaded at connect and run by `EVALSHA` (redis-rs falls back to
//! `SCRIPT LOAD` + `EVALSHA` on `NOSCRIPT`, e.g. after `SCRIPT FLUSH` or a restart). Each `.lua`
//! file states the invariant it keeps; `prelude.lua` (the type and shape checks every script
//! makes before it writes) is prepended to each.

use std::sync::LazyLock;

use redis::Script;

/// A script's source with `prelude.lua` in front of it.
macro_rules! with_prelude {
    ($file:literal) => {
        concat!(include_str!("lua/prelude.lua"), include_str!($file))
    };
}

const ACQUIRE_LUA: &str = with_prelude!("lua/acquire.lua");
const RELEASE_LUA: &str = with_prelude!("lua/release.lua");
const EXTEND_LUA: &str = with_prelude!("lua/extend.lua");
const LEAVE_LUA: &str = with_prelude!("lua/leave.lua");
const FENCE_WRITEBACK_LUA: &str = with_prelude!("lua/fence_writeback.lua");
const PEEK_LUA: &str = with_prelude!("lua/peek.lua");

/// Take the lock (fair queue, fencing token) in one round trip.
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
/// Release our own lock and wake the next waiter.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
/// Extend our own lease.
pub(crate) static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(EXTEND_LUA));
/// Leave the waiter queue.
pub(crate) static LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(LEAVE_LUA));
/// Redlock: raise a node's fencing counter to the agreed token.
pub(crate) static FENCE_WRITEBACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(FENCE_WRITEBACK_LUA));
/// Read a lock's state (`inspect`).
pub(crate) static PEEK: LazyLock<Script> = LazyLock::new(|| Script::new(PEEK_LUA));

/// Every script's source, for loading them all in one round trip at connect.
pub(crate) const ALL: [&str; 6] = [
    ACQUIRE_LUA,
    RELEASE_LUA,
    EXTEND_LUA,
    LEAVE_LUA,
    FENCE_WRITEBACK_LUA,
    PEEK_LUA,
];

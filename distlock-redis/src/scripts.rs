//! The Lua scripts, loaded at connect and run by `EVALSHA`; a server without one (after
//! `SCRIPT FLUSH`, a restart, on a promoted replica) runs it by `EVAL` from its source
//! ([`eval_instead`]). Each `.lua`
//! file states the invariant it keeps; `prelude.lua` (the type and shape checks every script
//! makes before it writes) is prepended to each.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{Arg, Cmd, ErrorKind, RedisResult, Script, ServerErrorKind, Value};

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
const BREAK_LUA: &str = with_prelude!("lua/break.lua");

/// A semaphore or read-write lock script's source, with `prelude.lua` and
/// `permit_prelude.lua` in front of it.
macro_rules! with_permit_prelude {
    ($file:literal) => {
        concat!(
            include_str!("lua/prelude.lua"),
            include_str!("lua/permit_prelude.lua"),
            include_str!($file)
        )
    };
}

const PERMIT_ACQUIRE_LUA: &str = with_permit_prelude!("lua/permit_acquire.lua");
const PERMIT_RELEASE_LUA: &str = with_permit_prelude!("lua/permit_release.lua");
const PERMIT_EXTEND_LUA: &str = with_permit_prelude!("lua/permit_extend.lua");
const PERMIT_LEAVE_LUA: &str = with_permit_prelude!("lua/permit_leave.lua");
const PERMIT_PEEK_LUA: &str = with_permit_prelude!("lua/permit_peek.lua");

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
/// An operator's forced release (`distlock break`).
pub(crate) static BREAK: LazyLock<Script> = LazyLock::new(|| Script::new(BREAK_LUA));

/// Semaphore / read-write lock: admit a member, or queue it.
pub(crate) static PERMIT_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_ACQUIRE_LUA));
/// Semaphore / read-write lock: give a member back and wake the next.
pub(crate) static PERMIT_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_RELEASE_LUA));
/// Semaphore / read-write lock: extend a member's lease.
pub(crate) static PERMIT_EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(PERMIT_EXTEND_LUA));
/// Semaphore / read-write lock: a waiter leaves the queue.
pub(crate) static PERMIT_LEAVE: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_LEAVE_LUA));
/// Semaphore / read-write lock: read the state (`inspect`).
pub(crate) static PERMIT_PEEK: LazyLock<Script> = LazyLock::new(|| Script::new(PERMIT_PEEK_LUA));

/// Every script's source, for loading them all in one round trip at connect.
pub(crate) const ALL: [&str; 12] = [
    ACQUIRE_LUA,
    RELEASE_LUA,
    EXTEND_LUA,
    LEAVE_LUA,
    FENCE_WRITEBACK_LUA,
    PEEK_LUA,
    BREAK_LUA,
    PERMIT_ACQUIRE_LUA,
    PERMIT_RELEASE_LUA,
    PERMIT_EXTEND_LUA,
    PERMIT_LEAVE_LUA,
    PERMIT_PEEK_LUA,
];

/// `cmd` as `EVAL` of the source, when it is an `EVALSHA` of one of [`ALL`]: what a server
/// that lacks the script runs instead (`conn.rs`, `replicas.rs`). One call, routed by the
/// script's keys like the `EVALSHA`, where redis-rs's own fallback sends `SCRIPT LOAD` to every
/// node of a cluster — and fails while any one of them is stalled or down.
pub(crate) fn eval_instead(cmd: &Cmd) -> Option<Cmd> {
    static SOURCES: LazyLock<HashMap<String, &'static str>> = LazyLock::new(|| {
        ALL.iter()
            .map(|s| (Script::new(s).get_hash().to_owned(), *s))
            .collect()
    });
    let mut args = cmd.args_iter().map(|a| match a {
        Arg::Simple(a) => Some(a),
        _ => None,
    });
    if !args.next()??.eq_ignore_ascii_case(b"EVALSHA") {
        return None;
    }
    let source = SOURCES.get(std::str::from_utf8(args.next()??).ok()?)?;
    let mut eval = redis::cmd("EVAL");
    eval.arg(*source);
    for a in args {
        eval.arg(a?);
    }
    Some(eval)
}

/// Whether `reply` is a server's `NOSCRIPT` (an error, or an error value: redis-rs returns
/// either, by connection type).
pub(crate) fn is_noscript(reply: &RedisResult<Value>) -> bool {
    match reply {
        Err(e) => e.kind() == ErrorKind::Server(ServerErrorKind::NoScript),
        Ok(Value::ServerError(e)) => e.kind() == Some(ServerErrorKind::NoScript),
        Ok(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_evalsha_of_ours_becomes_an_eval_of_its_source() {
        let hash = ACQUIRE.get_hash();
        let mut sha = redis::cmd("EVALSHA");
        sha.arg(hash).arg(1).arg("k").arg("v");
        let eval = eval_instead(&sha).expect("one of ours");
        let args: Vec<Vec<u8>> = eval
            .args_iter()
            .map(|a| match a {
                Arg::Simple(a) => a.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(args[0], b"EVAL");
        assert_eq!(args[1], ACQUIRE_LUA.as_bytes());
        assert_eq!(&args[2..], [b"1".to_vec(), b"k".to_vec(), b"v".to_vec()]);
        let mut other = redis::cmd("EVALSHA");
        other.arg("0".repeat(40)).arg(0);
        assert!(eval_instead(&other).is_none());
        assert!(eval_instead(&redis::cmd("GET")).is_none());
    }
}

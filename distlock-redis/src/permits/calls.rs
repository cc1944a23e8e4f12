//! The semaphore and read-write lock script calls on one server ([`Node`]).

use std::time::Duration;

use redis::{RedisResult, Value};

use super::keys::PermitKeys;
use crate::node::{flag, int, ms, reply_items, text, Foreign, Node};
use crate::scripts::{PERMIT_ACQUIRE, PERMIT_EXTEND, PERMIT_LEAVE, PERMIT_PEEK, PERMIT_RELEASE};

/// The outcome of one acquire script run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Granted {
    /// Held now, with this fencing token.
    Yes(u64),
    /// Not now; the earliest holder's lease ends in `first_expiry_ms` (negative: no holder).
    No { first_expiry_ms: i64 },
    /// The semaphore is in use with this other count.
    OtherCount(String),
    /// One of the name's keys holds data distlock did not write.
    Foreign(Foreign),
}

/// One admission attempt for `member` (see `lua/permit_acquire.lua`).
pub(crate) async fn acquire(
    node: &Node,
    keys: &PermitKeys,
    member: &str,
    ttl: Duration,
    queue: Option<Duration>,
    max: Option<u32>,
) -> RedisResult<Granted> {
    let (reply, acknowledged) = node
        .invoke_acked(
            PERMIT_ACQUIRE
                .key(&keys.holders)
                .key(&keys.fence)
                .key(&keys.queue)
                .key(&keys.qexp)
                .key(&keys.max)
                .arg(member)
                .arg(ms(ttl))
                .arg(if queue.is_some() { "wait" } else { "try" })
                .arg(queue.map_or(1, ms))
                .arg(max.map(|m| m.to_string()).unwrap_or_default())
                .arg(&keys.channel),
        )
        .await?;
    let items = match reply_items(reply) {
        Ok(items) => items,
        Err(f) => return Ok(Granted::Foreign(f)),
    };
    Ok(match items.first().map(int) {
        Some(1) if !acknowledged => {
            // Granted on the master only (`replicas=`): given back, reported unavailable.
            release(node, keys, member).await?.ok();
            return Err(crate::replicas::unacknowledged());
        }
        Some(1) => Granted::Yes(items.get(1).map(int).unwrap_or(0).max(0) as u64),
        Some(-2) => Granted::OtherCount(text(items.get(1)).unwrap_or_default()),
        _ => Granted::No {
            first_expiry_ms: items.get(1).map(int).unwrap_or(-1),
        },
    })
}

/// A holder's or waiter's script that names only its member: release, extend or leave.
/// `renewal`: the write must reach the replicas `replicas=` asks for (an extension).
async fn own(
    node: &Node,
    script: &redis::Script,
    keys: &PermitKeys,
    member: &str,
    arg: String,
    renewal: bool,
) -> RedisResult<Result<bool, Foreign>> {
    let mut call = script.prepare_invoke();
    call.key(&keys.holders)
        .key(&keys.queue)
        .key(&keys.qexp)
        .key(&keys.max)
        .arg(member)
        .arg(arg);
    if renewal {
        let (reply, acknowledged) = node.invoke_acked(&call).await?;
        if !acknowledged {
            return Err(crate::replicas::unacknowledged());
        }
        return Ok(flag(&reply));
    }
    let mut c = node.conn();
    let reply: Value = call.invoke_async(&mut c).await?;
    Ok(flag(&reply))
}

/// Gives a held member back: `Ok(true)` released, `Ok(false)` it no longer held.
pub(crate) async fn release(
    node: &Node,
    keys: &PermitKeys,
    member: &str,
) -> RedisResult<Result<bool, Foreign>> {
    own(
        node,
        &PERMIT_RELEASE,
        keys,
        member,
        keys.channel.clone(),
        false,
    )
    .await
}

/// Extends a held member's lease: `Ok(true)` extended, `Ok(false)` it no longer held.
pub(crate) async fn extend(
    node: &Node,
    keys: &PermitKeys,
    member: &str,
    ttl: Duration,
) -> RedisResult<Result<bool, Foreign>> {
    own(
        node,
        &PERMIT_EXTEND,
        keys,
        member,
        ms(ttl).to_string(),
        true,
    )
    .await
}

/// Takes a waiter out of the queue.
pub(crate) async fn leave(node: &Node, keys: &PermitKeys, member: &str) -> RedisResult<()> {
    own(
        node,
        &PERMIT_LEAVE,
        keys,
        member,
        keys.channel.clone(),
        false,
    )
    .await
    .map(drop)
}

/// One name's state, for `inspect`.
#[derive(Debug, Clone, Default)]
pub(crate) struct PermitPeek {
    /// Live permits or readers.
    pub shared: usize,
    /// Whether a writer holds.
    pub writer: bool,
    /// Live waiters.
    pub waiting: usize,
    /// A semaphore's count, while anyone holds or waits.
    pub max: Option<u32>,
}

/// Reads one name's state.
pub(crate) async fn peek(
    node: &Node,
    keys: &PermitKeys,
) -> RedisResult<Result<PermitPeek, Foreign>> {
    let mut c = node.conn();
    let reply: Value = PERMIT_PEEK
        .key(&keys.holders)
        .key(&keys.queue)
        .key(&keys.qexp)
        .key(&keys.max)
        .invoke_async(&mut c)
        .await?;
    let items = match reply_items(reply) {
        Ok(items) => items,
        Err(f) => return Ok(Err(f)),
    };
    let count = |i: usize| items.get(i).map(int).unwrap_or(0).max(0) as usize;
    Ok(Ok(PermitPeek {
        shared: count(0),
        writer: count(1) > 0,
        waiting: count(2),
        max: text(items.get(3)).and_then(|m| m.parse().ok()),
    }))
}

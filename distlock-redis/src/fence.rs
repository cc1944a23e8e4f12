//! Fenced writes on the user's own redis-rs connection: [`set`] stores a value only if no write
//! with a higher fencing token has been accepted for that key.
//!
//! The highest accepted token lives in a companion key ([`fence_key`]), and one Lua script
//! compares and writes both, so the check and the write are atomic on the server. The companion
//! key shares the value key's hash slot, so Redis Cluster runs the script on one node.
//!
//! ```no_run
//! # async fn demo(mut conn: redis::aio::MultiplexedConnection, guard: &distlock_core::LockGuard)
//! # -> Result<(), distlock_redis::fence::FenceError<redis::RedisError>> {
//! distlock_redis::fence::set(&mut conn, "report:latest", "v42", guard.fencing_token()).await?;
//! # Ok(()) }
//! ```

pub use distlock_core::fence::{FenceError, Stale};

/// Compares `ARGV[2]` (the token, decimal) with the one in `KEYS[2]` as numbers of any size;
/// writes both keys unless it is lower. Returns `{1, token}` when written, `{0, seen}` when not.
/// Sent whole by `EVAL` (it is short): a server never lacks it, where redis-rs's fallback for
/// `EVALSHA`, `SCRIPT LOAD` to every node of a cluster, fails while any node is down.
const SET: &str = r"
local seen = redis.call('GET', KEYS[2]) or '0'
local token = ARGV[2]
if #token < #seen or (#token == #seen and token < seen) then
  return {0, seen}
end
redis.call('SET', KEYS[2], token)
redis.call('SET', KEYS[1], ARGV[1])
return {1, token}
";

/// The companion key that holds `key`'s highest accepted token: `<key>:fence` when `key` has a
/// hash tag (`{…}`, which then places both), `{<key>}:fence` otherwise (the whole key is the tag).
/// A key whose braces make no tag and hold a `}` (`a{}b`) can share its slot with no other key:
/// on Redis Cluster its fenced write fails with `CROSSSLOT`; a single instance takes any key.
pub fn fence_key(key: &str) -> String {
    let tagged = key
        .find('{')
        .and_then(|open| key[open + 1..].find('}').map(|len| len > 0))
        .unwrap_or(false);
    if tagged {
        format!("{key}:fence")
    } else {
        format!("{{{key}}}:fence")
    }
}

/// `SET key value`, unless a write with a higher token than `token` was accepted for `key`.
pub async fn set<C, V>(
    conn: &mut C,
    key: &str,
    value: V,
    token: u64,
) -> Result<(), FenceError<redis::RedisError>>
where
    C: redis::aio::ConnectionLike,
    V: redis::ToRedisArgs,
{
    let (written, seen): (u8, String) = redis::cmd("EVAL")
        .arg(SET)
        .arg(2)
        .arg(key)
        .arg(fence_key(key))
        .arg(value)
        .arg(token.to_string())
        .query_async(conn)
        .await
        .map_err(FenceError::Store)?;
    if written == 1 {
        return Ok(());
    }
    Err(Stale {
        resource: key.to_owned(),
        token,
        seen: seen.parse().unwrap_or(u64::MAX),
    }
    .into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_key_shares_the_keys_hash_slot() {
        assert_eq!(fence_key("report"), "{report}:fence");
        assert_eq!(fence_key("{user:7}:report"), "{user:7}:report:fence");
        // An empty tag is no tag: Redis hashes the whole key (which no other key can match).
        assert_eq!(fence_key("a{}b"), "{a{}b}:fence");
    }
}
